/* gemm_sm90.c - host side of the sm_90a grouped GEMM (gemm_sm90.h). */
#include "gemm_sm90.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $(GEN)/cuda_prelude.c: codegen/gemm_sm90_sched.h, codegen/sm90.cuh, codegen/gemm_sm90.cuh */
extern const char cuda_prelude_sm90_sched[], cuda_prelude_sm90[], cuda_prelude_gemm_sm90[];

int gemm_sm90_smem_bytes(const GemmSm90Shape *s)
{
    return 1024 + s->stages * (GEMM_SM90_BLOCK_M + s->block_n) * GEMM_SM90_BLOCK_K * 2 +
           (s->epilogue == GEMM_SM90_EPI_TMA ? 4 * 64 * 64 * 2 : 0) + 16 * s->stages;
}

int gemm_sm90_check_shape(const GemmSm90Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->epilogue < 0 || s->epilogue > 2)
        snprintf(err, errlen, "epilogue is 0, 1 or 2, not %d", s->epilogue);
    else if (s->block_n != 128 && s->block_n != 256)
        snprintf(err, errlen, "BLOCK_N is 128 or 256, not %d", s->block_n);
    else if (s->K % GEMM_SM90_BLOCK_K)
        snprintf(err, errlen, "K %d is not a multiple of %d", s->K, GEMM_SM90_BLOCK_K);
    else if (s->N % s->block_n)
        snprintf(err, errlen, "N %d is not a multiple of BLOCK_N %d", s->N, s->block_n);
    else if ((long long)s->E * s->N >= 2147483647ll)
        snprintf(err, errlen, "E * N = %lld rows of W do not fit an int", (long long)s->E * s->N);
    else if (s->stages < 2 || gemm_sm90_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages of BLOCK_N %d need %d bytes of shared memory (2..227 KB)", s->stages,
                 s->block_n, gemm_sm90_smem_bytes(s));
    else
        return 1;
    return 0;
}

static char *source_with(const char *inst, const char *extra)
{
    const char *parts[] = {cuda_prelude_sm90_sched, cuda_prelude_sm90, cuda_prelude_gemm_sm90, inst,
                           extra ? extra : ""};
    size_t len = 1;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        len += strlen(parts[i]);
    char *src = malloc(len);
    if (!src)
        return NULL;
    src[0] = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        strcat(src, parts[i]);
    return src;
}

char *gemm_sm90_source(const GemmSm90Shape *s, const char *name, const char *extra)
{
    char inst[256];
    snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_MGROUPED_EX(%s, %d, %d, %d, %d, %d, %d)\n", name, s->E, s->N,
             s->K, s->block_n, s->stages, s->epilogue);
    return source_with(inst, extra);
}

char *gemm_sm90_kgrouped_source(const GemmSm90Shape *s, const char *name, const char *extra)
{
    char inst[256];
    snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_KGROUPED(%s, %d, %d, %d, %d, %d)\n", name, s->E, s->N, s->K,
             s->block_n, s->stages);
    return source_with(inst, extra);
}

int gemm_sm90_kgrouped_smem_bytes(const GemmSm90Shape *s)
{
    return 1024 + s->stages * (GEMM_SM90_BLOCK_M + s->block_n) * 64 * 2 + 16 * s->stages;
}

int gemm_sm90_kgrouped_check_shape(const GemmSm90Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->block_n != 128 && s->block_n != 256)
        snprintf(err, errlen, "BLOCK_N is 128 or 256, not %d", s->block_n);
    else if (s->N % 128)
        snprintf(err, errlen, "N %d is not a multiple of 128", s->N);
    else if (s->K % s->block_n)
        snprintf(err, errlen, "K %d is not a multiple of BLOCK_N %d", s->K, s->block_n);
    else if ((long long)s->E * s->N * s->K >= (1ll << 40))
        snprintf(err, errlen, "dW of %lld elements is too large", (long long)s->E * s->N * s->K);
    else if (s->stages < 2 || gemm_sm90_kgrouped_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages of BLOCK_N %d need %d bytes of shared memory (2..227 KB)", s->stages,
                 s->block_n, gemm_sm90_kgrouped_smem_bytes(s));
    else
        return 1;
    return 0;
}

static int encode(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols, unsigned box_rows,
                  char *err, size_t errlen)
{
    unsigned long long dims[2] = {cols, rows};
    unsigned long long strides[1] = {cols * 2}; /* bytes, of dimension 1 */
    unsigned box[2] = {64, box_rows};           /* 64 bf16: one 128-byte swizzle row */
    unsigned estr[2] = {1, 1};
    CUresult r = cu.cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)(size_t)p, dims, strides,
                                           box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        char b[160];
        snprintf(err, errlen, "cuTensorMapEncodeTiled [%llu x %llu] box %u: %s", rows, cols, box_rows,
                 cudrv_error(r, b, sizeof b));
        return 0;
    }
    return 1;
}

int gemm_sm90_tensor_maps(const GemmSm90Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                          CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen)
{
    if ((a | w | d) & 15) {
        snprintf(err, errlen, "A, W and D must be 16-byte aligned");
        return 0;
    }
    return encode(ta, a, (unsigned long long)rows_cap, (unsigned long long)s->K, GEMM_SM90_BLOCK_M, err, errlen) &&
           encode(tb, w, (unsigned long long)s->E * (unsigned long long)s->N, (unsigned long long)s->K,
                  (unsigned)s->block_n, err, errlen) &&
           encode(td, d, (unsigned long long)rows_cap, (unsigned long long)s->N, 64, err, errlen);
}

int gemm_sm90_kgrouped_tensor_maps(const GemmSm90Shape *s, CUdeviceptr dy, CUdeviceptr x, long long rows_cap,
                                   CUtensorMap *tdy, CUtensorMap *tx, char *err, size_t errlen)
{
    if ((dy | x) & 15) {
        snprintf(err, errlen, "dY and X must be 16-byte aligned");
        return 0;
    }
    return encode(tdy, dy, (unsigned long long)rows_cap, (unsigned long long)s->N, 64, err, errlen) &&
           encode(tx, x, (unsigned long long)rows_cap, (unsigned long long)s->K, 64, err, errlen);
}
