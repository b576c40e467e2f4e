// tile_kernels.cu - test kernels for tile_check.cc (tests/codegen/tile.test):
// the register-blocked GEMM tiles of codegen/prelude.cuh and the GEMMs built
// on them, next to the reference 16 x 16 tile (moec::gemm_tile16) and the
// reference GEMMs written with it (the kernels before register blocking,
// kept here verbatim). Built for the CPU with emu.h by tile_run.sh.
#include "mxfp8.cuh"
#include "prelude.cuh"

#define K256 extern "C" __global__ void __launch_bounds__(256)

// ---- the reference GEMMs: 16 x 16 tiles of gemm_tile16
template <long long M, long long N, long long K, long long SAM, long long SAK, long long SBK, long long SBN>
__device__ void ref_gemm(float *C, const float *A, const float *B)
{
    constexpr long long TM = (M + 15) / 16, TN = (N + 15) / 16;
    __shared__ moec::GemmSmem sm;
    for (long long t = blockIdx.x; t < TM * TN; t += gridDim.x) {
        long long m0 = t / TN * 16, n0 = t % TN * 16;
        moec::gemm_tile16(C + m0 * N + n0, N, A + m0 * SAM, SAM, SAK, B + n0 * SBN, SBK, SBN,
                          M - m0 < 16 ? M - m0 : 16, N - n0 < 16 ? N - n0 : 16, K, sm);
    }
}

template <int E, long long R, long long K, long long N, long long SBE, long long SBK, long long SBN>
__device__ void ref_grouped_gemm(float *C, const float *A, const float *B, const int *splits)
{
    constexpr long long TN = (N + 15) / 16;
    __shared__ moec::Groups<E> gr;
    __shared__ moec::GemmSmem sm;
    moec::load_groups<E, 16>(gr, splits, R);
    for (long long t = blockIdx.x; t < gr.tile[E + 1] * TN; t += gridDim.x) {
        long long row0, rows, n0 = t % TN * 16, nlim = N - n0 < 16 ? N - n0 : 16;
        int e = moec::group_tile<E, 16>(gr, t / TN, &row0, &rows);
        if (e == E) {
            int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
            if (ty < rows && tx < nlim)
                C[(row0 + ty) * N + n0 + tx] = 0.0f;
            continue;
        }
        moec::gemm_tile16(C + row0 * N + n0, N, A + row0 * K, K, 1, B + e * SBE + n0 * SBN, SBK, SBN, rows, nlim, K,
                          sm);
    }
}

template <int E, long long R, long long M, long long N>
__device__ void ref_grouped_gemm_wgrad(float *dw, const float *dy, const float *x, const int *splits)
{
    constexpr long long TM = (M + 15) / 16, TN = (N + 15) / 16;
    __shared__ moec::Groups<E> gr;
    __shared__ moec::GemmSmem sm;
    moec::load_groups<E, 16>(gr, splits, R);
    for (long long t = blockIdx.x; t < E * TM * TN; t += gridDim.x) {
        long long e = t / (TM * TN), m0 = t / TN % TM * 16, n0 = t % TN * 16;
        moec::gemm_tile16(dw + e * M * N + m0 * N + n0, N, dy + gr.start[e] * M + m0, 1, M, x + gr.start[e] * N + n0,
                          N, 1, M - m0 < 16 ? M - m0 : 16, N - n0 < 16 ? N - n0 : 16, gr.start[e + 1] - gr.start[e],
                          sm);
    }
}

// ---- single tiles with run-time shapes and strides: p = M, N, K, sam, sak, sbk, sbn, ldc
K256 t_ref(float *C, const float *A, const float *B, const long long *p)
{
    __shared__ moec::GemmSmem sm;
    long long M = p[0], N = p[1], K = p[2], TM = (M + 15) / 16, TN = (N + 15) / 16;
    for (long long t = blockIdx.x; t < TM * TN; t += gridDim.x) {
        long long m0 = t / TN * 16, n0 = t % TN * 16;
        moec::gemm_tile16(C + m0 * p[7] + n0, p[7], A + m0 * p[3], p[3], p[4], B + n0 * p[6], p[5], p[6],
                          M - m0 < 16 ? M - m0 : 16, N - n0 < 16 ? N - n0 : 16, K, sm);
    }
}

template <int RM, int RN, int TY = 16>
__device__ void t_new(float *C, const float *A, const float *B, const long long *p)
{
    constexpr long long BM = TY * RM, BN = 256 / TY * RN;
    __shared__ moec::TileSmem<RM, RN, TY> sm;
    long long M = p[0], N = p[1], K = p[2], TM = (M + BM - 1) / BM, TN = (N + BN - 1) / BN;
    for (long long t = blockIdx.x; t < TM * TN; t += gridDim.x) {
        long long m0 = t / TN * BM, n0 = t % TN * BN;
        moec::gemm_tile<RM, RN, TY>(C + m0 * p[7] + n0, p[7], A + m0 * p[3], p[3], p[4], B + n0 * p[6], p[5], p[6],
                                M - m0 < BM ? M - m0 : BM, N - n0 < BN ? N - n0 : BN, K, sm);
    }
}
K256 t_44(float *C, const float *A, const float *B, const long long *p) { t_new<4, 4>(C, A, B, p); }
K256 t_14(float *C, const float *A, const float *B, const long long *p) { t_new<1, 4>(C, A, B, p); }
K256 t_22(float *C, const float *A, const float *B, const long long *p) { t_new<2, 2>(C, A, B, p); }
K256 t_41(float *C, const float *A, const float *B, const long long *p) { t_new<4, 1>(C, A, B, p); }
K256 t_11(float *C, const float *A, const float *B, const long long *p) { t_new<1, 1>(C, A, B, p); }
K256 t_424(float *C, const float *A, const float *B, const long long *p) { t_new<4, 2, 4>(C, A, B, p); }
K256 t_444(float *C, const float *A, const float *B, const long long *p) { t_new<4, 4, 4>(C, A, B, p); }
K256 t_248(float *C, const float *A, const float *B, const long long *p) { t_new<2, 4, 8>(C, A, B, p); }

// ---- moec::gemm in the three layouts the emitters use (linear, linear_dx, linear_dw), with each tile the
// emitters pick from (new_: the default 64 x 64, n32_: 32 x 32, n16_: 16 x 16 through gemm_tile16)
#define GEMM_PAIR(name, M, N, K, SAM, SAK, SBK, SBN)                                                                   \
    K256 new_##name(float *C, const float *A, const float *B) { moec::gemm<N, SAM, SAK, SBK, SBN>(C, A, B, M, K); }    \
    K256 n32_##name(float *C, const float *A, const float *B)                                                          \
    {                                                                                                                  \
        moec::gemm<N, SAM, SAK, SBK, SBN, 32>(C, A, B, M, K);                                                          \
    }                                                                                                                  \
    K256 n16_##name(float *C, const float *A, const float *B)                                                          \
    {                                                                                                                  \
        moec::gemm<N, SAM, SAK, SBK, SBN, 16>(C, A, B, M, K);                                                          \
    }                                                                                                                  \
    K256 ref_##name(float *C, const float *A, const float *B) { ref_gemm<M, N, K, SAM, SAK, SBK, SBN>(C, A, B); }
#define GEMM_CASES(s, M, N, K)                                                                                         \
    GEMM_PAIR(s##_fwd, M, N, K, K, 1, 1, K)                                                                            \
    GEMM_PAIR(s##_dx, M, N, K, K, 1, N, 1)                                                                             \
    GEMM_PAIR(s##_dw, M, N, K, 1, M, N, 1)
GEMM_CASES(g1, 100, 70, 17)
GEMM_CASES(g2, 65, 130, 100)
GEMM_CASES(g3, 1, 15, 1)
GEMM_CASES(g4, 128, 64, 15)
GEMM_CASES(g5, 17, 200, 64)
// shapes on both sides of the emitters' threshold (CG_GEMM_MIN_BLOCKS = 264 blocks): mixtral_tiny's [1024 x 64]
// (16 x 16 tiles: 16 blocks of 64 x 64), [600 x 480] (32 x 32: 80 of 64 x 64, 285 of 32 x 32), [1030 x 1000]
// (64 x 64: 272)
GEMM_CASES(g6, 1024, 64, 64)
GEMM_CASES(g7, 600, 480, 17)
GEMM_CASES(g8, 1030, 1000, 17)

// ---- grouped GEMMs (x [R, K] times w [E, N, K]; dx form: w [E, K, N]; wgrad) with run-time splits, each tile
// (the forward and dx forms through grouped_gemm_tiled, the tile at run time as the emitters give it)
#define GROUPED_T(p, s, E, R, K, N, T)                                                                                 \
    K256 p##_##s##_fwd(float *C, const float *A, const float *B, const int *sp)                                        \
    {                                                                                                                  \
        moec::grouped_gemm_tiled<E, K, N, N * K, 1, K>(C, A, B, sp, R, T);                                             \
    }                                                                                                                  \
    K256 p##_##s##_dx(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        moec::grouped_gemm_tiled<E, K, N, N * K, N, 1>(C, A, B, sp, R, T);                                             \
    }                                                                                                                  \
    K256 p##_##s##_dw(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        moec::grouped_gemm_wgrad<E, K, N, T>(C, A, B, sp, R);                                                          \
    }
#define GROUPED_CASES(s, E, R, K, N)                                                                                   \
    K256 new_##s##_fwd(float *C, const float *A, const float *B, const int *sp)                                        \
    {                                                                                                                  \
        moec::grouped_gemm_tiled<E, K, N, N * K, 1, K>(C, A, B, sp, R, 64);                                            \
    }                                                                                                                  \
    K256 ref_##s##_fwd(float *C, const float *A, const float *B, const int *sp)                                        \
    {                                                                                                                  \
        ref_grouped_gemm<E, R, K, N, N * K, 1, K>(C, A, B, sp);                                                        \
    }                                                                                                                  \
    K256 new_##s##_dx(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        moec::grouped_gemm_tiled<E, K, N, N * K, N, 1>(C, A, B, sp, R, 64);                                            \
    }                                                                                                                  \
    K256 ref_##s##_dx(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        ref_grouped_gemm<E, R, K, N, N * K, N, 1>(C, A, B, sp);                                                        \
    }                                                                                                                  \
    K256 new_##s##_dw(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        moec::grouped_gemm_wgrad<E, K, N>(C, A, B, sp, R);                                                             \
    }                                                                                                                  \
    K256 ref_##s##_dw(float *C, const float *A, const float *B, const int *sp)                                         \
    {                                                                                                                  \
        ref_grouped_gemm_wgrad<E, R, K, N>(C, A, B, sp);                                                               \
    }                                                                                                                  \
    GROUPED_T(n32, s, E, R, K, N, 32)                                                                                  \
    GROUPED_T(n16, s, E, R, K, N, 16)
GROUPED_CASES(q1, 4, 200, 70, 65)
GROUPED_CASES(q2, 3, 130, 17, 100)
// both sides of the threshold (forward and dx by the static bound on the row tiles, R / T + E + 1): q3's [1000 x 260]
// with E 4 takes 32 x 32 ((16 + 5) x 5 = 105 blocks of 64 x 64, (32 + 5) x 9 = 333 of 32 x 32), its wgrad
// 4 x [17 x 260] 16 x 16 (20 blocks of 64 x 64); q4's [1000 x 780] takes 64 x 64 ((16 + 5) x 13 = 273 blocks)
GROUPED_CASES(q3, 4, 1000, 17, 260)
GROUPED_CASES(q4, 4, 1000, 17, 780)

// ---- the fused MLP (bf16) against grouped_gemm on the same operands: E 3, R 100, H 70, F 40
constexpr int ME = 3;
constexpr long long MR = 100, MH = 70, MF = 40;
K256 mlp_fwd(float *y, float *h, float *a, const float *xs, const float *w1, const float *w2, const int *sp,
             const float *p)
{
    moec::grouped_mlp_fwd<ME, MH, MF, false>(y, h, a, nullptr, xs, w1, w2, sp, p, MR);
}
K256 mlp_bwd_rows(float *dxs, float *dp, float *h, float *a, float *da, float *dh, const float *dy, const float *xs,
                  const float *w1, const float *w2, const int *sp, const float *p)
{
    moec::grouped_mlp_bwd_rows<ME, MH, MF, false>(dxs, dp, h, a, da, dh, nullptr, nullptr, nullptr, dy, xs, w1, w1, w2,
                                                  sp, p, MR);
}
K256 mlp_h(float *h, const float *xs, const float *w1, const int *sp)
{
    moec::grouped_gemm<ME, MH, 2 * MF, 2 * MF * MH, 1, MH>(h, xs, w1, sp, MR);
}
K256 mlp_y(float *y, const float *a, const float *w2, const int *sp)
{
    moec::grouped_gemm<ME, MF, MH, MH * MF, 1, MF>(y, a, w2, sp, MR);
}
K256 mlp_da(float *da, const float *dy, const float *w2, const int *sp)
{
    moec::grouped_gemm<ME, MH, MF, MH * MF, MF, 1>(da, dy, w2, sp, MR);
}
K256 mlp_dxs(float *dxs, const float *dh, const float *w1, const int *sp)
{
    moec::grouped_gemm<ME, 2 * MF, MH, 2 * MF * MH, MH, 1>(dxs, dh, w1, sp, MR);
}
