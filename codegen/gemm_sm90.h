/* gemm_sm90.h - host side of the sm_90a bf16 grouped GEMM (codegen/gemm_sm90.cuh,
 * docs/kernels-sm90.md): the kernel's source for one shape, its launch numbers, its tensor maps.
 * Standalone for now (tests/gpu/gemm_sm90.c, tests/unit/test_gemm_sm90.c); codegen will call it. */
#ifndef MOEC_CODEGEN_GEMM_SM90_H
#define MOEC_CODEGEN_GEMM_SM90_H

#include <stddef.h>

#include "../runtime/gpu/cudrv.h"

/* One instantiation: E groups (experts), D[., N] = A[., K] . W[g]^T; BLOCK_N 128 or 256; STAGES
 * shared-memory slots (at most 4 for BLOCK_N 256, 6 for 128). BLOCK_M is 128, BLOCK_K 64. */
typedef struct GemmSm90Shape {
    int E, N, K;
    int block_n, stages;
    int epilogue; /* GEMM_SM90_EPI_*: 0 (default) TMA stores through shared memory; 1 16-byte stores
                     from registers; 2 4-byte stores from registers (for timing comparisons) */
} GemmSm90Shape;

enum { GEMM_SM90_BLOCK_M = 128, GEMM_SM90_BLOCK_K = 64, GEMM_SM90_THREADS = 384 };
enum { GEMM_SM90_EPI_TMA = 0, GEMM_SM90_EPI_STORE16 = 1, GEMM_SM90_EPI_STORE4 = 2 };

/* 1, or 0 with why: K % 64, N % block_n, E >= 1, E * N < 2^31, the ring fits in 227 KB. */
int gemm_sm90_check_shape(const GemmSm90Shape *s, char *err, size_t errlen);

/* Dynamic shared memory the kernel needs (bytes): 1024 + stages * (128 + block_n) * 128
 * (+ 32768 for the TMA-store epilogue) + 16 * stages. */
int gemm_sm90_smem_bytes(const GemmSm90Shape *s);

/* The CUDA source of kernel `name` for shape s: the scheduler, sm90.cuh, gemm_sm90.cuh and one
 * MOEC_SM90_GEMM_MGROUPED line (malloc'd; NULL when out of memory). `extra` (may be NULL) is
 * appended (other kernels of the same module). */
char *gemm_sm90_source(const GemmSm90Shape *s, const char *name, const char *extra);

/* The three tensor maps of the M-grouped kernel (needs the driver loaded, cudrv_load), all bf16,
 * 128-byte swizzled, 256-byte L2 promotion: ta over A [rows_cap, K] at a, box {64, 128}; tb over
 * W [E * N, K] at w, box {64, block_n}; td over D [rows_cap, N] at d, box {64, 64}. a, w, d 16-byte
 * aligned. 1, or 0 + err. */
int gemm_sm90_tensor_maps(const GemmSm90Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                          CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen);

/* ---- K-grouped (weight gradient): dW[g] [N, K] fp32 = dY[rows of g]^T . X[rows of g], the same
 * offsets. Shape: E, N (a multiple of 128), K (a multiple of block_n), block_n, stages; epilogue is
 * ignored (fp32 stores from registers). Padding rows must be zero in dY or X, finite in both. */
int gemm_sm90_kgrouped_check_shape(const GemmSm90Shape *s, char *err, size_t errlen);
int gemm_sm90_kgrouped_smem_bytes(const GemmSm90Shape *s); /* 1024 + stages * (128 + block_n) * 128 + 16 stages */
/* kernel `name`: MOEC_SM90_GEMM_KGROUPED, parameters (tma_dy, tma_x, float *dw, const int *offsets,
 * int rows_cap); grid #SMs, block 384 */
char *gemm_sm90_kgrouped_source(const GemmSm90Shape *s, const char *name, const char *extra);
/* tdy over dY [rows_cap, N] at dy, tx over X [rows_cap, K] at x: bf16, box {64, 64}, 128-byte swizzle */
int gemm_sm90_kgrouped_tensor_maps(const GemmSm90Shape *s, CUdeviceptr dy, CUdeviceptr x, long long rows_cap,
                                   CUtensorMap *tdy, CUtensorMap *tx, char *err, size_t errlen);

#endif
