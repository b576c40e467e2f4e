/* infer.c - what `embed` and `score` share (train/embed.c, train/score.c):
 * a Trainer set up for forward passes only (the plan's parameters loaded
 * from a checkpoint by name and shape, on the CPU or the GPU backend
 * (--device), one rank; no data loader, no AdamW state), the FASTA records'
 * ids, and the records as rows of the plan's [batch, seq] inputs. Both
 * backends run the same code here: the rows, the batches and the host-side
 * log-softmax; only forward_probe (the node's value) is the backend's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../runtime/cpu/cpu.h"
#include "../util/util.h"
#include "trainer.h"

int infer_open(Trainer *t, const char *prog, const Plan *pl, const char *ckpt, const char *device)
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
    char err[2048], why[1024] = "";
    BackendOptions o = {0};
    o.ring = 1;
    o.forward_only = 1;
    /* the backend as the training binary picks it: the GPU when asked for or (auto) when there is one */
    if (!device)
        device = "auto";
    int use_gpu = strcmp(device, "cpu") != 0 && backend_cuda_probe(why, sizeof why);
    if (!use_gpu && !strcmp(device, "cuda")) {
        fprintf(stderr, "%s: error: --device cuda: %s\n", prog, why);
        return 0;
    }
    if (use_gpu) {
        int no_kernels = 0;
        o.no_kernels = &no_kernels;
        t->backend = &backend_cuda;
        t->be = backend_cuda.create(pl, t->comm, &o, err, sizeof err);
        if (!t->be && (!no_kernels || strcmp(device, "auto") != 0)) {
            fprintf(stderr, "%s: error: the GPU backend: %s\n", prog, err);
            return 0;
        }
        if (!t->be)
            printf("device: cpu (the GPU backend could not start: %s; --device cuda makes this an error)\n", err);
    } else if (!strcmp(device, "auto")) {
        printf("device: cpu (no GPU: %s; --device cpu says so without this notice)\n", why);
    }
    if (!t->be) {
        t->backend = &backend_cpu;
        t->be = backend_cpu.create(pl, t->comm, &o, err, sizeof err);
    }
    if (!t->be) {
        fprintf(stderr, "%s: error: the cpu backend: %s\n", prog, err);
        return 0;
    }
    if (!t->be->ops->put_state(t->be, t->params, NULL)) {
        fprintf(stderr, "%s: error: %s\n", prog, t->be->ops->error(t->be));
        return 0;
    }
    trainer_print_eval_memory(t, stdout);
    return 1;
}

/* "memory: forward passes only: ..." for a backend set up with BackendOptions.forward_only; else what the
 * training plan took */
void trainer_print_eval_memory(Trainer *t, FILE *out)
{
    BackendInfo bi;
    t->be->ops->info(t->be, &bi);
    char acts[32], train[32], par[32], opt[32];
    fmt_bytes(acts, sizeof acts, (double)bi.planned_acts);
    fmt_bytes(train, sizeof train, (double)bi.training_acts);
    fmt_bytes(par, sizeof par, (double)bi.planned_params);
    fmt_bytes(opt, sizeof opt, (double)bi.planned_opt);
    const char *dev = strcmp(t->be->ops->name, "cpu") ? " on the GPU" : "";
    if (bi.forward_only)
        fprintf(out, "memory: forward passes only%s: parameters %s, activations %s (training plans %s with the "
                "gradients); no AdamW state\n", dev, par, acts, train);
    else
        fprintf(out, "memory: the training plan%s: parameters %s, activations and gradients %s, AdamW state %s\n",
                dev, par, acts, opt);
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

int32_t *infer_rows_add(InferRows *r)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->tokens = realloc(r->tokens, sizeof(int32_t) * (size_t)(r->cap * r->S));
        if (!r->tokens)
            die("out of memory");
    }
    return r->tokens + r->n++ * r->S;
}

/* a query on the last row added */
void infer_rows_query(InferRows *r, int64_t owner, int64_t pos, int32_t tok, int sign)
{
    if (r->nq == r->qcap) {
        r->qcap = r->qcap ? r->qcap * 2 : 1024;
        r->qrow = realloc(r->qrow, sizeof(int64_t) * (size_t)r->qcap);
        r->qpos = realloc(r->qpos, sizeof(int64_t) * (size_t)r->qcap);
        r->qown = realloc(r->qown, sizeof(int64_t) * (size_t)r->qcap);
        r->qtok = realloc(r->qtok, sizeof(int32_t) * (size_t)r->qcap);
        r->qsign = realloc(r->qsign, (size_t)r->qcap);
        if (!r->qrow || !r->qpos || !r->qown || !r->qtok || !r->qsign)
            die("out of memory");
    }
    r->qrow[r->nq] = r->n - 1;
    r->qpos[r->nq] = pos;
    r->qown[r->nq] = owner;
    r->qtok[r->nq] = tok;
    r->qsign[r->nq++] = (int8_t)sign;
}

void infer_rows_free(InferRows *r)
{
    free(r->tokens);
    free(r->qrow);
    free(r->qpos);
    free(r->qown);
    free(r->qtok);
    free(r->qsign);
}

/* Runs the rows in batches; out[owner] += sign * log p(token at position). */
int infer_rows_run(Trainer *t, int node, const InferRows *r, double *out, double *per_query)
{
    int64_t B = t->tr.batch, S = t->tr.seq, V = t->g->nodes[node]->shape[t->g->nodes[node]->rank - 1];
    float *logits = malloc(sizeof(float) * (size_t)(B * S * V));
    if (!logits)
        die("out of memory");
    int64_t q = 0;
    for (int64_t r0 = 0; r0 < r->n; r0 += B) {
        for (int64_t i = 0; i < B * S; i++) {
            int64_t row = r0 + i / S;
            t->tokens[i] = row < r->n ? r->tokens[row * S + i % S] : t->alpha->pad;
            t->targets[i] = DATA_IGNORE_INDEX;
        }
        if (!t->be->ops->forward_probe(t->be, t->tokens, t->targets, node, logits)) {
            fprintf(stderr, "%s: error: %s\n", t->prog, t->be->ops->error(t->be));
            free(logits);
            return 0;
        }
        for (; q < r->nq && r->qrow[q] < r0 + B; q++) {
            const float *l = logits + ((r->qrow[q] - r0) * S + r->qpos[q]) * V;
            double mx = -INFINITY, sum = 0;
            for (int64_t v = 0; v < V; v++)
                mx = l[v] > mx ? l[v] : mx;
            for (int64_t v = 0; v < V; v++)
                sum += exp((double)l[v] - mx);
            double lp = (double)l[r->qtok[q]] - mx - log(sum);
            out[r->qown[q]] += r->qsign[q] * lp;
            if (per_query)
                per_query[q] = lp;
        }
    }
    free(logits);
    return 1;
}

/* the record BOS res EOS at position j */
int32_t infer_rec_at(const Trainer *t, const int32_t *res, int64_t L, int64_t j)
{
    return j == 0 ? t->alpha->bos : j == L + 1 ? t->alpha->eos : res[j - 1];
}

/* causal: every residue and the EOS predicted from what precedes it in its window */
void infer_causal_rows(Trainer *t, InferRows *r, const int32_t *res, int64_t L, int64_t owner, int sign)
{
    int64_t S = r->S;
    for (int64_t w0 = 0; w0 < L + 1; w0 += S) {
        int32_t *row = infer_rows_add(r);
        for (int64_t p = 0; p < S; p++)
            row[p] = w0 + p < L + 1 ? infer_rec_at(t, res, L, w0 + p) : t->alpha->pad;
        for (int64_t p = 0; p < S && w0 + p < L + 1; p++)
            infer_rows_query(r, owner, p, infer_rec_at(t, res, L, w0 + p + 1), sign);
    }
}

/* a row of the window holding record positions pos[0..n) (all in one window), those masked */
int32_t *infer_masked_row(Trainer *t, InferRows *r, const int32_t *res, int64_t L, int64_t w0, const int64_t *pos,
                               int n)
{
    int32_t *row = infer_rows_add(r);
    for (int64_t p = 0; p < r->S; p++)
        row[p] = w0 + p < L + 2 ? infer_rec_at(t, res, L, w0 + p) : t->alpha->pad;
    for (int i = 0; i < n; i++)
        row[pos[i] - w0] = t->alpha->mask;
    return row;
}

int infer_logits_node(const Trainer *t)
{
    for (int i = 0; i <= t->g->loss->id; i++) {
        const IrNode *n = t->g->nodes[i];
        if (n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) {
            const IrNode *h = n->src[0];
            return h->shape[h->rank - 1] == t->alpha->vocab ? h->id : -1;
        }
    }
    return -1;
}

void infer_pll_rows(Trainer *t, InferRows *r, const FastaSet *fs)
{
    int32_t *res = NULL;
    int64_t cap = 0;
    for (int64_t s = 0; s < fs->nseq; s++) {
        int64_t L = fasta_seq_len(fs, s);
        if (L + 1 > cap) {
            cap = L + 1;
            free(res);
            res = malloc(sizeof(int32_t) * (size_t)cap);
            if (!res)
                die("out of memory");
        }
        for (int64_t i = 0; i < L; i++)
            res[i] = fs->tokens[fs->offsets[s] + i];
        for (int64_t j = 1; j <= L; j++) {
            infer_masked_row(t, r, res, L, (j / r->S) * r->S, &j, 1);
            infer_rows_query(r, s, j - (j / r->S) * r->S, res[j - 1], 1);
        }
    }
    free(res);
}

int infer_pll(Trainer *t, int node, const FastaSet *fs, double *out, int64_t *rows)
{
    InferRows r = {.S = t->tr.seq};
    infer_pll_rows(t, &r, fs);
    for (int64_t s = 0; s < fs->nseq; s++)
        out[s] = 0;
    int ok = infer_rows_run(t, node, &r, out, NULL);
    if (rows)
        *rows = r.n;
    infer_rows_free(&r);
    return ok;
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
