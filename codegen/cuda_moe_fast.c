/* cuda_moe_fast.c - the fast grouped MLP (moec compile --kernels fast): grouped_mlp and grouped_mlp_bwd
 * as launch sequences around the sm_90a bf16 grouped GEMMs (codegen/gemm_sm90.cuh,
 * docs/kernels-sm90.md); the device code around them is codegen/moe_fast.cuh. The reference kernels
 * (cuda_moe.c) stay the default and the oracle; cuda_fast_mlp_ok is the one rule for which nodes
 * qualify.
 *
 * Every node's rows are copied into zero-padded bf16 buffers of R + 128 E rows, each expert group
 * starting at a multiple of 128 (the offsets are computed on the device: no host sync), the GEMMs run
 * over the padded rows, and the results are copied back to the graph's row order in fp32.
 *
 * The weights: a param's bf16 working copy (plan.h PLAN_BUF_COPY), written by the optimizer's step in
 * the same pass as the update, so no step converts them; the backward's data gradients read the same
 * copies through the GEMM's trans_b mode (no transposed copy). A weight that is no param (none in
 * moec's models today) is converted in each node instead.
 *
 * The forward keeps what its backward needs (the padded offsets, xs and probs in bf16 padding, h =
 * xs w_gate_up^T) in workspaces kept until the backward node (cg_ws_kept): the backward neither
 * gathers xs again nor recomputes h. A forward with no backward (an inference plan) keeps nothing. */
#include <stdio.h>
#include <string.h>

#include "../plan/gemm_sm90.h"
#include "../util/util.h"
#include "cuda.h"
#include "cuda_internal.h"
#include "gemm_sm90_sched.h"
#include "moe_fast_offsets.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* the sm_90a M-grouped kernel's configuration for D [., N] = A [., K] W[g]^T: BLOCK_N 256 (4 stages)
 * where N allows, else 128 (6 stages; 8 with ping-pong's 64-row tiles); ping-pong with 128 x 128 tiles:
 * BLOCK_N 128, 6 stages; the TMA-store epilogue; pingpong: the schedule (plan/gemm_sm90.h) */
static GemmSm90Shape mgrouped_shape_pp(int64_t E, int64_t N, int64_t K, int trans_b, int pingpong)
{
    int bn = pingpong == 2 || N % 256 ? 128 : 256;
    GemmSm90Shape s = {(int)E, (int)N, (int)K, bn, bn == 256 ? 4 : pingpong == 1 ? 8 : 6, GEMM_SM90_EPI_TMA, trans_b,
                       pingpong};
    return s;
}
static GemmSm90Shape mgrouped_shape(int64_t E, int64_t N, int64_t K, int trans_b)
{
    return mgrouped_shape_pp(E, N, K, trans_b, 0);
}

/* The expert MLP's bf16 M-grouped GEMMs (gate_up with the SwiGLU epilogue, down, and the backward's two data
 * gradients): the schedule per launch unless CudaOptions forces one (decision 49). The table is what the H200
 * measured (tests/gpu/pingpong.sh, 2026-12-02, each launch timed in all three schedules in one run):
 *  - reduction K < 4096 (bio: H 1024, F 2816): ping-pong, 128 x 128 tiles per consumer warpgroup (gate_up 0.921,
 *    down 0.947, da 0.966 of the cooperative kernel's time): short main loops, so the epilogue is a large share of
 *    a tile and overlapping it pays;
 *  - K >= 4096 with the SwiGLU epilogue (Mixtral gate_up): ping-pong with 64 x 256 tiles (0.906; the 128 x 128
 *    one 0.993): the epilogue is heavy and the 256-wide tile keeps the cooperative kernel's operand reuse;
 *  - K >= 4096 otherwise (Mixtral down, da, dxs; bio dxs, K 2F = 5632): cooperative (both ping-pongs 1.01-1.02).
 * The dense linears (tc_*) stay cooperative. */
/* The bf16 backward's dSwiGLU in the da GEMM's epilogue by default where da's K (= H) is at least this (decision 60,
 * H200, fast_mlp.sh 2026-12-02, one run, the same plans otherwise): Mixtral (H 4096) da + dSwiGLU 3.52 ms fused
 * against 3.00 + 0.75 separate; bio (H 1024) 0.323 fused against 0.140 + 0.151: at short K the epilogue's reads of h
 * and its stores are a larger share of the tile than the separate pass costs. */
static const int64_t DSWIGLU_FUSED_MIN_K = 4096;

static int mgemm_pingpong(const Cg *cg, int64_t K, int glu)
{
    switch (cg->mgemm_schedule) {
    case CUDA_MGEMM_PINGPONG:
        return 2;
    case CUDA_MGEMM_PINGPONG64:
        return 1;
    case CUDA_MGEMM_COOPERATIVE:
        return 0;
    default:
        return K < 4096 ? 2 : glu ? 1 : 0;
    }
}
/* The K-grouped (weight-gradient) kernel's epilogue in fast plans unless CudaOptions says otherwise: the
 * TMA-store one, measured on the H200 in the layer benchmark against the stores from registers (2026-12-01,
 * bench/layer.c --launches, the same run): bio dw_down 0.177 -> 0.162 ms, dw_gate_up 0.340 -> 0.315; Mixtral
 * 3.35 -> 3.20, 6.45 -> 6.35 (docs/kernels-sm90.md). */
static const int FAST_KGEMM_EPILOGUE = GEMM_SM90_KEPI_TMA;

/* the K-grouped kernel's: dW [E, N, K]; BLOCK_N divides K (128 for ping-pong: pingpong 1). tma: the TMA-store
 * epilogue, taken only where dW starts 16-byte aligned in its buffer (dw_byte_offset % 16 == 0: a tensor map
 * needs it), else the stores from registers. */
static GemmSm90Shape kgrouped_shape_pp(int64_t E, int64_t N, int64_t K, int tma, int64_t dw_byte_offset, int pingpong)
{
    int bn = !pingpong && K % 256 == 0 ? 256 : 128;
    GemmSm90Shape s = {(int)E, (int)N, (int)K, bn, bn == 256 ? 4 : 6,
                       tma && dw_byte_offset % 16 == 0 ? GEMM_SM90_KEPI_TMA : GEMM_SM90_KEPI_REGS, 0, pingpong};
    return s;
}
static GemmSm90Shape kgrouped_shape(int64_t E, int64_t N, int64_t K, int tma, int64_t dw_byte_offset)
{
    return kgrouped_shape_pp(E, N, K, tma, dw_byte_offset, 0);
}

/* The expert MLP's weight-gradient GEMMs (dW [E, N, K]), unless CudaOptions says otherwise: ping-pong with 128 x 128
 * tiles where a group's dW is smaller than KGEMM_COOP_ELEMS elements, the cooperative 128 x 256 tile from there
 * (decision 68). Measured in the layer benchmark: on the H200 ping-pong was 4% faster at both shapes (Mixtral
 * dW_gate_up 6.08 / 6.34 ms, dW_down 3.06 / 3.19; bio 0.292 / 0.311, 0.148 / 0.160; decision 49), on an H100
 * ping-pong loses 38% at Mixtral's (9.38 / 5.82 ms, 3.62 / 2.94: the layer 31.7 -> 27.6 ms) and ties at bio's
 * (the layer 1.999 / 1.993). */
static const CudaKgemmSchedule FAST_KGEMM_SCHEDULE = CUDA_KSCHED_DEFAULT;
enum { KGEMM_COOP_ELEMS = 1 << 24 };
static int kgemm_pingpong(const Cg *cg, int64_t N, int64_t K)
{
    CudaKgemmSchedule s = cg->kgemm_schedule != CUDA_KSCHED_DEFAULT ? cg->kgemm_schedule : FAST_KGEMM_SCHEDULE;
    if (s == CUDA_KSCHED_DEFAULT)
        return N * K < KGEMM_COOP_ELEMS;
    return s == CUDA_KSCHED_PINGPONG;
}

static int kgemm_tma(const Cg *cg)
{
    return cg->kgemm_epilogue == CUDA_KGEMM_TMA ||
           (cg->kgemm_epilogue == CUDA_KGEMM_DEFAULT && FAST_KGEMM_EPILOGUE == GEMM_SM90_KEPI_TMA);
}

static int is_fp8b(const IrNode *n)
{
    return ir_has_attr(n, IR_ATTR_PRECISION) && ir_attr_e(n, IR_ATTR_PRECISION) == IR_PREC_FP8_BLOCK;
}

static int is_mx(const IrNode *n)
{
    return ir_has_attr(n, IR_ATTR_PRECISION) && ir_attr_e(n, IR_ATTR_PRECISION) == IR_PREC_MXFP8;
}

static int fp8b_mlp_ok(const IrNode *n, char *why, size_t len);

int cuda_fast_mlp_ok(const IrNode *n, char *why, size_t len)
{
    if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD) {
        snprintf(why, len, "not a grouped_mlp node");
        return 0;
    }
    if (is_fp8b(n) || is_mx(n))
        return fp8b_mlp_ok(n, why, len);
    if (ir_has_attr(n, IR_ATTR_PRECISION) && ir_attr_e(n, IR_ATTR_PRECISION) != IR_PREC_BF16) {
        snprintf(why, len, "precision %s (the fast kernels are bf16)",
                 ir_precision_name[ir_attr_e(n, IR_ATTR_PRECISION)]);
        return 0;
    }
    const IrNode *xs = n->src[n->op == IR_OP_GROUPED_MLP ? 0 : 1], *w1 = n->src[n->op == IR_OP_GROUPED_MLP ? 1 : 2];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    if (H % 128 || F % 128) {
        snprintf(why, len, "H %lld and F %lld must be multiples of 128", (long long)H, (long long)F);
        return 0;
    }
    if (moec_fast_rows_cap(R, (int)E) >= ((int64_t)1 << 31) || E * 2 * F * H >= ((int64_t)1 << 40)) {
        snprintf(why, len, "too large: R + 128 E = %lld rows", (long long)moec_fast_rows_cap(R, (int)E));
        return 0;
    }
    /* every schedule must fit (which one a plan gets is a compile option); gate_up with the SwiGLU epilogue */
    GemmSm90Shape m[12];
    for (int pp = 0; pp < 3; pp++) {
        m[4 * pp + 0] = mgrouped_shape_pp(E, 2 * F, H, 0, pp);
        m[4 * pp + 0].epilogue = GEMM_SM90_EPI_GLU;
        m[4 * pp + 1] = mgrouped_shape_pp(E, H, F, 0, pp);
        m[4 * pp + 2] = mgrouped_shape_pp(E, F, H, 1, pp);
        m[4 * pp + 3] = mgrouped_shape_pp(E, H, 2 * F, 1, pp);
    }
    /* both epilogues must fit (which one a launch gets depends on its offset in the output) */
    GemmSm90Shape k[8] = {kgrouped_shape(E, H, F, 1, 0),           kgrouped_shape(E, 2 * F, H, 1, 0),
                          kgrouped_shape(E, H, F, 0, 0),           kgrouped_shape(E, 2 * F, H, 0, 0),
                          kgrouped_shape_pp(E, H, F, 1, 0, 1),     kgrouped_shape_pp(E, 2 * F, H, 1, 0, 1),
                          kgrouped_shape_pp(E, H, F, 0, 0, 1),     kgrouped_shape_pp(E, 2 * F, H, 0, 0, 1)};
    char err[200];
    for (int i = 0; i < 12; i++)
        if (!gemm_sm90_check_shape(&m[i], err, sizeof err)) {
            snprintf(why, len, "GEMM [%d x %d] over %d: %s", m[i].N, m[i].K, m[i].E, err);
            return 0;
        }
    for (int i = 0; i < 8; i++)
        if (!gemm_sm90_kgrouped_check_shape(&k[i], err, sizeof err)) {
            snprintf(why, len, "weight-gradient GEMM [%d x %d] over %d: %s", k[i].N, k[i].K, k[i].E, err);
            return 0;
        }
    snprintf(why, len, "bf16, H %lld and F %lld multiples of 128", (long long)H, (long long)F);
    return 1;
}

typedef struct Fast {
    const IrNode *n;
    int64_t R, H, E, F, rcap;
    int ofs;   /* int [2E + 2]: padded offsets, then group starts */
    int mx;    /* MXFP8 (else fp8-block, where the FP8 GEMMs are used) */
    int step, steps;
    const char *op;
} Fast;

static void fast_begin(Cg *cg, Fast *f, const char *suffix, const char *what)
{
    char w[400];
    snprintf(w, sizeof w, "%s (fast) %d/%d: %s", f->op, ++f->step, f->steps, what);
    cg_begin(cg, f->n, suffix, w);
}

/* the compile-time sizes E, H, F (none scales with the batch: the kernels' code is the same at every batch,
 * docs/decisions.md 62) */
static void fast_consts(Cg *cg, const Fast *f)
{
    cg_line(cg, "[[maybe_unused]] constexpr int E = %lld;", (long long)f->E);
    cg_line(cg, "[[maybe_unused]] constexpr long long H = %lld, F = %lld;", (long long)f->H, (long long)f->F);
}

/* the node's row count R (it scales with the batch): a kernel parameter, given at run time */
static void fast_rows(Cg *cg, const Fast *f) { cg_i64(cg, f->R, "R"); }

/* grid for the one-block-per-row kernels */
static int64_t row_grid(int64_t rows) { return min64(rows, 2048); }

static void emit_offsets(Cg *cg, Fast *f, const IrNode *splits)
{
    fast_begin(cg, f, "fast_ofs", "padded group offsets (each group from a multiple of 128 rows) and the group "
                                  "starts, on the device");
    cg_param(cg, f->ofs, 1, "ofs");
    cg_in(cg, splits, "splits");
    fast_rows(cg, f);
    fast_consts(cg, f);
    cg_line(cg, "moec::fast::offsets<E>(ofs, splits, R);");
    cg_end(cg, 32, 1);
}

/* D [rcap, N] = A [rcap, K] . W[g]^T over the padded groups, W [E, N, K]; trans_b: D = A . W[g], W [E, K, N] */
static void emit_mgemm_glu(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int w, int d, int64_t N,
                           int64_t K, int trans_b, int act, int probs);
static void emit_mgemm(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int w, int d, int64_t N, int64_t K,
                       int trans_b)
{
    emit_mgemm_glu(cg, f, suffix, what, a, w, d, N, K, trans_b, -1, -1);
}

/* act >= 0: the SwiGLU epilogue also writes act [rcap, N / 2] = silu(gate) up probs (W's rows interleaved) */
static void emit_mgemm_glu(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int w, int d, int64_t N,
                           int64_t K, int trans_b, int act, int probs)
{
    GemmSm90Shape s = mgrouped_shape_pp(f->E, N, K, trans_b, mgemm_pingpong(cg, K, act >= 0));
    if (act >= 0)
        s.epilogue = GEMM_SM90_EPI_GLU;
    /* the kernel's name carries its configuration (what --profile and the SASS tools print) */
    char sfx[96];
    snprintf(sfx, sizeof sfx, "%s_bn%d_s%d%s%s%s", suffix, s.block_n, s.stages, act >= 0 ? "_glu" : "",
             trans_b ? "_tb" : "", s.pingpong == 2 ? "_pp" : s.pingpong == 1 ? "_pp64" : "");
    suffix = sfx;
    fast_begin(cg, f, suffix, what);
    cg_tmap(cg, a, f->rcap, K, gemm_sm90_block_m(&s), "tma_a");
    if (trans_b)
        cg_tmap(cg, w, f->E * K, N, 64, "tma_b");
    else
        cg_tmap(cg, w, f->E * N, K, gemm_sm90_b_box_rows(&s), "tma_b");
    cg_tmap(cg, d, f->rcap, N, 64, "tma_d");
    if (act >= 0)
        cg_tmap(cg, act, f->rcap, N / 2, 64, "tma_act");
    cg_param(cg, d, 1, "d");
    if (act >= 0)
        cg_param(cg, probs, 0, "probs");
    cg_param(cg, f->ofs, 0, "offsets");
    cg_i32(cg, f->rcap, "rows_cap");
    cg_line(cg, "moec::sm90::GemmMGrouped<%d, %d, %d, %d, %d, %d, %d, %d>::run(tma_a, tma_b, tma_d, d, offsets, "
                "rows_cap%s);",
            s.E, s.N, s.K, s.block_n, s.stages, s.epilogue, s.trans_b, s.pingpong, act >= 0 ? ", &tma_act, probs" : "");
    cg_launch_extra(cg, gemm_sm90_smem_bytes(&s), 1);
    cg_end(cg, GEMM_SM90_THREADS, 1);
    cg->fast_used = 1;
}

/* The backward's da = dy w_down launch with the dSwiGLU epilogue (decision 60; gemm_sm90.cuh EPILOGUE 5, 6): da
 * [rcap, F] is never stored; the epilogue reads h [rcap, 2F] (glu: gate/up interleaved in blocks of 128) and p,
 * writes dh [rcap, 2F] (h's layout), a [rcap, F] and dpart [rcap, F / 128] (partials of dprobs). The schedule:
 * the SwiGLU forward's rule (a heavy epilogue: ping-pong from K 4096 on), unless CudaOptions forces one. */
static void emit_mgemm_dswiglu(Cg *cg, Fast *f, int dyp, int w2b, int hp, int pp, int dhp, int ap, int dpart, int glu)
{
    const int64_t N = f->F, K = f->H;
    GemmSm90Shape s = mgrouped_shape_pp(f->E, N, K, 1, mgemm_pingpong(cg, K, 1));
    s.epilogue = glu ? GEMM_SM90_EPI_DSWIGLU : GEMM_SM90_EPI_DSWIGLU_SPLIT;
    char sfx[96];
    snprintf(sfx, sizeof sfx, "fast_da_dswiglu_bn%d_s%d_tb%s", s.block_n, s.stages,
             s.pingpong == 2 ? "_pp" : s.pingpong == 1 ? "_pp64" : "");
    fast_begin(cg, f, sfx,
               "da = dy w_down per group (M-grouped GEMM, trans_b) and in its epilogue dh = dSwiGLU(da probs), a = "
               "silu(gate) up probs and per 128 columns the partials of dprobs = sum da silu(gate) up (da never stored)");
    cg_tmap(cg, dyp, f->rcap, K, gemm_sm90_block_m(&s), "tma_a");
    cg_tmap(cg, w2b, f->E * K, N, 64, "tma_b");
    cg_tmap(cg, dhp, f->rcap, 2 * N, 64, "tma_dh");
    cg_tmap(cg, ap, f->rcap, N, 64, "tma_act");
    cg_param(cg, dpart, 1, "dpart");
    cg_param(cg, hp, 0, "hp");
    cg_param(cg, pp, 0, "probs");
    cg_param(cg, f->ofs, 0, "offsets");
    cg_i32(cg, f->rcap, "rows_cap");
    cg_line(cg, "moec::sm90::GemmMGrouped<%d, %d, %d, %d, %d, %d, %d, %d>::run(tma_a, tma_b, tma_dh, nullptr, offsets, "
                "rows_cap, &tma_act, probs, 0, hp, dpart);",
            s.E, s.N, s.K, s.block_n, s.stages, s.epilogue, s.trans_b, s.pingpong);
    cg_launch_extra(cg, gemm_sm90_smem_bytes(&s), 1);
    cg_end(cg, GEMM_SM90_THREADS, 1);
    cg->fast_used = 1;
}

/* The param whose whole gradient is the node's elements [off, off + numel) (the autodiff's view of the expert
 * MLP's backward there), or NULL. Such a gradient is final where its weight-gradient GEMM stores it (no all-reduce,
 * nothing added), so the GEMM can write the squares of its gradient norm (decision 73); a gradient that goes
 * through an all-reduce (ep or dp above 1: the sum over replicas, or at least the mean over the world) is another
 * node, and gets none. */
static const IrNode *grad_param_at(const Cg *cg, const Fast *f, int64_t off, int64_t numel)
{
    const IrGraph *g = cg->g;
    for (int p = 0; p < g->nparams; p++) {
        const IrNode *gr = g->grads ? g->grads[p] : NULL;
        if (gr && gr->op == IR_OP_VIEW && gr->src[0] == f->n && ir_attr_i(gr, IR_ATTR_OFFSET) == off &&
            ir_numel(gr) == numel && ir_numel(g->params[p]) == numel)
            return g->params[p];
    }
    return NULL;
}

/* out + off: dW [E, N, K] f32 = dY [rcap, N]^T . X [rcap, K] per group; the TMA-store epilogue (an fp32
 * tensor map over dW viewed [E N, K]) where out + off is 16-byte aligned; sumsq: the gradient norm's squares
 * (decision 73) where dW is a param's whole gradient */
static void emit_kgemm(Cg *cg, Fast *f, const char *suffix, const char *what, int dy, int x, int64_t off, int64_t N,
                       int64_t K, int64_t glu_f)
{
    GemmSm90Shape s = kgrouped_shape_pp(f->E, N, K, kgemm_tma(cg), off * 4, kgemm_pingpong(cg, N, K));
    char sfx[96];
    snprintf(sfx, sizeof sfx, "%s_bn%d_s%d%s%s%s", suffix, s.block_n, s.stages, glu_f ? "_glu" : "",
             s.epilogue == GEMM_SM90_KEPI_TMA ? "_tma" : "", s.pingpong ? "_pp" : "");
    suffix = sfx;
    fast_begin(cg, f, suffix, what);
    cg_tmap(cg, dy, f->rcap, N, 64, "tma_dy");
    cg_tmap(cg, x, f->rcap, K, 64, "tma_x");
    if (s.epilogue == GEMM_SM90_KEPI_TMA)
        cg_tmap_f32(cg, f->n->id, off, f->E * N, K, 64, "tma_dw");
    cg_out(cg, f->n, "out");
    cg_param(cg, f->ofs, 0, "offsets");
    cg_i32(cg, f->rcap, "rows_cap");
    cg_i64(cg, off, "dw_off"); /* dW's place in the output: past dxs and dprobs, so it scales with the batch */
    cg_norm(cg, grad_param_at(cg, f, off, f->E * N * K), KGEMM_SUMSQ_PER_BLOCK, "sumsq");
    if (s.epilogue == GEMM_SM90_KEPI_TMA)
        cg_line(cg, "moec::sm90::GemmKGrouped<%d, %d, %d, %d, %d, 0, 16, %lld, %d>::run(tma_dy, tma_x, tma_dw, out + dw_off, "
                    "offsets, rows_cap, sumsq);",
                s.E, s.N, s.K, s.block_n, s.stages, (long long)glu_f, s.pingpong);
    else
        cg_line(cg, "moec::sm90::GemmKGrouped<%d, %d, %d, %d, %d, 1, 16, %lld, %d>::run(tma_dy, tma_x, out + dw_off, "
                    "offsets, rows_cap, sumsq);",
                s.E, s.N, s.K, s.block_n, s.stages, (long long)glu_f, s.pingpong);
    cg_launch_extra(cg, gemm_sm90_kgrouped_smem_bytes(&s), 1);
    cg_end(cg, GEMM_SM90_THREADS, 1);
    cg->fast_used = 1;
}

/* fp8-block's row capacity: R + 128 E rounded up to a multiple of 128 (decision 70). It is the row stride of the
 * transposed E4M3 operands of the weight-gradient GEMMs (dY^T, X^T [C, rows_cap]), whose TMA loads take 128-byte
 * rows: at a stride that is a multiple of 16 only (R + 128 E when T k is not a multiple of 128), every row straddles
 * two 128-byte lines, and the Mixtral dW_gate_up GEMM ran at 598 against 861 TFLOP/s (an H100, tests/gpu/gemm_fp8.sh).
 * At most 127 rows more (of 16384 + 1024 at Mixtral's shapes: none there). */
static int64_t fp8b_rows_cap(int64_t R, int64_t E) { return (moec_fast_rows_cap(R, (int)E) + 127) / 128 * 128; }

static void fast_init(Cg *cg, Fast *f, const IrNode *n, const IrNode *xs, const IrNode *w1, int steps)
{
    memset(f, 0, sizeof *f);
    f->n = n;
    f->R = xs->shape[0];
    f->H = xs->shape[1];
    f->E = w1->shape[0];
    f->F = w1->shape[1] / 2;
    f->rcap = moec_fast_rows_cap(f->R, (int)f->E);
    if (is_fp8b(n))
        f->rcap = fp8b_rows_cap(f->R, f->E);
    else if (is_mx(n))
        f->rcap = (f->rcap + 15) / 16 * 16;
    f->mx = is_mx(n); /* the FP8 kernel's activation scales: rows_cap % 16 == 0 */
    f->steps = steps;
    f->op = ir_node_op_name(n);
    char why[512], impl[560];
    cuda_fast_mlp_ok(n, why, sizeof why);
    snprintf(impl, sizeof impl, "fast: %s", why);
    cg_impl(cg, impl);
}

/* The backward node of forward n (the same xs, weights, splits and probs) if it gets the fast kernels
 * too, else NULL. */
static const IrNode *fast_backward_of(Cg *cg, const IrNode *n)
{
    char why[256];
    for (int i = n->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *b = cg->g->nodes[i];
        if (b->op == IR_OP_GROUPED_MLP_BWD && b->src[1] == n->src[0] && b->src[2] == n->src[1] &&
            b->src[3] == n->src[2] && b->src[4] == n->src[3] && b->src[5] == n->src[4] &&
            cuda_fast_mlp_ok(b, why, sizeof why))
            return b;
    }
    return NULL;
}

/* The forward node whose kept workspaces backward n reads, else NULL (it then recomputes). */
static const IrNode *fast_forward_of(Cg *cg, const IrNode *n)
{
    for (int i = n->id - 1; i >= 0; i--) {
        const IrNode *f = cg->g->nodes[i];
        if (f->op == IR_OP_GROUPED_MLP && n->src[1] == f->src[0] && n->src[2] == f->src[1] &&
            n->src[3] == f->src[2] && n->src[4] == f->src[3] && n->src[5] == f->src[4]) {
            int h = cg_find_ws(cg, f, "h_padded"), hq = cg_find_ws(cg, f, "h_e4m3"); /* hq: fp8-block's copy */
            return (h >= 0 && cg->bufs[h].until == n->id) || (hq >= 0 && cg->bufs[hq].until == n->id) ? f : NULL;
        }
    }
    return NULL;
}

/* A dispatch node the fast kernels read through: xs = dispatch(x, plan) whose every consumer is a fast
 * grouped_mlp with a fast backward (which keeps its padded xs, so reads xs only through this node) or that
 * backward, or dy = dispatch(dout, plan) read only by a fast grouped_mlp_bwd as its dy. Then the fast
 * kernels gather the token rows straight from the dispatch's source into their padded bf16 groups (one
 * read of each token row, its k rows written), and the dispatch itself launches nothing: its expert-major
 * fp32 rows are never materialised. --kernels fast only. */
int cg_fast_reads_through(Cg *cg, const IrNode *d)
{
    char why[256];
    if (cg->kernel_choice != PLAN_KERNELS_FAST || d->op != IR_OP_DISPATCH)
        return 0;
    int users = 0;
    for (int i = d->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *u = cg->g->nodes[i];
        for (int s = 0; s < u->nsrc; s++) {
            if (u->src[s] != d)
                continue;
            if (u->op == IR_OP_VIEW && s > 0)
                continue; /* a view's later sources give its shape only: no read */
            users++;
            if (u->is_output)
                return 0;
            if (u->op == IR_OP_GROUPED_MLP && s == 0 && cuda_fast_mlp_ok(u, why, sizeof why) && fast_backward_of(cg, u))
                continue;
            if (u->op == IR_OP_GROUPED_MLP_BWD && (s == 0 || s == 1) && cuda_fast_mlp_ok(u, why, sizeof why)) {
                /* as xs: only when its forward keeps xs (found by the same rule as the emitters) */
                if (s == 1) {
                    int kept = 0;
                    for (int j = u->id - 1; j >= 0 && !kept; j--) {
                        const IrNode *f = cg->g->nodes[j];
                        kept = f->op == IR_OP_GROUPED_MLP && f->src[0] == d && fast_backward_of(cg, f) == u;
                    }
                    if (!kept)
                        return 0;
                }
                continue;
            }
            return 0;
        }
    }
    return users > 0 && !d->is_output;
}

/* The combine that reads forward n's output straight from its padded bf16 rows: y = n is read by
 * exactly one node, combine(y, plan), and is no graph output. Then the forward keeps y_padded for it
 * and writes no y (its buffer is elided). */
static const IrNode *fast_combine_of(Cg *cg, const IrNode *n)
{
    if (n->is_output)
        return NULL;
    const IrNode *c = NULL;
    for (int i = n->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *u = cg->g->nodes[i];
        for (int s = 0; s < u->nsrc; s++)
            if (u->src[s] == n) {
                if (c || u->op != IR_OP_COMBINE || s != 0)
                    return NULL;
                c = u;
            }
    }
    return c;
}

/* a workspace of the forward, kept for its backward bwd when there is one */
static int fwd_ws(Cg *cg, const Fast *f, const IrNode *bwd, PlanStorage st, int64_t count, const char *what)
{
    return bwd ? cg_ws_kept(cg, f->n, bwd, st, count, what) : cg_ws(cg, f->n, st, count, what);
}

/* The bf16 weights the GEMMs read: the param's working copy, or (a weight that is no param) a
 * workspace converted in this node; *convert says whether it must be. */
static int weight_bf16(Cg *cg, const Fast *f, const IrNode *w, const char *what, int *convert, int64_t glu_f)
{
    if (w->op == IR_OP_PARAM) {
        *convert = 0;
        return cg_param_copy(cg, w, glu_f);
    }
    *convert = 1;
    return cg_ws(cg, f->n, PLAN_BF16, ir_numel(w), what);
}

static void emit_convert(Cg *cg, Fast *f, const IrNode *w, int wb, const char *name)
{
    char what[200];
    snprintf(what, sizeof what, "a bf16 copy of %s (no param: converted in every step)", name);
    fast_begin(cg, f, "fast_weights", what);
    cg_param(cg, wb, 1, "wb");
    cg_in(cg, w, "w");
    cg_line(cg, "moec::fast::convert<%lldll>(wb, w);", (long long)ir_numel(w));
    cg_end(cg, CG_BLOCK, min64(cg_grid(ir_numel(w) / 4, CG_BLOCK), 132 * 16));
}

/* The end of a fast expert-MLP forward (bf16, fp8-block, MXFP8): with a fast combine after it, y is not
 * written (the combine reads y_padded); else y back to the graph's row order. Returns 1. */
static int emit_forward_end(Cg *cg, Fast *f, const IrNode *n, const IrNode *comb, int yp)
{
    if (comb) {
        cg->bufs[n->id].elided = 1; /* the combine reads y_padded */
        return 1;
    }
    fast_begin(cg, f, "fast_scatter", "y back to the graph's row order in fp32 (padding rows zero)");
    cg_out(cg, n, "y");
    cg_param(cg, yp, 0, "yp");
    cg_param(cg, f->ofs, 0, "ofs");
    fast_rows(cg, f);
    fast_consts(cg, f);
    cg_line(cg, "moec::fast::scatter<E, H>(y, nullptr, yp, nullptr, ofs, R);");
    cg_end(cg, CG_BLOCK, row_grid(f->R));
    return 1;
}

static int emit_grouped_mlp_fp8(Cg *cg, const IrNode *n);
static int emit_grouped_mlp_bwd_fp8(Cg *cg, const IrNode *n);
static int emit_grouped_mlp_mx(Cg *cg, const IrNode *n);
static int emit_grouped_mlp_bwd_mx(Cg *cg, const IrNode *n);

int cg_emit_grouped_mlp_fast(Cg *cg, const IrNode *n)
{
    if (is_fp8b(n))
        return emit_grouped_mlp_fp8(cg, n);
    if (is_mx(n))
        return emit_grouped_mlp_mx(cg, n);
    const IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *sp = n->src[3], *p = n->src[4];
    Fast f;
    int cv1, cv2;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *bwd = fast_backward_of(cg, n);
    int64_t H = f.H, F = f.F, rc = f.rcap;
    f.ofs = fwd_ws(cg, &f, bwd, PLAN_I32, 2 * f.E + 2, "fast_offsets");
    int xp = fwd_ws(cg, &f, bwd, PLAN_BF16, rc * H, "xs_padded"), pp = fwd_ws(cg, &f, bwd, PLAN_F32, rc, "probs_padded");
    int hp = fwd_ws(cg, &f, bwd, PLAN_BF16, rc * 2 * F, "h_padded");
    const IrNode *comb = fast_combine_of(cg, n);
    int ap = cg_ws(cg, n, PLAN_BF16, rc * F, "a_padded");
    int yp = comb ? cg_ws_kept(cg, n, comb, PLAN_BF16, rc * H, "y_padded") : cg_ws(cg, n, PLAN_BF16, rc * H, "y_padded");
    /* w_gate_up a param: its copy gate/up-interleaved, SwiGLU in the GEMM's epilogue */
    const int glu = w1->op == IR_OP_PARAM;
    int w1b = weight_bf16(cg, &f, w1, "w_gate_up_bf16", &cv1, glu ? F : 0);
    int w2b = weight_bf16(cg, &f, w2, "w_down_bf16", &cv2, 0);
    f.steps = 6 - (comb != NULL) - glu + cv1 + cv2;
    if (comb && !bwd)
        f.ofs = cg_ws_kept(cg, n, comb, PLAN_I32, 2 * f.E + 2, "fast_offsets_c");

    emit_offsets(cg, &f, sp);

    if (cg_fast_reads_through(cg, xs)) {
        /* xs = dispatch(x, plan) is never materialised: the token rows straight into the padded groups */
        const IrNode *x = xs->src[0], *rp = xs->src[1];
        fast_begin(cg, &f, "fast_gather", "token rows into zero-padded groups as bf16, through the dispatch (which "
                                          "launches nothing), and probs");
        cg_param(cg, xp, 1, "xp");
        cg_param(cg, pp, 1, "pp");
        cg_in(cg, x, "x");
        cg_in(cg, rp, "plan");
        cg_in(cg, p, "p");
        cg_param(cg, f.ofs, 0, "ofs");
        cg_i64(cg, cg_lead(rp), "T");
        fast_consts(cg, &f);
        cg_line(cg, "moec::fast::gather_tokens<E, H, %lld>(xp, pp, x, plan, p, ofs, T);", (long long)cg_last(rp));
        cg_end(cg, CG_BLOCK, min64(cg_lead(rp) + 128 * f.E, 132 * 16));
    } else {
        fast_begin(cg, &f, "fast_gather", "xs and probs into zero-padded groups (xs as bf16)");
        cg_param(cg, xp, 1, "xp");
        cg_param(cg, pp, 1, "pp");
        cg_in(cg, xs, "xs");
        cg_in(cg, p, "p");
        cg_param(cg, f.ofs, 0, "ofs");
        fast_consts(cg, &f);
        cg_line(cg, "moec::fast::gather<E, H>(xp, pp, xs, p, ofs);");
        cg_end(cg, CG_BLOCK, row_grid(rc));
    }

    if (cv1)
        emit_convert(cg, &f, w1, w1b, "w_gate_up");
    if (cv2)
        emit_convert(cg, &f, w2, w2b, "w_down");

    if (glu) {
        emit_mgemm_glu(cg, &f, "fast_gate_up",
                       bwd ? "h = xs w_gate_up^T per group, and a = silu(gate) up probs in its epilogue (sm_90a bf16 "
                             "M-grouped GEMM on the gate/up-interleaved copy; h kept for the backward)"
                           : "h = xs w_gate_up^T per group, and a = silu(gate) up probs in its epilogue (sm_90a bf16 "
                             "M-grouped GEMM on the gate/up-interleaved copy)",
                       xp, w1b, hp, 2 * F, H, 0, ap, pp);
    } else {
        emit_mgemm(cg, &f, "fast_gate_up",
                   bwd ? "h = xs w_gate_up^T per group (sm_90a bf16 M-grouped GEMM; h kept for the backward)"
                       : "h = xs w_gate_up^T per group (sm_90a bf16 M-grouped GEMM)",
                   xp, w1b, hp, 2 * F, H, 0);
        fast_begin(cg, &f, "fast_swiglu", "a = silu(gate) up probs (bf16)");
        cg_param(cg, ap, 1, "ap");
        cg_param(cg, hp, 0, "hp");
        cg_param(cg, pp, 0, "pp");
        cg_param(cg, f.ofs, 0, "ofs");
        fast_consts(cg, &f);
        cg_line(cg, "moec::fast::swiglu<E, F>(ap, hp, pp, ofs);");
        cg_end(cg, CG_BLOCK, row_grid(rc));
    }

    emit_mgemm(cg, &f, "fast_down", "y = a w_down^T per group (sm_90a bf16 M-grouped GEMM)", ap, w2b, yp, H, F, 0);

    return emit_forward_end(cg, &f, n, comb, yp);
}

int cg_emit_combine_fast(Cg *cg, const IrNode *n)
{
    const IrNode *y = n->src[0], *plan = n->src[1];
    if (y->op != IR_OP_GROUPED_MLP || !cg->bufs[y->id].elided)
        return 0;
    /* the offsets the forward wrote: fast_offsets_c, kept for this combine, where the forward has no backward
     * of its own (a block recomputed by `checkpoint blocks`: its backward pairs with the clone), else
     * fast_offsets, kept for the backward (and so past this combine). Never the reverse: a forward without a
     * backward also made a fast_offsets it does not keep, and a combine that read it read freed memory (an
     * illegal address on the H200 in a checkpointed Mixtral step) */
    int yp = cg_find_ws(cg, y, "y_padded"), ofs = cg_find_ws(cg, y, "fast_offsets_c");
    if (ofs < 0)
        ofs = cg_find_ws(cg, y, "fast_offsets");
    if (yp < 0 || ofs < 0 || cg->bufs[yp].until != n->id || cg->bufs[ofs].until < n->id)
        die("codegen: %s: the fast forward %s kept no padded rows or offsets for it", n->name, y->name);
    int64_t T = cg_lead(plan), K = cg_last(plan), D = cg_last(n), E = y->src[1]->shape[0];
    char impl[200];
    snprintf(impl, sizeof impl, "fast: the expert rows read from %s's padded bf16 rows (no fp32 copy)", y->name);
    cg_impl(cg, impl);
    cg_begin(cg, n, "fast", "combine: each token sums its k expert rows, read from the fast MLP's padded bf16 rows "
                            "(slot order, as the reference)");
    cg_out(cg, n, "out");
    cg_param(cg, yp, 0, "yp");
    cg_in(cg, plan, "plan");
    cg_param(cg, ofs, 0, "ofs");
    cg_i64(cg, T, "T");
    cg_line(cg, "moec::fast::combine_padded<%lld, %lld, %lldll>(out, yp, plan, ofs, T);", (long long)E, (long long)K,
            (long long)D);
    cg_end(cg, CG_BLOCK, min64(T, 132 * 16));
    cg->fast_used = 1;
    return 1;
}

int cg_emit_grouped_mlp_bwd_fast(Cg *cg, const IrNode *n)
{
    if (is_fp8b(n))
        return emit_grouped_mlp_bwd_fp8(cg, n);
    if (is_mx(n))
        return emit_grouped_mlp_bwd_mx(cg, n);
    const IrNode *dy = n->src[0], *xs = n->src[1], *w1 = n->src[2], *w2 = n->src[3], *sp = n->src[4], *p = n->src[5];
    Fast f;
    int cv1, cv2;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *fwd = fast_forward_of(cg, n);
    int64_t R = f.R, H = f.H, E = f.E, F = f.F, rc = f.rcap;
    int xp, pp, hp;
    if (fwd) {
        /* what the forward kept */
        f.ofs = cg_find_ws(cg, fwd, "fast_offsets");
        xp = cg_find_ws(cg, fwd, "xs_padded");
        pp = cg_find_ws(cg, fwd, "probs_padded");
        hp = cg_find_ws(cg, fwd, "h_padded");
        if (f.ofs < 0 || xp < 0 || pp < 0 || hp < 0)
            die("codegen: %s: the kept workspaces of %s are missing", n->name, fwd->name);
    } else {
        f.ofs = cg_ws(cg, n, PLAN_I32, 2 * E + 2, "fast_offsets");
        xp = cg_ws(cg, n, PLAN_BF16, rc * H, "xs_padded");
        pp = cg_ws(cg, n, PLAN_F32, rc, "probs_padded");
        hp = cg_ws(cg, n, PLAN_BF16, rc * 2 * F, "h_padded");
    }
    /* the dSwiGLU in the da GEMM's epilogue (decision 60): no da, dprobs as F / 128 partials per row; by default
     * where da's K = H >= DSWIGLU_FUSED_MIN_K */
    const int fused = cg->dswiglu == CUDA_DSWIGLU_FUSED || (cg->dswiglu == CUDA_DSWIGLU_DEFAULT && H >= DSWIGLU_FUSED_MIN_K);
    const int64_t np = fused ? F / 128 : 1;
    int dyp = cg_ws(cg, n, PLAN_BF16, rc * H, "dy_padded");
    int dap = fused ? -1 : cg_ws(cg, n, PLAN_BF16, rc * F, "da_padded");
    int dhp = cg_ws(cg, n, PLAN_BF16, rc * 2 * F, "dh_padded"), ap = cg_ws(cg, n, PLAN_BF16, rc * F, "a_padded");
    int dpp = cg_ws(cg, n, PLAN_F32, rc * np, fused ? "dprobs_partials" : "dprobs_padded");
    int dxp = cg_ws(cg, n, PLAN_BF16, rc * H, "dxs_padded");
    const int glu = w1->op == IR_OP_PARAM; /* as the forward: h, dh and the copy gate/up-interleaved */
    int w1b = weight_bf16(cg, &f, w1, "w_gate_up_bf16", &cv1, glu ? F : 0);
    int w2b = weight_bf16(cg, &f, w2, "w_down_bf16", &cv2, 0);
    f.steps = 7 - fused + (fwd ? 0 : 2) + (!fwd && cg_fast_reads_through(cg, dy)) + cv1 + cv2;

    if (!fwd)
        emit_offsets(cg, &f, sp);

    int dy_through = cg_fast_reads_through(cg, dy);
    if (!fwd || !dy_through) {
        fast_begin(cg, &f, "fast_gather",
                   fwd ? "dy into zero-padded groups as bf16 (xs, probs: kept by the forward)"
                       : "xs, probs and dy into zero-padded groups (xs, dy as bf16)");
        if (!fwd) {
            cg_param(cg, xp, 1, "xp");
            cg_param(cg, pp, 1, "pp");
        }
        if (!dy_through)
            cg_param(cg, dyp, 1, "dyp");
        if (!fwd) {
            cg_in(cg, xs, "xs");
            cg_in(cg, p, "p");
        }
        if (!dy_through)
            cg_in(cg, dy, "dy");
        cg_param(cg, f.ofs, 0, "ofs");
        fast_consts(cg, &f);
        if (!fwd)
            cg_line(cg, "moec::fast::gather<E, H>(xp, pp, xs, p, ofs);");
        if (!dy_through)
            cg_line(cg, "moec::fast::gather<E, H>(dyp, nullptr, dy, nullptr, ofs);");
        cg_end(cg, CG_BLOCK, row_grid(rc));
    }
    if (dy_through) {
        /* dy = dispatch(dout, plan) is never materialised */
        const IrNode *dout = dy->src[0], *rp = dy->src[1];
        fast_begin(cg, &f, "fast_gather_dy", "dy's token rows into zero-padded groups as bf16, through the dispatch "
                                             "(which launches nothing)");
        cg_param(cg, dyp, 1, "dyp");
        cg_in(cg, dout, "dout");
        cg_in(cg, rp, "plan");
        cg_param(cg, f.ofs, 0, "ofs");
        cg_i64(cg, cg_lead(rp), "T");
        fast_consts(cg, &f);
        cg_line(cg, "moec::fast::gather_tokens<E, H, %lld>(dyp, nullptr, dout, plan, nullptr, ofs, T);",
                (long long)cg_last(rp));
        cg_end(cg, CG_BLOCK, min64(cg_lead(rp) + 128 * f.E, 132 * 16));
    }

    if (cv1)
        emit_convert(cg, &f, w1, w1b, "w_gate_up");
    if (cv2)
        emit_convert(cg, &f, w2, w2b, "w_down");

    if (!fwd)
        emit_mgemm(cg, &f, "fast_gate_up", "recompute h = xs w_gate_up^T per group (no forward kept it)", xp, w1b, hp,
                   2 * F, H, 0);
    if (fused)
        emit_mgemm_dswiglu(cg, &f, dyp, w2b, hp, pp, dhp, ap, dpp, glu);
    else
        emit_mgemm(cg, &f, "fast_da", "da = dy w_down per group (M-grouped GEMM, trans_b: w_down as it is)", dyp, w2b,
                   dap, F, H, 1);

    if (!fused) {
        fast_begin(cg, &f, "fast_dswiglu", "dh = dSwiGLU(da probs), a = silu(gate) up probs, dprobs = sum da silu(gate) "
                                           "up per row (fixed order)");
        cg_param(cg, dhp, 1, "dhp");
        cg_param(cg, ap, 1, "ap");
        cg_param(cg, dpp, 1, "dpp");
        cg_param(cg, hp, 0, "hp");
        cg_param(cg, dap, 0, "dap");
        cg_param(cg, pp, 0, "pp");
        cg_param(cg, f.ofs, 0, "ofs");
        fast_consts(cg, &f);
        cg_line(cg, "moec::fast::dswiglu<E, F, %d>(dhp, ap, dpp, hp, dap, pp, ofs);", glu);
        cg_end(cg, CG_BLOCK, row_grid(rc));
    }

    emit_mgemm(cg, &f, "fast_dxs", "dxs = dh w_gate_up per group (M-grouped GEMM, trans_b: w_gate_up as it is)", dhp,
               w1b, dxp, H, 2 * F, 1);
    emit_kgemm(cg, &f, "fast_dw_down", "dw_down = dy^T a per group (K-grouped GEMM, fp32 out)", dyp, ap,
               R * H + R + E * 2 * F * H, H, F, 0);
    emit_kgemm(cg, &f, "fast_dw_gate_up",
               glu ? "dw_gate_up = dh^T xs per group (K-grouped GEMM, fp32 out; dh's interleaved gate/up row blocks "
                     "written to their rows)"
                   : "dw_gate_up = dh^T xs per group (K-grouped GEMM, fp32 out)",
               dhp, xp, R * H + R, 2 * F, H, glu ? F : 0);

    fast_begin(cg, &f, "fast_scatter",
               fused ? "dxs back to the graph's row order in fp32 (padding rows zero), and dprobs: each row's F / 128 "
                       "partials summed in order"
                     : "dxs and dprobs back to the graph's row order in fp32 (padding rows zero)");
    cg_out(cg, n, "out");
    cg_param(cg, dxp, 0, "dxp");
    cg_param(cg, dpp, 0, "dpp");
    cg_param(cg, f.ofs, 0, "ofs");
    fast_rows(cg, &f);
    fast_consts(cg, &f);
    if (fused)
        cg_line(cg, "moec::fast::scatter<E, H, %lld>(out, out + R * H, dxp, dpp, ofs, R);", (long long)np);
    else
        cg_line(cg, "moec::fast::scatter<E, H>(out, out + R * H, dxp, dpp, ofs, R);");
    cg_end(cg, CG_BLOCK, row_grid(R));
    return 1;
}

/* ---- fp8-block (--precision fp8-block --kernels fast; docs/fp8-block.md, decision 38): the same padded
 * groups and launch order, the two forward GEMMs and the two data-gradient GEMMs on the FP8 grouped GEMM
 * (gemm_sm90.cuh GemmFp8MGrouped, fp8-block mode: 1 x 128 activation scales, 128 x 128 weight scales,
 * fp32 promotion every 128 of K), the quantisers in codegen/fp8_block_fast.cuh, quantising where the CPU
 * reference does (runtime/cpu/kernels.inc grouped_mlp / grouped_mlp_bwd):
 *   forward   xs 1x128 along H (from the graph's fp32 rows, in the gather), w_gate_up and w_down in
 *             128x128 tiles, the SwiGLU output a 1x128 along F (from bf16 h, in the gate_up GEMM's
 *             epilogue: moec::fp8b::SwigluQuantEpi, decision 57);
 *   dgrad     dy 1x128 along H (from fp32, in the gather), dh 1x128 along 2F (in the dSwiGLU kernel), the
 *             same weight tiles read transposed: W^T copies [E, K, N] written beside W's (FP8 wgmma takes
 *             K-major operands only);
 *   wgrad     dy, a, dh and xs 128x1 within each expert group, their E4M3 codes written transposed
 *             ([C, rows], the tokens contiguous: K-major for FP8 wgmma) with the scales [rows / 128][C], for
 *             the FP8 K-grouped GEMM (GemmFp8KGrouped, decision 45: promotion every 128 tokens with the
 *             outer product of the two scale vectors, as the CPU reference's fp8b_gemm_ref).
 * The weights' tiles and their transposed copies are the params' e4m3 working copies (plan.h PlanFp8Copy,
 * cg_param_fp8b_copy), written by the optimizer's step in the pass that updates w (moec_adamw_fp8b_ExNxK,
 * codegen/cuda_optim.c) and from the values whenever parameters are loaded (moec_fp8b_copy_ExNxK): no node
 * quantises a weight (decision 44; decision 38 had a pass per step in the forward node). */


/* the FP8 kernel's configuration: 6 stages of 128 x 128 x 128 (the most that fit beside the bf16
 * staging buffers: decision 36), bf16 out through TMA stores */
static GemmFp8Shape fp8b_shape(int64_t E, int64_t N, int64_t K)
{
    GemmFp8Shape s = {(int)E, (int)N, (int)K, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 0};
    return s;
}

/* fp8-block's FP8 M-grouped GEMMs in clusters of two blocks (decision 71) unless CudaOptions says otherwise: the
 * two blocks take the tiles (m, 2j) and (m, 2j + 1) and one TMA multicast brings each A stage into both, so A
 * crosses L2 once a pair and the pair's k loops stay in step. Measured on the H100 (decision 71): the Mixtral
 * layer (every such GEMM with N or K >= 14,336) 24.0 -> 23.2 ms, dxs 844 -> 1,002 TFLOP/s standalone; the bio layer
 * (N, K <= 5,632) 1.835 -> 1.88 ms, slower. So by default where N or K reaches FP8B_CLUSTER_MIN. */
enum { FP8B_CLUSTER_MIN = 8192 };

/* the cluster of the FP8 M-grouped GEMM [., K] x [K, N] (n_tiles scheduled tile columns: N / 128, or half that for
 * the fused SwiGLU's gate and up passes): 2 where chosen (MOEC_FP8_CLUSTER, else N or K >= FP8B_CLUSTER_MIN) and
 * the columns pair up, else 1 */
static int fp8b_cluster(const Cg *cg, int64_t N, int64_t K, int64_t n_tiles)
{
    int c = cg->fp8_cluster ? cg->fp8_cluster : N >= FP8B_CLUSTER_MIN || K >= FP8B_CLUSTER_MIN ? 2 : 1;
    return c == 2 && n_tiles % 2 == 0 ? 2 : 1;
}

/* The FP8 K-grouped kernel's dW stores (decision 51): GEMM_FP8_OUT_F32_TMA, TMA stores through 32 KB of staging
 * (5 stages), measured faster in tests/gpu/gemm_fp8.sh on 2026-12-02 (Mixtral dW_gate_up 593 -> 676, dW_down
 * 605 -> 691 TFLOP/s: the fp32 dW's stores no longer wait in the consumers; its ragged-group check passes there).
 * GEMM_FP8_OUT_F32 (8-byte stores from the fragment, 6 stages) is the one checked end to end in a plan
 * (tests/gpu/fast_mlp.sh, 2026-12-02) and stays the fallback: switch back here if fast_mlp.sh's fp8-block rows
 * disagree. The TMA stores need dW 16-byte aligned in the output (else the register stores are taken). */
static const int FP8B_KGEMM_OUT = GEMM_FP8_OUT_F32_TMA;

/* The FP8 K-grouped kernel's schedule unless CudaOptions says otherwise (decision 56): ping-pong, each consumer
 * warpgroup its own 64 x 128 tiles of dW, one's TMA stores under the other's main loop (the cooperative kernel, 128 x
 * 128 tiles, stores a tile's 64 KB of fp32 with the tensor cores idle: 676 / 691 TFLOP/s on the H200, decision 51).
 * Measured on the H200 (tests/gpu/gemm_fp8.sh, 2026-12-02, decision 56): correct, bit-identical to the cooperative
 * kernel, but slower at every shape (Mixtral dW_gate_up 443 against 649 TFLOP/s, pp/coop 0.68-0.71), so the default
 * stays cooperative; MOEC_FP8_KGEMM=pingpong selects it. */
static const CudaKgemmSchedule FP8B_KGEMM_SCHEDULE = CUDA_KSCHED_COOPERATIVE;
static int fp8b_kgemm_pingpong(const Cg *cg)
{
    return cg->fp8_kgemm_schedule == CUDA_KSCHED_PINGPONG ||
           (cg->fp8_kgemm_schedule == CUDA_KSCHED_DEFAULT && FP8B_KGEMM_SCHEDULE == CUDA_KSCHED_PINGPONG);
}

/* the FP8 K-grouped kernel's (weight gradients, fp32 out): 128 tokens a stage; tma: the TMA-store epilogue where dW
 * starts 16-byte aligned (dw_byte_offset % 16 == 0), 5 stages of 128 x 128 tiles, or with pingpong 7 of 64 x 128
 * (ping-pong takes the TMA stores only); else the register stores, 6 stages of 128 x 128 */
static GemmFp8Shape fp8b_kshape(int64_t E, int64_t N, int64_t K, int tma, int64_t dw_byte_offset, int pingpong)
{
    int t = tma && dw_byte_offset % 16 == 0, pp = t && pingpong;
    GemmFp8Shape s = {(int)E, (int)N, (int)K, pp ? 7 : t ? 5 : 6, GEMM_FP8_BLOCK,
                      t ? GEMM_FP8_OUT_F32_TMA : GEMM_FP8_OUT_F32, pp, 0};
    return s;
}

/* MXFP8's (decision 53): 1 x 32 scales on both operands, promotion every 32 K; 5 stages (the decoded fp32
 * scales take 4 KB a stage more than fp8-block's: 6 do not fit beside the bf16 staging buffers) */
static GemmFp8Shape mx_shape(int64_t E, int64_t N, int64_t K)
{
    GemmFp8Shape s = {(int)E, (int)N, (int)K, 5, GEMM_FP8_MX, GEMM_FP8_OUT_BF16, 0, 0};
    return s;
}

static int mx_mlp_ok(const IrNode *n, char *why, size_t len)
{
    const IrNode *xs = n->src[n->op == IR_OP_GROUPED_MLP ? 0 : 1], *w1 = n->src[n->op == IR_OP_GROUPED_MLP ? 1 : 2];
    const IrNode *w2 = n->src[n->op == IR_OP_GROUPED_MLP ? 2 : 3];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    if (w1->op != IR_OP_PARAM || w2->op != IR_OP_PARAM) {
        snprintf(why, len, "mxfp8: the expert weights must be params (the GEMMs read their MXFP8 copies, which the "
                 "optimizer writes: decision 55); %s is a %s", w1->op != IR_OP_PARAM ? w1->name : w2->name,
                 ir_node_op_name(w1->op != IR_OP_PARAM ? w1 : w2));
        return 0;
    }
    if (H % 256 || F % 256) {
        snprintf(why, len, "mxfp8: H %lld and F %lld must be multiples of 256 (the FP8 GEMM takes its 128-deep K "
                 "blocks in pairs, and K is H or F forward, H or 2F in the data gradients)", (long long)H, (long long)F);
        return 0;
    }
    if (fp8b_rows_cap(R, E) >= ((int64_t)1 << 31) || E * 2 * F * H >= ((int64_t)1 << 40)) {
        snprintf(why, len, "too large: R + 128 E = %lld rows", (long long)fp8b_rows_cap(R, E));
        return 0;
    }
    GemmFp8Shape m[4] = {mx_shape(E, 2 * F, H), mx_shape(E, H, F), mx_shape(E, F, H), mx_shape(E, H, 2 * F)};
    GemmSm90Shape k[4] = {kgrouped_shape(E, H, F, 1, 0), kgrouped_shape(E, 2 * F, H, 1, 0),
                          kgrouped_shape(E, H, F, 0, 0), kgrouped_shape(E, 2 * F, H, 0, 0)};
    char err[200];
    for (int i = 0; i < 4; i++)
        if (!gemm_fp8_check_shape(&m[i], err, sizeof err)) {
            snprintf(why, len, "mxfp8: FP8 GEMM [%d x %d] over %d: %s", m[i].N, m[i].K, m[i].E, err);
            return 0;
        }
    for (int i = 0; i < 4; i++)
        if (!gemm_sm90_kgrouped_check_shape(&k[i], err, sizeof err)) {
            snprintf(why, len, "mxfp8: weight-gradient GEMM [%d x %d] over %d: %s", k[i].N, k[i].K, k[i].E, err);
            return 0;
        }
    snprintf(why, len, "mxfp8: FP8 grouped GEMMs (1x32 scales on both operands, promotion every 32) forward and dgrad; "
             "wgrad on the bf16 K-grouped GEMM over the 32x1-quantised operands dequantised to bf16 (exact); the "
             "weights' MXFP8 copies (1x32 along K, and W^T 1x32 along N) written by the optimizer; H %lld and F %lld "
             "multiples of 256", (long long)H, (long long)F);
    return 1;
}

static int fp8b_mlp_ok(const IrNode *n, char *why, size_t len)
{
    if (is_mx(n))
        return mx_mlp_ok(n, why, len);
    const IrNode *xs = n->src[n->op == IR_OP_GROUPED_MLP ? 0 : 1], *w1 = n->src[n->op == IR_OP_GROUPED_MLP ? 1 : 2];
    const IrNode *w2 = n->src[n->op == IR_OP_GROUPED_MLP ? 2 : 3];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    if (w1->op != IR_OP_PARAM || w2->op != IR_OP_PARAM) {
        snprintf(why, len, "fp8-block: the expert weights must be params (the GEMMs read their E4M3 tile copies, which "
                 "the optimizer writes: decision 44); %s is a %s", w1->op != IR_OP_PARAM ? w1->name : w2->name,
                 ir_node_op_name(w1->op != IR_OP_PARAM ? w1 : w2));
        return 0;
    }
    if (H % 256 || F % 256) {
        snprintf(why, len, "fp8-block: H %lld and F %lld must be multiples of 256 (the FP8 GEMM takes its 128-deep K "
                 "blocks in pairs, and K is H or F forward, H or 2F in the data gradients)", (long long)H, (long long)F);
        return 0;
    }
    if (fp8b_rows_cap(R, E) >= ((int64_t)1 << 31) || E * 2 * F * H >= ((int64_t)1 << 40)) {
        snprintf(why, len, "too large: R + 128 E = %lld rows", (long long)fp8b_rows_cap(R, E));
        return 0;
    }
    GemmFp8Shape m[4] = {fp8b_shape(E, 2 * F, H), fp8b_shape(E, H, F), fp8b_shape(E, F, H), fp8b_shape(E, H, 2 * F)};
    /* both epilogues and both schedules must fit (which one a launch gets depends on its offset in the output and
     * on CudaOptions) */
    GemmFp8Shape k[6] = {fp8b_kshape(E, H, F, 0, 0, 0),    fp8b_kshape(E, 2 * F, H, 0, 0, 0),
                         fp8b_kshape(E, H, F, 1, 0, 0),    fp8b_kshape(E, 2 * F, H, 1, 0, 0),
                         fp8b_kshape(E, H, F, 1, 0, 1),    fp8b_kshape(E, 2 * F, H, 1, 0, 1)};
    char err[200];
    for (int i = 0; i < 4; i++)
        if (!gemm_fp8_check_shape(&m[i], err, sizeof err)) {
            snprintf(why, len, "fp8-block: FP8 GEMM [%d x %d] over %d: %s", m[i].N, m[i].K, m[i].E, err);
            return 0;
        }
    for (int i = 0; i < 6; i++)
        if (!gemm_fp8_kgrouped_check_shape(&k[i], err, sizeof err)) {
            snprintf(why, len, "fp8-block: FP8 weight-gradient GEMM [%d x %d] over %d: %s", k[i].N, k[i].K, k[i].E,
                     err);
            return 0;
        }
    snprintf(why, len, "fp8-block: FP8 grouped GEMMs (1x128 x 128x128, promotion every 128) forward and dgrad, "
             "FP8 K-grouped wgrad (128x1, promotion every 128 rows); H %lld and F %lld multiples of 256; the "
             "weights' 128x128 tiles (and transposed tiles for dgrad) from their E4M3 copies, which the optimizer "
             "writes in its AdamW pass (no per-step weight quantiser)", (long long)H, (long long)F);
    return 1;
}

/* D [rcap, N] bf16 = dequant(A [rcap, K], sa) . dequant(W [E, N, K], sw)^T per padded group; W's codes from
 * byte w_off of buffer w, its scales from byte sw_off of buffer sw (a weight's e4m3 copy: plan.h PlanFp8Copy).
 * aq >= 0 (fp8-block's gate_up, decision 57): the fused SwiGLU epilogue (GemmFp8MGrouped's GLU,
 * moec::fp8b::SwigluQuantEpi) also writes a = silu(gate) up probs quantised 1x128 along F = N / 2: codes aq
 * [rcap, F], scale codes asa [F / 128][rcap], from D's bf16 gate and up columns and probs pp [rcap] */
static void emit_fp8_gemm_glu(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int sa, int w,
                              int64_t w_off, int sw, int64_t sw_off, int d, int64_t N, int64_t K, int aq, int asa,
                              int pp);
static void emit_swiglu_quant(Cg *cg, Fast *f, int aq, int asa, int hp, int pp);
static void emit_fp8_gemm(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int sa, int w, int64_t w_off,
                          int sw, int64_t sw_off, int d, int64_t N, int64_t K)
{
    emit_fp8_gemm_glu(cg, f, suffix, what, a, sa, w, w_off, sw, sw_off, d, N, K, -1, -1, -1);
}
static void emit_fp8_gemm_glu(Cg *cg, Fast *f, const char *suffix, const char *what, int a, int sa, int w,
                              int64_t w_off, int sw, int64_t sw_off, int d, int64_t N, int64_t K, int aq, int asa,
                              int pp)
{
    GemmFp8Shape s = f->mx ? mx_shape(f->E, N, K) : fp8b_shape(f->E, N, K);
    const int glu = aq >= 0;
    if (!f->mx)
        s.cluster = fp8b_cluster(cg, N, K, N / 128 / (glu ? 2 : 1));
    const int c2 = s.cluster == 2;
    char sfx[96], tmpl[200], glu_args[64];
    snprintf(sfx, sizeof sfx, "%s_%s_s%d%s%s", suffix, f->mx ? "mx" : "fp8b", s.stages, glu ? "_glu" : "", c2 ? "_c2" : "");
    if (glu) {
        snprintf(tmpl, sizeof tmpl, "%d, %d, %d, %d, %d, %d, 16, 0, moec::fp8b::SwigluQuantEpi<%lldll>%s", s.E, s.N,
                 s.K, s.stages, s.mode, s.out, (long long)(N / 2), c2 ? ", 2" : "");
        snprintf(glu_args, sizeof glu_args, ", aq, asa, pp");
    } else {
        snprintf(tmpl, sizeof tmpl, "%d, %d, %d, %d, %d, %d%s", s.E, s.N, s.K, s.stages, s.mode, s.out,
                 c2 ? ", 16, 0, moec::sm90::NoGlu, 2" : "");
        glu_args[0] = 0;
    }
    fast_begin(cg, f, sfx, what);
    cg_tmap_u8(cg, a, 0, f->rcap, K, 128, "tma_a");
    cg_tmap_u8(cg, w, w_off, f->E * N, K, 128, "tma_b");
    cg_tmap(cg, d, f->rcap, N, 64, "tma_d");
    cg_param(cg, d, 1, "d");
    cg_param(cg, sa, 0, "sa");
    cg_param(cg, sw, 0, "sb");
    if (glu) {
        cg_param(cg, aq, 1, "aq");
        cg_param(cg, asa, 1, "asa");
        cg_param(cg, pp, 0, "pp");
    }
    cg_param(cg, f->ofs, 0, "offsets");
    cg_i32(cg, f->rcap, "rows_cap");
    if (sw_off)
        cg_line(cg, "moec::sm90::GemmFp8MGrouped<%s>::run(tma_a, tma_b, tma_d, d, sa, sb + %lldll, offsets, rows_cap%s);",
                tmpl, (long long)sw_off, glu_args);
    else
        cg_line(cg, "moec::sm90::GemmFp8MGrouped<%s>::run(tma_a, tma_b, tma_d, d, sa, sb, offsets, rows_cap%s);", tmpl,
                glu_args);
    cg_launch_extra(cg, gemm_fp8_smem_bytes(&s), 1);
    cg_launch_cluster(cg, s.cluster);
    cg_end(cg, GEMM_SM90_THREADS, 1);
    cg->fast_used = 1;
    cg->fp8b_used = 1;
}

/* out + off: dW [E, N, K] fp32 = dequant(A)[rows of g]^T . dequant(B)[rows of g] per padded group, A and B
 * quantised 128x1 and stored transposed: at [N, rcap] and bt [K, rcap] E4M3, their scales ats [rcap / 128][N]
 * and bts [rcap / 128][K] (moec_fp8_kgrouped_s_index) */
static void emit_fp8_kgemm(Cg *cg, Fast *f, const char *suffix, const char *what, int at, int ats, int bt, int bts,
                           int64_t off, int64_t N, int64_t K)
{
    GemmFp8Shape s = fp8b_kshape(f->E, N, K, FP8B_KGEMM_OUT == GEMM_FP8_OUT_F32_TMA, off * 4, fp8b_kgemm_pingpong(cg));
    const int tma = s.out == GEMM_FP8_OUT_F32_TMA;
    char sfx[96];
    snprintf(sfx, sizeof sfx, "%s_fp8b_s%d%s%s", suffix, s.stages, tma ? "_tma" : "", s.pingpong ? "_pp" : "");
    fast_begin(cg, f, sfx, what);
    cg_tmap_u8(cg, at, 0, N, f->rcap, gemm_fp8_kgrouped_a_rows(&s), "tma_a");
    cg_tmap_u8(cg, bt, 0, K, f->rcap, 128, "tma_b");
    if (tma)
        cg_tmap_f32(cg, f->n->id, off, f->E * N, K, 64, "tma_dw");
    cg_out(cg, f->n, "out");
    cg_param(cg, ats, 0, "sa");
    cg_param(cg, bts, 0, "sb");
    cg_param(cg, f->ofs, 0, "offsets");
    cg_i32(cg, f->rcap, "rows_cap");
    cg_i64(cg, off, "dw_off"); /* dW's place in the output: past dxs and dprobs, so it scales with the batch */
    cg_norm(cg, grad_param_at(cg, f, off, f->E * N * K), KGEMM_SUMSQ_PER_BLOCK, "sumsq");
    if (s.pingpong) /* (BAND 16, SCHED 0: the defaults) */
        cg_line(cg, "moec::sm90::GemmFp8KGrouped<%d, %d, %d, %d, 0, 16, 0, 1>::run(tma_a, tma_b, out + dw_off, sa, sb, "
                    "offsets, rows_cap, &tma_dw, sumsq);", s.E, s.N, s.K, s.stages);
    else if (tma)
        cg_line(cg, "moec::sm90::GemmFp8KGrouped<%d, %d, %d, %d, 0>::run(tma_a, tma_b, out + dw_off, sa, sb, offsets, "
                    "rows_cap, &tma_dw, sumsq);", s.E, s.N, s.K, s.stages);
    else
        cg_line(cg, "moec::sm90::GemmFp8KGrouped<%d, %d, %d, %d>::run(tma_a, tma_b, out + dw_off, sa, sb, offsets, "
                    "rows_cap, nullptr, sumsq);", s.E, s.N, s.K, s.stages);
    cg_launch_extra(cg, gemm_fp8_kgrouped_smem_bytes(&s), 1);
    cg_end(cg, GEMM_SM90_THREADS, 1);
    cg->fast_used = 1;
    cg->fp8b_used = 1;
}

/* fp8-block and MXFP8 reading a dispatch through (cg_fast_reads_through): tok [R] <- the token of each
 * expert-major row, the inverse of the dispatch plan rp [T, KS], for the quantisers' GraphRows (their tiles go
 * row by row within each group, so they need the row's token, not the token's rows) */
static void emit_tokens(Cg *cg, Fast *f, int tok, const IrNode *rp)
{
    fast_begin(cg, f, "fast_tokens", "the token of each expert-major row (the dispatch plan inverted), so the "
                                     "quantisers read the token rows through the dispatch, which launches nothing");
    cg_param(cg, tok, 1, "tok");
    cg_in(cg, rp, "plan");
    cg_param(cg, f->ofs, 0, "ofs");
    cg_i64(cg, cg_lead(rp), "T");
    fast_consts(cg, f);
    cg_line(cg, "moec::fp8b::token_of_rows<E, %lld>(tok, plan, ofs, T);", (long long)cg_last(rp));
    cg_end(cg, CG_BLOCK, cg_grid(cg_lead(rp) * cg_last(rp), CG_BLOCK));
}

/* the scale codes of a transposed 128x1-quantised operand [C, rcap]: [rcap / 128][C] */
static int64_t fp8b_tscales(const Fast *f, int64_t C) { return (f->rcap + 127) / 128 * C; }

/* the tile quantiser's launch (moec::fp8b::quant_tiles, after its parameters): 256 threads per 128 x 128 tile
 * of the padded rows, the tile in registers (20.5 KB of static shared memory for the column maxima and the
 * transposed codes), a grid-stride loop over the tiles. colt: "codes, scales" of the transposed 128x1 copy,
 * or "nullptr, nullptr" */
static void fp8_tiles_end(Cg *cg, const Fast *f, int64_t C, const char *tmpl, const char *q, const char *sa,
                          const char *colt, const char *src, const char *probs)
{
    cg_i64(cg, f->rcap, "rcap");
    fast_consts(cg, f);
    cg_line(cg, "moec::fp8b::quant_tiles<E, %s>(%s, %s, rcap, %s, %s, %s, ofs);", tmpl, q, sa, colt, src, probs);
    cg_end(cg, CG_BLOCK, min64(f->rcap / 128 * (C / 128), 132 * 16));
    cg->fp8b_used = 1;
}

static int emit_grouped_mlp_fp8(Cg *cg, const IrNode *n)
{
    const IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *sp = n->src[3], *p = n->src[4];
    Fast f;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *bwd = fast_backward_of(cg, n);
    int64_t H = f.H, F = f.F, E = f.E, rc = f.rcap;
    f.ofs = fwd_ws(cg, &f, bwd, PLAN_I32, 2 * E + 2, "fast_offsets");
    int pp = fwd_ws(cg, &f, bwd, PLAN_F32, rc, "probs_padded");
    /* h in bf16 for the forward only; the backward reads its E4M3 copy, 1x128 along 2F (decision 64: DeepSeek-V3
     * keeps the SwiGLU input in FP8 and recomputes the output from it), half the bytes kept between the two */
    int hp = cg_ws(cg, n, PLAN_BF16, rc * 2 * F, "h_padded");
    int hq = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, rc * 2 * F, "h_e4m3") : -1;
    int hsa = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, 2 * F / 128 * rc, "h_scales") : -1;
    int xq = cg_ws(cg, n, PLAN_E4M3, rc * H, "xs_e4m3"), xsa = cg_ws(cg, n, PLAN_E4M3, H / 128 * rc, "xs_scales");
    int aq = cg_ws(cg, n, PLAN_E4M3, rc * F, "a_e4m3"), asa = cg_ws(cg, n, PLAN_E4M3, F / 128 * rc, "a_scales");
    /* the weights' 128x128 tiles: their e4m3 copies, written by the optimizer (decision 44) */
    int w1c = cg_param_fp8b_copy(cg, w1), w2c = cg_param_fp8b_copy(cg, w2);
    PlanFp8Copy c1, c2;
    plan_fp8b_copy_layout(cg->g, w1, &c1);
    plan_fp8b_copy_layout(cg->g, w2, &c2);
    int xt = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, H * rc, "xs_t_e4m3") : -1;
    int xts = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, fp8b_tscales(&f, H), "xs_t_scales") : -1;
    const IrNode *comb = fast_combine_of(cg, n);
    int yp = comb ? cg_ws_kept(cg, n, comb, PLAN_BF16, rc * H, "y_padded") : cg_ws(cg, n, PLAN_BF16, rc * H, "y_padded");
    if (comb && !bwd)
        f.ofs = cg_ws_kept(cg, n, comb, PLAN_I32, 2 * E + 2, "fast_offsets_c");
    /* xs = dispatch(x, plan) read through (never materialised): the gather reads x's token rows */
    const int through = cg_fast_reads_through(cg, xs);
    int tok = through ? fwd_ws(cg, &f, bwd, PLAN_I32, f.R, "token_of_row") : -1;
    /* the SwiGLU quantiser and h's copy in one pass over h (decision 69) */
    const int merged = bwd && cg->fp8_swiglu != CUDA_DSWIGLU_FUSED && cg->fp8_passes != CUDA_DSWIGLU_SEPARATE;
    f.steps = 4 + (comb == NULL) + (cg->fp8_swiglu != CUDA_DSWIGLU_FUSED) + (bwd != NULL) + through - merged;

    emit_offsets(cg, &f, sp);
    if (through)
        emit_tokens(cg, &f, tok, xs->src[1]);

    fast_begin(cg, &f, bwd ? "fp8b_gather_xg" : "fp8b_gather",
               bwd ? "xs into zero-padded groups quantised 1x128 along H (E4M3 and E8M0 scales, from the fp32 rows, "
                     "bit-exact with the CPU reference), and 128x1 within each group, the codes transposed [H, rows] "
                     "(kept for dw_gate_up), in one read of each 128x128 tile; probs"
                   : "xs into zero-padded groups quantised 1x128 along H (E4M3 and E8M0 scales, from the fp32 rows, "
                     "bit-exact with the CPU reference); probs");
    cg_param(cg, xq, 1, "q");
    cg_param(cg, xsa, 1, "sa");
    if (bwd) {
        cg_param(cg, xt, 1, "xt");
        cg_param(cg, xts, 1, "xts");
    }
    cg_param(cg, pp, 1, "pp");
    cg_in(cg, through ? xs->src[0] : xs, "xs");
    if (through)
        cg_param(cg, tok, 0, "tok");
    cg_in(cg, p, "p");
    cg_param(cg, f.ofs, 0, "ofs");
    fp8_tiles_end(cg, &f, H, "H", "q", "sa", bwd ? "xt, xts" : "nullptr, nullptr",
                  through ? "moec::fp8b::GraphRows<E, H>{xs, tok}" : "moec::fp8b::GraphRows<E, H>{xs}", "pp, p");

    /* SwiGLU and a's 1x128 quantisation in the GEMM's epilogue (decision 57: no separate pass over h) when asked
     * for (MOEC_FP8_SWIGLU=fused); by default the separate tile quantiser: on the H200 the epilogue made gate_up
     * 3.45 -> 4.76 ms at Mixtral shapes against 0.72 ms for the pass it removes (fast_mlp.sh, 2026-12-02) */
    if (cg->fp8_swiglu != CUDA_DSWIGLU_FUSED) {
        emit_fp8_gemm(cg, &f, "fast_gate_up",
                      "h = xs w_gate_up^T per group (FP8 grouped GEMM on w_gate_up's E4M3 tile copy, which the "
                      "optimizer writes; bf16 out)",
                      xq, xsa, w1c, c1.q, w1c, c1.s, hp, 2 * F, H);
        if (merged) {
            fast_begin(cg, &f, "fp8b_swiglu_h", "a = silu(gate) up probs quantised 1x128 along F, and h's copy for "
                                                "the backward quantised 1x128 along 2F (E4M3 and scales, decision 64), "
                                                "in one read of each gate and up tile of the bf16 h (decision 69)");
            cg_param(cg, aq, 1, "aq");
            cg_param(cg, asa, 1, "asa");
            cg_param(cg, hq, 1, "hq");
            cg_param(cg, hsa, 1, "hsa");
            cg_param(cg, hp, 0, "hp");
            cg_param(cg, pp, 0, "pp");
            cg_param(cg, f.ofs, 0, "ofs");
            cg_i64(cg, f.rcap, "rcap");
            fast_consts(cg, &f);
            cg_line(cg, "moec::fp8b::swiglu_h_tiles<E, F>(aq, asa, hq, hsa, hp, pp, ofs, rcap);");
            cg_end(cg, CG_BLOCK, min64(f.rcap / 128 * (F / 128), 132 * 16));
            cg->fp8b_used = 1;
        } else
            emit_swiglu_quant(cg, &f, aq, asa, hp, pp);
    } else {
        emit_fp8_gemm_glu(cg, &f, "fast_gate_up",
                          "h = xs w_gate_up^T per group (FP8 grouped GEMM on w_gate_up's E4M3 tile copy, which the "
                          "optimizer writes; bf16 out), and in its epilogue a = silu(gate) up probs quantised 1x128 "
                          "along F (E4M3 and scales, from the bf16 h)",
                          xq, xsa, w1c, c1.q, w1c, c1.s, hp, 2 * F, H, aq, asa, pp);
    }
    if (bwd && !merged) {
        fast_begin(cg, &f, "fp8b_h_copy", "h's copy for the backward: quantised 1x128 along 2F (E4M3 and scales, from "
                                          "the bf16 h; decision 64)");
        cg_param(cg, hq, 1, "q");
        cg_param(cg, hsa, 1, "sa");
        cg_param(cg, hp, 0, "hp");
        cg_param(cg, f.ofs, 0, "ofs");
        fp8_tiles_end(cg, &f, 2 * F, "2 * F", "q", "sa", "nullptr, nullptr", "moec::fp8b::Bf16Rows<2 * F>{hp}",
                      "nullptr, nullptr");
    }

    emit_fp8_gemm(cg, &f, "fast_down", "y = a w_down^T per group (FP8 grouped GEMM on w_down's E4M3 tile copy, which "
                                        "the optimizer writes; bf16 out)", aq, asa, w2c, c2.q, w2c, c2.s, yp, H, F);

    return emit_forward_end(cg, &f, n, comb, yp);
}

/* The 8-bit backwards' dy: dispatch(dout, plan) read through (never materialised) with the forward's token map
 * (dy_token_map: its workspace, or -1 when dy is materialised), as the gather's source (dy_rows_in: the kernel's
 * `dy` and `tok` and `ofs` parameters) and its rows (dy_rows_src: the tile quantiser's source) */
static int dy_token_map(Cg *cg, const IrNode *n, const IrNode *fwd, const IrNode *dy)
{
    if (!cg_fast_reads_through(cg, dy))
        return -1;
    const int tok = cg_find_ws(cg, fwd, "token_of_row");
    if (tok < 0)
        die("codegen: %s: dy is read through its dispatch but %s keeps no token map", n->name, fwd->name);
    return tok;
}

static void dy_rows_in(Cg *cg, const Fast *f, const IrNode *dy, int tok)
{
    cg_in(cg, tok >= 0 ? dy->src[0] : dy, "dy");
    if (tok >= 0)
        cg_param(cg, tok, 0, "tok");
    cg_param(cg, f->ofs, 0, "ofs");
}

static const char *dy_rows_src(int tok)
{
    return tok >= 0 ? "moec::fp8b::GraphRows<E, H>{dy, tok}" : "moec::fp8b::GraphRows<E, H>{dy}";
}

/* The 8-bit backwards' separate dprobs launch (MOEC_FP8_PASSES=separate; by default the dSwiGLU quantiser writes its
 * partials, decision 69): a row's sum of da silu(gate) up from h's copy, hs its source class (fp8-block's HE4m3,
 * MXFP8's HMx) */
/* the dSwiGLU quantisers' (fp8b_dswiglu[_dp], mx_dswiglu[_dp]) parameters after their outputs: dprobs' partials
 * when merged (decision 69), h's 8-bit copy and its scales, da, probs, the group offsets */
static void dswiglu_src_params(Cg *cg, const Fast *f, int merged, int dpp, int hq, int hsa, int dap, int pp)
{
    if (merged)
        cg_param(cg, dpp, 1, "dpart");
    cg_param(cg, hq, 0, "hq");
    cg_param(cg, hsa, 0, "hsa");
    cg_param(cg, dap, 0, "dap");
    cg_param(cg, pp, 0, "pp");
    cg_param(cg, f->ofs, 0, "ofs");
}

static void emit_dprobs_separate(Cg *cg, Fast *f, const char *name, const char *what, const char *hs, int dpp, int hq,
                                 int hsa, int dap)
{
    fast_begin(cg, f, name, what);
    cg_param(cg, dpp, 1, "dpp");
    cg_param(cg, hq, 0, "hq");
    cg_param(cg, hsa, 0, "hsa");
    cg_param(cg, dap, 0, "dap");
    cg_param(cg, f->ofs, 0, "ofs");
    cg_i64(cg, f->rcap, "rcap");
    fast_consts(cg, f);
    cg_line(cg, "moec::fp8b::dprobs<E, F>(dpp, moec::fp8b::%s<F>{hq, hsa, rcap}, dap, ofs);", hs);
    cg_end(cg, CG_BLOCK, row_grid(f->rcap));
}

/* The 8-bit backwards' last launch: dxs and dprobs back to the graph's row order; dprobs from its per-128-column
 * partials (merged, decision 69) or one value a row */
static void emit_bwd_scatter(Cg *cg, Fast *f, const IrNode *n, int dxp, int dpp, int merged)
{
    fast_begin(cg, f, "fast_scatter", "dxs and dprobs back to the graph's row order in fp32 (padding rows zero)");
    cg_out(cg, n, "out");
    cg_param(cg, dxp, 0, "dxp");
    cg_param(cg, dpp, 0, "dpp");
    cg_param(cg, f->ofs, 0, "ofs");
    fast_rows(cg, f);
    fast_consts(cg, f);
    if (merged)
        cg_line(cg, "moec::fast::scatter<E, H, %lld>(out, out + R * H, dxp, dpp, ofs, R);", (long long)(f->F / 128));
    else
        cg_line(cg, "moec::fast::scatter<E, H>(out, out + R * H, dxp, dpp, ofs, R);");
    cg_end(cg, CG_BLOCK, row_grid(f->R));
    cg->fp8b_used = 1;
}

static int emit_grouped_mlp_bwd_fp8(Cg *cg, const IrNode *n)
{
    const IrNode *dy = n->src[0], *xs = n->src[1], *w1 = n->src[2], *w2 = n->src[3];
    Fast f;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *fwd = fast_forward_of(cg, n);
    if (!fwd) {
        cg_error(cg, n, "%s: precision fp8-block: the fast expert-MLP backward reads the quantised xs and h its "
                 "forward node keeps, and no forward grouped_mlp with the same operands keeps them for it (a "
                 "recomputing backward is not written for fp8-block); use the CPU backend", n->name);
        return 0;
    }
    int64_t R = f.R, H = f.H, E = f.E, F = f.F, rc = f.rcap;
    f.ofs = cg_find_ws(cg, fwd, "fast_offsets");
    int pp = cg_find_ws(cg, fwd, "probs_padded"), hq = cg_find_ws(cg, fwd, "h_e4m3"), hsa = cg_find_ws(cg, fwd, "h_scales");
    int xt = cg_find_ws(cg, fwd, "xs_t_e4m3"), xts = cg_find_ws(cg, fwd, "xs_t_scales");
    /* the weights' transposed tiles: their e4m3 copies (the forward's copies, written by the optimizer) */
    int w1c = cg_param_fp8b_copy(cg, w1), w2c = cg_param_fp8b_copy(cg, w2);
    PlanFp8Copy c1, c2;
    plan_fp8b_copy_layout(cg->g, w1, &c1);
    plan_fp8b_copy_layout(cg->g, w2, &c2);
    if (f.ofs < 0 || pp < 0 || hq < 0 || hsa < 0 || xt < 0 || xts < 0)
        die("codegen: %s: the kept workspaces of %s are missing", n->name, fwd->name);
    int dyq = cg_ws(cg, n, PLAN_E4M3, rc * H, "dy_e4m3"), dysa = cg_ws(cg, n, PLAN_E4M3, H / 128 * rc, "dy_scales");
    int dyt = cg_ws(cg, n, PLAN_E4M3, H * rc, "dy_t_e4m3"), dyts = cg_ws(cg, n, PLAN_E4M3, fp8b_tscales(&f, H), "dy_t_scales");
    int dap = cg_ws(cg, n, PLAN_BF16, rc * F, "da_padded");
    int dhq = cg_ws(cg, n, PLAN_E4M3, rc * 2 * F, "dh_e4m3");
    int dhsa = cg_ws(cg, n, PLAN_E4M3, 2 * F / 128 * rc, "dh_scales");
    /* dprobs in the dSwiGLU pass, as per-128-column partials a row that the scatter sums in order (decision 69) */
    const int merged = cg->fp8_passes != CUDA_DSWIGLU_SEPARATE;
    int dpp = merged ? cg_ws(cg, n, PLAN_F32, rc * (F / 128), "dprobs_partials") : cg_ws(cg, n, PLAN_F32, rc, "dprobs_padded");
    int at = cg_ws(cg, n, PLAN_E4M3, F * rc, "a_t_e4m3"), ats = cg_ws(cg, n, PLAN_E4M3, fp8b_tscales(&f, F), "a_t_scales");
    int dht = cg_ws(cg, n, PLAN_E4M3, 2 * F * rc, "dh_t_e4m3");
    int dhts = cg_ws(cg, n, PLAN_E4M3, fp8b_tscales(&f, 2 * F), "dh_t_scales");
    int dxp = cg_ws(cg, n, PLAN_BF16, rc * H, "dxs_padded");
    f.steps = merged ? 8 : 9;

    const int tok = dy_token_map(cg, n, fwd, dy);
    fast_begin(cg, &f, "fp8b_gather_dy", "dy into zero-padded groups quantised 1x128 along H (from the fp32 rows, "
                                         "bit-exact with the CPU reference), and 128x1 within each group, the codes "
                                         "transposed [H, rows] for dw_down, in one read of each 128x128 tile");
    cg_param(cg, dyq, 1, "q");
    cg_param(cg, dysa, 1, "sa");
    cg_param(cg, dyt, 1, "dyt");
    cg_param(cg, dyts, 1, "dyts");
    dy_rows_in(cg, &f, dy, tok);
    fp8_tiles_end(cg, &f, H, "H", "q", "sa", "dyt, dyts",
                  dy_rows_src(tok), "nullptr, nullptr");

    emit_fp8_gemm(cg, &f, "fast_da", "da = dy w_down per group (FP8 grouped GEMM on the transposed tiles of w_down's "
                                     "E4M3 copy, which the optimizer writes; bf16 out)", dyq, dysa, w2c, c2.qt, w2c,
                  c2.st, dap, F, H);

    /* h from its E4M3 copy (decision 64); dprobs in the dSwiGLU pass (decision 69) or its own launch */
    fast_begin(cg, &f, merged ? "fp8b_dswiglu_dp" : "fp8b_dswiglu",
               merged ? "dh = dSwiGLU(da probs) from h's E4M3 copy, quantised 1x128 along 2F (E4M3 and scales), and "
                        "128x1 within each group, the codes transposed [2F, rows], for dw_gate_up; and dprobs' "
                        "per-128-column partials from the gate half's tiles (decision 69)"
                      : "dh = dSwiGLU(da probs) from h's E4M3 copy, quantised 1x128 along 2F (E4M3 and scales), and "
                        "128x1 within each group, the codes transposed [2F, rows], for dw_gate_up");
    cg_param(cg, dhq, 1, "q");
    cg_param(cg, dhsa, 1, "sa");
    cg_param(cg, dht, 1, "dht");
    cg_param(cg, dhts, 1, "dhts");
    dswiglu_src_params(cg, &f, merged, dpp, hq, hsa, dap, pp);
    fp8_tiles_end(cg, &f, 2 * F, "2 * F", "q", "sa", "dht, dhts",
                  merged ? "moec::fp8b::Dswiglu<F, moec::fp8b::HE4m3<F>>{{hq, hsa, rcap}, dap, pp, dpart}"
                         : "moec::fp8b::Dswiglu<F, moec::fp8b::HE4m3<F>>{{hq, hsa, rcap}, dap, pp}",
                  "nullptr, nullptr");

    if (!merged)
        emit_dprobs_separate(cg, &f, "fp8b_dprobs", "dprobs = sum da silu(gate) up per row from h's E4M3 copy (fixed "
                             "order)", "HE4m3", dpp, hq, hsa, dap);

    fast_begin(cg, &f, "fp8b_a_colwise", "a = silu(gate) up probs (recomputed from h's E4M3 copy) quantised 128x1 "
                                         "within each expert group, the codes transposed [F, rows], for dw_down");
    cg_param(cg, at, 1, "at");
    cg_param(cg, ats, 1, "ats");
    cg_param(cg, hq, 0, "hq");
    cg_param(cg, hsa, 0, "hsa");
    cg_param(cg, pp, 0, "pp");
    cg_param(cg, f.ofs, 0, "ofs");
    fp8_tiles_end(cg, &f, F, "F", "nullptr", "nullptr", "at, ats",
                  "moec::fp8b::Swiglu<F, moec::fp8b::HE4m3<F>>{{hq, hsa, rcap}, pp}", "nullptr, nullptr");

    emit_fp8_gemm(cg, &f, "fast_dxs", "dxs = dh w_gate_up per group (FP8 grouped GEMM on the transposed tiles of "
                                      "w_gate_up's E4M3 copy, which the optimizer writes; bf16 out)", dhq, dhsa, w1c,
                  c1.qt, w1c, c1.st, dxp, H, 2 * F);
    emit_fp8_kgemm(cg, &f, "fast_dw_down", "dw_down = dy^T a per group (FP8 K-grouped GEMM on the 128x1-quantised "
                                           "transposed codes, promotion every 128 tokens, fp32 out)",
                   dyt, dyts, at, ats, R * H + R + E * 2 * F * H, H, F);
    emit_fp8_kgemm(cg, &f, "fast_dw_gate_up", "dw_gate_up = dh^T xs per group (FP8 K-grouped GEMM on the "
                                              "128x1-quantised transposed codes, promotion every 128 tokens, fp32 out)",
                   dht, dhts, xt, xts, R * H + R, 2 * F, H);

    emit_bwd_scatter(cg, &f, n, dxp, dpp, merged);
    return 1;
}

/* ---- MXFP8 (--precision mxfp8 --kernels fast; docs/mxfp8.md, decision 53): fp8-block's structure (the same
 * padded groups, launch order and FP8 grouped GEMM, in its MXFP8 mode: 1 x 32 E8M0 scales along K on both
 * operands, promotion every 32 K), quantising where the CPU reference does (runtime/cpu/kernels.inc
 * grouped_mlp / grouped_mlp_bwd with MXFP8_ROWWISE / MXFP8_COLWISE and fq_grouped):
 *   forward   xs 1x32 along H (the gather, from the graph's fp32 rows), w_gate_up and w_down 1x32 along K
 *             (a weight quantiser in the forward node, each step), a 1x32 along F (the SwiGLU kernel, from bf16 h);
 *   dgrad     dy 1x32 along H (the gather), dh 1x32 along 2F (the dSwiGLU kernel), W 32x1 (along N) stored as
 *             W^T [E, K, N] 1x32 along its rows (a weight quantiser in the backward node, each step);
 *   wgrad     dy, a, dh and xs 32x1 within each expert group (the same kernels as their 1x32 copies; xs's kept
 *             from the forward), dequantised to bf16 (exact) for the bf16 K-grouped GEMM: the FP8 K-grouped
 *             kernel promotes every 128 tokens and has no 1 x 32 mode.
 * The codes and scales are E4M3 / E8M0 bytes in memory; only the wgrad operands are bf16. */

static int64_t mx_scales(const Fast *f, int64_t C) { return C / 32 * f->rcap; }

static void mx_tiles_end(Cg *cg, const Fast *f, int64_t C, const char *tmpl, const char *q, const char *sa,
                         const char *colw, const char *src, const char *probs)
{
    cg_i64(cg, f->rcap, "rcap");
    fast_consts(cg, f);
    cg_line(cg, "moec::mx8::quant_tiles<E, %s>(%s, %s, rcap, %s, %s, %s, ofs);", tmpl, q, sa, colw, src, probs);
    cg_end(cg, CG_BLOCK, min64(f->rcap / 128 * (C / 128), 132 * 16));
    cg->fp8b_used = 1;
}

/* The forward's a = silu(gate) up probs from the kept h, quantised along F for the down GEMM in one tile
 * quantiser launch: codes aq, scale codes asa; 1x128 blocks (fp8-block) or 1x32 (MXFP8, f->mx) */
static void emit_swiglu_quant(Cg *cg, Fast *f, int aq, int asa, int hp, int pp)
{
    fast_begin(cg, f, f->mx ? "mx_swiglu" : "fp8b_swiglu",
               f->mx ? "a = silu(gate) up probs, quantised 1x32 along F (E4M3 and scales)"
                     : "a = silu(gate) up probs, quantised 1x128 along F (E4M3 and scales)");
    cg_param(cg, aq, 1, "q");
    cg_param(cg, asa, 1, "sa");
    cg_param(cg, hp, 0, "hp");
    cg_param(cg, pp, 0, "pp");
    cg_param(cg, f->ofs, 0, "ofs");
    if (f->mx)
        mx_tiles_end(cg, f, f->F, "F", "q", "sa", "nullptr", "moec::fp8b::Swiglu<F>{hp, pp}", "nullptr, nullptr");
    else
        fp8_tiles_end(cg, f, f->F, "F", "q", "sa", "nullptr, nullptr", "moec::fp8b::Swiglu<F>{hp, pp}",
                      "nullptr, nullptr");
}

/* An mxfp8 expert weight's e4m3 copy (plan.h PlanFp8Copy with mx: the 1x32-along-K codes and scales the forward
 * GEMMs read, the 32x1-along-N codes stored as W^T and their scales the data gradients read), written by the
 * optimizer's step (moec_adamw_mx8_ExNxK) and at load (moec_mx8_copy_ExNxK): no node quantises a weight
 * (decision 55). mx_mlp_ok took the weights as params [E, N, K] with N, K multiples of 256. */
static int mx_copy(Cg *cg, const IrNode *w) { return cg_param_fp8b_copy(cg, w); }

static int emit_grouped_mlp_mx(Cg *cg, const IrNode *n)
{
    const IrNode *xs = n->src[0], *w1 = n->src[1], *w2 = n->src[2], *sp = n->src[3], *p = n->src[4];
    Fast f;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *bwd = fast_backward_of(cg, n);
    int64_t H = f.H, F = f.F, E = f.E, rc = f.rcap;
    f.ofs = fwd_ws(cg, &f, bwd, PLAN_I32, 2 * E + 2, "fast_offsets");
    int pp = fwd_ws(cg, &f, bwd, PLAN_F32, rc, "probs_padded");
    /* h in bf16 for the forward only; the backward reads its MXFP8 copy, 1x32 along 2F (decision 64) */
    int hp = cg_ws(cg, n, PLAN_BF16, rc * 2 * F, "h_padded");
    int hq = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, rc * 2 * F, "h_e4m3") : -1;
    int hsa = bwd ? cg_ws_kept(cg, n, bwd, PLAN_E4M3, mx_scales(&f, 2 * F), "h_scales") : -1;
    int xq = cg_ws(cg, n, PLAN_E4M3, rc * H, "xs_e4m3"), xsa = cg_ws(cg, n, PLAN_E4M3, mx_scales(&f, H), "xs_scales");
    int aq = cg_ws(cg, n, PLAN_E4M3, rc * F, "a_e4m3"), asa = cg_ws(cg, n, PLAN_E4M3, mx_scales(&f, F), "a_scales");
    int w1c = mx_copy(cg, w1), w2c = mx_copy(cg, w2);
    PlanFp8Copy c1, c2;
    plan_fp8b_copy_layout(cg->g, w1, &c1);
    plan_fp8b_copy_layout(cg->g, w2, &c2);
    const IrNode *comb = fast_combine_of(cg, n);
    int yp = comb ? cg_ws_kept(cg, n, comb, PLAN_BF16, rc * H, "y_padded") : cg_ws(cg, n, PLAN_BF16, rc * H, "y_padded");
    if (comb && !bwd)
        f.ofs = cg_ws_kept(cg, n, comb, PLAN_I32, 2 * E + 2, "fast_offsets_c");
    /* xs = dispatch(x, plan) read through (never materialised): the gather reads x's token rows */
    const int through = cg_fast_reads_through(cg, xs);
    int tok = through ? fwd_ws(cg, &f, bwd, PLAN_I32, f.R, "token_of_row") : -1;
    /* xs's 32x1 copy (bf16, for dw_gate_up): kept from here when xs is materialised; read through, the backward
     * makes it again from the token rows (2 bytes a routed element not held across the step: decision 64) */
    int xw = bwd && !through ? cg_ws_kept(cg, n, bwd, PLAN_BF16, rc * H, "xs_colwise_bf16") : -1;
    f.steps = 5 + (comb == NULL) + (bwd != NULL) + through;

    emit_offsets(cg, &f, sp);
    if (through)
        emit_tokens(cg, &f, tok, xs->src[1]);

    fast_begin(cg, &f, xw >= 0 ? "mx_gather_xg" : "mx_gather",
               xw >= 0 ? "xs into zero-padded groups quantised 1x32 along H (E4M3 and E8M0 scales, from the fp32 rows, "
                     "bit-exact with the CPU reference), and 32x1 within each group dequantised to bf16 (kept for "
                     "dw_gate_up), in one read of each 128x128 tile; probs"
                   : "xs into zero-padded groups quantised 1x32 along H (E4M3 and E8M0 scales, from the fp32 rows, "
                     "bit-exact with the CPU reference); probs");
    cg_param(cg, xq, 1, "q");
    cg_param(cg, xsa, 1, "sa");
    if (xw >= 0)
        cg_param(cg, xw, 1, "xw");
    cg_param(cg, pp, 1, "pp");
    cg_in(cg, through ? xs->src[0] : xs, "xs");
    if (through)
        cg_param(cg, tok, 0, "tok");
    cg_in(cg, p, "p");
    cg_param(cg, f.ofs, 0, "ofs");
    mx_tiles_end(cg, &f, H, "H", "q", "sa", xw >= 0 ? "xw" : "nullptr",
                 through ? "moec::fp8b::GraphRows<E, H>{xs, tok}" : "moec::fp8b::GraphRows<E, H>{xs}", "pp, p");

    emit_fp8_gemm(cg, &f, "fast_gate_up",
                  "h = xs w_gate_up^T per group (FP8 grouped GEMM, MXFP8: 1x32 scales, promotion every 32; bf16 out)",
                  xq, xsa, w1c, c1.q, w1c, c1.s, hp, 2 * F, H);

    emit_swiglu_quant(cg, &f, aq, asa, hp, pp);
    if (bwd) {
        fast_begin(cg, &f, "mx_h_copy", "h's copy for the backward: quantised 1x32 along 2F (E4M3 and E8M0 scales, "
                                        "from the bf16 h; decision 64)");
        cg_param(cg, hq, 1, "q");
        cg_param(cg, hsa, 1, "sa");
        cg_param(cg, hp, 0, "hp");
        cg_param(cg, f.ofs, 0, "ofs");
        mx_tiles_end(cg, &f, 2 * F, "2 * F", "q", "sa", "nullptr", "moec::fp8b::Bf16Rows<2 * F>{hp}", "nullptr, nullptr");
    }

    emit_fp8_gemm(cg, &f, "fast_down", "y = a w_down^T per group (FP8 grouped GEMM, MXFP8; bf16 out)", aq, asa, w2c, c2.q,
                  w2c, c2.s, yp, H, F);

    return emit_forward_end(cg, &f, n, comb, yp);
}

static int emit_grouped_mlp_bwd_mx(Cg *cg, const IrNode *n)
{
    const IrNode *dy = n->src[0], *xs = n->src[1], *w1 = n->src[2], *w2 = n->src[3];
    Fast f;
    fast_init(cg, &f, n, xs, w1, 0);
    const IrNode *fwd = fast_forward_of(cg, n);
    if (!fwd) {
        cg_error(cg, n, "%s: precision mxfp8: the fast expert-MLP backward reads the quantised xs and h its forward "
                 "node keeps, and no forward grouped_mlp with the same operands keeps them for it (a recomputing "
                 "backward is not written for mxfp8); use --kernels reference or the CPU backend", n->name);
        return 0;
    }
    int64_t R = f.R, H = f.H, E = f.E, F = f.F, rc = f.rcap;
    f.ofs = cg_find_ws(cg, fwd, "fast_offsets");
    int pp = cg_find_ws(cg, fwd, "probs_padded"), hq = cg_find_ws(cg, fwd, "h_e4m3"), hsa = cg_find_ws(cg, fwd, "h_scales");
    int xw = cg_find_ws(cg, fwd, "xs_colwise_bf16"), xtok = cg_find_ws(cg, fwd, "token_of_row");
    const int remake_xw = xw < 0; /* xs read through: its 32x1 copy made again here from the token rows */
    if (remake_xw)
        xw = cg_ws(cg, n, PLAN_BF16, rc * H, "xs_colwise_bf16");
    if (f.ofs < 0 || pp < 0 || hq < 0 || hsa < 0 || (remake_xw && xtok < 0))
        die("codegen: %s: the kept workspaces of %s are missing", n->name, fwd->name);
    int w1c = mx_copy(cg, w1), w2c = mx_copy(cg, w2);
    PlanFp8Copy c1, c2;
    plan_fp8b_copy_layout(cg->g, w1, &c1);
    plan_fp8b_copy_layout(cg->g, w2, &c2);
    int dyq = cg_ws(cg, n, PLAN_E4M3, rc * H, "dy_e4m3"), dysa = cg_ws(cg, n, PLAN_E4M3, mx_scales(&f, H), "dy_scales");
    int dyw = cg_ws(cg, n, PLAN_BF16, rc * H, "dy_colwise_bf16");
    int dap = cg_ws(cg, n, PLAN_BF16, rc * F, "da_padded");
    int dhq = cg_ws(cg, n, PLAN_E4M3, rc * 2 * F, "dh_e4m3");
    int dhsa = cg_ws(cg, n, PLAN_E4M3, mx_scales(&f, 2 * F), "dh_scales");
    int dhw = cg_ws(cg, n, PLAN_BF16, rc * 2 * F, "dh_colwise_bf16");
    /* dprobs in the dSwiGLU pass, as per-128-column partials a row that the scatter sums in order (decision 69) */
    const int merged = cg->fp8_passes != CUDA_DSWIGLU_SEPARATE;
    int dpp = merged ? cg_ws(cg, n, PLAN_F32, rc * (F / 128), "dprobs_partials") : cg_ws(cg, n, PLAN_F32, rc, "dprobs_padded");
    int aw = cg_ws(cg, n, PLAN_BF16, rc * F, "a_colwise_bf16");
    int dxp = cg_ws(cg, n, PLAN_BF16, rc * H, "dxs_padded");
    f.steps = 9 + remake_xw - merged;

    const int tok = dy_token_map(cg, n, fwd, dy);
    fast_begin(cg, &f, "mx_gather_dy", "dy into zero-padded groups quantised 1x32 along H (from the fp32 rows, "
                                       "bit-exact with the CPU reference), and 32x1 within each group dequantised to "
                                       "bf16 for dw_down, in one read of each 128x128 tile");
    cg_param(cg, dyq, 1, "q");
    cg_param(cg, dysa, 1, "sa");
    cg_param(cg, dyw, 1, "dyw");
    dy_rows_in(cg, &f, dy, tok);
    mx_tiles_end(cg, &f, H, "H", "q", "sa", "dyw",
                 dy_rows_src(tok), "nullptr, nullptr");

    emit_fp8_gemm(cg, &f, "fast_da", "da = dy w_down per group (FP8 grouped GEMM, MXFP8, on w_down^T quantised 1x32 "
                                     "along H; bf16 out)", dyq, dysa, w2c, c2.qt, w2c, c2.st, dap, F, H);

    /* h from its MXFP8 copy (decision 64); dprobs in the dSwiGLU pass (decision 69) or its own launch */
    fast_begin(cg, &f, merged ? "mx_dswiglu_dp" : "mx_dswiglu",
               merged ? "dh = dSwiGLU(da probs) from h's MXFP8 copy, quantised 1x32 along 2F (E4M3 and scales), and "
                        "32x1 within each group dequantised to bf16 for dw_gate_up; and dprobs' per-128-column partials "
                        "from the gate half's tiles (decision 69)"
                      : "dh = dSwiGLU(da probs) from h's MXFP8 copy, quantised 1x32 along 2F (E4M3 and scales), and "
                        "32x1 within each group dequantised to bf16 for dw_gate_up");
    cg_param(cg, dhq, 1, "q");
    cg_param(cg, dhsa, 1, "sa");
    cg_param(cg, dhw, 1, "dhw");
    dswiglu_src_params(cg, &f, merged, dpp, hq, hsa, dap, pp);
    mx_tiles_end(cg, &f, 2 * F, "2 * F", "q", "sa", "dhw",
                 merged ? "moec::fp8b::Dswiglu<F, moec::fp8b::HMx<F>>{{hq, hsa, rcap}, dap, pp, dpart}"
                        : "moec::fp8b::Dswiglu<F, moec::fp8b::HMx<F>>{{hq, hsa, rcap}, dap, pp}",
                 "nullptr, nullptr");

    if (!merged)
        emit_dprobs_separate(cg, &f, "mx_dprobs", "dprobs = sum da silu(gate) up per row from h's MXFP8 copy (fixed "
                             "order)", "HMx", dpp, hq, hsa, dap);

    fast_begin(cg, &f, "mx_a_colwise", "a = silu(gate) up probs (recomputed from h's MXFP8 copy) quantised 32x1 within "
                                       "each expert group, dequantised to bf16, for dw_down");
    cg_param(cg, aw, 1, "aw");
    cg_param(cg, hq, 0, "hq");
    cg_param(cg, hsa, 0, "hsa");
    cg_param(cg, pp, 0, "pp");
    cg_param(cg, f.ofs, 0, "ofs");
    mx_tiles_end(cg, &f, F, "F", "nullptr", "nullptr", "aw",
                 "moec::fp8b::Swiglu<F, moec::fp8b::HMx<F>>{{hq, hsa, rcap}, pp}", "nullptr, nullptr");

    emit_fp8_gemm(cg, &f, "fast_dxs", "dxs = dh w_gate_up per group (FP8 grouped GEMM, MXFP8, on w_gate_up^T "
                                      "quantised 1x32 along 2F; bf16 out)", dhq, dhsa, w1c, c1.qt, w1c, c1.st, dxp, H, 2 * F);
    emit_kgemm(cg, &f, "fast_dw_down", "dw_down = dy^T a per group (bf16 K-grouped GEMM on the 32x1-quantised "
                                       "operands, dequantised: exact in bf16; fp32 out)", dyw, aw,
               R * H + R + E * 2 * F * H, H, F, 0);
    if (remake_xw) {
        fast_begin(cg, &f, "mx_xs_colwise", "xs's token rows (through the dispatch) quantised 32x1 within each group, "
                                            "dequantised to bf16, for dw_gate_up (bit-exact with the CPU reference)");
        cg_param(cg, xw, 1, "xw");
        cg_in(cg, xs->src[0], "xs");
        cg_param(cg, xtok, 0, "tok");
        cg_param(cg, f.ofs, 0, "ofs");
        mx_tiles_end(cg, &f, H, "H", "nullptr", "nullptr", "xw", "moec::fp8b::GraphRows<E, H>{xs, tok}",
                     "nullptr, nullptr");
    }
    emit_kgemm(cg, &f, "fast_dw_gate_up", "dw_gate_up = dh^T xs per group (bf16 K-grouped GEMM on the 32x1-quantised "
                                          "operands, dequantised: exact in bf16; fp32 out)", dhw, xw, R * H + R, 2 * F,
               H, 0);

    emit_bwd_scatter(cg, &f, n, dxp, dpp, merged);
    return 1;
}

/* ---- dense linears on the same sm_90a GEMMs (--kernels fast): one group of all the rows.
 * linear: y [T, N] = x [T, K] w^T; linear_dx: dx [T, K] = dy [T, N] w (trans_b, on w as it is);
 * linear_dw: dw [N, K] = dy^T x (K-grouped, one group). The graph keeps activations in fp32, so each
 * node rounds its activation operands to bf16 into a workspace of T rounded up to 128 rows, zero past
 * T (the GEMMs run whole 128-row tiles; zero rows add nothing to dw), and the M-grouped GEMM writes
 * fp32 straight from its accumulators (EPILOGUE 4), rows past T skipped. The weight is the param's bf16
 * working copy. The one-group offsets {0, rows} are written by the conversion kernel. */

static int64_t tc_rows_cap(int64_t rows) { return (rows + GEMM_SM90_BLOCK_M - 1) / GEMM_SM90_BLOCK_M * GEMM_SM90_BLOCK_M; }

/* the GEMM shape of a dense linear node (M-grouped for linear / linear_dx, K-grouped for linear_dw) */
static GemmSm90Shape tc_shape(const Cg *cg, const IrNode *n)
{
    const IrNode *s0 = n->src[0], *s1 = n->src[1];
    switch (n->op) {
    case IR_OP_LINEAR: {
        GemmSm90Shape s = mgrouped_shape(1, s1->shape[0], s1->shape[1], 0);
        s.epilogue = GEMM_SM90_EPI_F32;
        return s;
    }
    case IR_OP_LINEAR_DX: {
        GemmSm90Shape s = mgrouped_shape(1, s1->shape[1], s1->shape[0], 1);
        s.epilogue = GEMM_SM90_EPI_F32;
        return s;
    }
    default:
        return kgrouped_shape(1, cg_last(s0), cg_last(s1), cg ? kgemm_tma(cg) : 1, 0);
    }
}

int cuda_fast_linear_ok(const IrNode *n, char *why, size_t len)
{
    if (n->op != IR_OP_LINEAR && n->op != IR_OP_LINEAR_DX && n->op != IR_OP_LINEAR_DW) {
        snprintf(why, len, "not a linear node");
        return 0;
    }
    if (n->op != IR_OP_LINEAR_DW && n->src[1]->op != IR_OP_PARAM) {
        snprintf(why, len, "the weight %s is no param (no bf16 working copy)", n->src[1]->name);
        return 0;
    }
    int64_t rows = cg_lead(n->src[0]);
    if (tc_rows_cap(rows) >= ((int64_t)1 << 31) || rows < 1) {
        snprintf(why, len, "%lld rows", (long long)rows);
        return 0;
    }
    GemmSm90Shape s = tc_shape(NULL, n);
    char err[200];
    int ok = n->op == IR_OP_LINEAR_DW ? gemm_sm90_kgrouped_check_shape(&s, err, sizeof err)
                                      : gemm_sm90_check_shape(&s, err, sizeof err);
    if (!ok) {
        snprintf(why, len, "GEMM [%d x %d]: %s", s.N, s.K, err);
        return 0;
    }
    snprintf(why, len, "bf16 sm_90a GEMM (%s, BLOCK_N %d, %d stages), operands rounded to bf16, fp32 out",
             n->op == IR_OP_LINEAR_DW ? "K-grouped, one group" : n->op == IR_OP_LINEAR_DX ? "trans_b on the copy"
                                                                                           : "M-grouped, one group",
             s.block_n, s.stages);
    return 1;
}

/* one launch: each (src, dst) pair of activations [rows, cols] f32 -> bf16 [rcap, cols], zeros past rows;
 * the offsets {0, rcap} */
static void tc_convert(Cg *cg, const IrNode *n, int step, int steps, const IrNode *const *src, const int *dst, int count,
                       int ofs, int64_t rows)
{
    char w[300];
    if (count)
        snprintf(w, sizeof w, "%s (fast) %d/%d: the activations to bf16, %lld rows padded to %lld with zeros; the "
                              "one-group offsets",
                 ir_node_op_name(n), step, steps, (long long)rows, (long long)tc_rows_cap(rows));
    else
        snprintf(w, sizeof w, "%s (fast) %d/%d: the one-group offsets (the activations are bf16 already)",
                 ir_node_op_name(n), step, steps);
    cg_begin(cg, n, "tc_bf16", w);
    char name[16];
    for (int i = 0; i < count; i++) {
        snprintf(name, sizeof name, "b%d", i);
        cg_param(cg, dst[i], 1, name);
    }
    cg_param(cg, ofs, 1, "ofs");
    for (int i = 0; i < count; i++) {
        snprintf(name, sizeof name, "a%d", i);
        cg_in(cg, src[i], name);
    }
    /* the rows and their padded count scale with the batch: kernel parameters (docs/decisions.md 62) */
    if (count)
        cg_i64(cg, rows, "rows");
    cg_i64(cg, tc_rows_cap(rows), "rcap");
    cg_line(cg, "if (blockIdx.x == 0 && threadIdx.x == 0) {");
    cg_line(cg, "    ofs[0] = 0;");
    cg_line(cg, "    ofs[1] = (int)rcap;");
    cg_line(cg, "}");
    for (int i = 0; i < count; i++) {
        cg_const(cg, i ? "C1" : "C0", cg_last(src[i]));
        cg_line(cg, "MOEC_FOR(i, rcap * C%d / 8) {", i);
        cg_line(cg, "    long long e = i * 8;");
        cg_line(cg, "    uint4 o = make_uint4(0u, 0u, 0u, 0u);");
        cg_line(cg, "    if (e < rows * C%d) {", i);
        cg_line(cg, "        float4 x0 = *(const float4 *)(a%d + e), x1 = *(const float4 *)(a%d + e + 4);", i, i);
        cg_line(cg, "        o.x = moec::sm90::pack_bf16x2(x0.x, x0.y);");
        cg_line(cg, "        o.y = moec::sm90::pack_bf16x2(x0.z, x0.w);");
        cg_line(cg, "        o.z = moec::sm90::pack_bf16x2(x1.x, x1.y);");
        cg_line(cg, "        o.w = moec::sm90::pack_bf16x2(x1.z, x1.w);");
        cg_line(cg, "    }");
        cg_line(cg, "    *(uint4 *)(b%d + e) = o;", i);
        cg_line(cg, "}");
    }
    int64_t most = 0;
    for (int i = 0; i < count; i++)
        most = cg_last(src[i]) > most ? cg_last(src[i]) : most;
    cg_end(cg, CG_BLOCK, cg_grid(tc_rows_cap(rows) * most / 8, CG_BLOCK));
}

int cg_emit_linear_fast(Cg *cg, const IrNode *n)
{
    char why[240], impl[400];
    if (cg->kernel_choice != PLAN_KERNELS_FAST || !cuda_fast_linear_ok(n, why, sizeof why))
        return 0;
    const IrNode *s0 = n->src[0], *s1 = n->src[1];
    /* bf16 storage (docs/decisions.md 40): an operand the plan stores in bf16 is read by its tensor map where
     * it is (rows = the graph's, so the TMA zero-fills the padding rows past them), not converted; a bf16
     * output (linear, linear_dx) is written by the TMA-store epilogue, whose stores past its rows are clipped */
    int b0 = cg_is_bf16(cg, s0->id), b1 = n->op == IR_OP_LINEAR_DW && cg_is_bf16(cg, s1->id);
    int bout = n->op != IR_OP_LINEAR_DW && cg_is_bf16(cg, n->id);
    char *plain = strstr(why, ", operands rounded to bf16, fp32 out");
    if (plain && (b0 || b1 || bout))
        *plain = 0; /* said below */
    snprintf(impl, sizeof impl, "fast: %s", why);
    if (b0 || b1 || bout)
        snprintf(impl + strlen(impl), sizeof impl - strlen(impl), "; bf16 storage:%s%s%s%s%s", b0 ? " reads " : "",
                 b0 ? s0->name : "", b1 ? (b0 ? " and " : " reads ") : "", b1 ? s1->name : "",
                 bout ? (b0 || b1 ? ", writes bf16 (TMA stores)" : " writes bf16 (TMA stores)") : " as stored");
    cg_impl(cg, impl);
    int64_t rows = cg_lead(s0), rcap = tc_rows_cap(rows);
    GemmSm90Shape s = tc_shape(cg, n);
    if (bout)
        s.epilogue = GEMM_SM90_EPI_TMA;
    int ofs = cg_ws(cg, n, PLAN_I32, 2, "tc_offsets");
    char sfx[96], w[300];
    const char *op = ir_node_op_name(n);
    if (n->op == IR_OP_LINEAR_DW) {
        /* dw [N, K] = dy [T, N]^T x [T, K] */
        int dyb = b0 ? s0->id : cg_ws(cg, n, PLAN_BF16, rcap * s.N, "dy_bf16");
        int xb = b1 ? s1->id : cg_ws(cg, n, PLAN_BF16, rcap * s.K, "x_bf16");
        const IrNode *src[2] = {s0, s1};
        int dst[2] = {dyb, xb}, nconv = 0;
        if (!b0)
            src[nconv] = s0, dst[nconv++] = dyb;
        if (!b1)
            src[nconv] = s1, dst[nconv++] = xb;
        tc_convert(cg, n, 1, 2, src, dst, nconv, ofs, rows);
        snprintf(sfx, sizeof sfx, "tc_bn%d_s%d%s", s.block_n, s.stages, s.epilogue == GEMM_SM90_KEPI_TMA ? "_tma" : "");
        snprintf(w, sizeof w, "%s (fast) 2/2: dw = dy^T x, the sm_90a K-grouped GEMM over one group, fp32 out", op);
        cg_begin(cg, n, sfx, w);
        cg_tmap(cg, dyb, b0 ? rows : rcap, s.N, 64, "tma_dy");
        cg_tmap(cg, xb, b1 ? rows : rcap, s.K, 64, "tma_x");
        if (s.epilogue == GEMM_SM90_KEPI_TMA)
            cg_tmap_f32(cg, n->id, 0, s.N, s.K, 64, "tma_dw");
        cg_out(cg, n, "out");
        cg_param(cg, ofs, 0, "offsets");
        cg_i32(cg, rcap, "rows_cap");
        if (s.epilogue == GEMM_SM90_KEPI_TMA)
            cg_line(cg, "moec::sm90::GemmKGrouped<1, %d, %d, %d, %d, 0, 16, 0>::run(tma_dy, tma_x, tma_dw, out, offsets, "
                        "rows_cap);", s.N, s.K, s.block_n, s.stages);
        else
            cg_line(cg, "moec::sm90::GemmKGrouped<1, %d, %d, %d, %d, 1, 16, 0>::run(tma_dy, tma_x, out, offsets, "
                        "rows_cap);", s.N, s.K, s.block_n, s.stages);
        cg_launch_extra(cg, gemm_sm90_kgrouped_smem_bytes(&s), 1);
        cg_end(cg, GEMM_SM90_THREADS, 1);
    } else {
        /* linear: A = x [T, K], W [N, K]; linear_dx: A = dy [T, N], W [N, K] read as [K_gemm = N, N_gemm = K] */
        int ab = b0 ? s0->id : cg_ws(cg, n, PLAN_BF16, rcap * s.K, n->op == IR_OP_LINEAR ? "x_bf16" : "dy_bf16");
        int wb = cg_param_copy(cg, s1, 0);
        const IrNode *src[1] = {s0};
        int dst[1] = {ab};
        tc_convert(cg, n, 1, 2, src, dst, b0 ? 0 : 1, ofs, rows);
        snprintf(sfx, sizeof sfx, "tc_bn%d_s%d%s%s", s.block_n, s.stages, s.trans_b ? "_tb" : "", bout ? "_bf16out" : "");
        snprintf(w, sizeof w, "%s (fast) 2/2: %s, the sm_90a M-grouped GEMM over one group, %s", op,
                 n->op == IR_OP_LINEAR ? "y = x w^T" : "dx = dy w (w read transposed)",
                 bout ? "bf16 out through TMA stores (rows past the end clipped)" : "fp32 out from registers");
        cg_begin(cg, n, sfx, w);
        cg_tmap(cg, ab, b0 ? rows : rcap, s.K, GEMM_SM90_BLOCK_M, "tma_a");
        if (s.trans_b)
            cg_tmap(cg, wb, s.K, s.N, 64, "tma_b");
        else
            cg_tmap(cg, wb, s.N, s.K, s.block_n, "tma_b");
        if (bout) {
            /* the output's own rows: the TMA does not write the tiles' rows past them */
            cg_tmap(cg, n->id, rows, s.N, 64, "tma_d");
        } else {
            /* the fp32 epilogue stores from registers: the kernel's output tensor map is unused, any valid one does */
            cg_tmap(cg, ab, b0 ? rows : rcap, s.K, 64, "tma_unused");
        }
        cg_out(cg, n, "y");
        cg_param(cg, ofs, 0, "offsets");
        cg_i32(cg, rcap, "rows_cap");
        if (!bout)
            cg_i64(cg, rows, "rows"); /* the fp32 epilogue's row bound (it scales with the batch) */
        if (bout)
            cg_line(cg, "moec::sm90::GemmMGrouped<1, %d, %d, %d, %d, %d, %d>::run(tma_a, tma_b, tma_d, y, offsets, "
                        "rows_cap);", s.N, s.K, s.block_n, s.stages, s.epilogue, s.trans_b);
        else
            cg_line(cg, "moec::sm90::GemmMGrouped<1, %d, %d, %d, %d, %d, %d>::run(tma_a, tma_b, tma_unused, "
                        "(unsigned short *)y, offsets, rows_cap, nullptr, nullptr, rows);",
                    s.N, s.K, s.block_n, s.stages, s.epilogue, s.trans_b);
        cg_launch_extra(cg, gemm_sm90_smem_bytes(&s), 1);
        cg_end(cg, GEMM_SM90_THREADS, 1);
    }
    cg->fast_used = 1;
    return 1;
}
