// bf16path_kernels.cu - test kernels for bf16path_check.cc (tests/codegen/bf16_path.test): the fp32 paths of
// codegen/dense_fast.cuh that write RoPE's and RMSNorm's bf16 results (decision 58), which the emulated plans
// never reach (their tensors stay fp32: bf16 storage needs a tensor-core neighbour, decision 40). Built for the
// CPU with emu.h and emu_fast.h by bf16path_run.sh.
#include "mxfp8.cuh"
#include "prelude.cuh"
#include "dense_fast.cuh"

#define K256 extern "C" __global__ void __launch_bounds__(256)

// RoPE: 96 rows (2 x 48 positions), 4 heads of 32 (8 pairs x 2 groups of 16 a head), 4 heads a thread
constexpr long long R_ROWS = 96, R_S = 48;
constexpr int R_H = 4, R_HD = 32;
K256 rope_bf16(unsigned short *y, const unsigned short *x, const double *cs, const float *csf)
{
    moec::fast::rope_apply<R_S, R_H, R_HD, 4, false>(y, x, cs, csf, R_ROWS);
}
K256 rope_dx_bf16(unsigned short *y, const unsigned short *x, const double *cs, const float *csf)
{
    moec::fast::rope_apply<R_S, R_H, R_HD, 2, true>(y, x, cs, csf, R_ROWS);
}
K256 rope_f32_in_bf16_out(unsigned short *y, const float *x, const double *cs, const float *csf)
{
    moec::fast::rope_apply<R_S, R_H, R_HD, 1, false>(y, x, cs, csf, R_ROWS);
}
// each 8-pair group's interval test (1: the fp32 result stands), to count the groups the double path takes
K256 rope_groups_ok(int *ok, const unsigned short *x, const float *csf)
{
    constexpr int HALF = R_HD / 2, Q = HALF / 8;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < R_ROWS * R_H * Q;
         g += (long long)gridDim.x * blockDim.x) {
        const int q = (int)(g % Q), h = (int)(g / Q % R_H);
        const long long row = g / (Q * R_H), t0 = row % R_S * HALF + 8 * q, at = row * R_H * R_HD + h * R_HD + 8 * q;
        float a[8], b[8];
        moec::fast::ld8(x + at, a);
        moec::fast::ld8(x + at + HALF, b);
        bool good = true;
        unsigned o1, o2;
        for (int i = 0; i < 8; i += 2)
            moec::fast::rope_pair_bf16(a[i], b[i], a[i + 1], b[i + 1], csf[2 * (t0 + i)], csf[2 * (t0 + i) + 1],
                                       csf[2 * (t0 + i + 1)], csf[2 * (t0 + i + 1) + 1], o1, o2, good);
        ok[g] = good;
    }
}

// RMSNorm: 200 rows of 256 (32 threads a row, 1 group of 8 columns each), eps 1e-5
constexpr long long N_ROWS = 200;
constexpr int N_D = 256;
K256 rms_bf16(unsigned short *y, const float *x, const float *w, double *rinv)
{
    moec::fast::rmsnorm_rows<N_D, 32>(y, x, w, 1e-5, rinv, N_ROWS);
}
K256 rms_bf16_in(unsigned short *y, const unsigned short *x, const float *w, double *rinv)
{
    moec::fast::rmsnorm_rows<N_D, 32>(y, x, w, 1e-5, rinv, N_ROWS);
}
