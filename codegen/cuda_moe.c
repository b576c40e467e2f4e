/* cuda_moe.c - emitters for the mixture-of-experts ops: routing (top-k,
 * probabilities, the plan as a stable counting sort, split sizes), dispatch
 * and combine, grouped GEMMs, the fused grouped_mlp and its backward, MXFP8
 * quantization, and the local parts of expert parallelism (ep_local_splits,
 * ep_sort, ep_unsort; the all-to-alls themselves are host-side collectives).
 * Routing follows runtime/cpu/kernels.inc exactly (selection, ties, double
 * softmax); GEMMs accumulate in fp32 in 16-wide k steps. */
#include <stdio.h>
#include <string.h>

#include "cuda.h"
#include "cuda_internal.h"
#include "../util/util.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* logits [N, E] -> i32 [N, k]: the k largest, largest first, ties to the
 * lower index; one thread per token */
int cg_emit_topk_experts(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    int64_t N = cg_lead(x);
    cg_begin(cg, n, "", "topk_experts: one thread per token, ties to the lower expert");
    cg_out(cg, n, "experts");
    cg_in(cg, x, "logits");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld, K = %lld;", (long long)cg_last(x), (long long)ir_attr_i(n, IR_ATTR_K));
    cg_line(cg, "MOEC_FOR(t, N) {");
    cg_line(cg, "    const float *l = logits + t * E;");
    cg_line(cg, "    for (int j = 0; j < K; j++) {");
    cg_line(cg, "        int best = -1;");
    cg_line(cg, "        for (int e = 0; e < E; e++) {");
    cg_line(cg, "            bool taken = false;");
    cg_line(cg, "            for (int q = 0; q < j; q++)");
    cg_line(cg, "                taken = taken || experts[t * K + q] == e;");
    cg_line(cg, "            if (!taken && (best < 0 || l[e] > l[best]))");
    cg_line(cg, "                best = e;");
    cg_line(cg, "        }");
    cg_line(cg, "        experts[t * K + j] = best;");
    cg_line(cg, "    }");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(N, CG_BLOCK));
    return 1;
}

/* softmax over the chosen logits, in double */
int cg_emit_topk_probs(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *ex = n->src[1];
    int64_t N = cg_lead(x);
    cg_begin(cg, n, "", "topk_probs: softmax over the chosen logits, one thread per token, double");
    cg_out(cg, n, "w");
    cg_in(cg, x, "logits");
    cg_in(cg, ex, "experts");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld, K = %lld;", (long long)cg_last(x), (long long)cg_last(ex));
    cg_line(cg, "MOEC_FOR(t, N) {");
    cg_line(cg, "    const float *l = logits + t * E;");
    cg_line(cg, "    const int *ch = experts + t * K;");
    cg_line(cg, "    double mx = moec::neg_inf(), sum = 0.0;");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        if (l[ch[j]] > mx)");
    cg_line(cg, "            mx = l[ch[j]];");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        sum += exp((double)l[ch[j]] - mx);");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        w[t * K + j] = (float)(exp((double)l[ch[j]] - mx) / sum);");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(N, CG_BLOCK));
    return 1;
}

/* dl[e_j] = w_j (dw_j - sum_l w_l dw_l), zero for experts not chosen */
int cg_emit_topk_probs_dx(Cg *cg, const IrNode *n)
{
    const IrNode *dw = n->src[0], *x = n->src[1], *ex = n->src[2];
    int64_t N = cg_lead(x);
    cg_begin(cg, n, "", "topk_probs_dx: one thread per token, double");
    cg_out(cg, n, "dl");
    cg_in(cg, dw, "dw");
    cg_in(cg, x, "logits");
    cg_in(cg, ex, "experts");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld, K = %lld;", (long long)cg_last(x), (long long)cg_last(dw));
    cg_line(cg, "MOEC_FOR(t, N) {");
    cg_line(cg, "    const float *l = logits + t * E;");
    cg_line(cg, "    const int *ch = experts + t * K;");
    cg_line(cg, "    double w[K], mx = moec::neg_inf(), sum = 0.0, dot = 0.0;");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        if (l[ch[j]] > mx)");
    cg_line(cg, "            mx = l[ch[j]];");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        sum += w[j] = exp((double)l[ch[j]] - mx);");
    cg_line(cg, "    for (int j = 0; j < K; j++) {");
    cg_line(cg, "        w[j] /= sum;");
    cg_line(cg, "        dot += w[j] * dw[t * K + j];");
    cg_line(cg, "    }");
    cg_line(cg, "    for (int e = 0; e < E; e++)");
    cg_line(cg, "        dl[t * E + e] = 0.0f;");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        dl[t * E + ch[j]] = (float)(w[j] * (dw[t * K + j] - dot));");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(N, CG_BLOCK));
    return 1;
}

/* --kernels fast (decision 47): route_plan and expert_counts over chunks of SORT_CH (token, slot) pairs, many
 * blocks (dense_fast.cuh sort_count, sort_place, sort_totals) where the reference runs one block: the
 * chunks' counts per expert, then each chunk's positions (route_plan) or the counts' sums (expert_counts).
 * The same integers as the reference: a stable counting sort has one result. */
static int64_t sort_chunk(int64_t pairs)
{
    /* 256 pairs (one pass of a block) per chunk, more when that would give over 264 chunks (2 x 132 SMs) */
    int64_t per = (pairs + 263) / 264;
    return 256 * ((per + 255) / 256 > 1 ? (per + 255) / 256 : 1);
}

static int route_fast(Cg *cg, const IrNode *n)
{
    const IrNode *ex = n->src[0];
    int64_t E = ir_attr_i(n, IR_ATTR_EXPERTS), pairs = ir_numel(ex), ch = sort_chunk(pairs);
    int64_t nch = (pairs + ch - 1) / ch;
    if (cg->kernel_choice != PLAN_KERNELS_FAST || E > 1024)
        return 0;
    int route = n->op == IR_OP_ROUTE_PLAN;
    int cnt = cg_ws(cg, n, PLAN_I32, nch * E, "chunk_counts");
    cg_impl(cg, "fast: the counting sort over chunks of pairs, many blocks");
    cg_begin(cg, n, "count", route ? "route_plan 1/2: each chunk's pairs per expert, a block per chunk (fast)"
                                   : "expert_counts 1/2: each chunk's pairs per expert, a block per chunk (fast)");
    cg_param(cg, cnt, 1, "cnt");
    cg_in(cg, ex, "experts");
    cg_i64(cg, pairs, "pairs");
    cg_i64(cg, ch, "chunk");
    cg_line(cg, "moec::fast::sort_count<%lld>(cnt, experts, pairs, chunk);", (long long)E);
    cg_end(cg, CG_BLOCK, nch);
    if (route) {
        cg_begin(cg, n, "place", "route_plan 2/2: each chunk's positions in the stable expert-major order, a block per "
                                 "chunk (fast)");
        cg_out(cg, n, "plan");
        cg_in(cg, ex, "experts");
        cg_param(cg, cnt, 0, "cnt");
        cg_i64(cg, pairs, "pairs");
        cg_i64(cg, ch, "chunk");
        cg_line(cg, "moec::fast::sort_place<%lld>(plan, experts, cnt, pairs, chunk);", (long long)E);
        cg_end(cg, CG_BLOCK, nch);
    } else {
        cg_begin(cg, n, "sum", "expert_counts 2/2: the chunks' counts added, a thread per expert (fast)");
        cg_out(cg, n, "counts");
        cg_param(cg, cnt, 0, "cnt");
        cg_i64(cg, nch, "chunks");
        cg_line(cg, "moec::fast::sort_totals<%lld>(counts, cnt, chunks);", (long long)E);
        cg_end(cg, CG_BLOCK, cg_grid(E, CG_BLOCK));
    }
    cg->dense_fast_used = 1;
    return 1;
}

/* experts [N, k] -> each (token, slot)'s row in stable expert-major order */
int cg_emit_route_plan(Cg *cg, const IrNode *n)
{
    if (route_fast(cg, n))
        return 1;
    const IrNode *ex = n->src[0];
    int64_t E = ir_attr_i(n, IR_ATTR_EXPERTS);
    int count = cg_ws(cg, n, PLAN_I32, E + 1, "count"), wcnt = cg_ws(cg, n, PLAN_I32, 8 * E, "wcnt");
    cg_begin(cg, n, "", "route_plan: stable counting sort of the (token, slot) pairs by expert, one block");
    cg_out(cg, n, "plan");
    cg_param(cg, count, 1, "count");
    cg_param(cg, wcnt, 1, "wcnt");
    cg_in(cg, ex, "experts");
    cg_i64(cg, ir_numel(ex), "PAIRS");
    cg_const(cg, "E", E);
    cg_line(cg, "moec::stable_bucket_sort<E, false>(plan, experts, count, wcnt, PAIRS);");
    cg_end(cg, CG_BLOCK, 1);
    return 1;
}

/* experts [N, k] -> i32 [E] split sizes */
int cg_emit_expert_counts(Cg *cg, const IrNode *n)
{
    if (route_fast(cg, n))
        return 1;
    const IrNode *ex = n->src[0];
    cg_begin(cg, n, "", "expert_counts: tokens per expert (integer atomics: deterministic), one block");
    cg_out(cg, n, "counts");
    cg_in(cg, ex, "experts");
    cg_i64(cg, ir_numel(ex), "PAIRS");
    cg_const(cg, "E", ir_attr_i(n, IR_ATTR_EXPERTS));
    cg_line(cg, "for (long long e = threadIdx.x; e < E; e += blockDim.x)");
    cg_line(cg, "    counts[e] = 0;");
    cg_line(cg, "__syncthreads();");
    cg_line(cg, "for (long long i = threadIdx.x; i < PAIRS; i += blockDim.x) {");
    cg_line(cg, "    int e = experts[i];");
    cg_line(cg, "    if (e < 0 || e >= E)");
    cg_line(cg, "        __trap(); /* an expert id out of range: the CPU backend stops too */");
    cg_line(cg, "    atomicAdd(&counts[e], 1);");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, 1);
    return 1;
}

int cg_emit_dispatch(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *plan = n->src[1];
    switch (n->op) {
    case IR_OP_DISPATCH: {
        int64_t T = cg_lead(plan), K = cg_last(plan), D = cg_last(x);
        if (cg_fast_reads_through(cg, n)) {
            cg->bufs[n->id].elided = 1;
            return 1; /* the fast grouped MLP gathers through it (cuda_moe_fast.c): no launch */
        }
        cg_begin(cg, n, "", "dispatch: copy each token to its k rows of the expert-major layout");
        cg_out(cg, n, "y");
        cg_in(cg, x, "x");
        cg_in(cg, plan, "plan");
        cg_i64(cg, T, "T");
        cg_const(cg, "K", K);
        cg_const(cg, "D", D);
        cg_line(cg, "MOEC_FOR(i, T * K * D)");
        cg_line(cg, "    y[plan[i / D] * D + i %% D] = x[i / D / K * D + i %% D];");
        cg_end(cg, CG_BLOCK, cg_grid(T * K * D, CG_BLOCK));
        return 1;
    }
    case IR_OP_DISPATCH_PROBS:
        cg_begin(cg, n, "", "dispatch_probs: the routing weights in expert-major order");
        cg_out(cg, n, "y");
        cg_in(cg, x, "p");
        cg_in(cg, plan, "plan");
        cg_i64(cg, ir_numel(x), "N");
        cg_line(cg, "MOEC_FOR(i, N)");
        cg_line(cg, "    y[plan[i]] = p[i];");
        cg_end(cg, CG_BLOCK, cg_grid(ir_numel(x), CG_BLOCK));
        return 1;
    default: /* IR_OP_DISPATCH_PROBS_DX */
        cg_begin(cg, n, "", "dispatch_probs_dx: back to (token, slot) order");
        cg_out(cg, n, "y");
        cg_in(cg, x, "dp");
        cg_in(cg, plan, "plan");
        cg_i64(cg, ir_numel(n), "N");
        cg_line(cg, "MOEC_FOR(i, N)");
        cg_line(cg, "    y[i] = dp[plan[i]];");
        cg_end(cg, CG_BLOCK, cg_grid(ir_numel(n), CG_BLOCK));
        return 1;
    }
}

/* y [R, D], plan [N, k] -> [N, D]: each token sums its k rows, slot order */
int cg_emit_combine(Cg *cg, const IrNode *n)
{
    if (cg_emit_combine_fast(cg, n))
        return 1;
    const IrNode *y = n->src[0], *plan = n->src[1];
    int64_t T = cg_lead(plan), K = cg_last(plan), D = cg_last(n);
    if (cg->kernel_choice == PLAN_KERNELS_FAST && D % 4 == 0 && K <= 16 && !cg_is_bf16(cg, y->id) &&
        !cg_is_bf16(cg, n->id) && cg_aligned(y, 16)) {
        /* decision 47: one block per token, 16-byte loads and stores; the reference's sums (bit for bit) */
        cg_begin(cg, n, "", "combine: each token sums its k expert rows, one block per token, 16-byte accesses (fast)");
        cg_out(cg, n, "out");
        cg_in(cg, y, "y");
        cg_in(cg, plan, "plan");
        cg_i64(cg, T, "T");
        cg_line(cg, "moec::fast::combine_rows<%lld, %lldll>(out, y, plan, T);", (long long)K, (long long)D);
        cg_end(cg, CG_BLOCK, min64(T, 65535));
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "", "combine: each token sums its k expert rows");
    cg_out(cg, n, "out");
    cg_in(cg, y, "y");
    cg_in(cg, plan, "plan");
    cg_i64(cg, T, "T");
    cg_const(cg, "K", K);
    cg_const(cg, "D", D);
    cg_line(cg, "MOEC_FOR(i, T * D) {");
    cg_line(cg, "    long long t = i / D, c = i %% D;");
    cg_line(cg, "    float acc = 0.0f;");
    cg_line(cg, "    for (int j = 0; j < K; j++)");
    cg_line(cg, "        acc += y[plan[t * K + j] * D + c];");
    cg_line(cg, "    out[i] = acc;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(T * D, CG_BLOCK));
    return 1;
}

static int64_t group_tiles(int64_t R, int64_t E, int64_t T) { return (R + T - 1) / T + E + 1; }

/* moec::GEMM_T and moec::MLP_TN in codegen/prelude.cuh: grouped_gemm and
 * grouped_gemm_wgrad take T x T output tiles (T-row tiles of each expert
 * group), T picked per launch by cg_gemm_tile from the static bound on the
 * tiles (grouped_linear and its dx: given at run time to
 * moec::grouped_gemm_tiled, as that bound scales with the batch, docs/
 * decisions.md 62; the weight gradient's does not); the fused MLP keeps
 * 16-row tiles (its workspace rows) and steps through the columns MLP_TN at
 * a time inside the block, and its weight gradients stay on GEMM_T x GEMM_T. */
enum { GEMM_T = CG_GEMM_T };

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* grouped_linear: x [R, IN], w [E, OUT, IN], splits -> [R, OUT];
 * _dx: dy [R, OUT], w, splits -> [R, IN]; _dw: dy [R, OUT], x [R, IN],
 * splits -> [E, OUT, IN] */
int cg_emit_grouped_linear(Cg *cg, const IrNode *n)
{
    const IrNode *s0 = n->src[0], *s1 = n->src[1], *sp = n->src[2];
    const IrNode *w = n->op == IR_OP_GROUPED_LINEAR_DW ? n : s1;
    int64_t E = w->shape[0], OUT = w->shape[1], IN = w->shape[2], R = s0->shape[0];
    /* the output: [R, OUT], [R, IN] or E x [OUT, IN] */
    int64_t ncols = n->op == IR_OP_GROUPED_LINEAR ? OUT : IN;
    int t = n->op == IR_OP_GROUPED_LINEAR_DW ? cg_gemm_tile(E, OUT, 0, IN) : cg_gemm_tile(1, R, E + 1, ncols);
    int64_t blocks = n->op == IR_OP_GROUPED_LINEAR_DW ? cg_gemm_blocks(E, OUT, 0, IN, t)
                                                      : cg_gemm_blocks(1, R, E + 1, ncols, t);
    char what[128];
    switch (n->op) {
    case IR_OP_GROUPED_LINEAR:
        snprintf(what, sizeof what,
                 "grouped_linear: each expert group's rows times its weight (%d x %d tiles, %d-row tiles per group)", t,
                 t, t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "y");
        cg_in(cg, s0, "x");
        cg_in(cg, s1, "w");
        cg_in(cg, sp, "splits");
        cg_i64(cg, R, "R");
        cg_i32(cg, t, "tile");
        cg_line(cg, "constexpr int E = %lld;", (long long)E);
        cg_const(cg, "IN", IN);
        cg_const(cg, "OUT", OUT);
        cg_line(cg, "moec::grouped_gemm_tiled<E, IN, OUT, OUT * IN, 1, IN>(y, x, w, splits, R, tile);");
        break;
    case IR_OP_GROUPED_LINEAR_DX:
        snprintf(what, sizeof what, "grouped_linear_dx: dx = dy w per expert group (%d x %d tiles)", t, t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "dx");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "w");
        cg_in(cg, sp, "splits");
        cg_i64(cg, R, "R");
        cg_i32(cg, t, "tile");
        cg_line(cg, "constexpr int E = %lld;", (long long)E);
        cg_const(cg, "IN", IN);
        cg_const(cg, "OUT", OUT);
        cg_line(cg, "moec::grouped_gemm_tiled<E, OUT, IN, OUT * IN, IN, 1>(dx, dy, w, splits, R, tile);");
        break;
    default: /* IR_OP_GROUPED_LINEAR_DW */
        snprintf(what, sizeof what, "grouped_linear_dw: dw[e] = dy^T x over the rows of group e (%d x %d tiles)", t,
                 t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "dw");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "x");
        cg_in(cg, sp, "splits");
        cg_i64(cg, R, "R");
        cg_line(cg, "constexpr int E = %lld;", (long long)E);
        cg_const(cg, "IN", IN);
        cg_const(cg, "OUT", OUT);
        cg_line(cg, "moec::grouped_gemm_wgrad<E, OUT, IN, %d>(dw, dy, x, splits, R);", t);
        break;
    }
    cg_end(cg, CG_BLOCK, min64(blocks, 65535));
    return 1;
}

/* A kernel that quantizes weights for an MXFP8 GEMM: up to three tensors,
 * each [BATCH, ROWS, COLS], rowwise (blocks of 32 along COLS) or colwise
 * (blocks of 32 rows in a column), one thread per block. */
typedef struct WeightQ {
    int in, out;           /* buffers */
    const char *in_name, *out_name;
    int64_t batch, rows, cols;
    int colwise;
} WeightQ;

static void emit_weight_quant(Cg *cg, const IrNode *n, const WeightQ *q, int nq, const char *what)
{
    cg_begin(cg, n, "quant_w", what);
    for (int i = 0; i < nq; i++)
        cg_param(cg, q[i].out, 1, q[i].out_name);
    for (int i = 0; i < nq; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= q[j].in == q[i].in;
        if (!dup)
            cg_param(cg, q[i].in, 0, q[i].in_name);
    }
    int64_t lo[4] = {0};
    for (int i = 0; i < nq; i++)
        lo[i + 1] = lo[i] + q[i].batch * q[i].rows * q[i].cols / 32;
    cg_const(cg, "NB", lo[nq]);
    cg_line(cg, "MOEC_FOR(b, NB) {");
    for (int i = 0; i < nq; i++) {
        const WeightQ *w = &q[i];
        if (i + 1 < nq)
            cg_line(cg, "    %sif (b < %lld) {", i ? "} else " : "", (long long)lo[i + 1]);
        else if (i)
            cg_line(cg, "    } else {");
        const char *ind = nq > 1 ? "        " : "    ";
        if (!w->colwise) {
            cg_line(cg, "%s/* %s: rowwise, [%lld, %lld] in blocks of 32 along the last dimension */", ind,
                    w->out_name, (long long)(w->batch * w->rows), (long long)w->cols);
            if (lo[i])
                cg_line(cg, "%slong long first = (b - %lld) * 32;", ind, (long long)lo[i]);
            else
                cg_line(cg, "%slong long first = b * 32;", ind);
            cg_line(cg, "%smoec_mx_fq_block(%s + first, %s + first, 1, 32);", ind, w->in_name, w->out_name);
        } else {
            cg_line(cg, "%s/* %s: colwise, %lld x [%lld, %lld] in blocks of 32 rows of a column */", ind, w->out_name,
                    (long long)w->batch, (long long)w->rows, (long long)w->cols);
            char kb[48] = "b";
            if (lo[i])
                snprintf(kb, sizeof kb, "b - %lld", (long long)lo[i]);
            cg_line(cg, "%slong long k = %s, c = k %% %lld, rb = k / %lld %% %lld, m = k / %lld;", ind, kb,
                    (long long)w->cols, (long long)w->cols, (long long)(w->rows / 32),
                    (long long)(w->cols * (w->rows / 32)));
            cg_line(cg, "%slong long first = m * %lld + rb * %lld + c;", ind, (long long)(w->rows * w->cols),
                    (long long)(32 * w->cols));
            cg_line(cg, "%smoec_mx_fq_block(%s + first, %s + first, %lld, 32);", ind, w->in_name, w->out_name,
                    (long long)w->cols);
        }
    }
    if (nq > 1)
        cg_line(cg, "    }");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(lo[nq], CG_BLOCK));
}

static int check_mx_dims(Cg *cg, const IrNode *n, int64_t H, int64_t F)
{
    if (H % 32 || F % 32) {
        cg_error(cg, n, "%s: mxfp8 needs the hidden size %lld and the expert FFN size %lld to be multiples of 32",
                 n->name, (long long)H, (long long)F);
        return 0;
    }
    return 1;
}

/* --kernels fast: 1 if the node qualifies for the fast kernels, else 0 with the reason as its "impl" */
static int fast_or_why(Cg *cg, const IrNode *n)
{
    char why[512], impl[560];
    if (cuda_fast_mlp_ok(n, why, sizeof why))
        return 1;
    snprintf(impl, sizeof impl, "reference: %s", why);
    cg_impl(cg, impl);
    return 0;
}

/* fp8-block has no reference kernels: a node the fast ones cannot take is refused, with their reason */
static int refuse_fp8b(Cg *cg, const IrNode *n)
{
    if (ir_attr_e(n, IR_ATTR_PRECISION) != IR_PREC_FP8_BLOCK)
        return 0;
    char why[512];
    if (cg->kernel_choice != PLAN_KERNELS_FAST)
        snprintf(why, sizeof why, "the reference kernels have no fp8-block path");
    else
        cuda_fast_mlp_ok(n, why, sizeof why);
    cg_error(cg, n, "%s: " CG_FP8_BLOCK_CPU_ONLY " (%s)", n->name, why);
    return 1;
}

/* xs [R, H], w_gate_up [E, 2F, H], w_down [E, H, F], splits [E], probs [R] -> [R, H] */
int cg_emit_grouped_mlp(Cg *cg, const IrNode *n)
{
    const IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *sp = n->src[3], *p = n->src[4];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    int mx = cg_is_mxfp8(n);
    if (cg->kernel_choice == PLAN_KERNELS_FAST && fast_or_why(cg, n))
        return cg_emit_grouped_mlp_fast(cg, n);
    if (refuse_fp8b(cg, n))
        return 0;
    if (mx && !check_mx_dims(cg, n, H, F))
        return 0;
    int h = cg_ws(cg, n, PLAN_F32, R * 2 * F, "h"), a = cg_ws(cg, n, PLAN_F32, R * F, "a");
    int qx = -1, q1 = -1, q2 = -1;
    if (mx) {
        qx = cg_ws(cg, n, PLAN_F32, R * H, "qx");
        q1 = cg_ws(cg, n, PLAN_F32, E * 2 * F * H, "q_w_gate_up");
        q2 = cg_ws(cg, n, PLAN_F32, E * H * F, "q_w_down");
        WeightQ q[2] = {{w1->id, q1, "w1", "q1", 1, E * 2 * F, H, 0}, {w2->id, q2, "w2", "q2", 1, E * H, F, 0}};
        emit_weight_quant(cg, n, q, 2, "grouped_mlp 1/2: MXFP8 copies of the weights, rowwise along the reduction "
                                       "dimension (H for gate_up, F for down)");
    }
    cg_begin(cg, n, "", mx ? "grouped_mlp 2/2: the whole expert MLP per 16-row tile of an expert group: quantize "
                             "the rows, gate_up GEMM, scaled SwiGLU, quantize, down GEMM"
                           : "grouped_mlp: the whole expert MLP per 16-row tile of an expert group: gate_up GEMM, "
                             "scaled SwiGLU, down GEMM");
    cg_out(cg, n, "y");
    cg_param(cg, h, 1, "h");
    cg_param(cg, a, 1, "a");
    if (mx)
        cg_param(cg, qx, 1, "qx");
    cg_in(cg, xs, "xs");
    cg_param(cg, mx ? q1 : w1->id, 0, "w1");
    cg_param(cg, mx ? q2 : w2->id, 0, "w2");
    cg_in(cg, sp, "splits");
    cg_in(cg, p, "p");
    cg_i64(cg, R, "R");
    cg_line(cg, "constexpr int E = %lld;", (long long)E);
    cg_const(cg, "H", H);
    cg_const(cg, "F", F);
    cg_line(cg, "moec::grouped_mlp_fwd<E, H, F, %s>(y, h, a, %s, xs, w1, w2, splits, p, R);", mx ? "true" : "false",
            mx ? "qx" : "nullptr");
    cg_end(cg, CG_BLOCK, min64(group_tiles(R, E, 16), 65535));
    return 1;
}

/* dy [R, H], xs, w_gate_up, w_down, splits, probs -> [dxs | dprobs | dw_gate_up | dw_down] */
int cg_emit_grouped_mlp_bwd(Cg *cg, const IrNode *n)
{
    const IrNode *dy = n->src[0], *xs = n->src[1], *w1 = n->src[2], *w2 = n->src[3], *sp = n->src[4], *p = n->src[5];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    int mx = cg_is_mxfp8(n);
    if (cg->kernel_choice == PLAN_KERNELS_FAST && fast_or_why(cg, n))
        return cg_emit_grouped_mlp_bwd_fast(cg, n);
    if (refuse_fp8b(cg, n))
        return 0;
    if (mx && !check_mx_dims(cg, n, H, F))
        return 0;
    int h = cg_ws(cg, n, PLAN_F32, R * 2 * F, "h"), a = cg_ws(cg, n, PLAN_F32, R * F, "a");
    int da = cg_ws(cg, n, PLAN_F32, R * F, "da"), dh = cg_ws(cg, n, PLAN_F32, R * 2 * F, "dh");
    int qx = -1, qdy = -1, qdh = -1, q1 = -1, q1c = -1, q2c = -1, qdyg = -1, qag = -1, qdhg = -1, qxg = -1;
    const char *steps = mx ? "4" : "2";
    char what[256];
    if (mx) {
        qx = cg_ws(cg, n, PLAN_F32, R * H, "qx");
        qdy = cg_ws(cg, n, PLAN_F32, R * H, "qdy");
        qdh = cg_ws(cg, n, PLAN_F32, R * 2 * F, "qdh");
        q1 = cg_ws(cg, n, PLAN_F32, E * 2 * F * H, "q_w_gate_up");
        q1c = cg_ws(cg, n, PLAN_F32, E * 2 * F * H, "q_w_gate_up_colwise");
        q2c = cg_ws(cg, n, PLAN_F32, E * H * F, "q_w_down_colwise");
        qdyg = cg_ws(cg, n, PLAN_F32, R * H, "qdy_grouped");
        qag = cg_ws(cg, n, PLAN_F32, R * F, "qa_grouped");
        qdhg = cg_ws(cg, n, PLAN_F32, R * 2 * F, "qdh_grouped");
        qxg = cg_ws(cg, n, PLAN_F32, R * H, "qx_grouped");
        WeightQ q[3] = {{w1->id, q1, "w1", "q1", 1, E * 2 * F, H, 0},
                        {w1->id, q1c, "w1", "q1c", E, 2 * F, H, 1},
                        {w2->id, q2c, "w2", "q2c", E, H, F, 1}};
        snprintf(what, sizeof what, "grouped_mlp_bwd 1/%s: MXFP8 copies of the weights: gate_up rowwise (forward), "
                                    "gate_up and down colwise (dgrad)", steps);
        emit_weight_quant(cg, n, q, 3, what);
    }
    snprintf(what, sizeof what, "grouped_mlp_bwd %s/%s: per 16-row tile of an expert group: recompute h and a, da = "
                                "dy w_down, dSwiGLU, dprobs, dxs = dh w_gate_up", mx ? "2" : "1", steps);
    cg_begin(cg, n, "rows", what);
    cg_out(cg, n, "out");
    cg_param(cg, h, 1, "h");
    cg_param(cg, a, 1, "a");
    cg_param(cg, da, 1, "da");
    cg_param(cg, dh, 1, "dh");
    if (mx) {
        cg_param(cg, qx, 1, "qx");
        cg_param(cg, qdy, 1, "qdy");
        cg_param(cg, qdh, 1, "qdh");
    }
    cg_in(cg, dy, "dy");
    cg_in(cg, xs, "xs");
    if (mx) {
        cg_param(cg, q1, 0, "w1");
        cg_param(cg, q1c, 0, "w1c");
        cg_param(cg, q2c, 0, "w2c");
    } else {
        cg_in(cg, w1, "w1");
        cg_in(cg, w2, "w2");
    }
    cg_in(cg, sp, "splits");
    cg_in(cg, p, "p");
    cg_i64(cg, R, "R");
    cg_line(cg, "constexpr int E = %lld;", (long long)E);
    cg_const(cg, "H", H);
    cg_const(cg, "F", F);
    cg_line(cg, "float *dxs = out, *dp = out + R * H;");
    if (mx)
        cg_line(cg, "moec::grouped_mlp_bwd_rows<E, H, F, true>(dxs, dp, h, a, da, dh, qx, qdy, qdh, dy, xs, w1, w1c, "
                    "w2c, splits, p, R);");
    else
        cg_line(cg, "moec::grouped_mlp_bwd_rows<E, H, F, false>(dxs, dp, h, a, da, dh, nullptr, nullptr, nullptr, dy, "
                    "xs, w1, w1, w2, splits, p, R);");
    cg_end(cg, CG_BLOCK, min64(group_tiles(R, E, 16), 65535));

    if (mx) {
        snprintf(what, sizeof what, "grouped_mlp_bwd 3/4: MXFP8 copies for the weight gradients: dy, a, dh and xs "
                                    "colwise in blocks of 32 rows within each expert group");
        cg_begin(cg, n, "quant_g", what);
        cg_param(cg, qdyg, 1, "qdyg");
        cg_param(cg, qag, 1, "qag");
        cg_param(cg, qdhg, 1, "qdhg");
        cg_param(cg, qxg, 1, "qxg");
        cg_in(cg, dy, "dy");
        cg_param(cg, a, 0, "a");
        cg_param(cg, dh, 0, "dh");
        cg_in(cg, xs, "xs");
        cg_in(cg, sp, "splits");
        cg_i64(cg, R, "R");
        cg_line(cg, "constexpr int E = %lld;", (long long)E);
        cg_const(cg, "H", H);
        cg_const(cg, "F", F);
        cg_line(cg, "moec::quantize_grouped<E, H>(qdyg, dy, splits, R);");
        cg_line(cg, "moec::quantize_grouped<E, F>(qag, a, splits, R);");
        cg_line(cg, "moec::quantize_grouped<E, 2 * F>(qdhg, dh, splits, R);");
        cg_line(cg, "moec::quantize_grouped<E, H>(qxg, xs, splits, R);");
        cg_end(cg, CG_BLOCK, cg_grid(group_tiles(R, E, 32) * 2 * F, CG_BLOCK));
    }

    snprintf(what, sizeof what, "grouped_mlp_bwd %s/%s: weight gradients dw_down = dy^T a, dw_gate_up = dh^T xs per "
                                "expert group", steps, steps);
    cg_begin(cg, n, "wgrad", what);
    cg_out(cg, n, "out");
    if (mx) {
        cg_param(cg, qdyg, 0, "dy");
        cg_param(cg, qag, 0, "a");
        cg_param(cg, qdhg, 0, "dh");
        cg_param(cg, qxg, 0, "xs");
    } else {
        cg_in(cg, dy, "dy");
        cg_param(cg, a, 0, "a");
        cg_param(cg, dh, 0, "dh");
        cg_in(cg, xs, "xs");
    }
    cg_in(cg, sp, "splits");
    cg_i64(cg, R, "R");
    cg_line(cg, "constexpr int E = %lld;", (long long)E);
    cg_const(cg, "H", H);
    cg_const(cg, "F", F);
    cg_line(cg, "float *dw1 = out + R * H + R, *dw2 = dw1 + E * 2 * F * H;");
    cg_line(cg, "moec::grouped_gemm_wgrad<E, H, F>(dw2, dy, a, splits, R);");
    cg_line(cg, "moec::grouped_gemm_wgrad<E, 2 * F, H>(dw1, dh, xs, splits, R);");
    cg_end(cg, CG_BLOCK,
           min64(E * (ceil_div(H, GEMM_T) * ceil_div(F, GEMM_T) + ceil_div(2 * F, GEMM_T) * ceil_div(H, GEMM_T)), 65535));
    return 1;
}

/* x -> its MXFP8 values (dequantized): rowwise blocks of 32 along the last
 * dimension, or colwise blocks of 32 along the one before */
int cg_emit_quantize(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    int row = ir_attr_e(n, IR_ATTR_AXIS) == IR_AXIS_ROWWISE;
    int64_t cols = cg_last(x), rows = row ? ir_numel(x) / cols : x->shape[x->rank - 2];
    cg_begin(cg, n, "", row ? "quantize_mxfp8 rowwise: one thread per block of 32 along the last dimension"
                            : "quantize_mxfp8 colwise: one thread per block of 32 rows in a column");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_i64(cg, ir_numel(x) / 32, "NB");
    if (row) {
        cg_line(cg, "MOEC_FOR(b, NB)");
        cg_line(cg, "    moec_mx_fq_block(x + b * 32, y + b * 32, 1, 32);");
    } else {
        cg_const(cg, "ROWS", rows);
        cg_const(cg, "COLS", cols);
        cg_line(cg, "MOEC_FOR(b, NB) {");
        cg_line(cg, "    long long c = b %% COLS, rb = b / COLS %% (ROWS / 32), m = b / (COLS * (ROWS / 32));");
        cg_line(cg, "    long long first = m * ROWS * COLS + rb * 32 * COLS + c;");
        cg_line(cg, "    moec_mx_fq_block(x + first, y + first, COLS, 32);");
        cg_line(cg, "}");
    }
    cg_end(cg, CG_BLOCK, cg_grid(ir_numel(x) / 32, CG_BLOCK));
    return 1;
}

/* x [R, C], splits -> colwise blocks of 32 rows within each expert group */
int cg_emit_quantize_grouped(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *sp = n->src[1];
    int64_t R = x->shape[0], C = x->shape[1], E = sp->shape[0];
    cg_begin(cg, n, "", "quantize_mxfp8_grouped: colwise blocks of 32 rows inside each expert group, zero-padded");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_in(cg, sp, "splits");
    cg_i64(cg, R, "R");
    cg_line(cg, "constexpr int E = %lld;", (long long)E);
    cg_const(cg, "C", C);
    cg_line(cg, "moec::quantize_grouped<E, C>(y, x, splits, R);");
    cg_end(cg, CG_BLOCK, cg_grid(group_tiles(R, E, 32) * C, CG_BLOCK));
    return 1;
}

/* recv counts [EP, EL] -> local split sizes [EL] */
int cg_emit_ep_local_splits(Cg *cg, const IrNode *n)
{
    const IrNode *rc = n->src[0];
    cg_begin(cg, n, "", "ep_local_splits: rows per local expert, summed over the source ranks");
    cg_out(cg, n, "splits");
    cg_in(cg, rc, "rc");
    cg_const(cg, "EP", rc->shape[0]);
    cg_const(cg, "EL", rc->shape[1]);
    cg_line(cg, "MOEC_FOR(e, EL) {");
    cg_line(cg, "    int sum = 0;");
    cg_line(cg, "    for (long long i = 0; i < EP; i++)");
    cg_line(cg, "        sum += rc[i * EL + e];");
    cg_line(cg, "    splits[e] = sum;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(rc->shape[1], CG_BLOCK));
    return 1;
}

/* [Rc(, D)] by source rank <-> by local expert */
int cg_emit_ep_permute(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *rc = n->src[1];
    int64_t EP = rc->shape[0], EL = rc->shape[1], D = x->rank == 2 ? x->shape[1] : 1;
    if (EP * EL > 1024) {
        cg_error(cg, n, "%s: %lld ranks x %lld local experts: the CUDA ep_sort kernel handles at most 1024 blocks",
                 n->name, (long long)EP, (long long)EL);
        return 0;
    }
    int sort = n->op == IR_OP_EP_SORT;
    cg_begin(cg, n, "", sort ? "ep_sort: received rows from (source rank, expert) to (expert, source rank) order"
                             : "ep_unsort: rows from (expert, source rank) back to (source rank, expert) order");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_in(cg, rc, "rc");
    cg_i64(cg, x->shape[0], "ROWS");
    cg_line(cg, "constexpr int EP = %lld, EL = %lld;", (long long)EP, (long long)EL);
    cg_const(cg, "D", D);
    cg_line(cg, "moec::ep_permute<EP, EL, D, %s>(y, x, rc, ROWS);", sort ? "true" : "false");
    cg_end(cg, CG_BLOCK, cg_grid(x->shape[0] * D, CG_BLOCK));
    return 1;
}
