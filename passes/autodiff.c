/* autodiff.c - reverse-mode differentiation of the forward graph.
 *
 * Appends the backward graph to the IR: starting from d loss = 1 it walks
 * the forward nodes in reverse and applies ONE gradient rule per op (the
 * switch below, in the manner of ggml's build_backward), creating gradient
 * nodes whose first source is the incoming gradient. Gradients reaching the
 * same tensor from several users are summed with `add`. Only tensors that
 * depend on a parameter receive gradients; index ops (top-k selection, the
 * routing plan, split sizes) are not differentiable, so the router learns
 * through the renormalised top-k probabilities alone, as in Mixtral.
 *
 * Every rule is checked against central finite differences in fp64
 * (tests/unit/test_gradcheck.c). The result is recorded in g->params and
 * g->grads, and each gradient is marked as an output so dce keeps it. */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

typedef struct AD {
    IrGraph *g;
    IrNode **grad;      /* indexed by forward node id */
    char *needs;        /* forward node depends on a parameter */
    int nfwd;
    PassCtx *ctx;
    IrNode *custom_node;  /* the custom node whose gradient rule is running */
} AD;

static IrNode *mk(AD *a, const IrNode *fwd, IrOp op, int nsrc, IrNode *s0, IrNode *s1, IrNode *s2, IrNode *s3)
{
    IrNode *src[4] = {s0, s1, s2, s3};
    IrNode *n = ir_node_new(a->g, op, nsrc, src, fwd->name, ir_op_name(op), fwd->loc);
    n->layer = fwd->layer;
    /* attributes the gradient op shares with its forward op */
    unsigned want = ir_op_info[op].required_attrs | ir_op_info[op].optional_attrs;
    for (int k = 0; k < IR_ATTR_COUNT; k++)
        if ((want >> k & 1u) && ir_has_attr(fwd, (IrAttrKey)k)) {
            n->attr[k] = fwd->attr[k];
            n->attr_set |= 1u << k;
        }
    a->ctx->counters[0]++;
    return n;
}

static IrNode *done(IrNode *n)
{
    if (!ir_infer_node(n, NULL))
        die("autodiff built an ill-typed %s node %s", ir_node_op_name(n), n->name);
    return n;
}

static void acc(AD *a, IrNode *x, IrNode *g)
{
    if (x->id >= a->nfwd || !a->needs[x->id])
        return;
    if (!a->grad[x->id]) {
        a->grad[x->id] = g;
        return;
    }
    IrNode *src[2] = {a->grad[x->id], g};
    IrNode *s = ir_node_new(a->g, IR_OP_ADD, 2, src, x->name, "grad_sum", x->loc);
    s->layer = x->layer;
    a->ctx->counters[1]++;
    a->grad[x->id] = done(s);
}

/* The callback a custom op's gradient rule hands its results to. */
static void custom_grad(void *ctx, int src, IrNode *gnode)
{
    AD *a = ctx;
    IrNode *n = a->custom_node;
    if (src < 0 || src >= n->nsrc)
        die("custom op %s: gradient for source %d of %d", n->custom->name, src, n->nsrc);
    if (gnode->rank < 0 || gnode->rank != n->src[src]->rank)
        die("custom op %s: gradient %s does not have its source's shape", n->custom->name, gnode->name);
    a->ctx->counters[0]++;
    acc(a, n->src[src], gnode);
}

static IrNode *slice(AD *a, const IrNode *fwd, IrNode *x, int64_t off, int64_t size)
{
    IrNode *n = mk(a, fwd, IR_OP_SLICE, 1, x, NULL, NULL, NULL);
    ir_set_attr_i(n, IR_ATTR_OFFSET, off);
    ir_set_attr_i(n, IR_ATTR_SIZE, size);
    return done(n);
}

/* The gradient rules: dy is d loss / d n. */
static void backward_node(AD *a, IrNode *n, IrNode *dy)
{
    IrNode **s = n->src;
    switch (n->op) {
    case IR_OP_EMBEDDING:
        acc(a, s[1], done(mk(a, n, IR_OP_EMBEDDING_DW, 3, dy, s[0], s[1], NULL)));
        return;
    case IR_OP_LINEAR:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_LINEAR_DX, 2, dy, s[1], NULL, NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_LINEAR_DW, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_RMSNORM:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_RMSNORM_DX, 3, dy, s[0], s[1], NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_RMSNORM_DW, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_ROPE:
        acc(a, s[0], done(mk(a, n, IR_OP_ROPE_DX, 1, dy, NULL, NULL, NULL)));
        return;
    case IR_OP_SDPA: {
        IrNode *b = mk(a, n, IR_OP_SDPA_BWD, 4, dy, s[0], s[1], s[2]);
        if (n->nsrc == 4) {
            /* the segment ids mask the backward as they masked the forward; they have no gradient */
            b->src[4] = s[3];
            b->nsrc = 5;
        }
        done(b);
        int64_t wq = s[0]->shape[2], wk = s[1]->shape[2];
        if (a->needs[s[0]->id])
            acc(a, s[0], slice(a, n, b, 0, wq));
        if (a->needs[s[1]->id])
            acc(a, s[1], slice(a, n, b, wq, wk));
        if (a->needs[s[2]->id])
            acc(a, s[2], slice(a, n, b, wq + wk, wk));
        return;
    }
    case IR_OP_ADD:
        acc(a, s[0], dy);
        acc(a, s[1], dy);
        return;
    case IR_OP_MUL:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_MUL, 2, dy, s[1], NULL, NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_MUL, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_SCALE:
        acc(a, s[0], done(mk(a, n, IR_OP_SCALE, 1, dy, NULL, NULL, NULL)));
        return;
    case IR_OP_SILU:
        acc(a, s[0], done(mk(a, n, IR_OP_SILU_DX, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_GELU:
        acc(a, s[0], done(mk(a, n, IR_OP_GELU_DX, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_SWIGLU:
        acc(a, s[0], done(mk(a, n, IR_OP_SWIGLU_DX, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_TOPK_PROBS:
        acc(a, s[0], done(mk(a, n, IR_OP_TOPK_PROBS_DX, 3, dy, s[0], s[1], NULL)));
        return;
    case IR_OP_DISPATCH:
        /* each token was copied to k rows: its gradient is their sum */
        acc(a, s[0], done(mk(a, n, IR_OP_COMBINE, 2, dy, s[1], NULL, NULL)));
        return;
    case IR_OP_DISPATCH_PROBS:
        acc(a, s[0], done(mk(a, n, IR_OP_DISPATCH_PROBS_DX, 2, dy, s[1], NULL, NULL)));
        return;
    case IR_OP_GROUPED_LINEAR:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_GROUPED_LINEAR_DX, 3, dy, s[1], s[2], NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_GROUPED_LINEAR_DW, 3, dy, s[0], s[2], NULL)));
        return;
    case IR_OP_SCALED_SWIGLU:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_SCALED_SWIGLU_DH, 3, dy, s[0], s[1], NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_SCALED_SWIGLU_DP, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_COMBINE:
        /* the inverse permutation's gradient is the permutation */
        acc(a, s[0], done(mk(a, n, IR_OP_DISPATCH, 2, dy, s[1], NULL, NULL)));
        return;
    case IR_OP_ROW_SCALE:
        if (a->needs[s[0]->id])
            acc(a, s[0], done(mk(a, n, IR_OP_ROW_SCALE, 2, dy, s[1], NULL, NULL)));
        if (a->needs[s[1]->id])
            acc(a, s[1], done(mk(a, n, IR_OP_ROW_DOT, 2, dy, s[0], NULL, NULL)));
        return;
    case IR_OP_GROUPED_MLP: {
        /* one fused backward node, its results viewed out of a packed buffer:
         * [dxs | dprobs | dw_gate_up | dw_down] */
        IrNode *src[6] = {dy, s[0], s[1], s[2], s[3], s[4]};
        IrNode *b = ir_node_new(a->g, IR_OP_GROUPED_MLP_BWD, 6, src, n->name, "grouped_mlp_bwd", n->loc);
        b->layer = n->layer;
        ir_set_attr_e(b, IR_ATTR_PRECISION, ir_attr_e(n, IR_ATTR_PRECISION));
        ir_set_attr_e(b, IR_ATTR_LAYOUT, ir_attr_e(n, IR_ATTR_LAYOUT));
        a->ctx->counters[0]++;
        done(b);
        int64_t off = 0;
        static const int order[4] = {0, 4, 1, 2};  /* xs, probs, w_gate_up, w_down */
        for (int k = 0; k < 4; k++) {
            IrNode *like = s[order[k]];
            if (a->needs[like->id]) {
                IrNode *v = mk(a, n, IR_OP_VIEW, 2, b, like, NULL, NULL);
                ir_set_attr_i(v, IR_ATTR_OFFSET, off);
                acc(a, like, done(v));
            }
            off += ir_numel(like);
        }
        return;
    }
    case IR_OP_AUX_LOSS:
        acc(a, s[0], done(mk(a, n, IR_OP_AUX_LOSS_DX, 3, dy, s[0], s[1], NULL)));
        return;
    case IR_OP_EP_DISPATCH:
        /* the rows went away and come back: the gradient of a dispatch is a combine */
        acc(a, s[0], done(mk(a, n, IR_OP_EP_COMBINE, 3, dy, s[1], s[2], NULL)));
        return;
    case IR_OP_EP_COMBINE:
        acc(a, s[0], done(mk(a, n, IR_OP_EP_DISPATCH, 3, dy, s[1], s[2], NULL)));
        return;
    case IR_OP_EP_SORT:
        acc(a, s[0], done(mk(a, n, IR_OP_EP_UNSORT, 2, dy, s[1], NULL, NULL)));
        return;
    case IR_OP_EP_UNSORT:
        acc(a, s[0], done(mk(a, n, IR_OP_EP_SORT, 2, dy, s[1], NULL, NULL)));
        return;
    case IR_OP_CUSTOM:
        if (!n->custom->backward)
            die("autodiff: custom op %s has no gradient rule", n->custom->name);
        a->custom_node = n;
        n->custom->backward(a->g, n, dy, custom_grad, a);
        return;
    case IR_OP_CROSS_ENTROPY:
    case IR_OP_MASKED_LM_LOSS:
        acc(a, s[0], done(mk(a, n, IR_OP_CROSS_ENTROPY_DX, 3, dy, s[0], s[1], NULL)));
        return;
    case IR_OP_MEAN_SQUARE:
        /* d mean(x^2) / dx = 2 x / numel(x), times the incoming dl */
        acc(a, s[0], done(mk(a, n, IR_OP_MEAN_SQUARE_DX, 2, dy, s[0], NULL, NULL)));
        return;
    default:
        if (ir_op_info[n->op].flags & OPF_DIFF)
            die("autodiff: %s is marked differentiable but has no gradient rule", ir_op_name(n->op));
        return;  /* index ops and leaves */
    }
}

int pass_autodiff(IrGraph *g, PassCtx *ctx)
{
    if (!g->loss)
        return 0;
    AD a = {g, NULL, NULL, g->nnodes, ctx, NULL};
    a.grad = calloc((size_t)g->nnodes, sizeof *a.grad);
    a.needs = calloc((size_t)g->nnodes, 1);
    if (!a.grad || !a.needs)
        die("out of memory");
    int nparams = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_PARAM) {
            a.needs[i] = 1;
            nparams++;
            continue;
        }
        if (!(ir_op_info[n->op].flags & OPF_DIFF))
            continue;
        for (int k = 0; k < n->nsrc; k++)
            a.needs[i] |= a.needs[n->src[k]->id];
    }
    IrNode *seed = ir_node_new(g, IR_OP_FILL, 0, NULL, g->loss->name, "seed", g->loss->loc);
    ir_set_attr_f(seed, IR_ATTR_VALUE, 1.0);
    seed->dtype = IR_F32;
    seed->rank = 0;
    a.grad[g->loss->id] = seed;
    for (int i = g->loss->id; i >= 0; i--) {
        IrNode *n = g->nodes[i];
        if (a.grad[i] && a.needs[i] && n->op != IR_OP_PARAM)
            backward_node(&a, n, a.grad[i]);
    }
    g->params = arena_calloc(g->arena, (size_t)nparams + 1, sizeof *g->params);
    g->grads = arena_calloc(g->arena, (size_t)nparams + 1, sizeof *g->grads);
    g->nparams = 0;
    for (int i = 0; i < a.nfwd; i++) {
        IrNode *p = g->nodes[i];
        if (p->op != IR_OP_PARAM)
            continue;
        IrNode *gr = a.grad[i];
        if (!gr) {
            /* the loss does not depend on it: a zero gradient, said plainly */
            gr = ir_node_new(g, IR_OP_FILL, 0, NULL, p->name, "zero_grad", p->loc);
            ir_set_attr_f(gr, IR_ATTR_VALUE, 0.0);
            gr->dtype = IR_F32;
            gr->rank = p->rank;
            memcpy(gr->shape, p->shape, sizeof gr->shape);
            ctx->counters[2]++;
        }
        gr->is_output = 1;
        g->params[g->nparams] = p;
        g->grads[g->nparams] = gr;
        g->nparams++;
    }
    free(a.grad);
    free(a.needs);
    return 0;
}
