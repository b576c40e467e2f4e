/* diag.c - formatting of located errors: "file:line:col: error: ...", the
 * source line and a caret. Lines are shown sanitised (control bytes as '?')
 * and clipped around the column, so binary garbage or a 10 MB line prints a
 * readable message rather than flooding the terminal. */
#include "diag.h"

#include <stdarg.h>
#include <string.h>

enum { DIAG_CLIP = 100 };  /* columns of context shown either side */

void diag_init(Diag *d, const char *path, const char *text, size_t len, FILE *out)
{
    memset(d, 0, sizeof *d);
    d->path = path;
    d->text = text;
    d->text_len = len;
    d->out = out;
    d->max_errors = 20;
}

int diag_full(const Diag *d) { return d->max_errors > 0 && d->nerrors >= d->max_errors; }

/* Finds the start of 1-based line `line` (linear scan: errors are rare). */
static const char *line_start(const Diag *d, int line, size_t *len)
{
    if (!d->text || line < 1)
        return NULL;
    const char *p = d->text, *end = d->text + d->text_len;
    for (int l = 1; l < line; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return NULL;
        p = nl + 1;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    if (n && p[n - 1] == '\r')
        n--;
    *len = n;
    return p;
}

static void show_line(const Diag *d, SrcLoc loc)
{
    size_t n;
    const char *s = line_start(d, loc.line, &n);
    if (!s)
        return;
    size_t col = loc.col > 0 ? (size_t)loc.col - 1 : 0;
    if (col > n)
        col = n;
    size_t from = col > DIAG_CLIP ? col - DIAG_CLIP : 0;
    size_t to = n - col > DIAG_CLIP ? col + DIAG_CLIP : n;
    fprintf(d->out, "%5d | %s", loc.line, from ? "..." : "");
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc(c == '\t' ? '\t' : (c < 32 || c >= 127) ? '?' : c, d->out);
    }
    fprintf(d->out, "%s\n      | %s", to < n ? "..." : "", from ? "   " : "");
    for (size_t i = from; i < col; i++)
        fputc(s[i] == '\t' ? '\t' : ' ', d->out);
    fputc('^', d->out);
    for (int i = 1; i < loc.len && col + (size_t)i < to; i++)
        fputc('~', d->out);
    fputc('\n', d->out);
}

/* Returns 1 if this (kind, location, text) was shown before; remembers it. */
static int seen_before(Diag *d, const char *kind, SrcLoc loc, const char *fmt, va_list ap)
{
    char msg[512];
    va_list ap2;
    va_copy(ap2, ap);
    vsnprintf(msg, sizeof msg, fmt, ap2);
    va_end(ap2);
    unsigned long long h = 1469598103934665603ull;
    h = (h ^ (unsigned)loc.line) * 1099511628211ull;
    h = (h ^ (unsigned)loc.col) * 1099511628211ull;
    for (const char *p = kind; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (const char *p = msg; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    if (h == 0)
        h = 1;
    size_t n = sizeof d->seen / sizeof d->seen[0];
    for (size_t i = h % n, k = 0; k < n; i = (i + 1) % n, k++) {
        if (d->seen[i] == h)
            return 1;
        if (d->seen[i] == 0) {
            d->seen[i] = h;
            return 0;
        }
    }
    return 0;  /* table full: show it */
}

static void report(Diag *d, const char *kind, SrcLoc loc, const char *fmt, va_list ap)
{
    if (seen_before(d, kind, loc, fmt, ap))
        return;
    if (loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: ", d->path, loc.line, loc.col, kind);
    else
        fprintf(d->out, "%s: %s: ", d->path, kind);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    if (loc.line > 0)
        show_line(d, loc);
}

void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...)
{
    d->nerrors++;
    if (d->max_errors > 0 && d->nerrors > d->max_errors) {
        d->suppressed++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    report(d, "error", loc, fmt, ap);
    va_end(ap);
}

void diag_warning(Diag *d, SrcLoc loc, const char *fmt, ...)
{
    d->nwarnings++;
    va_list ap;
    va_start(ap, fmt);
    report(d, "warning", loc, fmt, ap);
    va_end(ap);
}

void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...)
{
    if (d->max_errors > 0 && d->nerrors > d->max_errors)
        return;
    va_list ap;
    va_start(ap, fmt);
    report(d, "note", loc, fmt, ap);
    va_end(ap);
}

void diag_finish(Diag *d)
{
    if (d->suppressed)
        fprintf(d->out, "%s: %d more errors not shown (stopped after %d)\n", d->path,
                d->suppressed, d->max_errors);
}
