/* emu_fast.h - what the plain-CUDA fast kernels (codegen/dense_fast.cuh: the skinny linears, the memory-bound
 * kernels of docs/decisions.md 47) use beyond emu.h. run.sh force-includes it when it emulates a --kernels fast
 * plan (one without sm_90a code); fp8b_kernels.cu defines its own for fp8b_run.sh. */
#ifndef MOEC_EMU_FAST_H
#define MOEC_EMU_FAST_H

#include "emu.h"

struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
inline float __int_as_float(int u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}
inline float __shfl_xor_sync(unsigned mask, float v, int m)
{
    (void)mask;
    emu_warp_put((double)v);
    emu_syncwarp();
    float r = (float)emu_warp_get((int)(threadIdx.x & 31) ^ m);
    emu_syncwarp();
    return r;
}
inline double __shfl_xor_sync(unsigned mask, double v, int m)
{
    (void)mask;
    emu_warp_put(v);
    emu_syncwarp();
    double r = emu_warp_get((int)(threadIdx.x & 31) ^ m);
    emu_syncwarp();
    return r;
}

#endif
