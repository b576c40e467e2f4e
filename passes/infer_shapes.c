/* infer_shapes.c - recomputes every node's dtype and shape from its sources.
 *
 * Lowering infers shapes as it builds nodes; this pass redoes it over the
 * whole graph so that later rewrites (which create and rewire nodes) start
 * from a graph whose types are known to be consistent. A disagreement with
 * what the node recorded is counted: after lowering it is always zero. */
#include <string.h>

#include "pass.h"

int pass_infer_shapes(IrGraph *g, PassCtx *ctx)
{
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (ir_op_info[n->op].flags & OPF_LEAF)
            continue;
        IrDType dt = n->dtype;
        int rank = n->rank;
        int64_t shape[IR_MAX_RANK];
        memcpy(shape, n->shape, sizeof shape);
        if (!ir_infer_node(n, ctx->diag))
            return 1;
        ctx->counters[0]++;
        if (dt != n->dtype || rank != n->rank || memcmp(shape, n->shape, sizeof(int64_t) * (size_t)rank) != 0)
            ctx->counters[1]++;
    }
    return 0;
}
