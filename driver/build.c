/* build.c - compiling a model into a Plan, and compiling it again for
 * another batch or world size (driver.h). */
#include "build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/cuda.h"
#include "../util/util.h"

/* MOEC_MGEMM (environment): the bf16 M-grouped GEMMs' schedule in --kernels fast plans, "cooperative",
 * "pingpong" (128 x 128 tiles per consumer warpgroup) or "pingpong64" (64 x 256); unset or empty: codegen's
 * default. For A/B timing without a rebuild (decision 49). */
static int mgemm_schedule_from_env(CudaMgemmSchedule *out, char *err, size_t errlen)
{
    const char *v = getenv("MOEC_MGEMM");
    *out = CUDA_MGEMM_DEFAULT;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "cooperative") == 0)
        *out = CUDA_MGEMM_COOPERATIVE;
    else if (strcmp(v, "pingpong") == 0)
        *out = CUDA_MGEMM_PINGPONG;
    else if (strcmp(v, "pingpong64") == 0)
        *out = CUDA_MGEMM_PINGPONG64;
    else {
        snprintf(err, errlen, "MOEC_MGEMM is 'cooperative', 'pingpong' or 'pingpong64', not '%s'", v);
        return 0;
    }
    return 1;
}

/* MOEC_KGEMM (environment): the same for the bf16 weight-gradient (K-grouped) GEMMs, "cooperative" or "pingpong";
 * MOEC_FP8_KGEMM (var) for fp8-block's FP8 K-grouped ones (decision 56). */
static int kgemm_schedule_from_env(const char *var, CudaKgemmSchedule *out, char *err, size_t errlen)
{
    const char *v = getenv(var);
    *out = CUDA_KSCHED_DEFAULT;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "cooperative") == 0)
        *out = CUDA_KSCHED_COOPERATIVE;
    else if (strcmp(v, "pingpong") == 0)
        *out = CUDA_KSCHED_PINGPONG;
    else {
        snprintf(err, errlen, "%s is 'cooperative' or 'pingpong', not '%s'", var, v);
        return 0;
    }
    return 1;
}

/* MOEC_ATTN (environment): the head-dim-128 attention forward's and dq's schedule in --kernels fast plans, "ws"
 * (decision 50's), "overlap" or "pingpong" (decision 59); unset or empty: codegen's default. For A/B timing. */
static int attn_schedule_from_env(CudaAttnSchedule *out, char *err, size_t errlen)
{
    const char *v = getenv("MOEC_ATTN");
    *out = CUDA_ATTN_DEFAULT;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "ws") == 0)
        *out = CUDA_ATTN_WS;
    else if (strcmp(v, "overlap") == 0)
        *out = CUDA_ATTN_OVERLAP;
    else if (strcmp(v, "pingpong") == 0)
        *out = CUDA_ATTN_PINGPONG;
    else {
        snprintf(err, errlen, "MOEC_ATTN is 'ws', 'overlap' or 'pingpong', not '%s'", v);
        return 0;
    }
    return 1;
}

/* MOEC_ATTN_GRID (environment): caps the attention launches' blocks (1..65535) so that each block loops over
 * several items at a test's small shapes (the barrier phases carried across items); unset or empty: 65535. */
static int attn_grid_from_env(int *out, char *err, size_t errlen)
{
    const char *v = getenv("MOEC_ATTN_GRID");
    *out = 0;
    if (!v || !*v)
        return 1;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 65535) {
        snprintf(err, errlen, "MOEC_ATTN_GRID is a number of blocks from 1 to 65535, not '%s'", v);
        return 0;
    }
    *out = (int)n;
    return 1;
}

/* MOEC_DSWIGLU (environment): the bf16 fast expert MLP backward's dSwiGLU, "fused" (in the da GEMM's
 * epilogue) or "separate" (its own kernel after a GEMM that stores da); MOEC_FP8_SWIGLU: fp8-block's forward
 * SwiGLU and a's quantisation, "fused" (the gate_up GEMM's epilogue) or "separate"; MOEC_FP8_PASSES:
 * fp8-block's tile passes over h, "fused" (one launch in the forward, one in the backward) or "separate" (the
 * earlier launches); unset or empty: codegen's default. For A/B timing (decisions 57, 60 and 69). */
static int dswiglu_from_env(const char *var, CudaDswiglu *out, char *err, size_t errlen)
{
    const char *v = getenv(var);
    *out = CUDA_DSWIGLU_DEFAULT;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "fused") == 0)
        *out = CUDA_DSWIGLU_FUSED;
    else if (strcmp(v, "separate") == 0)
        *out = CUDA_DSWIGLU_SEPARATE;
    else {
        snprintf(err, errlen, "%s is 'fused' or 'separate', not '%s'", var, v);
        return 0;
    }
    return 1;
}

/* MOEC_FP8_CLUSTER (environment): fp8-block's FP8 M-grouped GEMMs one block a tile ("1") or in clusters of two
 * blocks sharing A ("2", decision 71); unset or empty: codegen's default. For A/B timing. */
static int fp8_cluster_from_env(int *out, char *err, size_t errlen)
{
    const char *v = getenv("MOEC_FP8_CLUSTER");
    *out = 0;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "1") == 0 || strcmp(v, "2") == 0) {
        *out = v[0] - '0';
        return 1;
    }
    snprintf(err, errlen, "MOEC_FP8_CLUSTER is '1' or '2', not '%s'", v);
    return 0;
}

/* MOEC_ROPE_HEADS (environment): the fast RoPE rotation's heads a thread, 1, 2 or 4 (decision 72); unset or
 * empty: codegen's default. For A/B timing. */
static int rope_heads_from_env(int *out, char *err, size_t errlen)
{
    const char *v = getenv("MOEC_ROPE_HEADS");
    *out = 0;
    if (!v || !*v)
        return 1;
    if (strcmp(v, "1") == 0 || strcmp(v, "2") == 0 || strcmp(v, "4") == 0) {
        *out = atoi(v);
        return 1;
    }
    snprintf(err, errlen, "MOEC_ROPE_HEADS is '1', '2' or '4', not '%s'", v);
    return 0;
}

Plan *driver_make_plan(Compilation *c, const char *path, const char *const *plugins, int nplugins,
                       int has_precision, IrPrecision precision, int64_t ep, char *err, size_t errlen)
{
    CudaOptions opts = {0};
    if (!mgemm_schedule_from_env(&opts.mgemm_schedule, err, errlen) ||
        !kgemm_schedule_from_env("MOEC_KGEMM", &opts.kgemm_schedule, err, errlen) ||
        !kgemm_schedule_from_env("MOEC_FP8_KGEMM", &opts.fp8_kgemm_schedule, err, errlen) ||
        !attn_schedule_from_env(&opts.attn_schedule, err, errlen) ||
        !attn_grid_from_env(&opts.attn_max_grid, err, errlen) ||
        !dswiglu_from_env("MOEC_DSWIGLU", &opts.dswiglu, err, errlen) ||
        !dswiglu_from_env("MOEC_FP8_SWIGLU", &opts.fp8_swiglu, err, errlen) ||
        !dswiglu_from_env("MOEC_FP8_PASSES", &opts.fp8_passes, err, errlen) ||
        !fp8_cluster_from_env(&opts.fp8_cluster, err, errlen) ||
        !rope_heads_from_env(&opts.rope_heads, err, errlen))
        return NULL;
    IrGraph *g = c->graph;
    Plan *p = plan_create(g, &c->arena, err, errlen);
    if (!p)
        return NULL;
    c->graph = NULL;
    plan_set_source(p, path, c->text, c->len, plugins, nplugins, has_precision, precision, ep);
    p->source.kernels = (PlanKernels)c->kernels;
    /* the GPU part; a model the GPU cannot run still trains on the CPU */
    char *msg = NULL;
    size_t msglen = 0;
    FILE *mf = open_memstream(&msg, &msglen);
    if (!mf)
        die("out of memory");
    Diag d;
    diag_init(&d, path, c->text, c->len, mf);
    int ok = cuda_codegen(p, &opts, &d);
    fclose(mf);
    if (!ok)
        p->gpu_unsupported = msg && *msg ? msg : xstrdup("code generation failed");
    else
        free(msg);
    return p;
}

Plan *driver_replan(const Plan *p, int64_t batch, int64_t seq, int64_t world, char *err, size_t errlen)
{
    const PlanSource *s = &p->source;
    if (!s->text) {
        snprintf(err, errlen, "the plan carries no model source to compile again");
        return NULL;
    }
    Compilation c = {0};
    c.text = malloc(s->len + 1);
    if (!c.text)
        die("out of memory");
    memcpy(c.text, s->text, s->len + 1);
    c.len = s->len;
    c.opts.batch = batch > 0 ? batch : p->batch;
    c.opts.seq = seq > 0 ? seq : p->seq;
    c.opts.has_precision = s->has_precision;
    c.opts.precision = s->precision;
    c.opts.ep = s->ep;
    c.kernels = (int)s->kernels;
    int64_t ep = s->ep > 0 ? s->ep : p->ep;
    c.opts.dp = world > 0 && world % ep == 0 ? world / ep : 0;
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    Plan *q = NULL;
    if (compilation_run(&c, s->path, c.text, c.len, stderr, &ctx) == 0)
        q = driver_make_plan(&c, s->path, (const char *const *)s->plugins, s->nplugins, s->has_precision,
                             s->precision, s->ep, err, errlen);
    else
        snprintf(err, errlen, "the model does not compile for batch %lld, seq %lld over %lld ranks",
                 (long long)c.opts.batch, (long long)c.opts.seq, (long long)(world > 0 ? world : 1));
    /* the image compiled for the old shapes goes along: the GPU backend then says why it compiles anew */
    if (q && p->image) {
        q->image = malloc(p->image_size);
        if (!q->image)
            die("out of memory");
        memcpy(q->image, p->image, p->image_size);
        q->image_size = p->image_size;
        memcpy(q->image_arch, p->image_arch, sizeof q->image_arch);
        q->image_hash = p->image_hash;
    }
    compilation_free(&c);
    return q;
}

int driver_compilations(void) { return compilation_count(); }
