/* grad_allreduce.c - the grad-allreduce pass, after autodiff: with several
 * ranks (parallel ep or dp > 1), every parameter's gradient becomes an
 * all_reduce that sums it over ranks and divides by the world size (each
 * rank's loss is the mean over its tokens, the global loss the mean of
 * those). Dense parameters are summed over all ranks ("world"), expert
 * shards over the ranks holding the same experts ("dp"); the shards come
 * from expert-parallel (passes/expert_parallel.c). */
#include "pass.h"
#include "../util/util.h"

int pass_grad_allreduce(IrGraph *g, PassCtx *ctx)
{
    int64_t world = g->train.ep * g->train.dp;
    if (world <= 1 || !g->nparams)
        return 0;
    for (int p = 0; p < g->nparams; p++) {
        IrNode *param = g->params[p], *gr = g->grads[p];
        int sharded = ir_has_attr(param, IR_ATTR_SHARD);
        if (sharded && g->train.dp == 1) {
            /* one replica of each expert: nothing to sum, but still the mean */
        }
        IrNode *src[1] = {gr};
        IrNode *r = ir_node_new(g, IR_OP_ALL_REDUCE, 1, src, param->name, "grad", gr->loc);
        r->layer = gr->layer;
        ir_set_attr_e(r, IR_ATTR_GROUP, sharded ? IR_GROUP_DP : IR_GROUP_WORLD);
        ir_set_attr_f(r, IR_ATTR_FACTOR, 1.0 / (double)world);
        if (!ir_infer_node(r, NULL))
            die("grad-allreduce: %s", r->name);
        gr->is_output = 0;
        r->is_output = 1;
        g->grads[p] = r;
        ctx->counters[sharded ? 1 : 0]++;
    }
    return 0;
}
