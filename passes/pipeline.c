/* pipeline.c - THE pass pipeline, written out once, and the manager that
 * runs it with verification, IR snapshots and statistics between passes.
 *
 * Adding a pass: one file in passes/, its prototype in pass.h, one row here,
 * one golden test in tests/ir/ (docs/adding-a-pass.md). */
#include <string.h>

#include "pass.h"
#include "../ir/util.h"

static const Pass pipeline[] = {
    {"infer-shapes", "recompute every node's dtype and shape from its sources and check them",
     pass_infer_shapes, {"nodes checked", "shapes changed", NULL}},
    {"dce", "remove nodes that no output or loss depends on",
     pass_dce, {"nodes removed", "params removed", NULL}},
    {"autodiff", "append the backward graph: one gradient rule per op, d loss / d every param",
     pass_autodiff, {"gradient nodes", "gradient sums", "params with zero gradient", NULL}},
};

int pass_count(void) { return ARRAY_LEN(pipeline); }

const Pass *pass_get(int i) { return i >= 0 && i < pass_count() ? &pipeline[i] : NULL; }

const Pass *pass_find(const char *name)
{
    for (int i = 0; i < pass_count(); i++)
        if (strcmp(pipeline[i].name, name) == 0)
            return &pipeline[i];
    return NULL;
}

void pass_ctx_init(PassCtx *ctx, Diag *diag)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->diag = diag;
    ctx->verify_each = 1;
    ctx->print_format = PRINT_TEXT;
    ctx->print_out = stdout;
    ctx->stats_out = stderr;
}

static int wants(const char *sel, const char *pass)
{
    return sel && (strcmp(sel, "all") == 0 || strcmp(sel, pass) == 0);
}

void pass_print_ir(const IrGraph *g, PassCtx *ctx, const char *when, const char *pass)
{
    FILE *out = ctx->print_out;
    /* JSON output must stay valid JSON, so its header is a field instead */
    if (ctx->print_format == PRINT_JSON) {
        fprintf(out, "{\"stage\": \"%s %s\", \"ir\":\n", when, pass);
        ir_print_json(g, out);
        fprintf(out, "}\n");
        return;
    }
    fprintf(out, "%s *** IR %s %s ***\n", ctx->print_format == PRINT_DOT ? "//" : "#", when, pass);
    if (ctx->print_format == PRINT_DOT)
        ir_print_dot(g, out);
    else
        ir_print_text(g, out);
}

int pass_run_pipeline(IrGraph *g, PassCtx *ctx)
{
    for (int i = 0; i < pass_count(); i++) {
        const Pass *p = &pipeline[i];
        if (wants(ctx->print_before, p->name))
            pass_print_ir(g, ctx, "before", p->name);
        memset(ctx->counters, 0, sizeof ctx->counters);
        int rc = p->run(g, ctx);
        if (ctx->stats)
            for (int s = 0; s < PASS_MAX_STATS && p->stat_names[s]; s++)
                fprintf(ctx->stats_out, "stats: %-16s %-24s %ld\n", p->name, p->stat_names[s], ctx->counters[s]);
        if (rc != 0)
            return rc;
        if (ctx->verify_each) {
            int nerr = ir_verify(g, stderr);
            if (nerr)
                die("the IR is invalid after pass %s (%d problems above)", p->name, nerr);
        }
        if (wants(ctx->print_after, p->name))
            pass_print_ir(g, ctx, "after", p->name);
    }
    return 0;
}
