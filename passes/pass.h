/* pass.h - the pass manager's interface.
 *
 * A pass is `int pass_x(IrGraph *, PassCtx *)` in its own file, returning 0
 * on success and non-zero after reporting an error. The pipeline is ONE
 * table (pipeline.c); `moec passes` prints it. Passes count what they do in
 * named statistics (`--stats`). After every pass the verifier runs, so a
 * pass that breaks an invariant is caught at once, by name. */
#ifndef MOEC_PASS_H
#define MOEC_PASS_H

#include <stdio.h>

#include "../ir/ir.h"

enum { PASS_MAX_STATS = 8 };

typedef enum PrintFormat { PRINT_TEXT, PRINT_JSON, PRINT_DOT } PrintFormat;

typedef struct PassCtx {
    Diag *diag;                    /* user-facing errors (located) */
    int verify_each;               /* run ir_verify after every pass (default on) */
    const char *print_before;      /* pass name, "all" or NULL */
    const char *print_after;
    PrintFormat print_format;
    FILE *print_out;               /* where --print-ir-* snapshots go */
    int stats;                     /* print statistics after the pipeline */
    FILE *stats_out;
    long counters[PASS_MAX_STATS]; /* the running pass's statistics */
    const char *disabled[16];      /* --disable-pass NAME */
    int ndisabled;
    const char *stop_after;        /* run the pipeline up to this pass only */
    int print_header;              /* the fixed header line before snapshots (default 1) */
} PassCtx;

/* The last pass of the front end: `moec dump` shows the IR after it (the
 * model as lowered and verified); later stages with --print-ir-after. */
#define PASS_FRONT_END_LAST "dce"

typedef struct Pass {
    const char *name;
    const char *summary;
    int (*run)(IrGraph *g, PassCtx *ctx);
    const char *stat_names[PASS_MAX_STATS];  /* counter i's meaning, NULL-terminated */
} Pass;

void pass_ctx_init(PassCtx *ctx, Diag *diag);

int pass_count(void);
const Pass *pass_get(int i);
const Pass *pass_find(const char *name);   /* NULL if unknown */

/* Plugins (docs/adding-a-pass.md). A plugin is a shared library that
 * exports `int moec_pass_plugin_init(int api_version, char *err, size_t
 * errlen)`; it checks the version and calls pass_register() for its passes,
 * returning 1, or 0 with a message. The moec executable exports its IR and
 * pass functions (-rdynamic), so a plugin needs only these headers. */
#define PASS_API_VERSION 2  /* 2: IrCustomOp.attrs */
#define PASS_PLUGIN_ENTRY "moec_pass_plugin_init"
typedef int (*PassPluginInit)(int api_version, char *err, size_t errlen);

/* Inserts p after the pass named `after` (NULL: at the end). p is copied;
 * its strings and functions must outlive the compilation. */
int pass_register(const Pass *p, const char *after, char *err, size_t errlen);
int pass_load_plugin(const char *path, char *err, size_t errlen);
int pass_is_disabled(const PassCtx *ctx, const char *name);

/* Runs the whole pipeline; stops at the first failing pass. Returns 0 on
 * success. Internal invariant failures die(). */
int pass_run_pipeline(IrGraph *g, PassCtx *ctx);
/* The same from the pipeline's pass number `first` on (IR text read at a
 * later stage resumes there), up to ctx->stop_after. */
int pass_run_from(IrGraph *g, PassCtx *ctx, int first);
/* One pass as the pipeline runs it: skipped when disabled, with its
 * snapshots, statistics and the verifier after it (`moec opt --passes`). */
int pass_run_one(IrGraph *g, PassCtx *ctx, const Pass *p);
/* A pass's position in the pipeline, or -1. */
int pass_index(const char *name);

/* Prints one snapshot with its fixed header line. */
void pass_print_ir(const IrGraph *g, PassCtx *ctx, const char *when, const char *pass);

/* the passes */
int pass_infer_shapes(IrGraph *g, PassCtx *ctx);
int pass_dce(IrGraph *g, PassCtx *ctx);
int pass_segment_attention(IrGraph *g, PassCtx *ctx);
int pass_autodiff(IrGraph *g, PassCtx *ctx);
int pass_fuse_grouped_mlp(IrGraph *g, PassCtx *ctx);
int pass_precision(IrGraph *g, PassCtx *ctx);
int pass_checkpoint(IrGraph *g, PassCtx *ctx);
int pass_expert_parallel(IrGraph *g, PassCtx *ctx);
int pass_grad_allreduce(IrGraph *g, PassCtx *ctx);

#endif
