// fp8b_kernels.cu - test kernels for fp8b_check.cc (tests/codegen/fp8b_quant.test): the quantisers of
// codegen/fp8_block_fast.cuh (the fp8-block fast expert MLP) at fixed shapes, built for the CPU with emu.h
// by fp8b_run.sh, and the optimizer's kernels of tests/gpu/fast_mlp_fp8.moe's generated kernels.cu
// (FP8B_OPTIMIZER_CU: its optimizer section, which fp8b_run.sh cuts out) behind pointer-only wrappers. The CUDA vector types and intrinsics moe_fast.cuh and fp8_block_fast.cuh use, which
// emu.h does not provide, are defined here first.
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


#include "emu_sm90.h" // pack_bf16x2, for the fused SwiGLU epilogue
#include "mxfp8.cuh"
#include "prelude.cuh"
#include "gemm_sm90_sched.h"
#include "moe_fast_offsets.h"
#include "dswiglu.cuh" // moe_fast.cuh's dswiglu kernel names dswiglu1
#include "moe_fast.cuh"
#include "fp8_block_fast.cuh"

#define K256 extern "C" __global__ void __launch_bounds__(256)
#define K512 extern "C" __global__ void __launch_bounds__(512) /* the weight quantiser: WEIGHT_THREADS */

// the shapes (fp8b_check.cc has the same): 3 experts, R 300 graph rows, H 256, F 256; weights 2 x 256 x 384
constexpr int E = 3;
constexpr long long R = 300, H = 256, F = 256, RCAP = (R + 128 * E + 15) / 16 * 16;

K256 k_offsets(int *ofs, const int *splits) { moec::fast::offsets<E>(ofs, splits, R); }
K256 k_rows_x(unsigned char *q, unsigned char *sa, float *pdst, const float *x, const float *p, const int *ofs)
{
    moec::fp8b::quant_tiles<E, H>(q, sa, RCAP, nullptr, nullptr, moec::fp8b::GraphRows<E, H>{x}, pdst, p, ofs);
}
// the dispatch read through (fp8-block and MXFP8 since decision 64's follow-up): the token rows and the token of
// each expert-major row, inverted from a dispatch plan of one slot a token
K256 k_tokens(int *tok, const int *plan, const int *ofs) { moec::fp8b::token_of_rows<E, 1>(tok, plan, ofs, R); }
K256 k_both_x_tok(unsigned char *q, unsigned char *sa, unsigned char *ct, unsigned char *cts, float *pdst,
                  const float *xt, const int *tok, const float *p, const int *ofs)
{
    moec::fp8b::quant_tiles<E, H>(q, sa, RCAP, ct, cts, moec::fp8b::GraphRows<E, H>{xt, tok}, pdst, p, ofs);
}
K256 k_cols_x(unsigned char *ct, unsigned char *cts, const float *x, const int *ofs)
{
    moec::fp8b::quant_tiles<E, H>(nullptr, nullptr, RCAP, ct, cts, moec::fp8b::GraphRows<E, H>{x}, nullptr, nullptr,
                                  ofs);
}
K256 k_both_x(unsigned char *q, unsigned char *sa, unsigned char *ct, unsigned char *cts, float *pdst, const float *x,
              const float *p, const int *ofs)
{
    moec::fp8b::quant_tiles<E, H>(q, sa, RCAP, ct, cts, moec::fp8b::GraphRows<E, H>{x}, pdst, p, ofs);
}
K256 k_rows_a(unsigned char *q, unsigned char *sa, const unsigned short *h, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, F>(q, sa, RCAP, nullptr, nullptr, moec::fp8b::Swiglu<F>{h, pp}, nullptr, nullptr, ofs);
}
K256 k_cols_a(unsigned char *ct, unsigned char *cts, const unsigned short *h, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, F>(nullptr, nullptr, RCAP, ct, cts, moec::fp8b::Swiglu<F>{h, pp}, nullptr, nullptr, ofs);
}
K256 k_rows_dh(unsigned char *q, unsigned char *sa, const unsigned short *h, const unsigned short *da, const float *pp,
               const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(q, sa, RCAP, nullptr, nullptr, moec::fp8b::Dswiglu<F>{h, da, pp}, nullptr,
                                      nullptr, ofs);
}
K256 k_cols_dh(unsigned char *ct, unsigned char *cts, const unsigned short *h, const unsigned short *da,
               const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(nullptr, nullptr, RCAP, ct, cts, moec::fp8b::Dswiglu<F>{h, da, pp}, nullptr,
                                      nullptr, ofs);
}
K256 k_dprobs(float *dp, const unsigned short *h, const unsigned short *da, const int *ofs)
{
    moec::fp8b::dprobs<E, F>(dp, moec::fp8b::HBf16<F>{h}, da, ofs);
}
// fp8-block's E4M3 copy of h for the backward (decision 64): made from the bf16 h, read by the backward's sources
K256 k_rows_h(unsigned char *q, unsigned char *sa, const unsigned short *h, const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(q, sa, RCAP, nullptr, nullptr, moec::fp8b::Bf16Rows<2 * F>{h}, nullptr, nullptr,
                                      ofs);
}
using HQ = moec::fp8b::HE4m3<F>;
K256 k_rows_dh_q(unsigned char *q, unsigned char *sa, const unsigned char *hq, const unsigned char *hs,
                 const unsigned short *da, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(q, sa, RCAP, nullptr, nullptr, moec::fp8b::Dswiglu<F, HQ>{{hq, hs, RCAP}, da, pp},
                                      nullptr, nullptr, ofs);
}
K256 k_cols_dh_q(unsigned char *ct, unsigned char *cts, const unsigned char *hq, const unsigned char *hs,
                 const unsigned short *da, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(nullptr, nullptr, RCAP, ct, cts, moec::fp8b::Dswiglu<F, HQ>{{hq, hs, RCAP}, da, pp},
                                      nullptr, nullptr, ofs);
}
K256 k_cols_a_q(unsigned char *ct, unsigned char *cts, const unsigned char *hq, const unsigned char *hs, const float *pp,
                const int *ofs)
{
    moec::fp8b::quant_tiles<E, F>(nullptr, nullptr, RCAP, ct, cts, moec::fp8b::Swiglu<F, HQ>{{hq, hs, RCAP}, pp}, nullptr,
                                  nullptr, ofs);
}
K256 k_dprobs_q(float *dp, const unsigned char *hq, const unsigned char *hs, const unsigned short *da, const int *ofs)
{
    moec::fp8b::dprobs<E, F>(dp, HQ{hq, hs, RCAP}, da, ofs);
}
// decision 69: the forward's SwiGLU quantiser and h's copy in one pass over the bf16 h; the backward's dSwiGLU
// quantiser (rowwise and colwise in one launch) also writing dprobs' partials
K256 k_swiglu_h(unsigned char *aq, unsigned char *as, unsigned char *hq, unsigned char *hs, const unsigned short *h,
                const float *pp, const int *ofs)
{
    moec::fp8b::swiglu_h_tiles<E, F>(aq, as, hq, hs, h, pp, ofs, RCAP);
}
K256 k_dh_dp(unsigned char *q, unsigned char *sa, unsigned char *ct, unsigned char *cts, float *dpart,
            const unsigned char *hq, const unsigned char *hs, const unsigned short *da, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E, 2 * F>(q, sa, RCAP, ct, cts,
                                      moec::fp8b::Dswiglu<F, HQ>{{hq, hs, RCAP}, da, pp, dpart}, nullptr, nullptr, ofs);
}
K512 k_weight(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st, const float *w)
{
    moec::fp8b::quant_weight<2, 256, 384>(q, s, qt, st, w);
}
K512 k_weight_nt(unsigned char *q, unsigned char *s, const float *w)
{
    moec::fp8b::quant_weight<2, 256, 384>(q, s, nullptr, nullptr, w);
}

// The gate_up GEMM's fused SwiGLU epilogue (GemmFp8MGrouped's GLU, decision 57) against the separate quantiser
// k_rows_a2 (quant_tiles over Swiglu<F>, the kernel the plans launched before), with ragged groups of 0, 1, 127
// and 129 rows. k_glu_epi stands in for the GEMM's two consumer warpgroups: 256 threads per 128 x 128 tile of a
// (padded rows mb, a columns j), thread (warpgroup half, warp wq, lane) holding the m64n128 accumulator fragment
// of rows r = 64 half + 16 wq + lane / 4 and r + 8 at columns 8 c + 2 (lane % 4) + e of the gate block
// (d's columns 128 j ..) and the up block (F2 + 128 j ..), d [RCAP2, 2 F2] fp32 being the GEMM's accumulators. It
// writes h as the TMA-store epilogue rounds it (pack_bf16x2), takes the gate words as the GEMM reads them back
// from its staging buffers (those bf16 words) and calls SwigluQuantEpi::run as GemmFp8MGrouped does.
constexpr int E2 = 4;
constexpr long long R2 = 257, F2 = 256, RCAP2 = (R2 + 128 * E2 + 15) / 16 * 16;
K256 k_offsets2(int *ofs, const int *splits) { moec::fast::offsets<E2>(ofs, splits, R2); }
K256 k_glu_epi(unsigned short *h, unsigned char *q, unsigned char *sa, const float *d, const float *pp, const int *ofs)
{
    const long long tiles = (long long)(ofs[E2] / 128) * (F2 / 128);
    const int half = threadIdx.x / 128, wq = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const int r = half * 64 + wq * 16 + lane / 4;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int mb = (int)(t / (F2 / 128)), j = (int)(t % (F2 / 128)), pr = mb * 128 + r;
        unsigned gw[32];
        float up[64];
        for (int c = 0; c < 16; c++)
            for (int i = 0; i < 2; i++) {
                const long long row = pr + 8 * i, col = 128ll * j + 8 * c + 2 * (lane % 4);
                const float *dr = d + row * 2 * F2;
                gw[2 * c + i] = moec::sm90::pack_bf16x2(dr[col], dr[col + 1]);
                up[4 * c + 2 * i] = dr[F2 + col];
                up[4 * c + 2 * i + 1] = dr[F2 + col + 1];
                const unsigned uw = moec::sm90::pack_bf16x2(dr[F2 + col], dr[F2 + col + 1]);
                h[row * 2 * F2 + col] = (unsigned short)(gw[2 * c + i] & 0xffffu);
                h[row * 2 * F2 + col + 1] = (unsigned short)(gw[2 * c + i] >> 16);
                h[row * 2 * F2 + F2 + col] = (unsigned short)(uw & 0xffffu);
                h[row * 2 * F2 + F2 + col + 1] = (unsigned short)(uw >> 16);
            }
        moec::fp8b::SwigluQuantEpi<F2>::run(gw, up, pp, q, sa, RCAP2, pr, j, lane);
    }
}
K256 k_rows_a2(unsigned char *q, unsigned char *sa, const unsigned short *h, const float *pp, const int *ofs)
{
    moec::fp8b::quant_tiles<E2, F2>(q, sa, RCAP2, nullptr, nullptr, moec::fp8b::Swiglu<F2>{h, pp}, nullptr, nullptr,
                                    ofs);
}

// the optimizer's kernels as moec generated them for tests/gpu/fast_mlp_fp8.moe (w_down [4, 256, 256]): the
// fast AdamW, and the e4m3 copy's AdamW + quantiser and quantiser (decision 44); the emulator passes pointers
#include FP8B_OPTIMIZER_CU
K256 k_adamw(float *w, float *m, float *v, const float *g, const long long *n, const double *s, const double *wd)
{
    moec_adamw(w, m, v, g, *n, s, *wd);
}
K512 k_adamw_fp8b(float *w, float *m, float *v, const float *g, const long long *n, const double *s, const double *wd,
                  unsigned char *c)
{
    moec_adamw_fp8b_4x256x256(w, m, v, g, *n, s, *wd, c);
}
K512 k_fp8b_copy(unsigned char *c, const float *w) { moec_fp8b_copy_4x256x256(c, w); }
