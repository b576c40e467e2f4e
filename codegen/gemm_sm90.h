/* gemm_sm90.h - the CUDA source of the sm_90a bf16 grouped GEMM (codegen/gemm_sm90.cuh,
 * docs/kernels-sm90.md) for one configuration (plan/gemm_sm90.h); its tensor maps are the
 * runtime's (runtime/gpu/tma.h). Standalone for now (tests/gpu/gemm_sm90.c,
 * tests/unit/test_gemm_sm90.c); codegen's emitters will call it. */
#ifndef MOEC_CODEGEN_GEMM_SM90_H
#define MOEC_CODEGEN_GEMM_SM90_H

#include "../plan/gemm_sm90.h"

/* The CUDA source of kernel `name` for shape s: the scheduler, sm90.cuh, gemm_sm90.cuh and one
 * MOEC_SM90_GEMM_MGROUPED line (malloc'd; NULL when out of memory). `extra` (may be NULL) is
 * appended (other kernels of the same module). */
char *gemm_sm90_source(const GemmSm90Shape *s, const char *name, const char *extra);

/* kernel `name`: epilogue GEMM_SM90_KEPI_REGS: MOEC_SM90_GEMM_KGROUPED, parameters (tma_dy, tma_x,
 * float *dw, const int *offsets, int rows_cap); GEMM_SM90_KEPI_TMA: MOEC_SM90_GEMM_KGROUPED_EX,
 * parameters (tma_dy, tma_x, tma_dw, float *dw, const int *offsets, int rows_cap); grid #SMs, block 384. pingpong 1
 * (either epilogue): MOEC_SM90_GEMM_KGROUPED_SCHED, the TMA epilogue's parameters (tma_dw unread with the
 * register stores). */
char *gemm_sm90_kgrouped_source(const GemmSm90Shape *s, const char *name, const char *extra);
/* the FP8 kernel `name` (MOEC_SM90_GEMM_FP8), parameters (tma_a, tma_b, tma_d, void *d, const void *sa,
 * const void *sb, const int *offsets, int rows_cap); grid #SMs, block 384, gemm_fp8_smem_bytes() */
char *gemm_fp8_source(const GemmFp8Shape *s, const char *name, const char *extra);
/* the FP8 K-grouped kernel `name` (MOEC_SM90_GEMM_FP8_KGROUPED), parameters (tma_a, tma_b, float *dw,
 * const void *sa, const void *sb, const int *offsets, int rows_cap); out GEMM_FP8_OUT_F32_TMA:
 * MOEC_SM90_GEMM_FP8_KGROUPED_TMA, parameters (tma_a, tma_b, tma_dw, float *dw, ...); grid #SMs, block 384,
 * gemm_fp8_kgrouped_smem_bytes() */
char *gemm_fp8_kgrouped_source(const GemmFp8Shape *s, const char *name, const char *extra);
/* the same two with the promotion schedule chosen (GEMM_FP8_SCHED_PIPE, what the two above emit, or
 * GEMM_FP8_SCHED_PAIRS; a sched other than these fails the kernel's static_assert at NVRTC compile) */
char *gemm_fp8_source_sched(const GemmFp8Shape *s, int sched, const char *name, const char *extra);
char *gemm_fp8_kgrouped_source_sched(const GemmFp8Shape *s, int sched, const char *name, const char *extra);
#endif
