/* cuda_loss.c - emitters for the objectives and their gradients:
 * cross-entropy (also the masked-LM loss), the Switch load-balancing
 * loss and the mean square (the layer benchmark's). Softmax statistics and sums in double, as kernels.inc; a mean over
 * rows is per-row work (one block per row) then one block that adds the
 * rows in a fixed tree. */
#include "cuda_internal.h"
#include "../util/util.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t ignore_of(const IrNode *n)
{
    return ir_has_attr(n, IR_ATTR_IGNORE) ? ir_attr_i(n, IR_ATTR_IGNORE) : -100;
}

/* the row's max and sum of exp(l - max) over V logits, by the whole block */
static void softmax_stats_lines(Cg *cg, const char *ind)
{
    cg_line(cg, "%sdouble mx = moec::neg_inf(), sum = 0.0;", ind);
    cg_line(cg, "%sfor (long long v = threadIdx.x; v < V; v += blockDim.x)", ind);
    cg_line(cg, "%s    if (l[v] > mx)", ind);
    cg_line(cg, "%s        mx = l[v];", ind);
    cg_line(cg, "%smx = moec::block_max<%d>(mx);", ind, CG_BLOCK);
    cg_line(cg, "%sfor (long long v = threadIdx.x; v < V; v += blockDim.x)", ind);
    cg_line(cg, "%s    sum += exp((double)l[v] - mx);", ind);
    cg_line(cg, "%ssum = moec::block_sum<%d>(sum);", ind, CG_BLOCK);
}

/* --kernels fast (decision 52): the streamed cross entropy, one warp per row (dense_fast.cuh ce_rows_warp,
 * ce_dx_rows_kept), where V % 4 == 0 and the logits start 16-byte aligned: the forward reads each row once
 * with an online max and sum and keeps (max, sum) per row for its gradient, which then reads each row once
 * and writes it once. */
enum { CE_WARPS = 8 }; /* rows (warps) per block of the streamed kernels */

static int ce_stream_ok(const Cg *cg, const IrNode *logits)
{
    int64_t V = cg_last(logits);
    return cg->kernel_choice == PLAN_KERNELS_FAST && V % 4 == 0 && V >= 4 && V < ((int64_t)1 << 30) &&
           cg_aligned(logits, 16);
}

/* the cross_entropy_dx node of forward f (the same logits, targets and ignore index), else NULL */
static const IrNode *ce_backward_of(const Cg *cg, const IrNode *f)
{
    for (int i = f->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *b = cg->g->nodes[i];
        if (b->op == IR_OP_CROSS_ENTROPY_DX && b->src[1] == f->src[0] && b->src[2] == f->src[1] &&
            ignore_of(b) == ignore_of(f))
            return b;
    }
    return NULL;
}

/* the kept (max, sum) workspace that backward b reads, else -1 */
static int ce_kept_stats(Cg *cg, const IrNode *b)
{
    for (int i = b->id - 1; i >= 0; i--) {
        const IrNode *f = cg->g->nodes[i];
        if ((f->op == IR_OP_CROSS_ENTROPY || f->op == IR_OP_MASKED_LM_LOSS) && ce_backward_of(cg, f) == b) {
            int w = cg_find_ws(cg, f, "row_stats");
            return w >= 0 && cg->bufs[w].until == b->id ? w : -1;
        }
    }
    return -1;
}

/* mean over rows whose target is neither ignore nor out of range of
 * -log softmax(logits)[target] */
int cg_emit_cross_entropy(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *tg = n->src[1];
    int64_t N = cg_lead(x), V = cg_last(x);
    int rowloss = cg_ws(cg, n, PLAN_F64, N, "row_loss"), valid = cg_ws(cg, n, PLAN_I32, N, "row_counted");
    if (ce_stream_ok(cg, x)) {
        const IrNode *b = ce_backward_of(cg, n);
        int keep = b && ce_stream_ok(cg, b->src[1]);
        int stats = keep ? cg_ws_kept(cg, n, b, PLAN_F64, 2 * N, "row_stats") : -1;
        cg_impl(cg, keep ? "fast: one warp per row, read once (16-byte loads), online max and sum, exp in fp32; "
                           "(max, sum) kept for the gradient"
                         : "fast: one warp per row, read once (16-byte loads), online max and sum, exp in fp32");
        cg_begin(cg, n, "rows", "cross-entropy 1/2: each row's loss, one warp per row streaming it once, online max "
                                "and sum, exp in fp32, sums in double (fast)");
        cg_param(cg, rowloss, 1, "row_loss");
        cg_param(cg, valid, 1, "row_counted");
        if (keep)
            cg_param(cg, stats, 1, "stats");
        cg_in(cg, x, "logits");
        cg_in(cg, tg, "targets");
        cg_i64(cg, N, "N");
        cg_line(cg, "moec::fast::ce_rows_warp<%lld, %lldll, %s>(row_loss, row_counted, %s, logits, targets, N);",
                (long long)V, (long long)ignore_of(n), keep ? "true" : "false", keep ? "stats" : "nullptr");
        cg_end(cg, 32 * CE_WARPS, min64((N + CE_WARPS - 1) / CE_WARPS, 65535));
        cg->dense_fast_used = 1;
    } else {
        cg_begin(cg, n, "rows", "cross-entropy 1/2: each row's loss, one block per row (log-sum-exp in double)");
        cg_param(cg, rowloss, 1, "row_loss");
        cg_param(cg, valid, 1, "row_counted");
        cg_in(cg, x, "logits");
        cg_in(cg, tg, "targets");
        cg_i64(cg, N, "N");
        cg_const(cg, "V", V);
        cg_const(cg, "IGNORE", ignore_of(n));
        cg_line(cg, "for (long long r = blockIdx.x; r < N; r += gridDim.x) {");
        cg_line(cg, "    int t = targets[r];");
        cg_line(cg, "    bool counted = !(t == IGNORE || t < 0 || t >= V);");
        cg_line(cg, "    double loss = 0.0;");
        cg_line(cg, "    if (counted) { /* the same for the whole block */");
        cg_line(cg, "        const float *l = logits + r * V;");
        softmax_stats_lines(cg, "        ");
        cg_line(cg, "        loss = log(sum) + mx - l[t];");
        cg_line(cg, "    }");
        cg_line(cg, "    if (threadIdx.x == 0) {");
        cg_line(cg, "        row_loss[r] = loss;");
        cg_line(cg, "        row_counted[r] = counted;");
        cg_line(cg, "    }");
        cg_line(cg, "}");
        cg_end(cg, CG_BLOCK, min64(N, 65535));
    }

    cg_begin(cg, n, "mean", "cross-entropy 2/2: the mean over the counted rows, one block");
    cg_out(cg, n, "loss");
    cg_param(cg, rowloss, 0, "row_loss");
    cg_param(cg, valid, 0, "row_counted");
    cg_i64(cg, N, "N");
    cg_line(cg, "double total = 0.0, count = 0.0;");
    cg_line(cg, "for (long long r = threadIdx.x; r < N; r += blockDim.x) {");
    cg_line(cg, "    total += row_loss[r];");
    cg_line(cg, "    count += row_counted[r];");
    cg_line(cg, "}");
    cg_line(cg, "total = moec::block_sum<%d>(total);", CG_BLOCK);
    cg_line(cg, "count = moec::block_sum<%d>(count);", CG_BLOCK);
    cg_line(cg, "if (threadIdx.x == 0)");
    cg_line(cg, "    loss[0] = (float)(count > 0.0 ? total / count : 0.0);");
    cg_end(cg, CG_BLOCK, 1);
    return 1;
}

/* dl [], logits [N, V], targets [N] -> dl (softmax - onehot) / counted rows */
int cg_emit_cross_entropy_dx(Cg *cg, const IrNode *n)
{
    const IrNode *dl = n->src[0], *x = n->src[1], *tg = n->src[2];
    int64_t N = cg_lead(x), V = cg_last(x);
    int cnt = cg_ws(cg, n, PLAN_I32, 1, "count");
    cg_begin(cg, n, "count", "cross_entropy_dx 1/2: the number of counted rows, one block");
    cg_param(cg, cnt, 1, "count");
    cg_in(cg, tg, "targets");
    cg_i64(cg, N, "N");
    cg_const(cg, "V", V);
    cg_const(cg, "IGNORE", ignore_of(n));
    cg_line(cg, "double c = 0.0;");
    cg_line(cg, "for (long long r = threadIdx.x; r < N; r += blockDim.x)");
    cg_line(cg, "    c += !(targets[r] == IGNORE || targets[r] < 0 || targets[r] >= V);");
    cg_line(cg, "c = moec::block_sum<%d>(c);", CG_BLOCK);
    cg_line(cg, "if (threadIdx.x == 0)");
    cg_line(cg, "    count[0] = (int)c;");
    cg_end(cg, CG_BLOCK, 1);

    int stats = ce_stream_ok(cg, x) ? ce_kept_stats(cg, n) : -1;
    if (stats >= 0) {
        cg_impl(cg, "fast: one warp per row with the forward's (max, sum): logits read once, dx written once, "
                    "16-byte accesses");
        cg_begin(cg, n, "rows", "cross_entropy_dx 2/2: one warp per row with the forward's kept (max, sum): read "
                                "once, written once, 16-byte accesses, softmax in fp32 (fast)");
        cg_out(cg, n, "dx");
        cg_in(cg, dl, "dloss");
        cg_in(cg, x, "logits");
        cg_in(cg, tg, "targets");
        cg_param(cg, cnt, 0, "count");
        cg_param(cg, stats, 0, "stats");
        cg_i64(cg, N, "N");
        cg_line(cg, "moec::fast::ce_dx_rows_kept<%lld, %lldll>(dx, dloss, logits, targets, count, stats, N);",
                (long long)V, (long long)ignore_of(n));
        cg_end(cg, 32 * CE_WARPS, min64((N + CE_WARPS - 1) / CE_WARPS, 65535));
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "rows", "cross_entropy_dx 2/2: one block per row, softmax in double");
    cg_out(cg, n, "dx");
    cg_in(cg, dl, "dloss");
    cg_in(cg, x, "logits");
    cg_in(cg, tg, "targets");
    cg_param(cg, cnt, 0, "count");
    cg_i64(cg, N, "N");
    cg_const(cg, "V", V);
    cg_const(cg, "IGNORE", ignore_of(n));
    cg_line(cg, "double dl = dloss[0];");
    cg_line(cg, "int cnt = count[0];");
    cg_line(cg, "for (long long r = blockIdx.x; r < N; r += gridDim.x) {");
    cg_line(cg, "    int t = targets[r];");
    cg_line(cg, "    const float *l = logits + r * V;");
    cg_line(cg, "    float *d = dx + r * V;");
    cg_line(cg, "    if (t == IGNORE || t < 0 || t >= V || cnt == 0) { /* the same for the whole block */");
    cg_line(cg, "        for (long long v = threadIdx.x; v < V; v += blockDim.x)");
    cg_line(cg, "            d[v] = 0.0f;");
    cg_line(cg, "        continue;");
    cg_line(cg, "    }");
    softmax_stats_lines(cg, "    ");
    cg_line(cg, "    for (long long v = threadIdx.x; v < V; v += blockDim.x)");
    cg_line(cg, "        d[v] = (float)(dl * (exp((double)l[v] - mx) / sum - (v == t)) / (double)cnt);");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, min64(N, 65535));
    return 1;
}

/* f_e = the fraction of (token, slot) pairs routed to e, added 1/N at a
 * time as kernels.inc does (so bit for bit the CPU's): into f[E], shared */
static void aux_counts_lines(Cg *cg)
{
    cg_line(cg, "__shared__ int cnt[E];");
    cg_line(cg, "for (int e = threadIdx.x; e < E; e += blockDim.x)");
    cg_line(cg, "    cnt[e] = 0;");
    cg_line(cg, "__syncthreads();");
    cg_line(cg, "for (long long i = threadIdx.x; i < N * K; i += blockDim.x)");
    cg_line(cg, "    if (experts[i] >= 0 && experts[i] < E)");
    cg_line(cg, "        atomicAdd(&cnt[experts[i]], 1);");
    cg_line(cg, "__syncthreads();");
    cg_line(cg, "for (int e = threadIdx.x; e < E; e += blockDim.x) {");
    cg_line(cg, "    double fe = 0.0;");
    cg_line(cg, "    for (int c = 0; c < cnt[e]; c++)");
    cg_line(cg, "        fe += 1.0 / (double)N;");
    cg_line(cg, "    f[e] = fe;");
    cg_line(cg, "}");
    cg_line(cg, "__syncthreads();");
}

/* the token's softmax over E logits, in double, into p[E] */
static void softmax_row_lines(Cg *cg, const char *ind)
{
    cg_line(cg, "%sconst float *l = logits + t * E;", ind);
    cg_line(cg, "%sdouble mx = moec::neg_inf(), sum = 0.0;", ind);
    cg_line(cg, "%sfor (int e = 0; e < E; e++)", ind);
    cg_line(cg, "%s    if (l[e] > mx)", ind);
    cg_line(cg, "%s        mx = l[e];", ind);
    cg_line(cg, "%sfor (int e = 0; e < E; e++)", ind);
    cg_line(cg, "%s    sum += p[e] = exp((double)l[e] - mx);", ind);
    cg_line(cg, "%sfor (int e = 0; e < E; e++)", ind);
    cg_line(cg, "%s    p[e] /= sum;", ind);
}

static int check_experts(Cg *cg, const IrNode *n, int64_t E)
{
    if (E > 1024) {
        cg_error(cg, n, "%s: %lld experts: the CUDA load-balancing loss handles at most 1024", n->name, (long long)E);
        return 0;
    }
    return 1;
}

/* E * sum_e f_e P_e, P_e the mean router probability of expert e */
int cg_emit_aux_loss(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0], *ex = n->src[1];
    int64_t N = cg_lead(x), E = cg_last(x);
    if (!check_experts(cg, n, E))
        return 0;
    cg_begin(cg, n, "", "aux_loss: Switch load balancing E * sum_e f_e P_e, one block, double");
    cg_out(cg, n, "loss");
    cg_in(cg, x, "logits");
    cg_in(cg, ex, "experts");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld, K = %lld;", (long long)E, (long long)cg_last(ex));
    cg_line(cg, "__shared__ double f[E];");
    aux_counts_lines(cg);
    cg_line(cg, "double part[E], p[E];");
    cg_line(cg, "for (int e = 0; e < E; e++)");
    cg_line(cg, "    part[e] = 0.0;");
    cg_line(cg, "for (long long t = threadIdx.x; t < N; t += blockDim.x) {");
    softmax_row_lines(cg, "    ");
    cg_line(cg, "    for (int e = 0; e < E; e++)");
    cg_line(cg, "        part[e] += p[e] / (double)N;");
    cg_line(cg, "}");
    cg_line(cg, "double s = 0.0;");
    cg_line(cg, "for (int e = 0; e < E; e++)");
    cg_line(cg, "    s += f[e] * moec::block_sum<%d>(part[e]);", CG_BLOCK);
    cg_line(cg, "if (threadIdx.x == 0)");
    cg_line(cg, "    loss[0] = (float)((double)E * s);");
    cg_end(cg, CG_BLOCK, 1);
    return 1;
}

/* d/dl_te = dl E / N p_te (f_e - sum_i f_i p_ti) */
int cg_emit_aux_loss_dx(Cg *cg, const IrNode *n)
{
    const IrNode *dl = n->src[0], *x = n->src[1], *ex = n->src[2];
    int64_t N = cg_lead(x), E = cg_last(x);
    if (!check_experts(cg, n, E))
        return 0;
    int fw = cg_ws(cg, n, PLAN_F64, E, "f");
    cg_begin(cg, n, "f", "aux_loss_dx 1/2: the fraction of pairs routed to each expert, one block");
    cg_param(cg, fw, 1, "f");
    cg_in(cg, ex, "experts");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld, K = %lld;", (long long)E, (long long)cg_last(ex));
    aux_counts_lines(cg);
    cg_end(cg, CG_BLOCK, 1);

    cg_begin(cg, n, "rows", "aux_loss_dx 2/2: one thread per token, softmax in double");
    cg_out(cg, n, "dx");
    cg_in(cg, dl, "dloss");
    cg_in(cg, x, "logits");
    cg_param(cg, fw, 0, "f");
    cg_i64(cg, N, "N");
    cg_line(cg, "constexpr int E = %lld;", (long long)E);
    cg_line(cg, "double dl = dloss[0];");
    cg_line(cg, "MOEC_FOR(t, N) {");
    cg_line(cg, "    double p[E];");
    softmax_row_lines(cg, "    ");
    cg_line(cg, "    double fp = 0.0;");
    cg_line(cg, "    for (int e = 0; e < E; e++)");
    cg_line(cg, "        fp += f[e] * p[e];");
    cg_line(cg, "    for (int e = 0; e < E; e++)");
    cg_line(cg, "        dx[t * E + e] = (float)(dl * (double)E / (double)N * p[e] * (f[e] - fp));");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(N, CG_BLOCK));
    return 1;
}

/* mean of x^2 over all N elements (the layer benchmark's objective): P
 * fixed slices (slice b: elements b * 256 + t, stride P * 256), each summed
 * in double by one block into partial[b], the blocks striding over the
 * slices as cross-entropy's over rows, so which thread adds which element
 * never depends on the launch's grid; then one block adds the P partials
 * in a fixed tree. No atomics: the same bits every run. */
int cg_emit_mean_square(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    int64_t N = ir_numel(x), P = min64(cg_grid(N, CG_BLOCK), 1024);
    int part = cg_ws(cg, n, PLAN_F64, P, "partial");
    cg_begin(cg, n, "partial", "mean_square 1/2: P slices' sums of x^2 in double, one block per slice");
    cg_param(cg, part, 1, "partial");
    cg_in(cg, x, "x");
    cg_i64(cg, N, "N");
    cg_i64(cg, P, "P");
    cg_line(cg, "for (long long b = blockIdx.x; b < P; b += gridDim.x) {");
    cg_line(cg, "    double s = 0.0;");
    cg_line(cg, "    for (long long i = b * %d + threadIdx.x; i < N; i += P * %d)", CG_BLOCK, CG_BLOCK);
    cg_line(cg, "        s += (double)x[i] * (double)x[i];");
    cg_line(cg, "    s = moec::block_sum<%d>(s);", CG_BLOCK);
    cg_line(cg, "    if (threadIdx.x == 0)");
    cg_line(cg, "        partial[b] = s;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, P);

    cg_begin(cg, n, "mean", "mean_square 2/2: the P partials added in a fixed tree, one block");
    cg_out(cg, n, "loss");
    cg_param(cg, part, 0, "partial");
    cg_i64(cg, N, "N");
    cg_i64(cg, P, "P");
    cg_line(cg, "double s = 0.0;");
    cg_line(cg, "for (long long b = threadIdx.x; b < P; b += blockDim.x)");
    cg_line(cg, "    s += partial[b];");
    cg_line(cg, "s = moec::block_sum<%d>(s);", CG_BLOCK);
    cg_line(cg, "if (threadIdx.x == 0)");
    cg_line(cg, "    loss[0] = (float)(s / (double)N);");
    cg_end(cg, CG_BLOCK, 1);
    return 1;
}

/* dl [], x -> 2 dl x / N, elementwise, as kernels.inc (bit for bit) */
int cg_emit_mean_square_dx(Cg *cg, const IrNode *n)
{
    const IrNode *dl = n->src[0], *x = n->src[1];
    int64_t N = ir_numel(x);
    cg_begin(cg, n, "", "mean_square_dx: 2 dl x / N, elementwise");
    cg_out(cg, n, "dx");
    cg_in(cg, dl, "dloss");
    cg_in(cg, x, "x");
    cg_i64(cg, N, "N");
    cg_line(cg, "double dl = dloss[0];");
    cg_line(cg, "MOEC_FOR(i, N)");
    cg_line(cg, "    dx[i] = (float)(2.0 * dl * (double)x[i] / (double)N);");
    cg_end(cg, CG_BLOCK, cg_grid(N, CG_BLOCK));
    return 1;
}
