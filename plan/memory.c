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

/* node i's source s is not read by its launches (PlanBuf.unread_srcs): the edge keeps nothing alive */
#define UNREAD(i, s) ((s) < 64 && (bufs[i].unread_srcs >> (s) & 1))

/* One buffer of the activations region to place: its lifetime [first, last] (node positions, both
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

void plan_memory(const IrGraph *g, PlanBuf *bufs, int nbufs, int64_t align, PlanMemory *out)
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
    if (!plan_memory_check(g, bufs, nbufs, align, out, why, sizeof why))
        die("plan_memory: internal error: the layout breaks its rules: %s", why);
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
    /* held for the backward: live at the loss and after it (the loss itself, an output, counts: 4 bytes) */
    for (int b = 0; b < p->nbufs && g->loss; b++) {
        const PlanBuf *buf = &bufs[b];
        int at = g->loss->id;
        if (buf->alias_of >= 0 || buf->region != PLAN_REGION_ACTIVATIONS || buf->bytes <= 0 || buf->first > at ||
            buf->last <= at)
            continue;
        out->held += buf->bytes - (grad_bytes[b] < buf->bytes ? grad_bytes[b] : buf->bytes);
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

/* The layout's invariants (plan.h: plan_memory_check), for the tests: buffer ids sorted by offset, then a
 * sweep keeps the placed buffers that may still reach the next one's offset (those ending after it starts). */
static const PlanBuf *sort_bufs;
static int by_offset(const void *pa, const void *pb)
{
    const PlanBuf *a = &sort_bufs[*(const int *)pa], *b = &sort_bufs[*(const int *)pb];
    if (a->offset != b->offset)
        return a->offset < b->offset ? -1 : 1;
    return *(const int *)pa - *(const int *)pb;
}

int plan_memory_check(const IrGraph *g, const PlanBuf *bufs, int nbufs, int64_t align, const PlanMemory *mem,
                      char *err, size_t errlen)
{
    int n = g->nnodes;
#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), ok = 0)
    int ok = 1;
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
    /* no two buffers live at once share a byte */
    int *ids = malloc(sizeof(int) * ((size_t)nbufs + 1)), *open = malloc(sizeof(int) * ((size_t)nbufs + 1));
    if (!ids || !open)
        die("out of memory");
    int nid = 0, nopen = 0;
    for (int b = 0; b < nbufs; b++)
        if (bufs[b].alias_of < 0 && bufs[b].region == PLAN_REGION_ACTIVATIONS && bufs[b].bytes > 0)
            ids[nid++] = b;
    sort_bufs = bufs;
    qsort(ids, (size_t)nid, sizeof *ids, by_offset);
    for (int k = 0; k < nid && ok; k++) {
        const PlanBuf *x = &bufs[ids[k]];
        int keep = 0;
        for (int j = 0; j < nopen && ok; j++) {
            const PlanBuf *y = &bufs[open[j]];
            if (y->offset + y->bytes <= x->offset)
                continue;  /* ends before x (and every later buffer) starts */
            open[keep++] = open[j];
            if (y->first <= x->last && x->first <= y->last)
                BAD("buffers %d (%s, nodes %d..%d) and %d (%s, nodes %d..%d) are live at once and share bytes "
                    "[%lld, %lld)", open[j], y->name ? y->name : "?", y->first, y->last, ids[k],
                    x->name ? x->name : "?", x->first, x->last, (long long)x->offset,
                    (long long)(y->offset + y->bytes < x->offset + x->bytes ? y->offset + y->bytes
                                                                           : x->offset + x->bytes));
        }
        nopen = keep;
        open[nopen++] = ids[k];
    }
    free(ids);
    free(open);
#undef ROOT
#undef BAD
    return ok;
}
