/* mxfp8.h - MXFP8 numerics for the CPU reference: the E4M3 element format,
 * the E8M0 block scale, and quantization of a float matrix in blocks of 32
 * along either axis. The GPU kernels moec emits must agree with these
 * functions bit for bit; docs/mxfp8.md states the rules and the choices made
 * where Transformer Engine, torch and the OCP MX spec differ, and
 * tests/unit/test_mxfp8.c checks them against vectors that an independent
 * Python implementation (tests/mxfp8/gen_vectors.py) produced. */
#ifndef MOEC_MXFP8_H
#define MOEC_MXFP8_H

#include <stdint.h>

#define MXFP8_BLOCK 32          /* elements that share one scale */
#define E4M3_MAX 448.0f         /* largest finite E4M3 magnitude, code 0x7E */
#define E4M3_NAN 0x7F           /* the NaN code (0xFF with the sign bit) */
#define E8M0_NAN 0xFF           /* the NaN scale; the quantizer never writes it */
#define E8M0_EXP_MIN (-127)     /* code 0x00 */
#define E8M0_EXP_MAX 127        /* code 0xFE */

/* Block direction. Values keep the input's [rows, cols] row-major layout
 * either way; only the blocking and the scale layout differ:
 *   MXFP8_ROWWISE: a block is 32 consecutive elements of one row;
 *                  scales are [rows, cols / 32], row-major.
 *   MXFP8_COLWISE: a block is 32 consecutive rows of one column;
 *                  scales are [rows / 32, cols], row-major. */
enum { MXFP8_ROWWISE = 0, MXFP8_COLWISE = 1 };

/* Scale rule, from the block's amax (largest |x|, NaN ignored):
 *   MXFP8_SCALE_TE:  2^ceil(log2(amax / 448)), the smallest power of two
 *                    that brings amax within E4M3 range (Transformer
 *                    Engine's rule, computed exactly). The default.
 *   MXFP8_SCALE_OCP: 2^(floor(log2(amax)) - 8), the OCP MX v1.0 rule;
 *                    scaled values may exceed 448 and saturate.
 * Either exponent is clamped to [-127, 127]; amax == 0 gives -127, an
 * infinite amax gives 127. */
enum { MXFP8_SCALE_TE = 0, MXFP8_SCALE_OCP = 1 };

/* Status of the matrix functions. On an error nothing is written. */
enum {
    MXFP8_OK = 0,
    MXFP8_ERR_SHAPE = -1, /* negative size, blocked dimension not a multiple of 32, or overflow */
    MXFP8_ERR_AXIS = -2,  /* axis is neither MXFP8_ROWWISE nor MXFP8_COLWISE */
    MXFP8_ERR_RULE = -3,  /* rule is neither MXFP8_SCALE_TE nor MXFP8_SCALE_OCP */
};
const char *mxfp8_status_str(int status);

/* Float to E4M3 (OCP E4M3FN, torch.float8_e4m3fn): round to nearest, ties
 * to even, subnormals kept; finite values beyond +-448 and +-Inf saturate
 * to +-448; NaN gives the NaN code with the input's sign; -0 gives 0x80. */
uint8_t e4m3_from_float(float x);
/* Exact. 0x7F and 0xFF decode to a quiet NaN with that sign. */
float e4m3_to_float(uint8_t code);

/* 2^e as an E8M0 code (e + 127); e is clamped to [-127, 127]. */
uint8_t e8m0_from_exponent(int e);
/* 2^(code - 127), exact (code 0 is the float subnormal 2^-127); 0xFF is NaN. */
float e8m0_to_float(uint8_t code);

/* The unclamped-then-clamped scale exponent of a block whose amax is given
 * (amax >= 0, +Inf allowed; a NaN amax is treated as 0). Exposed for the
 * tests and for code generators that must reproduce it. */
int mxfp8_scale_exponent(float amax, int rule);

/* Quantizes x [rows, cols] (row-major) into values [rows, cols] (E4M3
 * codes) and scales (E8M0 codes, layout per axis above). The blocked
 * dimension (cols for ROWWISE, rows for COLWISE) must be a multiple of 32;
 * zero-sized matrices are fine. Returns MXFP8_OK or an MXFP8_ERR_*. */
int mxfp8_quantize(const float *x, int64_t rows, int64_t cols, int axis, int rule, uint8_t *values,
                   uint8_t *scales);

/* out[i] = e4m3_to_float(values[i]) * e8m0_to_float(scale of i's block).
 * Exact: every product is representable in float, except magnitudes of
 * 2^128 and above (a block scaled by 2^127, or by 2^120 with a value of 256
 * or more), which overflow to +-Inf as IEEE multiplication does. */
int mxfp8_dequantize(const uint8_t *values, const uint8_t *scales, int64_t rows, int64_t cols, int axis,
                     float *out);

/* Quantizes and dequantizes x in place, block by block: afterwards x holds
 * exactly the operand an MXFP8 GEMM sees. Idempotent. */
int mxfp8_fake_quant(float *x, int64_t rows, int64_t cols, int axis, int rule);

#endif
