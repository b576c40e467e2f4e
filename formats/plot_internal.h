/* plot_internal.h - what the files of `moec plot` share (plot.c: one run;
 * plot_compare.c: several runs overlaid): the metrics reader, the number
 * formats, the axes and the polyline helpers. Not an API: only formats/plot*.c
 * include it. */
#ifndef MOEC_PLOT_INTERNAL_H
#define MOEC_PLOT_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

/* ---- canvas layout (pixels) ---- */
enum {
    CANVAS_W = 900,
    CANVAS_H = 540,
    MARGIN_L = 78,
    MARGIN_R = 26,
    MARGIN_T = 66,
    MARGIN_B = 58,
};

#define FONT_FAMILY "DejaVu Sans,Helvetica,Arial,sans-serif"
#define TITLE_MAX_CHARS 66 /* bold 17px: about 10px a character, 796px of room */
/* Average advance of DejaVu Sans at 12px; used to size boxes around text. */
#define LEGEND_CHAR_W 6.9

typedef struct Point {
    double step;
    double value; /* NaN for a null, NaN or infinite loss */
    size_t seq;   /* input order, so the last of a repeated step wins */
} Point;

typedef struct Series {
    Point *p;
    size_t n, cap;
    size_t nonfinite; /* after de-duplication */
    size_t nfinite;
} Series;

/* One run's metrics file: sorted by step, one point per step (the last
 * logged), as plot.h's input rules describe. */
typedef struct Metrics {
    Series train, val;
    int have_ref;
    double ref;
} Metrics;

typedef struct Axis {
    double lo, hi;     /* data range shown */
    double tick;       /* 1, 2 or 5 times a power of ten */
    long first, count; /* ticks are (first + i) * tick */
} Axis;

typedef struct Frame {
    double x0, x1, y0, y1; /* plot area in pixels; y0 is the top */
    Axis xa, ya;
} Frame;

/* A polyline in pixel coordinates, thinned for drawing. */
typedef struct Path {
    double *x, *y;
    size_t n;
} Path;

void plot_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reads path into m (zeroed by the caller; free m->train.p and m->val.p after,
 * also on failure). Returns 0, or -1 with a located message in err. */
int plot_load_metrics(const char *path, Metrics *m, char *err, size_t errlen);

/* numbers for the SVG (pixels: one decimal), for people (losses, steps) */
const char *plot_fmt_px(char buf[32], double v);
const char *plot_fmt_val(char buf[32], double v);
const char *plot_fmt_step(char buf[32], double v);
/* s as XML character data, at most max_chars characters (an ellipsis when cut) */
void plot_xml_text(FILE *f, const char *s, size_t max_chars);
/* the file name of a path, without its directories */
const char *plot_base_name(const char *path);

/* ticks at 1, 2 or 5 times a power of ten, about `target` of them */
void plot_axis_ticks(Axis *a, int target, int integral, int nonneg);
double plot_map_x(const Frame *fr, double v);
double plot_map_y(const Frame *fr, double v);
/* grid, frame, ticks, their labels and the axis titles (step, loss) */
void plot_emit_axes(FILE *f, const Frame *fr, int x_suffix);

/* the finite points as pixels; thin: per pixel column only first, lowest, highest, last */
int plot_path_build(Path *p, const Frame *fr, const double *steps, const double *values, size_t n, int thin);
void plot_path_free(Path *p);
void plot_emit_polyline(FILE *f, const Path *p, const char *attrs);
/* bias-corrected exponential moving average over the finite values; a span of a fiftieth of them */
void plot_ema_smooth(const double *values, double *out, size_t n, size_t nfinite);

#endif
