/* moe_fast_offsets.h - the padded group offsets of the fast grouped MLP (codegen/cuda_moe_fast.c,
 * docs/kernels-sm90.md), written once for both sides: NVRTC pastes it into a fast plan's kernels.cu
 * (the offsets kernel runs it on the device, no host sync) and C includes it
 * (tests/unit/test_codegen.c checks it on the CPU). Plain integer code, no headers, no state.
 *
 * The graph's rows are grouped: group g (an expert) holds rows [start[g], start[g+1]) of xs with
 * start[g] = splits[0] + ... + splits[g-1]; rows from start[E] to R are padding (expert parallelism's
 * capacity) and produce zeros. The sm_90a GEMMs want every group to start at a multiple of 128
 * (BLOCK_M): padded[0] = 0, padded[g+1] = padded[g] + splits[g] rounded up to 128. Then
 * padded[E] <= R + 127 E, so a buffer of R + 128 E rows (the static bound the workspaces use) holds
 * every group. Returns 0, or -1 for a negative split or splits adding up past R (the kernel stops:
 * the CPU backend dies there too). */
#ifndef MOEC_MOE_FAST_OFFSETS_H
#define MOEC_MOE_FAST_OFFSETS_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MOEC_FAST_FN inline __host__ __device__
#else
#define MOEC_FAST_FN static inline
#endif

enum { MOEC_FAST_BLOCK_M = 128 };

/* padded [E + 1], start [E + 1] */
MOEC_FAST_FN int moec_fast_offsets(const int *splits, int E, long long R, int *padded, int *start)
{
    long long s = 0, p = 0;
    padded[0] = 0;
    start[0] = 0;
    for (int g = 0; g < E; g++) {
        long long c = splits[g];
        if (c < 0 || s + c > R)
            return -1;
        s += c;
        p += (c + MOEC_FAST_BLOCK_M - 1) / MOEC_FAST_BLOCK_M * MOEC_FAST_BLOCK_M;
        start[g + 1] = (int)s;
        padded[g + 1] = (int)p;
    }
    return 0;
}

/* The rows the padded buffers need at most: R + 128 E. */
MOEC_FAST_FN long long moec_fast_rows_cap(long long R, int E) { return R + (long long)MOEC_FAST_BLOCK_M * E; }

#endif
