/* embed.c - `TRAIN_BINARY embed --init CKPT --fasta Q.fa -o E.safetensors
 * [--layer L] [--pool mean|cls|none]`: the model's representations of
 * each sequence, keyed by its FASTA id.
 *
 * A sequence is the record `BOS residues EOS`, cut into consecutive windows
 * of `seq` positions as --eval cuts it (train/eval.c; no masking), each
 * window a row of the plan's batch, padded with <pad>: rows are independent,
 * so a sequence gets the same embedding alone or in a batch with others
 * (tests/train/embed_score.test checks it). The representation is the
 * output of a layer, read by the backend's forward_probe (CPU or GPU): --layer 0 is
 * the embedding, L in 1..N the residual stream after the L-th repeat
 * iteration (the last [B, S, d] node of that iteration), and the default
 * (-1) the input of the LM head (after the final norm).
 * The file holds per sequence `mean.ID` [d] (the mean over the residues,
 * BOS and EOS excluded), or `cls.ID` [d] (the BOS position), or with
 * --pool none `residues.ID` [L, d]; the metadata holds `ids` (a JSON array
 * in file order), `pool`, `layer`, `node`, `model`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "../formats/safetensors.h"
#include "../runtime/cpu/cpu.h"
#include "../util/util.h"
#include "trainer.h"

static const char *const usage_embed =
    "usage: %s embed --init CKPT --fasta Q.fa -o E.safetensors [--layer L] [--pool mean|cls|none] [--threads N] [--device auto|cpu|cuda]\n"
    "  the representations of Q.fa's sequences, keyed by FASTA id:\n"
    "  --layer L   0: the embedding; 1..N: after the L-th layer; default: the LM head's input\n"
    "  --pool P    mean (default: over the residues), cls (the BOS position), none (per residue)\n";

/* The node whose value is the representation of --layer L, or -1 after a message. */
int embed_layer_node(const Trainer *t, int64_t layer, int64_t *nlayers_out)
{
    const IrGraph *g = t->g;
    int last = g->loss->id, d = -1;
    const IrNode *emb = NULL, *head_in = NULL;
    for (int i = 0; i < last; i++)
        if (g->nodes[i]->op == IR_OP_EMBEDDING && !emb)
            emb = g->nodes[i];
    for (int i = 0; i <= last; i++) {
        const IrNode *n = g->nodes[i];
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && n->src[0]->op == IR_OP_LINEAR)
            head_in = n->src[0]->src[0];
    }
    if (emb)
        d = (int)emb->shape[emb->rank - 1];
    /* per repeat iteration, the last [.., d] float node */
    int nl = 0, nodes[4096];
    const char *cur = NULL;
    for (int i = 0; emb && i < last; i++) {
        const IrNode *n = g->nodes[i];
        if (!n->layer || n->rank < 2 || n->shape[n->rank - 1] != d || !ir_dtype_is_float(n->dtype) ||
            ir_numel(n) != ir_numel(emb))
            continue;
        if (!cur || strcmp(cur, n->layer) != 0) {
            if (nl == 4096)
                break;
            cur = n->layer;
            nodes[nl++] = i;
        } else {
            nodes[nl - 1] = i;
        }
    }
    *nlayers_out = nl;
    if (!emb) {
        fprintf(stderr, "%s: error: the model has no embedding to start from\n", t->prog);
        return -1;
    }
    if (layer < 0) {
        if (!head_in) {
            fprintf(stderr, "%s: error: no LM head (a linear into the loss) found; give --layer\n", t->prog);
            return -1;
        }
        return head_in->id;
    }
    if (layer == 0)
        return emb->id;
    if (layer > nl) {
        fprintf(stderr, "%s: error: --layer %lld: the model has %d layers (0 is the embedding, 1..%d after each)\n",
                t->prog, (long long)layer, nl, nl);
        return -1;
    }
    return nodes[layer - 1];
}

int trainer_embed_main(int argc, char **argv, const Plan *pl)
{
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];
    const char *init = NULL, *fasta = NULL, *out = NULL, *pool = "mean";
    int64_t layer = -1, threads = 0;
    const char *device = "auto";
    static const char *const known[] = {"--init", "--fasta", "-o", "--pool", "--layer", "--threads", "--device", "--help", NULL};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf(usage_embed, prog);
            return 0;
        }
        int k = 0;
        while (known[k] && strcmp(known[k], a))
            k++;
        if (!known[k])
            return trainer_unknown_option(prog, "embed", a, known);
        if (!v)
            return trainer_usage_error(prog, "embed: %s needs a value", a);
        if (!strcmp(a, "--init"))
            init = v;
        else if (!strcmp(a, "--fasta"))
            fasta = v;
        else if (!strcmp(a, "-o"))
            out = v;
        else if (!strcmp(a, "--pool"))
            pool = v;
        else if (!strcmp(a, "--layer")) {
            if (!parse_i64_in(v, 0, 1 << 20, &layer))
                return trainer_usage_error(prog, "embed: --layer takes a layer number >= 0, not '%s'", v);
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return trainer_usage_error(prog, "embed: --device must be auto, cpu or cuda, not '%s'", v);
            device = v;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_i64_in(v, 1, 256, &threads))
                return trainer_usage_error(prog, "embed: --threads takes an integer in [1, 256], not '%s'", v);
        }
        i++;
    }
    if (!init || !fasta || !out)
        return trainer_usage_error(prog, "embed needs --init CKPT, --fasta Q.fa and -o E.safetensors");
    int pool_kind = !strcmp(pool, "mean") ? 0 : !strcmp(pool, "cls") ? 1 : !strcmp(pool, "none") ? 2 : -1;
    if (pool_kind < 0)
        return trainer_usage_error(prog, "embed: --pool must be mean, cls or none, not '%s'", pool);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_threads(threads ? (int)threads : (int)(ncpu > 0 ? ncpu : 1));

    Trainer *t = calloc(1, sizeof *t);
    FastaSet fs;
    fasta_set_init(&fs);
    char **ids = NULL, err[1024];
    int64_t nids = 0, nl = 0;
    int rc = 1;
    if (!t || !infer_open(t, prog, pl, init, device))
        goto out;
    if (!fasta_read(fasta, t->alpha, &fs, err, sizeof err) || !fasta_ids(fasta, &ids, &nids, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        goto out;
    }
    if (nids != fs.nseq) {
        fprintf(stderr, "%s: error: %s: %lld records with a sequence but %lld ids were read\n", prog, fasta,
                (long long)fs.nseq, (long long)nids);
        goto out;
    }
    for (int64_t i = 0; i < nids; i++)
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(ids[i], ids[j])) {
                fprintf(stderr, "%s: error: %s: the id `%s` is used by records %lld and %lld; embeddings are keyed "
                        "by id\n", prog, fasta, ids[i], (long long)j + 1, (long long)i + 1);
                goto out;
            }
    int node = embed_layer_node(t, layer, &nl);
    if (node < 0)
        goto out;
    const IrNode *rep = t->g->nodes[node];
    int64_t d = rep->shape[rep->rank - 1], S = t->tr.seq, B = t->tr.batch;
    /* the rows: eval's windows, without the masks */
    EvalRows e;
    if (!eval_rows_build(&e, &fs, t->alpha, S, OBJECTIVE_MASKED)) {
        eval_rows_free(&e);
        fprintf(stderr, "%s: error: out of memory\n", prog);
        goto out;
    }
    /* every row's owner and first record position */
    float *acts = malloc(sizeof(float) * (size_t)(B * S * d));
    float **res = calloc((size_t)fs.nseq + 1, sizeof *res);
    if (!acts || !res)
        die("out of memory");
    for (int64_t s = 0; s < fs.nseq; s++) {
        res[s] = calloc((size_t)((fasta_seq_len(&fs, s) + 2) * d) + 1, sizeof(float));
        if (!res[s])
            die("out of memory");
    }
    int64_t r = 0, s = 0, w0 = 0;  /* the row being filled: sequence s, window from record position w0 */
    int64_t *row_seq = malloc(sizeof(int64_t) * (size_t)B), *row_w0 = malloc(sizeof(int64_t) * (size_t)B);
    while (r < e.nrows) {
        int64_t nb = 0;
        for (; nb < B && r < e.nrows; nb++, r++) {
            row_seq[nb] = s;
            row_w0[nb] = w0;
            for (int64_t p = 0; p < S; p++) {
                t->tokens[nb * S + p] = e.tokens[r * S + p];
                t->targets[nb * S + p] = DATA_IGNORE_INDEX;
            }
            /* undo eval's masking: the record's own tokens */
            for (int64_t p = 0; p < S; p++) {
                int64_t j = w0 + p, L = fasta_seq_len(&fs, s);
                if (j >= 1 && j <= L)
                    t->tokens[nb * S + p] = fs.tokens[fs.offsets[s] + j - 1];
            }
            w0 += S;
            if (w0 >= fasta_seq_len(&fs, s) + 2) {
                s++;
                w0 = 0;
            }
        }
        for (int64_t i = nb * S; i < B * S; i++) {
            t->tokens[i] = t->alpha->pad;
            t->targets[i] = DATA_IGNORE_INDEX;
        }
        if (!t->be->ops->forward_probe(t->be, t->tokens, t->targets, node, acts)) {
            fprintf(stderr, "%s: error: %s\n", prog, t->be->ops->error(t->be));
            goto out_rows;
        }
        for (int64_t b = 0; b < nb; b++) {
            int64_t L2 = fasta_seq_len(&fs, row_seq[b]) + 2;
            for (int64_t p = 0; p < S && row_w0[b] + p < L2; p++)
                memcpy(res[row_seq[b]] + (row_w0[b] + p) * d, acts + (b * S + p) * d, sizeof(float) * (size_t)d);
        }
    }
    {
        SafeTensorsWriter w;
        st_writer_init(&w);
        char **names = calloc((size_t)fs.nseq + 1, sizeof *names);
        float **pooled = calloc((size_t)fs.nseq + 1, sizeof *pooled);
        cJSON *index = cJSON_CreateArray();
        static const char *const pre[3] = {"mean.", "cls.", "residues."};
        for (int64_t q = 0; q < fs.nseq; q++) {
            int64_t L = fasta_seq_len(&fs, q);
            names[q] = malloc(strlen(ids[q]) + 16);
            sprintf(names[q], "%s%s", pre[pool_kind], ids[q]);
            cJSON_AddItemToArray(index, cJSON_CreateString(ids[q]));
            if (pool_kind == 2) {
                int64_t shape[2] = {L, d};
                st_writer_add(&w, names[q], ST_F32, 2, shape, res[q] + d, sizeof(float) * (size_t)(L * d));
                continue;
            }
            pooled[q] = calloc((size_t)d, sizeof(float));
            for (int64_t k = 0; k < d; k++) {
                if (pool_kind == 1) {
                    pooled[q][k] = res[q][k];
                } else {
                    double acc = 0;
                    for (int64_t j = 1; j <= L; j++)
                        acc += res[q][j * d + k];
                    pooled[q][k] = (float)(acc / (double)(L > 0 ? L : 1));
                }
            }
            st_writer_add(&w, names[q], ST_F32, 1, &d, pooled[q], sizeof(float) * (size_t)d);
        }
        char *idx = cJSON_PrintUnformatted(index), num[32];
        st_writer_set_metadata(&w, "ids", idx);
        st_writer_set_metadata(&w, "pool", pool);
        snprintf(num, sizeof num, "%lld", (long long)(layer < 0 ? nl + 1 : layer));
        st_writer_set_metadata(&w, "layer", layer < 0 ? "head_input" : num);
        st_writer_set_metadata(&w, "node", rep->name);
        st_writer_set_metadata(&w, "model", t->g->model);
        if (!st_writer_save(&w, out, err, sizeof err))
            fprintf(stderr, "%s: error: %s\n", prog, err);
        else {
            printf("wrote %s: %lld sequences, %s embeddings of %lld values from %s (%lld windows of %lld)\n", out,
                   (long long)fs.nseq, pool_kind == 2 ? "per-residue" : pool, (long long)d, rep->name,
                   (long long)e.nrows, (long long)S);
            rc = 0;
        }
        st_writer_free(&w);
        for (int64_t q = 0; q < fs.nseq; q++) {
            free(names[q]);
            free(pooled[q]);
        }
        free(names);
        free(pooled);
        free(idx);
        cJSON_Delete(index);
    }
out_rows:
    for (int64_t q = 0; q < fs.nseq; q++)
        free(res[q]);
    free(res);
    free(acts);
    free(row_seq);
    free(row_w0);
    eval_rows_free(&e);
out:
    if (t)
        infer_close(t);
    free(t);
    fasta_ids_free(ids, nids);
    fasta_set_free(&fs);
    return rc;
}
