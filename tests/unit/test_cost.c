/* test_cost.c - the cost model of plan/cost.c (what --profile divides by the
 * measured time) on compiled graphs: FLOPs of every matmul-like family
 * against the formulas written out here from the shapes, hand-computed
 * numbers for mixtral_tiny's nodes, and bytes at the plan's storage sizes.
 * Run from the repository root. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../driver/compile.h"
#include "../../driver/build.h"
#include "../../plan/plan.h"
#include "check.h"


static Plan *make_plan_k(const char *path, int mxfp8, int64_t ep, int fast)
{
    Compilation c;
    memset(&c, 0, sizeof c);
    if (!compilation_read(&c, path, stderr))
        return NULL;
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    c.opts.ep = ep;
    c.kernels = fast ? PLAN_KERNELS_FAST : PLAN_KERNELS_REFERENCE;
    if (mxfp8) {
        c.opts.has_precision = 1;
        c.opts.precision = IR_PREC_MXFP8;
    }
    if (compilation_run(&c, path, c.text, c.len, stderr, &ctx) != 0) {
        compilation_free(&c);
        return NULL;
    }
    char err[1024];
    Plan *p = driver_make_plan(&c, path, NULL, 0, mxfp8, mxfp8 ? IR_PREC_MXFP8 : IR_PREC_BF16, ep, err, sizeof err);
    if (!p)
        fprintf(stderr, "%s: %s\n", path, err);
    compilation_free(&c);
    return p;
}

static Plan *make_plan_ep(const char *path, int mxfp8, int64_t ep) { return make_plan_k(path, mxfp8, ep, 0); }
static Plan *make_plan(const char *path, int mxfp8) { return make_plan_ep(path, mxfp8, 0); }

static double numel(const IrNode *n) { return (double)ir_numel(n); }
static double last(const IrNode *n) { return (double)n->shape[n->rank - 1]; }
static double lead(const IrNode *n) { return numel(n) / last(n); }

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b) + 1e-9; }

/* the formula of each family, written from the op's documented shapes (ir/ops.def) */
static double want_flops(const IrNode *n)
{
    const IrNode *s0 = n->src[0], *s1 = n->nsrc > 1 ? n->src[1] : NULL;
    switch (n->op) {
    case IR_OP_LINEAR:            /* x [N,in], w [out,in] */
        return 2 * lead(s0) * last(s0) * s1->shape[0];
    case IR_OP_LINEAR_DX:         /* dy [N,out], w [out,in] */
        return 2 * lead(s0) * s1->shape[0] * s1->shape[1];
    case IR_OP_LINEAR_DW:         /* dy [N,out], x [N,in] */
        return 2 * lead(s0) * last(s0) * last(s1);
    case IR_OP_GROUPED_LINEAR:    /* x [R,in], w [E,out,in] */
        return 2 * lead(s0) * s1->shape[1] * s1->shape[2];
    case IR_OP_GROUPED_LINEAR_DX: /* dy [R,out], w [E,out,in] */
        return 2 * lead(s0) * s1->shape[1] * s1->shape[2];
    case IR_OP_GROUPED_LINEAR_DW: /* dy [R,out], x [R,in] */
        return 2 * lead(s0) * last(s0) * last(s1);
    case IR_OP_GROUPED_MLP: {     /* xs [R,H], w_down [E,H,F] */
        double R = lead(s0), H = last(s0), F = n->src[2]->shape[2];
        return 2 * R * H * 2 * F + 2 * R * F * H;
    }
    case IR_OP_GROUPED_MLP_BWD: { /* dy, xs [R,H], w_gate_up, w_down [E,H,F]: recompute + dx + dw */
        double R = lead(s1), H = last(s1), F = n->src[3]->shape[2];
        return 3 * (2 * R * H * 2 * F) + 2 * (2 * R * F * H);
    }
    case IR_OP_SDPA:
    case IR_OP_SDPA_BWD: {        /* q [B,S,h*hd] */
        const IrNode *q = n->op == IR_OP_SDPA ? s0 : s1;
        double B = q->shape[0], S = q->shape[1], W = q->shape[2];
        double f = 4 * B * S * S * W * (n->attr[IR_ATTR_CAUSAL].i ? 0.5 : 1);
        return n->op == IR_OP_SDPA ? f : 2.5 * f;
    }
    default:
        return 0;
    }
}

static void test_families(const char *what, const Plan *p)
{
    const IrGraph *g = p->graph;
    int seen[IR_OP_COUNT] = {0};
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        PlanCost c = plan_node_cost(p, n);
        double w = want_flops(n);
        seen[n->op]++;
        CHECK(close_to(c.flops, w), "%s: %s (%s): %.0f FLOPs, want %.0f", what, n->name, ir_node_op_name(n), c.flops,
              w);
        CHECK(c.gemm == (w > 0), "%s: %s (%s): gemm %d", what, n->name, ir_node_op_name(n), c.gemm);
        CHECK(c.bytes >= 0 && isfinite(c.bytes), "%s: %s: bytes %g", what, n->name, c.bytes);
        if (n->op == IR_OP_ADD || n->op == IR_OP_MUL) {
            double want = 0;
            for (int s = 0; s < n->nsrc + 1; s++) {
                const IrNode *t = s < n->nsrc ? n->src[s] : n;
                want += numel(t) * plan_storage_bytes[p->bufs[t->id].storage];
            }
            CHECK(close_to(c.bytes, want), "%s: %s: %.0f bytes, want %.0f (inputs + output)", what, n->name,
                  c.bytes, want);
        }
        if (n->op == IR_OP_INPUT || n->op == IR_OP_PARAM)
            CHECK(c.bytes == 0 && c.flops == 0, "%s: %s: a leaf costs nothing", what, n->name);
    }
    CHECK(seen[IR_OP_LINEAR] && seen[IR_OP_LINEAR_DX] && seen[IR_OP_LINEAR_DW] && seen[IR_OP_GROUPED_MLP] &&
              seen[IR_OP_GROUPED_MLP_BWD] && seen[IR_OP_SDPA] && seen[IR_OP_SDPA_BWD],
          "%s: every matmul-like family appears", what);
}

/* mixtral_tiny: batch 8 x seq 128 = 1024 tokens, d 64, ffn 128, 4 experts top-2 (R = 2048 rows), 4 heads of 16,
 * causal; the numbers worked out by hand */
static void test_mixtral_tiny_numbers(const Plan *p)
{
    const IrGraph *g = p->graph;
    int found = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        PlanCost c = plan_node_cost(p, n);
        if (n->op == IR_OP_LINEAR && n->src[1]->op == IR_OP_PARAM && strcmp(n->src[1]->label, "lm_head") == 0) {
            /* [1024, 64] x [33, 64]^T: 2 * 1024 * 64 * 33 */
            CHECK(c.flops == 4325376.0, "lm_head: %.0f FLOPs", c.flops);
            /* x, w, y in fp32: (1024*64 + 33*64 + 1024*33) * 4 */
            CHECK(c.bytes == (1024.0 * 64 + 33 * 64 + 1024 * 33) * 4, "lm_head: %.0f bytes", c.bytes);
            found |= 1;
        }
        if (n->op == IR_OP_GROUPED_MLP) {
            /* 2*2048*64*256 + 2*2048*128*64 */
            CHECK(c.flops == 100663296.0, "grouped_mlp: %.0f FLOPs", c.flops);
            found |= 2;
        }
        if (n->op == IR_OP_GROUPED_MLP_BWD) {
            CHECK(c.flops == 268435456.0, "grouped_mlp_bwd: %.0f FLOPs", c.flops);
            found |= 4;
        }
        if (n->op == IR_OP_SDPA) {
            /* 4 * 8 * 128 * 128 * 64 / 2 (causal) */
            CHECK(c.flops == 16777216.0, "sdpa: %.0f FLOPs", c.flops);
            found |= 8;
        }
        if (n->op == IR_OP_SDPA_BWD) {
            CHECK(c.flops == 41943040.0, "sdpa_bwd: %.0f FLOPs", c.flops);
            found |= 16;
        }
    }
    CHECK(found == 31, "mixtral_tiny: lm_head, grouped_mlp(_bwd), sdpa(_bwd) found (%d)", found);
}

/* Without the GPU part (or without a plan) the IR dtypes give the sizes: the same numbers for fp32 storage. */
static void test_without_plan(const Plan *p)
{
    const IrGraph *g = p->graph;
    int same = 1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        PlanCost a = plan_node_cost(p, n), b = plan_node_cost(NULL, n);
        int fp32 = 1;
        for (int s = 0; s < n->nsrc; s++)
            fp32 &= p->bufs[n->src[s]->id].storage == PLAN_F32 || p->bufs[n->src[s]->id].storage == PLAN_I32;
        if (fp32 && (p->bufs[n->id].storage == PLAN_F32 || p->bufs[n->id].storage == PLAN_I32))
            same &= a.bytes == b.bytes && a.flops == b.flops;
    }
    CHECK(same, "the plan's storage sizes and the dtypes' agree for fp32 tensors");
}

/* Model FLOPs per token (the MFU numerator: plan_model_flops over the rank's tokens) against counts by hand
 * from the model files: per token and layer the projections 2 d (q + k + v + o widths), the attention 4 S d
 * (half when causal), the router 2 d E, k experts of 2 d 2F + 2 F d; the lm_head 2 d V; the backward twice the
 * forward (dx and dw of every GEMM, attention's dV dP dQ dK), so 3 x the forward. Not 6 N: attention and the
 * k of E experts are counted as the plan runs them. */
static double per_token(const Plan *p) { return plan_model_flops(p->graph) / (double)(p->local_batch * p->seq); }

static void test_model_flops(void)
{
    /* micro_protein: d 16, ffn 32, 4 experts top-2, 2 heads, vocab 33, 2 layers, seq 32, bidirectional:
     * layer 2*16*64 + 4*32*16 + 2*16*4 + 2*(2*16*64 + 2*32*16) = 2048 + 2048 + 128 + 6144 = 10368;
     * forward 2 * 10368 + 2*16*33 = 21792; 3 x = 65376 */
    Plan *p = make_plan("tests/train/micro_protein.moe", 0);
    CHECK(p != NULL, "micro_protein compiles");
    if (p) {
        CHECK(per_token(p) == 65376.0, "micro_protein: %.1f model FLOPs per token, want 65376", per_token(p));
        plan_free(p);
    }
    /* mixtral_tiny: d 64, ffn 128, 4 experts top-2, 4 heads and 2 kv heads of 16, vocab 33, 2 layers, seq 128,
     * causal: layer 2*64*(64+32+32+64) + 4*128*64/2 + 2*64*4 + 2*(2*64*256 + 2*128*64)
     * = 24576 + 16384 + 512 + 98304 = 139776; forward 2 * 139776 + 2*64*33 = 283776; 3 x = 851328 */
    p = make_plan("models/mixtral_tiny.moe", 0);
    double ep1 = 0;
    CHECK(p != NULL, "mixtral_tiny compiles");
    if (p) {
        ep1 = per_token(p);
        CHECK(ep1 == 851328.0, "mixtral_tiny: %.1f model FLOPs per token, want 851328", ep1);
        /* recomputation is in --profile's FLOPs, not in the model FLOPs: the backward of the expert MLP counts
         * 2 x its forward there, 3 + 2 / 3 x here (the gate/up GEMM again) */
        double all = 0;
        for (int i = 0; i < p->graph->nnodes; i++)
            all += plan_node_cost(p, p->graph->nodes[i]).flops;
        CHECK(all > plan_model_flops(p->graph), "--profile's FLOPs (%.0f) include recomputation, the model's (%.0f) "
              "not", all, plan_model_flops(p->graph));
        plan_free(p);
    }
    /* activation checkpointing (decision 43): the recomputed forward is in --profile's FLOPs, not in the model
     * FLOPs: four Mixtral layers with and without `checkpoint blocks` (batch 12 and 4: per token) */
    Plan *a = make_plan_k("tests/gpu/mixtral4.moe", 0, 0, 1), *ck = make_plan_k("tests/gpu/mixtral4_ckpt.moe", 0, 0, 1);
    CHECK(a && ck, "mixtral4 and mixtral4_ckpt compile");
    if (a && ck) {
        double ha = 0, hc = 0;
        for (int i = 0; i < a->graph->nnodes; i++)
            ha += plan_node_cost(a, a->graph->nodes[i]).flops;
        for (int i = 0; i < ck->graph->nnodes; i++)
            hc += plan_node_cost(ck, ck->graph->nodes[i]).flops;
        ha /= (double)(a->local_batch * a->seq);
        hc /= (double)(ck->local_batch * ck->seq);
        double r = hc / ha;
        printf("  mixtral4: model FLOPs per token %.4g, checkpointed %.4g; profile FLOPs x %.3f\n", per_token(a),
               per_token(ck), r);
        CHECK(per_token(ck) == per_token(a), "checkpointed: %.1f model FLOPs per token, want %.1f", per_token(ck),
              per_token(a));
        CHECK(r > 1.15 && r < 1.45, "checkpointed: --profile's FLOPs per token x %.3f, want about 4/3", r);
        /* the fast kernels' expert-MLP backward reads the h its forward kept: no gate/up GEMM again, so its
         * FLOPs are twice the forward's (the reference kernels': 3 gate/up + 2 down, above) */
        int checked = 0;
        for (int i = 0; i < a->graph->nnodes; i++) {
            const IrNode *n = a->graph->nodes[i];
            if (n->op != IR_OP_GROUPED_MLP_BWD)
                continue;
            double f = 0;
            for (int j = 0; j < a->graph->nnodes; j++)
                if (a->graph->nodes[j]->op == IR_OP_GROUPED_MLP && a->graph->nodes[j]->src[0] == n->src[1])
                    f = plan_node_cost(a, a->graph->nodes[j]).flops;
            CHECK(f > 0 && close_to(plan_node_cost(a, n).flops, 2 * f),
                  "mixtral4 (fast): %s counts %.4g FLOPs, want twice its forward's %.4g", n->name,
                  plan_node_cost(a, n).flops, f);
            checked++;
        }
        CHECK(checked == 4, "mixtral4 (fast): %d expert-MLP backward nodes, want 4", checked);
    }
    if (a)
        plan_free(a);
    if (ck)
        plan_free(ck);
    /* expert parallelism: a rank's expert GEMMs run over the receive capacity (ep x its routed rows); the model
     * FLOPs per token are the same as at ep 1 */
    p = make_plan_ep("models/mixtral_tiny.moe", 0, 2);
    CHECK(p != NULL && p->ep == 2, "mixtral_tiny at ep 2 compiles");
    if (p) {
        CHECK(per_token(p) == ep1, "mixtral_tiny at ep 2: %.1f model FLOPs per token, want %.1f (ep 1)",
              per_token(p), ep1);
        plan_free(p);
    }
}

/* plan_memory_breakdown (what --dry-run prints) against the tensor table of a freshly made plan, whose
 * lifetimes the breakdown plans again on its own copy: the live bytes at every launch position (the GPU's
 * lifetimes, decision 65) counted here by brute force, the peak among them and its node, and the parts. */
static void test_memory_breakdown(const char *what, const Plan *p)
{
    PlanMemoryBreakdown b;
    plan_memory_breakdown(p, &b);
    int64_t masters = 0, copies = 0, grads = 0, best = -1;
    int best_at = -1;
    for (int i = 0; i < p->nparams; i++) {
        masters += p->bufs[p->params[i].node].bytes;
        grads += p->bufs[p->params[i].grad].bytes;
    }
    for (int k = 0; k < p->nbufs; k++)
        if (p->bufs[k].kind == PLAN_BUF_COPY)
            copies += p->bufs[k].bytes;
    for (int i = 0; i < p->nlaunches; i++) {
        int64_t live = 0;
        for (int k = 0; k < p->nbufs; k++)
            if (p->bufs[k].alias_of < 0 && p->bufs[k].region == PLAN_REGION_ACTIVATIONS && p->bufs[k].lfirst <= i &&
                p->bufs[k].llast >= i)
                live += p->bufs[k].bytes;
        if (live > best) {
            best = live;
            best_at = i;
        }
    }
    CHECK(b.peak_launch == best_at && best_at >= 0 && b.peak_at == p->launches[best_at].node,
          "%s: the peak at launch %d (node %d), brute force %d", what, b.peak_launch, b.peak_at, best_at);
    CHECK(b.masters == masters && b.copies == copies, "%s: masters %lld (want %lld), copies %lld (want %lld)", what,
          (long long)b.masters, (long long)masters, (long long)b.copies, (long long)copies);
    CHECK(b.grads == grads && grads == masters, "%s: gradients %lld, want %lld (fp32, one per parameter)", what,
          (long long)b.grads, (long long)grads);
    CHECK(b.peak_live == best, "%s: peak %lld at launch %d, brute force %lld at %d", what, (long long)b.peak_live,
          b.peak_launch, (long long)best, best_at);
    CHECK(b.peak_grads + b.peak_acts + b.peak_ws == b.peak_live && b.peak_acts > 0 && b.peak_grads >= 0 &&
              b.peak_ws >= 0, "%s: the parts add up to the peak", what);
    CHECK(b.acts_region == p->memory.region_bytes[PLAN_REGION_ACTIVATIONS] && b.peak_live <= b.acts_region,
          "%s: the region %lld (the plan's %lld) holds the peak %lld", what, (long long)b.acts_region,
          (long long)p->memory.region_bytes[PLAN_REGION_ACTIVATIONS], (long long)b.peak_live);
}

int main(void)
{
    test_model_flops();
    {
        /* the fast kernels: bf16 working copies in the params region, workspaces kept past their node */
        Plan *f = make_plan_k("tests/gpu/fast_mlp.moe", 0, 0, 1);
        CHECK(f != NULL, "fast_mlp --kernels fast compiles");
        if (f) {
            PlanMemoryBreakdown b;
            plan_memory_breakdown(f, &b);
            CHECK(b.copies > 0, "fast_mlp: bf16 copies (%lld bytes)", (long long)b.copies);
            test_memory_breakdown("fast_mlp fast", f);
            plan_free(f);
        }
    }
    Plan *p = make_plan("models/mixtral_tiny.moe", 0);
    CHECK(p != NULL, "mixtral_tiny compiles");
    if (p) {
        test_families("mixtral_tiny", p);
        test_mixtral_tiny_numbers(p);
        test_without_plan(p);
        test_memory_breakdown("mixtral_tiny", p);
        plan_free(p);
    }
    p = make_plan("models/mixtral_tiny.moe", 1);
    CHECK(p != NULL, "mixtral_tiny --precision mxfp8 compiles");
    if (p) {
        test_families("mixtral_tiny mxfp8", p);
        plan_free(p);
    }
    /* an unfused model: grouped_linear and its gradients */
    Compilation c;
    memset(&c, 0, sizeof c);
    p = NULL;
    if (compilation_read(&c, "models/mixtral_tiny.moe", stderr)) {
        PassCtx ctx;
        pass_ctx_init(&ctx, NULL);
        ctx.disabled[ctx.ndisabled++] = "fuse-grouped-mlp";
        char err[1024];
        if (compilation_run(&c, "models/mixtral_tiny.moe", c.text, c.len, stderr, &ctx) == 0)
            p = driver_make_plan(&c, "models/mixtral_tiny.moe", NULL, 0, 0, IR_PREC_BF16, 0, err, sizeof err);
        compilation_free(&c);
    }
    CHECK(p != NULL, "mixtral_tiny without fusion compiles");
    if (p) {
        const IrGraph *g = p->graph;
        int gl = 0;
        for (int i = 0; i < g->nnodes; i++) {
            const IrNode *n = g->nodes[i];
            PlanCost k = plan_node_cost(p, n);
            if (n->op == IR_OP_GROUPED_LINEAR || n->op == IR_OP_GROUPED_LINEAR_DX ||
                n->op == IR_OP_GROUPED_LINEAR_DW) {
                gl++;
                CHECK(close_to(k.flops, want_flops(n)) && k.gemm, "%s: %.0f FLOPs, want %.0f", n->name, k.flops,
                      want_flops(n));
                /* each of the two expert GEMMs: 2048 rows x (64 x 256) or (128 x 64) */
                CHECK(k.flops == 2.0 * 2048 * 64 * 256 || k.flops == 2.0 * 2048 * 128 * 64, "%s: %.0f FLOPs",
                      n->name, k.flops);
            }
        }
        CHECK(gl >= 6, "grouped_linear, _dx and _dw appear (%d nodes)", gl);
        plan_free(p);
    }
    printf("test_cost: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
