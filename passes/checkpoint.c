/* checkpoint.c - activation checkpointing per repeated block (decision 43).
 *
 * With `checkpoint blocks` in the train section, each `repeat` iteration
 * (the nodes sharing one IrNode.layer, `layers.3`) keeps across the
 * forward -> backward gap only what leaves the block: the tensors a node of
 * another block (or of no block) reads in the forward, the outputs and the
 * loss. Every other forward node of the block that the backward reads is
 * re-emitted: a clone (same op, attributes and sources, named
 * `ORIGINAL.recompute`) placed right before the first backward node that
 * reads one of them, and the backward's reads are moved to the clones. The
 * clones' own sources are other clones or what the block kept (its input,
 * the parameters), so the recomputation runs the same kernels on the same
 * inputs: the values are the forward's bit for bit, routing included
 * (top-k is deterministic). The memory planner, which orders lifetimes by
 * node position, then sees one block's activations at a time in the
 * backward.
 *
 * The fused ops whose backward reads workspaces their forward kept
 * (grouped_mlp, sdpa: the fast kernels' `until`, decision 22) are cloned
 * too, so that their backward finds a forward with the same sources right
 * before it and reads the recomputed forward's workspaces.
 *
 * Runs last (after precision), so that the quantized copies the forward
 * made are recomputed along with the rest. "Forward" is position: the
 * nodes before the first node that depends on the loss seed. */
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "../util/util.h"

static IrNode *clone_node(IrGraph *g, const IrNode *o, IrNode **map)
{
    IrNode *src[IR_MAX_SRC];
    for (int k = 0; k < o->nsrc; k++)
        src[k] = map[o->src[k]->id] ? map[o->src[k]->id] : o->src[k];
    IrNode *c = ir_node_new(g, o->op, o->nsrc, src, o->name, "recompute", o->loc);
    c->custom = o->custom;
    c->label = o->label;
    c->scope = o->scope;
    c->layer = o->layer;
    memcpy(c->src_loc, o->src_loc, sizeof c->src_loc);
    c->attr_set = o->attr_set;
    memcpy(c->attr, o->attr, sizeof c->attr);
    c->dtype = o->dtype;
    c->rank = o->rank;
    memcpy(c->shape, o->shape, sizeof c->shape);
    if (!ir_infer_node(c, NULL))
        die("checkpoint: the clone of %s does not type-check", o->name);
    return c;
}

int pass_checkpoint(IrGraph *g, PassCtx *ctx)
{
    if (g->train.checkpoint != IR_CKPT_BLOCKS || !g->loss)
        return 0;
    int n = g->nnodes;
    /* the backward starts at the first node that depends on the loss seed */
    char *bwd = calloc((size_t)n, 1);
    if (!bwd)
        die("out of memory");
    const char *seed_name = arena_printf(g->arena, "%s.seed", g->loss->name);
    int first_bwd = n;
    for (int i = 0; i < n; i++) {
        IrNode *x = g->nodes[i];
        bwd[i] = x->op == IR_OP_FILL && x->nsrc == 0 && strcmp(x->name, seed_name) == 0;
        for (int k = 0; k < x->nsrc && !bwd[i]; k++)
            bwd[i] = bwd[x->src[k]->id];
        if (bwd[i] && first_bwd == n)
            first_bwd = i;
    }
    free(bwd);
    if (first_bwd == n)
        return 0; /* no backward (autodiff disabled): nothing to checkpoint */

    /* kept[i]: forward node i leaves its block (read by a forward node of another block or of none, an
     * output, the loss) or is a leaf */
    char *kept = calloc((size_t)n, 1);
    char *want = calloc((size_t)n, 1);
    IrNode **map = calloc((size_t)n, sizeof *map);
    int *at = malloc(sizeof *at * (size_t)n);  /* insertion point of block i's clones (its first node's id), or -1 */
    if (!kept || !want || !map || !at)
        die("out of memory");
    for (int i = 0; i < first_bwd; i++) {
        IrNode *x = g->nodes[i];
        if ((ir_op_info[x->op].flags & OPF_LEAF) || !x->layer || x->is_output || x == g->loss)
            kept[i] = 1;
        for (int k = 0; k < x->nsrc; k++) {
            IrNode *s = x->src[k];
            if (!x->layer || !s->layer || strcmp(x->layer, s->layer) != 0)
                kept[s->id] = 1;
        }
    }
    /* the blocks, in forward order: each named by its first forward node */
    int nblocks = 0;
    const char **layers = malloc(sizeof *layers * (size_t)(first_bwd + 1));
    if (!layers)
        die("out of memory");
    for (int i = 0; i < first_bwd; i++) {
        const char *l = g->nodes[i]->layer;
        if (!l || kept[i])
            continue;
        int b = 0;
        while (b < nblocks && strcmp(layers[b], l) != 0)
            b++;
        if (b == nblocks)
            layers[nblocks++] = l;
    }
    IrNode ***clones = calloc((size_t)nblocks + 1, sizeof *clones);
    int *nclones = calloc((size_t)nblocks + 1, sizeof *nclones);
    int norig = n;
    for (int b = 0; b < nblocks; b++) {
        const char *l = layers[b];
        memset(want, 0, (size_t)norig);
        /* what the backward reads, and the fused forwards whose workspaces their backward reads */
        int any = 0, first_user = norig;
        for (int i = first_bwd; i < norig; i++) {
            IrNode *x = g->nodes[i];
            for (int k = 0; k < x->nsrc; k++) {
                IrNode *s = x->src[k];
                if (s->id < first_bwd && !kept[s->id] && strcmp(s->layer, l) == 0) {
                    want[s->id] = 1;
                    any = 1;
                    if (i < first_user)
                        first_user = i;
                }
            }
        }
        if (!any)
            continue;
        for (int i = 0; i < first_bwd; i++) {
            IrNode *x = g->nodes[i];
            if (!kept[i] && strcmp(x->layer, l) == 0 && (x->op == IR_OP_GROUPED_MLP || x->op == IR_OP_SDPA))
                want[i] = 1;
        }
        /* and what those are computed from, back to what the block keeps */
        for (int i = first_bwd - 1; i >= 0; i--) {
            if (!want[i])
                continue;
            IrNode *x = g->nodes[i];
            for (int k = 0; k < x->nsrc; k++)
                if (!kept[x->src[k]->id])
                    want[x->src[k]->id] = 1;
        }
        int cnt = 0;
        for (int i = 0; i < first_bwd; i++)
            cnt += want[i];
        clones[b] = malloc(sizeof **clones * (size_t)cnt);
        for (int i = 0; i < first_bwd; i++)
            if (want[i]) {
                IrNode *c = clone_node(g, g->nodes[i], map);
                map[i] = c;
                clones[b][nclones[b]++] = c;
                ctx->counters[1]++;
            }
        at[b] = first_user;
        ctx->counters[0]++;
        /* `moec explain` and the dumps say what was done, block by block */
        int nsaved = 0;
        for (int i = 0; i < first_bwd; i++)
            nsaved += kept[i] && g->nodes[i]->layer && strcmp(g->nodes[i]->layer, l) == 0 &&
                      !(ir_op_info[g->nodes[i]->op].flags & OPF_LEAF);
        IrDecision *d = arena_alloc(g->arena, sizeof *d);
        d->pass = "checkpoint";
        d->action = "CHECKPOINTED";
        d->where = l;
        d->loc = g->nodes[first_user]->loc;
        d->fused = 1;
        d->result = NULL;
        d->reason = arena_printf(g->arena, "%d forward nodes recomputed right before %s; kept across the "
                                 "backward: the block's input and the %d tensor%s leaving it",
                                 nclones[b], g->nodes[first_user]->name, nsaved, nsaved == 1 ? "" : "s");
        ptrvec_push(g->arena, &g->decisions, d);
    }
    /* the backward reads the clones */
    for (int i = first_bwd; i < norig; i++) {
        IrNode *x = g->nodes[i];
        for (int k = 0; k < x->nsrc; k++)
            if (x->src[k]->id < first_bwd && map[x->src[k]->id])
                x->src[k] = map[x->src[k]->id];
    }
    /* each block's clones right before the first backward node that reads one of them */
    if (ctx->counters[1]) {
        IrNode **order = malloc(sizeof *order * (size_t)g->nnodes);
        int m = 0;
        for (int i = 0; i < norig; i++) {
            for (int b = 0; b < nblocks; b++)
                if (nclones[b] && at[b] == i)
                    for (int c = 0; c < nclones[b]; c++)
                        order[m++] = clones[b][c];
            order[m++] = g->nodes[i];
        }
        if (m != g->nnodes)
            die("checkpoint: placed %d of %d nodes", m, g->nnodes);
        memcpy(g->nodes, order, sizeof *order * (size_t)m);
        free(order);
        ir_graph_renumber(g);
    }
    for (int b = 0; b < nblocks; b++)
        free(clones[b]);
    free(clones);
    free(nclones);
    free(layers);
    free(at);
    free(map);
    free(want);
    free(kept);
    return 0;
}
