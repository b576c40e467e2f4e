/* memory.c - the one memory planner: liveness over the node order, or on
 * the GPU over the launch order.
 *
 * Both backends lay out their tensors with it: the GPU backend from the
 * plan's tensor table (codegen adds the kernels' workspaces and the views
 * that alias packed gradients) with lifetimes in launch positions
 * (plan_memory_launches, decision 65), the CPU backend from its own element
 * sizes (f32 for training, f64 for the gradient check) with lifetimes in node
 * positions (plan_memory). One placement for both, and the planned peak
 * printed before a run is the one the run allocates. */
#include "plan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

static int64_t align_to(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/* node i's source s is not read by its launches (PlanBuf.unread_srcs): the edge keeps nothing alive */
#define UNREAD(i, s) ((s) < 64 && (bufs[i].unread_srcs >> (s) & 1))

/* One buffer of the activations region to place: its lifetime [first, last] (node or launch positions, both
 * inclusive) and its aligned size; off once placed. */
typedef struct Interval {
    int buf, first, last;
    int64_t size, off;
} Interval;

/* The order of placement: the largest first (what is hardest to fit goes where the most room is), then the
 * longest-lived, then the earliest, then the buffer id: a total order, so the layout is deterministic. */
static int by_size_desc(const void *pa, const void *pb)
{
    const Interval *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    int la = a->last - a->first, lb = b->last - b->first;
    if (la != lb)
        return la > lb ? -1 : 1;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    return a->buf < b->buf ? -1 : a->buf > b->buf;
}

static int by_off(const void *pa, const void *pb)
{
    const Interval *a = *(const Interval *const *)pa, *b = *(const Interval *const *)pb;
    if (a->off != b->off)
        return a->off < b->off ? -1 : 1;
    return a->buf < b->buf ? -1 : a->buf > b->buf;
}

/* Offsets for iv[0 .. n) (sorted by by_size_desc): each at the lowest offset where it overlaps no placed
 * buffer whose lifetime overlaps its own. The placed buffers are kept sorted by first node, and a buffer's
 * lifetime search stops at the first placed one that starts after it ends; the ones it meets are sorted by
 * offset and their gaps scanned. Returns the region's end (the largest off + size). */
static int64_t pack(Interval *iv, int n)
{
    Interval **placed = malloc(sizeof *placed * ((size_t)n + 1)), **hit = malloc(sizeof *hit * ((size_t)n + 1));
    if (!placed || !hit)
        die("out of memory planning buffers");
    int np = 0;
    int64_t end = 0;
    for (int k = 0; k < n; k++) {
        Interval *c = &iv[k];
        int nh = 0;
        for (int j = 0; j < np && placed[j]->first <= c->last; j++)
            if (placed[j]->last >= c->first)
                hit[nh++] = placed[j];
        qsort(hit, (size_t)nh, sizeof *hit, by_off);
        int64_t at = 0;
        for (int j = 0; j < nh; j++) {
            if (hit[j]->off >= at + c->size)
                break;  /* the gap before it holds c */
            if (hit[j]->off + hit[j]->size > at)
                at = hit[j]->off + hit[j]->size;
        }
        c->off = at;
        if (at + c->size > end)
            end = at + c->size;
        /* insert by first node (then buffer id), keeping placed sorted */
        int j = np++;
        while (j > 0 && (placed[j - 1]->first > c->first ||
                         (placed[j - 1]->first == c->first && placed[j - 1]->buf > c->buf))) {
            placed[j] = placed[j - 1];
            j--;
        }
        placed[j] = c;
    }
    free(placed);
    free(hit);
    return end;
}

/* Where the nodes stand in the launch order: lo[i] .. hi[i] node i's launches (-1, -1 without any), at[i] the
 * launch where a node without launches stands: the first launch of a later node (the last launch when none
 * follows). The launches must be in node order (codegen emits them so). 0 with a message when they are not. */
static int launch_positions(const IrGraph *g, const PlanLaunch *L, int nl, int *lo, int *hi, int *at, char *err,
                            size_t errlen)
{
    int n = g->nnodes;
    for (int i = 0; i < n; i++)
        lo[i] = hi[i] = -1;
    for (int j = 0; j < nl; j++) {
        int node = L[j].node;
        if (node < 0 || node >= n || (j > 0 && node < L[j - 1].node)) {
            snprintf(err, errlen, "launch %d is of node %d, %s", j, node,
                     node < 0 || node >= n ? "past the graph" : "before the node of the launch ahead of it");
            return 0;
        }
        if (lo[node] < 0)
            lo[node] = j;
        hi[node] = j;
    }
    for (int i = n - 1, next = nl; i >= 0; i--) {
        if (lo[i] >= 0)
            next = lo[i];
        at[i] = next < nl ? next : nl - 1;
    }
    return 1;
}

/* the launches a node covers: its own, or the one where it stands */
#define NODE_LO(i) (lo[i] >= 0 ? lo[i] : at[i])
#define NODE_HI(i) (hi[i] >= 0 ? hi[i] : at[i])

/* Whether a launch of node u names buffer root r (a view names its base) */
static int node_names(const PlanBuf *bufs, int nbufs, const PlanLaunch *L, const int *lo, const int *hi, int u, int r)
{
    for (int j = lo[u]; j >= 0 && j <= hi[u]; j++)
        for (int a = 0; a < L[j].nargs; a++) {
            int b = L[j].args[a];
            if (b >= 0 && b < nbufs && (bufs[b].alias_of >= 0 ? bufs[b].alias_of : b) == r)
                return 1;
        }
    return 0;
}

/* The launch-level lifetimes (plan.h: plan_memory_launches) of the activations buffers into lfirst .. llast,
 * the regions already assigned; keep[r]: root r of a node lives to the end (an output). */
static void launch_lifetimes(const IrGraph *g, PlanBuf *bufs, int nbufs, const PlanLaunch *L, int nl,
                             const char *keep)
{
    int n = g->nnodes;
    int *lo = malloc(sizeof(int) * ((size_t)n + 1)), *hi = malloc(sizeof(int) * ((size_t)n + 1));
    int *at = malloc(sizeof(int) * ((size_t)n + 1)), *stamp = calloc((size_t)nbufs + 1, sizeof(int));
    char *used = calloc((size_t)n + 1, 1);
    if (!lo || !hi || !at || !stamp || !used)
        die("out of memory planning buffers");
    char why[256];
    if (!launch_positions(g, L, nl, lo, hi, at, why, sizeof why))
        die("plan_memory_launches: %s", why);
#define ROOT(id) (bufs[id].alias_of >= 0 ? bufs[id].alias_of : (id))
#define HULL(b, a, z)                                                                                                  \
    do {                                                                                                               \
        if (bufs[b].lfirst > (a))                                                                                      \
            bufs[b].lfirst = (a);                                                                                      \
        if (bufs[b].llast < (z))                                                                                       \
            bufs[b].llast = (z);                                                                                       \
    } while (0)
    for (int b = 0; b < nbufs; b++) {
        bufs[b].lfirst = INT_MAX;
        bufs[b].llast = -1;
    }
    /* every launch that names it */
    for (int j = 0; j < nl; j++)
        for (int a = 0; a < L[j].nargs; a++) {
            int b = L[j].args[a];
            if (b < -1 || b >= nbufs)
                die("plan_memory_launches: launch %d: argument %d is buffer %d of %d", j, a, b, nbufs);
            if (b >= 0)
                HULL(ROOT(b), j, j);
        }
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        for (int j = lo[i]; j >= 0 && j <= hi[i]; j++)
            for (int a = 0; a < L[j].nargs; a++)
                if (L[j].args[a] >= 0)
                    stamp[ROOT(L[j].args[a])] = i + 1;
        /* a node's tensor to its node's last launch, from its node's first launch unless one of them names it
         * (the launches naming it above); a view's base over where the view stands */
        HULL(ROOT(i), stamp[ROOT(i)] == i + 1 ? NODE_HI(i) : NODE_LO(i), NODE_HI(i));
        /* the edges its launches do not describe: to its last launch */
        for (int s = 0; s < node->nsrc; s++) {
            int r = ROOT(node->src[s]->id);
            used[node->src[s]->id] = 1;
            if (UNREAD(i, s) || (lo[i] >= 0 && stamp[r] == i + 1))
                continue;
            HULL(r, NODE_HI(i), NODE_HI(i));
        }
        /* the GPU metrics read a watched topk's logits right after it (runtime/gpu/gpu.c logits_live) */
        if (node->op == IR_OP_TOPK_EXPERTS && node->nsrc > 0 && !UNREAD(i, 0) && hi[i] >= 0)
            HULL(ROOT(node->src[0]->id), hi[i], hi[i]);
    }
    for (int b = 0; b < nbufs; b++) {
        int owner = b < n ? b : bufs[b].node, u = bufs[b].until;
        if (bufs[b].region != PLAN_REGION_ACTIVATIONS)
            continue;
        /* kept for a later node whose launches do not name it: to that node's last launch */
        if (u > owner && u < n && !node_names(bufs, nbufs, L, lo, hi, u, ROOT(b)))
            HULL(ROOT(b), NODE_HI(u), NODE_HI(u));
        /* a workspace no launch names: over its node */
        if (b >= n && bufs[b].llast < 0)
            HULL(b, NODE_LO(owner), NODE_HI(owner));
    }
    for (int i = 0; i < n; i++) {
        /* outputs, and a collective's result that no node reads: the runtime's bucketed all-reduce writes it
         * after the backward (runtime/gpu/gpu.c find_buckets) */
        int host = lo[i] >= 0 && L[lo[i]].kernel < 0;
        if (keep[ROOT(i)] || (host && !used[i]))
            HULL(ROOT(i), NODE_HI(i), nl - 1);
    }
    for (int b = 0; b < nbufs; b++) {
        if (bufs[b].region != PLAN_REGION_ACTIVATIONS) {
            bufs[b].lfirst = 0;
            bufs[b].llast = nl - 1;
        } else if (bufs[b].alias_of < 0 && bufs[b].llast < 0) {
            die("plan_memory_launches: buffer %d (%s) has no lifetime", b, bufs[b].name ? bufs[b].name : "?");
        }
    }
    for (int b = 0; b < nbufs; b++)
        if (bufs[b].alias_of >= 0) {
            bufs[b].lfirst = bufs[bufs[b].alias_of].lfirst;
            bufs[b].llast = bufs[bufs[b].alias_of].llast;
        }
#undef HULL
#undef ROOT
    free(lo);
    free(hi);
    free(at);
    free(stamp);
    free(used);
}

static void layout(const IrGraph *g, PlanBuf *bufs, int nbufs, const PlanLaunch *launches, int nlaunches,
                   int64_t align, PlanMemory *out)
{
    int n = g->nnodes;
    if (nbufs < n)
        die("plan_memory: %d buffers for %d nodes", nbufs, n);
    int *last_use = malloc(sizeof(int) * (size_t)n);
    char *keep = calloc((size_t)n, 1);
    Interval *iv = malloc(sizeof *iv * ((size_t)nbufs + 1));
    if (!last_use || !keep || !iv)
        die("out of memory planning buffers");
    for (int i = 0; i < n; i++)
        last_use[i] = i;
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
        if (bufs[b].alias_of >= 0)
            die("plan_memory: workspace %d (%s) is a view", b, bufs[b].name);
        if (bufs[b].until >= 0 && (bufs[b].until < bufs[b].node || bufs[b].until >= n))
            die("plan_memory: workspace %d (%s) kept until node %d, before its node %d or past the graph", b,
                bufs[b].name, bufs[b].until, bufs[b].node);
        if (bufs[b].until > bufs[b].node)
            bufs[b].last = bufs[b].until;
    }
#define ROOT(id) (bufs[id].alias_of >= 0 ? bufs[id].alias_of : (id))
    for (int i = 0; i < n; i++) {
        int a = bufs[i].alias_of;
        if (a >= 0 && (a >= n || bufs[a].alias_of >= 0))
            die("plan_memory: view %d (%s) lies in buffer %d, no node's own buffer", i, bufs[i].name, a);
        int ns = g->nodes[i]->nsrc;
        if (ns < 64 && bufs[i].unread_srcs >> ns)
            die("plan_memory: node %d (%s) has %d sources, its unread ones are %#llx", i, bufs[i].name, ns,
                (unsigned long long)bufs[i].unread_srcs);
    }
    for (int b = n; b < nbufs; b++)
        if (bufs[b].unread_srcs)
            die("plan_memory: buffer %d (%s) is no node's, yet has unread sources", b, bufs[b].name);
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
            if (UNREAD(i, s))
                continue;  /* no launch of the node reads it (codegen: mark_unread_srcs) */
            if (last_use[rs] < i)
                last_use[rs] = i;
        }
    }
    /* the activations' own buffers (views excepted) with their lifetimes: a node's from the node to its last
     * user that reads it (the end for an output), a workspace's from its node to its node or `until` */
    int niv = 0;
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
            if (i < n)
                buf->last = keep[i] ? n - 1 : last_use[i];
            iv[niv++] = (Interval){.buf = i, .first = buf->first, .last = buf->last,
                                   .size = align_to(buf->bytes, align), .off = 0};
        }
    }
    if (nlaunches > 0) {
        /* the GPU: the same placement over launch positions */
        launch_lifetimes(g, bufs, nbufs, launches, nlaunches, keep);
        for (int k = 0; k < niv; k++) {
            iv[k].first = bufs[iv[k].buf].lfirst;
            iv[k].last = bufs[iv[k].buf].llast;
        }
    } else {
        for (int b = 0; b < nbufs; b++)
            bufs[b].lfirst = bufs[b].llast = -1;
    }
    qsort(iv, (size_t)niv, sizeof *iv, by_size_desc);
    int64_t total = pack(iv, niv);
    for (int k = 0; k < niv; k++) {
        bufs[iv[k].buf].offset = iv[k].off;
        bufs[iv[k].buf].block = k;
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
    out->nblocks = niv;
    free(last_use);
    free(keep);
    free(iv);
    /* what the layout promises, checked on every plan (about 1 ms for mixtral_8x7b's 3,500 buffers) */
    char why[512];
    if (!plan_memory_check(g, bufs, nbufs, nlaunches > 0 ? launches : NULL, nlaunches > 0 ? nlaunches : 0, align,
                           out, why, sizeof why))
        die("plan_memory: internal error: the layout breaks its rules: %s", why);
}

void plan_memory(const IrGraph *g, PlanBuf *bufs, int nbufs, int64_t align, PlanMemory *out)
{
    layout(g, bufs, nbufs, NULL, 0, align, out);
}

void plan_memory_launches(const IrGraph *g, PlanBuf *bufs, int nbufs, const PlanLaunch *launches, int nlaunches,
                          int64_t align, PlanMemory *out)
{
    layout(g, bufs, nbufs, launches, nlaunches, align, out);
}

void plan_memory_again(const Plan *p, PlanBuf *bufs, PlanMemory *out)
{
    layout(p->graph, bufs, p->nbufs, p->launches, p->nlaunches, 256, out);
}

void plan_memory_breakdown(const Plan *p, PlanMemoryBreakdown *out)
{
    memset(out, 0, sizeof *out);
    out->peak_at = out->peak_launch = out->nograd_at = out->nograd_launch = -1;
    if (!p->bufs)
        return;
    const IrGraph *g = p->graph;
    int n = g->nnodes;
    /* the positions the lifetimes are in: the launches of a launch-level layout (every GPU plan), else nodes */
    int bylaunch = p->nlaunches > 0, npos = bylaunch ? p->nlaunches : n;
    int64_t *grad_bytes = calloc((size_t)p->nbufs + 1, sizeof(int64_t));  /* per root: its gradients' bytes */
    int64_t *delta = calloc((size_t)npos + 1, sizeof(int64_t)), *ndelta = calloc((size_t)npos + 1, sizeof(int64_t));
    /* the lifetimes planned again on a copy of the table (a plan read from a training binary's payload
     * leaves them out): the same planner, so the same layout */
    PlanBuf *bufs = malloc(sizeof *bufs * ((size_t)p->nbufs + 1));
    if (!grad_bytes || !delta || !ndelta || !bufs)
        die("out of memory");
    memcpy(bufs, p->bufs, sizeof *bufs * (size_t)p->nbufs);
    PlanMemory mem;
    plan_memory_again(p, bufs, &mem);
#define FIRST(b) (bylaunch ? (b)->lfirst : (b)->first)
#define LAST(b) (bylaunch ? (b)->llast : (b)->last)
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
            if (FIRST(buf) >= 0 && FIRST(buf) < npos && LAST(buf) >= FIRST(buf)) {
                int64_t ng = buf->bytes - (grad_bytes[b] < buf->bytes ? grad_bytes[b] : buf->bytes);
                delta[FIRST(buf)] += buf->bytes;
                delta[LAST(buf) < npos ? LAST(buf) + 1 : npos] -= buf->bytes;
                ndelta[FIRST(buf)] += ng;
                ndelta[LAST(buf) < npos ? LAST(buf) + 1 : npos] -= ng;
            }
        }
    }
    int64_t live = 0, nlive = 0;
    int peak = -1, npeak = -1;
    for (int i = 0; i < npos; i++) {
        live += delta[i];
        nlive += ndelta[i];
        if (peak < 0 || live > out->peak_live) {
            out->peak_live = live;
            peak = i;
        }
        if (npeak < 0 || nlive > out->nograd_live) {
            out->nograd_live = nlive;
            npeak = i;
        }
    }
    if (peak >= 0) {
        out->peak_launch = bylaunch ? peak : -1;
        out->peak_at = bylaunch ? p->launches[peak].node : peak;
        out->nograd_launch = bylaunch ? npeak : -1;
        out->nograd_at = bylaunch ? p->launches[npeak].node : npeak;
    }
    for (int b = 0; b < p->nbufs && peak >= 0; b++) {
        const PlanBuf *buf = &bufs[b];
        if (buf->alias_of >= 0 || buf->region != PLAN_REGION_ACTIVATIONS || FIRST(buf) > peak || LAST(buf) < peak)
            continue;
        int64_t gr = grad_bytes[b] < buf->bytes ? grad_bytes[b] : buf->bytes;
        out->peak_grads += gr;
        if (buf->kind == PLAN_BUF_WORKSPACE)
            out->peak_ws += buf->bytes - gr;
        else
            out->peak_acts += buf->bytes - gr;
    }
    /* held for the backward: live at the loss (its last launch) and after it (the loss itself, an output,
     * counts: 4 bytes) */
    int at = !g->loss ? -1 : bylaunch ? p->eval_launches - 1 : g->loss->id;
    for (int b = 0; b < p->nbufs && at >= 0; b++) {
        const PlanBuf *buf = &bufs[b];
        if (buf->alias_of >= 0 || buf->region != PLAN_REGION_ACTIVATIONS || buf->bytes <= 0 || FIRST(buf) > at ||
            LAST(buf) <= at)
            continue;
        out->held += buf->bytes - (grad_bytes[b] < buf->bytes ? grad_bytes[b] : buf->bytes);
    }
#undef FIRST
#undef LAST
    out->acts_region = mem.region_bytes[PLAN_REGION_ACTIVATIONS];
    free(bufs);
    free(grad_bytes);
    free(delta);
    free(ndelta);
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
    for (int b = 0; b < k && ok; b++)
        if (fb[b].alias_of >= 0 && (fb[b].alias_of >= nb || (fb[b].alias_of = map[fb[b].alias_of]) < 0))
            ok = 0;  /* a view into a buffer of the backward */
    /* a buffer kept for a node of the backward, which does not run, lives to the last forward launch that
     * names it, else its node (a workspace) or its graph users (a node's tensor): RoPE's table of angles is read
     * by the forward's later rope nodes (decision 58); a dispatch's source rows by the expert MLP that reads
     * the dispatch through (decisions 62, 64) */
    for (int b = 0; b < nb && ok; b++) {
        if (map[b] < 0 || fb[map[b]].until < upto)
            continue;
        int until = -1, owner = b < n ? b : p->bufs[b].node;
        for (int l = 0; l < p->eval_launches; l++)
            for (int a = 0; a < p->launches[l].nargs; a++)
                if (p->launches[l].args[a] == b && p->launches[l].node > owner && p->launches[l].node > until)
                    until = p->launches[l].node;
        fb[map[b]].until = until;
    }
    /* the forward launches name only buffers planned here: they are laid out over those launches, their
     * arguments renumbered (the same rule as the training layout's, decision 65) */
    int nfl = p->eval_launches;
    PlanLaunch *fl = calloc((size_t)nfl + 1, sizeof *fl);
    int *fargs = NULL, nfargs = 0;
    for (int l = 0; l < nfl; l++)
        nfargs += p->launches[l].nargs;
    fargs = malloc(sizeof(int) * ((size_t)nfargs + 1));
    if (!fl || !fargs)
        die("out of memory planning buffers");
    nfargs = 0;
    for (int l = 0; l < nfl && ok; l++) {
        fl[l] = p->launches[l];
        fl[l].targs = NULL;  /* the buffers are in args; the planner reads nothing else */
        fl[l].args = fargs + nfargs;
        for (int a = 0; a < p->launches[l].nargs && ok; a++) {
            int b = p->launches[l].args[a];
            if (b >= nb || (b >= 0 && map[b] < 0))
                ok = 0;
            else
                fargs[nfargs++] = b >= 0 ? map[b] : -1;
        }
    }
    if (ok) {
        IrGraph head = *g;
        head.nnodes = upto;
        plan_memory_launches(&head, fb, k, fl, nfl, 256, out);
        for (int b = 0; b < nb; b++)
            off[b] = map[b] >= 0 ? fb[map[b]].offset : -1;
    }
    free(fl);
    free(fargs);
    free(map);
    free(fb);
    return ok;
}

/* The layout's invariants (plan.h: plan_memory_check), for the tests: buffer ids sorted by offset, then a
 * sweep keeps the placed buffers that may still reach the next one's offset (those ending after it starts). */
/* (pointers into one bufs array, so that no state outside the arguments is needed: plan_memory_check runs in
 * several threads at once under --simulate-ranks; a file-scope pointer for the comparator raced there) */
static int by_offset(const void *pa, const void *pb)
{
    const PlanBuf *a = *(const PlanBuf *const *)pa, *b = *(const PlanBuf *const *)pb;
    if (a->offset != b->offset)
        return a->offset < b->offset ? -1 : 1;
    return a < b ? -1 : a > b; /* then by id */
}

/* The launch-level lifetimes' promises (plan.h: plan_memory_check with launches): 1, or 0 with the first
 * violation in err */
static int check_launch_lifetimes(const IrGraph *g, const PlanBuf *bufs, int nbufs, const PlanLaunch *L, int nl,
                                  char *err, size_t errlen)
{
    int n = g->nnodes, ok = 1;
    int *lo = malloc(sizeof(int) * ((size_t)n + 1)), *hi = malloc(sizeof(int) * ((size_t)n + 1));
    int *at = malloc(sizeof(int) * ((size_t)n + 1)), *stamp = calloc((size_t)nbufs + 1, sizeof(int));
    if (!lo || !hi || !at || !stamp)
        die("out of memory");
    if (!launch_positions(g, L, nl, lo, hi, at, err, errlen))
        ok = 0;
#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), ok = 0)
#define ROOT(id) (bufs[id].alias_of >= 0 ? bufs[id].alias_of : (id))
#define ACT(r) (bufs[r].region == PLAN_REGION_ACTIVATIONS)
#define COVERS(r, a, z) (!ACT(r) || (bufs[r].lfirst <= (a) && (z) <= bufs[r].llast))
    for (int b = 0; b < nbufs && ok; b++) {
        const PlanBuf *x = &bufs[b];
        if (x->alias_of >= 0 ? x->lfirst != bufs[x->alias_of].lfirst || x->llast != bufs[x->alias_of].llast
                             : ACT(b) && (x->lfirst < 0 || x->llast < x->lfirst || x->llast >= nl))
            BAD("buffer %d (%s): launch-level lifetime [%d, %d] of %d launches%s", b, x->name ? x->name : "?",
                x->lfirst, x->llast, nl, x->alias_of >= 0 ? ", not its base's" : "");
    }
    /* every launch's buffers live at it */
    for (int j = 0; j < nl && ok; j++)
        for (int a = 0; a < L[j].nargs && ok; a++) {
            int b = L[j].args[a];
            const PlanArg *t = L[j].targs ? &L[j].targs[a] : NULL;
            if (b < -1 || b >= nbufs)
                BAD("launch %d: argument %d is buffer %d of %d", j, a, b, nbufs);
            else if (t && t->kind != PLAN_ARG_I32 && t->kind != PLAN_ARG_I64 && t->kind != PLAN_ARG_NORM && t->buf != b)
                BAD("launch %d: argument %d is a %s over buffer %d, but names buffer %d: the lifetimes follow the "
                    "latter", j, a, plan_arg_kind_name[t->kind], t->buf, b);
            else if (t && (t->kind == PLAN_ARG_I32 || t->kind == PLAN_ARG_I64 || t->kind == PLAN_ARG_NORM) && b != -1)
                BAD("launch %d: argument %d is a value, but names buffer %d", j, a, b);
            else if (b >= 0 && !COVERS(ROOT(b), j, j))
                BAD("launch %d (node %d, %s) names buffer %d (%s), which lives over launches %d..%d", j, L[j].node,
                    L[j].what ? L[j].what : "?", b, bufs[b].name ? bufs[b].name : "?", bufs[ROOT(b)].lfirst,
                    bufs[ROOT(b)].llast);
        }
    for (int i = 0; i < n && ok; i++) {
        const IrNode *node = g->nodes[i];
        int r = ROOT(i);
        for (int j = lo[i]; j >= 0 && j <= hi[i]; j++)
            for (int a = 0; a < L[j].nargs; a++)
                if (L[j].args[a] >= 0 && L[j].args[a] < nbufs)
                    stamp[ROOT(L[j].args[a])] = i + 1;
        /* a node's tensor to its node's last launch (from the first when none of them names it); an output to
         * the end */
        int from = stamp[r] == i + 1 ? NODE_HI(i) : NODE_LO(i);
        if (!COVERS(r, from, NODE_HI(i)) || (node->is_output && ACT(r) && bufs[r].llast != nl - 1))
            BAD("node %d (%s): its buffer lives over launches %d..%d, its node's are %d..%d of %d", i, node->name,
                bufs[r].lfirst, bufs[r].llast, NODE_LO(i), NODE_HI(i), nl);
        /* a source that the node's launches do not name, and that unread_srcs does not release: to the node's
         * end */
        for (int s = 0; s < node->nsrc && ok; s++) {
            int rs = ROOT(node->src[s]->id);
            if (UNREAD(i, s))
                continue;
            /* a source its launches read is live from its first launch on: the isolated kernel checks upload the
             * CPU's values into it before that launch (tests/codegen/emu/check.c, tests/gpu/run_plan.c) */
            if (lo[i] >= 0 && stamp[rs] == i + 1) {
                if (!COVERS(rs, lo[i], lo[i]))
                    BAD("node %d (%s) reads %s, whose buffer lives over launches %d..%d: not from the node's first "
                        "launch %d on", i, node->name, node->src[s]->name, bufs[rs].lfirst, bufs[rs].llast, lo[i]);
                continue;
            }
            if (!COVERS(rs, NODE_HI(i), NODE_HI(i)))
                BAD("node %d (%s) reads %s without a launch naming it; its buffer lives over launches %d..%d, the "
                    "node ends at launch %d", i, node->name, node->src[s]->name, bufs[rs].lfirst, bufs[rs].llast,
                    NODE_HI(i));
        }
    }
    /* kept for a later node: named by its launches or live to its end */
    for (int b = 0; b < nbufs && ok; b++) {
        int owner = b < n ? b : bufs[b].node, u = bufs[b].until;
        if (u > owner && u < n && !node_names(bufs, nbufs, L, lo, hi, u, ROOT(b)) &&
            !COVERS(ROOT(b), NODE_HI(u), NODE_HI(u)))
            BAD("buffer %d (%s) is kept until node %d, which ends at launch %d, but lives over launches %d..%d", b,
                bufs[b].name ? bufs[b].name : "?", u, NODE_HI(u), bufs[ROOT(b)].lfirst, bufs[ROOT(b)].llast);
    }
#undef COVERS
#undef ACT
#undef ROOT
#undef BAD
    free(lo);
    free(hi);
    free(at);
    free(stamp);
    return ok;
}

int plan_memory_check(const IrGraph *g, const PlanBuf *bufs, int nbufs, const PlanLaunch *launches, int nlaunches,
                      int64_t align, const PlanMemory *mem, char *err, size_t errlen)
{
    int n = g->nnodes;
#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), ok = 0)
    int ok = 1, bylaunch = launches && nlaunches > 0;
    if (nbufs < n)
        return BAD("%d buffers for %d nodes", nbufs, n), 0;
#define ROOT(id) (bufs[id].alias_of >= 0 ? bufs[id].alias_of : (id))
    for (int b = 0; b < nbufs && ok; b++) {
        const PlanBuf *x = &bufs[b];
        if (x->region < 0 || x->region >= PLAN_REGION_COUNT || x->bytes < 0)
            BAD("buffer %d (%s): region %d, %lld bytes", b, x->name ? x->name : "?", (int)x->region,
                (long long)x->bytes);
        else if (x->alias_of >= 0) {
            const PlanBuf *r = &bufs[x->alias_of];
            if (x->alias_of >= nbufs || r->alias_of >= 0)
                BAD("view %d lies in %d, itself a view or no buffer", b, x->alias_of);
            else if (x->region != r->region || x->offset != r->offset + x->alias_offset || x->alias_offset < 0 ||
                     x->alias_offset + x->bytes > r->bytes)
                BAD("view %d (%s): bytes [%lld, %lld) of the region, outside its base %d [%lld, %lld)", b,
                    x->name ? x->name : "?", (long long)x->offset, (long long)(x->offset + x->bytes), x->alias_of,
                    (long long)r->offset, (long long)(r->offset + r->bytes));
        } else if (x->offset < 0 || x->offset % align || x->offset + x->bytes > mem->region_bytes[x->region])
            BAD("buffer %d (%s): offset %lld (%lld bytes) unaligned or outside its region (%lld bytes)", b,
                x->name ? x->name : "?", (long long)x->offset, (long long)x->bytes,
                (long long)mem->region_bytes[x->region]);
        else if (x->region == PLAN_REGION_ACTIVATIONS && (x->first < 0 || x->last < x->first || x->last >= n))
            BAD("buffer %d (%s): lifetime [%d, %d]", b, x->name ? x->name : "?", x->first, x->last);
    }
    /* the lifetimes cover the uses: a node's buffer from the node on, to each of its users; an output's to
     * the end; a workspace's its node (to `until`) */
    for (int i = 0; i < n && ok; i++) {
        const IrNode *node = g->nodes[i];
        const PlanBuf *r = &bufs[ROOT(i)];
        if (r->region != PLAN_REGION_ACTIVATIONS)
            continue;
        if (r->first > i || r->last < i || (node->is_output && r->last != n - 1) ||
            (bufs[i].until > i && r->last < bufs[i].until))
            BAD("node %d (%s): its buffer lives [%d, %d]", i, node->name, r->first, r->last);
        for (int s = 0; s < node->nsrc && ok; s++) {
            const PlanBuf *rs = &bufs[ROOT(node->src[s]->id)];
            if (UNREAD(i, s))
                continue;
            if (rs->region == PLAN_REGION_ACTIVATIONS && rs->last < i)
                BAD("node %d (%s) reads %s, whose buffer lives [%d, %d]", i, node->name, node->src[s]->name,
                    rs->first, rs->last);
        }
    }
    for (int b = n; b < nbufs && ok; b++)
        if (bufs[b].kind == PLAN_BUF_WORKSPACE &&
            (bufs[b].first != bufs[b].node || bufs[b].last < bufs[b].node || bufs[b].last < bufs[b].until))
            BAD("workspace %d (%s) of node %d lives [%d, %d]", b, bufs[b].name ? bufs[b].name : "?", bufs[b].node,
                bufs[b].first, bufs[b].last);
    if (ok && bylaunch)
        ok = check_launch_lifetimes(g, bufs, nbufs, launches, nlaunches, err, errlen);
    /* no two buffers live at once share a byte (at one launch in a launch-level layout, else at one node) */
#define FIRST(b) (bylaunch ? (b)->lfirst : (b)->first)
#define LAST(b) (bylaunch ? (b)->llast : (b)->last)
    int *ids = malloc(sizeof(int) * ((size_t)nbufs + 1)), *open = malloc(sizeof(int) * ((size_t)nbufs + 1));
    const PlanBuf **sorted = malloc(sizeof *sorted * ((size_t)nbufs + 1));
    if (!ids || !open || !sorted)
        die("out of memory");
    int nid = 0, nopen = 0;
    for (int b = 0; b < nbufs; b++)
        if (bufs[b].alias_of < 0 && bufs[b].region == PLAN_REGION_ACTIVATIONS && bufs[b].bytes > 0)
            sorted[nid++] = &bufs[b];
    qsort(sorted, (size_t)nid, sizeof *sorted, by_offset);
    for (int k = 0; k < nid; k++)
        ids[k] = (int)(sorted[k] - bufs);
    free(sorted);
    for (int k = 0; k < nid && ok; k++) {
        const PlanBuf *x = &bufs[ids[k]];
        int keep = 0;
        for (int j = 0; j < nopen && ok; j++) {
            const PlanBuf *y = &bufs[open[j]];
            if (y->offset + y->bytes <= x->offset)
                continue;  /* ends before x (and every later buffer) starts */
            open[keep++] = open[j];
            if (FIRST(y) <= LAST(x) && FIRST(x) <= LAST(y))
                BAD("buffers %d (%s, %s %d..%d) and %d (%s, %s %d..%d) are live at once and share bytes "
                    "[%lld, %lld)", open[j], y->name ? y->name : "?", bylaunch ? "launches" : "nodes", FIRST(y),
                    LAST(y), ids[k], x->name ? x->name : "?", bylaunch ? "launches" : "nodes", FIRST(x), LAST(x),
                    (long long)x->offset,
                    (long long)(y->offset + y->bytes < x->offset + x->bytes ? y->offset + y->bytes
                                                                           : x->offset + x->bytes));
        }
        nopen = keep;
        open[nopen++] = ids[k];
    }
    free(ids);
    free(open);
#undef FIRST
#undef LAST
#undef ROOT
#undef BAD
    return ok;
}
