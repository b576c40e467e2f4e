/* tma.h - the tensor maps of the sm_90a grouped GEMM (plan/gemm_sm90.h),
 * made on the host with cuTensorMapEncodeTiled (the driver must be loaded:
 * cudrv_load). Arena addresses never move, so a plan's maps are made once. */
#ifndef MOEC_GPU_TMA_H
#define MOEC_GPU_TMA_H

#include <stddef.h>

#include "../../plan/gemm_sm90.h"
#include "cudrv.h"

/* One bf16 tensor map over [rows, cols] at p (row-major, 16-byte aligned), box {64, box_rows}, 128-byte
 * swizzle, 256-byte L2 promotion. 1, or 0 + err. */
int tma_encode_bf16_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols,
                       unsigned box_rows, char *err, size_t errlen);

/* The same for fp32: box {32, box_rows} (32 fp32: one 128-byte swizzle row). */
int tma_encode_f32_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols,
                      unsigned box_rows, char *err, size_t errlen);

/* The three tensor maps of the M-grouped kernel (needs the driver loaded, cudrv_load), all bf16,
 * 128-byte swizzled, 256-byte L2 promotion: ta over A [rows_cap, K] at a, box {64, 128} ({64, 64} for
 * ping-pong, gemm_sm90_block_m); tb over
 * W [E * N, K] at w, box {64, block_n}; td over D [rows_cap, N] at d, box {64, 64}. a, w, d 16-byte
 * aligned. 1, or 0 + err. */
int gemm_sm90_tensor_maps(const GemmSm90Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                          CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen);

/* tdy over dY [rows_cap, N] at dy, tx over X [rows_cap, K] at x: bf16, box {64, 64}, 128-byte swizzle */
int gemm_sm90_kgrouped_tensor_maps(const GemmSm90Shape *s, CUdeviceptr dy, CUdeviceptr x, long long rows_cap,
                                   CUtensorMap *tdy, CUtensorMap *tx, char *err, size_t errlen);

/* tdw over dW [E * N, K] fp32 at dw (16-byte aligned), box {32, 64}, 128-byte swizzle: the K-grouped
 * kernel's TMA-store epilogue (GEMM_SM90_KEPI_TMA) */
int gemm_sm90_kgrouped_dw_map(const GemmSm90Shape *s, CUdeviceptr dw, CUtensorMap *tdw, char *err, size_t errlen);

/* The same for bytes (E4M3 codes): box {128, box_rows} (128 bytes: one swizzle row). */
int tma_encode_u8_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols,
                     unsigned box_rows, char *err, size_t errlen);

/* The FP8 kernel's maps (plan/gemm_sm90.h GemmFp8Shape): ta over A [rows_cap, K] E4M3 at a, box {128, 128};
 * tb over W [E * N, K] E4M3 at w, box {128, 128}; td over D [rows_cap, N] bf16 at d, box {64, 64} (used by
 * the bf16 output only; an fp32 D is larger, so the map stays inside it). 1, or 0 + err. */
int gemm_fp8_tensor_maps(const GemmFp8Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                         CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen);

/* The FP8 K-grouped kernel's maps (GemmFp8KGrouped): ta over dY^T [N, rows_cap] E4M3 at dyt, box {128, 128}
 * ({128, 64} for s->pingpong: 64-row tiles), tb over X^T [K, rows_cap] E4M3 at xt, box {128, 128}. 1, or 0 + err. */
int gemm_fp8_kgrouped_tensor_maps(const GemmFp8Shape *s, CUdeviceptr dyt, CUdeviceptr xt, long long rows_cap,
                                  CUtensorMap *ta, CUtensorMap *tb, char *err, size_t errlen);
/* tdw over dW [E * N, K] fp32 at dw (16-byte aligned), box {32, 64}: GEMM_FP8_OUT_F32_TMA's stores */
int gemm_fp8_kgrouped_dw_map(const GemmFp8Shape *s, CUdeviceptr dw, CUtensorMap *tdw, char *err, size_t errlen);

#endif
