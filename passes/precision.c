/* precision.c - where MXFP8 conversions happen.
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
 * For an unfused grouped_linear (and its backward) this pass inserts
 * quantize_mxfp8 nodes in front of it, so dumps show each conversion and its
 * e4m3/e8m0 types; a tensor quantized the same way twice is quantized once.
 * A fused grouped_mlp quantizes inside its kernels (that is what fusing the
 * quantization means); the pass records what the kernel converts. GEMMs
 * whose reduction dimension is not a multiple of 32 stay in high precision,
 * recorded with the reason. Master weights and AdamW state stay fp32; GEMM
 * outputs are high precision. The pass runs after autodiff, so it sees the
 * backward GEMMs too; quantization is not differentiated through
 * (straight-through), as in Transformer Engine. */
#include <stdio.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

typedef struct Memo {
    IrNode *src, *q;
    int kind;  /* 0 rowwise, 1 colwise, 2 grouped */
} Memo;

typedef struct P {
    IrGraph *g;
    PassCtx *ctx;
    Memo *memo;
    int nmemo, capmemo;
    int inserted;  /* nodes inserted before the current one */
} P;

static const char *const kind_name[3] = {"rowwise", "colwise", "grouped colwise"};

static IrNode *quantized(P *p, IrNode *user, IrNode *x, int kind, IrNode *splits)
{
    for (int i = 0; i < p->nmemo; i++)
        if (p->memo[i].src == x && p->memo[i].kind == kind)
            return p->memo[i].q;
    IrNode *src[2] = {x, splits};
    const char *label = kind == 0 ? "mxfp8_row" : kind == 1 ? "mxfp8_col" : "mxfp8_grouped";
    IrNode *q = ir_node_new(p->g, kind == 2 ? IR_OP_QUANTIZE_GROUPED : IR_OP_QUANTIZE, kind == 2 ? 2 : 1, src,
                            x->name, label, user->loc);
    q->layer = user->layer;
    if (kind < 2)
        ir_set_attr_e(q, IR_ATTR_AXIS, kind == 0 ? IR_AXIS_ROWWISE : IR_AXIS_COLWISE);
    if (!ir_infer_node(q, NULL))
        die("precision: cannot quantize %s %s", x->name, kind_name[kind]);
    /* place it right before its first user, after every source */
    ir_graph_move(p->g, q, user->id);
    p->inserted++;
    if (p->nmemo == p->capmemo) {
        p->capmemo = p->capmemo ? 2 * p->capmemo : 64;
        Memo *m = arena_calloc(p->g->arena, (size_t)p->capmemo, sizeof *m);
        if (p->nmemo)
            memcpy(m, p->memo, sizeof *m * (size_t)p->nmemo);
        p->memo = m;
    }
    p->memo[p->nmemo++] = (Memo){x, q, kind};
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

int pass_precision(IrGraph *g, PassCtx *ctx)
{
    if (g->train.precision == IR_PREC_BF16)
        return 0;
    if (g->train.precision == IR_PREC_FP8_BLOCK) {
        SrcLoc none = {0, 0, 0};
        diag_error(ctx->diag, none, "precision fp8-block (1x128 activation and 128x128 weight scales, the Hopper "
                   "recipe) is planned for the GPU backend and not implemented yet; use bf16 or mxfp8");
        return 1;
    }
    P p = {g, ctx, NULL, 0, 0, 0};
    char why[256];
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        p.inserted = 0;
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
                               "rowwise; backward dy rowwise and grouped colwise, w_down and w_gate_up colwise, "
                               "the SwiGLU output, dh and xs grouped colwise, dh rowwise");
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
