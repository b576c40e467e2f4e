// mx_kernels.cu - test kernels for mx_check.cc (tests/codegen/mx_quant.test): the MXFP8 quantisers of
// codegen/fp8_block_fast.cuh (namespace moec::mx8, the MXFP8 fast expert MLP, decision 53) at fixed shapes, built
// for the CPU with emu.h by mx_run.sh, and the optimizer's kernels of tests/gpu/fast_mlp_fp8.moe at mxfp8
// (MX_OPTIMIZER_CU: its generated kernels.cu's optimizer section, which mx_run.sh cuts out). The CUDA vector types and intrinsics the device code uses, which emu.h does
// not provide, are defined here first (as fp8b_kernels.cu).
#include <math.h>

struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float __expf(float x) { return expf(x); } /* the host check computes with expf too */
inline float __shfl_xor_sync(unsigned mask, float v, int m)
{
    (void)mask;
    emu_warp_put((double)v);
    emu_syncwarp();
    float r = (float)emu_warp_get((int)(threadIdx.x & 31) ^ m);
    emu_syncwarp();
    return r;
}

#include "emu_sm90.h" // pack_bf16x2, which fp8_block_fast.cuh's fused SwiGLU epilogue names
#include "mxfp8.cuh"
#include "prelude.cuh"
#include "gemm_sm90_sched.h"
#include "moe_fast_offsets.h"
#include "dswiglu.cuh" // moe_fast.cuh's dswiglu kernel names dswiglu1
#include "moe_fast.cuh"
#include "fp8_block_fast.cuh"

#define K256 extern "C" __global__ void __launch_bounds__(256)
#define K512 extern "C" __global__ void __launch_bounds__(512) /* the optimizer's weight quantiser */

// the shapes (mx_check.cc has the same): 3 experts, R 300 graph rows, H 256, F 256; weights 2 x 256 x 384
constexpr int E = 3;
constexpr long long R = 300, H = 256, F = 256, RCAP = (R + 128 * E + 15) / 16 * 16;

K256 k_offsets(int *ofs, const int *splits) { moec::fast::offsets<E>(ofs, splits, R); }
K256 k_rows_x(unsigned char *q, unsigned char *sa, float *pdst, const float *x, const float *p, const int *ofs)
{
    moec::mx8::quant_tiles<E, H>(q, sa, RCAP, nullptr, moec::fp8b::GraphRows<E, H>{x}, pdst, p, ofs);
}
K256 k_cols_x(unsigned short *cw, const float *x, const int *ofs)
{
    moec::mx8::quant_tiles<E, H>(nullptr, nullptr, RCAP, cw, moec::fp8b::GraphRows<E, H>{x}, nullptr, nullptr, ofs);
}
K256 k_both_x(unsigned char *q, unsigned char *sa, unsigned short *cw, float *pdst, const float *x, const float *p,
              const int *ofs)
{
    moec::mx8::quant_tiles<E, H>(q, sa, RCAP, cw, moec::fp8b::GraphRows<E, H>{x}, pdst, p, ofs);
}
K256 k_both_a(unsigned char *q, unsigned char *sa, unsigned short *cw, const unsigned short *h, const float *pp,
              const int *ofs)
{
    moec::mx8::quant_tiles<E, F>(q, sa, RCAP, cw, moec::fp8b::Swiglu<F>{h, pp}, nullptr, nullptr, ofs);
}
K256 k_both_dh(unsigned char *q, unsigned char *sa, unsigned short *cw, const unsigned short *h,
               const unsigned short *da, const float *pp, const int *ofs)
{
    moec::mx8::quant_tiles<E, 2 * F>(q, sa, RCAP, cw, moec::fp8b::Dswiglu<F>{h, da, pp}, nullptr, nullptr, ofs);
}
// MXFP8's copy of h for the backward (decision 64): made from the bf16 h, read by the backward's sources (HMx)
K256 k_rows_h(unsigned char *q, unsigned char *sa, const unsigned short *h, const int *ofs)
{
    moec::mx8::quant_tiles<E, 2 * F>(q, sa, RCAP, nullptr, moec::fp8b::Bf16Rows<2 * F>{h}, nullptr, nullptr, ofs);
}
using HQ = moec::fp8b::HMx<F>;
K256 k_both_dh_q(unsigned char *q, unsigned char *sa, unsigned short *cw, const unsigned char *hq,
                 const unsigned char *hs, const unsigned short *da, const float *pp, const int *ofs)
{
    moec::mx8::quant_tiles<E, 2 * F>(q, sa, RCAP, cw, moec::fp8b::Dswiglu<F, HQ>{{hq, hs, RCAP}, da, pp}, nullptr,
                                     nullptr, ofs);
}
K256 k_cols_a_q(unsigned short *cw, const unsigned char *hq, const unsigned char *hs, const float *pp, const int *ofs)
{
    moec::mx8::quant_tiles<E, F>(nullptr, nullptr, RCAP, cw, moec::fp8b::Swiglu<F, HQ>{{hq, hs, RCAP}, pp}, nullptr,
                                 nullptr, ofs);
}
K256 k_cols_a(unsigned short *cw, const unsigned short *h, const float *pp, const int *ofs)
{
    moec::mx8::quant_tiles<E, F>(nullptr, nullptr, RCAP, cw, moec::fp8b::Swiglu<F>{h, pp}, nullptr, nullptr, ofs);
}
// decision 69: the dSwiGLU quantiser writing dprobs' per-128-column partials
K256 k_both_dh_dp(unsigned char *q, unsigned char *sa, unsigned short *cw, float *dpart, const unsigned char *hq,
                  const unsigned char *hs, const unsigned short *da, const float *pp, const int *ofs)
{
    moec::mx8::quant_tiles<E, 2 * F>(q, sa, RCAP, cw, moec::fp8b::Dswiglu<F, HQ>{{hq, hs, RCAP}, da, pp, dpart}, nullptr,
                                     nullptr, ofs);
}
K256 k_dprobs(float *dp, const unsigned short *h, const unsigned short *da, const int *ofs)
{
    moec::fp8b::dprobs<E, F>(dp, moec::fp8b::HBf16<F>{h}, da, ofs);
}
K256 k_dprobs_q(float *dp, const unsigned char *hq, const unsigned char *hs, const unsigned short *da, const int *ofs)
{
    moec::fp8b::dprobs<E, F>(dp, HQ{hq, hs, RCAP}, da, ofs);
}
K256 k_weight_rows(unsigned char *q, unsigned char *s, const float *w) { moec::mx8::weight_rows<2, 256, 384>(q, s, w); }
K256 k_weight_cols(unsigned char *qt, unsigned char *st, const float *w)
{
    moec::mx8::weight_cols<2, 256, 384>(qt, st, w);
}
// both copies in one read (the optimizer's quantiser, decision 55)
K512 k_weight_both(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st, const float *w)
{
    moec::mx8::quant_weight<2, 256, 384>(q, s, qt, st, w);
}

// the optimizer's kernels as moec generated them for tests/gpu/fast_mlp_fp8.moe at --precision mxfp8 (w_down
// [4, 256, 256]): the fast AdamW, and the MXFP8 copy's AdamW + quantiser and quantiser (decision 55); the emulator
// passes pointers
#include MX_OPTIMIZER_CU
K256 k_adamw(float *w, float *m, float *v, const float *g, const long long *n, const double *s, const double *wd)
{
    moec_adamw(w, m, v, g, *n, s, *wd);
}
K512 k_adamw_mx8(float *w, float *m, float *v, const float *g, const long long *n, const double *s, const double *wd,
                 unsigned char *c)
{
    moec_adamw_mx8_4x256x256(w, m, v, g, *n, s, *wd, c);
}
K512 k_mx8_copy(unsigned char *c, const float *w) { moec_mx8_copy_4x256x256(c, w); }
