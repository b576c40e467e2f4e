/* dce.c - dead-node elimination.
 *
 * A node is live when an output (the loss, or a tensor named by `output`)
 * depends on it. Everything else is removed and the survivors renumbered,
 * keeping their order. Unused parameters were already warned about by the
 * front end; here they simply disappear from the training plan. */
#include <stdlib.h>

#include "pass.h"
#include "../util/util.h"

int pass_dce(IrGraph *g, PassCtx *ctx)
{
    char *live = calloc((size_t)g->nnodes + 1, 1);
    if (!live)
        die("out of memory");
    for (int i = g->nnodes - 1; i >= 0; i--) {
        IrNode *n = g->nodes[i];
        if (n->is_output || n == g->loss)
            live[i] = 1;
        if (!live[i])
            continue;
        for (int s = 0; s < n->nsrc; s++)
            live[n->src[s]->id] = 1;  /* sources precede users: visited later in this loop */
    }
    int j = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (live[i]) {
            g->nodes[j++] = g->nodes[i];
        } else {
            ctx->counters[0]++;
            if (g->nodes[i]->op == IR_OP_PARAM)
                ctx->counters[1]++;
        }
    }
    g->nnodes = j;
    ir_graph_renumber(g);
    free(live);
    return 0;
}
