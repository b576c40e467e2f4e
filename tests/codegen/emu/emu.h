/* emu.h - just enough of CUDA to run moec's generated kernels.cu on the CPU,
 * for tests (tests/codegen/emu/). A launch runs the grid's blocks one after
 * another, each block's threads as coroutines (ucontext) on one OS thread
 * that switch at barriers: __syncthreads waits for the whole block, and
 * __shared__ memory (static storage here) is the block's; warp operations
 * (__shfl_down_sync, __match_any_sync) exchange values through per-warp
 * slots between two warp barriers. Slow and exact: every kernel moec emits
 * is written with grid-stride loops, so the emulator may run fewer blocks
 * than the plan says without changing a result. Not a general CUDA
 * emulator: it knows what kernels.cu uses. */
#ifndef MOEC_EMU_H
#define MOEC_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define __CUDACC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct emu_dim3 {
    unsigned x, y, z;
};

extern emu_dim3 threadIdx, blockIdx;  /* the running coroutine's */
extern emu_dim3 blockDim, gridDim;

void emu_syncthreads(void);
void emu_syncwarp(void);
void emu_warp_put(double v);       /* this lane's slot */
double emu_warp_get(int lane);     /* another lane's slot */

inline void __syncthreads(void) { emu_syncthreads(); }

inline double __shfl_down_sync(unsigned mask, double v, int delta)
{
    (void)mask;
    int lane = (int)(threadIdx.x & 31);
    emu_warp_put(v);
    emu_syncwarp();
    double r = lane + delta < 32 ? emu_warp_get(lane + delta) : v;
    emu_syncwarp();
    return r;
}

inline unsigned __match_any_sync(unsigned mask, int v)
{
    (void)mask;
    emu_warp_put((double)v);
    emu_syncwarp();
    unsigned m = 0;
    for (int l = 0; l < 32; l++)
        if (emu_warp_get(l) == (double)v)
            m |= 1u << l;
    emu_syncwarp();
    return m;
}

/* the GEMM tiles' vector shared-memory loads */
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
/* one rounding, as the GPU's fma.rn.f32 (fmaf is exact whatever the
 * contraction setting) */
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
/* the explicitly rounded operations (never contracted on the GPU; the emulator builds with -ffp-contract=off) */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
/* the GPU's is rcp.approx (within 1 ulp) times a: a stand-in, for code the emulator compiles but whose bits no
 * emulator check compares with the GPU's (codegen/dswiglu.cuh) */
inline float __fdividef(float a, float b) { return a / b; }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
[[noreturn]] inline void __trap(void) { abort(); }

inline unsigned __float_as_uint(float x)
{
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
inline float __uint_as_float(unsigned u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}
inline double __longlong_as_double(long long u)
{
    double x;
    memcpy(&x, &u, 8);
    return x;
}
/* compiled with -ffp-contract=off, so these round as CUDA's *_rn do */
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }

#endif
