/* alignment.c - CLUSTAL and aligned FASTA, and column conservation (alignment.h). */
#include "alignment.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../util/util.h"

typedef struct Reader {
    gzFile gz;
    char *buf;
    size_t cap;
    int64_t line;
} Reader;

/* the next line, without its line ending; NULL at the end */
static char *next_line(Reader *r)
{
    size_t n = 0;
    for (;;) {
        if (r->cap - n < 2) {
            r->cap = r->cap ? r->cap * 2 : 4096;
            r->buf = realloc(r->buf, r->cap);
            if (!r->buf)
                die("out of memory");
        }
        if (!gzgets(r->gz, r->buf + n, (int)(r->cap - n))) {
            if (n == 0)
                return NULL;
            break;
        }
        n += strlen(r->buf + n);
        if (n && r->buf[n - 1] == '\n')
            break;
    }
    while (n && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r'))
        r->buf[--n] = '\0';
    r->line++;
    return r->buf;
}

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 0;
}

int64_t alignment_find(const Alignment *a, const char *name)
{
    for (int64_t i = 0; i < a->nseq; i++)
        if (strcmp(a->names[i], name) == 0)
            return i;
    return -1;
}

/* the row called name (a new one when it is not there yet); lens[] its length */
static int64_t row_of(Alignment *a, const char *name, size_t namelen, size_t **lens, size_t **caps)
{
    for (int64_t i = 0; i < a->nseq; i++)
        if (strlen(a->names[i]) == namelen && memcmp(a->names[i], name, namelen) == 0)
            return i;
    int64_t i = a->nseq++;
    a->names = realloc(a->names, sizeof(char *) * (size_t)a->nseq);
    a->rows = realloc(a->rows, sizeof(char *) * (size_t)a->nseq);
    *lens = realloc(*lens, sizeof(size_t) * (size_t)a->nseq);
    *caps = realloc(*caps, sizeof(size_t) * (size_t)a->nseq);
    if (!a->names || !a->rows || !*lens || !*caps)
        die("out of memory");
    a->names[i] = strndup(name, namelen);
    a->rows[i] = malloc(256);
    if (!a->names[i] || !a->rows[i])
        die("out of memory");
    a->rows[i][0] = '\0';
    (*lens)[i] = 0;
    (*caps)[i] = 256;
    return i;
}

static void row_append(Alignment *a, int64_t i, const char *s, size_t n, size_t *lens, size_t *caps)
{
    while (lens[i] + n + 1 > caps[i]) {
        caps[i] *= 2;
        a->rows[i] = realloc(a->rows[i], caps[i]);
        if (!a->rows[i])
            die("out of memory");
    }
    for (size_t k = 0; k < n; k++)
        a->rows[i][lens[i] + k] = (char)toupper((unsigned char)s[k]);
    lens[i] += n;
    a->rows[i][lens[i]] = '\0';
}

/* a residue or gap character of an aligned sequence */
static int aligned_char(int c) { return isalpha(c) || c == '-' || c == '.'; }

int alignment_read(const char *path, Alignment *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    char oerr[1024];
    int fd = open_regular(path, oerr, sizeof oerr);
    if (fd < 0)
        return fail(err, errlen, "error: %s", oerr);
    Reader r = {gzdopen(fd, "rb"), NULL, 0, 0};
    if (!r.gz)
        return fail(err, errlen, "error: %s: cannot read", path);
    size_t *lens = NULL, *caps = NULL;
    int ok = 0, fasta = -1;
    int64_t cur = -1;       /* FASTA: the record being read */
    int64_t block_first = 0; /* CLUSTAL: the line where this block started */
    int64_t *seen = NULL;    /* CLUSTAL: the line each row last grew on, within this block */
    char *s;
    while ((s = next_line(&r))) {
        if (fasta < 0) {
            if (!*s)
                continue;
            if (s[0] == '>') {
                fasta = 1;
            } else if (strncmp(s, "CLUSTAL", 7) == 0) {
                fasta = 0;
                continue;
            } else {
                fail(err, errlen, "%s:%lld: error: not an alignment: CLUSTAL (a first line starting with "
                     "\"CLUSTAL\") or aligned FASTA (records starting with '>') expected", path, (long long)r.line);
                goto done;
            }
        }
        if (fasta) {
            if (s[0] == '>') {
                size_t n = strcspn(s + 1, " \t");
                if (n == 0) {
                    fail(err, errlen, "%s:%lld: error: a record without a name", path, (long long)r.line);
                    goto done;
                }
                int64_t before = a->nseq;
                cur = row_of(a, s + 1, n, &lens, &caps);
                if (a->nseq == before) {
                    fail(err, errlen, "%s:%lld: error: the name `%s` is given twice", path, (long long)r.line,
                         a->names[cur]);
                    goto done;
                }
                continue;
            }
            if (cur < 0) {
                fail(err, errlen, "%s:%lld: error: aligned residues before the first '>' header", path,
                     (long long)r.line);
                goto done;
            }
            for (const char *p = s; *p; p++) {
                if (isspace((unsigned char)*p))
                    continue;
                if (!aligned_char((unsigned char)*p)) {
                    fail(err, errlen, "%s:%lld: error: `%c` is neither a residue letter nor a gap", path,
                         (long long)r.line, *p);
                    goto done;
                }
                row_append(a, cur, p, 1, lens, caps);
            }
            continue;
        }
        /* CLUSTAL: blank and consensus lines end a block */
        if (!*s || s[0] == ' ' || s[0] == '\t' || s[0] == '*' || s[0] == ':' || s[0] == '.') {
            block_first = r.line + 1;
            continue;
        }
        size_t n = strcspn(s, " \t");
        const char *res = s + n;
        while (*res == ' ' || *res == '\t')
            res++;
        size_t m = strcspn(res, " \t");
        if (m == 0) {
            fail(err, errlen, "%s:%lld: error: `%s`: a name and its aligned residues expected", path,
                 (long long)r.line, s);
            goto done;
        }
        for (size_t k = 0; k < m; k++)
            if (!aligned_char((unsigned char)res[k])) {
                fail(err, errlen, "%s:%lld: error: `%c` is neither a residue letter nor a gap", path,
                     (long long)r.line, res[k]);
                goto done;
            }
        int64_t before = a->nseq;
        int64_t i = row_of(a, s, n, &lens, &caps);
        if (a->nseq != before) {
            seen = realloc(seen, sizeof(int64_t) * (size_t)a->nseq);
            if (!seen)
                die("out of memory");
            seen[i] = 0;
        }
        if (seen[i] >= block_first) {
            fail(err, errlen, "%s:%lld: error: `%s` appears twice in one block (line %lld)", path, (long long)r.line,
                 a->names[i], (long long)seen[i]);
            goto done;
        }
        seen[i] = r.line;
        row_append(a, i, res, m, lens, caps);
    }
    {
        int zerr;
        const char *msg = gzerror(r.gz, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END) {
            fail(err, errlen, "%s: error: %s", path, zerr == Z_ERRNO ? "read error" : msg);
            goto done;
        }
    }
    if (a->nseq == 0) {
        fail(err, errlen, "%s: error: no aligned sequences", path);
        goto done;
    }
    for (int64_t i = 0; i < a->nseq; i++)
        if (lens[i] != lens[0]) {
            fail(err, errlen, "%s: error: `%s` has %zu aligned columns but `%s` has %zu: the rows of an alignment "
                 "have one length", path, a->names[i], lens[i], a->names[0], lens[0]);
            goto done;
        }
    a->ncol = (int64_t)lens[0];
    ok = 1;
done:
    gzclose(r.gz);
    free(r.buf);
    free(lens);
    free(caps);
    free(seen);
    if (!ok)
        alignment_free(a);
    return ok;
}

void alignment_free(Alignment *a)
{
    for (int64_t i = 0; i < a->nseq; i++) {
        free(a->names[i]);
        free(a->rows[i]);
    }
    free(a->names);
    free(a->rows);
    memset(a, 0, sizeof *a);
}

static int by_count_desc(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

int64_t alignment_conservation(const Alignment *a, double min_occupancy, double *out)
{
    int64_t kept = 0;
    for (int64_t c = 0; c < a->ncol; c++) {
        int64_t counts[256] = {0}, n = 0;
        for (int64_t i = 0; i < a->nseq; i++) {
            char ch = a->rows[i][c];
            if (!alignment_is_gap(ch)) {
                counts[(unsigned char)ch]++;
                n++;
            }
        }
        if (n == 0 || (double)n < min_occupancy * (double)a->nseq) {
            out[c] = NAN;
            continue;
        }
        qsort(counts, 256, sizeof counts[0], by_count_desc);
        double h = 0;
        for (int k = 0; k < 256 && counts[k]; k++) {
            double p = (double)counts[k] / (double)n;
            h -= p * log(p);
        }
        out[c] = 1 - h / log(20.0);
        kept++;
    }
    return kept;
}
