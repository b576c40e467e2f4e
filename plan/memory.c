/* memory.c - the one memory planner: liveness over the node order.
 *
 * Both backends lay out their tensors with it: the GPU backend from the
 * plan's tensor table (codegen adds the kernels' workspaces and the views
 * that alias packed gradients), the CPU backend from its own element sizes
 * (f32 for training, f64 for the gradient check). One rule for both, so the
 * planned peak printed before a run is the one the run allocates. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

static int64_t align_to(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

void plan_memory(const IrGraph *g, PlanBuf *bufs, int nbufs, int64_t align, PlanMemory *out)
{
    int n = g->nnodes;
    if (nbufs < n)
        die("plan_memory: %d buffers for %d nodes", nbufs, n);
    int *last_use = malloc(sizeof(int) * (size_t)n);
    char *keep = calloc((size_t)n, 1);
    int64_t *block_size = calloc((size_t)nbufs + 1, sizeof(int64_t));
    char *block_free = calloc((size_t)nbufs + 1, 1);
    int *ws_first = malloc(sizeof(int) * (size_t)n), *ws_count = calloc((size_t)n, sizeof(int));
    /* workspaces kept past their node: released after node `until` (a list per node) */
    int *rel_head = malloc(sizeof(int) * (size_t)n), *rel_next = malloc(sizeof(int) * ((size_t)nbufs + 1));
    if (!last_use || !keep || !block_size || !block_free || !ws_first || !ws_count || !rel_head || !rel_next)
        die("out of memory planning buffers");
    int nblocks = 0;
    for (int i = 0; i < n; i++) {
        last_use[i] = i;
        ws_first[i] = -1;
        rel_head[i] = -1;
    }
    for (int b = 0; b < nbufs; b++) {
        bufs[b].block = -1;
        bufs[b].first = bufs[b].last = b < n ? b : bufs[b].node;
    }
    for (int b = n; b < nbufs; b++) {
        if (bufs[b].kind == PLAN_BUF_COPY) {
            if (bufs[b].node < 0 || bufs[b].node >= n || g->nodes[bufs[b].node]->op != IR_OP_PARAM)
                die("plan_memory: copy %d (%s) is no copy of a param", b, bufs[b].name);
            continue;
        }
        if (bufs[b].kind != PLAN_BUF_WORKSPACE || bufs[b].node < 0 || bufs[b].node >= n)
            die("plan_memory: buffer %d (%s) is no workspace of a node", b, bufs[b].name);
        if (bufs[b].until >= 0 && (bufs[b].until < bufs[b].node || bufs[b].until >= n))
            die("plan_memory: workspace %d (%s) kept until node %d, before its node %d or past the graph", b,
                bufs[b].name, bufs[b].until, bufs[b].node);
        if (bufs[b].until > bufs[b].node) {
            bufs[b].last = bufs[b].until;
            rel_next[b] = rel_head[bufs[b].until];
            rel_head[bufs[b].until] = b;
        }
        if (ws_first[bufs[b].node] < 0)
            ws_first[bufs[b].node] = b;
        else if (ws_first[bufs[b].node] + ws_count[bufs[b].node] != b)
            die("plan_memory: the workspaces of node %d are not consecutive", bufs[b].node);
        ws_count[bufs[b].node]++;
    }
#define ROOT(id) (bufs[id].alias_of >= 0 ? bufs[id].alias_of : (id))
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        int r = ROOT(i);
        if (node->is_output || node->op == IR_OP_INPUT || node->op == IR_OP_PARAM)
            keep[r] = 1;
        if (bufs[i].until > i && bufs[i].until < n && last_use[r] < bufs[i].until)
            last_use[r] = bufs[i].until; /* read by a later launch than its graph users */
        if (last_use[r] < i)
            last_use[r] = i;
        for (int s = 0; s < node->nsrc; s++) {
            int rs = ROOT(node->src[s]->id);
            if (last_use[rs] < i)
                last_use[rs] = i;
        }
    }
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        int todo[1 + 64], ntodo = 0;
        if (node->op != IR_OP_INPUT && node->op != IR_OP_PARAM && bufs[i].alias_of < 0)
            todo[ntodo++] = i;
        if (ws_count[i] > 64)
            die("plan_memory: node %s has more than 64 workspaces", node->name);
        for (int w = 0; w < ws_count[i]; w++)
            todo[ntodo++] = ws_first[i] + w;
        for (int t = 0; t < ntodo; t++) {
            PlanBuf *buf = &bufs[todo[t]];
            int best = -1, grow = -1;
            for (int b = 0; b < nblocks; b++) {
                if (!block_free[b])
                    continue;
                if (block_size[b] >= buf->bytes) {
                    if (best < 0 || block_size[b] < block_size[best])
                        best = b;
                } else if (grow < 0 || block_size[b] > block_size[grow]) {
                    grow = b;
                }
            }
            if (best < 0)
                best = grow;
            if (best < 0) {
                best = nblocks++;
                block_size[best] = 0;
            }
            if (block_size[best] < buf->bytes)
                block_size[best] = buf->bytes;
            block_free[best] = 0;
            buf->block = best;
        }
        /* the workspaces die with the node, or after the node they were kept for */
        for (int w = 0; w < ws_count[i]; w++)
            if (bufs[ws_first[i] + w].until <= i)
                block_free[bufs[ws_first[i] + w].block] = 1;
        for (int b = rel_head[i]; b >= 0; b = rel_next[b])
            block_free[bufs[b].block] = 1;
        for (int s = 0; s <= node->nsrc; s++) {
            int r = ROOT(s < node->nsrc ? node->src[s]->id : i);
            if (last_use[r] == i && !keep[r] && bufs[r].block >= 0)
                block_free[bufs[r].block] = 1;
        }
    }
    int64_t *block_off = calloc((size_t)nblocks + 1, sizeof(int64_t));
    if (!block_off)
        die("out of memory planning buffers");
    int64_t total = 0;
    for (int b = 0; b < nblocks; b++) {
        block_off[b] = total;
        total += align_to(block_size[b], align);
    }
    int64_t poff = 0, ioff = 0;
    for (int i = 0; i < nbufs; i++) {
        PlanBuf *buf = &bufs[i];
        if (buf->alias_of >= 0)
            continue;
        if ((i < n && g->nodes[i]->op == IR_OP_PARAM) || buf->kind == PLAN_BUF_COPY) {
            buf->region = PLAN_REGION_PARAMS;
            buf->offset = poff;
            poff += align_to(buf->bytes, align);
            buf->first = 0;
            buf->last = n - 1;
        } else if (i < n && g->nodes[i]->op == IR_OP_INPUT) {
            buf->region = PLAN_REGION_INPUTS;
            buf->offset = ioff;
            ioff += align_to(buf->bytes, align);
            buf->first = 0;
            buf->last = n - 1;
        } else {
            buf->region = PLAN_REGION_ACTIVATIONS;
            buf->offset = block_off[buf->block];
            if (i < n)
                buf->last = keep[i] ? n - 1 : last_use[i];
        }
    }
    for (int i = 0; i < nbufs; i++) {
        PlanBuf *buf = &bufs[i];
        if (buf->alias_of < 0)
            continue;
        const PlanBuf *root = &bufs[buf->alias_of];
        buf->region = root->region;
        buf->offset = root->offset + buf->alias_offset;
        buf->block = root->block;
        buf->last = root->last;
    }
#undef ROOT
    out->region_bytes[PLAN_REGION_PARAMS] = poff;
    out->region_bytes[PLAN_REGION_INPUTS] = ioff;
    out->region_bytes[PLAN_REGION_ACTIVATIONS] = total;
    out->nblocks = nblocks;
    free(last_use);
    free(keep);
    free(block_size);
    free(block_free);
    free(block_off);
    free(ws_first);
    free(ws_count);
    free(rel_head);
    free(rel_next);
}

void plan_memory_breakdown(const Plan *p, PlanMemoryBreakdown *out)
{
    memset(out, 0, sizeof *out);
    out->peak_at = -1;
    if (!p->bufs)
        return;
    const IrGraph *g = p->graph;
    int n = g->nnodes;
    int64_t *grad_bytes = calloc((size_t)p->nbufs + 1, sizeof(int64_t));  /* per root: its gradients' bytes */
    int64_t *delta = calloc((size_t)n + 1, sizeof(int64_t));
    /* the lifetimes planned again on a copy of the table (a plan read from a training binary's payload
     * leaves them out): the same planner, so the same layout */
    PlanBuf *bufs = malloc(sizeof *bufs * ((size_t)p->nbufs + 1));
    if (!grad_bytes || !delta || !bufs)
        die("out of memory");
    memcpy(bufs, p->bufs, sizeof *bufs * (size_t)p->nbufs);
    PlanMemory mem;
    plan_memory(g, bufs, p->nbufs, 256, &mem);
    /* a gradient may be a view into a packed buffer (a fused backward's outputs): its own bytes count */
    for (int i = 0; i < p->nparams; i++) {
        int gb = p->params[i].grad;
        if (gb >= 0 && gb < p->nbufs) {
            grad_bytes[bufs[gb].alias_of >= 0 ? bufs[gb].alias_of : gb] += bufs[gb].bytes;
            out->grads += bufs[gb].bytes;
        }
    }
    for (int b = 0; b < p->nbufs; b++) {
        const PlanBuf *buf = &bufs[b];
        if (buf->alias_of >= 0)
            continue;
        if (buf->region == PLAN_REGION_PARAMS) {
            if (buf->kind == PLAN_BUF_COPY)
                out->copies += buf->bytes;
            else
                out->masters += buf->bytes;
        } else if (buf->region == PLAN_REGION_ACTIVATIONS) {
            if (buf->first >= 0 && buf->first < n && buf->last >= buf->first) {
                delta[buf->first] += buf->bytes;
                delta[buf->last < n ? buf->last + 1 : n] -= buf->bytes;
            }
        }
    }
    int64_t live = 0;
    for (int i = 0; i < n; i++) {
        live += delta[i];
        if (out->peak_at < 0 || live > out->peak_live) {
            out->peak_live = live;
            out->peak_at = i;
        }
    }
    for (int b = 0; b < p->nbufs && out->peak_at >= 0; b++) {
        const PlanBuf *buf = &bufs[b];
        if (buf->alias_of >= 0 || buf->region != PLAN_REGION_ACTIVATIONS || buf->first > out->peak_at ||
            buf->last < out->peak_at)
            continue;
        int64_t gr = grad_bytes[b] < buf->bytes ? grad_bytes[b] : buf->bytes;
        out->peak_grads += gr;
        if (buf->kind == PLAN_BUF_WORKSPACE)
            out->peak_ws += buf->bytes - gr;
        else
            out->peak_acts += buf->bytes - gr;
    }
    out->acts_region = mem.region_bytes[PLAN_REGION_ACTIVATIONS];
    free(bufs);
    free(grad_bytes);
    free(delta);
}

int plan_forward_memory(const Plan *p, int64_t *off, PlanMemory *out)
{
    const IrGraph *g = p->graph;
    if (!g->loss || !p->bufs || p->nbufs < g->nnodes)
        return 0;
    int n = g->nnodes, upto = g->loss->id + 1, nb = p->nbufs, ok = 1;
    for (int i = upto; i < n; i++)
        if (g->nodes[i]->op == IR_OP_PARAM || g->nodes[i]->op == IR_OP_INPUT)
            return 0;  /* a param or input after the loss: the regions would differ */
    int *map = malloc(sizeof(int) * (size_t)nb);
    PlanBuf *fb = calloc((size_t)nb + 1, sizeof *fb);
    if (!map || !fb)
        die("out of memory planning buffers");
    /* the nodes' buffers up to the loss, then the workspaces and copies of those nodes, in the plan's order
     * (a node's workspaces stay consecutive) */
    int k = 0;
    for (int b = 0; b < nb; b++) {
        map[b] = -1;
        if (b < n ? b < upto : p->bufs[b].node < upto) {
            fb[k] = p->bufs[b];
            map[b] = k++;
        }
    }
    for (int b = 0; b < k && ok; b++) {
        if (fb[b].alias_of >= 0 && (fb[b].alias_of >= nb || (fb[b].alias_of = map[fb[b].alias_of]) < 0))
            ok = 0;  /* a view into a buffer of the backward */
        if (fb[b].until >= upto)
            fb[b].until = -1;  /* kept for a node of the backward, which does not run */
    }
    /* the forward launches name only buffers planned here */
    for (int l = 0; l < p->eval_launches && ok; l++)
        for (int a = 0; a < p->launches[l].nargs && ok; a++) {
            int b = p->launches[l].args[a];
            if (b >= nb || (b >= 0 && map[b] < 0))
                ok = 0;
        }
    if (ok) {
        IrGraph head = *g;
        head.nnodes = upto;
        plan_memory(&head, fb, k, 256, out);
        for (int b = 0; b < nb; b++)
            off[b] = map[b] >= 0 ? fb[map[b]].offset : -1;
    }
    free(map);
    free(fb);
    return ok;
}
