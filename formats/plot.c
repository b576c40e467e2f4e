/* plot.c - metrics JSONL -> loss-curve SVG (see plot.h for the input rules).
 *
 * Two halves: plot_load_metrics() turns the file into sorted, de-duplicated
 * (step, value) series, and render_svg() lays them out on a fixed 900x540
 * canvas. The SVG is built in memory and written in one go, so a failure
 * never leaves half a picture on disk. Coordinates carry one decimal and
 * long series are thinned per pixel column, so a million-step run still
 * gives a file of a few tens of kilobytes. */
#include "plot.h"
#include "plot_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util/util.h"

#define COLOR_TRAIN "#1f77b4"
#define COLOR_VAL "#e6550d"
#define COLOR_REF "#555555"
#define COLOR_BAD "#d62728"

void plot_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ======================================================================
 * Loading
 * ====================================================================== */

static int series_push(Series *s, double step, double value, size_t seq)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        Point *p = realloc(s->p, cap * sizeof *p);
        if (!p)
            return -1;
        s->p = p;
        s->cap = cap;
    }
    s->p[s->n++] = (Point){step, value, seq};
    return 0;
}

static int point_cmp(const void *a, const void *b)
{
    const Point *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sort by step and keep the last record of each step: a run resumed from a
 * checkpoint logs the steps after the checkpoint again, and the newer
 * numbers are the ones that describe the weights that survived. */
static void series_finish(Series *s)
{
    if (s->n > 1)
        qsort(s->p, s->n, sizeof *s->p, point_cmp);
    size_t out = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (i + 1 < s->n && s->p[i + 1].step == s->p[i].step)
            continue;
        s->p[out++] = s->p[i];
    }
    s->n = out;
    s->nonfinite = s->nfinite = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (isfinite(s->p[i].value))
            s->nfinite++;
        else
            s->nonfinite++;
    }
}

static int is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '+' || c == '-';
}

/* Copy of line with the non-JSON tokens NaN, Infinity, -Infinity (Python's
 * json.dumps), and nan/inf (C's printf), outside strings, replaced by null.
 * Only tried after a line fails to parse, so valid JSON never goes through
 * it. Returns NULL when out of memory. */
static char *replace_nonfinite_tokens(const char *line, size_t len)
{
    static const char *const toks[] = {"-infinity", "infinity", "-nan", "nan", "-inf", "inf"};
    char *out = malloc(len + len / 3 + 8); /* "nan" -> "null" grows by a third at most */
    if (!out)
        return NULL;
    size_t o = 0;
    int in_str = 0;
    for (size_t i = 0; i < len;) {
        char c = line[i];
        if (in_str) {
            out[o++] = c;
            i++;
            if (c == '\\' && i < len)
                out[o++] = line[i++];
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            out[o++] = c;
            i++;
            continue;
        }
        if (i == 0 || !is_word_char(line[i - 1])) {
            size_t k;
            for (k = 0; k < (size_t)ARRAY_LEN(toks); k++) {
                size_t tl = strlen(toks[k]);
                if (i + tl <= len && strncasecmp(line + i, toks[k], tl) == 0 &&
                    (i + tl == len || !is_word_char(line[i + tl])))
                    break;
            }
            if (k < (size_t)ARRAY_LEN(toks)) {
                memcpy(out + o, "null", 4);
                o += 4;
                i += strlen(toks[k]);
                continue;
            }
        }
        out[o++] = c;
        i++;
    }
    out[o] = '\0';
    return out;
}

static const char *json_kind(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    if (cJSON_IsNull(v))
        return "null";
    return "a number";
}

/* A loss-like field: a number, or null (a logger's way to say NaN). Writes
 * NaN for null or non-finite. Returns 0 when absent, 1 when read, -1 when
 * the field has another type (error already written). */
static int read_value(const cJSON *obj, const char *key, double *out, const char *path, size_t lineno,
                      char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return 0;
    if (cJSON_IsNull(v)) {
        *out = NAN;
        return 1;
    }
    if (!cJSON_IsNumber(v)) {
        plot_set_err(err, errlen, "%s:%zu: \"%s\" is %s, expected a number", path, lineno, key, json_kind(v));
        return -1;
    }
    *out = isfinite(v->valuedouble) ? v->valuedouble : NAN;
    return 1;
}

/* Handles one non-blank line. Returns 0, or -1 with err written. */
static int load_line(Metrics *m, char *line, size_t len, size_t lineno, const char *path, char *err,
                     size_t errlen)
{
    if (memchr(line, '\0', len)) {
        plot_set_err(err, errlen, "%s:%zu: line contains a NUL byte", path, lineno);
        return -1;
    }
    const char *end = NULL;
    cJSON *obj = cJSON_ParseWithOpts(line, &end, 1);
    if (!obj) {
        size_t col = end && end >= line ? (size_t)(end - line) + 1 : 1;
        while (col <= len && (line[col - 1] == ' ' || line[col - 1] == '\t'))
            col++; /* cJSON stops before the blanks; point at the bad token */
        char *fixed = replace_nonfinite_tokens(line, len);
        if (!fixed) {
            plot_set_err(err, errlen, "%s:%zu: out of memory", path, lineno);
            return -1;
        }
        obj = cJSON_ParseWithOpts(fixed, NULL, 1);
        free(fixed);
        if (!obj) {
            plot_set_err(err, errlen, "%s:%zu: malformed JSON at column %zu", path, lineno, col);
            return -1;
        }
    }
    int rc = -1;
    if (!cJSON_IsObject(obj)) {
        plot_set_err(err, errlen, "%s:%zu: expected a JSON object, found %s", path, lineno, json_kind(obj));
        goto out;
    }
    double ref;
    int r = read_value(obj, "unigram_entropy", &ref, path, lineno, err, errlen);
    if (r < 0)
        goto out;
    if (r > 0 && isfinite(ref)) {
        m->have_ref = 1;
        m->ref = ref;
    }
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(obj, "step");
    if (!step) { /* event records, run headers */
        rc = 0;
        goto out;
    }
    if (!cJSON_IsNumber(step)) {
        plot_set_err(err, errlen, "%s:%zu: \"step\" is %s, expected a number", path, lineno, json_kind(step));
        goto out;
    }
    if (!isfinite(step->valuedouble)) {
        plot_set_err(err, errlen, "%s:%zu: \"step\" is not a finite number", path, lineno);
        goto out;
    }
    double loss, val;
    int has_loss = read_value(obj, "loss", &loss, path, lineno, err, errlen);
    if (has_loss < 0)
        goto out;
    int has_val = read_value(obj, "val_loss", &val, path, lineno, err, errlen);
    if (has_val < 0)
        goto out;
    if ((has_loss && series_push(&m->train, step->valuedouble, loss, lineno) < 0) ||
        (has_val && series_push(&m->val, step->valuedouble, val, lineno) < 0)) {
        plot_set_err(err, errlen, "%s:%zu: out of memory", path, lineno);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(obj);
    return rc;
}

int plot_load_metrics(const char *path, Metrics *m, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        plot_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0, nonblank = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        char *s = line;
        size_t len = (size_t)got;
        if (lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) { /* UTF-8 BOM */
            s += 3;
            len -= 3;
        }
        if (strspn(s, " \t\r\n") == len)
            continue;
        nonblank++;
        if (load_line(m, s, len, lineno, path, err, errlen) < 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        plot_set_err(err, errlen, "%s: read error: %s", path, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc < 0)
        return -1;
    if (nonblank == 0) {
        plot_set_err(err, errlen, "%s: empty file, no metrics to plot", path);
        return -1;
    }
    series_finish(&m->train);
    series_finish(&m->val);
    if (m->train.n + m->val.n == 0) {
        plot_set_err(err, errlen, "%s: no step records with \"loss\" or \"val_loss\" in %zu line%s", path, nonblank,
                nonblank == 1 ? "" : "s");
        return -1;
    }
    if (m->train.nfinite + m->val.nfinite == 0) {
        plot_set_err(err, errlen, "%s: every loss value is NaN, infinite or null, nothing to plot", path);
        return -1;
    }
    return 0;
}

/* ======================================================================
 * Number formatting
 * ====================================================================== */

/* Pixel coordinate with one decimal and no trailing ".0": enough for any
 * screen, and the bulk of the file is these. */
const char *plot_fmt_px(char buf[32], double v)
{
    snprintf(buf, 32, "%.1f", v);
    size_t n = strlen(buf);
    if (n > 2 && buf[n - 2] == '.' && buf[n - 1] == '0')
        buf[n - 2] = '\0';
    if (strcmp(buf, "-0") == 0)
        strcpy(buf, "0");
    return buf;
}

/* A loss value for people: three decimals in the usual range, so that
 * numbers side by side line up (2.820, not 2.82), else four digits. */
const char *plot_fmt_val(char buf[32], double v)
{
    if (fabs(v) >= 0.1 && fabs(v) < 1000)
        snprintf(buf, 32, "%.3f", v);
    else
        snprintf(buf, 32, "%.4g", v);
    return buf;
}

/* A step for people: integral steps print as integers. */
const char *plot_fmt_step(char buf[32], double v)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(buf, 32, "%.0f", v);
    else
        snprintf(buf, 32, "%.4g", v);
    return buf;
}

/* ======================================================================
 * Axes
 * ====================================================================== */

static double nice_tick(double range, int target)
{
    double raw = range / target;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    double nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    return nf * mag;
}

/* nonneg: the data has no negative values, so no negative tick either
 * (a lone point at step 0 gets an axis from -1 to 1 to sit in the middle). */
void plot_axis_ticks(Axis *a, int target, int integral, int nonneg)
{
    a->tick = nice_tick(a->hi - a->lo, target);
    if (integral && a->tick < 1)
        a->tick = 1;
    double eps = 1e-9;
    a->count = 0;
    if (!(fabs(a->lo / a->tick) < 1e15 && fabs(a->hi / a->tick) < 1e15))
        return; /* steps like 1e18 + 1: tick indices would not fit a long */
    a->first = (long)ceil(a->lo / a->tick - eps);
    if (nonneg && a->first < 0)
        a->first = 0;
    long last = (long)floor(a->hi / a->tick + eps);
    a->count = last >= a->first ? last - a->first + 1 : 0;
}

static double tick_value(const Axis *a, long i)
{
    double v = (double)(a->first + i) * a->tick;
    return fabs(v) < a->tick * 1e-9 ? 0 : v;
}

/* Tick label with as many decimals as the tick spacing needs; large step
 * counts print as 20k, 1.5M so the x axis stays legible. */
static const char *fmt_tick(char buf[32], double v, const Axis *a, int allow_suffix)
{
    double maxabs = fmax(fabs(tick_value(a, 0)), fabs(tick_value(a, a->count - 1)));
    double div = 1;
    const char *suffix = "";
    if (allow_suffix && maxabs >= 1e7) {
        div = 1e6;
        suffix = "M";
    } else if (allow_suffix && maxabs >= 1e4) {
        div = 1e3;
        suffix = "k";
    }
    if (v == 0)
        return strcpy(buf, "0"); /* not "0k" */
    int decimals = (int)-floor(log10(a->tick / div) + 1e-9);
    if (decimals < 0)
        decimals = 0;
    snprintf(buf, 32, "%.*f%s", decimals, v / div, suffix);
    return buf;
}

/* ======================================================================
 * Text
 * ====================================================================== */

/* Length in bytes of the valid UTF-8 sequence at s (1-4), or 0. */
static int utf8_seq_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        return (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (s[0] >= 0xE0 && s[0] <= 0xEF) {
        unsigned lo = s[0] == 0xE0 ? 0xA0 : 0x80, hi = s[0] == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 ? 3 : 0;
    }
    if (s[0] >= 0xF0 && s[0] <= 0xF4) {
        unsigned lo = s[0] == 0xF0 ? 0x90 : 0x80, hi = s[0] == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xC0) == 0x80 && (s[3] & 0xC0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* Writes s as XML character data, at most max_chars characters (the last
 * one an ellipsis when cut). A file name is arbitrary bytes, and one bad
 * byte makes the whole SVG unreadable, so invalid UTF-8 becomes U+FFFD and
 * control characters (not allowed in XML 1.0) become spaces. */
void plot_xml_text(FILE *f, const char *str, size_t max_chars)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t total = 0;
    for (const unsigned char *p = s; *p; total++) {
        int k = utf8_seq_len(p);
        p += k ? k : 1;
    }
    size_t keep = total > max_chars ? max_chars - 1 : total;
    for (size_t i = 0; i < keep; i++) {
        int k = utf8_seq_len(s);
        if (k == 0) {
            fputs("&#xFFFD;", f);
            s++;
            continue;
        }
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if (*s < 0x20 || *s == 0x7F)
                fputc(' ', f);
            else
                fwrite(s, 1, (size_t)k, f);
        }
        s += k;
    }
    if (keep < total)
        fputs("&#8230;", f);
}

/* ======================================================================
 * Rendering
 * ====================================================================== */

double plot_map_x(const Frame *fr, double v)
{
    return fr->x0 + (v - fr->xa.lo) / (fr->xa.hi - fr->xa.lo) * (fr->x1 - fr->x0);
}

double plot_map_y(const Frame *fr, double v)
{
    return fr->y1 - (v - fr->ya.lo) / (fr->ya.hi - fr->ya.lo) * (fr->y1 - fr->y0);
}

/* Builds the pixel path of (steps[i], values[i]) for the finite values.
 * With thin set it keeps per pixel column only the first, lowest,
 * highest and last point (in order): the drawn line is the same, spikes
 * included, and its size is bounded by the plot width instead of the run
 * length. Without, every point stays (one marker each). */
int plot_path_build(Path *p, const Frame *fr, const double *steps, const double *values, size_t n, int thin)
{
    p->n = 0;
    p->x = malloc((n ? n : 1) * sizeof *p->x);
    p->y = malloc((n ? n : 1) * sizeof *p->y);
    if (!p->x || !p->y)
        return -1;
    size_t i = 0;
    while (i < n) {
        if (!isfinite(values[i])) {
            i++;
            continue;
        }
        double px = plot_map_x(fr, steps[i]);
        long col = (long)floor(px);
        size_t first = i, last = i, lo = i, hi = i;
        size_t j = i + 1;
        for (; j < n; j++) {
            if (!isfinite(values[j]))
                continue;
            if (!thin || (long)floor(plot_map_x(fr, steps[j])) != col)
                break;
            last = j;
            if (values[j] < values[lo])
                lo = j;
            if (values[j] > values[hi])
                hi = j;
        }
        size_t pick[4] = {first, lo, hi, last};
        /* sort the four indices, then emit distinct ones in input order */
        for (int a = 1; a < 4; a++)
            for (int b = a; b > 0 && pick[b] < pick[b - 1]; b--) {
                size_t t = pick[b];
                pick[b] = pick[b - 1];
                pick[b - 1] = t;
            }
        for (int a = 0; a < 4; a++) {
            if (a > 0 && pick[a] == pick[a - 1])
                continue;
            p->x[p->n] = plot_map_x(fr, steps[pick[a]]);
            p->y[p->n] = plot_map_y(fr, values[pick[a]]);
            p->n++;
        }
        i = j;
    }
    return 0;
}

void plot_path_free(Path *p)
{
    free(p->x);
    free(p->y);
}

void plot_emit_polyline(FILE *f, const Path *p, const char *attrs)
{
    char bx[32], by[32];
    if (p->n < 2)
        return;
    fprintf(f, "<polyline fill=\"none\" stroke-linejoin=\"round\" stroke-linecap=\"round\" %s points=\"", attrs);
    for (size_t i = 0; i < p->n; i++)
        fprintf(f, "%s%s,%s", i ? " " : "", plot_fmt_px(bx, p->x[i]), plot_fmt_px(by, p->y[i]));
    fputs("\"/>\n", f);
}

static void emit_markers(FILE *f, const Path *p, double r, const char *attrs)
{
    char bx[32], by[32], br[32];
    if (p->n == 0)
        return;
    fprintf(f, "<g %s>", attrs);
    for (size_t i = 0; i < p->n; i++)
        fprintf(f, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\"/>", plot_fmt_px(bx, p->x[i]), plot_fmt_px(by, p->y[i]),
                plot_fmt_px(br, r));
    fputs("</g>\n", f);
}

/* Exponential moving average of the finite values, bias-corrected so the
 * curve starts on the data instead of at zero (as TensorBoard does).
 * Non-finite inputs stay NaN and do not disturb the average. The span is
 * a fiftieth of the run: a causal EMA lags by (span - 1) / 2 points, so the
 * smoothed curve trails the data by about 1% of the x axis (8 pixels) on
 * the steep early part, and 200 points get TensorBoard's default weight. */
void plot_ema_smooth(const double *values, double *out, size_t n, size_t nfinite)
{
    double span = fmax(1.0, (double)nfinite / 50.0);
    double w = 1.0 - 2.0 / (span + 1.0);
    double acc = 0, wsum = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(values[i])) {
            out[i] = NAN;
            continue;
        }
        acc = w * acc + (1 - w) * values[i];
        wsum = w * wsum + (1 - w);
        out[i] = acc / wsum;
    }
}

typedef enum LegendKind { LEG_RAW, LEG_EMA, LEG_LINE, LEG_VAL, LEG_VAL_LINE, LEG_REF, LEG_BAD } LegendKind;

typedef struct LegendItem {
    LegendKind kind;
    char label[96];
} LegendItem;

typedef struct Box {
    double x, y, w, h;
} Box;

static size_t count_in_box(const Path *p, const Box *b)
{
    size_t c = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->x[i] >= b->x - 4 && p->x[i] <= b->x + b->w + 4 && p->y[i] >= b->y - 4 &&
            p->y[i] <= b->y + b->h + 4)
            c++;
    return c;
}

/* Everything render_svg draws from, gathered so the helpers stay small. */
typedef struct Scene {
    Frame fr;
    Path train_raw, train_ema, val;
    int have_ema;
    int have_ref;
    double ref_y; /* pixels */
} Scene;

/* Puts the legend in the corner of the plot area that hides the fewest
 * points; ties go to the top right, which decaying loss curves leave empty. */
static Box place_legend(const Scene *sc, double w, double h)
{
    const Frame *fr = &sc->fr;
    double inset = 10;
    Box cand[4] = {
        {fr->x1 - inset - w, fr->y0 + inset, w, h},
        {fr->x0 + inset, fr->y0 + inset, w, h},
        {fr->x1 - inset - w, fr->y1 - inset - h, w, h},
        {fr->x0 + inset, fr->y1 - inset - h, w, h},
    };
    size_t best_score = SIZE_MAX;
    int best = 0;
    for (int i = 0; i < 4; i++) {
        size_t s = count_in_box(&sc->train_raw, &cand[i]) + count_in_box(&sc->train_ema, &cand[i]) +
                   4 * count_in_box(&sc->val, &cand[i]);
        if (sc->have_ref && sc->ref_y >= cand[i].y - 4 && sc->ref_y <= cand[i].y + cand[i].h + 4)
            s += 25;
        if (s < best_score) {
            best_score = s;
            best = i;
        }
    }
    return cand[best];
}

static void emit_legend_sample(FILE *f, LegendKind kind, double x, double y)
{
    char a[32], b[32], c[32], d[32];
    plot_fmt_px(a, x);
    plot_fmt_px(b, x + 26);
    plot_fmt_px(c, y);
    switch (kind) {
    case LEG_RAW:
        fprintf(f, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_TRAIN
                   "\" stroke-opacity=\"0.4\" stroke-width=\"1.2\"/>",
                a, c, b, c);
        break;
    case LEG_EMA:
        fprintf(f, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_TRAIN "\" stroke-width=\"2.4\"/>",
                a, c, b, c);
        break;
    case LEG_LINE: /* few points: line and markers */
        fprintf(f,
                "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_TRAIN "\" stroke-width=\"1.8\"/>"
                "<circle cx=\"%s\" cy=\"%s\" r=\"3\" fill=\"" COLOR_TRAIN "\"/>",
                a, c, b, c, plot_fmt_px(d, x + 13), c);
        break;
    case LEG_VAL:
        fprintf(f,
                "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_VAL "\" stroke-width=\"1.8\"/>"
                "<circle cx=\"%s\" cy=\"%s\" r=\"3.5\" fill=\"" COLOR_VAL "\" stroke=\"#fff\" stroke-width=\"1\"/>",
                a, c, b, c, plot_fmt_px(d, x + 13), c);
        break;
    case LEG_VAL_LINE:
        fprintf(f, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_VAL "\" stroke-width=\"1.8\"/>",
                a, c, b, c);
        break;
    case LEG_REF:
        fprintf(f, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_REF
                   "\" stroke-width=\"1.3\" stroke-dasharray=\"6 4\"/>",
                a, c, b, c);
        break;
    case LEG_BAD:
        fprintf(f, "<path d=\"M%s %sv-8\" stroke=\"" COLOR_BAD "\" stroke-width=\"2\"/>", plot_fmt_px(d, x + 13),
                plot_fmt_px(b, y + 4));
        break;
    }
}

static void emit_legend(FILE *f, const Scene *sc, const LegendItem *items, int nitems)
{
    size_t maxlen = 0;
    for (int i = 0; i < nitems; i++)
        if (strlen(items[i].label) > maxlen)
            maxlen = strlen(items[i].label);
    double row = 20, pad = 9;
    double w = pad + 26 + 8 + (double)maxlen * LEGEND_CHAR_W + pad;
    double h = pad * 2 + row * nitems - 4;
    Box b = place_legend(sc, w, h);
    char bx[32], by[32], bw[32], bh[32];
    fprintf(f,
            "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" rx=\"4\" fill=\"#fff\" fill-opacity=\"0.9\" "
            "stroke=\"#c8c8c8\"/>\n",
            plot_fmt_px(bx, b.x), plot_fmt_px(by, b.y), plot_fmt_px(bw, b.w), plot_fmt_px(bh, b.h));
    for (int i = 0; i < nitems; i++) {
        double cy = b.y + pad + row * i + 8;
        emit_legend_sample(f, items[i].kind, b.x + pad, cy);
        fprintf(f, "<text x=\"%s\" y=\"%s\" fill=\"#333\">", plot_fmt_px(bx, b.x + pad + 34), plot_fmt_px(by, cy + 4));
        plot_xml_text(f, items[i].label, sizeof items[i].label);
        fputs("</text>\n", f);
    }
}

/* Pixel-aligned position of a tick, kept on the frame line at the ends so
 * a tick at the very edge does not stick out by a pixel. */
static double crisp(double px, double lo, double hi)
{
    return fmin(fmax(floor(px) + 0.5, lo + 0.5), hi - 0.5);
}

static double tick_x(const Frame *fr, long i)
{
    return crisp(plot_map_x(fr, tick_value(&fr->xa, i)), fr->x0, fr->x1);
}

static double tick_y(const Frame *fr, long i)
{
    return crisp(plot_map_y(fr, tick_value(&fr->ya, i)), fr->y0, fr->y1);
}

void plot_emit_axes(FILE *f, const Frame *fr, int x_suffix)
{
    char a[32], b[32], c[32], d[32];
    /* grid: one path per direction, on half pixels so 1px lines stay crisp */
    fputs("<path fill=\"none\" stroke=\"#e6e6e6\" stroke-width=\"1\" d=\"", f);
    for (long i = 0; i < fr->xa.count; i++) {
        double x = tick_x(fr, i);
        fprintf(f, "M%s %sV%s", plot_fmt_px(a, x), plot_fmt_px(b, fr->y0), plot_fmt_px(c, fr->y1));
    }
    for (long i = 0; i < fr->ya.count; i++) {
        double y = tick_y(fr, i);
        fprintf(f, "M%s %sH%s", plot_fmt_px(a, fr->x0), plot_fmt_px(b, y), plot_fmt_px(c, fr->x1));
    }
    fputs("\"/>\n", f);
    fprintf(f, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"none\" stroke=\"#9a9a9a\"/>\n",
            plot_fmt_px(a, fr->x0 + 0.5), plot_fmt_px(b, fr->y0 + 0.5), plot_fmt_px(c, fr->x1 - fr->x0 - 1),
            plot_fmt_px(d, fr->y1 - fr->y0 - 1));
    /* tick marks outside the frame */
    fputs("<path stroke=\"#9a9a9a\" d=\"", f);
    for (long i = 0; i < fr->xa.count; i++)
        fprintf(f, "M%s %sv5", plot_fmt_px(a, tick_x(fr, i)), plot_fmt_px(b, fr->y1));
    for (long i = 0; i < fr->ya.count; i++)
        fprintf(f, "M%s %sh-5", plot_fmt_px(a, fr->x0), plot_fmt_px(b, tick_y(fr, i)));
    fputs("\"/>\n", f);
    /* tick labels */
    fputs("<g fill=\"#444\" font-size=\"11\" text-anchor=\"middle\">", f);
    for (long i = 0; i < fr->xa.count; i++) {
        double v = tick_value(&fr->xa, i);
        fprintf(f, "<text x=\"%s\" y=\"%s\">%s</text>", plot_fmt_px(a, plot_map_x(fr, v)), plot_fmt_px(b, fr->y1 + 19),
                fmt_tick(c, v, &fr->xa, x_suffix));
    }
    fputs("</g>\n<g fill=\"#444\" font-size=\"11\" text-anchor=\"end\">", f);
    for (long i = 0; i < fr->ya.count; i++) {
        double v = tick_value(&fr->ya, i);
        fprintf(f, "<text x=\"%s\" y=\"%s\">%s</text>", plot_fmt_px(a, fr->x0 - 9), plot_fmt_px(b, plot_map_y(fr, v) + 4),
                fmt_tick(c, v, &fr->ya, 0));
    }
    fputs("</g>\n", f);
    /* axis titles */
    fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"middle\" font-size=\"13\" fill=\"#222\">step</text>\n",
            plot_fmt_px(a, (fr->x0 + fr->x1) / 2), plot_fmt_px(b, fr->y1 + 44));
    fprintf(f,
            "<text transform=\"translate(%s %s) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\" "
            "fill=\"#222\">loss (nats)</text>\n",
            plot_fmt_px(a, 20), plot_fmt_px(b, (fr->y0 + fr->y1) / 2));
}

/* Chooses the axes: x spans the steps (from 0 when the run starts near
 * it), y spans every finite value drawn plus 6% so no line runs along the
 * frame, never dipping below zero for non-negative losses. */
static int choose_axes(Frame *fr, const Metrics *m)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int integral = 1;
    const Series *all[2] = {&m->train, &m->val};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < all[k]->n; i++) {
            const Point *p = &all[k]->p[i];
            xmin = fmin(xmin, p->step);
            xmax = fmax(xmax, p->step);
            if (p->step != floor(p->step))
                integral = 0;
            if (isfinite(p->value)) {
                ymin = fmin(ymin, p->value);
                ymax = fmax(ymax, p->value);
            }
        }
    if (m->have_ref) {
        ymin = fmin(ymin, m->ref);
        ymax = fmax(ymax, m->ref);
    }
    int nonneg_steps = xmin >= 0;
    if (xmax == xmin) {
        double d = fmax(1.0, fabs(xmin) * 1e-9); /* +-1 is lost on 1e20 */
        xmin -= d;
        xmax += d;
    } else if (xmin > 0 && xmin <= 0.1 * (xmax - xmin)) {
        xmin = 0;
    }
    double pad = (ymax - ymin) * 0.06;
    if (pad == 0)
        pad = fmax(fabs(ymax) * 0.05, 0.05);
    double ylo = ymin - pad;
    if (ymin >= 0 && ylo < 0)
        ylo = 0;
    fr->xa = (Axis){.lo = xmin, .hi = xmax};
    fr->ya = (Axis){.lo = ylo, .hi = ymax + pad};
    /* values near the limits of double (a loss of -1e308 and 1e308) */
    if (!isfinite(fr->xa.hi - fr->xa.lo) || !isfinite(fr->ya.hi - fr->ya.lo) || fr->xa.hi <= fr->xa.lo ||
        fr->ya.hi <= fr->ya.lo)
        return -1;
    plot_axis_ticks(&fr->xa, 9, integral, nonneg_steps);
    plot_axis_ticks(&fr->ya, 7, 0, 0);
    return 0;
}

/* The line under the title: where the run stands, in numbers. */
static void emit_summary(FILE *f, const Metrics *m, const Scene *sc, const double *ema)
{
    char a[32], b[32], c[32];
    double last_step = -INFINITY;
    if (m->train.n)
        last_step = m->train.p[m->train.n - 1].step;
    if (m->val.n)
        last_step = fmax(last_step, m->val.p[m->val.n - 1].step);
    fprintf(f, "<text x=\"%s\" y=\"48\" font-size=\"12\" fill=\"#666\">last step %s", plot_fmt_px(a, sc->fr.x0),
            plot_fmt_step(b, last_step));
    for (size_t i = m->train.n; i-- > 0;) {
        if (!isfinite(m->train.p[i].value))
            continue;
        if (sc->have_ema)
            fprintf(f, " &#183; train %s (smoothed %s)", plot_fmt_val(a, m->train.p[i].value), plot_fmt_val(b, ema[i]));
        else
            fprintf(f, " &#183; train %s", plot_fmt_val(a, m->train.p[i].value));
        break;
    }
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < m->val.n; i++)
        if (isfinite(m->val.p[i].value) && (best == SIZE_MAX || m->val.p[i].value < m->val.p[best].value))
            best = i;
    for (size_t i = m->val.n; i-- > 0;) {
        if (!isfinite(m->val.p[i].value))
            continue;
        fprintf(f, " &#183; val %s (best %s at step %s)", plot_fmt_val(a, m->val.p[i].value),
                plot_fmt_val(b, m->val.p[best].value), plot_fmt_step(c, m->val.p[best].step));
        break;
    }
    fputs("</text>\n", f);
}

/* Returns 0, RENDER_NOMEM, or RENDER_RANGE when the numbers are too far
 * apart for a double to hold the axis span. */
enum { RENDER_NOMEM = -1, RENDER_RANGE = -2 };

static int render_svg(FILE *f, const Metrics *m, const char *title)
{
    Scene sc = {0};
    int rc = RENDER_NOMEM;
    size_t nt = m->train.n, nv = m->val.n;
    double *tstep = malloc((nt + 1) * sizeof *tstep), *tval = malloc((nt + 1) * sizeof *tval);
    double *tema = malloc((nt + 1) * sizeof *tema);
    double *vstep = malloc((nv + 1) * sizeof *vstep), *vval = malloc((nv + 1) * sizeof *vval);
    double *bstep = malloc((nt + nv + 1) * sizeof *bstep);
    if (!tstep || !tval || !tema || !vstep || !vval || !bstep)
        goto out;
    for (size_t i = 0; i < nt; i++) {
        tstep[i] = m->train.p[i].step;
        tval[i] = m->train.p[i].value;
    }
    for (size_t i = 0; i < nv; i++) {
        vstep[i] = m->val.p[i].step;
        vval[i] = m->val.p[i].value;
    }
    /* steps whose loss was non-finite, in either series */
    size_t nb = 0;
    for (size_t i = 0; i < nt; i++)
        if (!isfinite(tval[i]))
            bstep[nb++] = tstep[i];
    for (size_t i = 0; i < nv; i++)
        if (!isfinite(vval[i]))
            bstep[nb++] = vstep[i];

    sc.fr = (Frame){.x0 = MARGIN_L, .x1 = CANVAS_W - MARGIN_R, .y0 = MARGIN_T, .y1 = CANVAS_H - MARGIN_B};
    if (choose_axes(&sc.fr, m) < 0) {
        rc = RENDER_RANGE;
        goto out;
    }
    /* Below ten points smoothing has nothing to smooth; the raw line is
     * then drawn as the main line instead. */
    sc.have_ema = m->train.nfinite >= 10;
    plot_ema_smooth(tval, tema, nt, m->train.nfinite);
    /* A marker per validation point, unless there are so many that they
     * would merge into a thick line and bloat the file. */
    int val_markers = m->val.nfinite <= 200;
    sc.have_ref = m->have_ref;
    sc.ref_y = m->have_ref ? plot_map_y(&sc.fr, m->ref) : 0;
    if (plot_path_build(&sc.train_raw, &sc.fr, tstep, tval, nt, 1) < 0 ||
        plot_path_build(&sc.train_ema, &sc.fr, tstep, tema, sc.have_ema ? nt : 0, 1) < 0 ||
        plot_path_build(&sc.val, &sc.fr, vstep, vval, nv, !val_markers) < 0)
        goto out;

    char a[32], b[32], c[32], d[32];
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"" FONT_FAMILY "\" font-size=\"12\">\n<title>",
            CANVAS_W, CANVAS_H, CANVAS_W, CANVAS_H);
    plot_xml_text(f, title, 400);
    fputs("</title>\n", f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", CANVAS_W, CANVAS_H);
    fprintf(f,
            "<defs><clipPath id=\"moec-plot-area\"><rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\"/>"
            "</clipPath></defs>\n",
            plot_fmt_px(a, sc.fr.x0), plot_fmt_px(b, sc.fr.y0), plot_fmt_px(c, sc.fr.x1 - sc.fr.x0),
            plot_fmt_px(d, sc.fr.y1 - sc.fr.y0));
    plot_emit_axes(f, &sc.fr, 1);

    fputs("<g clip-path=\"url(#moec-plot-area)\">\n", f);
    if (sc.have_ref)
        fprintf(f,
                "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"" COLOR_REF
                "\" stroke-width=\"1.3\" stroke-dasharray=\"6 4\"/>\n",
                plot_fmt_px(a, sc.fr.x0), plot_fmt_px(b, sc.ref_y), plot_fmt_px(c, sc.fr.x1), plot_fmt_px(d, sc.ref_y));
    if (sc.have_ema) {
        plot_emit_polyline(f, &sc.train_raw, "stroke=\"" COLOR_TRAIN "\" stroke-opacity=\"0.4\" stroke-width=\"1\"");
        plot_emit_polyline(f, &sc.train_ema, "stroke=\"" COLOR_TRAIN "\" stroke-width=\"2.4\"");
    } else {
        plot_emit_polyline(f, &sc.train_raw, "stroke=\"" COLOR_TRAIN "\" stroke-width=\"1.8\"");
    }
    plot_emit_polyline(f, &sc.val, "stroke=\"" COLOR_VAL "\" stroke-width=\"1.8\"");
    fputs("</g>\n", f);
    /* Markers sit outside the clip so a point on the frame shows whole. */
    if (!sc.have_ema)
        emit_markers(f, &sc.train_raw, 3, "fill=\"" COLOR_TRAIN "\"");
    if (val_markers)
        emit_markers(f, &sc.val, nv > 60 ? 2.2 : 3.5, "fill=\"" COLOR_VAL "\" stroke=\"#fff\" stroke-width=\"1\"");
    if (nb) {
        /* one short red tick per pixel column holding a non-finite loss */
        fputs("<path stroke=\"" COLOR_BAD "\" stroke-width=\"2\" d=\"", f);
        double prev = -1;
        for (size_t i = 0; i < nb; i++) {
            double x = floor(plot_map_x(&sc.fr, bstep[i])) + 0.5;
            if (x == prev)
                continue;
            prev = x;
            fprintf(f, "M%s %sv-8", plot_fmt_px(a, x), plot_fmt_px(b, sc.fr.y1 - 1));
        }
        fputs("\"/>\n", f);
    }

    LegendItem items[6];
    int ni = 0;
    if (m->train.nfinite) {
        items[ni].kind = sc.have_ema ? LEG_RAW : LEG_LINE;
        snprintf(items[ni++].label, sizeof items[0].label, "train loss");
        if (sc.have_ema) {
            items[ni].kind = LEG_EMA;
            snprintf(items[ni++].label, sizeof items[0].label, "train loss (smoothed)");
        }
    }
    if (m->val.nfinite) {
        items[ni].kind = val_markers ? LEG_VAL : LEG_VAL_LINE;
        snprintf(items[ni++].label, sizeof items[0].label, "val loss");
    }
    if (sc.have_ref) {
        items[ni].kind = LEG_REF;
        snprintf(items[ni++].label, sizeof items[0].label, "unigram entropy (%s)", plot_fmt_val(a, m->ref));
    }
    if (nb) {
        items[ni].kind = LEG_BAD;
        if (m->train.nonfinite && m->val.nonfinite)
            snprintf(items[ni++].label, sizeof items[0].label, "non-finite: %zu train, %zu val (skipped)",
                     m->train.nonfinite, m->val.nonfinite);
        else
            snprintf(items[ni++].label, sizeof items[0].label, "non-finite %s loss: %zu (skipped)",
                     m->train.nonfinite ? "train" : "val", m->train.nonfinite + m->val.nonfinite);
    }
    emit_legend(f, &sc, items, ni);

    fprintf(f, "<text x=\"%s\" y=\"27\" font-size=\"17\" font-weight=\"bold\" fill=\"#222\">", plot_fmt_px(a, sc.fr.x0));
    plot_xml_text(f, title, TITLE_MAX_CHARS);
    fputs("</text>\n", f);
    emit_summary(f, m, &sc, tema);
    fputs("</svg>\n", f);
    rc = 0;
out:
    plot_path_free(&sc.train_raw);
    plot_path_free(&sc.train_ema);
    plot_path_free(&sc.val);
    free(tstep);
    free(tval);
    free(tema);
    free(vstep);
    free(vval);
    free(bstep);
    return rc;
}

/* ======================================================================
 * Entry point
 * ====================================================================== */

const char *plot_base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

int plot_metrics_svg(const char *jsonl_path, const char *svg_path, const char *title, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!jsonl_path || !svg_path) {
        plot_set_err(err, errlen, "plot: no %s path given", jsonl_path ? "output" : "input");
        return -1;
    }
    Metrics m = {0};
    char *buf = NULL;
    size_t len = 0;
    int rc = -1;
    if (plot_load_metrics(jsonl_path, &m, err, errlen) < 0)
        goto out;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) {
        plot_set_err(err, errlen, "%s: out of memory", svg_path);
        goto out;
    }
    /* with lm_loss, aux_loss or expert load in the metrics: the loss chart
     * nested in a taller picture, their panels below it (plot_moe.c) */
    void *moe = NULL;
    int extra = plot_moe_panels_height(jsonl_path, &moe);
    if (extra > 0)
        fprintf(mem, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"" FONT_FAMILY "\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
                CANVAS_W, CANVAS_H + extra, CANVAS_W, CANVAS_H + extra, CANVAS_W, CANVAS_H + extra);
    int r = render_svg(mem, &m, title ? title : plot_base_name(jsonl_path));
    if (extra > 0) {
        plot_moe_panels(mem, moe, CANVAS_H);
        fputs("</svg>\n", mem);
    } else {
        plot_moe_panels(NULL, moe, 0);
    }
    if (ferror(mem) && r == 0)
        r = RENDER_NOMEM;
    if (fclose(mem) != 0 && r == 0)
        r = RENDER_NOMEM;
    if (r == RENDER_RANGE) {
        plot_set_err(err, errlen, "%s: steps or losses span too wide a range to plot", jsonl_path);
        goto out;
    }
    if (r < 0) {
        plot_set_err(err, errlen, "%s: out of memory while drawing", svg_path);
        goto out;
    }
    rc = write_file(svg_path, buf, len, err, errlen) ? 0 : -1;
out:
    free(buf);
    free(m.train.p);
    free(m.val.p);
    return rc;
}
