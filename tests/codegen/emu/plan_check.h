/* plan_check.h - what the two kernel checks share: the CPU emulator of the
 * generated CUDA (tests/codegen/emu/check.c) and the GPU run
 * (tests/gpu/run_plan.c) fill the same random inputs, read plan.json through
 * the plan reader (plan/plan_io.c), agree on which ops must be bit-exact, and make up the same
 * collectives, so both compare with the CPU backend on the same terms.
 * Included by exactly one file of each program (static definitions). */
#ifndef MOEC_PLAN_CHECK_H
#define MOEC_PLAN_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../../ir/ir.h"
#include "../../../util/util.h"

static uint64_t rng_state = 42;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static double rng_normal(void)
{
    double u = rng_uniform() + 1e-300, v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Token ids that attention is segmented by (a segment_ids node reads input n): a BOS every 7 tokens and
 * padding every 10th, so the rows hold several segments and padding (segment_ids, sdpa with segments). */
static void segment_tokens(const IrGraph *g, const IrNode *n, int32_t *d, int64_t numel)
{
    for (int j = 0; j < g->nnodes; j++) {
        const IrNode *u = g->nodes[j];
        if (u->op == IR_OP_SEGMENT_IDS && u->src[0] == n)
            for (int64_t e = 0; e < numel; e++)
                if (d[e] == ir_attr_i(u, IR_ATTR_BOS) || d[e] == ir_attr_i(u, IR_ATTR_PAD) || e % 7 == 3 || e % 10 == 9)
                    d[e] = e % 7 == 3 ? (int32_t)ir_attr_i(u, IR_ATTR_BOS)
                           : e % 10 == 9 ? (int32_t)ir_attr_i(u, IR_ATTR_PAD) : 4;
    }
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

/* ops whose GPU result must equal the CPU's bit for bit on equal inputs */
static int exact_op(IrOp op)
{
    switch (op) {
    case IR_OP_FILL: case IR_OP_EMBEDDING: case IR_OP_EMBEDDING_DW: case IR_OP_SLICE: case IR_OP_VIEW:
    case IR_OP_ADD: case IR_OP_MUL: case IR_OP_SCALE: case IR_OP_ROW_SCALE: case IR_OP_DISPATCH:
    case IR_OP_DISPATCH_PROBS: case IR_OP_DISPATCH_PROBS_DX: case IR_OP_COMBINE: case IR_OP_QUANTIZE:
    case IR_OP_QUANTIZE_GROUPED: case IR_OP_EP_SORT: case IR_OP_EP_UNSORT: case IR_OP_TOPK_EXPERTS:
    case IR_OP_TOPK_PROBS: case IR_OP_TOPK_PROBS_DX: case IR_OP_SILU: case IR_OP_GELU: case IR_OP_SILU_DX:
    case IR_OP_GELU_DX: case IR_OP_SWIGLU: case IR_OP_SCALED_SWIGLU: case IR_OP_SWIGLU_DX:
    case IR_OP_SCALED_SWIGLU_DH: case IR_OP_ROPE: case IR_OP_ROPE_DX: case IR_OP_MEAN_SQUARE_DX:
        return 1;
    default:
        return 0;
    }
}

static int is_collective(IrOp op)
{
    return op == IR_OP_EP_COUNTS || op == IR_OP_EP_DISPATCH || op == IR_OP_EP_COMBINE || op == IR_OP_ALL_REDUCE;
}

/* A host-side collective of a multi-rank plan, as rank 0 of an EP group
 * might see it: plausible data (received counts that fit the capacity,
 * random received rows, zero past them; an all-reduce over one rank), so
 * that the nodes after it are checked on the same inputs on both sides. */
static void fake_collective(const IrNode *n, void *const *cpubuf)
{
    int64_t numel = ir_numel(n);
    void *y = cpubuf[n->id];
    if (n->op == IR_OP_EP_COUNTS) {
        const int32_t *c = cpubuf[n->src[0]->id];
        int64_t ep = n->shape[0], El = n->shape[1];
        for (int64_t i = 0; i < ep; i++)
            for (int64_t e = 0; e < El; e++)
                ((int32_t *)y)[i * El + e] = c[e]; /* every rank sends what rank 0 sends to my experts */
    } else if (n->op == IR_OP_EP_DISPATCH) {
        const int32_t *rc = cpubuf[n->src[2]->id];
        int64_t rows = 0, d = n->rank == 2 ? n->shape[1] : 1;
        for (int64_t i = 0; i < ir_numel(n->src[2]); i++)
            rows += rc[i];
        for (int64_t e = 0; e < numel; e++)
            ((float *)y)[e] = e < rows * d ? (float)rng_normal() : 0.0f;
    } else if (n->op == IR_OP_EP_COMBINE) {
        for (int64_t e = 0; e < numel; e++)
            ((float *)y)[e] = (float)rng_normal();
    } else {
        const float *x = cpubuf[n->src[0]->id];
        for (int64_t e = 0; e < numel; e++)
            ((float *)y)[e] = (float)(x[e] * ir_attr_f(n, IR_ATTR_FACTOR));
    }
}

#endif
