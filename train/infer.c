/* infer.c - what `embed` and `score` share (train/embed.c, train/score.c):
 * a Trainer set up for forward passes only (the plan's parameters loaded
 * from a checkpoint by name and shape, on the CPU backend, one rank; no
 * data loader, no AdamW state read), the FASTA records' ids, and the
 * records as rows of the plan's [batch, seq] inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../util/util.h"
#include "trainer.h"

int infer_open(Trainer *t, const char *prog, const Plan *pl, const char *ckpt)
{
    memset(t, 0, sizeof *t);
    t->prog = prog;
    t->pl = pl;
    t->g = pl->graph;
    t->tr = pl->graph->train;
    t->world = 1;
    t->ep = 1;
    t->dp = 1;
    t->comm = comm_single();
    t->local_batch = t->tr.batch;
    t->alpha = alphabet_get(t->tr.alphabet == IR_ALPHABET_DNA ? ALPHABET_DNA : ALPHABET_PROTEIN);
    t->obj = t->tr.objective == IR_OBJ_MASKED_LM ? OBJECTIVE_MASKED : OBJECTIVE_CAUSAL;
    if (pl->world != 1 || t->tr.ep > 1) {
        fprintf(stderr, "%s: error: this binary is compiled for %lld ranks (ep %lld); embed and score run one: "
                "compile the model with --ep 1\n", prog, (long long)pl->world, (long long)t->tr.ep);
        return 0;
    }
    const IrGraph *g = t->g;
    t->param_off = calloc((size_t)g->nparams + 1, sizeof *t->param_off);
    for (int p = 0; p < g->nparams; p++) {
        t->param_off[p] = t->nparams_total;
        t->nparams_total += ir_numel(g->params[p]);
    }
    int64_t n = t->tr.batch * t->tr.seq;
    t->params = calloc((size_t)t->nparams_total + 1, sizeof(float));
    t->tokens = calloc((size_t)n, sizeof(int32_t));
    t->targets = calloc((size_t)n, sizeof(int32_t));
    if (!t->param_off || !t->params || !t->tokens || !t->targets) {
        fprintf(stderr, "%s: error: out of memory for %lld parameters\n", prog, (long long)t->nparams_total);
        return 0;
    }
    if (!trainer_load_checkpoint(t, ckpt, 0)) {
        fprintf(stderr, "%s: error: cannot use %s\n", prog, ckpt);
        return 0;
    }
    char err[1024];
    BackendOptions o = {0};
    o.ring = 1;
    t->backend = &backend_cpu;
    t->be = backend_cpu.create(pl, t->comm, &o, err, sizeof err);
    if (!t->be) {
        fprintf(stderr, "%s: error: the cpu backend: %s\n", prog, err);
        return 0;
    }
    if (!t->be->ops->put_state(t->be, t->params, NULL)) {
        fprintf(stderr, "%s: error: %s\n", prog, t->be->ops->error(t->be));
        return 0;
    }
    return 1;
}

void infer_close(Trainer *t)
{
    if (t->be)
        t->be->ops->destroy(t->be);
    comm_free(t->comm);
    free(t->params);
    free(t->param_off);
    free(t->tokens);
    free(t->targets);
}

/* The ids (the header up to the first blank) of the records that have a
 * sequence, in file order, as fasta_read keeps them. */
int fasta_ids(const char *path, char ***ids_out, int64_t *n_out, char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open", path);
        return 0;
    }
    char **ids = NULL, *cur = NULL, line[65536];
    int64_t n = 0, cap = 0;
    int has_seq = 0;
    for (;;) {
        char *l = gzgets(f, line, sizeof line);
        if (!l || line[0] == '>') {
            if (cur && has_seq) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 256;
                    char **ni = realloc(ids, sizeof *ids * (size_t)cap);
                    if (!ni)
                        die("out of memory");
                    ids = ni;
                }
                ids[n++] = cur;
            } else {
                free(cur);
            }
            cur = NULL;
            has_seq = 0;
            if (!l)
                break;
            char *s = line + 1;
            size_t k = strcspn(s, " \t\r\n");
            cur = malloc(k + 1);
            if (!cur)
                die("out of memory");
            memcpy(cur, s, k);
            cur[k] = '\0';
            continue;
        }
        for (char *c = line; *c; c++)
            if (*c != ' ' && *c != '\t' && *c != '\r' && *c != '\n' && *c != '*')
                has_seq = 1;
    }
    gzclose(f);
    *ids_out = ids;
    *n_out = n;
    return 1;
}

void fasta_ids_free(char **ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}
