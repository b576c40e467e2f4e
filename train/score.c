/* score.c - `TRAIN_BINARY score`: likelihoods from a trained model, on the CPU.
 *
 *   score --init CKPT --fasta Q.fa -o S.csv
 *       per sequence: a causal LM's log-likelihood (natural log, summed over
 *       the residues and the EOS, each predicted from what precedes it), a
 *       masked LM's pseudo-log-likelihood (each residue masked in turn, one
 *       row each, batched: the sum of log p(residue | the rest));
 *       columns id,length,<score>,mean,<perplexity>
 *   score --init CKPT --wt WT.fa --mutations M.csv -o S.csv
 *       variant effects against the one wild-type sequence of WT.fa, for each
 *       mutation set of M.csv's first column (A23G, A23G:K45R; 1-based
 *       positions; a header row whose first field is not a mutation is
 *       skipped): a masked LM's masked marginal (ESM-1v's: all the mutated
 *       positions masked at once in the wild type, the sum over them of
 *       log p(mutant) - log p(wild type)); a causal LM's log-likelihood ratio
 *       log p(mutant sequence) - log p(wild type); columns mutant,<score>.
 * Long sequences are cut into the windows of --eval (train/eval.c): the
 * context of a position is its window. The log-probabilities come from the
 * LM head's logits (the linear into the loss), read by the CPU backend's
 * forward_probe, with a log-softmax in double on the host. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/cpu/cpu.h"
#include "../util/util.h"
#include "trainer.h"

static const char *const usage_score =
    "usage: %s score --init CKPT --fasta Q.fa -o S.csv [--threads N]\n"
    "       %s score --init CKPT --wt WT.fa --mutations M.csv -o S.csv [--threads N]\n"
    "  per-sequence log-likelihood (causal LM) or pseudo-log-likelihood (masked LM);\n"
    "  or variant scores (A23G, A23G:K45R): log-likelihood ratio (causal), masked marginal (masked)\n";

/* A batch of rows to run: tokens [n, S]; for each row, the query positions
 * and tokens whose log-probabilities are added to out[owner]. */
typedef struct Rows {
    int64_t n, cap, S;
    int32_t *tokens;   /* [n, S] */
    int64_t *owner;    /* [n] */
    /* queries: (row, position, token, sign) */
    int64_t nq, qcap;
    int64_t *qrow, *qpos;
    int32_t *qtok;
    int8_t *qsign;
} Rows;

static int32_t *rows_add(Rows *r, int64_t owner)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->tokens = realloc(r->tokens, sizeof(int32_t) * (size_t)(r->cap * r->S));
        r->owner = realloc(r->owner, sizeof(int64_t) * (size_t)r->cap);
        if (!r->tokens || !r->owner)
            die("out of memory");
    }
    r->owner[r->n] = owner;
    return r->tokens + r->n++ * r->S;
}

static void rows_query(Rows *r, int64_t pos, int32_t tok, int sign)
{
    if (r->nq == r->qcap) {
        r->qcap = r->qcap ? r->qcap * 2 : 1024;
        r->qrow = realloc(r->qrow, sizeof(int64_t) * (size_t)r->qcap);
        r->qpos = realloc(r->qpos, sizeof(int64_t) * (size_t)r->qcap);
        r->qtok = realloc(r->qtok, sizeof(int32_t) * (size_t)r->qcap);
        r->qsign = realloc(r->qsign, (size_t)r->qcap);
        if (!r->qrow || !r->qpos || !r->qtok || !r->qsign)
            die("out of memory");
    }
    r->qrow[r->nq] = r->n - 1;
    r->qpos[r->nq] = pos;
    r->qtok[r->nq] = tok;
    r->qsign[r->nq++] = (int8_t)sign;
}

static void rows_free(Rows *r)
{
    free(r->tokens);
    free(r->owner);
    free(r->qrow);
    free(r->qpos);
    free(r->qtok);
    free(r->qsign);
}

/* Runs the rows in batches; out[owner] += sign * log p(token at position). */
static int rows_run(Trainer *t, int node, const Rows *r, double *out)
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
            out[r->owner[r->qrow[q]]] += r->qsign[q] * ((double)l[r->qtok[q]] - mx - log(sum));
        }
    }
    free(logits);
    return 1;
}

/* the record BOS res EOS at position j */
static int32_t rec_at(const Trainer *t, const int32_t *res, int64_t L, int64_t j)
{
    return j == 0 ? t->alpha->bos : j == L + 1 ? t->alpha->eos : res[j - 1];
}

/* causal: every residue and the EOS predicted from what precedes it in its window */
static void add_causal(Trainer *t, Rows *r, const int32_t *res, int64_t L, int64_t owner, int sign)
{
    int64_t S = r->S;
    for (int64_t w0 = 0; w0 < L + 1; w0 += S) {
        int32_t *row = rows_add(r, owner);
        for (int64_t p = 0; p < S; p++)
            row[p] = w0 + p < L + 1 ? rec_at(t, res, L, w0 + p) : t->alpha->pad;
        for (int64_t p = 0; p < S && w0 + p < L + 1; p++)
            rows_query(r, p, rec_at(t, res, L, w0 + p + 1), sign);
    }
}

/* a row of the window holding record positions pos[0..n) (all in one window), those masked */
static int32_t *add_masked_row(Trainer *t, Rows *r, const int32_t *res, int64_t L, int64_t owner, int64_t w0,
                               const int64_t *pos, int n)
{
    int32_t *row = rows_add(r, owner);
    for (int64_t p = 0; p < r->S; p++)
        row[p] = w0 + p < L + 2 ? rec_at(t, res, L, w0 + p) : t->alpha->pad;
    for (int i = 0; i < n; i++)
        row[pos[i] - w0] = t->alpha->mask;
    return row;
}

static int read_fasta_tokens(Trainer *t, const char *path, FastaSet *fs, char ***ids, int64_t *nids)
{
    char err[1024];
    fasta_set_init(fs);
    if (!fasta_read(path, t->alpha, fs, err, sizeof err) || !fasta_ids(path, ids, nids, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    if (*nids != fs->nseq) {
        fprintf(stderr, "%s: error: %s: %lld records with a sequence but %lld ids were read\n", t->prog, path,
                (long long)fs->nseq, (long long)*nids);
        return 0;
    }
    return 1;
}

static int32_t *seq_tokens(const FastaSet *fs, int64_t s)
{
    int64_t L = fasta_seq_len(fs, s);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)(L + 1));
    if (!x)
        die("out of memory");
    for (int64_t i = 0; i < L; i++)
        x[i] = fs->tokens[fs->offsets[s] + i];
    return x;
}

static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static int score_fasta(Trainer *t, int node, const char *fasta, FILE *out)
{
    FastaSet fs;
    char **ids = NULL;
    int64_t nids = 0;
    int ok = 0;
    Rows r = {.S = t->tr.seq};
    double *sc = NULL;
    if (!read_fasta_tokens(t, fasta, &fs, &ids, &nids))
        goto done;
    sc = calloc((size_t)fs.nseq + 1, sizeof(double));
    for (int64_t s = 0; s < fs.nseq; s++) {
        int64_t L = fasta_seq_len(&fs, s);
        int32_t *res = seq_tokens(&fs, s);
        if (t->obj == OBJECTIVE_CAUSAL) {
            add_causal(t, &r, res, L, s, 1);
        } else {
            for (int64_t j = 1; j <= L; j++) {
                add_masked_row(t, &r, res, L, s, (j / r.S) * r.S, &j, 1);
                rows_query(&r, j - (j / r.S) * r.S, res[j - 1], 1);
            }
        }
        free(res);
    }
    if (!rows_run(t, node, &r, sc))
        goto done;
    int causal = t->obj == OBJECTIVE_CAUSAL;
    fprintf(out, "id,length,%s,mean,%s\n", causal ? "log_likelihood" : "pseudo_log_likelihood",
            causal ? "perplexity" : "pseudo_perplexity");
    for (int64_t s = 0; s < fs.nseq; s++) {
        int64_t L = fasta_seq_len(&fs, s), n = causal ? L + 1 : L;
        double mean = n ? sc[s] / (double)n : NAN;
        csv_field(out, ids[s]);
        fprintf(out, ",%lld,%.6f,%.6f,%.6f\n", (long long)L, sc[s], mean, exp(-mean));
    }
    printf("scored %lld sequences of %s (%s, %lld rows of %lld)\n", (long long)fs.nseq, fasta,
           causal ? "log-likelihood" : "pseudo-log-likelihood: each residue masked in turn", (long long)r.n,
           (long long)r.S);
    ok = 1;
done:
    free(sc);
    rows_free(&r);
    fasta_ids_free(ids, nids);
    fasta_set_free(&fs);
    return ok;
}

enum { MAX_MUT = 64 };
typedef struct Variant {
    char *text;
    int n;
    int64_t pos[MAX_MUT];   /* 1-based residue positions */
    int32_t wt[MAX_MUT], mt[MAX_MUT];
} Variant;

static int parse_variant(Trainer *t, const char *field, const int32_t *wt, int64_t L, Variant *v, const char *path,
                         int64_t line, int quiet)
{
    memset(v, 0, sizeof *v);
    const char *s = field;
    while (*s) {
        if (v->n == MAX_MUT) {
            fprintf(stderr, "%s:%lld: error: more than %d mutations in one variant\n", path, (long long)line, MAX_MUT);
            return 0;
        }
        char w = s[0];
        char *end;
        long long p = isdigit((unsigned char)s[1]) ? strtoll(s + 1, &end, 10) : -1;
        if (!isalpha((unsigned char)w) || p < 0 || !isalpha((unsigned char)*end) || (end[1] && end[1] != ':')) {
            if (!quiet)
                fprintf(stderr, "%s:%lld: error: `%s` is not a mutation like A23G (wild-type letter, 1-based position, "
                        "mutant letter; several joined by ':')\n", path, (long long)line, field);
            return 0;
        }
        char m = *end;
        if (p < 1 || p > L) {
            fprintf(stderr, "%s:%lld: error: %c%lld%c: position %lld is outside the wild type (1..%lld)\n", path,
                    (long long)line, w, p, m, p, (long long)L);
            return 0;
        }
        int wi = alphabet_encode(t->alpha, w), mi = alphabet_encode(t->alpha, m);
        if (wi < 0 || mi < 0) {
            fprintf(stderr, "%s:%lld: error: %c%lld%c: `%c` is not a %s letter\n", path, (long long)line, w, p, m,
                    wi < 0 ? w : m, t->alpha->name);
            return 0;
        }
        if (wt[p - 1] != wi) {
            fprintf(stderr, "%s:%lld: error: %c%lld%c: the wild type has %s at position %lld, not %c\n", path,
                    (long long)line, w, p, m, t->alpha->tokens[wt[p - 1]], p, w);
            return 0;
        }
        for (int i = 0; i < v->n; i++)
            if (v->pos[i] == p) {
                fprintf(stderr, "%s:%lld: error: position %lld is mutated twice in `%s`\n", path, (long long)line, p,
                        field);
                return 0;
            }
        v->pos[v->n] = p;
        v->wt[v->n] = wi;
        v->mt[v->n++] = mi;
        s = end[1] == ':' ? end + 2 : end + 1;
    }
    if (v->n == 0) {
        fprintf(stderr, "%s:%lld: error: an empty mutation\n", path, (long long)line);
        return 0;
    }
    v->text = strdup(field);
    return 1;
}

static int score_variants(Trainer *t, int node, const char *wtpath, const char *csv, FILE *out)
{
    FastaSet fs;
    char **ids = NULL;
    int64_t nids = 0, nv = 0, cap = 0;
    Variant *vs = NULL;
    Rows r = {.S = t->tr.seq};
    double *sc = NULL;
    int32_t *wt = NULL;
    int ok = 0;
    FILE *f = NULL;
    char *line = NULL;
    size_t lcap = 0;
    if (!read_fasta_tokens(t, wtpath, &fs, &ids, &nids))
        goto done;
    if (fs.nseq != 1) {
        fprintf(stderr, "%s: error: %s: the wild type must be one sequence, not %lld\n", t->prog, wtpath,
                (long long)fs.nseq);
        goto done;
    }
    int64_t L = fasta_seq_len(&fs, 0);
    wt = seq_tokens(&fs, 0);
    f = fopen(csv, "r");
    if (!f) {
        fprintf(stderr, "%s: error: cannot read %s\n", t->prog, csv);
        goto done;
    }
    int64_t lineno = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        line[strcspn(line, ",\r\n\t")] = '\0';
        char *fld = line;
        while (*fld == ' ' || *fld == '"')
            fld++;
        size_t k = strlen(fld);
        while (k && (fld[k - 1] == ' ' || fld[k - 1] == '"'))
            fld[--k] = '\0';
        if (!*fld)
            continue;
        if (nv == cap) {
            cap = cap ? cap * 2 : 64;
            vs = realloc(vs, sizeof *vs * (size_t)cap);
            if (!vs)
                die("out of memory");
        }
        /* a first row that is not a mutation is a header */
        int header = lineno == 1 && !(isalpha((unsigned char)fld[0]) && isdigit((unsigned char)fld[1]));
        if (header)
            continue;
        if (!parse_variant(t, fld, wt, L, &vs[nv], csv, lineno, 0))
            goto done;
        nv++;
    }
    if (nv == 0) {
        fprintf(stderr, "%s: error: %s has no mutations\n", t->prog, csv);
        goto done;
    }
    sc = calloc((size_t)nv + 1, sizeof(double));
    int causal = t->obj == OBJECTIVE_CAUSAL;
    int32_t *mut = malloc(sizeof(int32_t) * (size_t)(L + 1));
    for (int64_t i = 0; i < nv; i++) {
        Variant *v = &vs[i];
        if (causal) {
            memcpy(mut, wt, sizeof(int32_t) * (size_t)L);
            for (int m = 0; m < v->n; m++)
                mut[v->pos[m] - 1] = v->mt[m];
            add_causal(t, &r, mut, L, i, 1);
            add_causal(t, &r, wt, L, i, -1);
        } else {
            int64_t w0 = (v->pos[0] / r.S) * r.S;
            for (int m = 1; m < v->n; m++)
                if ((v->pos[m] / r.S) * r.S != w0) {
                    fprintf(stderr, "%s:%lld: error: `%s` spans two windows of seq %lld; the masked marginal masks "
                            "them together in one\n", csv, (long long)i + 1, v->text, (long long)r.S);
                    free(mut);
                    goto done;
                }
            add_masked_row(t, &r, wt, L, i, w0, v->pos, v->n);
            for (int m = 0; m < v->n; m++) {
                rows_query(&r, v->pos[m] - w0, v->mt[m], 1);
                rows_query(&r, v->pos[m] - w0, v->wt[m], -1);
            }
        }
    }
    free(mut);
    if (!rows_run(t, node, &r, sc))
        goto done;
    fprintf(out, "mutant,%s\n", causal ? "log_likelihood_ratio" : "masked_marginal");
    for (int64_t i = 0; i < nv; i++) {
        csv_field(out, vs[i].text);
        fprintf(out, ",%.6f\n", sc[i]);
    }
    printf("scored %lld variants of %s (%s)\n", (long long)nv, ids[0],
           causal ? "log-likelihood ratio" : "masked marginal");
    ok = 1;
done:
    if (f)
        fclose(f);
    free(line);
    for (int64_t i = 0; i < nv; i++)
        free(vs[i].text);
    free(vs);
    free(sc);
    free(wt);
    rows_free(&r);
    fasta_ids_free(ids, nids);
    fasta_set_free(&fs);
    return ok;
}

int trainer_score_main(int argc, char **argv, const Plan *pl)
{
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];
    const char *init = NULL, *fasta = NULL, *outp = NULL, *wtp = NULL, *muts = NULL;
    int64_t threads = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf(usage_score, prog, prog);
            return 0;
        }
        if (!v)
            return trainer_usage_error(prog, "score: %s needs a value", a);
        if (!strcmp(a, "--init"))
            init = v;
        else if (!strcmp(a, "--fasta"))
            fasta = v;
        else if (!strcmp(a, "-o"))
            outp = v;
        else if (!strcmp(a, "--wt"))
            wtp = v;
        else if (!strcmp(a, "--mutations"))
            muts = v;
        else if (!strcmp(a, "--threads")) {
            if (!parse_i64_in(v, 1, 256, &threads))
                return trainer_usage_error(prog, "score: --threads takes an integer in [1, 256], not '%s'", v);
        } else
            return trainer_usage_error(prog, "score: unknown option '%s'", a);
        i++;
    }
    if (!init || !outp || (!fasta == !(wtp || muts)) || (!wtp != !muts))
        return trainer_usage_error(prog, "score needs --init CKPT, -o S.csv and either --fasta Q.fa or --wt WT.fa "
                                   "--mutations M.csv");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_threads(threads ? (int)threads : (int)(ncpu > 0 ? ncpu : 1));
    Trainer *t = calloc(1, sizeof *t);
    int rc = 1;
    if (!t || !infer_open(t, prog, pl, init))
        goto out;
    const IrNode *head = NULL;
    for (int i = 0; i <= t->g->loss->id; i++) {
        const IrNode *n = t->g->nodes[i];
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && !head)
            head = n->src[0];
    }
    if (!head || head->shape[head->rank - 1] != t->alpha->vocab) {
        fprintf(stderr, "%s: error: no logits over the %s alphabet feed the loss\n", prog, t->alpha->name);
        goto out;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", outp, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fprintf(stderr, "%s: error: cannot write %s\n", prog, tmp);
        goto out;
    }
    int ok = fasta ? score_fasta(t, head->id, fasta, out) : score_variants(t, head->id, wtp, muts, out);
    if (fclose(out) != 0)
        ok = 0;
    if (ok && rename(tmp, outp) != 0) {
        fprintf(stderr, "%s: error: cannot write %s\n", prog, outp);
        ok = 0;
    }
    if (!ok)
        unlink(tmp);
    else
        rc = 0;
out:
    if (t)
        infer_close(t);
    free(t);
    return rc;
}
