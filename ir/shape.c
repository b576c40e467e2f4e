/* shape.c - shape and dtype inference, one case per op.
 *
 * Modelled on chibicc's add_type(): a switch on the op that reads the
 * sources' shapes and writes the node's. It runs when the front end creates
 * a node (so a mismatch is reported at the user's source line, in the user's
 * names: "weight `w_down` is [4, 128, 64] ...") and again in the
 * infer-shapes pass and the verifier after every rewrite. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"
#include "../util/util.h"

typedef struct Ctx {
    IrNode *n;
    Diag *d;
} Ctx;

static const char *shp(const IrNode *n, char *buf)
{
    return ir_shape_str(n->rank, n->shape, buf, 128);
}

/* Reports at argument `arg` (-1: the whole call). */
static int fail(Ctx *c, int arg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(Ctx *c, int arg, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    SrcLoc loc = arg >= 0 ? c->n->src_loc[arg] : c->n->loc;
    if (c->d)
        diag_error(c->d, loc, "%s: %s", ir_node_op_name(c->n), msg);
    return 0;
}

static void set_shape(IrNode *n, IrDType t, int rank, const int64_t *shape)
{
    n->dtype = t;
    n->rank = rank;
    for (int i = 0; i < rank; i++)
        n->shape[i] = shape[i];
}

static void copy_shape(IrNode *n, const IrNode *from)
{
    set_shape(n, from->dtype, from->rank, from->shape);
}

static int64_t last(const IrNode *n) { return n->shape[n->rank - 1]; }

/* GEMMs read MXFP8 (e4m3) operands and write high precision. */
static IrDType gemm_out(IrDType t) { return t == IR_E4M3 ? IR_F32 : t; }

static int64_t lead_numel(const IrNode *n)
{
    int64_t e = 1;
    for (int i = 0; i + 1 < n->rank; i++)
        e *= n->shape[i];
    return e;
}

/* The two tensors agree in all but their last dimension. */
static int same_lead(const IrNode *a, const IrNode *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i + 1 < a->rank; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

static int same_shape(const IrNode *a, const IrNode *b)
{
    return a->rank == b->rank && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) == 0;
}

static int need_rank(Ctx *c, int arg, int lo, int hi, const char *what)
{
    const IrNode *s = c->n->src[arg];
    if (s->rank >= lo && s->rank <= hi)
        return 1;
    char b[128];
    if (lo == hi)
        return fail(c, arg, "%s `%s` must have %d dimension%s, but it is %s", what, s->label, lo,
                    lo == 1 ? "" : "s", shp(s, b));
    return fail(c, arg, "%s `%s` must have %d to %d dimensions, but it is %s", what, s->label, lo, hi,
                shp(s, b));
}

static int need_float(Ctx *c, int arg, const char *what)
{
    const IrNode *s = c->n->src[arg];
    if (ir_dtype_is_float(s->dtype))
        return 1;
    return fail(c, arg, "%s `%s` is %s; a floating-point tensor is needed", what, s->label,
                ir_dtype_name[s->dtype]);
}

static int need_int(Ctx *c, int arg, const char *what)
{
    const IrNode *s = c->n->src[arg];
    if (s->dtype == IR_I32)
        return 1;
    return fail(c, arg, "%s `%s` is %s; i32 indices are needed", what, s->label, ir_dtype_name[s->dtype]);
}

/* Appends one trailing dimension to x's leading dims. */
static int out_lead_plus(Ctx *c, const IrNode *x, int64_t lastdim, IrDType t)
{
    int64_t sh[IR_MAX_RANK];
    for (int i = 0; i + 1 < x->rank; i++)
        sh[i] = x->shape[i];
    sh[x->rank - 1] = lastdim;
    set_shape(c->n, t, x->rank, sh);
    return 1;
}

static int infer_linear(Ctx *c)
{
    IrNode *x = c->n->src[0], *w = c->n->src[1];
    char b1[128], b2[128];
    if (!need_float(c, 0, "input") || !need_rank(c, 0, 1, IR_MAX_RANK, "input") ||
        !need_rank(c, 1, 2, 2, "weight"))
        return 0;
    if (w->shape[1] != last(x)) {
        if (w->shape[0] == last(x))
            return fail(c, 1, "weight `%s` is %s but the input `%s` %s has %lld features: the weight is "
                        "[out, in] = [%lld, %lld] (the dimensions are swapped)",
                        w->label, shp(w, b1), x->label, shp(x, b2), (long long)last(x),
                        (long long)w->shape[1], (long long)w->shape[0]);
        return fail(c, 1, "weight `%s` is %s but the input `%s` %s has %lld features: the weight must be "
                    "[out, %lld]", w->label, shp(w, b1), x->label, shp(x, b2), (long long)last(x),
                    (long long)last(x));
    }
    return out_lead_plus(c, x, w->shape[0], gemm_out(x->dtype));
}

static int infer_grouped_linear(Ctx *c)
{
    IrNode *x = c->n->src[0], *w = c->n->src[1], *sp = c->n->src[2];
    char b1[128], b2[128];
    if (!need_float(c, 0, "input") || !need_rank(c, 0, 2, 2, "input") || !need_rank(c, 1, 3, 3, "weight") ||
        !need_int(c, 2, "split sizes") || !need_rank(c, 2, 1, 1, "split sizes"))
        return 0;
    int64_t E = w->shape[0], in = x->shape[1];
    if (sp->shape[0] != E)
        return fail(c, 1, "weight `%s` %s holds %lld experts but the split sizes `%s` count %lld experts",
                    w->label, shp(w, b1), (long long)E, sp->label, (long long)sp->shape[0]);
    if (w->shape[2] != in) {
        if (w->shape[1] == in)
            return fail(c, 1, "weight `%s` is %s but [%lld, %lld, %lld] is needed: the input `%s` %s has "
                        "%lld features and the weight is [experts, out, in]",
                        w->label, shp(w, b1), (long long)E, (long long)w->shape[2], (long long)in,
                        x->label, shp(x, b2), (long long)in);
        return fail(c, 1, "weight `%s` is %s but the input `%s` %s has %lld features: the weight must be "
                    "[%lld, out, %lld]", w->label, shp(w, b1), x->label, shp(x, b2), (long long)in,
                    (long long)E, (long long)in);
    }
    int64_t sh[2] = {x->shape[0], w->shape[1]};
    set_shape(c->n, gemm_out(x->dtype), 2, sh);
    return 1;
}

/* sdpa's optional segment ids: i32 [B, S] of the query's batch and sequence */
static int segments_ok(Ctx *c, int i, const IrNode *q)
{
    const IrNode *s = c->n->src[i];
    if (s->dtype != IR_I32 || s->rank != 2 || s->shape[0] != q->shape[0] || s->shape[1] != q->shape[1])
        return fail(c, i, "the segment ids must be i32[%lld, %lld] (batch, sequence of the query)",
                    (long long)q->shape[0], (long long)q->shape[1]);
    return 1;
}

static int infer_sdpa(Ctx *c)
{
    IrNode *q = c->n->src[0], *k = c->n->src[1], *v = c->n->src[2];
    char b1[128], b2[128];
    for (int i = 0; i < 3; i++)
        if (!need_float(c, i, i == 0 ? "query" : i == 1 ? "key" : "value") ||
            !need_rank(c, i, 3, 3, i == 0 ? "query" : i == 1 ? "key" : "value"))
            return 0;
    int64_t h = ir_attr_i(c->n, IR_ATTR_HEADS), kvh = ir_attr_i(c->n, IR_ATTR_KV_HEADS);
    if (h < 1 || kvh < 1)
        return fail(c, -1, "heads = %lld and kv_heads = %lld must be positive", (long long)h, (long long)kvh);
    if (last(q) % h)
        return fail(c, -1, "heads = %lld does not divide the query width %lld", (long long)h,
                    (long long)last(q));
    if (h % kvh)
        return fail(c, -1, "kv_heads = %lld does not divide heads = %lld", (long long)kvh, (long long)h);
    int64_t hd = last(q) / h;
    if (!same_lead(q, k) || !same_lead(q, v))
        return fail(c, -1, "query %s, key %s and value must share batch and sequence dimensions",
                    shp(q, b1), shp(k, b2));
    if (last(k) != kvh * hd || last(v) != kvh * hd)
        return fail(c, -1, "key and value must be %lld wide (kv_heads %lld x head dim %lld), but they are "
                    "%lld and %lld", (long long)(kvh * hd), (long long)kvh, (long long)hd,
                    (long long)last(k), (long long)last(v));
    if (c->n->nsrc == 4 && !segments_ok(c, 3, q))
        return 0;
    copy_shape(c->n, q);
    return 1;
}

static int infer_op(IrNode *n, Diag *d)
{
    Ctx c = {n, d};
    char b1[128], b2[128];
    for (int i = 0; i < n->nsrc; i++)
        if (n->src[i]->rank < 0)
            return 0;
    switch (n->op) {
    case IR_OP_INPUT:
    case IR_OP_PARAM:
        return 1;  /* declared by the user */

    case IR_OP_EMBEDDING: {
        IrNode *ids = n->src[0], *t = n->src[1];
        if (!need_int(&c, 0, "token ids") || !need_rank(&c, 1, 2, 2, "table") ||
            !need_float(&c, 1, "table"))
            return 0;
        if (ids->rank + 1 > IR_MAX_RANK)
            return fail(&c, 0, "token ids `%s` have %d dimensions; at most %d are supported", ids->label,
                        ids->rank, IR_MAX_RANK - 1);
        int64_t sh[IR_MAX_RANK];
        memcpy(sh, ids->shape, sizeof(int64_t) * (size_t)ids->rank);
        sh[ids->rank] = t->shape[1];
        set_shape(n, t->dtype, ids->rank + 1, sh);
        return 1;
    }
    case IR_OP_LINEAR:
        return infer_linear(&c);

    case IR_OP_RMSNORM: {
        IrNode *x = n->src[0], *w = n->src[1];
        if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 1, IR_MAX_RANK, "input") ||
            !need_rank(&c, 1, 1, 1, "weight"))
            return 0;
        if (w->shape[0] != last(x))
            return fail(&c, 1, "weight `%s` is %s but the input `%s` %s has %lld features", w->label,
                        shp(w, b1), x->label, shp(x, b2), (long long)last(x));
        copy_shape(n, x);
        return 1;
    }
    case IR_OP_ROPE: {
        IrNode *x = n->src[0];
        if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 3, 3, "input"))
            return 0;
        int64_t h = ir_attr_i(n, IR_ATTR_HEADS);
        if (h < 1 || last(x) % h)
            return fail(&c, -1, "heads = %lld does not divide the width %lld", (long long)h, (long long)last(x));
        if ((last(x) / h) % 2)
            return fail(&c, -1, "the head dimension %lld is odd; rotary embedding rotates pairs",
                        (long long)(last(x) / h));
        copy_shape(n, x);
        return 1;
    }
    case IR_OP_SDPA:
        return infer_sdpa(&c);

    case IR_OP_ADD:
    case IR_OP_MUL: {
        IrNode *a = n->src[0], *b = n->src[1];
        if (!need_float(&c, 0, "left operand") || !need_float(&c, 1, "right operand"))
            return 0;
        if (!same_shape(a, b))
            return fail(&c, -1, "`%s` is %s and `%s` is %s; elementwise operands must have the same shape",
                        a->label, shp(a, b1), b->label, shp(b, b2));
        copy_shape(n, a);
        return 1;
    }
    case IR_OP_SCALE:
    case IR_OP_SILU:
    case IR_OP_GELU:
        if (!need_float(&c, 0, "input"))
            return 0;
        copy_shape(n, n->src[0]);
        return 1;

    case IR_OP_SWIGLU: {
        IrNode *x = n->src[0];
        if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 1, IR_MAX_RANK, "input"))
            return 0;
        if (last(x) % 2)
            return fail(&c, 0, "input `%s` %s has an odd width; swiglu splits it into [gate | up] halves",
                        x->label, shp(x, b1));
        return out_lead_plus(&c, x, last(x) / 2, x->dtype);
    }
    case IR_OP_TOPK_EXPERTS: {
        IrNode *x = n->src[0];
        if (!need_float(&c, 0, "router logits") || !need_rank(&c, 0, 1, IR_MAX_RANK, "router logits"))
            return 0;
        int64_t k = ir_attr_i(n, IR_ATTR_K);
        if (k < 1 || k > last(x))
            return fail(&c, -1, "k = %lld must be between 1 and the number of experts %lld", (long long)k,
                        (long long)last(x));
        return out_lead_plus(&c, x, k, IR_I32);
    }
    case IR_OP_TOPK_PROBS: {
        IrNode *x = n->src[0], *e = n->src[1];
        if (!need_float(&c, 0, "router logits") || !need_int(&c, 1, "experts"))
            return 0;
        if (!same_lead(x, e))
            return fail(&c, -1, "router logits %s and experts %s disagree on the token dimensions",
                        shp(x, b1), shp(e, b2));
        return out_lead_plus(&c, x, last(e), IR_F32);
    }
    case IR_OP_ROUTE_PLAN:
    case IR_OP_EXPERT_COUNTS: {
        if (!need_int(&c, 0, "experts") || !need_rank(&c, 0, 1, IR_MAX_RANK, "experts"))
            return 0;
        int64_t E = ir_attr_i(n, IR_ATTR_EXPERTS);
        if (E < 1)
            return fail(&c, -1, "experts = %lld must be positive", (long long)E);
        if (n->op == IR_OP_ROUTE_PLAN) {
            copy_shape(n, n->src[0]);
        } else {
            set_shape(n, IR_I32, 1, &E);
        }
        return 1;
    }
    case IR_OP_DISPATCH:
    case IR_OP_DISPATCH_PROBS: {
        IrNode *x = n->src[0], *p = n->src[1];
        if (!need_float(&c, 0, "input") || !need_int(&c, 1, "routing plan"))
            return 0;
        if (n->op == IR_OP_DISPATCH) {
            if (!same_lead(x, p))
                return fail(&c, 0, "input `%s` %s and the routing %s disagree on the token dimensions",
                            x->label, shp(x, b1), shp(p, b2));
            int64_t sh[2] = {lead_numel(p) * last(p), last(x)};
            set_shape(n, x->dtype, 2, sh);
        } else {
            if (!same_shape(x, p))
                return fail(&c, 0, "probabilities %s and the routing %s must have the same shape",
                            shp(x, b1), shp(p, b2));
            int64_t r = ir_numel(p);
            set_shape(n, IR_F32, 1, &r);
        }
        return 1;
    }
    case IR_OP_GROUPED_LINEAR:
        return infer_grouped_linear(&c);

    case IR_OP_SCALED_SWIGLU: {
        IrNode *h = n->src[0], *p = n->src[1];
        if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 2, 2, "input") ||
            !need_float(&c, 1, "probabilities") || !need_rank(&c, 1, 1, 1, "probabilities"))
            return 0;
        if (h->shape[1] % 2)
            return fail(&c, 0, "input `%s` %s has an odd width; it holds [gate | up] halves", h->label,
                        shp(h, b1));
        if (p->shape[0] != h->shape[0])
            return fail(&c, 1, "probabilities %s do not match the %lld routed rows of `%s` (use the "
                        "routing's .probs, which are in expert-major order)", shp(p, b1),
                        (long long)h->shape[0], h->label);
        int64_t sh[2] = {h->shape[0], h->shape[1] / 2};
        /* from an e4m3 copy of h (fp8-block's backward recomputes a from it) the output is high precision */
        set_shape(n, gemm_out(h->dtype), 2, sh);
        return 1;
    }
    case IR_OP_COMBINE: {
        IrNode *y = n->src[0], *p = n->src[1];
        if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 2, 2, "input") || !need_int(&c, 1, "routing plan"))
            return 0;
        if (y->shape[0] != ir_numel(p))
            return fail(&c, 0, "input `%s` %s has %lld rows but the routing places %lld", y->label,
                        shp(y, b1), (long long)y->shape[0], (long long)ir_numel(p));
        return out_lead_plus(&c, p, y->shape[1], y->dtype);
    }
    case IR_OP_AUX_LOSS: {
        IrNode *x = n->src[0], *e = n->src[1];
        if (!need_float(&c, 0, "router logits") || !need_int(&c, 1, "experts"))
            return 0;
        if (!same_lead(x, e) || last(x) != ir_attr_i(n, IR_ATTR_EXPERTS))
            return fail(&c, -1, "router logits %s and experts %s do not describe the same routing",
                        shp(x, b1), shp(e, b2));
        set_shape(n, IR_F32, 0, NULL);
        return 1;
    }
    case IR_OP_CROSS_ENTROPY:
    case IR_OP_MASKED_LM_LOSS: {
        IrNode *x = n->src[0], *t = n->src[1];
        if (!need_float(&c, 0, "logits") || !need_rank(&c, 0, 2, IR_MAX_RANK, "logits") ||
            !need_int(&c, 1, "targets"))
            return 0;
        int ok = t->rank + 1 == x->rank;
        for (int i = 0; ok && i < t->rank; i++)
            ok = t->shape[i] == x->shape[i];
        if (!ok)
            return fail(&c, 1, "targets `%s` %s do not match the logits `%s` %s (targets are the logits' "
                        "shape without the vocabulary dimension)", t->label, shp(t, b1), x->label, shp(x, b2));
        set_shape(n, IR_F32, 0, NULL);
        return 1;
    }
    case IR_OP_MEAN_SQUARE:
        /* any rank, a scalar too: the mean of x^2 over all elements */
        if (!need_float(&c, 0, "input"))
            return 0;
        set_shape(n, IR_F32, 0, NULL);
        return 1;
    /* ---- gradient ops: their shapes follow from the forward op they
     * differentiate; a mismatch here is a bug in autodiff, not user input,
     * so the checks are terse. */
    case IR_OP_FILL:
        return 1;
    case IR_OP_SLICE: {
        IrNode *x = n->src[0];
        int64_t off = ir_attr_i(n, IR_ATTR_OFFSET), size = ir_attr_i(n, IR_ATTR_SIZE);
        if (x->rank < 1 || off < 0 || size < 1 || off + size > last(x))
            return fail(&c, -1, "slice [%lld, %lld) out of range of %s", (long long)off, (long long)(off + size),
                        shp(x, b1));
        return out_lead_plus(&c, x, size, x->dtype);
    }
    case IR_OP_EMBEDDING_DW:
        copy_shape(n, n->src[2]);
        return 1;
    case IR_OP_LINEAR_DX: {
        IrNode *dy = n->src[0], *w = n->src[1];
        if (w->rank != 2 || last(dy) != w->shape[0])
            return fail(&c, -1, "dy %s does not match weight %s", shp(dy, b1), shp(w, b2));
        return out_lead_plus(&c, dy, w->shape[1], gemm_out(dy->dtype));
    }
    case IR_OP_LINEAR_DW: {
        IrNode *dy = n->src[0], *x = n->src[1];
        if (!same_lead(dy, x))
            return fail(&c, -1, "dy %s and x %s disagree", shp(dy, b1), shp(x, b2));
        int64_t sh[2] = {last(dy), last(x)};
        set_shape(n, dy->dtype, 2, sh);
        return 1;
    }
    case IR_OP_RMSNORM_DX:
    case IR_OP_ROPE_DX:
    case IR_OP_SILU_DX:
    case IR_OP_GELU_DX:
        if (n->op != IR_OP_ROPE_DX && !same_shape(n->src[0], n->src[1]))
            return fail(&c, -1, "dy %s and x %s disagree", shp(n->src[0], b1), shp(n->src[1], b2));
        copy_shape(n, n->src[0]);
        return 1;
    case IR_OP_RMSNORM_DW: {
        int64_t d = last(n->src[1]);
        set_shape(n, n->src[0]->dtype, 1, &d);
        return 1;
    }
    case IR_OP_SDPA_BWD: {
        IrNode *q = n->src[1], *k = n->src[2];
        if (n->nsrc == 5 && !segments_ok(&c, 4, q))
            return 0;
        return out_lead_plus(&c, q, last(q) + 2 * last(k), q->dtype);
    }
    case IR_OP_SEGMENT_IDS: {
        IrNode *t = n->src[0];
        if (t->dtype != IR_I32 || t->rank != 2)
            return fail(&c, 0, "segment_ids takes the token ids, i32[batch, sequence], not %s", shp(t, b1));
        set_shape(n, IR_I32, 2, t->shape);
        return 1;
    }
    case IR_OP_SWIGLU_DX:
    case IR_OP_SCALED_SWIGLU_DH:
        copy_shape(n, n->src[1]);
        n->dtype = gemm_out(n->dtype); /* fp8-block: dh from the e4m3 copy of h is high precision */
        return 1;
    case IR_OP_TOPK_PROBS_DX:
    case IR_OP_AUX_LOSS_DX:
    case IR_OP_CROSS_ENTROPY_DX:
    case IR_OP_MEAN_SQUARE_DX:
        copy_shape(n, n->src[1]);
        n->dtype = IR_F32;
        return 1;
    case IR_OP_DISPATCH_PROBS_DX:
        copy_shape(n, n->src[1]);
        n->dtype = IR_F32;
        return 1;
    case IR_OP_GROUPED_LINEAR_DX: {
        IrNode *dy = n->src[0], *w = n->src[1];
        int64_t sh[2] = {dy->shape[0], w->shape[2]};
        set_shape(n, gemm_out(dy->dtype), 2, sh);
        return 1;
    }
    case IR_OP_GROUPED_LINEAR_DW: {
        IrNode *dy = n->src[0], *x = n->src[1], *sp = n->src[2];
        int64_t sh[3] = {sp->shape[0], dy->shape[1], x->shape[1]};
        set_shape(n, gemm_out(dy->dtype), 3, sh);
        return 1;
    }
    case IR_OP_QUANTIZE: {
        IrNode *x = n->src[0];
        const char *axis = ir_attr_e_name(n, IR_ATTR_AXIS);
        int row = ir_attr_e(n, IR_ATTR_AXIS) == IR_AXIS_ROWWISE;
        if (ir_attr_e(n, IR_ATTR_AXIS) == IR_AXIS_TILE)
            return fail(&c, -1, "MXFP8 has no tile blocking (128x128 tiles are fp8-block's: quantize_fp8_block)");
        if (x->rank < (row ? 1 : 2) || (row ? last(x) : x->shape[x->rank - 2]) % 32)
            return fail(&c, -1, "%s MXFP8 blocks of 32 do not tile %s", axis, shp(x, b1));
        copy_shape(n, x);
        n->dtype = IR_E4M3;
        return 1;
    }
    case IR_OP_QUANTIZE_FP8B: {
        /* partial blocks at ragged ends: any size works */
        IrNode *x = n->src[0];
        int row = ir_attr_e(n, IR_ATTR_AXIS) == IR_AXIS_ROWWISE;
        if (x->rank < (row ? 1 : 2))
            return fail(&c, -1, "%s fp8-block quantization needs a matrix, not %s", ir_attr_e_name(n, IR_ATTR_AXIS),
                        shp(x, b1));
        copy_shape(n, x);
        n->dtype = IR_E4M3;
        return 1;
    }
    case IR_OP_QUANTIZE_GROUPED:
    case IR_OP_QUANTIZE_FP8B_GROUPED:
        if (n->src[0]->rank != 2 || n->src[1]->dtype != IR_I32)
            return fail(&c, -1, "grouped quantization takes [rows, cols] and i32 split sizes");
        copy_shape(n, n->src[0]);
        n->dtype = IR_E4M3;
        return 1;
    case IR_OP_SCALED_SWIGLU_DP: {
        int64_t r = n->src[1]->shape[0];
        set_shape(n, IR_F32, 1, &r);
        return 1;
    }
    case IR_OP_ROW_SCALE:
    case IR_OP_ROW_DOT: {
        IrNode *x = n->src[0], *p = n->src[1];
        if (n->op == IR_OP_ROW_SCALE) {
            if (!need_float(&c, 0, "input") || !need_rank(&c, 0, 2, 2, "input") ||
                !need_float(&c, 1, "scales") || !need_rank(&c, 1, 1, 1, "scales"))
                return 0;
            if (p->shape[0] != x->shape[0])
                return fail(&c, 1, "scales %s do not match the %lld rows of `%s`", shp(p, b1),
                            (long long)x->shape[0], x->label);
            copy_shape(n, x);
        } else {
            if (!same_shape(x, p))
                return fail(&c, -1, "dy %s and x %s disagree", shp(x, b1), shp(p, b2));
            set_shape(n, IR_F32, 1, x->shape);
        }
        return 1;
    }
    case IR_OP_GROUPED_MLP: {
        IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *sp = n->src[3], *p = n->src[4];
        if (xs->rank != 2 || w1->rank != 3 || w2->rank != 3 || sp->rank != 1 || p->rank != 1)
            return fail(&c, -1, "operands of ranks %d, %d, %d, %d, %d; 2, 3, 3, 1, 1 are needed", xs->rank,
                        w1->rank, w2->rank, sp->rank, p->rank);
        int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
        if (w1->shape[1] % 2 || w1->shape[2] != H || w2->shape[0] != E || w2->shape[1] != H ||
            w2->shape[2] != F || sp->shape[0] != E || p->shape[0] != R)
            return fail(&c, -1, "xs %s, w_gate_up %s, w_down %s, splits %s, probs %s do not form an expert MLP",
                        shp(xs, b1), shp(w1, b2), shp(w2, b1), shp(sp, b2), shp(p, b1));
        copy_shape(n, xs);
        return 1;
    }
    case IR_OP_GROUPED_MLP_BWD: {
        IrNode *xs = n->src[1], *w1 = n->src[2], *w2 = n->src[3], *p = n->src[5];
        int64_t total = ir_numel(xs) + ir_numel(p) + ir_numel(w1) + ir_numel(w2);
        set_shape(n, IR_F32, 1, &total);
        return 1;
    }
    case IR_OP_VIEW: {
        IrNode *packed = n->src[0], *like = n->src[1];
        int64_t off = ir_attr_i(n, IR_ATTR_OFFSET);
        if (off < 0 || off + ir_numel(like) > ir_numel(packed))
            return fail(&c, -1, "view [%lld, %lld) out of range of %s", (long long)off,
                        (long long)(off + ir_numel(like)), shp(packed, b1));
        copy_shape(n, like);
        n->dtype = packed->dtype;
        return 1;
    }
    case IR_OP_EP_COUNTS: {
        IrNode *cn = n->src[0];
        int64_t ep = ir_attr_i(n, IR_ATTR_EP);
        if (cn->rank != 1 || ep < 1 || cn->shape[0] % ep)
            return fail(&c, -1, "%lld experts do not split over ep = %lld ranks", (long long)cn->shape[0], (long long)ep);
        int64_t sh[2] = {ep, cn->shape[0] / ep};
        set_shape(n, IR_I32, 2, sh);
        return 1;
    }
    case IR_OP_EP_LOCAL_SPLITS:
        set_shape(n, IR_I32, 1, &n->src[0]->shape[1]);
        return 1;
    case IR_OP_EP_DISPATCH:
    case IR_OP_EP_COMBINE: {
        IrNode *x = n->src[0];
        int64_t ep = ir_attr_i(n, IR_ATTR_EP);
        if (x->rank < 1 || x->rank > 2 || (n->op == IR_OP_EP_COMBINE && x->shape[0] % ep))
            return fail(&c, -1, "rows %s do not fit an all-to-all over %lld ranks", shp(x, b1), (long long)ep);
        copy_shape(n, x);
        n->shape[0] = n->op == IR_OP_EP_DISPATCH ? x->shape[0] * ep : x->shape[0] / ep;
        return 1;
    }
    case IR_OP_EP_SORT:
    case IR_OP_EP_UNSORT:
    case IR_OP_ALL_REDUCE:
        copy_shape(n, n->src[0]);
        return 1;
    case IR_OP_CUSTOM:
        if (!n->custom)
            die("custom node %s has no descriptor", n->name);
        return n->custom->infer(n, d);
    case IR_OP_COUNT:
        break;
    }
    die("ir_infer_node: unhandled op %s", ir_op_name(n->op));
}

int ir_infer_node(IrNode *n, Diag *d)
{
    if (infer_op(n, d))
        return 1;
    n->rank = -1;  /* poisoned: users of n stay quiet instead of echoing the error */
    return 0;
}
