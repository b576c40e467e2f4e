/* pipeline.c - THE pass pipeline, written out once, and the manager that
 * runs it with verification, IR snapshots and statistics between passes.
 *
 * Adding a pass: one file in passes/, its prototype in pass.h, one row here,
 * one golden test in tests/ir/ (docs/adding-a-pass.md). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

static const Pass builtin_pipeline[] = {
    {"infer-shapes", "recompute every node's dtype and shape from its sources and check them",
     pass_infer_shapes, {"nodes checked", "shapes changed", NULL}},
    {"dce", "remove nodes that no output or loss depends on",
     pass_dce, {"nodes removed", "params removed", NULL}},
    {"segment-attention", "with packing packed or rows (masked LM: by default): attention only within each sequence, "
     "by segment ids made from the tokens", pass_segment_attention, {"attention nodes segmented", "declined", NULL}},
    {"fuse-grouped-mlp", "fuse grouped_linear -> scaled_swiglu -> grouped_linear into one grouped_mlp node",
     pass_fuse_grouped_mlp, {"chains fused", "chains declined", NULL}},
    {"expert-parallel", "with ep > 1: shard the experts over ranks, insert the all-to-all token exchange",
     pass_expert_parallel, {"expert layers partitioned", "declined", NULL}},
    {"autodiff", "append the backward graph: one gradient rule per op, d loss / d every param",
     pass_autodiff, {"gradient nodes", "gradient sums", "params with zero gradient", NULL}},
    {"grad-allreduce", "with several ranks: sum gradients (dense over all ranks, experts over replicas), mean",
     pass_grad_allreduce, {"dense gradients", "expert gradients", NULL}},
    {"precision", "with mxfp8 or fp8-block: quantize expert GEMM operands (copies for forward, dgrad, wgrad)",
     pass_precision, {"quantize nodes", "GEMMs partly kept in high precision", NULL}},
    {"checkpoint", "with checkpoint blocks: recompute each repeated block's forward right before its backward, "
     "keeping only what leaves the block", pass_checkpoint, {"blocks checkpointed", "nodes recomputed", NULL}},
};

/* The pipeline in force: the built-in table plus passes registered by
 * plugins (--load-pass), each inserted after a named pass. */
enum { MAX_PASSES = 64 };
static Pass pipeline[MAX_PASSES];
static int npipeline = -1;

static void pipeline_init(void)
{
    if (npipeline >= 0)
        return;
    npipeline = ARRAY_LEN(builtin_pipeline);
    memcpy(pipeline, builtin_pipeline, sizeof builtin_pipeline);
}

int pass_count(void)
{
    pipeline_init();
    return npipeline;
}

const Pass *pass_get(int i)
{
    pipeline_init();
    return i >= 0 && i < npipeline ? &pipeline[i] : NULL;
}

const Pass *pass_find(const char *name)
{
    pipeline_init();
    for (int i = 0; i < npipeline; i++)
        if (strcmp(pipeline[i].name, name) == 0)
            return &pipeline[i];
    return NULL;
}

int pass_register(const Pass *p, const char *after, char *err, size_t errlen)
{
    pipeline_init();
    if (!p || !p->name || !p->run || !p->summary) {
        snprintf(err, errlen, "a pass needs a name, a summary and a run function");
        return 0;
    }
    if (pass_find(p->name)) {
        snprintf(err, errlen, "a pass named '%s' is already in the pipeline", p->name);
        return 0;
    }
    if (npipeline == MAX_PASSES) {
        snprintf(err, errlen, "the pipeline is full (%d passes)", MAX_PASSES);
        return 0;
    }
    int at = npipeline;
    if (after) {
        const Pass *anchor = pass_find(after);
        if (!anchor) {
            snprintf(err, errlen, "pass '%s' wants to run after '%s', which is not in the pipeline", p->name, after);
            return 0;
        }
        at = (int)(anchor - pipeline) + 1;
    }
    memmove(pipeline + at + 1, pipeline + at, sizeof(Pass) * (size_t)(npipeline - at));
    pipeline[at] = *p;
    npipeline++;
    return 1;
}

int pass_load_plugin(const char *path, char *err, size_t errlen)
{
    /* dlopen searches the library path for a bare name; a plugin is a file */
    char buf[4096];
    if (!strchr(path, '/')) {
        snprintf(buf, sizeof buf, "./%s", path);
        path = buf;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load pass plugin: %s", dlerror());
        return 0;
    }
    union {
        void *obj;
        PassPluginInit fn;
    } sym;
    sym.obj = dlsym(h, PASS_PLUGIN_ENTRY);
    if (!sym.obj) {
        snprintf(err, errlen, "%s has no %s() (see docs/adding-a-pass.md)", path, PASS_PLUGIN_ENTRY);
        dlclose(h);
        return 0;
    }
    int before = npipeline;
    if (!sym.fn(PASS_API_VERSION, err, errlen)) {
        dlclose(h);
        return 0;
    }
    if (pass_count() == before) {
        snprintf(err, errlen, "%s registered no pass", path);
        return 0;
    }
    return 1;  /* the library stays loaded: its passes run later */
}

void pass_ctx_init(PassCtx *ctx, Diag *diag)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->diag = diag;
    ctx->verify_each = 1;
    ctx->print_format = PRINT_TEXT;
    ctx->print_out = stdout;
    ctx->stats_out = stderr;
    ctx->print_header = 1;
}

static int wants(const char *sel, const char *pass)
{
    return sel && (strcmp(sel, "all") == 0 || strcmp(sel, pass) == 0);
}

void pass_print_ir(const IrGraph *g, PassCtx *ctx, const char *when, const char *pass)
{
    FILE *out = ctx->print_out;
    /* JSON output must stay valid JSON, so its header is a field instead */
    if (!ctx->print_header) {
        if (ctx->print_format == PRINT_JSON)
            ir_print_json(g, out);
        else if (ctx->print_format == PRINT_DOT)
            ir_print_dot(g, out);
        else
            ir_print_text(g, out);
        return;
    }
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

int pass_is_disabled(const PassCtx *ctx, const char *name)
{
    for (int i = 0; i < ctx->ndisabled; i++)
        if (strcmp(ctx->disabled[i], name) == 0)
            return 1;
    return 0;
}

int pass_index(const char *name)
{
    const Pass *p = pass_find(name);
    return p ? (int)(p - pipeline) : -1;
}

int pass_run_one(IrGraph *g, PassCtx *ctx, const Pass *p)
{
    if (pass_is_disabled(ctx, p->name))
        return 0;
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
    return 0;
}

int pass_run_from(IrGraph *g, PassCtx *ctx, int first)
{
    for (int i = first < 0 ? 0 : first; i < pass_count(); i++) {
        int rc = pass_run_one(g, ctx, &pipeline[i]);
        if (rc != 0)
            return rc;
        if (ctx->stop_after && strcmp(ctx->stop_after, pipeline[i].name) == 0)
            break;
    }
    return 0;
}

int pass_run_pipeline(IrGraph *g, PassCtx *ctx)
{
    return pass_run_from(g, ctx, 0);
}
