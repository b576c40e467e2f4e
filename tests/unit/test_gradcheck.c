/* test_gradcheck.c - every gradient rule against central finite
 * differences, in the fp64 check mode of the CPU backend.
 *
 * Each case is a small model whose parameters feed the op under test; the
 * autodiff pass builds its backward graph, and for sampled elements of
 * every parameter the analytic gradient must agree with the fourth-order
 * central difference (8 (L(p+h) - L(p-h)) - (L(p+2h) - L(p-2h))) / 12h
 * within 1e-6 relative. (The plain two-point difference is limited to about
 * 1e-6 by rounding in L at h = 1e-6; the five-point stencil with h = 1e-4
 * has truncation error O(h^4) and rounding error near 1e-12.) The same check runs on
 * the shipped mixtral_tiny and protein_tiny models at a small batch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../driver/compile.h"
#include "../../runtime/cpu/cpu.h"
#include "../../util/util.h"

static int npass, nfail;
static int op_covered[IR_OP_COUNT];  /* differentiable ops some case exercised */

/* splitmix64: reproducible test data */
static uint64_t rng_state = 12345;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static double rng_normal(void)
{
    double u = rng_uniform() + 1e-300, v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

typedef struct Case {
    Compilation c;
    CpuPlan plan;
    double **param_data;
    void **input_data;   /* i32 ids, or doubles for a float input (fp64 mode only) */
} Case;

static const char *disable_pass;  /* for the next setup(): run without this pass */
static int force_mxfp8;           /* for the next setup(): 1 --precision mxfp8, 2 --precision fp8-block */

static int setup(Case *k, const char *name, const char *src, const char *path, int64_t batch, int64_t seq)
{
    memset(k, 0, sizeof *k);
    FILE *devnull = fopen("/dev/null", "w");
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    if (disable_pass)
        ctx.disabled[ctx.ndisabled++] = disable_pass;
    k->c.opts.batch = batch;
    k->c.opts.seq = seq;
    k->c.opts.has_precision = force_mxfp8 != 0;
    k->c.opts.precision = force_mxfp8 == 2 ? IR_PREC_FP8_BLOCK : IR_PREC_MXFP8;
    char *text = NULL;
    size_t len = 0;
    if (path) {
        if (!compilation_read(&k->c, path, stderr))
            return 0;
        text = k->c.text;
        len = k->c.len;
    } else {
        text = (char *)src;
        len = strlen(src);
    }
    int rc = compilation_run(&k->c, name, text, len, stderr, &ctx);
    fclose(devnull);
    if (rc != 0) {
        fprintf(stderr, "%s: does not compile\n", name);
        return 0;
    }
    IrGraph *g = k->c.graph;
    cpu_plan_init(&k->plan, g, CPU_F64);
    k->param_data = calloc((size_t)g->nnodes, sizeof(double *));
    k->input_data = calloc((size_t)g->nnodes, sizeof(void *));
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        int64_t numel = ir_numel(n);
        if (n->op == IR_OP_PARAM) {
            double *d = malloc(sizeof(double) * (size_t)numel);
            int is_norm = n->rank == 1;
            for (int64_t e = 0; e < numel; e++)
                d[e] = is_norm ? 1.0 + 0.3 * rng_normal() : 0.4 * rng_normal();
            k->param_data[i] = d;
            cpu_plan_bind(&k->plan, n, d);
        } else if (n->op == IR_OP_INPUT && ir_dtype_is_float(n->dtype)) {
            /* a float input (the layer benchmark's activations x): N(0, 1) */
            double *d = malloc(sizeof(double) * (size_t)numel);
            for (int64_t e = 0; e < numel; e++)
                d[e] = rng_normal();
            k->input_data[i] = d;
            cpu_plan_bind(&k->plan, n, d);
        } else if (n->op == IR_OP_INPUT) {
            int32_t *d = malloc(sizeof(int32_t) * (size_t)numel);
            /* ids index the first param that uses them as a table, or the
             * vocabulary of the logits they are targets for */
            int64_t range = 2;
            for (int j = 0; j < g->nnodes; j++) {
                IrNode *u = g->nodes[j];
                if (u->op == IR_OP_EMBEDDING && u->src[0] == n)
                    range = u->src[1]->shape[0];
                if ((u->op == IR_OP_CROSS_ENTROPY || u->op == IR_OP_MASKED_LM_LOSS) && u->src[1] == n)
                    range = u->src[0]->shape[u->src[0]->rank - 1];
            }
            int masked = 0;
            for (int j = 0; j < g->nnodes; j++)
                masked |= g->nodes[j]->op == IR_OP_MASKED_LM_LOSS && g->nodes[j]->src[1] == n;
            for (int64_t e = 0; e < numel; e++)
                d[e] = masked && rng_uniform() < 0.5 ? -100 : (int32_t)(rng_next() % (uint64_t)range);
            /* token ids that attention is segmented by (segment_ids): BOS (0) and padding (1) of the protein
             * alphabet at fixed places, so rows hold a sequence's tail, whole sequences and padding */
            static const int32_t pattern[] = {7, 8, 0, 9, 10, 2, 0, 11, 12, 0, 5, 1, 0, 4, 6, 2, 1, 1};
            for (int j = 0; j < g->nnodes; j++)
                if (g->nodes[j]->op == IR_OP_SEGMENT_IDS && g->nodes[j]->src[0] == n)
                    for (int64_t e = 0; e < numel; e++)
                        d[e] = pattern[e % ARRAY_LEN(pattern)];
            k->input_data[i] = d;
            cpu_plan_bind(&k->plan, n, d);
        }
    }
    return 1;
}

static void teardown(Case *k)
{
    if (k->c.graph)
        for (int i = 0; i < k->c.graph->nnodes; i++) {
            free(k->param_data[i]);
            free(k->input_data[i]);
        }
    free(k->param_data);
    free(k->input_data);
    if (k->plan.g)
        cpu_plan_free(&k->plan);
    compilation_free(&k->c);
}

static double loss_at(Case *k)
{
    IrGraph *g = k->c.graph;
    cpu_plan_run_range(&k->plan, 0, g->loss->id + 1);
    return cpu_plan_scalar(&k->plan, g->loss);
}

/* Checks `samples` elements of every parameter. */
static void gradcheck(const char *name, const char *src, const char *path, int64_t batch, int64_t seq, int samples)
{
    Case k;
    if (!setup(&k, name, src, path, batch, seq)) {
        nfail++;
        teardown(&k);
        return;
    }
    IrGraph *g = k.c.graph;
    for (int i = 0; i < g->nnodes; i++)
        op_covered[g->nodes[i]->op] = 1;
    cpu_plan_run(&k.plan);
    /* copy the analytic gradients: the FD runs reuse activation buffers */
    double **grads = calloc((size_t)g->nparams, sizeof(double *));
    for (int p = 0; p < g->nparams; p++) {
        size_t bytes = (size_t)ir_numel(g->params[p]) * sizeof(double);
        grads[p] = malloc(bytes);
        memcpy(grads[p], cpu_plan_data(&k.plan, g->grads[p]), bytes);
    }
    const double h = 1e-4;
    int bad = 0, checked = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int p = 0; p < g->nparams; p++) {
        IrNode *pn = g->params[p];
        double *w = k.param_data[pn->id];
        int64_t numel = ir_numel(pn);
        for (int s = 0; s < samples; s++) {
            int64_t e = samples >= numel ? s : (int64_t)(rng_next() % (uint64_t)numel);
            if (e >= numel)
                break;
            double saved = w[e], l[4];
            static const double off[4] = {1, -1, 2, -2};
            for (int q = 0; q < 4; q++) {
                w[e] = saved + off[q] * h;
                l[q] = loss_at(&k);
            }
            w[e] = saved;
            double num = (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * h), ana = grads[p][e];
            double scale = fmax(fabs(num), fabs(ana));
            double err = fabs(num - ana) / fmax(scale, 1e-3);
            checked++;
            if (err > worst) {
                worst = err;
                worst_name = pn->name;
            }
            if (err > 1e-6) {
                if (bad < 5)
                    fprintf(stderr, "%s: d loss / d %s[%lld]: analytic %.12g, numeric %.12g (rel err %.3g)\n", name,
                            pn->name, (long long)e, ana, num, err);
                bad++;
            }
        }
    }
    printf("gradcheck %-22s %4d params, %5d elements, worst rel err %.2e (%s)\n", name, g->nparams, checked, worst,
           worst_name);
    if (bad == 0 && checked > 0)
        npass++;
    else
        nfail++;
    for (int p = 0; p < g->nparams; p++)
        free(grads[p]);
    free(grads);
    teardown(&k);
}

static const char *const cases[][2] = {
    {"embedding_linear_ce",
     "model m { input ids : i32[B, S]  input t : i32[B, S]\n"
     "  param table : [11, 6]  param w : [7, 6]\n"
     "  loss = cross_entropy(linear(embedding(ids, table), w), t) }\n"
     "train { batch 2, seq 3 }\n"},
    {"rmsnorm",
     "model m { input t : i32[B]  param x : [B, 8]  param g : [8]  param w : [5, 8]\n"
     "  loss = cross_entropy(linear(rmsnorm(x, g, eps = 1e-5), w), t) }\n"
     "train { batch 3 }\n"},
    {"elementwise",
     "model m { input t : i32[B]  param a : [B, 6]  param b : [B, 6]  param w : [4, 6]\n"
     "  h = silu(a) * gelu(b) + 0.5 * a - b / 3\n"
     "  loss = cross_entropy(linear(h, w), t) }\n"
     "train { batch 4 }\n"},
    {"swiglu",
     "model m { input t : i32[B]  param x : [B, 10]  param w : [4, 5]\n"
     "  loss = cross_entropy(linear(swiglu(x), w), t) }\n"
     "train { batch 3 }\n"},
    {"attention_causal_gqa_rope",
     "model m { input t : i32[B, S]  param x : [B, S, 8]\n"
     "  param wq : [8, 8]  param wk : [4, 8]  param wv : [4, 8]  param wo : [8, 8]  param w : [5, 8]\n"
     "  a = attention(x, wq, wk, wv, wo, heads = 4, kv_heads = 2, rope_theta = 100, causal = true)\n"
     "  loss = cross_entropy(linear(a, w), t) }\n"
     "train { batch 2, seq 5 }\n"},
    {"attention_bidir_mha",
     "model m { input t : i32[B, S]  param x : [B, S, 6]\n"
     "  param wq : [6, 6]  param wk : [6, 6]  param wv : [6, 6]  param wo : [6, 6]  param w : [3, 6]\n"
     "  a = attention(x, wq, wk, wv, wo, heads = 3, rope_theta = 0, causal = false)\n"
     "  loss = cross_entropy(linear(a, w), t) }\n"
     "train { batch 2, seq 4 }\n"},
    {"moe_chain_aux",
     "model m { input t : i32[B, S]  param x : [B, S, 8]  param router : [4, 8]\n"
     "  param w_gate_up : [4, 12, 8]  param w_down : [4, 8, 6]  param w : [5, 8]\n"
     "  r = route_topk(linear(x, router), k = 2)\n"
     "  a = scaled_swiglu(grouped_linear(dispatch(x, r), w_gate_up, r.splits), r.probs)\n"
     "  y = x + combine(grouped_linear(a, w_down, r.splits), r)\n"
     "  loss = cross_entropy(linear(y, w), t) + 0.3 * r.aux_loss }\n"
     "train { batch 2, seq 5 }\n"},
    {"moe_composite_topk1",
     "model m { input t : i32[B]  param x : [B, 6]  param router : [3, 6]\n"
     "  param w_gate_up : [3, 8, 6]  param w_down : [3, 6, 4]  param w : [5, 6]\n"
     "  loss = cross_entropy(linear(moe(x, router, w_gate_up, w_down, k = 1), w), t) }\n"
     "train { batch 7 }\n"},
    {"gelu_expert_row_scale",
     "model m { input t : i32[B]  param x : [B, 6]  param router : [3, 6]\n"
     "  param w_up : [3, 8, 6]  param w_down : [3, 6, 8]  param w : [5, 6]\n"
     "  r = route_topk(linear(x, router), k = 2)\n"
     "  a = row_scale(gelu(grouped_linear(dispatch(x, r), w_up, r.splits)), r.probs)\n"
     "  loss = cross_entropy(linear(combine(grouped_linear(a, w_down, r.splits), r), w), t) }\n"
     "train { batch 5 }\n"},
    {"masked_lm_loss",
     "model m { input ids : i32[B, S]  input t : i32[B, S]  param table : [9, 6]  param w : [9, 6]\n"
     "  loss = masked_lm_loss(linear(embedding(ids, table), w), t) }\n"
     "train { batch 2, seq 6 }\n"},
    {"mean_square_layer",  /* the MoE layer benchmark's model: f32 input, loss = mean(y^2) */
     "model m { input x : f32[B, 6]  param router : [4, 6]\n"
     "  param w_gate_up : [4, 8, 6]  param w_down : [4, 6, 4]  param s : [B, 6]\n"
     "  r = route_topk(linear(x, router), k = 2)\n"
     "  a = scaled_swiglu(grouped_linear(dispatch(x, r), w_gate_up, r.splits), r.probs)\n"
     "  loss = mean_square(combine(grouped_linear(a, w_down, r.splits), r)) + 0.5 * mean_square(s) }\n"
     "train { batch 5 }\n"},
    {"train_aux_loss",
     "model m { input t : i32[B]  param x : [B, 6]  param router : [4, 6]\n"
     "  param w_gate_up : [4, 8, 6]  param w_down : [4, 6, 4]  param w : [5, 6]\n"
     "  loss = cross_entropy(linear(moe(x, router, w_gate_up, w_down, k = 2), w), t) }\n"
     "train { batch 6, aux_loss 0.5 }\n"},
    {"attention_segments_packed",
     "model m { input ids : i32[B, S]  input t : i32[B, S]  param table : [33, 8]\n"
     "  param wq : [8, 8]  param wk : [4, 8]  param wv : [4, 8]  param wo : [8, 8]  param w : [5, 8]\n"
     "  a = attention(embedding(ids, table), wq, wk, wv, wo, heads = 2, kv_heads = 1, rope_theta = 100, causal = false)\n"
     "  loss = cross_entropy(linear(a, w), t) }\n"
     "train { batch 2, seq 9, alphabet protein, packing packed }\n"},
    {"attention_segments_causal",
     "model m { input ids : i32[B, S]  input t : i32[B, S]  param table : [33, 6]\n"
     "  param wq : [6, 6]  param wk : [6, 6]  param wv : [6, 6]  param wo : [6, 6]  param w : [5, 6]\n"
     "  a = attention(embedding(ids, table), wq, wk, wv, wo, heads = 3, rope_theta = 0, causal = true)\n"
     "  loss = cross_entropy(linear(a, w), t) }\n"
     "train { batch 2, seq 9, alphabet protein, packing rows }\n"},
};

/* The fp32 kernels (the training path) against the fp64 ones on the same
 * parameters: the loss and every gradient agree to fp32 accuracy. */
static void f32_vs_f64(const char *path)
{
    Case k;
    if (!setup(&k, path, NULL, path, 2, 16)) {
        nfail++;
        teardown(&k);
        return;
    }
    IrGraph *g = k.c.graph;
    CpuPlan p32;
    cpu_plan_init(&p32, g, CPU_F32);
    float **bufs = calloc((size_t)g->nnodes, sizeof(float *));
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_PARAM) {
            bufs[i] = malloc(sizeof(float) * (size_t)ir_numel(n));
            for (int64_t e = 0; e < ir_numel(n); e++)
                bufs[i][e] = (float)k.param_data[i][e];
            /* the fp64 run sees exactly the fp32-rounded values */
            for (int64_t e = 0; e < ir_numel(n); e++)
                k.param_data[i][e] = bufs[i][e];
            cpu_plan_bind(&p32, n, bufs[i]);
        } else if (n->op == IR_OP_INPUT) {
            cpu_plan_bind(&p32, n, k.input_data[i]);
        }
    }
    cpu_plan_run(&k.plan);
    cpu_plan_run(&p32);
    double l64 = cpu_plan_scalar(&k.plan, g->loss), l32 = cpu_plan_scalar(&p32, g->loss);
    double worst = fabs(l64 - l32) / fabs(l64);
    for (int p = 0; p < g->nparams; p++) {
        const double *a = cpu_plan_data(&k.plan, g->grads[p]);
        const float *b = cpu_plan_data(&p32, g->grads[p]);
        double num = 0, den = 0;
        for (int64_t e = 0; e < ir_numel(g->params[p]); e++) {
            num += (a[e] - b[e]) * (a[e] - b[e]);
            den += a[e] * a[e];
        }
        double rel = sqrt(num / (den > 0 ? den : 1));
        if (rel > worst)
            worst = rel;
    }
    printf("fp32 vs fp64 %-25s loss %.9f vs %.9f, worst relative L2 error %.2e\n", path, l64, l32, worst);
    if (worst < 1e-4)
        npass++;
    else
        nfail++;
    for (int i = 0; i < g->nnodes; i++)
        free(bufs[i]);
    free(bufs);
    cpu_plan_free(&p32);
    teardown(&k);
}

/* The fused grouped_mlp (and its fused backward) against the unfused chain
 * on the same parameters and data, in the fp32 training path: the loss and
 * every gradient are bit-identical, because the fused kernels run the same
 * GEMM and SwiGLU code in the same order. */
static void fused_vs_unfused(const char *path, int mxfp8) /* mxfp8: 0 bf16, 1 mxfp8, 2 fp8-block */
{
    force_mxfp8 = mxfp8;
    Case f, u;
    uint64_t seed = rng_state;
    int ok = setup(&f, path, NULL, path, 2, 16);
    rng_state = seed;  /* the same random parameters and inputs */
    disable_pass = "fuse-grouped-mlp";
    ok = setup(&u, path, NULL, path, 2, 16) && ok;
    disable_pass = NULL;
    force_mxfp8 = 0;
    if (!ok) {
        nfail++;
        teardown(&f);
        teardown(&u);
        return;
    }
    IrGraph *gf = f.c.graph, *gu = u.c.graph;
    int nfused = 0, nquant = 0;
    for (int i = 0; i < gf->nnodes; i++)
        nfused += gf->nodes[i]->op == IR_OP_GROUPED_MLP;
    for (int i = 0; i < gu->nnodes; i++)
        nquant += gu->nodes[i]->op == IR_OP_QUANTIZE || gu->nodes[i]->op == IR_OP_QUANTIZE_GROUPED ||
                  gu->nodes[i]->op == IR_OP_QUANTIZE_FP8B || gu->nodes[i]->op == IR_OP_QUANTIZE_FP8B_GROUPED;
    CpuPlan pf, pu;
    cpu_plan_init(&pf, gf, CPU_F32);
    cpu_plan_init(&pu, gu, CPU_F32);
    float **bufs[2] = {calloc((size_t)gf->nnodes, sizeof(float *)), calloc((size_t)gu->nnodes, sizeof(float *))};
    Case *cs[2] = {&f, &u};
    CpuPlan *ps[2] = {&pf, &pu};
    for (int c = 0; c < 2; c++) {
        IrGraph *g = cs[c]->c.graph;
        for (int i = 0; i < g->nnodes; i++) {
            IrNode *n = g->nodes[i];
            if (n->op == IR_OP_PARAM) {
                bufs[c][i] = malloc(sizeof(float) * (size_t)ir_numel(n));
                for (int64_t e = 0; e < ir_numel(n); e++)
                    bufs[c][i][e] = (float)cs[c]->param_data[i][e];
                cpu_plan_bind(ps[c], n, bufs[c][i]);
            } else if (n->op == IR_OP_INPUT) {
                cpu_plan_bind(ps[c], n, cs[c]->input_data[i]);
            }
        }
        cpu_plan_run(ps[c]);
    }
    float lf = *(float *)cpu_plan_data(&pf, gf->loss), lu = *(float *)cpu_plan_data(&pu, gu->loss);
    int same = memcmp(&lf, &lu, sizeof lf) == 0 && gf->nparams == gu->nparams;
    for (int p = 0; same && p < gf->nparams; p++)
        same = strcmp(gf->params[p]->name, gu->params[p]->name) == 0 &&
               memcmp(cpu_plan_data(&pf, gf->grads[p]), cpu_plan_data(&pu, gu->grads[p]),
                      sizeof(float) * (size_t)ir_numel(gf->params[p])) == 0;
    printf("fused vs unfused %-21s %s: %d grouped_mlp nodes (unfused: %d quantize nodes), loss %.9g vs %.9g, "
           "gradients %s\n", path, mxfp8 == 2 ? "fp8-block" : mxfp8 ? "mxfp8" : "bf16", nfused, nquant, lf, lu, same ? "bit-identical" : "DIFFER");
    if (same && nfused > 0 && (!mxfp8 || nquant > 0))
        npass++;
    else
        nfail++;
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < cs[c]->c.graph->nnodes; i++)
            free(bufs[c][i]);
        free(bufs[c]);
    }
    cpu_plan_free(&pf);
    cpu_plan_free(&pu);
    teardown(&f);
    teardown(&u);
}

/* Attention kept inside each sequence: in a packed row (BOS residues EOS
 * BOS residues EOS padding), a change to a token of the first sequence must
 * leave every logit of the second sequence and of the padding bit-identical
 * after two attention layers; with packing concat it must not (so the test
 * sees leaks). Fails if any token attends across a boundary. */
static void segment_boundaries(const char *packing, int want_isolated)
{
    char src[2048];
    snprintf(src, sizeof src,
             "model m { input ids : i32[B, S]  input t : i32[B, S]  param table : [33, 8]\n"
             "  param wq : [8, 8]  param wk : [8, 8]  param wv : [8, 8]  param wo : [8, 8]  param w : [33, 8]\n"
             "  x = embedding(ids, table)\n"
             "  x = x + attention(x, wq, wk, wv, wo, heads = 2, rope_theta = 100, causal = false)\n"
             "  x = x + attention(x, wq, wk, wv, wo, heads = 2, rope_theta = 100, causal = false)\n"
             "  loss = masked_lm_loss(linear(x, w), t) }\n"
             "train { batch 1, seq 12, alphabet protein, packing %s }\n", packing);
    Case k;
    char name[64];
    snprintf(name, sizeof name, "boundaries_%s", packing);
    if (!setup(&k, name, src, NULL, 0, 0)) {
        nfail++;
        teardown(&k);
        return;
    }
    IrGraph *g = k.c.graph;
    int32_t *ids = NULL;
    const IrNode *logits = g->loss->src[0];
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_EMBEDDING)
            ids = k.input_data[g->nodes[i]->src[0]->id];
    /* <cls> L A G <eos> <cls> V S E <eos> <pad> <pad> */
    static const int32_t row[12] = {0, 4, 5, 6, 2, 0, 7, 8, 9, 2, 1, 1};
    memcpy(ids, row, sizeof row);
    int64_t V = logits->shape[logits->rank - 1];
    size_t bytes = (size_t)ir_numel(logits) * sizeof(double);
    double *before = malloc(bytes), *after = malloc(bytes);
    cpu_plan_run_range(&k.plan, 0, g->loss->id + 1);
    memcpy(before, cpu_plan_data(&k.plan, logits), bytes);
    ids[2] = 20;  /* A -> M in the first sequence */
    cpu_plan_run_range(&k.plan, 0, g->loss->id + 1);
    memcpy(after, cpu_plan_data(&k.plan, logits), bytes);
    int first_changed = 0, others_same = 1;
    for (int64_t pos = 0; pos < 12; pos++) {
        int same = memcmp(before + pos * V, after + pos * V, (size_t)V * sizeof(double)) == 0;
        if (pos < 5)
            first_changed |= !same;
        else
            others_same &= same;
    }
    int ok = first_changed && others_same == want_isolated;
    printf("segments (packing %s): a change in sequence 1 %s the logits of sequence 2 and the padding\n", packing,
           others_same ? "leaves unchanged" : "changes");
    if (ok)
        npass++;
    else
        nfail++;
    free(before);
    free(after);
    teardown(&k);
}

int main(void)
{
    for (int i = 0; i < ARRAY_LEN(cases); i++)
        gradcheck(cases[i][0], cases[i][1], NULL, 0, 0, 40);
    /* the expert chain as written, without the fused grouped_mlp */
    disable_pass = "fuse-grouped-mlp";
    gradcheck("moe_chain_unfused", cases[6][1], NULL, 0, 0, 40);
    disable_pass = NULL;
    fused_vs_unfused("models/mixtral_tiny.moe", 0);
    fused_vs_unfused("models/protein_tiny.moe", 0);
    fused_vs_unfused("models/mixtral_tiny.moe", 1);
    fused_vs_unfused("models/protein_tiny.moe", 1);
    fused_vs_unfused("models/mixtral_tiny.moe", 2);
    fused_vs_unfused("models/protein_tiny.moe", 2);
    gradcheck("mixtral_tiny", NULL, "models/mixtral_tiny.moe", 2, 6, 12);
    gradcheck("protein_tiny", NULL, "models/protein_tiny.moe", 2, 6, 12);
    f32_vs_f64("models/mixtral_tiny.moe");
    f32_vs_f64("models/protein_tiny.moe");
    segment_boundaries("packed", 1);
    segment_boundaries("rows", 1);
    segment_boundaries("concat", 0);
    /* a new differentiable op must add its case here (as ggml's test-backend-ops) */
    for (int op = 0; op < IR_OP_COUNT; op++) {
        /* custom ops are checked by their plugin's tests; the expert-parallel
         * permutations (whose gradients are the inverse permutations) by
         * tests/train/ep_equivalence.test, which needs several ranks */
        int elsewhere = op == IR_OP_CUSTOM || op == IR_OP_EP_DISPATCH || op == IR_OP_EP_COMBINE ||
                        op == IR_OP_EP_SORT || op == IR_OP_EP_UNSORT;
        if ((ir_op_info[op].flags & OPF_DIFF) && !op_covered[op] && !elsewhere) {
            fprintf(stderr, "no gradient check exercises op %s: add a case\n", ir_op_name((IrOp)op));
            nfail++;
        }
    }
    printf("test_gradcheck: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
