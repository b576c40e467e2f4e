/* mxfp8.cuh - MXFP8 fake quantization for the generated kernels: E4M3
 * encoding (round to nearest even, saturation to +-448), E4M3 decoding, the
 * Transformer Engine scale rule, and one element's quantize-dequantize.
 *
 * Bit-exact with runtime/cpu/mxfp8.c (e4m3_from_float, e4m3_to_float,
 * mxfp8_scale_exponent with MXFP8_SCALE_TE, mxfp8_fake_quant): the same
 * integer arithmetic on the float's bits, and scaling by exact powers of two
 * (one IEEE multiply, which rounds exactly as ldexpf does). The file is
 * written in the common subset of C11 and CUDA C++: moec pastes it into
 * every kernels.cu, and tests/unit/test_codegen.c compiles it as C and checks
 * it against mxfp8.c. No includes: NVRTC compiles it without headers. */
#ifndef MOEC_MXFP8_CUH
#define MOEC_MXFP8_CUH

#ifdef __CUDACC__
#define MOEC_MX_FN __device__ __forceinline__
#define MOEC_MX_F2U(x) __float_as_uint(x)
#define MOEC_MX_U2F(u) __uint_as_float(u)
#else
#define MOEC_MX_FN static inline
#define MOEC_MX_F2U(x) moec_mx_f2u(x)
#define MOEC_MX_U2F(u) moec_mx_u2f(u)
static inline unsigned moec_mx_f2u(float x)
{
    union { float f; unsigned u; } v;
    v.f = x;
    return v.u;
}
static inline float moec_mx_u2f(unsigned u)
{
    union { float f; unsigned u; } v;
    v.u = u;
    return v.f;
}
#endif

/* 2^e exactly, for -149 <= e <= 127 (below -126 a float subnormal). */
MOEC_MX_FN float moec_mx_pow2(int e)
{
    return e >= -126 ? MOEC_MX_U2F((unsigned)(e + 127) << 23) : MOEC_MX_U2F(1u << (e + 149));
}

/* Float to E4M3 code (OCP E4M3FN): RNE, subnormals kept, |x| > 448 and
 * +-Inf saturate to +-448 (0x7E), NaN gives 0x7F with the sign. */
MOEC_MX_FN unsigned moec_e4m3_encode(float x)
{
    unsigned u = MOEC_MX_F2U(x);
    unsigned sign = (u >> 24) & 0x80u;
    unsigned a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7Fu;
    if (a > 0x43E00000u) /* 448.0f */
        return sign | 0x7Eu;
    int fexp = (int)(a >> 23);
    unsigned long long mant;
    int exp2;
    if (fexp == 0) {
        mant = a;
        exp2 = -149;
    } else {
        mant = (a & 0x7FFFFFu) | 0x800000u;
        exp2 = fexp - 150;
    }
    /* the quantum of the nearest code: 2^(floor(log2|x|) - 3), at least 2^-9 */
    int q = fexp == 0 ? -9 : fexp - 127 - 3;
    if (q < -9)
        q = -9;
    int shift = q - exp2;
    unsigned long long n;
    if (shift >= 25) {
        n = 0;
    } else {
        unsigned long long half = 1ull << (shift - 1);
        unsigned long long rem = mant & ((half << 1) - 1);
        n = mant >> shift;
        if (rem > half || (rem == half && (n & 1)))
            n++;
    }
    return sign | (unsigned)(8 * (q + 9) + (int)n);
}

/* E4M3 code to float, exact; 0x7F / 0xFF decode to NaN. */
MOEC_MX_FN float moec_e4m3_decode(unsigned code)
{
    unsigned sign = (code & 0x80u) << 24;
    int e = (int)((code >> 3) & 0xFu), m = (int)(code & 7u);
    if ((code & 0x7Fu) == 0x7Fu)
        return MOEC_MX_U2F(sign | 0x7FC00000u);
    float mag = e == 0 ? (float)m * moec_mx_pow2(-9) : (float)(8 + m) * moec_mx_pow2(e - 10);
    return MOEC_MX_U2F(sign | MOEC_MX_F2U(mag));
}

/* The block's scale exponent from its amax (>= 0, NaN ignored by the
 * caller): the smallest e with 448 * 2^e >= amax, clamped to [-127, 127];
 * amax 0 (or NaN) gives -127, an infinite amax 127. */
MOEC_MX_FN int moec_mx_scale_exp(float amax)
{
    if (!(amax > 0.0f))
        return -127;
    unsigned u = MOEC_MX_F2U(amax);
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
MOEC_MX_FN float moec_mx_fq(float x, int e)
{
    return moec_e4m3_decode(moec_e4m3_encode(x * moec_mx_pow2(-e))) * moec_mx_pow2(e);
}

/* Quantizes and dequantizes one block of 32 elements x[0], x[stride], ...
 * into y (which may be x). n < 32: the block's last 32 - n elements are
 * zero padding (the end of an expert group), which leaves the amax, hence
 * the scale, unchanged; they are neither read nor written. */
MOEC_MX_FN void moec_mx_fq_block(const float *x, float *y, long long stride, int n)
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
