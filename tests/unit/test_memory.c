/* test_memory.c - the memory planner (plan/memory.c, decisions 39 and 65) on every model the repository has:
 *   - plan_memory_check on each plan's tensor table (the GPU layout, lifetimes in launch positions: alignment,
 *     views inside their base, lifetimes covering the uses and the launches, no two buffers live at one launch
 *     sharing a byte), with the reference and the fast kernels, mxfp8 and ep 2, on the same table laid out at
 *     node level, and on the CPU backend's layout of the same graph; the fast kernels' tensor maps inside their
 *     buffers (buffers now lie edge to edge);
 *   - the launch-level planner on a made-up launch list (workspaces of one node that must share bytes);
 *   - the check itself fails on deliberately broken layouts (two live buffers moved onto each other, a view
 *     past its base, an unaligned offset, a lifetime cut short in nodes and in launches);
 *   - the layout against the live bytes at the peak (plan_memory_breakdown): within 2% on four Mixtral-8x7B
 *     layers at 4 x 4096 and 16 x 4096 tokens (tests/gpu/nofit.moe), and the 4 x 4096 one fits an H200;
 *   - the same layout from the same table twice (deterministic), and the planner's time on the largest
 *     model (models/mixtral_8x7b.moe, thousands of buffers).
 * Run from the repository root. */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../driver/build.h"
#include "../../driver/compile.h"
#include "../../plan/plan.h"
#include "check.h"

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* NULL (quietly) when the file does not compile: tests/errors' models, plugin models. prec: 0 the model's,
 * else the precision given as --precision would */
static Plan *make_plan_prec(const char *path, int prec, IrPrecision precision, int64_t ep, int fast)
{
    Compilation c;
    memset(&c, 0, sizeof c);
    FILE *quiet = fopen("/dev/null", "w");
    Plan *p = NULL;
    if (compilation_read(&c, path, quiet)) {
        PassCtx ctx;
        pass_ctx_init(&ctx, NULL);
        c.opts.ep = ep;
        c.kernels = fast ? PLAN_KERNELS_FAST : PLAN_KERNELS_REFERENCE;
        if (prec) {
            c.opts.has_precision = 1;
            c.opts.precision = precision;
        }
        char err[1024];
        if (compilation_run(&c, path, c.text, c.len, quiet, &ctx) == 0)
            p = driver_make_plan(&c, path, NULL, 0, prec, prec ? precision : IR_PREC_BF16, ep, err, sizeof err);
    }
    compilation_free(&c);
    fclose(quiet);
    return p;
}

static void check_plan(const char *what, const Plan *p);

static Plan *make_plan(const char *path, int mxfp8, int64_t ep, int fast)
{
    return make_plan_prec(path, mxfp8, IR_PREC_MXFP8, ep, fast);
}

/* --precision fp8-block --kernels fast (decision 44): each expert weight [E, N, K] has one e4m3 working copy in
 * the params region (its 128x128 tiles, the transposed tiles and both scale arrays: 2 N K E + 2 E N K / 16384
 * bytes) and no workspace holds a weight's codes (the per-step quantised weights of decision 38 are gone);
 * prints what moved: the params region grows by the copies, the activations lose the quantised weights.
 * --precision mxfp8 --kernels fast (decision 55) likewise, its copy the 1x32 and the transposed 32x1 codes with
 * their E8M0 scales: 2 N K E + 2 E N K / 32 bytes. */
static void check_fp8b(const char *path, IrPrecision prec)
{
    const int mx = prec == IR_PREC_MXFP8;
    const char *pn = mx ? "mxfp8" : "fp8-block";
    Plan *p = make_plan_prec(path, 1, prec, 0, 1);
    CHECK(p != NULL, "%s compiles with --precision %s --kernels fast", path, pn);
    if (!p)
        return;
    check_plan(path, p);
    const IrGraph *g = p->graph;
    int copies = 0, bad = 0, weight_ws = 0;
    int64_t copy_bytes = 0, weights = 0;
    for (int b = g->nnodes; b < p->nbufs; b++) {
        const PlanBuf *pb = &p->bufs[b];
        if (pb->kind == PLAN_BUF_COPY && pb->storage == PLAN_E4M3) {
            PlanFp8Copy fc;
            copies++;
            copy_bytes += pb->bytes;
            bad += !plan_fp8b_copy_layout(g, g->nodes[pb->node], &fc) || pb->bytes != fc.bytes ||
                   pb->region != PLAN_REGION_PARAMS || fc.mx != mx;
            weights += fc.e * fc.n * fc.k;
        }
        if (pb->kind == PLAN_BUF_WORKSPACE && pb->storage == PLAN_E4M3)
            for (int q = 0; q < g->nparams; q++)
                weight_ws += g->params[q]->rank == 3 && pb->bytes == ir_numel(g->params[q]);
    }
    int mlps = 0;
    for (int i = 0; i < g->nnodes; i++)
        mlps += g->nodes[i]->op == IR_OP_GROUPED_MLP;
    CHECK(copies == 2 * mlps && !bad && copy_bytes == 2 * weights + 2 * (weights / (mx ? 32 : 16384)),
          "%s (%s): %d e4m3 weight copies (%d grouped_mlp), %lld bytes for %lld expert weights, %d misplaced", path,
          pn, copies, mlps, (long long)copy_bytes, (long long)weights, bad);
    CHECK(weight_ws == 0, "%s (%s): %d E4M3 workspaces the size of an expert weight (the per-step quantised weights)",
          path, pn, weight_ws);
    /* the backward reads the codes its forward kept, not xs (its source 1): xs is released before it runs
     * (decision 63; it stayed live across the whole backward) */
    int bwds = 0, xs_early = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *u = g->nodes[i];
        if (u->op != IR_OP_GROUPED_MLP_BWD)
            continue;
        int r = p->bufs[u->src[1]->id].alias_of >= 0 ? p->bufs[u->src[1]->id].alias_of : u->src[1]->id;
        bwds++;
        xs_early += (p->bufs[i].unread_srcs >> 1 & 1) && p->bufs[r].last < i;
    }
    CHECK(bwds > 0 && xs_early == bwds, "%s (%s): %d of %d grouped_mlp_bwd nodes do not keep their xs alive", path, pn,
          xs_early, bwds);
    PlanMemoryBreakdown m;
    plan_memory_breakdown(p, &m);
    printf("  %-36s %s: params region %.3f GiB (masters %.3f, e4m3 copies %.3f), activations %.3f GiB (without "
           "the parameter gradients at the peak: %.3f)\n",
           path, pn, (double)(m.masters + m.copies) / GIB, m.masters / GIB, m.copies / GIB, m.acts_region / GIB,
           (double)(m.peak_acts + m.peak_ws) / GIB);
    plan_free(p);
}

/* the tensor maps of the fast kernels (TMA loads and stores, bounded by the map, not by the buffer) lie
 * inside their buffers: with buffers packed edge to edge, a map past its buffer's end would reach another's */
static void check_tmaps(const char *what, const Plan *p)
{
    for (int l = 0; l < p->nlaunches; l++) {
        const PlanLaunch *L = &p->launches[l];
        for (int a = 0; a < L->nargs && L->targs; a++) {
            const PlanArg *t = &L->targs[a];
            if (t->kind != PLAN_ARG_TMAP && t->kind != PLAN_ARG_TMAP_F32 && t->kind != PLAN_ARG_TMAP_U8)
                continue;
            int64_t elem = t->kind == PLAN_ARG_TMAP ? 2 : t->kind == PLAN_ARG_TMAP_U8 ? 1 : 4;
            int64_t need = (t->offset + t->rows * t->cols) * elem;
            CHECK(t->buf >= 0 && t->buf < p->nbufs && need <= p->bufs[t->buf].bytes,
                  "%s: launch %d (%s) maps %lld x %lld from element %lld of buffer %d (%lld bytes)", what, l,
                  L->what ? L->what : "?", (long long)t->rows, (long long)t->cols, (long long)t->offset, t->buf,
                  t->buf >= 0 && t->buf < p->nbufs ? (long long)p->bufs[t->buf].bytes : -1LL);
        }
    }
}

/* every buffer a launch names (a pointer or a tensor map; a view stands for the buffer it lies in) is alive at
 * the launch's node and at the launch itself (the GPU's lifetimes are in launches, decision 65): plan_memory_check
 * covers the graph's uses, this the kernels' (a fast kernel reads workspaces of another node: a combine the
 * forward's padded rows and offsets). A checkpointed plan's combine once read offsets its forward had not kept,
 * an illegal address on the H200. */
static void check_launch_lifetimes(const char *what, const Plan *p)
{
    for (int l = 0; l < p->nlaunches; l++) {
        const PlanLaunch *L = &p->launches[l];
        for (int a = 0; a < L->nargs; a++) {
            int b = L->targs ? L->targs[a].buf : L->args[a];
            if (b < 0 || b >= p->nbufs)
                continue;
            const PlanBuf *B = &p->bufs[b];
            if (B->kind == PLAN_BUF_VIEW && B->alias_of >= 0)
                B = &p->bufs[B->alias_of];
            if (B->region != PLAN_REGION_ACTIVATIONS)
                continue;
            CHECK(B->first <= L->node && L->node <= B->last,
                  "%s: launch %d (%s, node %d) names %s, alive only over nodes %d..%d", what, l,
                  L->what ? L->what : "?", L->node, B->name, B->first, B->last);
            CHECK(B->lfirst <= l && l <= B->llast, "%s: launch %d (%s) names %s, alive only over launches %d..%d",
                  what, l, L->what ? L->what : "?", B->name, B->lfirst, B->llast);
        }
    }
}

/* the plan's own (GPU) layout, then the table laid out again (same layout: deterministic), then the CPU
 * backend's layout of its graph (runtime/cpu/cpu.c: every node's buffer, 4-byte elements, 64-byte aligned) */
static void check_plan(const char *what, const Plan *p)
{
    char err[512];
    const IrGraph *g = p->graph;
    if (p->bufs) {
        CHECK(plan_memory_check(g, p->bufs, p->nbufs, p->launches, p->nlaunches, 256, &p->memory, err, sizeof err),
              "%s: %s", what, err);
        check_tmaps(what, p);
        check_launch_lifetimes(what, p);
        PlanBuf *again = malloc(sizeof *again * ((size_t)p->nbufs + 1));
        memcpy(again, p->bufs, sizeof *again * (size_t)p->nbufs);
        PlanMemory m;
        plan_memory_again(p, again, &m);
        int same = m.region_bytes[PLAN_REGION_ACTIVATIONS] == p->memory.region_bytes[PLAN_REGION_ACTIVATIONS];
        for (int b = 0; b < p->nbufs && same; b++)
            same = again[b].offset == p->bufs[b].offset && again[b].first == p->bufs[b].first &&
                   again[b].last == p->bufs[b].last && again[b].lfirst == p->bufs[b].lfirst &&
                   again[b].llast == p->bufs[b].llast;
        CHECK(same, "%s: the same table laid out twice differs", what);
        /* the node-level layout of the same table (the GPU's before decision 65) keeps its own rules */
        memcpy(again, p->bufs, sizeof *again * (size_t)p->nbufs);
        plan_memory(g, again, p->nbufs, 256, &m);
        CHECK(plan_memory_check(g, again, p->nbufs, NULL, 0, 256, &m, err, sizeof err), "%s (node-level): %s", what,
              err);
        free(again);
        PlanMemoryBreakdown br;
        plan_memory_breakdown(p, &br);
        CHECK(br.peak_live <= br.acts_region, "%s: region %lld below the live peak %lld", what,
              (long long)br.acts_region, (long long)br.peak_live);
    }
    int n = g->nnodes;
    PlanBuf *cb = calloc((size_t)n + 1, sizeof *cb);
    for (int i = 0; i < n; i++)
        cb[i] = (PlanBuf){.node = i, .kind = PLAN_BUF_TENSOR, .storage = PLAN_F32, .bytes = 4 * ir_numel(g->nodes[i]),
                          .alias_of = -1, .until = -1};
    PlanMemory cm;
    plan_memory(g, cb, n, 64, &cm);
    CHECK(plan_memory_check(g, cb, n, NULL, 0, 64, &cm, err, sizeof err), "%s (the CPU layout): %s", what, err);
    CHECK(cb[0].lfirst == -1 && cb[n - 1].llast == -1, "%s (the CPU layout): no launch-level lifetimes", what);
    free(cb);
}

/* the check fails on broken layouts of mixtral_tiny's table */
static void test_check_fails(const Plan *p)
{
    char err[512];
    const IrGraph *g = p->graph;
    int nb = p->nbufs;
    PlanBuf *t = malloc(sizeof *t * ((size_t)nb + 1));
    const PlanLaunch *L = p->launches;
    int nl = p->nlaunches;
    /* two activations buffers live at one launch (a node and a source its launches read) moved onto each other */
    int x = -1, y = -1;
    for (int i = 0; i < g->nnodes && x < 0; i++) {
        const IrNode *node = g->nodes[i];
        if (p->bufs[i].alias_of >= 0 || p->bufs[i].region != PLAN_REGION_ACTIVATIONS || !p->bufs[i].bytes)
            continue;
        for (int s = 0; s < node->nsrc && x < 0; s++) {
            int r = node->src[s]->id;
            if (p->bufs[r].alias_of < 0 && p->bufs[r].region == PLAN_REGION_ACTIVATIONS && p->bufs[r].bytes &&
                p->bufs[r].lfirst <= p->bufs[i].llast && p->bufs[i].lfirst <= p->bufs[r].llast &&
                p->bufs[r].llast > p->bufs[r].lfirst)
                x = i, y = r;
        }
    }
    CHECK(x >= 0, "mixtral_tiny has a node reading an activations buffer");
    if (x >= 0) {
        memcpy(t, p->bufs, sizeof *t * (size_t)nb);
        CHECK(plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err), "the copy passes: %s", err);
        t[x].offset = t[y].offset;
        for (int b = 0; b < nb; b++)
            if (t[b].alias_of == x)
                t[b].offset = t[x].offset + t[b].alias_offset;
        CHECK(!plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err) && strstr(err, "share bytes"),
              "a node's buffer moved onto its source's: %s", err);
        /* a lifetime cut short: the source released before its reader (node-level, then launch-level) */
        memcpy(t, p->bufs, sizeof *t * (size_t)nb);
        t[y].last = t[y].first;
        CHECK(!plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err), "a lifetime cut short: %s", err);
        memcpy(t, p->bufs, sizeof *t * (size_t)nb);
        t[y].llast = t[y].lfirst;
        for (int b = 0; b < nb; b++)
            if (t[b].alias_of == y)
                t[b].llast = t[y].llast;
        CHECK(!plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err) && strstr(err, "names buffer"),
              "a launch-level lifetime cut short: %s", err);
        /* an unaligned offset */
        memcpy(t, p->bufs, sizeof *t * (size_t)nb);
        t[x].offset += 64;
        for (int b = 0; b < nb; b++)
            if (t[b].alias_of == x)
                t[b].offset += 64;
        CHECK(!plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err), "an offset off by 64: %s", err);
    }
    /* a view past its base */
    int v = -1;
    for (int b = 0; b < nb && v < 0; b++)
        if (p->bufs[b].alias_of >= 0)
            v = b;
    if (v >= 0) {
        memcpy(t, p->bufs, sizeof *t * (size_t)nb);
        t[v].alias_offset = t[t[v].alias_of].bytes;
        t[v].offset = t[t[v].alias_of].offset + t[v].alias_offset;
        CHECK(!plan_memory_check(g, t, nb, L, nl, 256, &p->memory, err, sizeof err) && strstr(err, "outside its base"),
              "a view moved past its base: %s", err);
    }
    /* a region too small for its last buffer */
    PlanMemory small = p->memory;
    small.region_bytes[PLAN_REGION_ACTIVATIONS] -= 256;
    CHECK(!plan_memory_check(g, p->bufs, nb, L, nl, 256, &small, err, sizeof err), "a region 256 bytes short: %s", err);
    free(t);
}

/* An edge that its node's launches do not read (PlanBuf.unread_srcs) keeps nothing alive: on mixtral_tiny's graph
 * (the CPU backend's table, no codegen), a source x with two readers u1 < u2 (not views, x no output): u2's edge
 * marked unread moves x's last use back to u1 (or earlier), the layout check passes, and the same table with
 * the bit cleared again fails it (u2 would read a released buffer); u1's edge marked instead leaves x live to
 * u2 (a reader that reads keeps it); bits past a node's sources are an internal error (not tested: die) */
static void test_unread_edge(const Plan *p)
{
    const IrGraph *g = p->graph;
    int n = g->nnodes, x = -1, u1 = -1, u2 = -1, s1 = -1, s2 = -1;
    for (int c = 0; c < n && x < 0; c++) {
        const IrNode *cand = g->nodes[c];
        if (cand->is_output || cand->op == IR_OP_PARAM || cand->op == IR_OP_INPUT || cand->op == IR_OP_VIEW)
            continue;
        int a = -1, b = -1, sa = -1, sb = -1, users = 0;
        for (int i = c + 1; i < n; i++) {
            const IrNode *u = g->nodes[i];
            for (int s = 0; s < u->nsrc; s++)
                if (u->src[s] == cand) {
                    /* a view, or a reader naming x twice: not this test's case */
                    users += u->op == IR_OP_VIEW || (i == a || i == b) ? 99 : 1;
                    if (a < 0)
                        a = i, sa = s;
                    else
                        b = i, sb = s;
                }
        }
        if (users == 2 && b > a + 1)
            x = c, u1 = a, u2 = b, s1 = sa, s2 = sb;
    }
    CHECK(x >= 0, "mixtral_tiny has a tensor with two readers");
    if (x < 0)
        return;
    PlanBuf *t = calloc((size_t)n + 1, sizeof *t);
    PlanMemory m;
    char err[512];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < n; i++)
            t[i] = (PlanBuf){.node = i, .kind = PLAN_BUF_TENSOR, .storage = PLAN_F32,
                             .bytes = 4 * ir_numel(g->nodes[i]), .alias_of = -1, .until = -1};
        if (k == 1)
            t[u2].unread_srcs = (uint64_t)1 << s2;
        if (k == 2)
            t[u1].unread_srcs = (uint64_t)1 << s1;
        plan_memory(g, t, n, 64, &m);
        int ok = plan_memory_check(g, t, n, NULL, 0, 64, &m, err, sizeof err);
        CHECK(ok, "unread edge case %d: the layout passes its check: %s", k, err);
        if (k == 0 || k == 2)
            CHECK(t[x].last == u2, "%s read by %s (%s): lives to %d, not %d", g->nodes[x]->name, g->nodes[u2]->name,
                  k ? "its other reader's edge unread" : "every edge read", t[x].last, u2);
        if (k == 1) {
            printf("  unread edge: %s (node %d) read by %s (%d) and %s (%d): with the second edge unread it lives "
                   "to %d\n", g->nodes[x]->name, x, g->nodes[u1]->name, u1, g->nodes[u2]->name, u2, t[x].last);
            CHECK(t[x].last >= u1 && t[x].last < u2, "%s: %s's edge unread: lives to %d (its other reader %d), not "
                  "to %d", g->nodes[x]->name, g->nodes[u2]->name, t[x].last, u1, u2);
            t[u2].unread_srcs = 0;
            CHECK(!plan_memory_check(g, t, n, NULL, 0, 64, &m, err, sizeof err) && strstr(err, "reads"),
                  "the same lifetimes with the edge read again fail the check: %s", err);
        }
    }
    free(t);
}

/* The launch-level planner (plan_memory_launches, decision 65) on a made-up launch list over mixtral_tiny's graph
 * (the CPU backend's table: one f32 buffer per node): every node that is no leaf one launch naming its sources and
 * itself, except a node k with three launches and three workspaces of the same size, larger than any tensor:
 * k0 names w1, k1 names w1 and w2, k2 names w2, w3 and k's own buffer. w1 lives over k0..k1, w2 over k1..k2, w3 at
 * k2, k's buffer at k2 only (its first launch does not name it), so w3 takes w1's bytes: a node-level layout
 * keeps all three apart. A workspace kept `until` a later node m (two launches) that its first launch names lives
 * to that launch; one kept for m that no launch of m names, to m's last launch; the loss to the last launch. The
 * check passes, then fails with w2 moved onto w1 (both live at k1) and with w1's lifetime cut to k0 (k1 names it). */
static void test_launch_level(const Plan *p)
{
    const IrGraph *g = p->graph;
    int n = g->nnodes, k = -1, m = -1;
    int64_t big = 0;
    for (int i = 0; i < n; i++)
        if (4 * ir_numel(g->nodes[i]) > big)
            big = 4 * ir_numel(g->nodes[i]);
    big = (big + 4096) / 256 * 256;
    /* k: a node with a source that is no leaf; m: a later node with a source, not the loss */
    for (int i = 0; i < n && k < 0; i++) {
        const IrNode *x = g->nodes[i];
        for (int s = 0; s < x->nsrc && k < 0; s++)
            if (x->src[s]->op != IR_OP_PARAM && x->src[s]->op != IR_OP_INPUT && !x->is_output)
                k = i;
    }
    for (int i = k + 2; i < n && m < 0; i++)
        if (g->nodes[i]->nsrc > 0 && !g->nodes[i]->is_output && g->nodes[i]->op != IR_OP_PARAM &&
            g->nodes[i]->op != IR_OP_INPUT)
            m = i;
    CHECK(k >= 0 && m > k && g->loss, "mixtral_tiny: nodes for the launch-level case (%d, %d)", k, m);
    if (k < 0 || m <= k || !g->loss)
        return;
    int nb = n + 5, w1 = n, w2 = n + 1, w3 = n + 2, wu = n + 3, wn = n + 4;
    PlanBuf *t = calloc((size_t)nb + 1, sizeof *t);
    for (int i = 0; i < n; i++)
        t[i] = (PlanBuf){.node = i, .kind = PLAN_BUF_TENSOR, .storage = PLAN_F32, .bytes = 4 * ir_numel(g->nodes[i]),
                         .alias_of = -1, .until = -1};
    const char *names[5] = {"w1", "w2", "w3", "kept_named", "kept_unnamed"};
    for (int w = 0; w < 5; w++)
        t[n + w] = (PlanBuf){.name = (char *)names[w], .node = k, .kind = PLAN_BUF_WORKSPACE,
                             .storage = PLAN_F32, .bytes = w < 3 ? big : 1024, .alias_of = -1,
                             .until = w < 3 ? -1 : m};
    PlanLaunch *L = calloc((size_t)2 * n + 8, sizeof *L);
    int *args = calloc((size_t)(n + 8) * 24, sizeof(int)), na = 0, nl = 0, k0 = -1, m0 = -1;
    for (int i = 0; i < n; i++) {
        const IrNode *x = g->nodes[i];
        if (x->op == IR_OP_PARAM || x->op == IR_OP_INPUT)
            continue;
        int parts = i == k ? 3 : i == m ? 2 : 1;
        if (i == k)
            k0 = nl;
        if (i == m)
            m0 = nl;
        for (int q = 0; q < parts; q++) {
            PlanLaunch *l = &L[nl++];
            l->node = i;
            l->args = args + na;
            l->what = "made up";
            int last = q == parts - 1;
            /* node k's sources go to its first launch, every other node's to its last */
            for (int s = 0; s < x->nsrc && s < 16 && (i == k ? q == 0 : last); s++)
                l->args[l->nargs++] = x->src[s]->id;
            if (last)
                l->args[l->nargs++] = i;
            if (i == k && q <= 1)
                l->args[l->nargs++] = w1;
            if (i == k && q >= 1)
                l->args[l->nargs++] = w2;
            if (i == k && q == 2)
                l->args[l->nargs++] = w3;
            if (i == k && q == 0) {
                l->args[l->nargs++] = wu;
                l->args[l->nargs++] = wn;
            }
            if (i == m && q == 0)
                l->args[l->nargs++] = wu;
            na += l->nargs;
        }
    }
    PlanMemory mem;
    char err[512];
    plan_memory_launches(g, t, nb, L, nl, 256, &mem);
    int lossl = -1;
    for (int j = 0; j < nl; j++)
        if (L[j].node == g->loss->id)
            lossl = j;
    printf("  launch-level case: node %s (launches %d..%d): w1 %d..%d, w2 %d..%d, w3 %d..%d at offsets %lld, %lld, "
           "%lld; its buffer %d..%d; kept for %s: %d..%d named, %d..%d not\n", g->nodes[k]->name, k0, k0 + 2,
           t[w1].lfirst, t[w1].llast, t[w2].lfirst, t[w2].llast, t[w3].lfirst, t[w3].llast, (long long)t[w1].offset,
           (long long)t[w2].offset, (long long)t[w3].offset, t[k].lfirst, t[k].llast, g->nodes[m]->name, t[wu].lfirst,
           t[wu].llast, t[wn].lfirst, t[wn].llast);
    CHECK(t[w1].lfirst == k0 && t[w1].llast == k0 + 1 && t[w2].lfirst == k0 + 1 && t[w2].llast == k0 + 2 &&
              t[w3].lfirst == k0 + 2 && t[w3].llast == k0 + 2,
          "the workspaces live from the first launch naming them to the last");
    CHECK(t[w3].offset == t[w1].offset && t[w2].offset != t[w1].offset, "w3 takes w1's bytes, w2 its own");
    CHECK(t[k].lfirst == k0 + 2 && t[k].first == k, "the node's buffer from the launch that names it (node %d)",
          t[k].first);
    CHECK(t[wu].llast == m0 && t[wn].llast == m0 + 1 && t[wu].last == m && t[wn].last == m,
          "kept for a later node: to its launch naming it, else to its end");
    CHECK(t[g->loss->id].llast == nl - 1 && lossl >= 0, "the loss lives to the last launch");
    CHECK(plan_memory_check(g, t, nb, L, nl, 256, &mem, err, sizeof err), "the launch-level layout passes: %s", err);
    /* the same table at node level keeps the three apart */
    PlanBuf *u = malloc(sizeof *u * ((size_t)nb + 1));
    memcpy(u, t, sizeof *u * (size_t)nb);
    PlanMemory nm;
    plan_memory(g, u, nb, 256, &nm);
    CHECK(u[w3].offset != u[w1].offset && nm.region_bytes[PLAN_REGION_ACTIVATIONS] >
                                              mem.region_bytes[PLAN_REGION_ACTIVATIONS],
          "node-level: w1, w2, w3 apart, %lld bytes against %lld", (long long)nm.region_bytes[PLAN_REGION_ACTIVATIONS],
          (long long)mem.region_bytes[PLAN_REGION_ACTIVATIONS]);
    /* and the node-level check does not see launches: the launch-level layout fails it (w1 and w3 share bytes
     * at node k) */
    CHECK(!plan_memory_check(g, t, nb, NULL, 0, 256, &mem, err, sizeof err) && strstr(err, "share bytes"),
          "the launch-level layout checked at node level: %s", err);
    memcpy(u, t, sizeof *u * (size_t)nb);
    u[w2].offset = u[w1].offset;
    CHECK(!plan_memory_check(g, u, nb, L, nl, 256, &mem, err, sizeof err) && strstr(err, "share bytes"),
          "w2 moved onto w1: %s", err);
    memcpy(u, t, sizeof *u * (size_t)nb);
    u[w1].llast = k0;
    CHECK(!plan_memory_check(g, u, nb, L, nl, 256, &mem, err, sizeof err) && strstr(err, "names buffer"),
          "w1 cut to its first launch: %s", err);
    memcpy(u, t, sizeof *u * (size_t)nb);
    u[wn].llast = m0;
    CHECK(!plan_memory_check(g, u, nb, L, nl, 256, &mem, err, sizeof err) && strstr(err, "kept until"),
          "kept for a node that does not name it, cut before its end: %s", err);
    memcpy(u, t, sizeof *u * (size_t)nb);
    u[g->loss->id].llast = lossl;
    CHECK(lossl == nl - 1 || (!plan_memory_check(g, u, nb, L, nl, 256, &mem, err, sizeof err) && strstr(err, "node")),
          "the loss released before the last launch: %s", err);
    free(u);
    free(t);
    free(L);
    free(args);
}

static void slack(const char *what, const Plan *p, double within, double fits_gib)
{
    PlanMemoryBreakdown b;
    plan_memory_breakdown(p, &b);
    double r = (double)b.acts_region / (double)b.peak_live;
    printf("  %-36s region %9.3f GiB, live peak %9.3f GiB (+%.2f%%), %d buffers\n", what, b.acts_region / GIB,
           b.peak_live / GIB, 100 * (r - 1), p->memory.nblocks);
    CHECK(r <= 1 + within, "%s: region %lld is %.2f%% above the live peak %lld", what, (long long)b.acts_region,
          100 * (r - 1), (long long)b.peak_live);
    if (fits_gib > 0) {
        double state = (double)b.masters + (double)b.copies + 8.0 * (double)p->nparams_total;
        CHECK(state + (double)b.acts_region < fits_gib * GIB, "%s: %.2f GiB do not fit %.1f GiB", what,
              (state + (double)b.acts_region) / GIB, fits_gib);
    }
}

int main(void)
{
    /* every model of the repository that compiles, with the reference kernels; the fast ones and mxfp8 and
     * ep 2 where they compile */
    const char *pats[] = {"models/*.moe", "models/variants/*.moe", "tests/*/*.moe", "bench/*.moe", "bench/*/*.moe"};
    int compiled = 0, seen = 0;
    for (size_t k = 0; k < sizeof pats / sizeof *pats; k++) {
        glob_t gl;
        if (glob(pats[k], 0, NULL, &gl) != 0)
            continue;
        for (size_t f = 0; f < gl.gl_pathc; f++) {
            const char *path = gl.gl_pathv[f];
            seen++;
            static const struct { int mxfp8, fast; int64_t ep; const char *name; } var[] = {
                {0, 0, 0, "reference"}, {0, 1, 0, "fast"}, {1, 0, 0, "mxfp8"}, {0, 0, 2, "ep 2"}};
            for (size_t v = 0; v < sizeof var / sizeof *var; v++) {
                Plan *p = make_plan(path, var[v].mxfp8, var[v].ep, var[v].fast);
                if (!p)
                    continue;
                char what[512];
                snprintf(what, sizeof what, "%s (%s)", path, var[v].name);
                check_plan(what, p);
                compiled += v == 0;
                plan_free(p);
            }
        }
        globfree(&gl);
    }
    printf("  %d of %d model files compile and were checked\n", compiled, seen);
    CHECK(compiled >= 20, "%d model files compiled", compiled);

    Plan *p = make_plan("models/mixtral_tiny.moe", 0, 0, 0);
    CHECK(p != NULL, "mixtral_tiny compiles");
    if (p) {
        test_check_fails(p);
        test_unread_edge(p);
        test_launch_level(p);
        plan_free(p);
    }

    /* four Mixtral-8x7B layers (tests/gpu/nofit.moe: batch 16 x 4096), and at 4 x 4096 */
    p = make_plan("tests/gpu/nofit.moe", 0, 0, 0);
    CHECK(p != NULL, "nofit compiles");
    if (p) {
        slack("4 Mixtral layers, 16 x 4096", p, 0.02, 0);
        char err[1024];
        Plan *q = driver_replan(p, 4, 0, 1, err, sizeof err);
        CHECK(q != NULL, "nofit at batch 4: %s", q ? "" : err);
        if (q) {
            check_plan("nofit at batch 4", q);
            slack("4 Mixtral layers, 4 x 4096", q, 0.02, 139.0);
            plan_free(q);
        }
        plan_free(p);
    }
    p = make_plan("tests/gpu/nofit.moe", 0, 0, 1);
    if (p) {
        char err[1024];
        Plan *q = driver_replan(p, 4, 0, 1, err, sizeof err);
        if (q) {
            check_plan("nofit at batch 4, fast", q);
            slack("4 Mixtral layers, 4 x 4096, fast", q, 0.02, 139.0);
            plan_free(q);
        }
        plan_free(p);
    }

    check_fp8b("tests/gpu/fast_mlp_fp8.moe", IR_PREC_FP8_BLOCK);
    check_fp8b("bench/models/layer/layer_mixtral.moe", IR_PREC_FP8_BLOCK);
    check_fp8b("tests/gpu/fast_mlp_fp8.moe", IR_PREC_MXFP8);
    check_fp8b("bench/models/layer/layer_mixtral.moe", IR_PREC_MXFP8);

    /* activation checkpointing per decoder layer (decision 43): the same four layers at 16 x 4096 (bf16, fast
     * kernels) have a lower live peak with `checkpoint blocks` (tests/gpu/mixtral4_ckpt.moe) and fit an H200,
     * which they do not without it (tests/gpu/mixtral4.moe re-planned at batch 16) */
    p = make_plan("tests/gpu/mixtral4.moe", 0, 0, 1);
    Plan *ck = make_plan("tests/gpu/mixtral4_ckpt.moe", 0, 0, 1);
    CHECK(p && ck, "mixtral4 and mixtral4_ckpt compile with the fast kernels");
    if (p && ck) {
        char err[1024];
        Plan *q = driver_replan(p, 16, 0, 1, err, sizeof err);
        CHECK(q != NULL, "mixtral4 at batch 16: %s", q ? "" : err);
        if (q) {
            PlanMemoryBreakdown a, b;
            plan_memory_breakdown(q, &a);
            plan_memory_breakdown(ck, &b);
            double state = (double)a.masters + (double)a.copies + 8.0 * (double)q->nparams_total;
            printf("  4 Mixtral layers, 16 x 4096, fast: live peak %.2f GiB, checkpointed %.2f GiB; parameter "
                   "state %.2f GiB\n", a.peak_live / GIB, b.peak_live / GIB, state / GIB);
            CHECK(b.peak_live < 0.85 * a.peak_live, "checkpointing: live peak %lld, not below 0.85 x %lld",
                  (long long)b.peak_live, (long long)a.peak_live);
            CHECK(state + (double)a.acts_region > 139.0 * GIB, "without checkpointing 16 x 4096 fits: %.2f GiB",
                  (state + (double)a.acts_region) / GIB);
            check_plan("mixtral4_ckpt", ck);
            slack("4 Mixtral layers, 16 x 4096, checkpointed", ck, 0.02, 139.0);
            plan_free(q);
        }
    }
    if (p)
        plan_free(p);
    if (ck)
        plan_free(ck);

    /* the planner's time on the largest model: 32 Mixtral layers, one rank of ep 8 */
    p = make_plan("models/mixtral_8x7b.moe", 0, 0, 0);
    CHECK(p != NULL && p->bufs, "mixtral_8x7b compiles with its GPU part");
    if (p && p->bufs) {
        slack("mixtral_8x7b (32 layers, ep 8)", p, 0.02, 0);
        PlanBuf *t = malloc(sizeof *t * ((size_t)p->nbufs + 1));
        PlanMemory m;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int rep = 0; rep < 5; rep++) {
            memcpy(t, p->bufs, sizeof *t * (size_t)p->nbufs);
            plan_memory_again(p, t, &m);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6) / 5;
        printf("  plan_memory_launches on mixtral_8x7b: %d buffers (%d in the activations), %d launches, in %.2f ms\n",
               p->nbufs, m.nblocks, p->nlaunches, ms);
        CHECK(ms < 1000, "plan_memory_launches takes %.0f ms on mixtral_8x7b", ms);
        char err[512];
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int ok = plan_memory_check(p->graph, t, p->nbufs, p->launches, p->nlaunches, 256, &m, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("  plan_memory_check on mixtral_8x7b: %.2f ms\n", ms);
        CHECK(ok, "mixtral_8x7b: %s", err);
        free(t);
        plan_free(p);
    }
    printf("test_memory: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
