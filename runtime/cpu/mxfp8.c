/* mxfp8.c - E4M3 and E8M0 conversions and MXFP8 block quantization for the
 * CPU reference. Everything is done with integer arithmetic on the float's
 * bits or with exact power-of-two scaling, so results do not depend on the
 * host's floating-point environment (no division, no log2, no FMA). The
 * E4M3 encoder and decoder are util/e4m3.h's, which the generated
 * kernels use too. The rules are written out in docs/mxfp8.md. */
#include "mxfp8.h"

#include <math.h>
#include <string.h>

#include "../../util/e4m3.h"
#include "../../util/util.h"

static float bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

const char *mxfp8_status_str(int status)
{
    switch (status) {
    case MXFP8_OK: return "ok";
    case MXFP8_ERR_SHAPE: return "bad shape: negative size, blocked dimension not a multiple of 32, or too large";
    case MXFP8_ERR_AXIS: return "bad axis: expected MXFP8_ROWWISE or MXFP8_COLWISE";
    case MXFP8_ERR_RULE: return "bad scale rule: expected MXFP8_SCALE_TE or MXFP8_SCALE_OCP";
    default: return "unknown mxfp8 status";
    }
}

/* E4M3 encoding and decoding are written once, in util/e4m3.h, for the
 * CPU here and for the generated kernels alike (the bits must agree). */
uint8_t e4m3_from_float(float x) { return (uint8_t)moec_e4m3_encode(x); }

float e4m3_to_float(uint8_t code) { return moec_e4m3_decode(code); }

uint8_t e8m0_from_exponent(int e)
{
    if (e < E8M0_EXP_MIN)
        e = E8M0_EXP_MIN;
    if (e > E8M0_EXP_MAX)
        e = E8M0_EXP_MAX;
    return (uint8_t)(e + 127);
}

float e8m0_to_float(uint8_t code)
{
    if (code == E8M0_NAN)
        return bits_float(0x7FC00000u);
    /* Code c is the float with biased exponent c: 2^(c-127). Code 0 is
     * 2^-127, a float subnormal, built from its bits. */
    if (code == 0)
        return bits_float(0x00400000u);
    return bits_float((uint32_t)code << 23);
}

int mxfp8_scale_exponent(float amax, int rule)
{
    if (isnan(amax) || amax <= 0.0f)
        return E8M0_EXP_MIN;
    if (isinf(amax))
        return E8M0_EXP_MAX;
    /* amax = m * 2^p with m in [0.5, 1), exactly (frexpf handles subnormals). */
    int p;
    float m = frexpf(amax, &p);
    int e;
    if (rule == MXFP8_SCALE_OCP) {
        /* floor(log2 amax) = p - 1; E4M3's largest exponent is 8. */
        e = p - 1 - 8;
    } else {
        /* Smallest e with 448 * 2^e >= amax. 448 = 0.875 * 2^9, so
         * 448 * 2^(p-9) = 0.875 * 2^p, which covers amax iff m <= 0.875. */
        e = p - 9 + (m > 0.875f);
    }
    if (e < E8M0_EXP_MIN)
        e = E8M0_EXP_MIN;
    if (e > E8M0_EXP_MAX)
        e = E8M0_EXP_MAX;
    return e;
}

/* Checks the arguments and returns the element count through n. */
static int check_args(int64_t rows, int64_t cols, int axis, int rule, int64_t *n)
{
    if (axis != MXFP8_ROWWISE && axis != MXFP8_COLWISE)
        return MXFP8_ERR_AXIS;
    if (rule != MXFP8_SCALE_TE && rule != MXFP8_SCALE_OCP)
        return MXFP8_ERR_RULE;
    if (rows < 0 || cols < 0)
        return MXFP8_ERR_SHAPE;
    if ((axis == MXFP8_ROWWISE ? cols : rows) % MXFP8_BLOCK != 0)
        return MXFP8_ERR_SHAPE;
    if (!checked_mul_i64(rows, cols, n))
        return MXFP8_ERR_SHAPE;
    return MXFP8_OK;
}

/* Block b of the matrix: its first element and the distance between its
 * elements. Blocks are numbered in the order of the scale array. */
static void block_at(int64_t b, int64_t rows, int64_t cols, int axis, int64_t *first, int64_t *stride)
{
    (void)rows;
    if (axis == MXFP8_ROWWISE) {
        int64_t per_row = cols / MXFP8_BLOCK;
        *first = (b / per_row) * cols + (b % per_row) * MXFP8_BLOCK;
        *stride = 1;
    } else {
        *first = (b / cols) * MXFP8_BLOCK * cols + b % cols;
        *stride = cols;
    }
}

/* Quantizes one block of 32. amax ignores NaN (as fmaxf does in TE's
 * kernels), so a NaN stays in its own element; an infinity takes part and
 * pushes the scale to 2^127. Scaling by 2^-e is exact unless the result
 * falls below 2^-126, and such results round to +-0 in E4M3 either way. */
static uint8_t quantize_block(const float *x, int64_t stride, int rule, uint8_t *v)
{
    float amax = 0.0f;
    for (int i = 0; i < MXFP8_BLOCK; i++) {
        float a = fabsf(x[i * stride]);
        if (a > amax)
            amax = a;
    }
    int e = mxfp8_scale_exponent(amax, rule);
    for (int i = 0; i < MXFP8_BLOCK; i++)
        v[i] = e4m3_from_float(ldexpf(x[i * stride], -e));
    return e8m0_from_exponent(e);
}

int mxfp8_quantize(const float *x, int64_t rows, int64_t cols, int axis, int rule, uint8_t *values,
                   uint8_t *scales)
{
    int64_t n;
    int st = check_args(rows, cols, axis, rule, &n);
    if (st != MXFP8_OK)
        return st;
    int64_t nblocks = n / MXFP8_BLOCK;
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t first, stride;
        uint8_t v[MXFP8_BLOCK];
        block_at(b, rows, cols, axis, &first, &stride);
        scales[b] = quantize_block(x + first, stride, rule, v);
        for (int i = 0; i < MXFP8_BLOCK; i++)
            values[first + i * stride] = v[i];
    }
    return MXFP8_OK;
}

int mxfp8_dequantize(const uint8_t *values, const uint8_t *scales, int64_t rows, int64_t cols, int axis,
                     float *out)
{
    int64_t n;
    int st = check_args(rows, cols, axis, MXFP8_SCALE_TE, &n);
    if (st != MXFP8_OK)
        return st;
    int64_t nblocks = n / MXFP8_BLOCK;
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t first, stride;
        block_at(b, rows, cols, axis, &first, &stride);
        float s = e8m0_to_float(scales[b]);
        for (int i = 0; i < MXFP8_BLOCK; i++) {
            int64_t k = first + i * stride;
            out[k] = e4m3_to_float(values[k]) * s;
        }
    }
    return MXFP8_OK;
}

int mxfp8_fake_quant(float *x, int64_t rows, int64_t cols, int axis, int rule)
{
    int64_t n;
    int st = check_args(rows, cols, axis, rule, &n);
    if (st != MXFP8_OK)
        return st;
    int64_t nblocks = n / MXFP8_BLOCK;
    for (int64_t b = 0; b < nblocks; b++) {
        int64_t first, stride;
        uint8_t v[MXFP8_BLOCK];
        block_at(b, rows, cols, axis, &first, &stride);
        float s = e8m0_to_float(quantize_block(x + first, stride, rule, v));
        for (int i = 0; i < MXFP8_BLOCK; i++)
            x[first + i * stride] = e4m3_to_float(v[i]) * s;
    }
    return MXFP8_OK;
}
