/* options.c - the options every `moec` command takes (--format,
 * --print-ir-after, --precision, --ep/--dp, -o, ...) parsed into Options,
 * the pass plugins of --load-pass, and the usage errors (exit status 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/compile.h"
#include "../plan/plan.h"
#include "../util/util.h"
#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "moec: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'moec %s--help' for usage.\n", cmd ? cmd : "");
    return 2;
}

int cli_unknown_option(const char *cmdsp, const char *opt, const char *const *known)
{
    char msg[512];
    const char *best = suggest_among(opt, known);
    snprintf(msg, sizeof msg, "unknown option '%s'%s%s%s", opt, best ? "; did you mean '" : "", best ? best : "",
             best ? "'?" : "");
    return cli_usage_error(cmdsp, "%s", msg);
}

static int valid_pass_selector(const char *s)
{
    return strcmp(s, "all") == 0 || pass_find(s) != NULL;
}

static int bad_pass_selector(const char *flag, const char *s, int all_allowed)
{
    fprintf(stderr, "moec: %s: unknown pass '%s'; the passes are:", flag, s);
    for (int i = 0; i < pass_count(); i++)
        fprintf(stderr, " %s", pass_get(i)->name);
    fprintf(stderr, "%s\n", all_allowed ? " (or all)" : "");
    return 2;
}

static int option_takes_value(const char *a)
{
    static const char *const with_value[] = {"--format", "--print-ir-after", "--print-ir-before",
                                             "--disable-pass", "--load-pass", "--precision", "--ep", "--dp",
                                             "--emit-cuda", "--arch", "--passes", "--kernels"};
    for (int i = 0; i < ARRAY_LEN(with_value); i++)
        if (strcmp(a, with_value[i]) == 0)
            return 1;
    return 0;
}

/* --load-pass is handled before everything else, so that the passes it adds
 * can be named by --print-ir-after and --disable-pass. */
const char *cli_plugin_paths[16];
int cli_nplugin_paths;

int cli_load_plugins(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        const char *path = NULL;
        if (strcmp(argv[i], "--load-pass") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--load-pass=", 12) == 0)
            path = argv[i] + 12;
        if (!path)
            continue;
        char err[1024];
        if (cli_nplugin_paths == ARRAY_LEN(cli_plugin_paths)) {
            fprintf(stderr, "moec: error: at most %d --load-pass plugins\n", ARRAY_LEN(cli_plugin_paths));
            return 2;
        }
        if (!pass_load_plugin(path, err, sizeof err)) {
            fprintf(stderr, "moec: error: --load-pass %s: %s\n", path, err);
            return 1;
        }
        cli_plugin_paths[cli_nplugin_paths++] = path;
    }
    return -1;
}

/* Parses argv after the command. Returns -1 to continue, else an exit code. */
int cli_parse_options(int argc, char **argv, Options *o)
{
    char cmdsp[64];
    snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int takes_value = option_takes_value(a);
        char flag[64] = {0};
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            takes_value = option_takes_value(flag);
            if (takes_value) {
                val = eq + 1;
                a = flag;
            }
        }
        if (takes_value && !val) {
            if (i + 1 >= argc)
                return cli_usage_error(cmdsp, "option %s needs a value", a);
            val = argv[++i];
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(cli_usage_for(o->command), stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("moec %s\n", moec_version());
            return 0;
        } else if (strcmp(a, "--format") == 0) {
            if (strcmp(o->command, "dump") != 0 && strcmp(o->command, "explain") != 0 &&
                strcmp(o->command, "opt") != 0)
                return cli_usage_error(cmdsp, "--format belongs to 'moec dump', 'moec opt' and 'moec explain'%s", "");
            if (strcmp(o->command, "explain") == 0 && strcmp(val, "dot") == 0)
                return cli_usage_error(cmdsp, "--format: explain writes text or json%s", "");
            if (strcmp(val, "text") == 0) o->format = PRINT_TEXT;
            else if (strcmp(val, "json") == 0) o->format = PRINT_JSON;
            else if (strcmp(val, "dot") == 0) o->format = PRINT_DOT;
            else return cli_usage_error(cmdsp, "--format: '%s' is not one of text, json, dot", val);
        } else if (strcmp(a, "--print-ir-after") == 0) {
            if (!valid_pass_selector(val))
                return bad_pass_selector(a, val, 1);
            o->print_after = val;
        } else if (strcmp(a, "--print-ir-before") == 0) {
            if (!valid_pass_selector(val))
                return bad_pass_selector(a, val, 1);
            o->print_before = val;
        } else if (strcmp(a, "--load-pass") == 0) {
            /* loaded by cli_load_plugins() */
        } else if (strcmp(a, "--disable-pass") == 0) {
            if (!pass_find(val))
                return bad_pass_selector(a, val, 0);
            if (o->ndisabled == ARRAY_LEN(o->disabled))
                return cli_usage_error(cmdsp, "too many --disable-pass options%s", "");
            o->disabled[o->ndisabled++] = val;
        } else if (strcmp(a, "--precision") == 0) {
            if (strcmp(val, "bf16") == 0) o->precision = IR_PREC_BF16;
            else if (strcmp(val, "mxfp8") == 0) o->precision = IR_PREC_MXFP8;
            else if (strcmp(val, "fp8-block") == 0) o->precision = IR_PREC_FP8_BLOCK;
            else return cli_usage_error(cmdsp, "--precision: '%s' is not one of bf16, mxfp8, fp8-block", val);
            o->has_precision = 1;
        } else if (strcmp(a, "--ep") == 0 || strcmp(a, "--dp") == 0) {
            char *end;
            long long v = strtoll(val, &end, 10);
            if (*end || end == val || v < 1 || v > 4096)
                return cli_usage_error(cmdsp, "expected a rank count from 1 to 4096, got '%s'", val);
            if (a[2] == 'e')
                o->ep = v;
            else
                o->dp = v;
        } else if (strcmp(a, "--emit-cuda") == 0 || strcmp(a, "--arch") == 0) {
            if (strcmp(o->command, "compile") != 0)
                return cli_usage_error(cmdsp, "%s belongs to 'moec compile'", a);
            if (!*val)
                return cli_usage_error(cmdsp, "%s needs a value", a);
            if (a[2] == 'e')
                o->emit_cuda = val;
            else
                o->arch = val;
        } else if (strcmp(a, "--kernels") == 0) {
            if (strcmp(o->command, "compile") != 0 && strcmp(o->command, "explain") != 0)
                return cli_usage_error(cmdsp, "--kernels belongs to 'moec compile' and 'moec explain'%s", "");
            o->kernels_given = 1;
            if (strcmp(val, "reference") == 0) o->kernels = PLAN_KERNELS_REFERENCE;
            else if (strcmp(val, "fast") == 0) o->kernels = PLAN_KERNELS_FAST;
            else return cli_usage_error(cmdsp, "--kernels: '%s' is not one of fast, reference", val);
        } else if (strcmp(a, "--passes") == 0) {
            if (strcmp(o->command, "opt") != 0)
                return cli_usage_error(cmdsp, "--passes belongs to 'moec opt'%s", "");
            char name[128];
            for (const char *q = val;;) {
                size_t n = strcspn(q, ",");
                snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), q);
                if (!pass_find(name))
                    return bad_pass_selector(a, name, 0);
                if (!q[n])
                    break;
                q += n + 1;
            }
            o->passes = val;
        } else if (strcmp(a, "--ir") == 0) {
            o->ir = 1;
        } else if (strcmp(a, "--stats") == 0) {
            o->stats = 1;
        } else if (strcmp(a, "--no-verify") == 0) {
            o->no_verify = 1;
        } else if (strcmp(a, "-o") == 0) {
            if (strcmp(o->command, "compile") != 0 && strcmp(o->command, "plot") != 0)
                return cli_usage_error(cmdsp, "-o belongs to 'moec compile' and 'moec plot'%s", "");
            if (i + 1 >= argc)
                return cli_usage_error(cmdsp, "-o needs a file name%s", "");
            o->output = argv[++i];
        } else if (a[0] == '-' && a[1] != 0) {
            static const char *const known[] = {
                "--help", "--version", "--format", "--print-ir-after", "--print-ir-before", "--load-pass",
                "--disable-pass", "--precision", "--ep", "--dp", "--emit-cuda", "--arch", "--kernels", "--passes",
                "--ir", "--stats", "--no-verify", "-o", NULL};
            return cli_unknown_option(cmdsp, a, known);
        } else if (o->file) {
            return cli_usage_error(cmdsp, "one model file at a time (got a second: '%s')", a);
        } else {
            o->file = a;
        }
    }
    /* the kernels by default (decision 48): fast, where a node qualifies; with --arch for another GPU than
     * sm_90 (the fast kernels are sm_90a code), the reference kernels, which compile for any */
    if (!o->kernels_given) {
        o->kernels = PLAN_KERNELS_FAST;
        if (o->arch && !plan_arch_takes_fast(o->arch)) {
            o->kernels = PLAN_KERNELS_REFERENCE;
            o->kernels_for_arch = 1;
        }
    }
    return -1;
}
