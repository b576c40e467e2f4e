/* fuse_grouped_gelu_mlp.c - a pass plugin: the GELU expert MLP as one node.
 *
 * Rewrites the chain that fuse-grouped-mlp declines ("activation is gelu")
 *
 *     h = grouped_linear(xs, w_up, splits)           [R, F]
 *     g = gelu(h)                                    [R, F]
 *     a = row_scale(g, probs)                        [R, F]
 *     y = grouped_linear(a, w_down, splits)          [R, H]
 *
 * into y = grouped_mlp_gelu(xs, w_up, w_down, splits, probs){precision}, a
 * custom op (IrCustomOp) defined here: its shape rule, its CPU reference in
 * fp32 and fp64, and its gradient rule, which rebuilds the backward of the
 * chain from moec's own ops. The pass runs right after fuse-grouped-mlp and
 * before autodiff, so the fused node's gradient rule is what differentiates
 * it. Load it with `moec ... --load-pass build/plugins/fuse_grouped_gelu_mlp.so`.
 *
 * A candidate is a grouped_linear fed, through at most two elementwise
 * activations one of which is a gelu, by another grouped_linear (chains
 * without a gelu belong to fuse-grouped-mlp, which records them). It is
 * fused only when, as for the built-in pass:
 *   - the activations are exactly gelu then row_scale (the routing
 *     probabilities scale the GELU's output);
 *   - both projections hold the same number of experts and take the same
 *     split sizes;
 *   - h, g and a each have one user and are no output (fusing would
 *     otherwise recompute them or hide a tensor someone reads);
 *   - with mxfp8, both reduction dimensions (H and F) are multiples of the
 *     32-element MXFP8 block; not with fp8-block (this kernel has no
 *     fp8-block path: the unfused chain gets the precision pass's copies);
 *   - no expert parallelism (ep 1): the expert-parallel pass shards the
 *     built-in grouped_mlp and knows nothing of this op.
 * Every other candidate is recorded with the reason, in the user's names. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "passes/pass.h"
#include "passes/rewrite.h"
#include "runtime/cpu/mxfp8.h"

/* ------------------------------------------------------- the custom op */

enum { GM_XS, GM_W_UP, GM_W_DOWN, GM_SPLITS, GM_PROBS, GM_ARITY };

/* Reports a shape error at source `arg` of n, in the op's name. */
static int gm_fail(IrNode *n, Diag *d, int arg, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int gm_fail(IrNode *n, Diag *d, int arg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d)
        diag_error(d, n->src_loc[arg], "%s: %s", ir_node_op_name(n), msg);
    return 0;
}

/* xs [R, H], w_up [E, F, H], w_down [E, H, F], splits i32 [E], probs [R] -> xs.dtype [R, H] */
static int gm_infer(IrNode *n, Diag *d)
{
    static const char *const what[GM_ARITY] = {"routed rows", "up projection", "down projection", "split sizes",
                                               "routing probabilities"};
    static const int rank[GM_ARITY] = {2, 3, 3, 1, 1};
    char b1[128], b2[128];
    for (int i = 0; i < GM_ARITY; i++) {
        const IrNode *s = n->src[i];
        if (s->rank != rank[i])
            return gm_fail(n, d, i, "%s `%s` must have %d dimension%s, but it is %s", what[i], s->label, rank[i],
                           rank[i] == 1 ? "" : "s", ir_shape_str(s->rank, s->shape, b1, sizeof b1));
        if (i == GM_SPLITS ? s->dtype != IR_I32 : !ir_dtype_is_float(s->dtype))
            return gm_fail(n, d, i, "%s `%s` is %s; %s is needed", what[i], s->label, ir_dtype_name[s->dtype],
                           i == GM_SPLITS ? "i32" : "a floating-point tensor");
    }
    const IrNode *xs = n->src[GM_XS], *w1 = n->src[GM_W_UP], *w2 = n->src[GM_W_DOWN], *sp = n->src[GM_SPLITS],
                 *p = n->src[GM_PROBS];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1];
    if (w1->shape[2] != H)
        return gm_fail(n, d, GM_W_UP, "up projection `%s` is %s but the routed rows `%s` %s have %lld features: it "
                       "must be [experts, ffn, %lld]", w1->label, ir_shape_str(3, w1->shape, b1, sizeof b1),
                       xs->label, ir_shape_str(2, xs->shape, b2, sizeof b2), (long long)H, (long long)H);
    if (w2->shape[0] != E || w2->shape[1] != H || w2->shape[2] != F)
        return gm_fail(n, d, GM_W_DOWN, "down projection `%s` is %s but [%lld, %lld, %lld] = [experts, hidden, ffn] "
                       "is needed to follow the up projection `%s` %s", w2->label,
                       ir_shape_str(3, w2->shape, b1, sizeof b1), (long long)E, (long long)H, (long long)F,
                       w1->label, ir_shape_str(3, w1->shape, b2, sizeof b2));
    if (sp->shape[0] != E)
        return gm_fail(n, d, GM_SPLITS, "split sizes `%s` count %lld experts but the projections hold %lld",
                       sp->label, (long long)sp->shape[0], (long long)E);
    if (p->shape[0] != R)
        return gm_fail(n, d, GM_PROBS, "routing probabilities `%s` %s do not match the %lld routed rows of `%s` "
                       "(use the routing's .probs, which are in expert-major order)", p->label,
                       ir_shape_str(1, p->shape, b1, sizeof b1), (long long)R, xs->label);
    n->dtype = xs->dtype;
    n->rank = 2;
    n->shape[0] = R;
    n->shape[1] = H;
    return 1;
}

/* The same tanh approximation as moec's gelu (runtime/cpu/kernels.inc). */
static double gm_gelu(double x)
{
    const double c = 0.7978845608028654;  /* sqrt(2 / pi) */
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

/* A float tensor's elements as doubles: the buffer itself in fp64, a
 * converted copy (freed by the caller through *owned) in fp32. */
static const double *gm_load(const void *buf, int64_t n, int f64, double **owned)
{
    *owned = NULL;
    if (f64)
        return buf;
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!d)
        die("out of memory");
    for (int64_t i = 0; i < n; i++)
        d[i] = ((const float *)buf)[i];
    *owned = d;
    return d;
}

/* x [rows, cols] as an MXFP8 GEMM operand sees it: quantized rowwise in
 * blocks of 32 along cols (in float, as moec's quantize nodes) and back. */
static void gm_fake_quant(double *x, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    float *t = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!t)
        die("out of memory");
    for (int64_t i = 0; i < n; i++)
        t[i] = (float)x[i];
    int st = mxfp8_fake_quant(t, rows, cols, MXFP8_ROWWISE, MXFP8_SCALE_TE);
    if (st != MXFP8_OK)
        die("grouped_mlp_gelu: mxfp8 quantization of [%lld, %lld]: %s", (long long)rows, (long long)cols,
            mxfp8_status_str(st));
    for (int64_t i = 0; i < n; i++)
        x[i] = t[i];
    free(t);
}

static double *gm_copy(const double *x, int64_t n)
{
    double *c = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!c)
        die("out of memory");
    memcpy(c, x, sizeof(double) * (size_t)n);
    return c;
}

/* The CPU reference, written once in double; fp32 converts at the edges.
 * Plain loops: the plugin cannot call moec's (static) GEMM kernels, so the
 * sums run in another order than the unfused chain's and results agree to
 * rounding, not bit for bit. With mxfp8 the GEMM operands are quantized
 * as the precision pass quantizes the unfused chain's: xs and w_up rowwise
 * along H, the scaled GELU output and w_down rowwise along F. */
static void gm_cpu(const IrNode *n, void *const *buf, int f64)
{
    const IrNode *xs = n->src[GM_XS], *w1 = n->src[GM_W_UP];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1];
    int mx = ir_has_attr(n, IR_ATTR_PRECISION) && n->attr[IR_ATTR_PRECISION].i == IR_PREC_MXFP8;
    if (mx && (H % MXFP8_BLOCK || F % MXFP8_BLOCK))
        die("%s: mxfp8 with hidden %lld and ffn %lld (the pass fuses multiples of 32 only)", n->name, (long long)H,
            (long long)F);
    const int32_t *splits = buf[n->src[GM_SPLITS]->id];
    int64_t *start = malloc(sizeof(int64_t) * (size_t)(E + 1));
    if (!start)
        die("out of memory");
    start[0] = 0;
    for (int64_t e = 0; e < E; e++) {
        if (splits[e] < 0)
            die("%s: expert %lld has %d rows", n->name, (long long)e, splits[e]);
        start[e + 1] = start[e] + splits[e];
    }
    if (start[E] != R)
        die("%s: split sizes add up to %lld rows, the input has %lld", n->name, (long long)start[E], (long long)R);
    double *own[4];
    const double *x = gm_load(buf[xs->id], R * H, f64, &own[0]);
    const double *wu = gm_load(buf[w1->id], E * F * H, f64, &own[1]);
    const double *wd = gm_load(buf[n->src[GM_W_DOWN]->id], E * H * F, f64, &own[2]);
    const double *p = gm_load(buf[n->src[GM_PROBS]->id], R, f64, &own[3]);
    double *qx = NULL, *qu = NULL, *qd = NULL;
    if (mx) {
        x = qx = gm_copy(x, R * H);
        wu = qu = gm_copy(wu, E * F * H);
        wd = qd = gm_copy(wd, E * H * F);
        gm_fake_quant(qx, R, H);
        gm_fake_quant(qu, E * F, H);
        gm_fake_quant(qd, E * H, F);
    }
    double *a = malloc(sizeof(double) * (size_t)F);  /* one row of row_scale(gelu(h), probs) */
    if (!a)
        die("out of memory");
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = start[e]; r < start[e + 1]; r++) {
            for (int64_t f = 0; f < F; f++) {
                const double *w = wu + (e * F + f) * H;
                double h = 0;
                for (int64_t k = 0; k < H; k++)
                    h += x[r * H + k] * w[k];
                a[f] = gm_gelu(h) * p[r];
            }
            if (mx)
                gm_fake_quant(a, 1, F);
            for (int64_t o = 0; o < H; o++) {
                const double *w = wd + (e * H + o) * F;
                double y = 0;
                for (int64_t f = 0; f < F; f++)
                    y += a[f] * w[f];
                if (f64)
                    ((double *)buf[n->id])[r * H + o] = y;
                else
                    ((float *)buf[n->id])[r * H + o] = (float)y;
            }
        }
    free(a);
    free(qx);
    free(qu);
    free(qd);
    for (int i = 0; i < 4; i++)
        free(own[i]);
    free(start);
}

static void gm_cpu_f32(const IrNode *n, void *const *buf) { gm_cpu(n, buf, 0); }
static void gm_cpu_f64(const IrNode *n, void *const *buf) { gm_cpu(n, buf, 1); }

/* Whether autodiff wants a gradient for x: x depends on a parameter
 * through differentiable ops (the rule autodiff applies). A gradient the
 * callback would drop is not built, since no dce runs after autodiff. */
static int gm_needs_grad(const IrGraph *g, const IrNode *x)
{
    char *needs = calloc((size_t)x->id + 1, 1);
    if (!needs)
        die("out of memory");
    for (int i = 0; i <= x->id; i++) {
        const IrNode *m = g->nodes[i];
        if (m->op == IR_OP_PARAM)
            needs[i] = 1;
        else if (ir_op_info[m->op].flags & OPF_DIFF)
            for (int s = 0; s < m->nsrc; s++)
                needs[i] |= needs[m->src[s]->id];
    }
    int r = needs[x->id];
    free(needs);
    return r;
}

/* A gradient-side node named and placed as autodiff names its own:
 * `<forward node>.<op>`, in the forward node's layer, at its line. */
static IrNode *gm_mk(IrGraph *g, const IrNode *fwd, IrOp op, int nsrc, IrNode *s0, IrNode *s1, IrNode *s2)
{
    IrNode *src[3] = {s0, s1, s2};
    IrNode *n = ir_node_new(g, op, nsrc, src, fwd->name, ir_op_name(op), fwd->loc);
    n->layer = fwd->layer;
    if (!ir_infer_node(n, NULL))
        die("grouped_mlp_gelu: built an ill-typed %s node %s", ir_op_name(op), n->name);
    return n;
}

/* The backward of the chain from moec's ops, as autodiff would build it
 * for the unfused chain, with h and g recomputed instead of kept:
 *   h = grouped_linear(xs, w_up), g = gelu(h), a = row_scale(g, probs)
 *   da      = grouped_linear_dx(dy, w_down)      dw_down = grouped_linear_dw(dy, a)
 *   dprobs  = row_dot(da, g)                     dh = gelu_dx(row_scale(da, probs), h)
 *   dxs     = grouped_linear_dx(dh, w_up)        dw_up   = grouped_linear_dw(dh, xs)
 * With mxfp8 the precision pass (after autodiff) quantizes these GEMMs as
 * it quantizes the unfused chain's. */
static void gm_backward(IrGraph *g, IrNode *n, IrNode *dy, void (*grad)(void *ctx, int src, IrNode *gnode), void *ctx)
{
    IrNode **s = n->src;
    int need[GM_ARITY] = {0};
    for (int i = 0; i < GM_ARITY; i++)
        need[i] = i != GM_SPLITS && gm_needs_grad(g, s[i]);
    IrNode *h = gm_mk(g, n, IR_OP_GROUPED_LINEAR, 3, s[GM_XS], s[GM_W_UP], s[GM_SPLITS]);
    IrNode *ge = gm_mk(g, n, IR_OP_GELU, 1, h, NULL, NULL);
    if (need[GM_XS] || need[GM_W_UP] || need[GM_PROBS]) {
        IrNode *da = gm_mk(g, n, IR_OP_GROUPED_LINEAR_DX, 3, dy, s[GM_W_DOWN], s[GM_SPLITS]);
        if (need[GM_PROBS])
            grad(ctx, GM_PROBS, gm_mk(g, n, IR_OP_ROW_DOT, 2, da, ge, NULL));
        if (need[GM_XS] || need[GM_W_UP]) {
            IrNode *dg = gm_mk(g, n, IR_OP_ROW_SCALE, 2, da, s[GM_PROBS], NULL);
            IrNode *dh = gm_mk(g, n, IR_OP_GELU_DX, 2, dg, h, NULL);
            if (need[GM_XS])
                grad(ctx, GM_XS, gm_mk(g, n, IR_OP_GROUPED_LINEAR_DX, 3, dh, s[GM_W_UP], s[GM_SPLITS]));
            if (need[GM_W_UP])
                grad(ctx, GM_W_UP, gm_mk(g, n, IR_OP_GROUPED_LINEAR_DW, 3, dh, s[GM_XS], s[GM_SPLITS]));
        }
    }
    if (need[GM_W_DOWN]) {
        IrNode *a = gm_mk(g, n, IR_OP_ROW_SCALE, 2, ge, s[GM_PROBS], NULL);
        grad(ctx, GM_W_DOWN, gm_mk(g, n, IR_OP_GROUPED_LINEAR_DW, 3, dy, a, s[GM_SPLITS]));
    }
}

static const IrCustomOp grouped_mlp_gelu = {
    .name = "grouped_mlp_gelu",
    .arity = GM_ARITY,
    .attrs = AT(PRECISION),
    .infer = gm_infer,
    .cpu_f32 = gm_cpu_f32,
    .cpu_f64 = gm_cpu_f64,
    .backward = gm_backward,
};

/* ------------------------------------------------------------ the pass */

/* Walks from the down projection's input back through at most two
 * elementwise activations to the up projection; acts[0] is the one next to
 * the down projection. */
static IrNode *find_up(IrNode *x, IrNode **acts, int *nacts)
{
    *nacts = 0;
    for (int depth = 0; depth < 3; depth++) {
        if (x->op == IR_OP_GROUPED_LINEAR)
            return depth > 0 ? x : NULL;
        if (depth == 2)
            return NULL;
        switch (x->op) {
        case IR_OP_GELU:
        case IR_OP_ROW_SCALE:
        case IR_OP_SCALED_SWIGLU:
        case IR_OP_SWIGLU:
        case IR_OP_SILU:
        case IR_OP_MUL:
        case IR_OP_SCALE:
            break;
        default:
            return NULL;
        }
        acts[(*nacts)++] = x;
        x = x->src[0];
    }
    return NULL;
}

static int match(const IrGraph *g, IrNode *down, RewriteMatch *m, const PassCtx *ctx)
{
    (void)ctx;
    IrNode *acts[2];
    int nacts, has_gelu = 0;
    IrNode *up = find_up(down->src[0], acts, &nacts);
    for (int i = 0; up && i < nacts; i++)
        has_gelu |= acts[i]->op == IR_OP_GELU;
    if (!up || !has_gelu)
        return RW_NOT_CANDIDATE;  /* not a GELU expert chain; fuse-grouped-mlp records the others */
    char users[1024], where[256];
    if (nacts != 2 || acts[1]->op != IR_OP_GELU || acts[0]->op != IR_OP_ROW_SCALE) {
        if (nacts == 1)
            return rewrite_decline(m, "the GELU output `%s` reaches the down projection unscaled; the fused kernel "
                                   "takes gelu followed by row_scale by the routing probabilities", acts[0]->label);
        if (acts[0]->op == IR_OP_GELU && acts[1]->op == IR_OP_ROW_SCALE)
            return rewrite_decline(m, "the routing probabilities scale the GELU's input (row_scale at %s), not its "
                                   "output; the fused kernel computes row_scale(gelu(h), probs)",
                                   rewrite_where(g, acts[1], where, sizeof where));
        const IrNode *odd = acts[0]->op == IR_OP_GELU ? acts[1] : acts[0];
        return rewrite_decline(m, "the GELU is combined with %s; the fused kernel takes gelu followed by row_scale "
                               "by the routing probabilities", ir_op_name(odd->op));
    }
    IrNode *scaled = acts[0], *gelu = acts[1];
    IrNode *w1 = up->src[1], *w2 = down->src[1];
    if (w1->shape[0] != w2->shape[0])
        return rewrite_decline(m, "`%s` holds %lld experts but `%s` holds %lld", w1->label, (long long)w1->shape[0],
                               w2->label, (long long)w2->shape[0]);
    if (up->src[2] != down->src[2])
        return rewrite_decline(m, "the two projections take different split sizes (`%s` and `%s`)",
                               up->src[2]->label, down->src[2]->label);
    const IrNode *inter[3] = {up, gelu, scaled}, *next[3] = {gelu, scaled, down};
    static const char *const what[3] = {"up projection output", "GELU output", "scaled GELU output"};
    for (int i = 0; i < 3; i++)
        if (inter[i]->nuses != 1 || inter[i]->is_output) {
            rewrite_other_users(g, inter[i], next[i], users, sizeof users);
            return rewrite_decline(m, "the %s `%s` also feeds %s", what[i], inter[i]->label, users);
        }
    int64_t H = up->src[0]->shape[1], F = up->shape[1];
    if (g->train.precision == IR_PREC_FP8_BLOCK)
        return rewrite_decline(m, "precision fp8-block: this plugin's kernel quantizes MXFP8 only; the unfused "
                               "chain's grouped GEMMs get fp8-block copies from the precision pass");
    if (g->train.precision == IR_PREC_MXFP8) {
        if (H % 32)
            return rewrite_decline(m, "hidden = %lld is not a multiple of the MXFP8 block 32", (long long)H);
        if (F % 32)
            return rewrite_decline(m, "ffn = %lld is not a multiple of the MXFP8 block 32", (long long)F);
    }
    if (g->train.ep > 1)
        return rewrite_decline(m, "parallel ep = %lld: expert parallelism shards grouped_mlp, and this plugin's "
                               "grouped_mlp_gelu would stay unsharded", (long long)g->train.ep);
    m->nodes[0] = down;
    m->nodes[1] = scaled;
    m->nodes[2] = gelu;
    m->nodes[3] = up;
    m->nnodes = 4;
    snprintf(m->reason, sizeof m->reason, "precision %s%s, activation gelu, %lld experts, hidden %lld, ffn %lld",
             ir_precision_name[g->train.precision],
             g->train.precision == IR_PREC_MXFP8 ? " (xs, w_up, the scaled GELU output and w_down quantized rowwise "
                                                   "in the kernel)" : "",
             (long long)w1->shape[0], (long long)H, (long long)F);
    return RW_MATCH;
}

static IrNode *rewrite(IrGraph *g, RewriteMatch *m, PassCtx *ctx)
{
    (void)ctx;
    IrNode *down = m->nodes[0], *scaled = m->nodes[1], *up = m->nodes[3];
    IrNode *src[GM_ARITY] = {up->src[0], up->src[1], down->src[1], up->src[2], scaled->src[1]};
    IrNode *n = ir_node_new(g, IR_OP_CUSTOM, GM_ARITY, src, down->scope, grouped_mlp_gelu.name, down->loc);
    n->custom = &grouped_mlp_gelu;
    n->layer = down->layer;
    n->src_loc[GM_XS] = up->src_loc[0];
    n->src_loc[GM_W_UP] = up->src_loc[1];
    n->src_loc[GM_W_DOWN] = down->src_loc[1];
    n->src_loc[GM_SPLITS] = up->src_loc[2];
    n->src_loc[GM_PROBS] = scaled->src_loc[1];
    ir_set_attr_e(n, IR_ATTR_PRECISION, (int)g->train.precision);
    return n;
}

static const RewriteRule rules[] = {
    {"grouped_linear-gelu-row_scale-grouped_linear", IR_OP_GROUPED_LINEAR, match, rewrite},
};

static int pass_fuse_grouped_gelu_mlp(IrGraph *g, PassCtx *ctx)
{
    rewrite_apply(g, ctx, "fuse-grouped-gelu-mlp", rules, ARRAY_LEN(rules));  /* counters 0, 1: fused, declined */
    return 0;
}

static const Pass fuse_grouped_gelu_mlp = {
    "fuse-grouped-gelu-mlp",
    "fuse grouped_linear -> gelu -> row_scale -> grouped_linear into one grouped_mlp_gelu node (plugin)",
    pass_fuse_grouped_gelu_mlp,
    {"chains fused", "chains declined", NULL},
};

int moec_pass_plugin_init(int api_version, char *err, size_t errlen)
{
    if (api_version != PASS_API_VERSION) {
        snprintf(err, errlen, "built for pass API %d, moec has %d", PASS_API_VERSION, api_version);
        return 0;
    }
    /* by name, so that IR text with this op reads back (moec dump x.mir --load-pass ...) */
    if (!ir_custom_op_register(&grouped_mlp_gelu)) {
        snprintf(err, errlen, "another op is named %s", grouped_mlp_gelu.name);
        return 0;
    }
    return pass_register(&fuse_grouped_gelu_mlp, "fuse-grouped-mlp", err, errlen);  /* right after it */
}
