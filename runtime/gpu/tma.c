/* tma.c - tensor maps for the sm_90a grouped GEMM (tma.h). */
#include "tma.h"

#include <stdio.h>

int tma_encode_bf16_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols, unsigned box_rows,
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
    return tma_encode_bf16_2d(ta, a, (unsigned long long)rows_cap, (unsigned long long)s->K, GEMM_SM90_BLOCK_M, err, errlen) &&
           (s->trans_b ? tma_encode_bf16_2d(tb, w, (unsigned long long)s->E * (unsigned long long)s->K,
                                            (unsigned long long)s->N, 64, err, errlen)
                       : tma_encode_bf16_2d(tb, w, (unsigned long long)s->E * (unsigned long long)s->N,
                                            (unsigned long long)s->K, (unsigned)s->block_n, err, errlen)) &&
           tma_encode_bf16_2d(td, d, (unsigned long long)rows_cap, (unsigned long long)s->N, 64, err, errlen);
}

int gemm_sm90_kgrouped_tensor_maps(const GemmSm90Shape *s, CUdeviceptr dy, CUdeviceptr x, long long rows_cap,
                                   CUtensorMap *tdy, CUtensorMap *tx, char *err, size_t errlen)
{
    if ((dy | x) & 15) {
        snprintf(err, errlen, "dY and X must be 16-byte aligned");
        return 0;
    }
    return tma_encode_bf16_2d(tdy, dy, (unsigned long long)rows_cap, (unsigned long long)s->N, 64, err, errlen) &&
           tma_encode_bf16_2d(tx, x, (unsigned long long)rows_cap, (unsigned long long)s->K, 64, err, errlen);
}
