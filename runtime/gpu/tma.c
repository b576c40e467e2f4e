/* tma.c - tensor maps for the sm_90a grouped GEMM (tma.h). */
#include "tma.h"

#include <stdio.h>

/* 2-D, 128-byte swizzle: the box's inner dimension is one 128-byte swizzle row (64 bf16 or 32 fp32) */
static int encode_2d(CUtensorMap *m, int type, unsigned elsize, const char *tname, CUdeviceptr p,
                     unsigned long long rows, unsigned long long cols, unsigned box_rows, char *err, size_t errlen)
{
    unsigned long long dims[2] = {cols, rows};
    unsigned long long strides[1] = {cols * elsize}; /* bytes, of dimension 1 */
    unsigned box[2] = {128 / elsize, box_rows};
    unsigned estr[2] = {1, 1};
    CUresult r = cu.cuTensorMapEncodeTiled(m, type, 2, (void *)(size_t)p, dims, strides, box, estr,
                                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        char b[160];
        snprintf(err, errlen, "cuTensorMapEncodeTiled %s [%llu x %llu] box %u: %s", tname, rows, cols, box_rows,
                 cudrv_error(r, b, sizeof b));
        return 0;
    }
    return 1;
}

int tma_encode_bf16_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols, unsigned box_rows,
                  char *err, size_t errlen)
{
    return encode_2d(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, "bf16", p, rows, cols, box_rows, err, errlen);
}

int tma_encode_f32_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols,
                      unsigned box_rows, char *err, size_t errlen)
{
    return encode_2d(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, "f32", p, rows, cols, box_rows, err, errlen);
}

int gemm_sm90_tensor_maps(const GemmSm90Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                          CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen)
{
    if ((a | w | d) & 15) {
        snprintf(err, errlen, "A, W and D must be 16-byte aligned");
        return 0;
    }
    return tma_encode_bf16_2d(ta, a, (unsigned long long)rows_cap, (unsigned long long)s->K, (unsigned)gemm_sm90_block_m(s), err,
                              errlen) &&
           (s->trans_b ? tma_encode_bf16_2d(tb, w, (unsigned long long)s->E * (unsigned long long)s->K,
                                            (unsigned long long)s->N, 64, err, errlen)
                       : tma_encode_bf16_2d(tb, w, (unsigned long long)s->E * (unsigned long long)s->N,
                                            (unsigned long long)s->K, (unsigned)gemm_sm90_b_box_rows(s), err, errlen)) &&
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

int gemm_sm90_kgrouped_dw_map(const GemmSm90Shape *s, CUdeviceptr dw, CUtensorMap *tdw, char *err, size_t errlen)
{
    if (dw & 15) {
        snprintf(err, errlen, "dW must be 16-byte aligned for its tensor map");
        return 0;
    }
    return tma_encode_f32_2d(tdw, dw, (unsigned long long)s->E * (unsigned long long)s->N, (unsigned long long)s->K, 64,
                             err, errlen);
}

int tma_encode_u8_2d(CUtensorMap *m, CUdeviceptr p, unsigned long long rows, unsigned long long cols, unsigned box_rows,
                     char *err, size_t errlen)
{
    return encode_2d(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, "u8", p, rows, cols, box_rows, err, errlen);
}

int gemm_fp8_tensor_maps(const GemmFp8Shape *s, CUdeviceptr a, long long rows_cap, CUdeviceptr w, CUdeviceptr d,
                         CUtensorMap *ta, CUtensorMap *tb, CUtensorMap *td, char *err, size_t errlen)
{
    if ((a | w | d) & 15) {
        snprintf(err, errlen, "A, W and D must be 16-byte aligned");
        return 0;
    }
    return tma_encode_u8_2d(ta, a, (unsigned long long)rows_cap, (unsigned long long)s->K, 128, err, errlen) &&
           tma_encode_u8_2d(tb, w, (unsigned long long)s->E * (unsigned long long)s->N, (unsigned long long)s->K, 128,
                            err, errlen) &&
           tma_encode_bf16_2d(td, d, (unsigned long long)rows_cap, (unsigned long long)s->N, 64, err, errlen);
}

int gemm_fp8_kgrouped_tensor_maps(const GemmFp8Shape *s, CUdeviceptr dyt, CUdeviceptr xt, long long rows_cap,
                                  CUtensorMap *ta, CUtensorMap *tb, char *err, size_t errlen)
{
    if ((dyt | xt) & 15 || rows_cap % 16) {
        snprintf(err, errlen, "dY^T and X^T must be 16-byte aligned, rows_cap a multiple of 16");
        return 0;
    }
    return tma_encode_u8_2d(ta, dyt, (unsigned long long)s->N, (unsigned long long)rows_cap,
                            s->pingpong ? 64 : 128, err, errlen) && /* gemm_fp8_kgrouped_a_rows */
           tma_encode_u8_2d(tb, xt, (unsigned long long)s->K, (unsigned long long)rows_cap, 128, err, errlen);
}

int gemm_fp8_kgrouped_dw_map(const GemmFp8Shape *s, CUdeviceptr dw, CUtensorMap *tdw, char *err, size_t errlen)
{
    if (dw & 15) {
        snprintf(err, errlen, "dW must be 16-byte aligned for its tensor map");
        return 0;
    }
    return tma_encode_f32_2d(tdw, dw, (unsigned long long)s->E * (unsigned long long)s->N, (unsigned long long)s->K, 64,
                             err, errlen);
}
