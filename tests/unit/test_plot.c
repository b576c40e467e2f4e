/* test_plot.c - unit tests of the metrics plotter: a realistic run drawn
 * with every element (axes, both series, smoothing, reference line,
 * legend), title escaping, non-finite and repeated steps, thinning of long
 * runs, and each error (missing, empty, malformed, wrong types, unwritable)
 * with its file:line message and no output file left behind; several runs
 * compared on one chart (plot_compare_svg): the table's final losses and
 * differences, labels, and its own errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../formats/plot.h"
#include "check.h"


static char dir[64];

/* Path of a scratch file inside this run's temporary directory. */
static const char *tmp(const char *name)
{
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", dir, name);
    return b;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

/* Whole file as a string, or NULL when it does not exist. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Deterministic noise in [-1, 1). */
static double noise(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return ((*state >> 8) & 0xFFFF) / 32768.0 - 1.0;
}

/* A run: header with unigram entropy, 200 steps of decaying noisy loss,
 * val_loss every 20 steps, and event records in between. */
static void write_run(const char *path)
{
    FILE *f = fopen(path, "w");
    unsigned st = 7;
    fprintf(f, "{\"event\": \"start\", \"model\": \"tiny\", \"unigram_entropy\": 7.42}\n");
    for (int step = 1; step <= 200; step++) {
        double loss = 2.9 + 7.9 * exp(-step / 28.0) + 0.18 * noise(&st);
        fprintf(f, "{\"step\": %d, \"loss\": %.4f, \"lr\": 0.0003, \"tokens_per_s\": 12000.5, \"grad_norm\": 1.1",
                step, loss);
        if (step % 20 == 0)
            fprintf(f, ", \"val_loss\": %.4f", 3.0 + 7.6 * exp(-step / 28.0) + 0.03 * noise(&st));
        fprintf(f, ", \"elapsed_s\": %.2f}\n", step * 0.5);
        if (step == 100)
            fprintf(f, "{\"event\": \"checkpoint\", \"path\": \"ckpt/100.bin\"}\n");
        if (step == 150)
            fprintf(f, "\n"); /* blank lines are allowed */
    }
    fprintf(f, "{\"event\": \"done\"}\n");
    fclose(f);
}

/* Number of points in the polyline with the most of them. */
static int max_polyline_points(const char *svg)
{
    int best = 0;
    for (const char *p = svg; (p = strstr(p, "<polyline")); p++) {
        const char *pts = strstr(p, "points=\"");
        if (!pts)
            break;
        int n = 1;
        for (pts += 8; *pts && *pts != '"'; pts++)
            n += *pts == ' ';
        if (n > best)
            best = n;
    }
    return best;
}

/* Longest run of digits after a '.' inside any points="..." attribute. */
static int max_point_decimals(const char *svg)
{
    int best = 0;
    for (const char *p = svg; (p = strstr(p, "points=\"")); p++) {
        int run = -1;
        for (p += 8; *p && *p != '"'; p++) {
            if (*p == '.')
                run = 0;
            else if (*p >= '0' && *p <= '9' && run >= 0)
                run++;
            else
                run = -1;
            if (run > best)
                best = run;
        }
    }
    return best;
}

static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static void test_run(void)
{
    char err[512];
    const char *in = tmp("run.jsonl"), *out = tmp("run.svg");
    write_run(in);
    int rc = plot_metrics_svg(in, out, NULL, err, sizeof err);
    CHECK(rc == 0, "rc %d: %s", rc, err);
    char *svg = read_text(out);
    CHECK(svg != NULL, "no %s", out);
    if (!svg)
        return;
    CHECK(strncmp(svg, "<svg ", 5) == 0, "starts with %.20s", svg);
    CHECK(strstr(svg, "xmlns=\"http://www.w3.org/2000/svg\"") != NULL, "namespace");
    CHECK(strstr(svg, "width=\"900\" height=\"540\"") != NULL, "size");
    CHECK(strcmp(svg + strlen(svg) - 7, "</svg>\n") == 0, "ends with </svg>");
    CHECK(strstr(svg, "fill=\"#fff\"") != NULL, "white background");
    CHECK(strstr(svg, ">step</text>") != NULL, "x axis label");
    CHECK(strstr(svg, ">loss (nats)</text>") != NULL, "y axis label");
    CHECK(strstr(svg, ">train loss</text>") != NULL, "legend: train loss");
    CHECK(strstr(svg, ">train loss (smoothed)</text>") != NULL, "legend: smoothed");
    CHECK(strstr(svg, ">val loss</text>") != NULL, "legend: val loss");
    CHECK(strstr(svg, ">unigram entropy (7.420)</text>") != NULL, "legend: reference");
    CHECK(strstr(svg, "stroke-dasharray") != NULL, "dashed reference line");
    CHECK(strstr(svg, ">run.jsonl</text>") != NULL, "file name as title");
    CHECK(strstr(svg, "non-finite") == NULL, "no non-finite note");
    /* raw train and smoothed lines keep all 200 points, val has 10 markers */
    CHECK(count_of(svg, "<polyline") == 3, "%d polylines", count_of(svg, "<polyline"));
    CHECK(max_polyline_points(svg) == 200, "%d points", max_polyline_points(svg));
    CHECK(count_of(svg, "<circle") == 10 + 1, "%d circles (10 val + legend)", count_of(svg, "<circle"));
    /* round ticks: steps 0..200 by 20, loss by 1 */
    CHECK(strstr(svg, ">200</text>") && strstr(svg, ">100</text>") && strstr(svg, ">0</text>"), "x ticks");
    CHECK(strstr(svg, ">3</text>") && strstr(svg, ">10</text>"), "y ticks");
    CHECK(strstr(svg, "last step 200") != NULL, "summary");
    CHECK(max_point_decimals(svg) == 1, "%d decimals in points", max_point_decimals(svg));
    CHECK(strlen(svg) < 20000, "svg is %zu bytes", strlen(svg));
    free(svg);
}

static void test_title_escaped(void)
{
    char err[512];
    const char *in = tmp("run.jsonl"), *out = tmp("title.svg");
    int rc = plot_metrics_svg(in, out, "a<b & \"c\" 'd' \x01 \xff", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    char *svg = read_text(out);
    if (!svg)
        return;
    CHECK(strstr(svg, ">a&lt;b &amp; &quot;c&quot; &apos;d&apos;   &#xFFFD;</text>") != NULL, "escaped title");
    CHECK(strstr(svg, "a<b") == NULL, "raw < in title");
    free(svg);

    char longt[300];
    memset(longt, 'x', sizeof longt - 1);
    longt[sizeof longt - 1] = '\0';
    CHECK(plot_metrics_svg(in, out, longt, err, sizeof err) == 0, "%s", err);
    svg = read_text(out);
    CHECK(svg && strstr(svg, "xxx&#8230;</text>"), "long title cut with an ellipsis");
    free(svg);
}

static void test_nonfinite_and_repeats(void)
{
    char err[512];
    const char *in = tmp("nan.jsonl"), *out = tmp("nan.svg");
    write_text(in, "{\"step\": 1, \"loss\": 9.0}\n"
                   "{\"step\": 2, \"loss\": NaN}\n"
                   "{\"step\": 3, \"loss\": 9.5, \"val_loss\": Infinity}\n"
                   "{\"step\": 4, \"loss\": null, \"note\": \"NaN stays a string\"}\n"
                   "{\"step\": 5, \"loss\": 1e999}\n"
                   "{\"step\": 3, \"loss\": 2.5, \"val_loss\": 2.75}\n"
                   "{\"step\": 6, \"loss\": -inf, \"val_loss\": 2.5}\n");
    int rc = plot_metrics_svg(in, out, "non-finite", err, sizeof err);
    CHECK(rc == 0, "%s", err);
    char *svg = read_text(out);
    CHECK(svg != NULL, "no svg");
    if (!svg)
        return;
    /* step 3 was logged again: the later 2.5 wins, and its val point too */
    CHECK(strstr(svg, "train 2.500") != NULL, "last of a repeated step wins");
    CHECK(strstr(svg, "val 2.500 (best 2.500 at step 6)") != NULL, "val summary");
    CHECK(strstr(svg, "non-finite train loss: 4 (skipped)") != NULL, "non-finite counted in the legend");
    CHECK(strstr(svg, "nan") == NULL, "nan leaked into the svg");
    CHECK(strstr(svg, "inf") == NULL, "inf leaked into the svg");
    free(svg);
}

static void test_single_point(void)
{
    char err[512];
    const char *in = tmp("one.jsonl"), *out = tmp("one.svg");
    write_text(in, "{\"step\": 0, \"loss\": 10.8}\n");
    int rc = plot_metrics_svg(in, out, NULL, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    char *svg = read_text(out);
    CHECK(svg && strstr(svg, "<circle"), "a single point is drawn as a marker");
    CHECK(svg && strstr(svg, "nan") == NULL && strstr(svg, "inf") == NULL, "degenerate ranges");
    free(svg);

    const char *in2 = tmp("flat.jsonl"), *out2 = tmp("flat.svg");
    write_text(in2, "{\"step\": 5, \"val_loss\": 4}\n{\"step\": 9, \"val_loss\": 4}\n");
    CHECK(plot_metrics_svg(in2, out2, NULL, err, sizeof err) == 0, "val only, flat: %s", err);
    svg = read_text(out2);
    CHECK(svg && strstr(svg, ">val loss</text>") && !strstr(svg, ">train loss"), "val-only legend");
    free(svg);
}

static void test_long_run_is_thinned(void)
{
    char err[512];
    const char *in = tmp("long.jsonl"), *out = tmp("long.svg");
    FILE *f = fopen(in, "w");
    unsigned st = 3;
    for (int step = 0; step < 200000; step++)
        fprintf(f, "{\"step\":%d,\"loss\":%.4f,\"val_loss\":%.4f}\n", step,
                3 + 5 * exp(-step / 8000.0) + 0.2 * noise(&st), 3.1 + 5 * exp(-step / 8000.0));
    fclose(f);
    CHECK(plot_metrics_svg(in, out, NULL, err, sizeof err) == 0, "%s", err);
    char *svg = read_text(out);
    CHECK(svg != NULL, "no svg");
    if (!svg)
        return;
    CHECK(strlen(svg) < 100000, "svg is %zu bytes", strlen(svg));
    CHECK(max_polyline_points(svg) > 1000, "%d points", max_polyline_points(svg));
    CHECK(strstr(svg, ">100k</text>") != NULL, "k suffix on x ticks");
    CHECK(strstr(svg, ">0</text>") != NULL, "zero without a suffix");
    CHECK(strstr(svg, "<circle") == NULL, "no markers for 200000 val points");
    CHECK(strstr(svg, ">val loss</text>") != NULL, "val in the legend");
    free(svg);
}

/* Calls the plotter on text that must fail; checks the message contains
 * want and that no svg was written. */
static void expect_error(const char *text, const char *want, int line)
{
    char err[512] = "unset";
    const char *in = tmp("bad.jsonl"), *out = tmp("bad.svg");
    unlink(out);
    if (text)
        write_text(in, text);
    else
        unlink(in);
    int rc = plot_metrics_svg(in, out, NULL, err, sizeof err);
    CHECK(rc == -1, "line %d: rc %d", line, rc);
    CHECK(strstr(err, want) != NULL, "line %d: message \"%s\" lacks \"%s\"", line, err, want);
    CHECK(strstr(err, "bad.jsonl") != NULL, "line %d: message \"%s\" lacks the file name", line, err);
    CHECK(strchr(err, '\n') == NULL, "line %d: newline in message", line);
    CHECK(!exists(out), "line %d: svg written on error", line);
}

static void test_errors(void)
{
    expect_error(NULL, "cannot open", __LINE__);
    expect_error("", "empty file", __LINE__);
    expect_error("\n  \n", "empty file", __LINE__);
    expect_error("{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 3}\n{\"step\": 3, \"loss\": }\n", ":3:",
                 __LINE__);
    expect_error("{\"step\": 1, \"loss\": 3}\n\n{\"step\": 2 \"loss\": 3}\n", ":3: malformed JSON at column 12",
                 __LINE__);
    expect_error("{\"step\": 1, \"loss\": 3} trailing\n", ":1: malformed JSON", __LINE__);
    expect_error("{\"step\": 1, \"loss\": 3}\n[1, 2]\n", ":2: expected a JSON object, found an array", __LINE__);
    expect_error("{\"step\": \"one\", \"loss\": 3}\n", ":1: \"step\" is a string", __LINE__);
    expect_error("{\"step\": 1, \"loss\": \"3.2\"}\n", ":1: \"loss\" is a string, expected a number", __LINE__);
    expect_error("{\"event\": \"start\"}\n{\"lr\": 1}\n", "no step records", __LINE__);
    expect_error("{\"step\": 1, \"lr\": 0.1}\n", "no step records", __LINE__);
    expect_error("{\"step\": 1, \"loss\": NaN}\n", "every loss value", __LINE__);
    expect_error("{\"step\": 1, \"loss\": -1e308}\n{\"step\": 2, \"loss\": 1e308}\n", "too wide a range", __LINE__);
    expect_error("{\"step\": 1e999, \"loss\": 3}\n", ":1: \"step\" is not a finite number", __LINE__);
    expect_error("{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 3, \"unigram_entropy\": \"x\"}\n",
                 ":2: \"unigram_entropy\" is a string", __LINE__);

    /* an unwritable output path */
    char err[512];
    int rc = plot_metrics_svg(tmp("run.jsonl"), "/nonexistent-dir/x.svg", NULL, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "/nonexistent-dir/x.svg: cannot write"), "unwritable: %s", err);
    /* no error buffer is fine */
    CHECK(plot_metrics_svg(tmp("missing.jsonl"), tmp("x.svg"), NULL, NULL, 0) == -1, "NULL err");
}

/* A run for the comparison: val_loss every 10 steps to step `last`, ending
 * at `final` (a string: "2.05", "NaN"); training loss at every step. */
static void write_cmp_run(const char *path, int last, const char *final, int with_val)
{
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"event\": \"start\", \"unigram_entropy\": 2.9}\n");
    for (int step = 1; step <= last; step++) {
        fprintf(f, "{\"step\": %d, \"loss\": %.4f", step, 2.1 + 2.0 * exp(-step / 15.0));
        if (with_val && step % 10 == 0) {
            if (step == last)
                fprintf(f, ", \"val_loss\": %s", final);
            else
                fprintf(f, ", \"val_loss\": %.4f", 2.2 + 2.0 * exp(-step / 15.0));
        }
        fputs("}\n", f);
    }
    fclose(f);
}

static void test_compare(void)
{
    char err[512] = "";
    write_cmp_run(tmp("ra.jsonl"), 100, "2.0", 1);
    write_cmp_run(tmp("rb.jsonl"), 100, "2.05", 1);
    write_cmp_run(tmp("rc.jsonl"), 100, "1.9", 1);
    const char *paths[] = {tmp("ra.jsonl"), tmp("rb.jsonl"), tmp("rc.jsonl")};
    int rc = plot_compare_svg(paths, NULL, 3, tmp("cmp.svg"), NULL, err, sizeof err);
    CHECK(rc == 0, "compare: %s", err);
    char *svg = read_text(tmp("cmp.svg"));
    CHECK(svg && strncmp(svg, "<svg ", 5) == 0, "compare: an svg");
    if (svg) {
        CHECK(strstr(svg, "<title>validation loss: ra vs rb vs rc</title>") != NULL, "default title from file names");
        CHECK(strstr(svg, ">reference</text>") != NULL, "the first run is the reference");
        CHECK(strstr(svg, ">+2.50%</text>") != NULL, "2.05 vs 2.0 is +2.50%%");
        CHECK(strstr(svg, ">-5.00%</text>") != NULL, "1.9 vs 2.0 is -5.00%%");
        CHECK(strstr(svg, ">2.050</text>") != NULL, "final loss of rb");
        CHECK(strstr(svg, ">rb.jsonl</text>") != NULL, "file names in the table");
        CHECK(strstr(svg, "#1f77b4") && strstr(svg, "#ff7f0e") && strstr(svg, "#2ca02c"), "a colour per run");
        CHECK(strstr(svg, "training loss (smoothed)") != NULL, "the key says the training lines are smoothed");
        CHECK(strstr(svg, "</svg>\n") != NULL, "closed");
        /* per run: one training and one validation polyline */
        int lines = 0;
        for (const char *q = svg; (q = strstr(q, "<polyline")); q++)
            lines++;
        CHECK(lines == 6, "%d polylines, expected 6", lines);
    }
    free(svg);
    /* labels and title given; a non-finite final loss has no difference */
    write_cmp_run(tmp("rn.jsonl"), 100, "NaN", 1);
    const char *p2[] = {tmp("ra.jsonl"), tmp("rn.jsonl")};
    const char *labels[] = {"bf16 <ref>", "fp8"};
    rc = plot_compare_svg(p2, labels, 2, tmp("cmp2.svg"), "my title", err, sizeof err);
    CHECK(rc == 0, "compare with labels: %s", err);
    svg = read_text(tmp("cmp2.svg"));
    if (svg) {
        CHECK(strstr(svg, "<title>my title</title>") != NULL, "title given");
        CHECK(strstr(svg, ">bf16 &lt;ref&gt;</text>") != NULL, "label escaped");
        CHECK(strstr(svg, ">non-finite</text>") != NULL, "a NaN final loss is shown as such");
        CHECK(strstr(svg, ">&#8212;</text>") != NULL, "and no difference for it");
    }
    free(svg);

    /* errors: located, and no picture left behind */
    struct {
        const char *file, *want;
    } bad[] = {
        {"missing.jsonl", "missing.jsonl: cannot open"},
        {"noval.jsonl", "noval.jsonl: no validation loss (\"val_loss\") to compare: train with --eval-every"},
        {"short.jsonl", "short.jsonl: the last validation loss is at step 50, "},
        {"badline.jsonl", "badline.jsonl:3: malformed JSON"},
    };
    write_cmp_run(tmp("noval.jsonl"), 100, "", 0);
    write_cmp_run(tmp("short.jsonl"), 50, "2.0", 1);
    write_text(tmp("badline.jsonl"), "{\"step\": 1, \"loss\": 3}\n{\"step\": 2, \"loss\": 3}\n{\"step\": 3,\n");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *pp[] = {tmp("ra.jsonl"), tmp(bad[i].file)};
        unlink(tmp("bad.svg"));
        err[0] = '\0';
        rc = plot_compare_svg(pp, NULL, 2, tmp("bad.svg"), NULL, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].want) != NULL, "%s: rc %d, \"%s\"", bad[i].file, rc, err);
        CHECK(!exists(tmp("bad.svg")), "%s: svg written on error", bad[i].file);
    }
    char ra[256];
    snprintf(ra, sizeof ra, "%s", tmp("ra.jsonl")); /* tmp()'s buffers are reused */
    const char *nine[9];
    for (int i = 0; i < 9; i++)
        nine[i] = ra;
    CHECK(plot_compare_svg(nine, NULL, 9, tmp("bad.svg"), NULL, err, sizeof err) == -1 &&
              strstr(err, "compare 2 to 8 runs, not 9"),
          "nine runs: %s", err);
    CHECK(plot_compare_svg(nine, NULL, 1, tmp("bad.svg"), NULL, err, sizeof err) == -1 &&
              strstr(err, "compare 2 to 8 runs, not 1"),
          "one run: %s", err);
    CHECK(plot_compare_svg(nine, NULL, 8, tmp("cmp8.svg"), NULL, err, sizeof err) == 0, "eight runs: %s", err);
    CHECK(!exists(tmp("bad.svg")), "no svg from the run-count errors");
}

static void remove_dir(void)
{
    const char *names[] = {"run.jsonl", "run.svg", "title.svg", "nan.jsonl", "nan.svg", "one.jsonl", "one.svg",
                           "flat.jsonl", "flat.svg",
                           "long.jsonl", "long.svg", "bad.jsonl", "bad.svg", "ra.jsonl", "rb.jsonl",
                           "rc.jsonl", "rn.jsonl", "noval.jsonl", "short.jsonl", "badline.jsonl", "cmp.svg",
                           "cmp2.svg", "cmp8.svg"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unlink(tmp(names[i]));
    rmdir(dir);
}

int main(int argc, char **argv)
{
    snprintf(dir, sizeof dir, "/tmp/test_plot.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    test_run();
    test_title_escaped();
    test_nonfinite_and_repeats();
    test_single_point();
    test_long_run_is_thinned();
    test_errors();
    test_compare();
    /* --keep leaves the files for a look (tests/unit/test_plot --keep) */
    if (argc > 1 && strcmp(argv[1], "--keep") == 0)
        fprintf(stderr, "test_plot: files kept in %s\n", dir);
    else
        remove_dir();
    printf("test_plot: %d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
