/* fuse_grouped_mlp.c - the expert MLP as one fused node.
 *
 * Rewrites the chain
 *
 *     h = grouped_linear(xs, w_gate_up, splits)      [R, 2F]
 *     a = scaled_swiglu(h, probs)                    [R, F]
 *     y = grouped_linear(a, w_down, splits)          [R, H]
 *
 * into y = grouped_mlp(xs, w_gate_up, w_down, splits, probs){precision,
 * layout}: one kernel doing both grouped GEMMs, the SwiGLU, the routing
 * probability scaling and (with mxfp8) the quantization of the activation,
 * as Transformer Engine's fused GroupedMLP. The fused node's gradient rule
 * (autodiff) emits one fused backward node, so the pass runs before autodiff.
 *
 * A candidate is any grouped_linear fed, through elementwise activations,
 * by another grouped_linear. match() checks, in this order, and declines
 * with the first failure's reason (in the user's names):
 *   - the activation between them is exactly one scaled_swiglu;
 *   - both projections hold the same number of experts and take the same
 *     split sizes;
 *   - h and a each have one user (fusing would otherwise recompute them or
 *     hide a tensor someone reads);
 *   - w_down is [E, H, F] with H the width of xs: the fused node returns
 *     rows as wide as its input, while an unfused chain may project to
 *     another width (a later linear bringing it back);
 *   - with mxfp8, both reduction dimensions (H and F) are multiples of the
 *     32-element MXFP8 block.
 *
 * The gate/up layout. Like scaled_swiglu, the fused kernel reads
 * h = [gate | up]: rows [0, F) of w_gate_up along dim 1 feed the gate (the
 * silu), rows [F, 2F) the up. What the IR can show of that is structural,
 * and it holds by construction once the chain matched, so it is asserted
 * here (an internal error, not a decline): scaled_swiglu reads the gate_up
 * projection's whole output (its source is h itself), so w_gate_up is
 * [E, 2F, H] with 2F exactly twice a's F. Whether the weight's rows really
 * are gate then up is in the data, not the IR: it is scaled_swiglu's
 * definition (ir/ops.def) and the checkpoint importer's order
 * (formats/hf.c writes w1, then w3). The fused node records it as
 * layout = "gate_up", which its kernels and gradient rule take as given. */
#include <stdio.h>
#include <string.h>

#include "rewrite.h"
#include "../util/util.h"

static int is_activation(const IrNode *n)
{
    switch (n->op) {
    case IR_OP_SCALED_SWIGLU:
    case IR_OP_SWIGLU:
    case IR_OP_SILU:
    case IR_OP_GELU:
    case IR_OP_ROW_SCALE:
    case IR_OP_MUL:
    case IR_OP_SCALE:
        return 1;
    default:
        return 0;
    }
}

/* Walks from the down projection's input back through at most two
 * activation ops to the gate_up projection. */
static IrNode *find_gate_up(IrNode *x, IrNode **acts, int *nacts)
{
    *nacts = 0;
    for (int depth = 0; depth < 3; depth++) {
        if (x->op == IR_OP_GROUPED_LINEAR)
            return depth > 0 ? x : NULL;
        if (!is_activation(x) || depth == 2)
            return NULL;
        acts[(*nacts)++] = x;
        x = x->src[0];
    }
    return NULL;
}

static int match(const IrGraph *g, IrNode *down, RewriteMatch *m, const PassCtx *ctx)
{
    (void)ctx;
    IrNode *acts[3];
    int nacts;
    IrNode *up = find_gate_up(down->src[0], acts, &nacts);
    if (!up)
        return RW_NOT_CANDIDATE;
    char users[1024];
    if (nacts != 1 || acts[0]->op != IR_OP_SCALED_SWIGLU) {
        const IrNode *odd = acts[0];
        for (int i = 0; i < nacts; i++)
            if (acts[i]->op != IR_OP_SCALED_SWIGLU && acts[i]->op != IR_OP_ROW_SCALE)
                odd = acts[i];
        return rewrite_decline(m, "activation is %s; the fused kernel takes scaled_swiglu (SwiGLU scaled by the "
                               "routing probabilities)", ir_op_name(odd->op));
    }
    IrNode *act = acts[0];
    IrNode *w1 = up->src[1], *w2 = down->src[1];
    if (w1->shape[0] != w2->shape[0])
        return rewrite_decline(m, "`%s` holds %lld experts but `%s` holds %lld", w1->label, (long long)w1->shape[0],
                               w2->label, (long long)w2->shape[0]);
    if (up->src[2] != down->src[2])
        return rewrite_decline(m, "the two projections take different split sizes (`%s` and `%s`)",
                               up->src[2]->label, down->src[2]->label);
    if (up->nuses != 1 || up->is_output) {
        rewrite_other_users(g, up, act, users, sizeof users);
        return rewrite_decline(m, "the gate_up output `%s` also feeds %s", up->label, users);
    }
    if (act->nuses != 1 || act->is_output) {
        rewrite_other_users(g, act, down, users, sizeof users);
        return rewrite_decline(m, "the SwiGLU output `%s` also feeds %s", act->label, users);
    }
    int64_t H = up->src[0]->shape[1], F = act->shape[1];
    if (act->src[0] != up || w1->rank != 3 || w1->shape[1] != 2 * F || w1->shape[2] != H)
        die("fuse-grouped-mlp: %s does not read all of %s's [gate | up] rows", act->name, up->name);
    if (w2->rank != 3 || w2->shape[1] != H || w2->shape[2] != F)
        return rewrite_decline(m, "`%s` is [%lld, %lld, %lld]: the fused kernel returns rows as wide as its input, "
                               "so it needs [experts, hidden %lld, ffn %lld]", w2->label, (long long)w2->shape[0],
                               (long long)w2->shape[1], (long long)w2->shape[2], (long long)H, (long long)F);
    if (g->train.precision == IR_PREC_MXFP8) {
        if (H % 32)
            return rewrite_decline(m, "hidden = %lld is not a multiple of the MXFP8 block 32", (long long)H);
        if (F % 32)
            return rewrite_decline(m, "ffn = %lld is not a multiple of the MXFP8 block 32", (long long)F);
    }
    m->nodes[0] = down;
    m->nodes[1] = act;
    m->nodes[2] = up;
    m->nnodes = 3;
    snprintf(m->reason, sizeof m->reason, "precision %s, layout gate_up, %lld experts, hidden %lld, ffn %lld",
             ir_precision_name[g->train.precision], (long long)w1->shape[0], (long long)H, (long long)F);
    return RW_MATCH;
}

static IrNode *rewrite(IrGraph *g, RewriteMatch *m, PassCtx *ctx)
{
    (void)ctx;
    IrNode *down = m->nodes[0], *act = m->nodes[1], *up = m->nodes[2];
    IrNode *src[5] = {up->src[0], up->src[1], down->src[1], up->src[2], act->src[1]};
    IrNode *n = ir_node_new(g, IR_OP_GROUPED_MLP, 5, src, down->scope, "grouped_mlp", down->loc);
    n->layer = down->layer;
    n->src_loc[0] = up->src_loc[0];
    n->src_loc[1] = up->src_loc[1];
    n->src_loc[2] = down->src_loc[1];
    ir_set_attr_e(n, IR_ATTR_PRECISION, (int)g->train.precision);
    ir_set_attr_e(n, IR_ATTR_LAYOUT, IR_LAYOUT_GATE_UP);
    return n;
}

static const RewriteRule rules[] = {
    {"grouped_linear-scaled_swiglu-grouped_linear", IR_OP_GROUPED_LINEAR, match, rewrite},
};

int pass_fuse_grouped_mlp(IrGraph *g, PassCtx *ctx)
{
    rewrite_apply(g, ctx, "fuse-grouped-mlp", rules, (int)(sizeof rules / sizeof rules[0]));
    return 0;
}
