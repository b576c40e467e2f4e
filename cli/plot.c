/* plot.c - `moec plot`: one run's metrics drawn (formats/plot.c), or
 * several runs overlaid for a comparison (formats/plot_compare.c). */
#include <stdio.h>
#include <string.h>

#include "../formats/plot.h"
#include "cli.h"

#define PLOT_USAGE "usage: moec plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg [--label NAME ...] [--title T]"

/* The value of option `name` at argv[*i] ("--name V" or "--name=V"), or
 * NULL when argv[*i] is not that option; *missing is set when it has no value. */
static const char *option_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int cli_plot(int argc, char **argv)
{
    const char *files[PLOT_MAX_RUNS + 1], *labels[PLOT_MAX_RUNS + 1];
    int nfiles = 0, nlabels = 0, extra_files = 0, extra_labels = 0;
    const char *out = NULL, *title = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_usage_for("plot"), stdout);
            return 0;
        } else if ((v = option_value(argc, argv, &i, "-o", &missing)) || missing) {
            if (missing || !*v)
                return cli_usage_error("plot ", "-o needs a file name%s", "");
            if (out)
                return cli_usage_error("plot ", "one -o at a time (got a second: '%s')", v);
            out = v;
        } else if ((v = option_value(argc, argv, &i, "--label", &missing)) || missing) {
            if (missing)
                return cli_usage_error("plot ", "--label needs a name%s", "");
            if (!*v)
                return cli_usage_error("plot ", "--label: a run's name cannot be empty%s", "");
            if (nlabels < PLOT_MAX_RUNS)
                labels[nlabels++] = v;
            else
                extra_labels++;
        } else if ((v = option_value(argc, argv, &i, "--title", &missing)) || missing) {
            if (missing)
                return cli_usage_error("plot ", "--title needs a text%s", "");
            title = v;
        } else if (a[0] == '-' && a[1] != '\0') {
            static const char *const known[] = {"-o", "--label", "--title", "--help", NULL};
            return cli_unknown_option("plot ", a, known);
        } else if (nfiles < PLOT_MAX_RUNS) {
            files[nfiles++] = a;
        } else {
            extra_files++;
        }
    }
    if (nfiles == 0 || !out)
        return cli_usage_error("plot ", PLOT_USAGE "%s", "");
    if (extra_files) {
        char msg[128];
        snprintf(msg, sizeof msg, "at most %d runs on one chart (got %d metrics files)", PLOT_MAX_RUNS,
                 nfiles + extra_files);
        return cli_usage_error("plot ", "%s", msg);
    }
    if (nlabels && nfiles == 1)
        return cli_usage_error("plot ", "--label names the runs of a comparison (two or more metrics files)%s", "");
    if (nlabels && nlabels + extra_labels != nfiles) {
        char msg[160];
        snprintf(msg, sizeof msg, "%d --label for %d metrics files: give one per file, in their order, or none",
                 nlabels + extra_labels, nfiles);
        return cli_usage_error("plot ", "%s", msg);
    }
    char err[1024];
    int rc = nfiles == 1 ? plot_metrics_svg(files[0], out, title, err, sizeof err)
                         : plot_compare_svg(files, nlabels ? labels : NULL, nfiles, out, title, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "moec: error: %s\n", err);
        return 1;
    }
    printf("wrote %s\n", out);
    return 0;
}
