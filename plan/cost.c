/* cost.c - the work of one IR node, from its shapes and storage types: the
 * floating-point operations of matmul-like ops and the bytes every node
 * must move. The training binary's --profile divides them by measured time
 * (achieved TFLOP/s and GB/s, docs/training.md); they belong to the plan
 * because they depend only on what the plan fixes (shapes, storage).
 *
 * Conventions (those of the usual MFU accounting):
 *   - a multiply-add is 2 FLOPs; only GEMM-like ops count FLOPs (the
 *     elementwise arithmetic of the others is small beside their traffic);
 *   - a backward op counts the GEMMs it actually runs, recomputation
 *     included (grouped_mlp_bwd recomputes the gate/up projection, sdpa_bwd
 *     the scores);
 *   - causal attention counts half the score matrix;
 *   - expert ops count the rows of their shapes (R = T*k routed rows, or
 *     the receive capacity under expert parallelism: an upper bound there);
 *   - bytes are the sources read and the result written, each once at its
 *     storage size: the compulsory traffic, without workspaces or re-reads,
 *     so achieved GB/s is a lower bound of what the memory really served.
 *
 * Model FLOPs (the numerator of MFU, plan_model_flops) are the same GEMM
 * FLOPs with two differences: no recomputation (grouped_mlp_bwd counts the
 * dx and dw GEMMs of both projections, 2 * 2RH2F + 2 * 2RFH, not the
 * gate/up forward it runs again; sdpa_bwd counts 2 times the forward: dV,
 * dP, dQ, dK, not the scores it recomputes), and the expert GEMMs of a
 * rank under expert parallelism count the routed rows of its own tokens
 * (T*k: the receive capacity ep*T*k divided by ep), what the model needs
 * whatever the layout. So model FLOPs = forward + backward GEMMs of the
 * model, the usual MFU convention (PaLM appendix B), causal attention at
 * half the score matrix. Activation checkpointing (decision 43) adds no
 * model FLOPs either: the forward nodes it re-emits before the backward
 * (ir_node_is_recompute) count in plan_node_cost, so --profile's achieved
 * TFLOP/s include them, and not in plan_model_flops, so MFU is the usual
 * 6 N T-style model figure whether or not the run checkpoints (the
 * "hardware FLOPs" of a checkpointed step are about 4/3 of the model's). */
#include <string.h>
#include "plan.h"

/* Bytes of one element of n as stored: the plan's tensor table when it has
 * one (buffer i is node i), else the IR dtype's size. */
static double elem_bytes(const Plan *p, const IrNode *n)
{
    if (p && p->bufs && n->id < p->nbufs && p->bufs[n->id].node == n->id)
        return plan_storage_bytes[p->bufs[n->id].storage];
    switch (n->dtype) {
    case IR_BF16:
    case IR_F16:
        return 2;
    case IR_E4M3:
    case IR_E8M0:
        return 1;
    default:
        return 4;
    }
}

static double tensor_bytes(const Plan *p, const IrNode *n) { return (double)ir_numel(n) * elem_bytes(p, n); }

static double last_dim(const IrNode *n) { return n->rank ? (double)n->shape[n->rank - 1] : 1; }

/* rows of a [.., d] tensor: everything but its last dimension */
static double rows(const IrNode *n)
{
    double d = last_dim(n);
    return d > 0 ? (double)ir_numel(n) / d : 0;
}

/* every source read once, the result written once */
static double io_bytes(const Plan *p, const IrNode *n)
{
    double b = tensor_bytes(p, n);
    for (int s = 0; s < n->nsrc; s++)
        b += tensor_bytes(p, n->src[s]);
    return b;
}

/* ---- matmul-like ops: one function per family ---- */

/* linear x [N,in] . w [out,in]^T; linear_dx dy [N,out] . w; linear_dw dy^T [out,N] . x [N,in]:
 * each one GEMM of N x in x out */
static double linear_flops(const IrNode *n)
{
    const IrNode *a = n->src[0], *b = n->src[1];
    switch (n->op) {
    case IR_OP_LINEAR:     /* x [N,in], w [out,in] */
        return 2 * rows(a) * last_dim(a) * rows(b);
    case IR_OP_LINEAR_DX:  /* dy [N,out], w [out,in] */
        return 2 * rows(a) * last_dim(a) * last_dim(b);
    default:               /* linear_dw: dy [N,out], x [N,in] */
        return 2 * rows(a) * last_dim(a) * last_dim(b);
    }
}

/* grouped_linear x [R,in], w [E,out,in]; _dx dy [R,out], w; _dw dy [R,out], x [R,in]:
 * one GEMM per expert, R rows in all */
static double grouped_linear_flops(const IrNode *n)
{
    const IrNode *a = n->src[0], *b = n->src[1];
    if (n->op == IR_OP_GROUPED_LINEAR_DW)
        return 2 * rows(a) * last_dim(a) * last_dim(b);
    /* forward and dx: R rows of the input times the weight's out x in */
    double per_expert = b->rank >= 1 && b->shape[0] ? (double)ir_numel(b) / (double)b->shape[0] : 0;
    return 2 * rows(a) * per_expert;
}

/* grouped_mlp xs [R,H], w_gate_up [E,2F,H], w_down [E,H,F]: the gate/up GEMM
 * 2*R*H*2F and the down GEMM 2*R*F*H. The backward recomputes gate/up and
 * runs dx and dw of both: 3 * 2RH2F + 2 * 2RFH (recompute: the 2RH2F it
 * runs again, set when not NULL). */
static double grouped_mlp_flops(const IrNode *n, double *recompute)
{
    const IrNode *xs = n->src[n->op == IR_OP_GROUPED_MLP_BWD ? 1 : 0];
    const IrNode *wd = n->src[n->op == IR_OP_GROUPED_MLP_BWD ? 3 : 2];
    double R = rows(xs), H = last_dim(xs), E = wd->rank ? (double)wd->shape[0] : 1;
    double F = E > 0 && H > 0 ? (double)ir_numel(wd) / (E * H) : 0;
    double gate_up = 2 * R * H * 2 * F, down = 2 * R * F * H;
    if (recompute)
        *recompute = n->op == IR_OP_GROUPED_MLP_BWD ? gate_up : 0;
    return n->op == IR_OP_GROUPED_MLP_BWD ? 3 * gate_up + 2 * down : gate_up + down;
}

/* sdpa q [B,S,h*hd]: scores Q K^T and P V, each 2*B*h*S*S*hd (half when
 * causal); the backward recomputes the scores and runs dV, dP, dQ, dK:
 * 2.5 times the forward (recompute: the half forward it runs again) */
static double sdpa_flops(const IrNode *n, double *recompute)
{
    const IrNode *q = n->src[n->op == IR_OP_SDPA_BWD ? 1 : 0];
    double S = q->rank >= 2 ? (double)q->shape[q->rank - 2] : 1, W = last_dim(q);
    double B = S * W > 0 ? (double)ir_numel(q) / (S * W) : 0;
    /* h * hd = W whatever the heads: the FLOPs do not depend on the split */
    double fwd = 4 * B * S * S * W;
    if (ir_has_attr(n, IR_ATTR_CAUSAL) && n->attr[IR_ATTR_CAUSAL].i)
        fwd *= 0.5;
    if (recompute)
        *recompute = n->op == IR_OP_SDPA_BWD ? 0.5 * fwd : 0;
    return n->op == IR_OP_SDPA_BWD ? 2.5 * fwd : fwd;
}

/* ---- memory-bound ops ---- */

static double embedding_bytes(const Plan *p, const IrNode *n)
{
    /* ids, the gathered rows (not the whole table), the result */
    return tensor_bytes(p, n->src[0]) + 2 * tensor_bytes(p, n);
}

/* a workspace of another node named ...ws.h_padded kept alive until n (codegen/cuda_moe_fast.c fwd_ws) */
static int forward_kept_h(const Plan *p, const IrNode *n)
{
    for (int b = 0; p && b < p->nbufs; b++) {
        const PlanBuf *x = &p->bufs[b];
        size_t len = x->name ? strlen(x->name) : 0;
        if (x->kind == PLAN_BUF_WORKSPACE && x->until == n->id && x->node != n->id && len >= 12 &&
            strcmp(x->name + len - 12, ".ws.h_padded") == 0)
            return 1;
    }
    return 0;
}

PlanCost plan_node_cost(const Plan *p, const IrNode *n)
{
    PlanCost c = {0, 0, 0};
    switch (n->op) {
    case IR_OP_INPUT:
    case IR_OP_PARAM:
        return c;  /* bound, not computed */
    case IR_OP_LINEAR:
    case IR_OP_LINEAR_DX:
    case IR_OP_LINEAR_DW:
        c.flops = linear_flops(n);
        c.gemm = 1;
        break;
    case IR_OP_GROUPED_LINEAR:
    case IR_OP_GROUPED_LINEAR_DX:
    case IR_OP_GROUPED_LINEAR_DW:
        c.flops = grouped_linear_flops(n);
        c.gemm = 1;
        break;
    case IR_OP_GROUPED_MLP:
    case IR_OP_GROUPED_MLP_BWD: {
        double again = 0;
        c.flops = grouped_mlp_flops(n, &again);
        /* the fast kernels' backward reads the h its forward kept (a workspace NODE.ws.h_padded kept until
         * this node) instead of recomputing xs w_gate_up^T: that GEMM is not run, so not counted */
        if (again > 0 && forward_kept_h(p, n))
            c.flops -= again;
        c.gemm = 1;
        break;
    }
    case IR_OP_SDPA:
    case IR_OP_SDPA_BWD:
        c.flops = sdpa_flops(n, NULL);
        c.gemm = 1;
        break;
    case IR_OP_EMBEDDING:
        c.bytes = embedding_bytes(p, n);
        return c;
    case IR_OP_EMBEDDING_DW:
        /* dy and ids read, the table's gradient written; src[2] gives only the shape */
        c.bytes = tensor_bytes(p, n->src[0]) + tensor_bytes(p, n->src[1]) + tensor_bytes(p, n);
        return c;
    case IR_OP_VIEW:
    case IR_OP_SLICE:
        /* a window of the source copied (or aliased: the GPU launches nothing for a view) */
        c.bytes = 2 * tensor_bytes(p, n);
        return c;
    default:
        break;
    }
    c.bytes = io_bytes(p, n);
    return c;
}

/* The ranks an expert op's rows were gathered from: its expert weight's
 * shard (ep under expert parallelism, whose receive buffers hold ep * T*k
 * rows), else 1. */
static double expert_shard(const IrNode *n)
{
    const IrNode *w = NULL;
    switch (n->op) {
    case IR_OP_GROUPED_MLP:
        w = n->src[2];
        break;
    case IR_OP_GROUPED_MLP_BWD:
        w = n->src[3];
        break;
    case IR_OP_GROUPED_LINEAR:
    case IR_OP_GROUPED_LINEAR_DX:
        w = n->src[1];
        break;
    default:
        return 1;
    }
    if (w->op == IR_OP_PARAM && ir_has_attr(w, IR_ATTR_SHARD) && w->attr[IR_ATTR_SHARD].i > 1)
        return (double)w->attr[IR_ATTR_SHARD].i;
    return 1;
}

double plan_node_model_flops(const IrNode *n)
{
    double recompute = 0, f;
    if (ir_node_is_recompute(n))
        return 0; /* a forward node the checkpoint pass re-emitted: work done twice, not the model's */
    switch (n->op) {
    case IR_OP_GROUPED_MLP:
    case IR_OP_GROUPED_MLP_BWD:
        f = grouped_mlp_flops(n, &recompute);
        break;
    case IR_OP_SDPA:
    case IR_OP_SDPA_BWD:
        f = sdpa_flops(n, &recompute);
        break;
    default:
        f = plan_node_cost(NULL, n).flops;
        break;
    }
    return (f - recompute) / expert_shard(n);
}

double plan_model_flops(const IrGraph *g)
{
    double f = 0;
    for (int i = 0; i < g->nnodes; i++)
        f += plan_node_model_flops(g->nodes[i]);
    return f;
}
