/* eval.c - evaluation that does not depend on the seed (--eval FILE): every
 * sequence whole, as `BOS residues EOS`, cut into consecutive windows of
 * `seq` positions (a long sequence gives several; no position is scored
 * twice and none is left out); rows padded with <pad> and ignored targets.
 * Causal LM: each window's inputs are positions [w*seq, w*seq + seq) of the
 * record and its targets the next tokens, so every residue and the EOS is
 * predicted once (the context does not cross a window boundary). Masked
 * LM: a fixed 15% of the residues, chosen by a hash of the sequence's
 * residues and the position (not of the seed, not of the file order), are
 * replaced by <mask> (always: no random or kept tokens) and scored.
 *
 * The number reported is the language-model loss alone (the cross_entropy
 * or masked_lm_loss node, read by the backend: BackendMetrics), weighted by
 * the scored tokens, with its perplexity; the auxiliary load-balancing
 * terms the objective adds are reported apart. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"
#include "trainer.h"

/* the masked positions: residue i (0-based) of a sequence whose residues hash to h */
static int eval_masked(uint64_t h, int64_t i)
{
    uint64_t z = h ^ ((uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 < 0.15;
}

int eval_rows_build(EvalRows *e, const FastaSet *fs, const Alphabet *a, int64_t seq, Objective obj)
{
    memset(e, 0, sizeof *e);
    e->seq = seq;
    int64_t rows = 0;
    for (int64_t s = 0; s < fs->nseq; s++) {
        int64_t L = fasta_seq_len(fs, s), npos = obj == OBJECTIVE_CAUSAL ? L + 1 : L + 2;
        rows += (npos + seq - 1) / seq;
    }
    e->nrows = rows;
    e->nseq = fs->nseq;
    e->tokens = malloc(sizeof(int32_t) * (size_t)(rows * seq + 1));
    e->targets = malloc(sizeof(int32_t) * (size_t)(rows * seq + 1));
    if (!e->tokens || !e->targets)
        return 0;
    int64_t r = 0;
    for (int64_t s = 0; s < fs->nseq; s++) {
        const uint8_t *res = fs->tokens + fs->offsets[s];
        int64_t L = fasta_seq_len(fs, s), reclen = L + 2;
        uint64_t h = hash64(res, (size_t)L);
        /* the record: position 0 is BOS, 1..L the residues, L+1 EOS */
#define REC(j) ((j) == 0 ? a->bos : (j) == reclen - 1 ? a->eos : (int32_t)res[(j) - 1])
        int64_t npos = obj == OBJECTIVE_CAUSAL ? L + 1 : L + 2;
        for (int64_t w0 = 0; w0 < npos; w0 += seq, r++) {
            int32_t *tk = e->tokens + r * seq, *tg = e->targets + r * seq;
            for (int64_t p = 0; p < seq; p++) {
                int64_t j = w0 + p;
                if (j >= npos) {
                    tk[p] = a->pad;
                    tg[p] = DATA_IGNORE_INDEX;
                } else if (obj == OBJECTIVE_CAUSAL) {
                    tk[p] = REC(j);
                    tg[p] = REC(j + 1);
                } else if (j >= 1 && j <= L && eval_masked(h, j - 1)) {
                    tk[p] = a->mask;
                    tg[p] = REC(j);
                } else {
                    tk[p] = REC(j);
                    tg[p] = DATA_IGNORE_INDEX;
                }
            }
        }
#undef REC
    }
    return 1;
}

void eval_rows_free(EvalRows *e)
{
    free(e->tokens);
    free(e->targets);
    memset(e, 0, sizeof *e);
}

static int64_t scored(const int32_t *tg, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += tg[i] != DATA_IGNORE_INDEX;
    return c;
}

/* The rows in global batches of tr.batch (the last one padded with ignored
 * rows); this rank runs its slice of each. */
int trainer_eval_rows(Trainer *t, const EvalRows *e, EvalResult *res)
{
    BackendMetrics *keep = res->moe;
    memset(res, 0, sizeof *res);
    res->moe = keep;
    int64_t seq = t->tr.seq, gb = t->tr.batch, bs = t->local_batch * seq;
    double sums[4] = {0, 0, 0, 0};  /* lm loss x tokens, tokens, objective x tokens, aux-free flag */
    int has_lm = t->be->ops->read_metrics != NULL;
    BackendMetrics *m = calloc(1, sizeof *m);
    if (!m)
        return trainer_error(t, "out of memory");
    if (has_lm)
        t->be->ops->read_metrics(t->be, 1, m);  /* drop what earlier passes left */
    for (int64_t r0 = 0; r0 < e->nrows; r0 += gb) {
        for (int64_t i = 0; i < gb * seq; i++) {
            int64_t r = r0 + i / seq;
            t->gtokens[i] = r < e->nrows ? e->tokens[r * seq + i % seq] : t->alpha->pad;
            t->gtargets[i] = r < e->nrows ? e->targets[r * seq + i % seq] : DATA_IGNORE_INDEX;
        }
        memcpy(t->tokens, t->gtokens + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        memcpy(t->targets, t->gtargets + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        int64_t c = scored(t->targets, bs);
        double loss, lm = NAN;
        if (!t->be->ops->eval(t->be, t->tokens, t->targets, &loss)) {
            free(m);
            return trainer_error(t, "evaluation on %s: %s", t->be->ops->name, t->be->ops->error(t->be));
        }
        if (has_lm) {
            t->be->ops->read_metrics(t->be, 1, m);
            if (res->moe)
                trainer_metrics_add(res->moe, m);
            if (m->has_lm && m->passes == 1)
                lm = m->lm_loss;
            else
                has_lm = 0;
        }
        if (c) {
            sums[0] += (has_lm ? lm : loss) * (double)c;
            sums[1] += (double)c;
            sums[2] += loss * (double)c;
        }
    }
    free(m);
    sums[3] = has_lm ? 0 : 1;
    if (t->world > 1 && !trainer_allreduce_f64(t, COMM_WORLD, sums, 4))
        return trainer_error(t, "%s", t->comm->error);
    res->tokens = (int64_t)sums[1];
    res->lm_loss = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    res->loss = sums[1] > 0 ? sums[2] / sums[1] : NAN;
    res->lm_separate = sums[3] == 0;
    return 0;
}

/* A masked LM's pseudo-perplexity over the file (infer_pll: every residue masked in turn, one row each):
 * exp(-(the summed pseudo-log-likelihood) / residues), added to o, on the run's backend (CPU or GPU, both
 * read the logits through forward_probe); with several ranks a note says it was not computed. 1, or 0 after
 * a message. */
static int pll_report(Trainer *t, cJSON *o)
{
    int node = infer_logits_node(t);
    if (t->world > 1 || !t->be->ops->forward_probe || node < 0) {
        cJSON_AddStringToObject(o, "pseudo_perplexity_note", t->world > 1 ? "not computed: several ranks"
                                : node < 0 ? "not computed: no logits over the alphabet feed the loss"
                                           : "not computed: this backend cannot read the logits (run --device cpu)");
        return 1;
    }
    const FastaSet *fs = t->shared;
    double *pll = calloc((size_t)fs->nseq + 1, sizeof(double));
    if (!pll)
        die("out of memory");
    int64_t rows = 0, residues = 0;
    if (!infer_pll(t, node, fs, pll, &rows)) {
        free(pll);
        return 0;
    }
    double sum = 0;
    for (int64_t s = 0; s < fs->nseq; s++) {
        sum += pll[s];
        residues += fasta_seq_len(fs, s);
    }
    free(pll);
    cJSON_AddNumberToObject(o, "pseudo_perplexity", residues ? exp(-sum / (double)residues) : NAN);
    cJSON_AddNumberToObject(o, "pseudo_log_likelihood", sum);
    cJSON_AddNumberToObject(o, "pll_residues", (double)residues);
    cJSON_AddNumberToObject(o, "pll_rows", (double)rows);
    return 1;
}

/* --eval FILE: the report, one JSON object on stdout (rank 0) */
int trainer_eval_file(Trainer *t)
{
    EvalRows e;
    if (!eval_rows_build(&e, t->shared, t->alpha, t->tr.seq, t->obj)) {
        eval_rows_free(&e);
        return trainer_error(t, "out of memory for the evaluation windows of %s", t->f.eval_path);
    }
    if (e.nrows == 0) {
        eval_rows_free(&e);
        return trainer_error(t, "%s has no sequences to evaluate", t->f.eval_path);
    }
    EvalResult r = {0};
    r.moe = calloc(1, sizeof *r.moe);
    if (!r.moe)
        die("out of memory");
    int rc = trainer_eval_rows(t, &e, &r);
    if (rc == 0 && r.tokens == 0)
        rc = trainer_error(t, "--eval %s: no token of its sequences is scored (too short for the model's objective); "
                           "no loss to report", t->f.eval_path);
    else if (rc == 0 && !isfinite(r.lm_loss))
        rc = trainer_error(t, "--eval %s: the loss is %g: the parameters of %s make the model diverge on this data",
                           t->f.eval_path, r.lm_loss, t->f.init_path ? t->f.init_path : "the checkpoint");
    if (rc == 0 && is_rank0(t)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "eval_loss", r.lm_loss);
        cJSON_AddNumberToObject(o, "perplexity", exp(r.lm_loss));
        cJSON_AddNumberToObject(o, "tokens", (double)r.tokens);
        cJSON_AddNumberToObject(o, "sequences", (double)e.nseq);
        cJSON_AddNumberToObject(o, "windows", (double)e.nrows);
        cJSON_AddStringToObject(o, "objective", t->obj == OBJECTIVE_CAUSAL
                                                    ? "causal: every residue and EOS predicted once"
                                                    : "masked: 15% of residues by a fixed hash, all <mask>");
        if (r.lm_separate)
            cJSON_AddNumberToObject(o, "aux_loss", r.loss - r.lm_loss);
        else
            cJSON_AddStringToObject(o, "note", "this backend does not separate the language-model loss: "
                                               "eval_loss includes the auxiliary terms");
        if (t->obj == OBJECTIVE_MASKED && !t->f.no_pll && !pll_report(t, o))
            rc = trainer_error(t, "--eval %s: the pseudo-perplexity: %s", t->f.eval_path, t->be->ops->error(t->be));
        /* per MoE layer, over the evaluation's batches (rank 0's rows; padding rows routed too) */
        trainer_moe_json(t, r.moe, o);
        if (rc == 0) {
            char *s = cJSON_PrintUnformatted(o);
            printf("%s\n", s);
            free(s);
        }
        cJSON_Delete(o);
    }
    eval_rows_free(&e);
    free(r.moe);
    return rc;
}
