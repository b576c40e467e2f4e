/* mxfp8.cuh - MXFP8 fake quantization for the generated kernels: the
 * Transformer Engine scale rule and one element's or one block's
 * quantize-dequantize, on top of the E4M3 encoder and decoder of e4m3.h
 * (the one definition, which the CPU reference runtime/cpu/mxfp8.c uses
 * too).
 *
 * Bit-exact with runtime/cpu/mxfp8.c (mxfp8_scale_exponent with
 * MXFP8_SCALE_TE, mxfp8_fake_quant): the same integer arithmetic on the
 * float's bits, and scaling by exact powers of two (one IEEE multiply,
 * which rounds exactly as ldexpf does). The file is written in the common
 * subset of C11 and CUDA C++: moec pastes it into every kernels.cu, and
 * tests/unit/test_codegen.c compiles it as C and checks it against
 * mxfp8.c. No includes under NVRTC, which compiles it without headers. */
#ifndef MOEC_MXFP8_CUH
#define MOEC_MXFP8_CUH

/* the E4M3 encoder and decoder, and MOEC_HD: in kernels.cu, e4m3.h is
 * pasted just above (so this include is skipped); compiled as C, it is
 * included from here */
#ifndef MOEC_E4M3_H
#include "../util/e4m3.h"
#endif

/* The block's scale exponent from its amax (>= 0, NaN ignored by the
 * caller): the smallest e with 448 * 2^e >= amax, clamped to [-127, 127];
 * amax 0 (or NaN) gives -127, an infinite amax 127. */
MOEC_HD int moec_mx_scale_exp(float amax)
{
    if (!(amax > 0.0f))
        return -127;
    unsigned u = moec_mx_f2u(amax);
    int fexp = (int)((u >> 23) & 0xFFu);
    if (fexp == 0xFF)
        return 127;
    if (fexp == 0)
        return -127; /* a subnormal amax: 2^(p - 9) with p <= -125 is below the clamp */
    /* amax = m * 2^p, m in [0.5, 1): p = fexp - 126; m > 0.875 iff the
     * fraction bits exceed 0.75 * 2^23 */
    int e = fexp - 126 - 9 + ((u & 0x7FFFFFu) > 0x600000u);
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* One element of a block with scale exponent e, quantized and dequantized:
 * what an MXFP8 GEMM reads. */
MOEC_HD float moec_mx_fq(float x, int e)
{
    return moec_e4m3_decode(moec_e4m3_encode(x * moec_mx_pow2(-e))) * moec_mx_pow2(e);
}

/* Quantizes and dequantizes one block of 32 elements x[0], x[stride], ...
 * into y (which may be x). n < 32: the block's last 32 - n elements are
 * zero padding (the end of an expert group), which leaves the amax, hence
 * the scale, unchanged; they are neither read nor written. */
MOEC_HD void moec_mx_fq_block(const float *x, float *y, long long stride, int n)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = x[i * stride] < 0.0f ? -x[i * stride] : x[i * stride];
        if (a > amax)
            amax = a;
    }
    int e = moec_mx_scale_exp(amax);
    for (int i = 0; i < n; i++)
        y[i * stride] = moec_mx_fq(x[i * stride], e);
}

#endif
