/* precision.c - where MXFP8 and fp8-block conversions happen.
 *
 * With `precision mxfp8` the expert GEMMs read MXFP8 operands: e4m3 values
 * with one e8m0 scale per 32 elements along the GEMM's reduction dimension
 * (docs/mxfp8.md). Each operand copy is quantized from high precision, and
 * which axis the 32-element blocks run along depends on the GEMM:
 *
 *   forward  y  = x  W^T   x rowwise,  W rowwise      (reduce over in)
 *   dgrad    dx = dy W     dy rowwise, W colwise      (reduce over out)
 *   wgrad    dW = dy^T x   dy and x colwise within each expert group
 *                                                     (reduce over rows)
 *
 * With `precision fp8-block` (docs/fp8-block.md, Transformer Engine's
 * Float8BlockScaling) activations and gradients are blocked 1x128 along
 * the reduction dimension as above, and each expert's weight in 128x128
 * tiles. A tile covers both of W's dimensions, so the one tiled copy serves
 * the forward and the dgrad GEMM:
 *
 *   forward  x rowwise (1x128),  W tile (128x128)
 *   dgrad    dy rowwise (1x128), W tile (the same copy)
 *   wgrad    dy and x colwise (128x1) within each expert group
 *
 * Blocks at ragged ends are partial (zero padding), so no shape is refused.
 *
 * For an unfused grouped_linear (and its backward) this pass inserts
 * quantize nodes in front of it, so dumps show each conversion and its
 * e4m3/e8m0 types; a tensor quantized the same way twice is quantized once.
 * A fused grouped_mlp quantizes inside its kernels (that is what fusing the
 * quantization means); the pass records what the kernel converts. With
 * mxfp8, GEMMs whose reduction dimension is not a multiple of 32 stay in
 * high precision, recorded with the reason. Everything else stays in high
 * precision: attention, the dense linears, the router and lm_head (small
 * or sensitive GEMMs, as in TE's recipes, which quantize only the
 * layers they are asked to), norms, softmax and losses; master weights
 * and AdamW state stay fp32, and GEMM outputs are high precision. The pass
 * runs after autodiff, so it sees the backward GEMMs too; quantization is
 * not differentiated through (straight-through), as in Transformer Engine. */
#include <stdio.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

/* the kinds of copy: 0 rowwise, 1 colwise, 2 grouped colwise, 3 tile */
enum { Q_ROW, Q_COL, Q_GROUPED, Q_TILE };

typedef struct Memo {
    IrNode *src, *q;
    int kind;
} Memo;

typedef struct P {
    IrGraph *g;
    PassCtx *ctx;
    Memo *memo;
    int nmemo, capmemo;
    int inserted;  /* nodes inserted before the current one */
    int fp8b;      /* fp8-block, else mxfp8 */
} P;

static const char *const kind_name[4] = {"rowwise", "colwise", "grouped colwise", "tile"};

/* remembers that q is x's copy of this kind (-1: a SwiGLU output recomputed from h's copy) */
static void memo_add(P *p, IrNode *x, IrNode *q, int kind)
{
    if (p->nmemo == p->capmemo) {
        p->capmemo = p->capmemo ? 2 * p->capmemo : 64;
        Memo *m = arena_calloc(p->g->arena, (size_t)p->capmemo, sizeof *m);
        if (p->nmemo)
            memcpy(m, p->memo, sizeof *m * (size_t)p->nmemo);
        p->memo = m;
    }
    p->memo[p->nmemo++] = (Memo){x, q, kind};
}

static IrNode *quantized(P *p, IrNode *user, IrNode *x, int kind, IrNode *splits)
{
    for (int i = 0; i < p->nmemo; i++)
        if (p->memo[i].src == x && p->memo[i].kind == kind)
            return p->memo[i].q;
    IrNode *src[2] = {x, splits};
    static const char *const labels[2][4] = {{"mxfp8_row", "mxfp8_col", "mxfp8_grouped", "mxfp8_tile"},
                                             {"fp8b_row", "fp8b_col", "fp8b_grouped", "fp8b_tile"}};
    IrOp op = kind == Q_GROUPED ? (p->fp8b ? IR_OP_QUANTIZE_FP8B_GROUPED : IR_OP_QUANTIZE_GROUPED)
                                : (p->fp8b ? IR_OP_QUANTIZE_FP8B : IR_OP_QUANTIZE);
    IrNode *q = ir_node_new(p->g, op, kind == Q_GROUPED ? 2 : 1, src, x->name, labels[p->fp8b][kind], user->loc);
    q->layer = user->layer;
    if (kind != Q_GROUPED)
        ir_set_attr_e(q, IR_ATTR_AXIS, kind == Q_ROW ? IR_AXIS_ROWWISE : kind == Q_COL ? IR_AXIS_COLWISE : IR_AXIS_TILE);
    if (!ir_infer_node(q, NULL))
        die("precision: cannot quantize %s %s", x->name, kind_name[kind]);
    /* place it right before its first user, after every source */
    ir_graph_move(p->g, q, user->id);
    p->inserted++;
    memo_add(p, x, q, kind);
    p->ctx->counters[0]++;
    return q;
}

/* Quantizes sources a and b of n with the given kinds. */
static void quantize_operands(P *p, IrNode *n, int a, int ka, int b, int kb)
{
    IrNode *splits = n->src[2];
    IrNode *qa = quantized(p, n, n->src[a], ka, splits);
    IrNode *qb = quantized(p, n, n->src[b], kb, splits);
    n->src[a] = qa;
    n->src[b] = qb;
    if (!ir_infer_node(n, NULL))
        die("precision: %s no longer type-checks", n->name);
}

/* Both 8-bit recipes keep the SwiGLU input h for the backward in E4M3
 * along its 2F columns (1x128 fp8-block, 1x32 MXFP8; DeepSeek-V3's recipe,
 * decision 64): the backward reads that copy, never h itself. Its SwiGLU
 * gradient (scaled_swiglu_dh / _dp) reads the copy, and the SwiGLU output
 * the down projection's weight gradient needs is recomputed from it (a node
 * of the backward), as the fused kernels do. The copy is of h rounded to
 * bf16, as the GPU stores it, so the two backends' codes agree.
 *
 * h_copy: h's copy for backward node `user`. */
static IrNode *h_copy(P *p, IrNode *user, IrNode *h)
{
    IrNode *hq = quantized(p, user, h, Q_ROW, NULL);
    ir_set_attr_i(hq, IR_ATTR_FROM_BF16, 1); /* of h as the GPU stores it: the fused kernels' copy */
    return hq;
}

/* the SwiGLU output of forward node `s` recomputed from h's copy, for backward node `user` */
static IrNode *recomputed_swiglu(P *p, IrNode *user, IrNode *s)
{
    IrNode *hq = h_copy(p, user, s->src[0]);
    for (int i = 0; i < p->nmemo; i++)
        if (p->memo[i].src == s && p->memo[i].kind == -1)
            return p->memo[i].q;
    IrNode *src[2] = {hq, s->src[1]};
    IrNode *r = ir_node_new(p->g, IR_OP_SCALED_SWIGLU, 2, src, s->name, p->fp8b ? "fp8b_recompute" : "mxfp8_recompute",
                            user->loc);
    r->layer = user->layer;
    if (!ir_infer_node(r, NULL))
        die("precision: cannot recompute %s from its 8-bit copy", s->name);
    ir_graph_move(p->g, r, user->id);
    p->inserted++;
    memo_add(p, s, r, -1);
    return r;
}

static int in_backward(const P *p, const IrNode *n) { return p->g->loss && n->id > p->g->loss->id; }

/* The SwiGLU's backward nodes read h's copy, and the down projection's dW the SwiGLU output recomputed from it
 * (both recipes; MXFP8 where h's width 2F is a multiple of its block, 32). Returns 1 if n was such a node. */
static int swiglu_from_copy(P *p, IrNode *n)
{
    switch (n->op) {
    case IR_OP_SCALED_SWIGLU_DH:
    case IR_OP_SCALED_SWIGLU_DP:
        /* (dy, h[, p]): h from its E4M3 copy */
        if (p->fp8b || n->src[1]->shape[1] % 32 == 0) {
            n->src[1] = h_copy(p, n, n->src[1]);
            if (!ir_infer_node(n, NULL))
                die("precision: %s no longer type-checks", n->name);
        }
        return 1;
    case IR_OP_GROUPED_LINEAR_DW:
        /* the down projection's dW reads the SwiGLU output: recomputed from h's copy */
        if (in_backward(p, n) && n->src[1]->op == IR_OP_SCALED_SWIGLU && !in_backward(p, n->src[1]) &&
            (p->fp8b || n->src[1]->src[0]->shape[1] % 32 == 0))
            n->src[1] = recomputed_swiglu(p, n, n->src[1]);
        return 0; /* the caller quantizes its operands */
    default:
        return 0;
    }
}

/* fp8-block: x and dy 1x128 along the reduction, each expert's weight in
 * 128x128 tiles (one copy for forward and dgrad), wgrad operands 128x1
 * within each expert group. */
static void fp8_block_node(P *p, IrNode *n)
{
    IrGraph *g = p->g;
    switch (n->op) {
    case IR_OP_GROUPED_LINEAR: {
        int64_t in = n->src[0]->shape[1], out = n->src[1]->shape[1];
        char why[320];
        snprintf(why, sizeof why, "forward x 1x128 along %lld and W in 128x128 tiles; dgrad dy 1x128 along %lld and "
                 "the same W tiles; wgrad dy and x 128x1 within each expert group%s", (long long)in, (long long)out,
                 in % 128 || out % 128 ? " (partial blocks at the ragged ends, as zero padding)" : "");
        ir_add_decision_as(g, "precision", n, 1, "FP8-BLOCK", NULL, why);
        quantize_operands(p, n, 0, Q_ROW, 1, Q_TILE);
        break;
    }
    case IR_OP_GROUPED_LINEAR_DX:
        quantize_operands(p, n, 0, Q_ROW, 1, Q_TILE);
        break;
    case IR_OP_GROUPED_LINEAR_DW:
        quantize_operands(p, n, 0, Q_GROUPED, 1, Q_GROUPED);
        break;
    case IR_OP_LINEAR:
    case IR_OP_SDPA: {
        /* said once per forward GEMM, so that explain lists what stays in high precision */
        int router = 0;
        for (int i = n->id + 1; i < g->nnodes && !router; i++)
            for (int s = 0; s < g->nodes[i]->nsrc; s++)
                router |= g->nodes[i]->src[s] == n && g->nodes[i]->op == IR_OP_TOPK_EXPERTS;
        char why[400];
        snprintf(why, sizeof why, "`%s`: %s", n->label,
                 n->op == IR_OP_SDPA
                     ? "attention (QK^T, softmax, PV) stays in high precision; fp8-block covers the expert GEMMs "
                       "only (Transformer Engine's Float8BlockScaling refuses FP8 attention too)"
                 : router ? "the router's logits choose the experts: a rounding error flips a top-k choice, and the "
                            "GEMM is only as wide as the expert count"
                          : "a dense GEMM outside the experts: fp8-block, like mxfp8, quantizes the expert GEMMs, "
                            "where a mixture-of-experts model spends most of its FLOPs");
        ir_add_decision_as(g, "precision", n, 0, "KEPT HIGH PRECISION", NULL, why);
        break;
    }
    case IR_OP_GROUPED_MLP:
        ir_add_decision_as(g, "precision", n, 1, "FP8-BLOCK", NULL,
                           "in the fused kernels: forward xs and the SwiGLU output 1x128, w_gate_up and w_down in "
                           "128x128 tiles; the SwiGLU input h kept for the backward in E4M3 1x128 (the backward "
                           "recomputes the SwiGLU output and its gradient from it); backward dy and dh 1x128, the "
                           "same weight tiles for dgrad, dy, the SwiGLU output, dh and xs 128x1 within each expert "
                           "group for wgrad");
        break;
    default:
        break;
    }
}

int pass_precision(IrGraph *g, PassCtx *ctx)
{
    if (g->train.precision == IR_PREC_BF16)
        return 0;
    P p = {g, ctx, NULL, 0, 0, 0, g->train.precision == IR_PREC_FP8_BLOCK};
    char why[256];
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        p.inserted = 0;
        if (swiglu_from_copy(&p, n)) {
            i += p.inserted;
            continue;
        }
        if (p.fp8b) {
            fp8_block_node(&p, n);
            i += p.inserted;
            continue;
        }
        switch (n->op) {
        case IR_OP_GROUPED_LINEAR: {
            /* the decision for this GEMM and its backward, said once */
            int64_t in = n->src[0]->shape[1], out = n->src[1]->shape[1];
            int fwd = in % 32 == 0, dgrad = out % 32 == 0;
            snprintf(why, sizeof why, "forward x and W rowwise along %lld: %s; dgrad dy rowwise and W colwise along "
                     "%lld: %s; wgrad dy and x colwise within each expert group: mxfp8",
                     (long long)in, fwd ? "mxfp8" : "kept (not a multiple of the MXFP8 block 32)", (long long)out,
                     dgrad ? "mxfp8" : "kept (not a multiple of the MXFP8 block 32)");
            ir_add_decision_as(g, "precision", n, fwd && dgrad, fwd && dgrad ? "MXFP8" : "PARTLY MXFP8", NULL, why);
            if (!(fwd && dgrad))
                ctx->counters[1]++;
            if (fwd)
                quantize_operands(&p, n, 0, 0, 1, 0);
            break;
        }
        case IR_OP_GROUPED_LINEAR_DX:
            if (n->src[0]->shape[1] % 32 == 0)  /* reduction over out */
                quantize_operands(&p, n, 0, 0, 1, 1);
            break;
        case IR_OP_GROUPED_LINEAR_DW:
            /* colwise blocks run down each expert's rows, the last one
             * zero-padded: any row count works */
            quantize_operands(&p, n, 0, 2, 1, 2);
            break;
        case IR_OP_GROUPED_MLP:
            ir_add_decision_as(g, "precision", n, 1, "MXFP8", NULL,
                               "in the fused kernels: forward xs, w_gate_up, w_down and the SwiGLU output "
                               "rowwise; the SwiGLU input h kept for the backward in MXFP8 rowwise (the backward "
                               "recomputes the SwiGLU output and its gradient from it); backward dy rowwise and "
                               "grouped colwise, w_down and w_gate_up colwise, the SwiGLU output, dh and xs grouped "
                               "colwise, dh rowwise");
            break;
        default:
            break;
        }
        i += p.inserted;
    }
    /* GEMMs reading e4m3 write high precision: later nodes take that type */
    ir_reinfer_all(g);
    return 0;
}
