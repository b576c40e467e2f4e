/* e4m3.h - THE E4M3 encoder and decoder (OCP E4M3FN), one definition for
 * both sides: the CPU reference includes it (runtime/cpu/mxfp8.c), and the
 * Makefile pastes it ahead of codegen/mxfp8.cuh into the device library of
 * every generated kernels.cu, so the GPU encodes with the same lines.
 *
 * Written in the common subset of C11 and CUDA C++: functions marked
 * MOEC_HD, which is __host__ __device__ __forceinline__ under a CUDA
 * compiler (NVRTC, nvcc, the CPU emulator of tests/codegen/emu/) and
 * static inline in C (not static under CUDA: NVRTC warns about an
 * unreferenced static function, and the tests treat warnings as errors). No
 * includes: NVRTC compiles it without headers. Integer arithmetic on the
 * float's bits and exact power-of-two scaling only, so the result does not
 * depend on the floating-point environment: the same bits everywhere. The
 * rules are written out in docs/mxfp8.md. */
#ifndef MOEC_E4M3_H
#define MOEC_E4M3_H

#ifdef __CUDACC__
#define MOEC_HD __host__ __device__ __forceinline__
#else
#define MOEC_HD static inline
#endif

/* A float's bits and back: the device's intrinsics when compiling for the
 * GPU, a union elsewhere (C11 defines type punning through a union). */
MOEC_HD unsigned moec_mx_f2u(float x)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    union { float f; unsigned u; } v;
    v.f = x;
    return v.u;
#endif
}

MOEC_HD float moec_mx_u2f(unsigned u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    union { float f; unsigned u; } v;
    v.u = u;
    return v.f;
#endif
}

/* 2^e exactly, for -149 <= e <= 127 (below -126 a float subnormal). */
MOEC_HD float moec_mx_pow2(int e)
{
    return e >= -126 ? moec_mx_u2f((unsigned)(e + 127) << 23) : moec_mx_u2f(1u << (e + 149));
}

/* Float to E4M3 code: round to nearest even, subnormals kept, |x| > 448
 * and +-Inf saturate to +-448 (0x7E), NaN gives 0x7F with the sign.
 *
 * Code layout: s eeee mmm, bias 7. Exponent field 0 is subnormal
 * (m * 2^-9); otherwise (8 + m) * 2^(e - 10). Every finite code is thus an
 * integer n times a quantum 2^q with q = -9 for codes below 16 (subnormals
 * and the first binade share the quantum) and n in [8, 16) above, which
 * gives the encoding code = 8 * (q + 9) + n: n == 16 after rounding up
 * lands on the next binade's first code by itself. */
MOEC_HD unsigned moec_e4m3_encode(float x)
{
    unsigned u = moec_mx_f2u(x);
    unsigned sign = (u >> 24) & 0x80u;
    unsigned a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
        return sign | 0x7Fu;
    /* everything above 448 (the next code, 480, would be NaN in E4M3FN)
     * and +-Inf become +-448; 0x43E00000 is 448.0f */
    if (a > 0x43E00000u)
        return sign | 0x7Eu;
    /* |x| = mant * 2^exp2 exactly, mant < 2^24 */
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
    /* the quantum of the code nearest |x|: 2^(floor(log2|x|) - 3), but no
     * smaller than the subnormal quantum 2^-9 (float subnormals, fexp == 0,
     * are far below it) */
    int q = fexp == 0 ? -9 : fexp - 127 - 3;
    if (q < -9)
        q = -9;
    int shift = q - exp2; /* >= 20: mant has 24 bits and q >= floor(log2|x|) - 3 */
    unsigned long long n;
    if (shift >= 25) {
        n = 0; /* |x| < 2^(q-1): below half a quantum */
    } else {
        unsigned long long half = 1ull << (shift - 1);
        unsigned long long rem = mant & ((half << 1) - 1);
        n = mant >> shift;
        if (rem > half || (rem == half && (n & 1)))
            n++;
    }
    /* |x| <= 448 here, so the code cannot pass 0x7E */
    return sign | (unsigned)(8 * (q + 9) + (int)n);
}

/* Two floats to two E4M3 codes, a's in bits 0-7 and b's in bits 8-15: the
 * same codes as moec_e4m3_encode(a) | moec_e4m3_encode(b) << 8. On a GPU
 * with FP8 conversions (sm_89 and later) one cvt.rn.satfinite.e4m3x2.f32
 * does both: round to nearest even with subnormals, finite values and
 * +-Inf beyond 448 clamped to +-448 (satfinite), which is the rule above;
 * only NaN may differ (the instruction's NaN need not carry the sign), so a
 * NaN input is given moec_e4m3_encode's code. Checked against the integer
 * encoder on all 2^32 float bit patterns on the H200
 * (tests/gpu/e4m3_check.c). The integer encoder is ~40 instructions with
 * branches a value; this is one instruction for two, which is what takes
 * the quantisers from compute-bound towards memory-bound
 * (docs/fp8-block.md). Elsewhere (the CPU, the emulator of
 * tests/codegen/emu/, older GPUs) it is the integer encoder. */
MOEC_HD unsigned moec_e4m3_encode2(float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
    unsigned lo = r & 0xFFu, hi = (unsigned)r >> 8;
    if (a != a)
        lo = ((moec_mx_f2u(a) >> 24) & 0x80u) | 0x7Fu;
    if (b != b)
        hi = ((moec_mx_f2u(b) >> 24) & 0x80u) | 0x7Fu;
    return lo | hi << 8;
#else
    return moec_e4m3_encode(a) | moec_e4m3_encode(b) << 8;
#endif
}

/* E4M3 code (the low 8 bits) to float, exact; 0x7F / 0xFF decode to NaN. */
MOEC_HD float moec_e4m3_decode(unsigned code)
{
    unsigned sign = (code & 0x80u) << 24;
    int e = (int)((code >> 3) & 0xFu), m = (int)(code & 7u);
    if ((code & 0x7Fu) == 0x7Fu)
        return moec_mx_u2f(sign | 0x7FC00000u);
    float mag = e == 0 ? (float)m * moec_mx_pow2(-9) : (float)(8 + m) * moec_mx_pow2(e - 10);
    return moec_mx_u2f(sign | moec_mx_f2u(mag));
}

/* Two E4M3 codes (bits 0-7 and 8-15) to floats, exactly as moec_e4m3_decode:
 * on sm_89 and later one cvt.rn.f16x2.e4m3x2 (every E4M3 value is exact in
 * f16) and two exact f16 -> f32 conversions, NaN codes given
 * moec_e4m3_decode's NaN; elsewhere moec_e4m3_decode twice. Checked on all
 * 2^16 code pairs on the H200 (tests/gpu/e4m3_check.c). */
MOEC_HD void moec_e4m3_decode2(unsigned codes, float *lo, float *hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned r;
    unsigned short c16 = (unsigned short)codes, h0, h1;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(c16));
    h0 = (unsigned short)(r & 0xFFFFu);
    h1 = (unsigned short)(r >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(*lo) : "h"(h0));
    asm("cvt.f32.f16 %0, %1;" : "=f"(*hi) : "h"(h1));
    if ((codes & 0x7Fu) == 0x7Fu)
        *lo = moec_mx_u2f(((codes & 0x80u) << 24) | 0x7FC00000u);
    if ((codes & 0x7F00u) == 0x7F00u)
        *hi = moec_mx_u2f(((codes & 0x8000u) << 16) | 0x7FC00000u);
#else
    *lo = moec_e4m3_decode(codes & 0xFFu);
    *hi = moec_e4m3_decode((codes >> 8) & 0xFFu);
#endif
}

#endif
