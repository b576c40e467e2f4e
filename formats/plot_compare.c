/* plot_compare.c - several runs' metrics JSONL -> one loss chart (SVG).
 *
 * `moec plot A.jsonl B.jsonl ... -o OUT.svg`: the runs' validation loss
 * (thick lines with markers, a shape per run) and smoothed training loss
 * (thin lines) overlaid in a colour per run on one chart, a legend naming
 * the runs, and under the chart a table of each run's final validation loss
 * and its difference from the first run's in percent: the picture of a
 * precision comparison (tests/gpu/convergence.sh, docs/results/convergence.md).
 * The files are read by plot.c's reader, so the input rules and their
 * located errors are the single-run plot's (plot.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"
#include "plot.h"
#include "plot_internal.h"

enum {
    ROW_H = 20,      /* a table row */
    TABLE_GAP = 14,  /* between the chart's step label and the table */
    LABEL_MAX = 24,  /* characters of a run's label shown */
    FILE_MAX = 30,   /* characters of a file name shown */
    MARKERS_MAX = 200, /* validation points per run above which they are not marked */
};

/* Tableau's ten colours, the first eight: distinct for most readers, and the
 * marker shape differs too. */
static const char *const run_color[PLOT_MAX_RUNS] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                     "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

typedef struct Run {
    const char *path;
    char label[256];
    Metrics m;
    double *tstep, *tline; /* the training line drawn: smoothed (>= 10 points) or raw */
    double *vstep, *vval;
    int smoothed;
    Path train, val;
    double last_step;   /* of the validation series */
    double final_val;   /* its value there (NaN when non-finite) */
    double best_val, best_step;
} Run;

static void run_free(Run *r)
{
    free(r->m.train.p);
    free(r->m.val.p);
    free(r->tstep);
    free(r->tline);
    free(r->vstep);
    free(r->vval);
    plot_path_free(&r->train);
    plot_path_free(&r->val);
}

/* The label of a run given none: its file name without ".jsonl". */
static void default_label(char *out, size_t n, const char *path)
{
    const char *b = plot_base_name(path);
    size_t len = strlen(b);
    if (len > 6 && strcmp(b + len - 6, ".jsonl") == 0)
        len -= 6;
    snprintf(out, n, "%.*s", (int)len, b);
}

/* Reads one run and builds its lines' data. Returns 0, or -1 with err set. */
static int load_run(Run *r, char *err, size_t errlen)
{
    if (plot_load_metrics(r->path, &r->m, err, errlen) < 0)
        return -1;
    const Series *t = &r->m.train, *v = &r->m.val;
    if (v->n == 0) {
        plot_set_err(err, errlen,
                     "%s: no validation loss (\"val_loss\") to compare: train with --eval-every N (N > 0)", r->path);
        return -1;
    }
    r->tstep = malloc((t->n + 1) * sizeof *r->tstep);
    r->tline = malloc((t->n + 1) * sizeof *r->tline);
    r->vstep = malloc((v->n + 1) * sizeof *r->vstep);
    r->vval = malloc((v->n + 1) * sizeof *r->vval);
    double *raw = malloc((t->n + 1) * sizeof *raw);
    if (!r->tstep || !r->tline || !r->vstep || !r->vval || !raw) {
        free(raw);
        plot_set_err(err, errlen, "%s: out of memory", r->path);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        r->tstep[i] = t->p[i].step;
        raw[i] = t->p[i].value;
    }
    /* the single-run plot's rule: below ten points there is nothing to smooth */
    r->smoothed = t->nfinite >= 10;
    if (r->smoothed)
        plot_ema_smooth(raw, r->tline, t->n, t->nfinite);
    else
        memcpy(r->tline, raw, t->n * sizeof *raw);
    free(raw);
    r->best_val = NAN;
    r->best_step = NAN;
    for (size_t i = 0; i < v->n; i++) {
        r->vstep[i] = v->p[i].step;
        r->vval[i] = v->p[i].value;
        if (isfinite(r->vval[i]) && !(r->vval[i] >= r->best_val)) {
            r->best_val = r->vval[i];
            r->best_step = r->vstep[i];
        }
    }
    r->last_step = r->vstep[v->n - 1];
    r->final_val = r->vval[v->n - 1];
    return 0;
}

/* x over every step of every run (from 0 when they start near it), y over
 * the validation losses and the training line from the first evaluation on,
 * plus 6%, never below zero for non-negative losses. The first steps' high
 * training loss runs off the top (clipped) instead of squeezing the part of
 * the chart where runs differ. Returns -1 when a double cannot hold the span. */
static int compare_axes(Frame *fr, const Run *runs, int n)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int integral = 1;
    double first_eval = INFINITY;
    for (int k = 0; k < n; k++)
        first_eval = fmin(first_eval, runs[k].vstep[0]);
    for (int k = 0; k < n; k++) {
        const Run *r = &runs[k];
        for (int s = 0; s < 2; s++) {
            size_t cnt = s ? r->m.val.n : r->m.train.n;
            const double *st = s ? r->vstep : r->tstep, *va = s ? r->vval : r->tline;
            for (size_t i = 0; i < cnt; i++) {
                xmin = fmin(xmin, st[i]);
                xmax = fmax(xmax, st[i]);
                if (st[i] != floor(st[i]))
                    integral = 0;
                if (isfinite(va[i]) && (s || st[i] >= first_eval)) {
                    ymin = fmin(ymin, va[i]);
                    ymax = fmax(ymax, va[i]);
                }
            }
        }
    }
    if (!isfinite(ymin)) /* every value non-finite: an axis for the table's sake */
        ymin = 0, ymax = 1;
    int nonneg_steps = xmin >= 0;
    if (xmax == xmin) {
        double d = fmax(1.0, fabs(xmin) * 1e-9);
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
    if (!isfinite(fr->xa.hi - fr->xa.lo) || !isfinite(fr->ya.hi - fr->ya.lo) || fr->xa.hi <= fr->xa.lo ||
        fr->ya.hi <= fr->ya.lo)
        return -1;
    plot_axis_ticks(&fr->xa, 9, integral, nonneg_steps);
    plot_axis_ticks(&fr->ya, 7, 0, 0);
    return 0;
}

/* Run k's marker at (x, y): circle, square, diamond, triangle up, triangle
 * down, then the same again (eight runs at most, colours differ). */
static void emit_marker(FILE *f, int k, double x, double y, double r)
{
    char a[32], b[32], c[32], d[32], e[32], g[32], h[32], i[32];
    switch (k % 5) {
    case 0:
        fprintf(f, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\"/>", plot_fmt_px(a, x), plot_fmt_px(b, y), plot_fmt_px(c, r));
        break;
    case 1:
        fprintf(f, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\"/>", plot_fmt_px(a, x - r * 0.9),
                plot_fmt_px(b, y - r * 0.9), plot_fmt_px(c, r * 1.8), plot_fmt_px(d, r * 1.8));
        break;
    case 2:
        fprintf(f, "<path d=\"M%s %sL%s %sL%s %sL%s %sZ\"/>", plot_fmt_px(a, x), plot_fmt_px(b, y - r * 1.25),
                plot_fmt_px(c, x + r * 1.25), plot_fmt_px(d, y), plot_fmt_px(e, x), plot_fmt_px(g, y + r * 1.25),
                plot_fmt_px(h, x - r * 1.25), plot_fmt_px(i, y));
        break;
    default: {
        double s = k % 5 == 3 ? 1 : -1; /* up or down */
        fprintf(f, "<path d=\"M%s %sL%s %s", plot_fmt_px(a, x), plot_fmt_px(b, y - s * r * 1.3),
                plot_fmt_px(c, x + r * 1.2), plot_fmt_px(d, y + s * r * 0.8));
        fprintf(f, "L%s %sZ\"/>", plot_fmt_px(a, x - r * 1.2), plot_fmt_px(b, y + s * r * 0.8));
    }
    }
}

/* Counts the drawn points inside a box (with a margin), to place the legend
 * where it hides the least. */
static size_t points_in(const Path *p, double x, double y, double w, double h)
{
    size_t c = 0;
    for (size_t i = 0; i < p->n; i++)
        c += p->x[i] >= x - 4 && p->x[i] <= x + w + 4 && p->y[i] >= y - 4 && p->y[i] <= y + h + 4;
    return c;
}

static void emit_legend(FILE *f, const Frame *fr, const Run *runs, int n, const int *markers)
{
    size_t maxlen = 0;
    for (int k = 0; k < n; k++) {
        size_t len = strlen(runs[k].label);
        if (len > LABEL_MAX)
            len = LABEL_MAX;
        if (len > maxlen)
            maxlen = len;
    }
    double pad = 9, row = 20, inset = 10;
    double w = pad + 48 + 8 + (double)maxlen * LEGEND_CHAR_W + pad, h = pad * 2 + row * n - 4;
    double cx[4] = {fr->x1 - inset - w, fr->x0 + inset, fr->x1 - inset - w, fr->x0 + inset};
    double cy[4] = {fr->y0 + inset, fr->y0 + inset, fr->y1 - inset - h, fr->y1 - inset - h};
    size_t best = SIZE_MAX;
    int at = 0;
    for (int c = 0; c < 4; c++) {
        size_t s = 0;
        for (int k = 0; k < n; k++)
            s += points_in(&runs[k].train, cx[c], cy[c], w, h) + 4 * points_in(&runs[k].val, cx[c], cy[c], w, h);
        if (s < best) {
            best = s;
            at = c;
        }
    }
    char a[32], b[32], c[32], d[32];
    fprintf(f,
            "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" rx=\"4\" fill=\"#fff\" fill-opacity=\"0.9\" "
            "stroke=\"#c8c8c8\"/>\n",
            plot_fmt_px(a, cx[at]), plot_fmt_px(b, cy[at]), plot_fmt_px(c, w), plot_fmt_px(d, h));
    for (int k = 0; k < n; k++) {
        double x = cx[at] + pad, y = cy[at] + pad + row * k + 8;
        /* the thin training sample, then the validation line with its marker */
        fprintf(f,
                "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-opacity=\"0.55\" "
                "stroke-width=\"1.4\"/>",
                plot_fmt_px(a, x), plot_fmt_px(b, y), plot_fmt_px(c, x + 18), plot_fmt_px(d, y), run_color[k]);
        fprintf(f, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"2.2\"/>",
                plot_fmt_px(a, x + 22), plot_fmt_px(b, y), plot_fmt_px(c, x + 48), plot_fmt_px(d, y), run_color[k]);
        if (markers[k]) {
            fprintf(f, "<g fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\">", run_color[k]);
            emit_marker(f, k, x + 35, y, 3.5);
            fputs("</g>", f);
        }
        fprintf(f, "<text x=\"%s\" y=\"%s\" fill=\"#333\">", plot_fmt_px(a, x + 56), plot_fmt_px(b, y + 4));
        plot_xml_text(f, runs[k].label, LABEL_MAX);
        fputs("</text>\n", f);
    }
}

/* The table under the chart: a row per run with its final validation loss
 * and the difference from the first run's. */
static void emit_table(FILE *f, const Run *runs, int n, double y0)
{
    char a[32], b[32], c[32], d[32];
    /* columns: swatch and label, file, step, final, difference, best */
    const double x_label = MARGIN_L + 20, x_file = 270, x_step = 490, x_final = 600, x_diff = 710,
                 x_best = CANVAS_W - MARGIN_R;
    double y = y0 + 14;
    fprintf(f, "<g font-size=\"12\" fill=\"#444\" font-weight=\"bold\">");
    fprintf(f, "<text x=\"%s\" y=\"%s\">run</text>", plot_fmt_px(a, x_label), plot_fmt_px(b, y));
    fprintf(f, "<text x=\"%s\" y=\"%s\">metrics file</text>", plot_fmt_px(a, x_file), plot_fmt_px(b, y));
    fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">step</text>", plot_fmt_px(a, x_step), plot_fmt_px(b, y));
    fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">final val loss</text>", plot_fmt_px(a, x_final),
            plot_fmt_px(b, y));
    fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">&#916; vs first</text>", plot_fmt_px(a, x_diff),
            plot_fmt_px(b, y));
    fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">best val loss (step)</text></g>\n",
            plot_fmt_px(a, x_best), plot_fmt_px(b, y));
    fprintf(f, "<path stroke=\"#c8c8c8\" d=\"M%s %sH%s\"/>\n", plot_fmt_px(a, MARGIN_L), plot_fmt_px(b, y + 6.5),
            plot_fmt_px(c, x_best));
    for (int k = 0; k < n; k++) {
        const Run *r = &runs[k];
        y += ROW_H;
        fprintf(f, "<rect x=\"%s\" y=\"%s\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>",
                plot_fmt_px(a, MARGIN_L), plot_fmt_px(b, y - 10), run_color[k]);
        fprintf(f, "<g font-size=\"12\" fill=\"#222\"><text x=\"%s\" y=\"%s\">", plot_fmt_px(a, x_label),
                plot_fmt_px(b, y));
        plot_xml_text(f, r->label, LABEL_MAX);
        fprintf(f, "</text><text x=\"%s\" y=\"%s\" fill=\"#666\">", plot_fmt_px(a, x_file), plot_fmt_px(b, y));
        plot_xml_text(f, plot_base_name(r->path), FILE_MAX);
        fprintf(f, "</text><text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s</text>", plot_fmt_px(a, x_step),
                plot_fmt_px(b, y), plot_fmt_step(c, r->last_step));
        fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s</text>", plot_fmt_px(a, x_final),
                plot_fmt_px(b, y), isfinite(r->final_val) ? plot_fmt_val(c, r->final_val) : "non-finite");
        fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">", plot_fmt_px(a, x_diff), plot_fmt_px(b, y));
        if (k == 0)
            fputs("reference", f);
        else if (isfinite(r->final_val) && isfinite(runs[0].final_val) && runs[0].final_val != 0)
            fprintf(f, "%+.2f%%", (r->final_val - runs[0].final_val) / fabs(runs[0].final_val) * 100);
        else
            fputs("&#8212;", f);
        fputs("</text>", f);
        if (isfinite(r->best_val))
            fprintf(f, "<text x=\"%s\" y=\"%s\" text-anchor=\"end\">%s (%s)</text>", plot_fmt_px(a, x_best),
                    plot_fmt_px(b, y), plot_fmt_val(c, r->best_val), plot_fmt_step(d, r->best_step));
        fputs("</g>\n", f);
    }
}

/* Returns 0, -1 out of memory, -2 when the numbers span too wide a range. */
static int render(FILE *f, Run *runs, int n, const char *title)
{
    Frame fr = {.x0 = MARGIN_L, .x1 = CANVAS_W - MARGIN_R, .y0 = MARGIN_T, .y1 = CANVAS_H - MARGIN_B};
    if (compare_axes(&fr, runs, n) < 0)
        return -2;
    int markers[PLOT_MAX_RUNS];
    for (int k = 0; k < n; k++) {
        Run *r = &runs[k];
        markers[k] = r->m.val.nfinite <= MARKERS_MAX;
        if (plot_path_build(&r->train, &fr, r->tstep, r->tline, r->m.train.n, 1) < 0 ||
            plot_path_build(&r->val, &fr, r->vstep, r->vval, r->m.val.n, !markers[k]) < 0)
            return -1;
    }
    int height = CANVAS_H + TABLE_GAP + ROW_H * (n + 1) + 12;
    char a[32], b[32], c[32], d[32];
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"" FONT_FAMILY "\" font-size=\"12\">\n<title>",
            CANVAS_W, height, CANVAS_W, height);
    plot_xml_text(f, title, 400);
    fputs("</title>\n", f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", CANVAS_W, height);
    fprintf(f,
            "<defs><clipPath id=\"moec-compare-area\"><rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\"/>"
            "</clipPath></defs>\n",
            plot_fmt_px(a, fr.x0), plot_fmt_px(b, fr.y0), plot_fmt_px(c, fr.x1 - fr.x0), plot_fmt_px(d, fr.y1 - fr.y0));
    plot_emit_axes(f, &fr, 1);
    /* training lines first (under), then validation, each run in its colour */
    fputs("<g clip-path=\"url(#moec-compare-area)\">\n", f);
    for (int k = 0; k < n; k++) {
        char attrs[96];
        snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-opacity=\"0.55\" stroke-width=\"1.4\"", run_color[k]);
        plot_emit_polyline(f, &runs[k].train, attrs);
    }
    for (int k = 0; k < n; k++) {
        char attrs[96];
        snprintf(attrs, sizeof attrs, "stroke=\"%s\" stroke-width=\"2.2\"", run_color[k]);
        plot_emit_polyline(f, &runs[k].val, attrs);
    }
    fputs("</g>\n", f);
    for (int k = 0; k < n; k++) {
        if (!markers[k] || runs[k].val.n == 0)
            continue;
        double r = runs[k].val.n > 60 ? 2.4 : 3.6;
        fprintf(f, "<g fill=\"%s\" stroke=\"#fff\" stroke-width=\"1\">", run_color[k]);
        for (size_t i = 0; i < runs[k].val.n; i++)
            emit_marker(f, k, runs[k].val.x[i], runs[k].val.y[i], r);
        fputs("</g>\n", f);
    }
    emit_legend(f, &fr, runs, n, markers);
    fprintf(f, "<text x=\"%s\" y=\"27\" font-size=\"17\" font-weight=\"bold\" fill=\"#222\">", plot_fmt_px(a, fr.x0));
    plot_xml_text(f, title, TITLE_MAX_CHARS);
    fputs("</text>\n", f);
    int all_smoothed = 1;
    for (int k = 0; k < n; k++)
        all_smoothed &= runs[k].smoothed;
    fprintf(f,
            "<text x=\"%s\" y=\"48\" font-size=\"12\" fill=\"#666\">%d runs &#183; thick lines with markers: "
            "validation loss &#183; thin lines: training loss%s</text>\n",
            plot_fmt_px(a, fr.x0), n, all_smoothed ? " (smoothed)" : "");
    emit_table(f, runs, n, CANVAS_H + TABLE_GAP - 8);
    fputs("</svg>\n", f);
    return 0;
}

int plot_compare_svg(const char *const *jsonl_paths, const char *const *labels, int n, const char *svg_path,
                     const char *title, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (n < 2 || n > PLOT_MAX_RUNS) {
        plot_set_err(err, errlen, "plot: compare 2 to %d runs, not %d", PLOT_MAX_RUNS, n);
        return -1;
    }
    if (!jsonl_paths || !svg_path) {
        plot_set_err(err, errlen, "plot: no %s path given", jsonl_paths ? "output" : "input");
        return -1;
    }
    Run runs[PLOT_MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int rc = -1;
    char *buf = NULL;
    size_t len = 0;
    for (int k = 0; k < n; k++) {
        runs[k].path = jsonl_paths[k];
        if (!runs[k].path) {
            plot_set_err(err, errlen, "plot: input %d has no path", k + 1);
            goto out;
        }
        if (labels && labels[k])
            snprintf(runs[k].label, sizeof runs[k].label, "%s", labels[k]);
        else
            default_label(runs[k].label, sizeof runs[k].label, runs[k].path);
        if (load_run(&runs[k], err, errlen) < 0)
            goto out;
    }
    /* final losses compare only at the same step */
    for (int k = 1; k < n; k++)
        if (runs[k].last_step != runs[0].last_step) {
            char a[32], b[32];
            plot_set_err(err, errlen,
                         "%s: the last validation loss is at step %s, %s's at step %s: the final losses do not "
                         "compare (runs of different lengths or --eval-every?)",
                         runs[k].path, plot_fmt_step(a, runs[k].last_step), runs[0].path,
                         plot_fmt_step(b, runs[0].last_step));
            goto out;
        }
    char deftitle[512];
    if (!title) {
        size_t o = (size_t)snprintf(deftitle, sizeof deftitle, "validation loss: ");
        for (int k = 0; k < n && o < sizeof deftitle; k++)
            o += (size_t)snprintf(deftitle + o, sizeof deftitle - o, "%s%s", k ? " vs " : "", runs[k].label);
        title = deftitle;
    }
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) {
        plot_set_err(err, errlen, "%s: out of memory", svg_path);
        goto out;
    }
    int r = render(mem, runs, n, title);
    if (ferror(mem) && r == 0)
        r = -1;
    if (fclose(mem) != 0 && r == 0)
        r = -1;
    if (r == -2) {
        plot_set_err(err, errlen, "%s: steps or losses of the runs span too wide a range to plot", jsonl_paths[0]);
        goto out;
    }
    if (r < 0) {
        plot_set_err(err, errlen, "%s: out of memory while drawing", svg_path);
        goto out;
    }
    rc = write_file(svg_path, buf, len, err, errlen) ? 0 : -1;
out:
    free(buf);
    for (int k = 0; k < n; k++)
        run_free(&runs[k]);
    return rc;
}
