/* cli.h - what the files of the `moec` command share: the parsed options,
 * the usage errors, the pass plugins named by --load-pass, and the commands
 * that main.c dispatches to. Not an API: nothing outside cli/ includes it. */
#ifndef MOEC_CLI_H
#define MOEC_CLI_H

#include <stdint.h>

#include "../driver/compile.h"

typedef struct Options {
    const char *command;
    const char *file;
    PrintFormat format;
    const char *print_before, *print_after;
    int stats;
    int no_verify;
    const char *output;      /* -o */
    const char *disabled[16];
    int ndisabled;
    int has_precision;
    IrPrecision precision;
    int64_t ep, dp;
    const char *emit_cuda;   /* compile --emit-cuda DIR */
    const char *arch;        /* compile --arch ARCH */
    int kernels;             /* compile, explain --kernels: PlanKernels; without --kernels fast, except for
                                compile --arch other than sm_90a: reference (decision 48) */
    int kernels_given;       /* --kernels was given (explain then adds codegen's choices) */
    int kernels_for_arch;    /* compile: reference chosen because --arch cannot run the fast kernels */
    int ir;                  /* --ir: FILE is IR text (as a .mir file is) */
    const char *passes;      /* opt --passes A,B,... */
} Options;

/* main.c: the help text of a command (NULL: the main one), NULL for no such command */
const char *cli_usage_for(const char *cmd);

/* options.c */
/* "moec: <fmt with arg>" and "Run 'moec <cmd>--help' for usage." (cmd ends in a space, or is NULL); returns 2 */
int cli_usage_error(const char *cmd, const char *fmt, const char *arg);
/* "unknown option 'OPT'; did you mean 'X'?" (X the nearest of the NULL-terminated `known`, when one is near)
 * as a usage error of the command `cmdsp` ("check "): returns 2. */
int cli_unknown_option(const char *cmdsp, const char *opt, const char *const *known);
/* the --load-pass plugins, loaded by cli_load_plugins, in the order given */
extern const char *cli_plugin_paths[16];
extern int cli_nplugin_paths;
/* Loads the --load-pass plugins. Returns -1 to continue, else an exit code. */
int cli_load_plugins(int argc, char **argv);
/* Parses argv after the command. Returns -1 to continue, else an exit code. */
int cli_parse_options(int argc, char **argv, Options *o);

/* compile.c: `moec compile` of the compiled model in c; the exit status */
int cli_compile_command(const Options *o, Compilation *c);
/* inspect.c: check, dump, explain, opt and compile: the front end, the passes, then the command */
int cli_run_front(const Options *o);
/* prep.c: moec prep INPUT... -o DIR --alphabet protein|dna [--clusters TSV] */
int cli_prep(int argc, char **argv);

/* plot.c: moec plot METRICS.jsonl [MORE.jsonl ...] -o OUT.svg [--label NAME ...] [--title T] */
int cli_plot(int argc, char **argv);

/* ckpt_diff.c: moec ckpt-diff A B [--rtol X] [--prefix P] */
int cli_ckpt_diff(int argc, char **argv);

#endif
