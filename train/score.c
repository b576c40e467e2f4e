/* score.c - `TRAIN_BINARY score`: likelihoods from a trained model, on the CPU or the GPU.
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
 *   score --init CKPT --conservation ALN [--wt-id ID] -o S.csv
 *       every single substitution of a wild type taken from an alignment,
 *       scored as above and averaged per position, against the conservation of
 *       its column (data/alignment.h, from the alignment alone): the Spearman
 *       rank correlation; columns position,wild_type,column,conservation,
 *       mean_score.
 * Long sequences are cut into the windows of --eval (train/eval.c): the
 * context of a position is its window. The log-probabilities come from the
 * LM head's logits (the linear into the loss), read by the backend's
 * forward_probe (CPU or GPU: --device), with a log-softmax in double on the host. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/alignment.h"
#include "../runtime/cpu/cpu.h"
#include "../util/util.h"
#include "trainer.h"

static const char *const usage_score =
    "usage: %s score --init CKPT --fasta Q.fa -o S.csv [--per-token T.csv] [--threads N] [--device auto|cpu|cuda]\n"
    "       %s score --init CKPT --wt WT.fa --mutations M.csv -o S.csv [--threads N] [--device auto|cpu|cuda]\n"
    "       %s score --init CKPT --conservation ALN [--wt-id ID] -o S.csv [--threads N] [--device auto|cpu|cuda]\n"
    "  per-sequence log-likelihood (causal LM) or pseudo-log-likelihood (masked LM); --per-token writes\n"
    "  each scored token's log-probability (id,position,token,token_id,log_prob; position 1..L the\n"
    "  residues, L+1 the EOS);\n"
    "  or variant scores (A23G, A23G:K45R): log-likelihood ratio (causal), masked marginal (masked);\n"
    "  or, against an alignment (CLUSTAL or aligned FASTA, .gz too), every single substitution of the\n"
    "  wild type (the row ID, default the first; ungapped) to the other 19 amino acids, averaged per\n"
    "  position, against its column's conservation (1 - entropy/ln 20, from the alignment alone, the\n"
    "  columns where at least half the rows have a residue): the Spearman rank correlation\n";

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

/* --per-token T.csv: id,position,token,token_id,log_prob for every query (the record's position: 1..L the
 * residues, L+1 the EOS); the k-th query of a sequence is record position k + 1 */
static int write_per_token(Trainer *t, const char *path, const InferRows *r, const double *lp, char **ids)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "%s: error: cannot write %s\n", t->prog, tmp);
        return 0;
    }
    fprintf(f, "id,position,token,token_id,log_prob\n");
    for (int64_t q = 0, k = 0; q < r->nq; q++) {
        k = q > 0 && r->qown[q] == r->qown[q - 1] ? k + 1 : 0;
        csv_field(f, ids[r->qown[q]]);
        fprintf(f, ",%lld,", (long long)k + 1);
        csv_field(f, t->alpha->tokens[r->qtok[q]]);
        fprintf(f, ",%d,%.9g\n", (int)r->qtok[q], lp[q]);
    }
    int ok = fclose(f) == 0;
    if (ok && rename(tmp, path) != 0)
        ok = 0;
    if (!ok) {
        fprintf(stderr, "%s: error: cannot write %s\n", t->prog, path);
        unlink(tmp);
    }
    return ok;
}

static int score_fasta(Trainer *t, int node, const char *fasta, const char *per_token, FILE *out)
{
    FastaSet fs;
    char **ids = NULL;
    int64_t nids = 0;
    int ok = 0;
    double *sc = NULL, *lp = NULL;
    int causal = t->obj == OBJECTIVE_CAUSAL;
    InferRows r = {.S = t->tr.seq};
    if (!read_fasta_tokens(t, fasta, &fs, &ids, &nids))
        goto done;
    sc = calloc((size_t)fs.nseq + 1, sizeof(double));
    if (!sc)
        die("out of memory");
    if (causal) {
        for (int64_t s = 0; s < fs.nseq; s++) {
            int32_t *res = seq_tokens(&fs, s);
            infer_causal_rows(t, &r, res, fasta_seq_len(&fs, s), s, 1);
            free(res);
        }
    } else {
        infer_pll_rows(t, &r, &fs);
    }
    if (per_token && !(lp = malloc(sizeof(double) * (size_t)(r.nq + 1))))
        die("out of memory");
    if (!infer_rows_run(t, node, &r, sc, lp) || (per_token && !write_per_token(t, per_token, &r, lp, ids)))
        goto done;
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
           (long long)t->tr.seq);
    ok = 1;
done:
    free(sc);
    free(lp);
    infer_rows_free(&r);
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

/* sc[i] = the score of variant i against the wild type wt[0..L): the
 * log-likelihood ratio (causal) or the masked marginal (masked; rows masking
 * the same positions as the variant before are shared). 1, or 0 after a
 * message (src names where the variants came from). */
static int run_variants(Trainer *t, int node, const int32_t *wt, int64_t L, const Variant *vs, int64_t nv,
                        const char *src, double *sc)
{
    InferRows r = {.S = t->tr.seq};
    int causal = t->obj == OBJECTIVE_CAUSAL, ok = 0;
    int32_t *mut = malloc(sizeof(int32_t) * (size_t)(L + 1));
    if (!mut)
        die("out of memory");
    for (int64_t i = 0; i < nv; i++) {
        const Variant *v = &vs[i];
        if (causal) {
            memcpy(mut, wt, sizeof(int32_t) * (size_t)L);
            for (int m = 0; m < v->n; m++)
                mut[v->pos[m] - 1] = v->mt[m];
            infer_causal_rows(t, &r, mut, L, i, 1);
            infer_causal_rows(t, &r, wt, L, i, -1);
        } else {
            int64_t w0 = (v->pos[0] / r.S) * r.S;
            for (int m = 1; m < v->n; m++)
                if ((v->pos[m] / r.S) * r.S != w0) {
                    fprintf(stderr, "%s: error: `%s` spans two windows of seq %lld; the masked marginal masks "
                            "them together in one\n", src, v->text, (long long)r.S);
                    goto done;
                }
            int same = i > 0 && vs[i - 1].n == v->n;
            for (int m = 0; same && m < v->n; m++)
                same = vs[i - 1].pos[m] == v->pos[m];
            if (!same)
                infer_masked_row(t, &r, wt, L, w0, v->pos, v->n);
            for (int m = 0; m < v->n; m++) {
                infer_rows_query(&r, i, v->pos[m] - w0, v->mt[m], 1);
                infer_rows_query(&r, i, v->pos[m] - w0, v->wt[m], -1);
            }
        }
    }
    ok = infer_rows_run(t, node, &r, sc, NULL);
done:
    free(mut);
    infer_rows_free(&r);
    return ok;
}

static int score_variants(Trainer *t, int node, const char *wtpath, const char *csv, FILE *out)
{
    FastaSet fs;
    char **ids = NULL;
    int64_t nids = 0, nv = 0, cap = 0;
    Variant *vs = NULL;
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
    if (!sc)
        die("out of memory");
    int causal = t->obj == OBJECTIVE_CAUSAL;
    if (!run_variants(t, node, wt, L, vs, nv, csv, sc))
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
    fasta_ids_free(ids, nids);
    fasta_set_free(&fs);
    return ok;
}

/* --conservation ALN: every single substitution of the wild type (a row of the
 * alignment, ungapped) to the other 19 standard amino acids, scored as
 * variants; per position the mean over its 19, against the conservation of
 * its column computed from the alignment alone (data/alignment.h: 1 - H/ln 20,
 * columns where at least half the sequences have a residue); printed: the
 * Spearman rank correlation. CSV: position,wild_type,column,conservation,
 * mean_score (conservation empty for a column left out). */
static int score_conservation(Trainer *t, int node, const char *alnpath, const char *wtid, FILE *out)
{
    static const char aa[] = "ACDEFGHIKLMNPQRSTVWY";
    Alignment al;
    char err[1024];
    if (t->alpha->kind != ALPHABET_PROTEIN) {
        fprintf(stderr, "%s: error: --conservation compares substitutions among the 20 amino acids: it needs a "
                "protein model, and this one's alphabet is %s\n", t->prog, t->alpha->name);
        return 0;
    }
    if (!alignment_read(alnpath, &al, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    int64_t w = wtid ? alignment_find(&al, wtid) : 0;
    if (w < 0) {
        Suggest sg = {0};
        for (int64_t i = 0; i < al.nseq; i++)
            suggest_try(&sg, wtid, al.names[i]);
        fprintf(stderr, "%s: error: %s has no sequence named `%s`%s%s%s (its first is `%s`)\n", t->prog, alnpath,
                wtid, sg.best ? "; did you mean `" : "", sg.best ? sg.best : "", sg.best ? "`?" : "", al.names[0]);
        alignment_free(&al);
        return 0;
    }
    double *cons = malloc(sizeof(double) * (size_t)(al.ncol + 1));
    int64_t *colof = malloc(sizeof(int64_t) * (size_t)(al.ncol + 1));
    int32_t *wt = malloc(sizeof(int32_t) * (size_t)(al.ncol + 1));
    Variant *vs = malloc(sizeof(Variant) * (size_t)(al.ncol * 19 + 1));
    double *sc = calloc((size_t)(al.ncol * 19 + 1), sizeof(double));
    double *xs = malloc(sizeof(double) * (size_t)(al.ncol + 1)), *ys = malloc(sizeof(double) * (size_t)(al.ncol + 1));
    if (!cons || !colof || !wt || !vs || !sc || !xs || !ys)
        die("out of memory");
    alignment_conservation(&al, 0.5, cons);
    int64_t L = 0, nv = 0;
    for (int64_t c = 0; c < al.ncol; c++) {
        char ch = al.rows[w][c];
        if (alignment_is_gap(ch))
            continue;
        int id = alphabet_encode(t->alpha, ch);
        wt[L] = id < 0 ? t->alpha->unk : id;
        colof[L++] = c;
    }
    for (int64_t i = 0; i < L; i++) {
        char wc = al.rows[w][colof[i]];
        if (!strchr(aa, wc))
            continue;
        for (const char *m = aa; *m; m++) {
            if (*m == wc)
                continue;
            Variant *v = &vs[nv++];
            memset(v, 0, sizeof *v);
            v->n = 1;
            v->pos[0] = i + 1;
            v->wt[0] = wt[i];
            v->mt[0] = alphabet_encode(t->alpha, *m);
        }
    }
    int ok = nv > 0;
    if (!ok)
        fprintf(stderr, "%s: error: %s: `%s` has no standard amino acid to substitute\n", t->prog, alnpath,
                al.names[w]);
    if (ok)
        ok = run_variants(t, node, wt, L, vs, nv, alnpath, sc);
    if (ok) {
        fprintf(out, "position,wild_type,column,conservation,mean_score\n");
        int64_t n = 0;
        for (int64_t v = 0; v < nv;) {
            int64_t i = vs[v].pos[0] - 1, e = v;
            double sum = 0;
            for (; e < nv && vs[e].pos[0] == vs[v].pos[0]; e++)
                sum += sc[e];
            double mean = sum / (double)(e - v), c = cons[colof[i]];
            fprintf(out, "%lld,%c,%lld,", (long long)i + 1, al.rows[w][colof[i]], (long long)colof[i] + 1);
            if (!isnan(c)) {
                fprintf(out, "%.6f", c);
                xs[n] = mean;
                ys[n++] = c;
            }
            fprintf(out, ",%.6f\n", mean);
            v = e;
        }
        double rho = spearman(xs, ys, n);
        printf("%s: %lld residues, %lld substitutions (%s), %lld positions in columns with >= 50%% residues; "
               "Spearman(mean substitution score, conservation) = %.3f\n", al.names[w], (long long)L, (long long)nv,
               t->obj == OBJECTIVE_CAUSAL ? "log-likelihood ratio" : "masked marginal", (long long)n, rho);
    }
    free(cons);
    free(colof);
    free(wt);
    free(vs);
    free(sc);
    free(xs);
    free(ys);
    alignment_free(&al);
    return ok;
}

int trainer_score_main(int argc, char **argv, const Plan *pl)
{
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];
    const char *init = NULL, *fasta = NULL, *outp = NULL, *wtp = NULL, *muts = NULL, *aln = NULL, *wtid = NULL,
               *per_token = NULL;
    int64_t threads = 0;
    const char *device = "auto";
    static const char *const known[] = {"--init", "--fasta", "-o", "--wt", "--mutations", "--conservation",
                                        "--wt-id", "--per-token", "--threads", "--device", "--help", NULL};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf(usage_score, prog, prog, prog);
            return 0;
        }
        int k = 0;
        while (known[k] && strcmp(known[k], a))
            k++;
        if (!known[k])
            return trainer_unknown_option(prog, "score", a, known);
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
        else if (!strcmp(a, "--conservation"))
            aln = v;
        else if (!strcmp(a, "--wt-id"))
            wtid = v;
        else if (!strcmp(a, "--per-token"))
            per_token = v;
        else if (!strcmp(a, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return trainer_usage_error(prog, "score: --device must be auto, cpu or cuda, not '%s'", v);
            device = v;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_i64_in(v, 1, 256, &threads))
                return trainer_usage_error(prog, "score: --threads takes an integer in [1, 256], not '%s'", v);
        }
        i++;
    }
    if (!init || !outp || (!!fasta + !!(wtp || muts) + !!aln) != 1 || (!wtp != !muts))
        return trainer_usage_error(prog, "score needs --init CKPT, -o S.csv and one of --fasta Q.fa, --wt WT.fa "
                                   "--mutations M.csv, or --conservation ALN");
    if (per_token && !fasta)
        return trainer_usage_error(prog, "score: --per-token goes with --fasta Q.fa");
    if (wtid && !aln)
        return trainer_usage_error(prog, "score: --wt-id names the wild type within --conservation ALN");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_threads(threads ? (int)threads : (int)(ncpu > 0 ? ncpu : 1));
    Trainer *t = calloc(1, sizeof *t);
    int rc = 1;
    if (!t || !infer_open(t, prog, pl, init, device))
        goto out;
    int head = infer_logits_node(t);
    if (head < 0) {
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
    int ok = fasta ? score_fasta(t, head, fasta, per_token, out)
             : aln ? score_conservation(t, head, aln, wtid, out)
                   : score_variants(t, head, wtp, muts, out);
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
