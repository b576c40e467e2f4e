/* cuda_dense.c - emitters for the dense ops: fill, embedding, linear and its
 * gradients, RMSNorm, RoPE, the elementwise ops, SwiGLU, row reductions,
 * slice. Each mirrors its case in runtime/cpu/kernels.inc expression by
 * expression (double where the CPU uses double); only the order of sums
 * differs (block trees instead of a sequential loop). */
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
#include "../util/util.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int cg_emit_fill(Cg *cg, const IrNode *n)
{
    char b[64];
    cg_begin(cg, n, "", "fill with a constant");
    cg_out(cg, n, "y");
    cg_i64(cg, ir_numel(n), "n");
    cg_line(cg, "MOEC_FOR(i, n)");
    cg_line(cg, "    y[i] = (%s)%s;", n->dtype == IR_I32 ? "int" : "float", cg_dbl(b, ir_attr_f(n, IR_ATTR_VALUE)));
    cg_end(cg, CG_BLOCK, cg_grid(ir_numel(n), CG_BLOCK));
    return 1;
}

/* ids [N] i32, table [V, D] -> [N, D]; an id out of range gives a zero row */
int cg_emit_embedding(Cg *cg, const IrNode *n)
{
    const IrNode *ids = n->src[0], *table = n->src[1];
    cg_begin(cg, n, "", "embedding: rows of the table");
    cg_out(cg, n, "y");
    cg_in(cg, ids, "ids");
    cg_in(cg, table, "table");
    cg_i64(cg, ir_numel(ids), "n");
    cg_const(cg, "D", table->shape[1]);
    cg_const(cg, "V", table->shape[0]);
    cg_line(cg, "MOEC_FOR(i, n * D) {");
    cg_line(cg, "    int id = ids[i / D];");
    cg_line(cg, "    y[i] = id >= 0 && id < V ? table[id * D + i %% D] : 0.0f;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(ir_numel(n), CG_BLOCK));
    return 1;
}

/* dy [N, D], ids [N], table (shape only) -> dw [V, D]. A stable counting
 * sort of the tokens by id (one block), then one thread per (v, j) sums its
 * tokens' rows in token order: the CPU's order, so the result is the CPU's
 * bit for bit. */
int cg_emit_embedding_dw(Cg *cg, const IrNode *n)
{
    const IrNode *dy = n->src[0], *ids = n->src[1];
    int64_t N = ir_numel(ids), V = n->shape[0], D = n->shape[1];
    int pos = cg_ws(cg, n, PLAN_I32, N, "pos"), perm = cg_ws(cg, n, PLAN_I32, N, "perm");
    int count = cg_ws(cg, n, PLAN_I32, V + 1, "count"), wcnt = cg_ws(cg, n, PLAN_I32, 8 * V, "wcnt");

    cg_begin(cg, n, "sort", "embedding_dw 1/2: stable counting sort of the tokens by id (one block)");
    cg_param(cg, perm, 1, "perm");
    cg_param(cg, pos, 1, "pos");
    cg_param(cg, count, 1, "count");
    cg_param(cg, wcnt, 1, "wcnt");
    cg_in(cg, ids, "ids");
    cg_i64(cg, N, "n");
    cg_const(cg, "V", V);
    cg_line(cg, "moec::stable_bucket_sort<V, true>(pos, ids, count, wcnt, n);");
    cg_line(cg, "for (long long i = threadIdx.x; i < n; i += blockDim.x)");
    cg_line(cg, "    if (pos[i] >= 0)");
    cg_line(cg, "        perm[pos[i]] = (int)i;");
    cg_end(cg, CG_BLOCK, 1);

    cg_begin(cg, n, "sum", "embedding_dw 2/2: each (id, column) sums its tokens' rows in token order");
    cg_out(cg, n, "dw");
    cg_in(cg, dy, "dy");
    cg_param(cg, perm, 0, "perm");
    cg_param(cg, count, 0, "count");
    cg_const(cg, "V", V);
    cg_const(cg, "D", D);
    cg_line(cg, "MOEC_FOR(i, V * D) {");
    cg_line(cg, "    long long v = i / D, j = i %% D;");
    cg_line(cg, "    float acc = 0.0f;");
    cg_line(cg, "    for (int p = count[v]; p < count[v + 1]; p++)");
    cg_line(cg, "        acc += dy[perm[p] * D + j];");
    cg_line(cg, "    dw[i] = acc;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(V * D, CG_BLOCK));
    return 1;
}

int64_t cg_gemm_blocks(int64_t batch, int64_t m, int64_t extra, int64_t n, int t)
{
    return (batch * ((m + t - 1) / t) + extra) * ((n + t - 1) / t);
}

int cg_gemm_tile(int64_t batch, int64_t m, int64_t extra, int64_t n)
{
    int t = CG_GEMM_T;
    while (t > 16 && cg_gemm_blocks(batch, m, extra, n, t) < CG_GEMM_MIN_BLOCKS)
        t /= 2;
    return t;
}

/* linear: x [N, IN], w [OUT, IN] -> [N, OUT]; linear_dx: dy [N, OUT], w ->
 * [N, IN]; linear_dw: dy [N, OUT], x [N, IN] -> [OUT, IN]. The output's
 * shape picks the tile (cg_gemm_tile). */
/* --kernels fast: a linear with at most 48 outputs (the router; the lm_head of a 33-token alphabet) and K % 128 == 0 runs on the skinny
 * memory-bound kernels of dense_fast.cuh instead of the reference's 16 x 16 tiles (a handful of blocks for
 * [T x E] outputs; a handful of outputs per block for dw). fp32 sums reassociated, deterministic. */
/* 48: dx and dw hold 4 N fp32 per thread in registers (192 at 48; the lm_head of the protein alphabet's 33
 * tokens takes 132 and no local memory, tools/sass.sh) */
enum { SKINNY_MAX_N = 48 };
/* the forward keeps all of w in shared memory up to this size (decision 58; an H200 block may have 227 KB),
 * else passes it through in column tiles */
enum { SKINNY_RESIDENT_BYTES = 160 * 1024 };

/* 1 if linear node n takes the skinny kernels */
static int skinny_ok(const Cg *cg, const IrNode *n)
{
    const IrNode *s0 = n->src[0], *s1 = n->src[1];
    const IrNode *w = n->op == IR_OP_LINEAR_DW ? NULL : s1;
    int64_t rows = cg_lead(s0);
    int64_t N = w ? w->shape[0] : cg_last(s0), K = w ? w->shape[1] : cg_last(s1);
    return cg->kernel_choice == PLAN_KERNELS_FAST && N >= 1 && N <= SKINNY_MAX_N && K % 128 == 0 && rows >= 1;
}

int cg_linear_on_gemm(const Cg *cg, const IrNode *n)
{
    char why[240];
    return (n->op == IR_OP_LINEAR || n->op == IR_OP_LINEAR_DX || n->op == IR_OP_LINEAR_DW) &&
           cg->kernel_choice == PLAN_KERNELS_FAST && !skinny_ok(cg, n) && cuda_fast_linear_ok(n, why, sizeof why);
}

static int skinny_linear(Cg *cg, const IrNode *n)
{
    const IrNode *s0 = n->src[0], *s1 = n->src[1];
    const IrNode *w = n->op == IR_OP_LINEAR_DW ? NULL : s1;
    int64_t rows = cg_lead(s0);
    int64_t N = w ? w->shape[0] : cg_last(s0), K = w ? w->shape[1] : cg_last(s1);
    if (!skinny_ok(cg, n))
        return 0;
    /* dx, dw: TB threads of 4 columns each per block; K / (4 TB) column slabs */
    int tb = 256;
    while ((K / 4) % tb)
        tb -= 32; /* K % 128 == 0: 32 always divides K / 4 */
    char impl[160];
    snprintf(impl, sizeof impl, "fast: skinny (%lld outputs, K %lld): memory-bound kernels, not 16 x 16 tiles",
             (long long)N, (long long)K);
    cg_impl(cg, impl);
    int64_t slabs = K / (4 * tb);
    switch (n->op) {
    case IR_OP_LINEAR: {
        if (N * K * 4 <= SKINNY_RESIDENT_BYTES) {
            /* all of w resident in shared memory, one block of 16 warps an SM, no barrier in the row loop
             * (decision 58); the same multiply-adds in the same order as the tiled kernel below */
            int rw = N <= 8 ? 4 : N <= 16 ? 2 : 1;
            cg_begin(cg, n, "skinny", "linear: y = x w^T, few outputs: w resident in shared memory, a warp per "
                                      "row group, butterfly sums (fast)");
            cg_out(cg, n, "y");
            cg_in(cg, s0, "x");
            cg_in(cg, s1, "w");
            cg_i64(cg, rows, "rows");
            cg_line(cg, "moec::fast::skinny_linear_resident<%lld, %lldll, %d>(y, x, w, rows);", (long long)N,
                    (long long)K, rw);
            cg_launch_extra(cg, (int)(N * K * 4), 1); /* one block an SM, whatever the GPU's count */
            cg_end(cg, 512, 1);
            break;
        }
        int rw = N <= 8 ? 8 : N <= 16 ? 4 : 2;
        /* w through shared memory KT columns at a time: the widest multiple of 128 dividing K whose N KT
         * floats fit 32 KB (decision 52) */
        int64_t kt = 128;
        while (kt * 2 <= K && K % (kt * 2) == 0 && N * kt * 2 * 4 <= 32768)
            kt *= 2;
        cg_begin(cg, n, "skinny", "linear: y = x w^T, few outputs: a warp per row group, w through shared memory, "
                                  "butterfly sums (fast)");
        cg_out(cg, n, "y");
        cg_in(cg, s0, "x");
        cg_in(cg, s1, "w");
        cg_i64(cg, rows, "rows");
        cg_line(cg, "moec::fast::skinny_linear<%lld, %lldll, %d, %lld>(y, x, w, rows);", (long long)N, (long long)K,
                rw, (long long)kt);
        cg_end(cg, CG_BLOCK, min64((rows + 8 * rw - 1) / (8 * rw), 132 * 16));
        break;
    }
    case IR_OP_LINEAR_DX:
        cg_begin(cg, n, "skinny", "linear_dx: dx = dy w, few inputs: 4 columns per thread, w in registers (fast)");
        cg_out(cg, n, "dx");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "w");
        /* here w [N, K] is the forward's weight [OUT, IN]: dx [rows, IN], N = OUT */
        cg_i64(cg, rows, "rows");
        cg_line(cg, "moec::fast::skinny_linear_dx<%lld, %lldll, %d>(dx, dy, w, rows);", (long long)N, (long long)K,
                tb);
        /* 4 blocks an SM where the registers allow (decision 52; 2 before: too few stores in flight) */
        cg_end(cg, tb, slabs * min64((rows + 63) / 64, (528 + slabs - 1) / slabs));
        break;
    default: { /* IR_OP_LINEAR_DW: dw [N, K] = dy [rows, N]^T x [rows, K] */
        int64_t chunks = min64((264 + slabs - 1) / slabs, (rows + 63) / 64);
        int64_t ch = (rows + chunks - 1) / chunks;
        chunks = (rows + ch - 1) / ch;
        int part = cg_ws(cg, n, PLAN_F32, chunks * N * K, "partials");
        cg_begin(cg, n, "skinny_part", "linear_dw 1/2: row chunks' partial dy^T x, 4 columns per thread (fast)");
        cg_param(cg, part, 1, "part");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "x");
        /* 8 (4) rows' loads of x in flight a thread where the 4 N accumulators leave room (decision 52) */
        cg_i64(cg, rows, "rows");
        cg_i64(cg, ch, "ch");
        cg_line(cg, "moec::fast::skinny_linear_dw_part<%lld, %lldll, %d, %d>(part, dy, x, rows, ch);", (long long)N,
                (long long)K, tb, N <= 8 ? 8 : N <= 16 ? 4 : 1);
        cg_end(cg, tb, chunks * slabs);
        cg_begin(cg, n, "skinny_sum", "linear_dw 2/2: the chunks' partials added in chunk order (fast)");
        cg_out(cg, n, "dw");
        cg_param(cg, part, 0, "part");
        cg_i64(cg, chunks, "chunks");
        cg_line(cg, "moec::fast::skinny_linear_dw_sum<%lld, %lldll>(dw, part, chunks);", (long long)N, (long long)K);
        cg_end(cg, CG_BLOCK, cg_grid(N * K, CG_BLOCK));
        break;
    }
    }
    cg->dense_fast_used = 1;
    return 1;
}

int cg_emit_linear(Cg *cg, const IrNode *n)
{
    if (skinny_linear(cg, n) || cg_emit_linear_fast(cg, n))
        return 1;
    const IrNode *s0 = n->src[0], *s1 = n->src[1];
    int64_t rows = cg_lead(s0);
    int64_t m = n->op == IR_OP_LINEAR_DW ? cg_last(s0) : rows;
    int64_t nn = n->op == IR_OP_LINEAR ? s1->shape[0] : n->op == IR_OP_LINEAR_DX ? s1->shape[1] : cg_last(s1);
    int t = cg_gemm_tile(1, m, 0, nn);
    char what[96];
    switch (n->op) {
    case IR_OP_LINEAR:
        snprintf(what, sizeof what, "linear: y = x w^T (%d x %d tiles, fp32 accumulation)", t, t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "y");
        cg_in(cg, s0, "x");
        cg_in(cg, s1, "w");
        cg_i64(cg, rows, "rows");
        cg_const(cg, "IN", s1->shape[1]);
        cg_const(cg, "OUT", s1->shape[0]);
        cg_i32(cg, t, "tile");
        cg_line(cg, "moec::gemm_tiled<OUT, IN, 1, 1, IN>(y, x, w, rows, IN, tile);");
        break;
    case IR_OP_LINEAR_DX:
        snprintf(what, sizeof what, "linear_dx: dx = dy w (%d x %d tiles)", t, t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "dx");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "w");
        cg_i64(cg, rows, "rows");
        cg_const(cg, "IN", s1->shape[1]);
        cg_const(cg, "OUT", s1->shape[0]);
        cg_i32(cg, t, "tile");
        cg_line(cg, "moec::gemm_tiled<IN, OUT, 1, IN, 1>(dx, dy, w, rows, OUT, tile);");
        break;
    default: /* IR_OP_LINEAR_DW */
        snprintf(what, sizeof what, "linear_dw: dw = dy^T x (%d x %d tiles)", t, t);
        cg_begin(cg, n, "", what);
        cg_out(cg, n, "dw");
        cg_in(cg, s0, "dy");
        cg_in(cg, s1, "x");
        cg_i64(cg, rows, "rows");
        cg_const(cg, "IN", cg_last(s1));
        cg_const(cg, "OUT", cg_last(s0));
        cg_line(cg, "moec::gemm<IN, 1, OUT, IN, 1, %d>(dw, dy, x, OUT, rows);", t);
        break;
    }
    cg_end(cg, CG_BLOCK, min64(cg_gemm_blocks(1, m, 0, nn, t), 65535));
    return 1;
}

/* the row count (an argument: it scales with the batch), the width and eps */
static void rows_consts(Cg *cg, const IrNode *x, const IrNode *n)
{
    char b[64];
    cg_i64(cg, cg_lead(x), "rows");
    cg_const(cg, "D", cg_last(x));
    cg_line(cg, "constexpr double EPS = %s;", cg_dbl(b, ir_attr_f(n, IR_ATTR_EPS)));
}

/* the row's 1 / sqrt(mean(x^2) + eps), in double, into `inv` */
static void rms_inv_lines(Cg *cg, const char *x)
{
    cg_line(cg, "    double ss = 0.0;");
    cg_line(cg, "    for (long long i = threadIdx.x; i < D; i += blockDim.x)");
    cg_line(cg, "        ss += (double)%s[r * D + i] * %s[r * D + i];", x, x);
    cg_line(cg, "    ss = moec::block_sum<%d>(ss);", CG_BLOCK);
    cg_line(cg, "    double inv = 1.0 / sqrt(ss / (double)D + EPS);");
}

/* --kernels fast (decision 47): RMSNorm and its gradients with the row in registers (dense_fast.cuh
 * rmsnorm_rows, rmsnorm_dx_rows, rms_inv_rows): 16-byte loads, each row read once, blocks of D / 8 threads
 * (a multiple of 32, at most 256). The reference's expressions; its sums in double in another fixed order. */
static int rms_fast_ok(const Cg *cg, int64_t d) { return cg->kernel_choice == PLAN_KERNELS_FAST && d % 8 == 0 && d >= 256; }

static int rms_tb(int64_t d)
{
    int64_t t = (d / 8 + 31) / 32 * 32;
    return t > CG_BLOCK ? CG_BLOCK : (int)t;
}

enum { RMS_DW_CHUNK = 32 }; /* the fast rmsnorm_dw needs more than 2 of these rows */
enum { RMS_DW_CHUNKS = 128 }; /* the most row chunks of its column sums */

/* the fast rmsnorm_dw (its column sums over chunks of rows) applies to node n */
static int rms_dw_fast(const Cg *cg, const IrNode *n)
{
    return cg->kernel_choice == PLAN_KERNELS_FAST && cg_lead(n->src[1]) > 2 * RMS_DW_CHUNK;
}

/* its columns a thread: 4 (16-byte loads) where the width and the sources' alignment allow */
static int rms_dw_cols(const IrNode *n)
{
    const IrNode *x = n->src[1];
    return cg_last(x) % 4 == 0 && cg_aligned(x, 16) && cg_aligned(n->src[0], 16) ? 4 : 1;
}

/* the rmsnorm_dw node of the same x and eps as rmsnorm node n, after it and fast, else NULL: n keeps each
 * row's 1 / rms for it (decision 52; the same double rms_inv_rows computes: the same sums in the same order),
 * so rmsnorm_dw reads x once, for its column sums */
static const IrNode *rms_dw_of(const Cg *cg, const IrNode *n)
{
    for (int i = n->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *b = cg->g->nodes[i];
        if (b->op == IR_OP_RMSNORM_DW && b->src[1] == n->src[0] &&
            ir_attr_f(b, IR_ATTR_EPS) == ir_attr_f(n, IR_ATTR_EPS) && rms_dw_fast(cg, b))
            return b;
    }
    return NULL;
}

/* the 1 / rms workspace an earlier rmsnorm kept for rmsnorm_dw node b, else -1 */
static int rms_kept_inv(Cg *cg, const IrNode *b)
{
    for (int i = b->id - 1; i >= 0; i--) {
        const IrNode *a = cg->g->nodes[i];
        if (a->op == IR_OP_RMSNORM && a->src[0] == b->src[1]) {
            int w = cg_find_ws(cg, a, "rinv");
            if (w >= 0 && cg->bufs[w].until == b->id)
                return w;
        }
    }
    return -1;
}

/* one block per row */
int cg_emit_rmsnorm(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    if (rms_fast_ok(cg, cg_last(x)) && cg_aligned(x, 32)) {
        int tb = rms_tb(cg_last(x));
        const IrNode *dw = rms_dw_of(cg, n);
        int rinv = dw ? cg_ws_kept(cg, n, dw, PLAN_F64, cg_lead(x), "rinv") : -1;
        cg_impl(cg, dw ? "fast: the row in registers, 16-byte accesses; each row's 1 / rms kept for rmsnorm_dw"
                       : "fast: the row in registers, 16-byte accesses");
        cg_begin(cg, n, "", dw ? "rmsnorm: one block per row, the row in registers, 16-byte accesses, sums in double; "
                                 "1 / rms kept for rmsnorm_dw (fast)"
                               : "rmsnorm: one block per row, the row in registers, 16-byte accesses, sums in double (fast)");
        cg_out(cg, n, "y");
        cg_in(cg, x, "x");
        cg_in(cg, n->src[1], "w");
        if (dw)
            cg_param(cg, rinv, 1, "rinv");
        rows_consts(cg, x, n);
        cg_line(cg, "moec::fast::rmsnorm_rows<D, %d>(y, x, w, EPS, %s, rows);", tb, dw ? "rinv" : "nullptr");
        cg_end(cg, tb, min64(cg_lead(x), 65535));
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "", "rmsnorm: one block per row, sum of squares in double");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_in(cg, n->src[1], "w");
    rows_consts(cg, x, n);
    cg_line(cg, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {");
    rms_inv_lines(cg, "x");
    cg_line(cg, "    for (long long i = threadIdx.x; i < D; i += blockDim.x)");
    if (cg_is_bf16(cg, n->id)) /* bf16 storage: the fp32 value rounded (to nearest even); the statistics stay double */
        cg_line(cg, "        moec::sm90::st(y + r * D + i, (float)((double)x[r * D + i] * inv * w[i]));");
    else
        cg_line(cg, "        y[r * D + i] = (float)((double)x[r * D + i] * inv * w[i]);");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, min64(cg_lead(x), 65535));
    return 1;
}

/* dx_j = r w_j dy_j - x_j r^3 / d * sum_i w_i dy_i x_i */
int cg_emit_rmsnorm_dx(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[1];
    if (rms_fast_ok(cg, cg_last(x)) && cg_aligned(x, 32) && cg_aligned(n->src[0], 32)) {
        int tb = rms_tb(cg_last(x));
        cg_impl(cg, "fast: the row in registers, 16-byte accesses");
        cg_begin(cg, n, "", "rmsnorm_dx: one block per row, x, dy and w in registers, 16-byte accesses (fast)");
        cg_out(cg, n, "dx");
        cg_in(cg, n->src[0], "dy");
        cg_in(cg, x, "x");
        cg_in(cg, n->src[2], "w");
        rows_consts(cg, x, n);
        cg_line(cg, "moec::fast::rmsnorm_dx_rows<D, %d>(dx, dy, x, w, EPS, rows);", tb);
        cg_end(cg, tb, min64(cg_lead(x), 65535));
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "", "rmsnorm_dx: one block per row");
    cg_out(cg, n, "dx");
    cg_in(cg, n->src[0], "dy");
    cg_in(cg, x, "x");
    cg_in(cg, n->src[2], "w");
    rows_consts(cg, x, n);
    cg_line(cg, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {");
    rms_inv_lines(cg, "x");
    cg_line(cg, "    double s = 0.0;");
    cg_line(cg, "    for (long long i = threadIdx.x; i < D; i += blockDim.x)");
    cg_line(cg, "        s += (double)w[i] * dy[r * D + i] * x[r * D + i];");
    cg_line(cg, "    s = moec::block_sum<%d>(s);", CG_BLOCK);
    cg_line(cg, "    for (long long j = threadIdx.x; j < D; j += blockDim.x)");
    cg_line(cg, "        dx[r * D + j] = (float)(inv * w[j] * dy[r * D + j] - (double)x[r * D + j] * inv * inv * inv / "
                "(double)D * s);");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, min64(cg_lead(x), 65535));
    return 1;
}

/* dw_i = sum over rows (in row order, fp32 as the CPU) of dy x r */
int cg_emit_rmsnorm_dw(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[1];
    int64_t rows = cg_lead(x), d = cg_last(x);
    int fast = rms_dw_fast(cg, n), inv = fast ? rms_kept_inv(cg, n) : -1;
    if (inv < 0) {
        inv = cg_ws(cg, n, PLAN_F64, rows, "inv");
        if (fast && rms_fast_ok(cg, d) && cg_aligned(x, 32)) {
            int tb = rms_tb(d);
            cg_begin(cg, n, "rms", "rmsnorm_dw 1/3: each row's 1 / rms, one block per row, 16-byte loads (fast)");
            cg_param(cg, inv, 1, "rinv");
            cg_in(cg, x, "x");
            rows_consts(cg, x, n);
            cg_line(cg, "moec::fast::rms_inv_rows<D, %d>(rinv, x, EPS, rows);", tb);
            cg_end(cg, tb, min64(rows, 65535));
        } else {
            cg_begin(cg, n, "rms", fast ? "rmsnorm_dw 1/3: each row's 1 / rms, one block per row"
                                        : "rmsnorm_dw 1/2: each row's 1 / rms, one block per row");
            cg_param(cg, inv, 1, "rinv");
            cg_in(cg, x, "x");
            rows_consts(cg, x, n);
            cg_line(cg, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {");
            rms_inv_lines(cg, "x");
            cg_line(cg, "    if (threadIdx.x == 0)");
            cg_line(cg, "        rinv[r] = inv;");
            cg_line(cg, "}");
            cg_end(cg, CG_BLOCK, min64(rows, 65535));
        }
    }

    if (fast) {
        /* --kernels fast (decision 52): the column sums over at most RMS_DW_CHUNKS chunks of rows, 4 columns
         * per thread with 16-byte loads, then each column's chunks added by a block in a fixed order. A fixed
         * reassociation of the reference's sum: deterministic. With the forward's kept 1 / rms, x and dy are
         * read once. */
        int cols = rms_dw_cols(n), kept = rms_kept_inv(cg, n) >= 0;
        int64_t chunks = min64(RMS_DW_CHUNKS, (rows + 7) / 8);
        int64_t ch = (rows + chunks - 1) / chunks;
        chunks = (rows + ch - 1) / ch;
        int part = cg_ws(cg, n, PLAN_F32, chunks * d, "partials");
        char impl[200];
        snprintf(impl, sizeof impl, "fast: the column sums over %lld chunks of %lld rows%s%s, then over the chunks in "
                 "a fixed order", (long long)chunks, (long long)ch, cols == 4 ? " (16-byte loads)" : "",
                 kept ? ", 1 / rms kept by the rmsnorm" : "");
        cg_impl(cg, impl);
        cg_begin(cg, n, "chunks", cols == 4 ? (kept ? "rmsnorm_dw 1/2: per chunk of rows and column, the sum of dy x / rms, "
                                                      "4 columns per thread, 16-byte loads, 1 / rms kept by the rmsnorm (fast)"
                                                    : "rmsnorm_dw 2/3: per chunk of rows and column, the sum of dy x / rms, "
                                                      "4 columns per thread, 16-byte loads (fast)")
                                            : (kept ? "rmsnorm_dw 1/2: per chunk of rows and column, the sum of dy x / rms, "
                                                      "1 / rms kept by the rmsnorm (fast)"
                                                    : "rmsnorm_dw 2/3: per chunk of rows and column, the sum of dy x / rms (fast)"));
        cg_param(cg, part, 1, "part");
        cg_in(cg, n->src[0], "dy");
        cg_in(cg, x, "x");
        cg_param(cg, inv, 0, "rinv");
        cg_i64(cg, rows, "rows");
        cg_i64(cg, ch, "ch");
        cg_line(cg, "moec::fast::rms_dw_chunks<%lld, %d>(part, dy, x, rinv, rows, ch);", (long long)d, cols);
        cg_end(cg, CG_BLOCK, cg_grid(chunks * (d / cols), CG_BLOCK));
        cg_begin(cg, n, "sum", kept ? "rmsnorm_dw 2/2: each column's chunks added in a fixed order, a block per 32 "
                                      "columns (fast)"
                                    : "rmsnorm_dw 3/3: each column's chunks added in a fixed order, a block per 32 "
                                      "columns (fast)");
        cg_out(cg, n, "dw");
        cg_param(cg, part, 0, "part");
        cg_i64(cg, chunks, "chunks");
        cg_line(cg, "moec::fast::rms_dw_sum<%lld, 8>(dw, part, chunks);", (long long)d);
        cg_end(cg, 256, (d + 31) / 32);
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "sum", "rmsnorm_dw 2/2: one thread per column sums the rows in order");
    cg_out(cg, n, "dw");
    cg_in(cg, n->src[0], "dy");
    cg_in(cg, x, "x");
    cg_param(cg, inv, 0, "rinv");
    cg_i64(cg, rows, "rows");
    cg_const(cg, "D", d);
    cg_line(cg, "MOEC_FOR(i, D) {");
    cg_line(cg, "    float acc = 0.0f;");
    cg_line(cg, "    for (long long r = 0; r < rows; r++)");
    cg_line(cg, "        acc += (float)((double)dy[r * D + i] * x[r * D + i] * rinv[r]);");
    cg_line(cg, "    dw[i] = acc;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(d, CG_BLOCK));
    return 1;
}

/* --kernels fast (decisions 47 and 58): the reference's cos and sin per (position, pair) computed into a table
 * [S, hd/2] of double pairs with the reference's expressions (so the same doubles), and the same rounded to
 * float; then the rotation with 16-byte accesses, each thread 8 pairs of HG heads (dense_fast.cuh rope_apply),
 * bf16 results in fp32 where an interval test proves them the reference's. The reference computes pow, cos
 * and sin in double for every element: fp64-bound, not memory-bound. Results bit for bit the reference's.
 * One table serves every rope and rope_dx node of the step with the same positions, head dim and theta
 * (rope_dx rotates by minus the angle: the reference's -1.0 * sin, an exact negation): the first computes
 * it, kept until the last (decision 58; it was computed by each node, 4 MB of fp64 transcendentals each). */
static int rope_fast_ok(const Cg *cg, const IrNode *n)
{
    if (n->op != IR_OP_ROPE && n->op != IR_OP_ROPE_DX)
        return 0;
    const IrNode *x = n->src[0];
    int64_t h = ir_attr_i(n, IR_ATTR_HEADS), hd = x->shape[2] / h;
    return cg->kernel_choice == PLAN_KERNELS_FAST && hd % 16 == 0 && cg_aligned(x, 32);
}

/* rope nodes a and b can share a table: the same positions, head dim and theta */
static int rope_same_table(const IrNode *a, const IrNode *b)
{
    return a->src[0]->shape[1] == b->src[0]->shape[1] &&
           a->src[0]->shape[2] / ir_attr_i(a, IR_ATTR_HEADS) == b->src[0]->shape[2] / ir_attr_i(b, IR_ATTR_HEADS) &&
           ir_attr_f(a, IR_ATTR_THETA) == ir_attr_f(b, IR_ATTR_THETA);
}

static int rope_fast(Cg *cg, const IrNode *n, int64_t h, int64_t hd)
{
    const IrNode *x = n->src[0];
    char b[64];
    int64_t S = x->shape[1], half = hd / 2, rows = x->shape[0] * S;
    int hg = h % 4 == 0 ? 4 : h % 2 == 0 ? 2 : 1;
    /* the heads a thread where asked for (MOEC_ROPE_HEADS) and the heads divide: 4 measured fastest (decision 72) */
    if (cg->rope_heads > 0 && h % cg->rope_heads == 0)
        hg = cg->rope_heads;
    /* the table's owner: the first fast rope node of the graph with the same table; its last user */
    const IrNode *owner = n, *last = n;
    for (int i = 0; i < cg->g->nnodes; i++) {
        const IrNode *o = cg->g->nodes[i];
        if (o == n || !rope_fast_ok(cg, o) || !rope_same_table(o, n))
            continue;
        if (o->id < owner->id)
            owner = o;
        if (o->id > last->id)
            last = o;
    }
    int cs, csf;
    if (owner == n) {
        cs = last == n ? cg_ws(cg, n, PLAN_F64, 2 * S * half, "cos_sin")
                       : cg_ws_kept(cg, n, last, PLAN_F64, 2 * S * half, "cos_sin");
        csf = last == n ? cg_ws(cg, n, PLAN_F32, 2 * S * half, "cos_sin_f32")
                        : cg_ws_kept(cg, n, last, PLAN_F32, 2 * S * half, "cos_sin_f32");
        cg_impl(cg, last == n ? "fast: the angles' cos and sin once per (position, pair), then 16-byte rotations"
                              : "fast: the angles' cos and sin once per (position, pair), kept for the step's "
                                "other rope nodes, then 16-byte rotations");
        cg_begin(cg, n, "angles", "rope 1/2: cos and sin of pos * theta^(-2j/hd) per (position, pair), double "
                                  "and rounded to float (fast)");
        cg_param(cg, cs, 1, "cs");
        cg_param(cg, csf, 1, "csf");
        cg_const(cg, "S", S);
        cg_const(cg, "HD", hd);
        cg_const(cg, "HALF", half);
        cg_line(cg, "constexpr double THETA = %s;", cg_dbl(b, ir_attr_f(n, IR_ATTR_THETA)));
        /* a thread per (pair, 4 positions): the pair's frequency (the same double: the same expression) once */
        cg_line(cg, "MOEC_FOR(item, (S + 3) / 4 * HALF) {");
        cg_line(cg, "    long long j = item %% HALF, s0 = item / HALF * 4;");
        cg_line(cg, "    double f = pow(THETA, -2.0 * (double)j / (double)HD);");
        cg_line(cg, "    for (long long s = s0; s < s0 + 4 && s < S; s++) {");
        cg_line(cg, "        long long idx = s * HALF + j;");
        cg_line(cg, "        double ang = (double)s * f;");
        cg_line(cg, "        double c = cos(ang), sn = sin(ang);");
        cg_line(cg, "        cs[2 * idx] = c;");
        cg_line(cg, "        cs[2 * idx + 1] = sn;");
        cg_line(cg, "        csf[2 * idx] = (float)c;");
        cg_line(cg, "        csf[2 * idx + 1] = (float)sn;");
        cg_line(cg, "    }");
        cg_line(cg, "}");
        cg_end(cg, CG_BLOCK, cg_grid((S + 3) / 4 * half, CG_BLOCK));
    } else {
        cs = cg_find_ws(cg, owner, "cos_sin");
        csf = cg_find_ws(cg, owner, "cos_sin_f32");
        if (cs < 0 || csf < 0)
            die("codegen: rope node %s: the table of %s is missing", n->name, owner->name);
        cg_impl(cg, "fast: 16-byte rotations by the angles' cos and sin that an earlier rope node computed");
    }
    cg_begin(cg, n, "rotate", n->op == IR_OP_ROPE ? "rope 2/2: rotate pairs (j, j + hd/2), 8 pairs of several heads per thread, 16-byte accesses (fast)"
                                                 : "rope_dx 2/2: rotate back, 8 pairs of several heads per thread, 16-byte accesses (fast)");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_param(cg, cs, 0, "cs");
    cg_param(cg, csf, 0, "csf");
    cg_i64(cg, rows, "rows");
    cg_line(cg, "moec::fast::rope_apply<%lldll, %lld, %lld, %d, %s>(y, x, cs, csf, rows);", (long long)S, (long long)h,
            (long long)hd, hg, n->op == IR_OP_ROPE ? "false" : "true");
    cg_end(cg, CG_BLOCK, cg_grid(rows * (h / hg) * (half / 8), CG_BLOCK));
    cg->dense_fast_used = 1;
    return 1;
}

/* rotate-half RoPE (Hugging Face convention), rope_dx rotates back */
int cg_emit_rope(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    char b[64];
    int64_t h = ir_attr_i(n, IR_ATTR_HEADS), hd = x->shape[2] / h;
    int64_t total = x->shape[0] * x->shape[1] * h * (hd / 2);
    if (rope_fast_ok(cg, n))
        return rope_fast(cg, n, h, hd);
    cg_begin(cg, n, "", n->op == IR_OP_ROPE ? "rope: rotate pairs (j, j + hd/2) by pos * theta^(-2j/hd)"
                                            : "rope_dx: rotate back by minus the angle");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_i64(cg, x->shape[0], "batch");
    cg_const(cg, "S", x->shape[1]);
    cg_const(cg, "H", h);
    cg_const(cg, "HD", hd);
    cg_const(cg, "HALF", hd / 2);
    cg_line(cg, "constexpr double THETA = %s, SIGN = %s;", cg_dbl(b, ir_attr_f(n, IR_ATTR_THETA)),
            n->op == IR_OP_ROPE ? "1.0" : "-1.0");
    cg_line(cg, "MOEC_FOR(idx, batch * S * H * HALF) {");
    cg_line(cg, "    long long j = idx %% HALF, h = idx / HALF %% H, s = idx / (HALF * H) %% S, b = idx / (HALF * H * S);");
    cg_line(cg, "    long long at = (b * S + s) * (H * HD) + h * HD + j;");
    cg_line(cg, "    double ang = (double)s * pow(THETA, -2.0 * (double)j / (double)HD);");
    cg_line(cg, "    double c = cos(ang), sn = SIGN * sin(ang);");
    if (cg_is_bf16(cg, x->id) || cg_is_bf16(cg, n->id)) {
        /* bf16 storage (either side): moec::sm90::ld / st widen and round (to nearest even) the value the
         * fp32 kernel would have written, as the CPU backend rounds it */
        cg_line(cg, "    double x1 = moec::sm90::ld(x + at), x2 = moec::sm90::ld(x + at + HALF);");
        cg_line(cg, "    moec::sm90::st(y + at, (float)(x1 * c - x2 * sn));");
        cg_line(cg, "    moec::sm90::st(y + at + HALF, (float)(x2 * c + x1 * sn));");
    } else {
        cg_line(cg, "    double x1 = x[at], x2 = x[at + HALF];");
        cg_line(cg, "    y[at] = (float)(x1 * c - x2 * sn);");
        cg_line(cg, "    y[at + HALF] = (float)(x2 * c + x1 * sn);");
    }
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(total, CG_BLOCK));
    return 1;
}

int cg_emit_elementwise(Cg *cg, const IrNode *n)
{
    char b[64];
    int64_t numel = ir_numel(n);
    const char *what = "", *expr = "";
    switch (n->op) {
    case IR_OP_ADD: what = "add"; expr = "a[i] + b[i]"; break;
    case IR_OP_MUL: what = "mul"; expr = "a[i] * b[i]"; break;
    case IR_OP_SCALE: what = "scale: times a constant, in double"; expr = "(float)(a[i] * FACTOR)"; break;
    case IR_OP_SILU: what = "silu, in double"; expr = "(float)moec::silu(a[i])"; break;
    case IR_OP_GELU: what = "gelu (tanh approximation), in double"; expr = "(float)moec::gelu(a[i])"; break;
    case IR_OP_SILU_DX: what = "silu_dx: dy silu'(x)"; expr = "(float)(a[i] * moec::silu_d(b[i]))"; break;
    case IR_OP_GELU_DX: what = "gelu_dx: dy gelu'(x)"; expr = "(float)(a[i] * moec::gelu_d(b[i]))"; break;
    case IR_OP_ROW_SCALE: what = "row_scale: x [R, D] times p [R] per row"; expr = "a[i] * b[i / D]"; break;
    default: die("cg_emit_elementwise: %s", ir_node_op_name(n));
    }
    if (cg->kernel_choice == PLAN_KERNELS_FAST && (n->op == IR_OP_ADD || n->op == IR_OP_MUL) && numel % 4 == 0 &&
        !cg_is_bf16(cg, n->id) && !cg_is_bf16(cg, n->src[0]->id) && !cg_is_bf16(cg, n->src[1]->id) &&
        ir_numel(n->src[0]) == numel && ir_numel(n->src[1]) == numel && cg_aligned(n->src[0], 16) &&
        cg_aligned(n->src[1], 16)) {
        /* decision 47: the residual adds and the gradients' sums, 16 bytes per thread; the same operation per
         * element (bit for bit) */
        const char *op = n->op == IR_OP_ADD ? "+" : "*";
        cg_begin(cg, n, "", n->op == IR_OP_ADD ? "add, 4 elements (16 bytes) per thread (fast)"
                                               : "mul, 4 elements (16 bytes) per thread (fast)");
        cg_out(cg, n, "y");
        cg_in(cg, n->src[0], "a");
        cg_in(cg, n->src[1], "b");
        cg_i64(cg, numel / 4, "n4");
        cg_line(cg, "MOEC_FOR(q, n4) {");
        cg_line(cg, "    const float4 u = ((const float4 *)a)[q], v = ((const float4 *)b)[q];");
        cg_line(cg, "    float4 o;");
        cg_line(cg, "    o.x = u.x %s v.x, o.y = u.y %s v.y, o.z = u.z %s v.z, o.w = u.w %s v.w;", op, op, op, op);
        cg_line(cg, "    ((float4 *)y)[q] = o;");
        cg_line(cg, "}");
        cg_end(cg, CG_BLOCK, cg_grid(numel / 4, CG_BLOCK));
        return 1;
    }
    cg_begin(cg, n, "", what);
    cg_out(cg, n, "y");
    cg_in(cg, n->src[0], "a");
    if (n->nsrc > 1)
        cg_in(cg, n->src[1], "b");
    cg_i64(cg, numel, "n");
    if (n->op == IR_OP_ROW_SCALE)
        cg_const(cg, "D", n->src[0]->shape[1]);
    if (n->op == IR_OP_SCALE)
        cg_line(cg, "constexpr double FACTOR = %s;", cg_dbl(b, ir_attr_f(n, IR_ATTR_FACTOR)));
    cg_line(cg, "MOEC_FOR(i, n)");
    cg_line(cg, "    y[i] = %s;", expr);
    cg_end(cg, CG_BLOCK, cg_grid(numel, CG_BLOCK));
    return 1;
}

/* swiglu: h [.., 2F] = [gate | up] -> silu(gate) * up; scaled_swiglu times p [R] */
int cg_emit_swiglu(Cg *cg, const IrNode *n)
{
    int scaled = n->op == IR_OP_SCALED_SWIGLU;
    int64_t rows = cg_lead(n), F = cg_last(n);
    cg_begin(cg, n, "", scaled ? "scaled_swiglu: silu(gate) * up * p per row, in double" : "swiglu: silu(gate) * up");
    cg_out(cg, n, "y");
    cg_in(cg, n->src[0], "h");
    if (scaled)
        cg_in(cg, n->src[1], "p");
    cg_i64(cg, rows, "rows");
    cg_const(cg, "F", F);
    cg_line(cg, "MOEC_FOR(i, rows * F) {");
    cg_line(cg, "    long long r = i / F, f = i %% F;");
    cg_line(cg, "    y[i] = (float)(moec::silu(h[r * 2 * F + f]) * h[r * 2 * F + F + f]%s);", scaled ? " * p[r]" : "");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(rows * F, CG_BLOCK));
    return 1;
}

/* d gate = dy p up silu'(gate), d up = dy p silu(gate) */
int cg_emit_swiglu_dh(Cg *cg, const IrNode *n)
{
    int scaled = n->op == IR_OP_SCALED_SWIGLU_DH;
    const IrNode *dy = n->src[0];
    int64_t rows = cg_lead(dy), F = cg_last(dy);
    cg_begin(cg, n, "", scaled ? "scaled_swiglu_dh: the gradient w.r.t. [gate | up]" : "swiglu_dx: the gradient w.r.t. [gate | up]");
    cg_out(cg, n, "dh");
    cg_in(cg, dy, "dy");
    cg_in(cg, n->src[1], "h");
    if (scaled)
        cg_in(cg, n->src[2], "p");
    cg_i64(cg, rows, "rows");
    cg_const(cg, "F", F);
    cg_line(cg, "MOEC_FOR(i, rows * F) {");
    cg_line(cg, "    long long r = i / F, f = i %% F;");
    cg_line(cg, "    double g = h[r * 2 * F + f], u = h[r * 2 * F + F + f], d = %s;",
            scaled ? "dy[i] * (double)p[r]" : "(double)dy[i]");
    cg_line(cg, "    dh[r * 2 * F + f] = (float)(d * u * moec::silu_d(g));");
    cg_line(cg, "    dh[r * 2 * F + F + f] = (float)(d * moec::silu(g));");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(rows * F, CG_BLOCK));
    return 1;
}

/* scaled_swiglu_dp: sum_f dy silu(gate) up per row; row_dot: sum_j dy x per
 * row; one block per row, in double (the fused grouped_mlp_bwd reduces its
 * dprobs the same way, so the two agree bit for bit) */
int cg_emit_row_reduce(Cg *cg, const IrNode *n)
{
    const IrNode *dy = n->src[0];
    int64_t rows = dy->shape[0], F = dy->shape[1];
    int dp = n->op == IR_OP_SCALED_SWIGLU_DP;
    cg_begin(cg, n, "", dp ? "scaled_swiglu_dp: sum_f dy silu(gate) up per row (one block per row, double)"
                           : "row_dot: sum_j dy x per row (one block per row, double)");
    cg_out(cg, n, "y");
    cg_in(cg, dy, "dy");
    cg_in(cg, n->src[1], dp ? "h" : "x");
    cg_i64(cg, rows, "rows");
    cg_const(cg, "F", F);
    cg_line(cg, "for (long long r = blockIdx.x; r < rows; r += gridDim.x) {");
    cg_line(cg, "    double s = 0.0;");
    cg_line(cg, "    for (long long f = threadIdx.x; f < F; f += blockDim.x)");
    if (dp)
        cg_line(cg, "        s += (double)dy[r * F + f] * moec::silu(h[r * 2 * F + f]) * h[r * 2 * F + F + f];");
    else
        cg_line(cg, "        s += (double)dy[r * F + f] * x[r * F + f];");
    cg_line(cg, "    s = moec::block_sum<%d>(s);", CG_BLOCK);
    cg_line(cg, "    if (threadIdx.x == 0)");
    cg_line(cg, "        y[r] = (float)s;");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, min64(rows, 65535));
    return 1;
}

/* x [.., W] -> x[.., OFF : OFF + SIZE]; the rows (the lead dimensions, which scale with the batch) a run-time
 * argument */
int cg_emit_slice(Cg *cg, const IrNode *n)
{
    const IrNode *x = n->src[0];
    int64_t rows = cg_lead(x), size = ir_attr_i(n, IR_ATTR_SIZE);
    int64_t w = cg_last(x), off = ir_attr_i(n, IR_ATTR_OFFSET);
    if (cg->kernel_choice == PLAN_KERNELS_FAST && w % 8 == 0 && off % 8 == 0 && size % 8 == 0 && cg_aligned(x, 32)) {
        cg_begin(cg, n, "", "slice of the last dimension, 8 elements (16 bytes) per thread (fast)");
        cg_out(cg, n, "y");
        cg_in(cg, x, "x");
        cg_i64(cg, rows, "rows");
        cg_line(cg, "moec::fast::slice8<%lldll, %lldll, %lldll>(rows, y, x);", (long long)w, (long long)off,
                (long long)size);
        cg_end(cg, CG_BLOCK, cg_grid(rows * size / 8, CG_BLOCK));
        cg->dense_fast_used = 1;
        return 1;
    }
    cg_begin(cg, n, "", "slice of the last dimension");
    cg_out(cg, n, "y");
    cg_in(cg, x, "x");
    cg_i64(cg, rows, "rows");
    cg_const(cg, "W", cg_last(x));
    cg_const(cg, "OFF", ir_attr_i(n, IR_ATTR_OFFSET));
    cg_const(cg, "SIZE", size);
    cg_line(cg, "MOEC_FOR(i, rows * SIZE)");
    if (cg_is_bf16(cg, x->id) || cg_is_bf16(cg, n->id)) /* bf16 storage: widened exactly, stored rounded */
        cg_line(cg, "    moec::sm90::st(y + i, moec::sm90::ld(x + i / SIZE * W + OFF + i %% SIZE));");
    else
        cg_line(cg, "    y[i] = x[i / SIZE * W + OFF + i %% SIZE];");
    cg_end(cg, CG_BLOCK, cg_grid(rows * size, CG_BLOCK));
    return 1;
}
