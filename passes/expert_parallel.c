/* expert_parallel.c - the expert-parallel pass: partitions the experts over
 * ranks and inserts the token traffic.
 *
 * With `parallel ep = N` (or --ep N) the graph becomes one rank's program:
 * each rank holds E/N experts (the expert weights' first dimension shrinks
 * to E/N, recorded as attribute shard = N) and its share of the global
 * batch. Around every fused grouped_mlp the pass inserts, in order:
 *
 *   all_to_all_counts   exchange per-expert row counts (they stay on the
 *                       device; nothing syncs the host)
 *   ep_local_splits     rows per local expert, summed over source ranks
 *   all_to_all_dispatch send each routed row (and its probability) to the
 *                       rank of its expert, receive rows for mine
 *   ep_sort             received rows into local expert-major order
 *   grouped_mlp         over the local experts
 *   ep_unsort, all_to_all_combine   the way back
 *
 * and autodiff mirrors them (the gradient of a dispatch is a combine and
 * vice versa). Receive buffers have the dropless capacity ep x routed rows;
 * a rank or an expert with zero rows is ordinary. Unfused expert chains are
 * not partitioned: that is declined with the reason.
 *
 * The gradients' sums over ranks are the next pass's job, after autodiff
 * (passes/grad_allreduce.c). */
#include <stdio.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

static IrNode *add(IrGraph *g, IrOp op, int nsrc, IrNode *a, IrNode *b, IrNode *c, const IrNode *at,
                   const char *label, int64_t ep, int *pos)
{
    IrNode *src[3] = {a, b, c};
    IrNode *n = ir_node_new(g, op, nsrc, src, at->scope, label, at->loc);
    n->layer = at->layer;
    if (ir_op_info[op].required_attrs & AT(EP))
        ir_set_attr_i(n, IR_ATTR_EP, ep);
    if (!ir_infer_node(n, NULL))
        die("expert-parallel: ill-typed %s", n->name);
    ir_graph_move(g, n, *pos);
    (*pos)++;
    return n;
}

static int param_only_used_by(const IrGraph *g, const IrNode *p, const IrNode *user)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *u = g->nodes[i];
        if (u == user)
            continue;
        for (int s = 0; s < u->nsrc; s++)
            if (u->src[s] == p)
                return 0;
    }
    return 1;
}

int pass_expert_parallel(IrGraph *g, PassCtx *ctx)
{
    int64_t ep = g->train.ep;
    if (ep <= 1)
        return 0;
    char why[512];
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_GROUPED_LINEAR) {
            ir_add_decision_as(g, "expert-parallel", n, 0, "NOT PARTITIONED", NULL,
                               "expert parallelism partitions fused grouped_mlp nodes; this expert chain was not "
                               "fused (see fuse-grouped-mlp above), so it cannot run with ep > 1");
            ctx->counters[1]++;
            SrcLoc loc = n->loc;
            diag_error(ctx->diag, loc, "parallel ep = %lld needs the expert chain fused into grouped_mlp; "
                       "`moec explain` says why it was not", (long long)ep);
            return 1;
        }
        if (n->op != IR_OP_GROUPED_MLP)
            continue;
        IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *counts = n->src[3], *probs = n->src[4];
        int64_t E = w1->shape[0];
        if (E % ep) {
            diag_error(ctx->diag, n->loc, "%lld experts do not divide over parallel ep = %lld ranks", (long long)E,
                       (long long)ep);
            return 1;
        }
        if (w1->op != IR_OP_PARAM || w2->op != IR_OP_PARAM || !param_only_used_by(g, w1, n) ||
            !param_only_used_by(g, w2, n)) {
            diag_error(ctx->diag, n->loc, "expert parallelism shards the expert weights, which must be parameters "
                       "used by this expert layer alone");
            return 1;
        }
        int pos = n->id;
        IrNode *rc = add(g, IR_OP_EP_COUNTS, 1, counts, NULL, NULL, n, "recv_counts", ep, &pos);
        IrNode *ls = add(g, IR_OP_EP_LOCAL_SPLITS, 1, rc, NULL, NULL, n, "local_splits", ep, &pos);
        IrNode *xr = add(g, IR_OP_EP_DISPATCH, 3, xs, counts, rc, n, "recv_rows", ep, &pos);
        IrNode *xo = add(g, IR_OP_EP_SORT, 2, xr, rc, NULL, n, "local_rows", ep, &pos);
        IrNode *pr = add(g, IR_OP_EP_DISPATCH, 3, probs, counts, rc, n, "recv_probs", ep, &pos);
        IrNode *po = add(g, IR_OP_EP_SORT, 2, pr, rc, NULL, n, "local_probs", ep, &pos);
        /* the weights become this rank's shard */
        w1->shape[0] = E / ep;
        w2->shape[0] = E / ep;
        ir_set_attr_i(w1, IR_ATTR_SHARD, ep);
        ir_set_attr_i(w2, IR_ATTR_SHARD, ep);
        n->src[0] = xo;
        n->src[3] = ls;
        n->src[4] = po;
        if (!ir_infer_node(n, NULL))
            die("expert-parallel: %s no longer type-checks", n->name);
        pos = n->id + 1;
        IrNode *yu = add(g, IR_OP_EP_UNSORT, 2, n, rc, NULL, n, "rows_home_order", ep, &pos);
        IrNode *y = add(g, IR_OP_EP_COMBINE, 3, yu, counts, rc, n, "rows_back", ep, &pos);
        /* users of the expert output read the rows that came back */
        for (int k = 0; k < g->nnodes; k++) {
            IrNode *u = g->nodes[k];
            if (u == yu)
                continue;
            for (int s = 0; s < u->nsrc; s++)
                if (u->src[s] == n)
                    u->src[s] = y;
        }
        snprintf(why, sizeof why, "%lld of %lld experts per rank; all_to_all dispatch and combine of up to %lld "
                 "rows each way (dropless capacity %lld rows)", (long long)(E / ep), (long long)E,
                 (long long)xs->shape[0], (long long)xr->shape[0]);
        ir_add_decision_as(g, "expert-parallel", n, 1, "PARTITIONED", NULL, why);
        ctx->counters[0]++;
        i = y->id;
    }
    return 0;
}
