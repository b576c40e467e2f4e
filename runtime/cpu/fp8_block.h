/* fp8_block.h - the fp8-block recipe's numerics for the CPU reference:
 * E4M3 values (the encoder of util/e4m3.h, as MXFP8) with one power-of-two
 * scale per block of 128 elements along a row (1x128), 128 rows of a
 * column (128x1), or a 128x128 tile. The scale rule is MXFP8's TE rule,
 * 2^ceil(log2(amax / 448)) clamped to [2^-127, 2^127], and scales are
 * stored as E8M0 codes (exactly the fp32 powers of two a kernel multiplies
 * by). Blocks at the end of a dimension that is not a multiple of 128 are
 * partial: they hold the elements that exist, which is what zero padding
 * gives (a zero changes no amax). docs/fp8-block.md states the rules, the
 * GEMM reference's order of accumulation and the tolerance a GPU kernel is
 * held to; tests/unit/test_fp8_block.c checks them. */
#ifndef MOEC_FP8_BLOCK_H
#define MOEC_FP8_BLOCK_H

#include <stdint.h>

#define FP8B_BLOCK 128 /* elements along a block's side */

/* Block layout. Values keep the input's [rows, cols] row-major layout;
 * scales are row-major too:
 *   FP8B_ROWWISE: 1x128, 128 consecutive elements of a row;
 *                 scales [rows, ceil(cols / 128)].
 *   FP8B_COLWISE: 128x1, 128 consecutive rows of one column;
 *                 scales [ceil(rows / 128), cols].
 *   FP8B_TILE:    128x128 (rows x cols); scales [ceil(rows / 128),
 *                 ceil(cols / 128)]. Tile quantization commutes with
 *                 transposition: tile(W)^T = tile(W^T), values and scales. */
enum { FP8B_ROWWISE = 0, FP8B_COLWISE = 1, FP8B_TILE = 2 };

enum {
    FP8B_OK = 0,
    FP8B_ERR_SHAPE = -1, /* negative size or an element count that overflows */
    FP8B_ERR_LAYOUT = -2 /* not one of FP8B_ROWWISE, FP8B_COLWISE, FP8B_TILE */
};
const char *fp8b_status_str(int status);

/* The scale exponent e of a block with this amax (NaN-free largest |x|):
 * the smallest e with 448 * 2^e >= amax, clamped to [-127, 127]; amax 0
 * (or NaN) gives -127 and an infinite amax 127. */
int fp8b_scale_exponent(float amax);

/* The scale array's element count for a layout, or -1 on a bad argument. */
int64_t fp8b_num_scales(int64_t rows, int64_t cols, int layout);

/* x [rows, cols] -> values [rows, cols] (E4M3 codes) and scales (E8M0
 * codes, layout above). Any shape is accepted, ragged ends included;
 * zero-sized matrices write nothing. On an error nothing is written. */
int fp8b_quantize(const float *x, int64_t rows, int64_t cols, int layout, uint8_t *values, uint8_t *scales);

/* out[i] = e4m3(values[i]) * 2^(scale of i's block - 127), exact except
 * for magnitudes of 2^128 and above, which become +-Inf (as in MXFP8). */
int fp8b_dequantize(const uint8_t *values, const uint8_t *scales, int64_t rows, int64_t cols, int layout,
                    float *out);

/* Quantize and dequantize in place: x becomes exactly the operand an
 * fp8-block GEMM multiplies. Idempotent. */
int fp8b_fake_quant(float *x, int64_t rows, int64_t cols, int layout);

/* The GEMM reference, c [M, N] = a [M, K] . b [N, K]^T, with a quantized
 * 1x128 along K (FP8B_ROWWISE, scales [M, ceil(K/128)]) and b quantized
 * either 128x128 (b_layout FP8B_TILE, the weight; scales [ceil(N/128),
 * ceil(K/128)]) or 1x128 along K (FP8B_ROWWISE; scales [N, ceil(K/128)]).
 * The order of accumulation, which a GPU kernel follows up to the tensor
 * core's own summation inside a 128-deep slice:
 *   for each output (m, n): acc = 0.0f
 *     for each K block kb = 0, 1, ... in order:
 *       p = 0.0f; for k in the block, ascending: p += va[m,k] * vb[n,k]
 *         (va, vb the decoded E4M3 values, unscaled: each product is
 *         exact in fp32, and p is rounded to fp32 after every add)
 *       acc += p * (2^ea * 2^eb)   (the power-of-two multiply is exact
 *         unless it overflows or falls below 2^-126; the add rounds)
 *     c[m, n] = acc
 * absdot, if not NULL, receives the same sum over |va * vb| * 2^(ea+eb),
 * accumulated in double: the scale of the tolerance in docs/fp8-block.md.
 * Returns FP8B_OK or FP8B_ERR_SHAPE / FP8B_ERR_LAYOUT. */
int fp8b_gemm_ref(const uint8_t *a_values, const uint8_t *a_scales, const uint8_t *b_values,
                  const uint8_t *b_scales, int b_layout, int64_t M, int64_t N, int64_t K, float *c, double *absdot);

#endif
