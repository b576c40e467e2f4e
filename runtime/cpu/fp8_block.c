/* fp8_block.c - fp8-block quantization (1x128, 128x1, 128x128 blocks with
 * power-of-two scales) and its GEMM reference with fp32 promotion every
 * 128 elements of K. The element encoding and the scale rule are MXFP8's
 * (runtime/cpu/mxfp8.c: integer work on the float's bits and exact
 * power-of-two scaling, no division, no log2, no FMA); only the blocks
 * differ. docs/fp8-block.md has the rules. */
#include "fp8_block.h"

#include <math.h>
#include <stddef.h>

#include "mxfp8.h"
#include "../../util/util.h"

const char *fp8b_status_str(int status)
{
    switch (status) {
    case FP8B_OK: return "ok";
    case FP8B_ERR_SHAPE: return "bad shape: negative size, or too many elements";
    case FP8B_ERR_LAYOUT: return "bad layout: expected FP8B_ROWWISE, FP8B_COLWISE or FP8B_TILE";
    default: return "unknown fp8-block status";
    }
}

int fp8b_scale_exponent(float amax) { return mxfp8_scale_exponent(amax, MXFP8_SCALE_TE); }

static int64_t nblk(int64_t n) { return (n + FP8B_BLOCK - 1) / FP8B_BLOCK; }

/* Checks the arguments; the number of block rows and block columns of the
 * scale array through br, bc. */
static int check(int64_t rows, int64_t cols, int layout, int64_t *br, int64_t *bc)
{
    int64_t n;
    if (layout != FP8B_ROWWISE && layout != FP8B_COLWISE && layout != FP8B_TILE)
        return FP8B_ERR_LAYOUT;
    if (rows < 0 || cols < 0 || !checked_mul_i64(rows, cols, &n))
        return FP8B_ERR_SHAPE;
    *br = layout == FP8B_ROWWISE ? rows : nblk(rows);
    *bc = layout == FP8B_COLWISE ? cols : nblk(cols);
    return FP8B_OK;
}

int64_t fp8b_num_scales(int64_t rows, int64_t cols, int layout)
{
    int64_t br, bc;
    return check(rows, cols, layout, &br, &bc) == FP8B_OK ? br * bc : -1;
}

/* The rectangle [r0, r1) x [c0, c1) of scale (i, j). */
static void block_rect(int64_t i, int64_t j, int64_t rows, int64_t cols, int layout, int64_t *r0, int64_t *r1,
                       int64_t *c0, int64_t *c1)
{
    int64_t hr = layout == FP8B_ROWWISE ? 1 : FP8B_BLOCK, hc = layout == FP8B_COLWISE ? 1 : FP8B_BLOCK;
    *r0 = i * hr;
    *r1 = *r0 + hr < rows ? *r0 + hr : rows;
    *c0 = j * hc;
    *c1 = *c0 + hc < cols ? *c0 + hc : cols;
}

/* Quantizes (and with deq, dequantizes in place) every block. amax
 * ignores NaN and counts Inf, as in MXFP8. */
static int run(const float *x, int64_t rows, int64_t cols, int layout, uint8_t *values, uint8_t *scales,
               float *deq)
{
    int64_t br, bc;
    int st = check(rows, cols, layout, &br, &bc);
    if (st != FP8B_OK)
        return st;
    for (int64_t i = 0; i < br; i++)
        for (int64_t j = 0; j < bc; j++) {
            int64_t r0, r1, c0, c1;
            block_rect(i, j, rows, cols, layout, &r0, &r1, &c0, &c1);
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float a = fabsf(x[r * cols + c]);
                    if (a > amax)
                        amax = a;
                }
            int e = fp8b_scale_exponent(amax);
            uint8_t code = e8m0_from_exponent(e);
            float s = e8m0_to_float(code);
            if (scales)
                scales[i * bc + j] = code;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    uint8_t v = e4m3_from_float(ldexpf(x[r * cols + c], -e));
                    if (values)
                        values[r * cols + c] = v;
                    if (deq)
                        deq[r * cols + c] = e4m3_to_float(v) * s;
                }
        }
    return FP8B_OK;
}

int fp8b_quantize(const float *x, int64_t rows, int64_t cols, int layout, uint8_t *values, uint8_t *scales)
{
    return run(x, rows, cols, layout, values, scales, NULL);
}

int fp8b_fake_quant(float *x, int64_t rows, int64_t cols, int layout)
{
    /* each block is read fully (amax) before any of it is written */
    return run(x, rows, cols, layout, NULL, NULL, x);
}

int fp8b_dequantize(const uint8_t *values, const uint8_t *scales, int64_t rows, int64_t cols, int layout,
                    float *out)
{
    int64_t br, bc;
    int st = check(rows, cols, layout, &br, &bc);
    if (st != FP8B_OK)
        return st;
    for (int64_t i = 0; i < br; i++)
        for (int64_t j = 0; j < bc; j++) {
            int64_t r0, r1, c0, c1;
            block_rect(i, j, rows, cols, layout, &r0, &r1, &c0, &c1);
            float s = e8m0_to_float(scales[i * bc + j]);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    out[r * cols + c] = e4m3_to_float(values[r * cols + c]) * s;
        }
    return FP8B_OK;
}

int fp8b_gemm_ref(const uint8_t *a_values, const uint8_t *a_scales, const uint8_t *b_values,
                  const uint8_t *b_scales, int b_layout, int64_t M, int64_t N, int64_t K, float *c, double *absdot)
{
    int64_t t;
    if (b_layout != FP8B_ROWWISE && b_layout != FP8B_TILE)
        return FP8B_ERR_LAYOUT;
    if (M < 0 || N < 0 || K < 0 || !checked_mul_i64(M, K, &t) || !checked_mul_i64(N, K, &t) ||
        !checked_mul_i64(M, N, &t))
        return FP8B_ERR_SHAPE;
    int64_t kb = nblk(K);
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = 0.0f;
            double ad = 0.0;
            for (int64_t b = 0; b < kb; b++) {
                int64_t k0 = b * FP8B_BLOCK, k1 = k0 + FP8B_BLOCK < K ? k0 + FP8B_BLOCK : K;
                float p = 0.0f;
                double pa = 0.0;
                for (int64_t k = k0; k < k1; k++) {
                    float prod = e4m3_to_float(a_values[m * K + k]) * e4m3_to_float(b_values[n * K + k]);
                    p += prod;
                    pa += fabs((double)prod);
                }
                uint8_t sa = a_scales[m * kb + b];
                uint8_t sb = b_layout == FP8B_TILE ? b_scales[(n / FP8B_BLOCK) * kb + b] : b_scales[n * kb + b];
                /* the two scales' product in fp32: exact while the exponents
                 * add up to -149 ... 127 (0 below, Inf above) */
                float s = e8m0_to_float(sa) * e8m0_to_float(sb);
                acc += p * s;
                ad += pa * ldexp(1.0, (int)sa - 127 + (int)sb - 127);
            }
            c[m * N + n] = acc;
            if (absdot)
                absdot[m * N + n] = ad;
        }
    return FP8B_OK;
}
