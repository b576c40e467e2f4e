/* plot.h - draw a training run's loss curves from its metrics JSONL as SVG.
 *
 * A training binary writes one JSON object per line ({"step": 10, "loss":
 * 3.21, ...}); `moec plot` turns that file into a picture a person can read
 * without Python: training loss (raw and smoothed), validation loss, and the
 * unigram-entropy reference line when the run logged one. */
#ifndef MOEC_PLOT_H
#define MOEC_PLOT_H

#include <stddef.h>

/* Reads jsonl_path and writes an SVG of loss and val_loss against step to
 * svg_path. title is XML-escaped; NULL means the input's file name.
 *
 * Input rules: blank lines are skipped; every other line must be a JSON
 * object. Objects without a numeric "step" (event records, the run header)
 * are skipped, except that a numeric "unigram_entropy" on any line becomes
 * the dashed reference line. "loss" and "val_loss" may be numbers or null;
 * NaN/Infinity tokens (which Python's json module writes) are accepted and,
 * like null, count as non-finite points: they are left out of the lines,
 * marked along the x axis and counted in the legend. A step logged twice
 * (a resumed run) keeps its last value.
 *
 * Returns 0 on success. On failure returns -1, writes a one-line message
 * (no trailing newline) into err (when err is non-NULL and errlen > 0), and
 * leaves no partial svg_path behind. Messages name the file, and the line
 * for bad input: "m.jsonl:3: malformed JSON at column 12". */
int plot_metrics_svg(const char *jsonl_path, const char *svg_path, const char *title, char *err,
                     size_t errlen);

/* plot_compare.c: several runs on one chart (`moec plot A.jsonl B.jsonl ...`).
 * Reads each of the n files (2 to PLOT_MAX_RUNS) by the rules above and
 * writes one SVG: per run its validation loss (a thick line with markers)
 * and training loss (thin; smoothed as in the single-run plot) in a colour
 * of its own, a legend of the labels, and under the chart a table of each
 * run's final validation loss (at its last evaluation, finite or not) with
 * the difference from the first run's in percent. labels: NULL, or n
 * strings (NULL entries: the file name without ".jsonl"); title NULL:
 * "validation loss: A vs B ...". Errors as plot_metrics_svg's, and these:
 * a file without "val_loss" records ("... train with --eval-every N"), runs
 * whose last evaluation is at different steps (their final losses would not
 * compare). */
#define PLOT_MAX_RUNS 8
int plot_compare_svg(const char *const *jsonl_paths, const char *const *labels, int n, const char *svg_path,
                     const char *title, char *err, size_t errlen);

/* plot_moe.c: the panels below the loss curves when the metrics carry
 * lm_loss / aux_loss or per-layer expert load ("moe"): their height (0:
 * none) and state from the file, then drawn at y0 (which frees the state). */
#include <stdio.h>
int plot_moe_panels_height(const char *jsonl_path, void **state);
void plot_moe_panels(FILE *f, void *state, double y0);

#endif
