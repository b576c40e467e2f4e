/* gemm_sm90.h - the configuration of one sm_90a grouped GEMM instantiation
 * (codegen/gemm_sm90.cuh, docs/kernels-sm90.md): its shape and tile, the
 * checks of what the kernel can do, and the shared memory it needs. A
 * kernel's configuration is plan data: codegen writes the source for it,
 * the GPU runtime makes its tensor maps and launches it with it. */
#ifndef MOEC_PLAN_GEMM_SM90_H
#define MOEC_PLAN_GEMM_SM90_H

#include <stddef.h>

/* One instantiation: E groups (experts), D[., N] = A[., K] . W[g]^T with W [E, N, K] (trans_b 0), or
 * D = A . W[g] with W [E, K, N] (trans_b 1: the data gradient on the forward's weights, no transposed
 * copy); BLOCK_N 128 or 256; STAGES shared-memory slots (at most 4 for BLOCK_N 256, 6 for 128; ping-pong
 * with 64-row tiles: 4 and 8). BLOCK_M is 128 (64 for pingpong 1), BLOCK_K 64. */
typedef struct GemmSm90Shape {
    int E, N, K;
    int block_n, stages;
    int epilogue; /* GEMM_SM90_EPI_*: 0 (default) TMA stores through shared memory; 1 16-byte stores
                     from registers; 2 4-byte stores from registers (for timing comparisons); 3 as 0 plus
                     a = silu(gate) up p into a second output (codegen/gemm_sm90.cuh: W's rows interleaved);
                     4 fp32 out from registers, rows past a bound skipped (the dense linears); 5, 6 the dSwiGLU
                     epilogue of the expert MLP backward's da launch (decision 60): da never stored, dh and a
                     through TMA stores, partials of dprobs per 128 columns; 5 with h and dh gate/up-interleaved
                     in blocks of 128, 6 [gate | up] */
    int trans_b;  /* 0: W [E, N, K] (K contiguous); 1: W [E, K, N] (N contiguous) */
    int pingpong; /* M-grouped only (decision 49): 0 cooperative (the two consumer warpgroups share each 128 x block_n
                     tile); ping-pong (each warpgroup owns whole tiles, one's main loop runs while the other stores):
                     1 with 64 x block_n tiles, 2 with 128 x 128 tiles (block_n 128; epilogue TMA or GLU only) */
} GemmSm90Shape;

enum { GEMM_SM90_BLOCK_M = 128, GEMM_SM90_BLOCK_K = 64, GEMM_SM90_THREADS = 384 };
enum { GEMM_SM90_EPI_TMA = 0, GEMM_SM90_EPI_STORE16 = 1, GEMM_SM90_EPI_STORE4 = 2, GEMM_SM90_EPI_GLU = 3,
       GEMM_SM90_EPI_F32 = 4, GEMM_SM90_EPI_DSWIGLU = 5, GEMM_SM90_EPI_DSWIGLU_SPLIT = 6 };
/* 1 for the dSwiGLU epilogues (5, 6) */
int gemm_sm90_epi_dswiglu(int epilogue);

/* 1, or 0 with why: K % 64, N % block_n, E >= 1, E * N (E * K with trans_b) < 2^31, pingpong 0, 1 or 2 (2:
 * block_n 128, epilogue TMA, GLU or dSwiGLU), N % 256 with GLU, N % 128 with dSwiGLU, the ring fits in 227 KB. */
int gemm_sm90_check_shape(const GemmSm90Shape *s, char *err, size_t errlen);

/* The rows of an M tile (and of tma_a's box): 128, or 64 for pingpong 1. */
int gemm_sm90_block_m(const GemmSm90Shape *s);
/* The rows of tma_b's box: 64 with trans_b and for pingpong 2's SwiGLU epilogue (two boxes a stage: 64 gate
 * rows and their 64 up rows), else block_n. */
int gemm_sm90_b_box_rows(const GemmSm90Shape *s);

/* Dynamic shared memory the kernel needs (bytes): 1024 + stages * (block_m + block_n) * 128
 * (+ 32768 for the TMA-store, SwiGLU and dSwiGLU epilogues) + 16 * stages. */
int gemm_sm90_smem_bytes(const GemmSm90Shape *s);

/* ---- K-grouped (weight gradient): dW[g] [N, K] fp32 = dY[rows of g]^T . X[rows of g], the same
 * offsets. Shape: E, N (a multiple of 128), K (a multiple of block_n), block_n, stages, epilogue
 * (GEMM_SM90_KEPI_*: 0 TMA stores through shared memory, asynchronous, needs dW 16-byte aligned and
 * E * N < 2^31; 1 8-byte stores from registers); trans_b is ignored; pingpong 0 cooperative, 1 ping-pong
 * (128 x 128 tiles per consumer warpgroup, block_n 128; decision 49). Padding rows must be zero in
 * dY or X, finite in both. */
enum { GEMM_SM90_KEPI_TMA = 0, GEMM_SM90_KEPI_REGS = 1 };
int gemm_sm90_kgrouped_check_shape(const GemmSm90Shape *s, char *err, size_t errlen);
/* 1024 + stages * (128 + block_n) * 128 + 16 stages (+ 32768 for the TMA-store epilogue) */
int gemm_sm90_kgrouped_smem_bytes(const GemmSm90Shape *s);

/* ---- FP8 (E4M3) M-grouped (codegen/gemm_sm90.cuh GemmFp8MGrouped): D[., N] = dequant(A)[., K] .
 * dequant(W[g])^T, W [E, N, K] E4M3, the products on the FP8 tensor cores, the block scales applied in
 * fp32 by the kernel. mode GEMM_FP8_BLOCK: fp8-block (1 x 128 activation scales, 128 x 128 weight
 * scales, promotion every 128 K); GEMM_FP8_MX: MXFP8 (1 x 32 scales on both, promotion every 32 K);
 * the scales are E8M0 codes in both. out: GEMM_FP8_OUT_BF16 (TMA stores) or GEMM_FP8_OUT_F32 (stores
 * from registers). BLOCK_M = BLOCK_N = BLOCK_K = 128. Scale layouts: codegen/gemm_sm90_sched.h
 * (moec_fp8_*); rows_cap % 16 == 0. */
typedef struct GemmFp8Shape {
    int E, N, K;
    int stages;
    int mode; /* GEMM_FP8_BLOCK or GEMM_FP8_MX */
    int out;  /* GEMM_FP8_OUT_BF16 or GEMM_FP8_OUT_F32 */
    int pingpong; /* K-grouped only (0 for the M-grouped kernel): 0 cooperative 128 x 128 tiles, 1 ping-pong (64 x 128
                   * tiles, one per consumer warpgroup, the two alternating main loop and epilogue: decision 56) */
    int cluster;  /* M-grouped only: 0 (or 1) one block a tile; 2: clusters of two blocks on tiles (m, 2j) and
                   * (m, 2j + 1), A's stages multicast into both (decision 71; N / 128 even, launched with cluster
                   * dimension 2: runtime/gpu/cudrv.h cudrv_launch, cudrv_persistent_grid) */
} GemmFp8Shape;
/* the promotion schedule of both FP8 kernels (decision 51; codegen/gemm_sm90.h gemm_fp8_source_sched):
 * GEMM_FP8_SCHED_PIPE (the default: one group always in flight while the one before it is promoted) or
 * GEMM_FP8_SCHED_PAIRS (decisions 38 and 45's pairs, kept for side-by-side timing); fp8-block's M-grouped
 * kernel runs the pairs in both */
enum { GEMM_FP8_SCHED_PIPE = 0, GEMM_FP8_SCHED_PAIRS = 1 };
enum { GEMM_FP8_BLOCK = 0, GEMM_FP8_MX = 1 };
enum { GEMM_FP8_OUT_BF16 = 0, GEMM_FP8_OUT_F32 = 1, GEMM_FP8_OUT_F32_TMA = 2 /* K-grouped only */ };
/* 1, or 0 with why: E, N, K positive, N % 128, K % 256, E * N < 2^31, mode, out, the ring fits, cluster 0, 1,
 * or 2 with N % 256. */
int gemm_fp8_check_shape(const GemmFp8Shape *s, char *err, size_t errlen);
/* 1024 + stages * (32768 + 128 (fp8-block) or + 512 + 512 + 4096 (MXFP8)) (+ 32768 bf16 out) + 24 stages */
int gemm_fp8_smem_bytes(const GemmFp8Shape *s);

/* ---- FP8 (E4M3) K-grouped (codegen/gemm_sm90.cuh GemmFp8KGrouped, decision 45): fp8-block's weight
 * gradient dW[g] [N, K] fp32 = dequant(dY)[rows of g]^T . dequant(X)[rows of g] with dY, X quantised 128 x 1
 * within each group and stored transposed (dY^T [N, rows_cap], X^T [K, rows_cap] E4M3, the tokens
 * contiguous; scales [rows_cap / 128][N or K], gemm_sm90_sched.h moec_fp8_kgrouped_s_index), promotion
 * every 128 tokens. The same GemmFp8Shape: mode GEMM_FP8_BLOCK; out GEMM_FP8_OUT_F32 (stores from registers)
 * or GEMM_FP8_OUT_F32_TMA (TMA stores through shared memory: 32 KB more, dW 16-byte aligned, E N < 2^31);
 * tiles 128 x 128 (pingpong 0) or 64 x 128 (pingpong 1), one stage per 128 tokens. */
/* 1, or 0 with why: E, N, K positive, N % 128, K % 128, mode, out, pingpong 0 or 1 (1 with GEMM_FP8_OUT_F32_TMA
 * only), E N K < 2^40, the ring fits. */
int gemm_fp8_kgrouped_check_shape(const GemmFp8Shape *s, char *err, size_t errlen);
/* 1024 + stages * (A + 16384 + A / 128 + 128 + 1024) + 24 stages (+ 32768 for GEMM_FP8_OUT_F32_TMA), A = 16384
 * (cooperative) or 8192 (ping-pong: a stage holds one warpgroup's 64 rows of dY^T) */
int gemm_fp8_kgrouped_smem_bytes(const GemmFp8Shape *s);
/* the rows of dY^T a stage (and the tensor map tma_a's box) holds: 128, or 64 for ping-pong */
int gemm_fp8_kgrouped_a_rows(const GemmFp8Shape *s);

#endif
