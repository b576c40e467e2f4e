/* filecheck.c - a small FileCheck of our own, for golden tests.
 *
 *   filecheck [--check-prefix P] CHECKFILE < input
 *
 * Reads directives from CHECKFILE (any line containing `P:`, `P-NEXT:`,
 * `P-SAME:`, `P-NOT:`, `P-EMPTY:` or `P-LABEL:`, P defaulting to CHECK) and
 * matches them in order against the lines of standard input:
 *
 *   CHECK: pat        a later line contains pat
 *   CHECK-NEXT: pat   the line right after the previous match contains pat
 *   CHECK-SAME: pat   the rest of the previous match's line contains pat
 *   CHECK-EMPTY:      the next line is empty
 *   CHECK-NOT: pat    no line between the previous and the next match has pat
 *   CHECK-LABEL: pat  like CHECK (kept for readability of long files)
 *
 * A pattern is literal text, except that {{regex}} is a POSIX extended
 * regular expression. Leading and trailing blanks of a pattern are ignored.
 * Exit 0 when everything matched, 1 with a description otherwise. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { D_CHECK, D_NEXT, D_SAME, D_NOT, D_EMPTY } DirKind;

typedef struct Directive {
    DirKind kind;
    char *pattern;
    regex_t re;
    int line;  /* in the check file */
} Directive;

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
    }
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

/* Splits text into NUL-terminated lines in place. */
static char **split_lines(char *text, size_t len, int *count)
{
    int cap = 1024, n = 0;
    char **lines = malloc(sizeof(char *) * (size_t)cap);
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl)
            *nl = 0;
        if (n == cap) {
            cap *= 2;
            lines = realloc(lines, sizeof(char *) * (size_t)cap);
        }
        lines[n++] = p;
        if (!nl)
            break;
        p = nl + 1;
    }
    *count = n;
    return lines;
}

/* Turns a pattern with {{regex}} parts into one extended regex. */
static char *to_regex(const char *pat)
{
    size_t cap = strlen(pat) * 2 + 8, o = 0;
    char *out = malloc(cap);
    for (const char *p = pat; *p;) {
        if (p[0] == '{' && p[1] == '{') {
            const char *close = strstr(p + 2, "}}");
            if (close) {
                size_t n = (size_t)(close - (p + 2));
                out[o++] = '(';
                memcpy(out + o, p + 2, n);
                o += n;
                out[o++] = ')';
                p = close + 2;
                continue;
            }
        }
        if (strchr(".[]()*+?{}|^$\\", *p))
            out[o++] = '\\';
        out[o++] = *p++;
    }
    out[o] = 0;
    return out;
}

static int parse_directives(char **lines, int nlines, const char *prefix, Directive **out)
{
    Directive *d = calloc((size_t)nlines + 1, sizeof *d);
    int n = 0;
    static const struct { const char *suffix; DirKind kind; } kinds[] = {
        {"-NEXT:", D_NEXT}, {"-SAME:", D_SAME}, {"-NOT:", D_NOT}, {"-EMPTY:", D_EMPTY},
        {"-LABEL:", D_CHECK}, {":", D_CHECK},
    };
    size_t plen = strlen(prefix);
    for (int i = 0; i < nlines; i++) {
        const char *hit = lines[i];
        while ((hit = strstr(hit, prefix)) != NULL) {
            /* the prefix must start a word: CHECK, not XCHECK */
            if (hit != lines[i] && (hit[-1] == '-' || hit[-1] == '_' ||
                                    (hit[-1] >= 'A' && hit[-1] <= 'Z'))) {
                hit += plen;
                continue;
            }
            break;
        }
        if (!hit)
            continue;
        const char *after = hit + plen;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            size_t sl = strlen(kinds[k].suffix);
            if (strncmp(after, kinds[k].suffix, sl) != 0)
                continue;
            const char *p = after + sl;
            while (*p == ' ' || *p == '\t')
                p++;
            size_t len = strlen(p);
            while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r'))
                len--;
            d[n].kind = kinds[k].kind;
            d[n].pattern = strndup(p, len);
            d[n].line = i + 1;
            char *re = to_regex(d[n].pattern);
            int rc = regcomp(&d[n].re, re, REG_EXTENDED | REG_NEWLINE);
            free(re);
            if (rc != 0) {
                fprintf(stderr, "filecheck: bad regex in check line %d: %s\n", i + 1, d[n].pattern);
                exit(2);
            }
            if (d[n].kind != D_EMPTY && len == 0 && d[n].kind != D_NOT) {
                fprintf(stderr, "filecheck: empty pattern on check line %d\n", i + 1);
                exit(2);
            }
            n++;
            break;
        }
    }
    *out = d;
    return n;
}

/* Finds pattern in s; returns the offset just past the match or -1. */
static long match_at(const Directive *d, const char *s)
{
    regmatch_t m;
    if (regexec(&d->re, s, 1, &m, 0) != 0)
        return -1;
    return (long)m.rm_eo;
}

static void show_context(char **in, int nin, int from)
{
    fprintf(stderr, "  input from line %d:\n", from + 1);
    for (int i = from; i < nin && i < from + 8; i++)
        fprintf(stderr, "  %5d | %s\n", i + 1, in[i]);
}

int main(int argc, char **argv)
{
    const char *prefix = "CHECK", *checkfile = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check-prefix") == 0 && i + 1 < argc)
            prefix = argv[++i];
        else if (!checkfile)
            checkfile = argv[i];
    }
    if (!checkfile) {
        fprintf(stderr, "usage: filecheck [--check-prefix P] CHECKFILE < input\n");
        return 2;
    }
    FILE *cf = fopen(checkfile, "rb");
    if (!cf) {
        perror(checkfile);
        return 2;
    }
    size_t clen, ilen;
    char *ctext = read_all(cf, &clen);
    fclose(cf);
    char *itext = read_all(stdin, &ilen);
    if (!ctext || !itext)
        return 2;
    int ncl, nin;
    char **clines = split_lines(ctext, clen, &ncl);
    char **in = split_lines(itext, ilen, &nin);
    Directive *d;
    int nd = parse_directives(clines, ncl, prefix, &d);
    if (nd == 0) {
        fprintf(stderr, "filecheck: no %s: lines in %s\n", prefix, checkfile);
        return 2;
    }
    int pos = 0;          /* next input line to search */
    int last = -1;        /* line of the previous match */
    long last_col = 0;    /* offset after the previous match */
    int not_from = 0;     /* CHECK-NOT scan window start */
    int failed = 0;
    for (int k = 0; k < nd && !failed; k++) {
        Directive *x = &d[k];
        switch (x->kind) {
        case D_NOT:
            continue;  /* checked when the next positive match is known */
        case D_SAME: {
            long off = last >= 0 ? match_at(x, in[last] + last_col) : -1;
            if (off < 0) {
                fprintf(stderr, "%s:%d: CHECK-SAME not found on input line %d: %s\n", checkfile, x->line,
                        last + 1, x->pattern);
                failed = 1;
            } else {
                last_col += off;
            }
            break;
        }
        case D_NEXT:
        case D_EMPTY: {
            int want = last + 1;
            int ok = want < nin && (x->kind == D_EMPTY ? in[want][0] == 0 : match_at(x, in[want]) >= 0);
            if (!ok) {
                fprintf(stderr, "%s:%d: %s not found on the line after the previous match: %s\n", checkfile,
                        x->line, x->kind == D_EMPTY ? "CHECK-EMPTY" : "CHECK-NEXT", x->pattern);
                show_context(in, nin, want < nin ? want : nin - 1 < 0 ? 0 : nin - 1);
                failed = 1;
            } else {
                last = want;
                last_col = x->kind == D_EMPTY ? 0 : match_at(x, in[want]);
                pos = want + 1;
            }
            break;
        }
        case D_CHECK: {
            int found = -1;
            long off = 0;
            for (int i = pos; i < nin; i++)
                if ((off = match_at(x, in[i])) >= 0) {
                    found = i;
                    break;
                }
            if (found < 0) {
                fprintf(stderr, "%s:%d: CHECK not found: %s\n", checkfile, x->line, x->pattern);
                show_context(in, nin, pos < nin ? pos : 0);
                failed = 1;
                break;
            }
            /* CHECK-NOTs between the previous match and this one */
            for (int j = k - 1; j >= 0 && d[j].kind == D_NOT; j--)
                for (int i = not_from; i < found; i++)
                    if (match_at(&d[j], in[i]) >= 0) {
                        fprintf(stderr, "%s:%d: CHECK-NOT matched on input line %d: %s\n  %s\n", checkfile,
                                d[j].line, i + 1, d[j].pattern, in[i]);
                        failed = 1;
                    }
            last = found;
            last_col = off;
            pos = found + 1;
            not_from = pos;
            break;
        }
        }
    }
    /* trailing CHECK-NOTs run to the end of the input */
    if (!failed)
        for (int j = nd - 1; j >= 0 && d[j].kind == D_NOT; j--)
            for (int i = not_from; i < nin; i++)
                if (match_at(&d[j], in[i]) >= 0) {
                    fprintf(stderr, "%s:%d: CHECK-NOT matched on input line %d: %s\n  %s\n", checkfile, d[j].line,
                            i + 1, d[j].pattern, in[i]);
                    failed = 1;
                }
    for (int k = 0; k < nd; k++) {
        regfree(&d[k].re);
        free(d[k].pattern);
    }
    free(d);
    free(clines);
    free(in);
    free(ctext);
    free(itext);
    return failed;
}
