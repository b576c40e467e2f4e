/* dense_fast.cuh - the fast (--kernels fast) dense kernels that need no sm_90a feature: plain CUDA,
 * pasted into a plan's kernels.cu only when a node uses them (codegen/cuda_dense.c skinny_linear).
 * The Makefile turns it into the C string cuda_prelude_dense_fast. */
namespace moec {
namespace fast {

/* ---- skinny dense GEMMs: a linear with few outputs (the router: N = the expert count; a small vocabulary's lm_head:
 * at most 48) and
 * its gradients, which the reference's 16 x 16 tiles run on a handful of blocks. Memory-bound: each
 * reads x (or writes dx) once, 16 bytes per thread; fp32 sums in a fixed order (warp butterflies, fixed
 * chunk partials): deterministic, a reassociation of the reference's sums. K % 128 == 0. */

/* y [rows, N] = x [rows, K] . w [N, K]^T: RW rows per warp (w's values serve RW rows), each lane 4
 * consecutive k of every 128, then a butterfly per output. w passes through shared memory KT columns at a
 * time (N KT floats, at most 32 KB; decision 52): read from global memory in the k loop, its loads' latency
 * (an L1 that x's stream evicts w from) stood between every load of x and its multiply-adds. The same
 * multiply-adds in the same order as reading w from global memory. KT % 128 == 0, K % KT == 0. */
template <int N, long long K, int RW, int KT>
__device__ void skinny_linear(float *y, const float *x, const float *w, long long rows)
{
    static_assert(KT % 128 == 0 && K % KT == 0, "skinny_linear: KT");
    __shared__ float4 sw[N * (KT / 4)];
    const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
    /* the loop's bounds are the block's (every thread reaches the barriers) */
    for (long long b0 = (long long)blockIdx.x * warps * RW; b0 < rows; b0 += (long long)gridDim.x * warps * RW) {
        const long long r0 = b0 + (long long)(threadIdx.x / 32) * RW;
        float acc[RW][N];
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++)
                acc[i][n] = 0.0f;
        for (long long k0 = 0; k0 < K; k0 += KT) {
            __syncthreads(); /* the previous tile is read */
            /* the tile's loads 2 at a time in flight (a load, its store, the next load: a latency each) */
            for (int i0 = threadIdx.x; i0 < N * (KT / 4); i0 += 2 * blockDim.x) {
                float4 t[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int i = i0 + u * (int)blockDim.x;
                    if (i < N * (KT / 4))
                        t[u] = *(const float4 *)(w + (long long)(i / (KT / 4)) * K + k0 + 4 * (i % (KT / 4)));
                }
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int i = i0 + u * (int)blockDim.x;
                    if (i < N * (KT / 4))
                        sw[i] = t[u];
                }
            }
            __syncthreads();
            for (int kq = lane; kq < KT / 4; kq += 32) {
                const long long k = k0 + 4 * kq;
                float4 xv[RW];
#pragma unroll
                for (int i = 0; i < RW; i++)
                    xv[i] = r0 + i < rows ? *(const float4 *)(x + (r0 + i) * K + k) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int n = 0; n < N; n++) {
                    const float4 wv = sw[n * (KT / 4) + kq];
#pragma unroll
                    for (int i = 0; i < RW; i++)
                        acc[i][n] += xv[i].x * wv.x + xv[i].y * wv.y + xv[i].z * wv.z + xv[i].w * wv.w;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);
                if (lane == (n & 31) && r0 + i < rows) /* every lane holds the sum after the butterfly */
                    y[(r0 + i) * N + n] = acc[i][n];
            }
    }
}

/* The same product with all of w resident in shared memory (N K floats, dynamic shared memory; decision 58):
 * loaded once a block, so the row loop has no barrier and no reload of w (the tiled kernel above stopped every
 * warp of a block at two barriers per tile and reloaded w's 128 KB from L2 for each group of rows: 65% of HBM
 * at the Mixtral router). One block an SM of 16 warps; RW rows a warp, each lane 4 consecutive k of every 128;
 * x's loads three steps of 128 columns deep (two in flight while the third is multiplied: 8 KB a warp). The
 * same multiply-adds in the same order as skinny_linear (k ascending per lane, then the same butterfly): the
 * same results. K % 128 == 0. */
template <int N, long long K, int RW>
__device__ void skinny_linear_resident(float *y, const float *x, const float *w, long long rows)
{
    static_assert(K % 128 == 0, "skinny_linear_resident: K % 128");
    constexpr int STEPS = (int)(K / 128), KQ = (int)(K / 4);
#ifdef __CUDA_ARCH__
    extern __shared__ float4 sw[]; /* [N][K / 4] */
#else
    __shared__ float4 sw[N * KQ]; /* the emulator's shared memory is static */
#endif
    /* w, 16 loads in flight a thread */
    for (int i0 = threadIdx.x; i0 < N * KQ; i0 += 16 * (int)blockDim.x) {
        float4 t[16];
#pragma unroll
        for (int u = 0; u < 16; u++)
            if (i0 + u * (int)blockDim.x < N * KQ)
                t[u] = ((const float4 *)w)[i0 + u * (int)blockDim.x];
#pragma unroll
        for (int u = 0; u < 16; u++)
            if (i0 + u * (int)blockDim.x < N * KQ)
                sw[i0 + u * (int)blockDim.x] = t[u];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
    /* the loop's bounds are the block's (uniform: the butterfly's shuffles need no divergence handling) */
    for (long long b0 = (long long)blockIdx.x * warps * RW; b0 < rows; b0 += (long long)gridDim.x * warps * RW) {
        const long long r0 = b0 + (long long)(threadIdx.x / 32) * RW;
        float acc[RW][N];
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++)
                acc[i][n] = 0.0f;
        float4 xa[RW], xb[RW], xc[RW];
        /* past the last step a load repeats it (no branch around the loads, so the compiler keeps them early) */
        auto load = [&](float4 (&b)[RW], int st) {
            const int sc = st < STEPS ? st : STEPS - 1;
#pragma unroll
            for (int i = 0; i < RW; i++)
                b[i] = r0 + i < rows ? *(const float4 *)(x + (r0 + i) * K + 4 * (32 * sc + lane))
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
        };
        auto mac = [&](const float4 (&b)[RW], int st) {
            if (st < STEPS)
#pragma unroll
                for (int n = 0; n < N; n++) {
                    const float4 wv = sw[n * KQ + 32 * st + lane];
#pragma unroll
                    for (int i = 0; i < RW; i++)
                        acc[i][n] += b[i].x * wv.x + b[i].y * wv.y + b[i].z * wv.z + b[i].w * wv.w;
                }
        };
        load(xa, 0);
        load(xb, 1);
        for (int st = 0; st < STEPS; st += 3) {
            load(xc, st + 2);
            mac(xa, st);
            load(xa, st + 3);
            mac(xb, st + 1);
            load(xb, st + 4);
            mac(xc, st + 2);
        }
#pragma unroll
        for (int i = 0; i < RW; i++)
#pragma unroll
            for (int n = 0; n < N; n++) {
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    acc[i][n] += __shfl_xor_sync(0xffffffffu, acc[i][n], o);
                if (lane == (n & 31) && r0 + i < rows) /* every lane holds the sum after the butterfly */
                    y[(r0 + i) * N + n] = acc[i][n];
            }
    }
}

/* a 16-byte store (p 16-byte aligned). On the GPU an explicit st.global.v4.f32: written as a float4 assignment,
 * NVRTC 13.0 split skinny_linear_dx's into four 4-byte stores (STG.E; each warp store a quarter of every 32-byte
 * sector it touches; decision 58) */
__device__ __forceinline__ void st4(float *p, const float4 &v)
{
#ifdef __CUDA_ARCH__
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
#else
    *(float4 *)p = v;
#endif
}

/* dx [rows, K] = dy [rows, N] . w [N, K]: each thread 4 consecutive k (w's 4N values in registers), a
 * block's rows 64 at a time (dy through shared memory). TB threads per block (K % (4 TB) == 0);
 * grid = row chunks x K / (4 TB). */
template <int N, long long K, int TB>
__device__ void skinny_linear_dx(float *dx, const float *dy, const float *w, long long rows)
{
    __shared__ float sdy[64 * N];
    constexpr long long SLABS = K / (4 * TB);
    /* the emitted grid is SLABS x (blocks a slab); a grid of fewer than SLABS blocks (the emulator's --grid-cap)
     * takes the slabs in turn, each over all rows */
    const bool full = gridDim.x >= SLABS;
    const long long per = full ? gridDim.x / SLABS : 1;
    for (long long sl = full ? blockIdx.x % SLABS : blockIdx.x; sl < SLABS; sl += full ? SLABS : gridDim.x) {
        const long long k = 4 * (sl * TB + threadIdx.x);
        float4 wv[N];
#pragma unroll
        for (int n = 0; n < N; n++)
            wv[n] = *(const float4 *)(w + n * K + k);
        for (long long r0 = (full ? blockIdx.x / SLABS : 0) * 64; r0 < rows; r0 += per * 64) {
            __syncthreads();
            for (int i = threadIdx.x; i < 64 * N; i += blockDim.x)
                sdy[i] = r0 + i / N < rows ? dy[r0 * N + i] : 0.0f;
            __syncthreads();
            auto row = [&](int i) {
                float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int n = 0; n < N; n++) {
                    const float d = sdy[i * N + n];
                    o.x += d * wv[n].x;
                    o.y += d * wv[n].y;
                    o.z += d * wv[n].z;
                    o.w += d * wv[n].w;
                }
                st4(dx + (r0 + i) * K + k, o);
            };
            /* the rows' loop as NVRTC compiled it when the row count was a template argument (registers, tools/
             * sass.sh): at 8 outputs or fewer unrolled by 2 (Mixtral's router), else not */
            if constexpr (N <= 8) {
                const int nr = rows - r0 < 64 ? (int)(rows - r0) : 64;
#pragma unroll 2
                for (int i = 0; i < nr; i++)
                    row(i);
            } else {
                for (int i = 0; i < 64 && r0 + i < rows; i++)
                    row(i);
            }
        }
    }
}

/* dw [N, K] = dy [rows, N]^T . x [rows, K], step 1 of 2: block (chunk c, slab s) sums the rows
 * [c ch, (c + 1) ch) for 4 columns per thread into part [c][N][K]. TB threads per block;
 * grid = chunks x K / (4 TB). */
template <int N, long long K, int TB, int U>
__device__ void skinny_linear_dw_part(float *part, const float *dy, const float *x, long long rows, long long ch)
{
    static_assert(64 % U == 0, "skinny_linear_dw_part: U divides 64");
    __shared__ float sdy[64 * N];
    constexpr long long SLABS = K / (4 * TB);
    const long long chunks = (rows + ch - 1) / ch;
    /* grid-stride over the (chunk, slab) items, so that fewer blocks give the same result (the emulator) */
    for (long long b = blockIdx.x; b < chunks * SLABS; b += gridDim.x) {
        const long long c = b / SLABS, k = 4 * ((b % SLABS) * TB + threadIdx.x);
        float4 acc[N];
#pragma unroll
        for (int n = 0; n < N; n++)
            acc[n] = make_float4(0.f, 0.f, 0.f, 0.f);
        const long long end = (c + 1) * ch < rows ? (c + 1) * ch : rows;
        for (long long r0 = c * ch; r0 < end; r0 += 64) {
            __syncthreads();
            for (int i = threadIdx.x; i < 64 * N; i += blockDim.x)
                sdy[i] = r0 + i / N < end ? dy[r0 * N + i] : 0.0f;
            __syncthreads();
            /* U rows' loads in flight (decision 52), the next U rows' issued before these U rows' multiply-adds
             * (decision 58: two buffers, so a warp's loads stay in flight while it computes); the multiply-adds
             * in row order as one row at a time. A row past the sub-chunk loads row r0 again (no branch around
             * the loads) and adds nothing. */
            const int nr = end - r0 < 64 ? (int)(end - r0) : 64;
            float4 xa[U], xb[U];
            auto load = [&](float4 (&b)[U], int i) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    b[u] = *(const float4 *)(x + (r0 + (i + u < nr ? i + u : 0)) * K + k);
            };
            auto mac = [&](const float4 (&b)[U], int i) {
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (i + u < nr) {
#pragma unroll
                        for (int n = 0; n < N; n++) {
                            const float d = sdy[(i + u) * N + n];
                            acc[n].x += d * b[u].x;
                            acc[n].y += d * b[u].y;
                            acc[n].z += d * b[u].z;
                            acc[n].w += d * b[u].w;
                        }
                    }
            };
            load(xa, 0);
            for (int i = 0; i < nr; i += 2 * U) {
                load(xb, i + U);
                mac(xa, i);
                load(xa, i + 2 * U);
                mac(xb, i + U);
            }
        }
#pragma unroll
        for (int n = 0; n < N; n++)
            *(float4 *)(part + (c * N + n) * K + k) = acc[n];
    }
}

/* step 2 of 2: dw [N, K] = the sum over the chunks' partials, in chunk order */
template <int N, long long K> __device__ void skinny_linear_dw_sum(float *dw, const float *part, long long chunks)
{
    MOEC_FOR(i, N * K) {
        float s = 0.0f;
        /* 16 loads in flight (a template chunk count unrolled the loop whole) */
#pragma unroll 16
        for (long long c = 0; c < chunks; c++)
            s += part[c * N * K + i];
        dw[i] = s;
    }
}

/* ---- memory-bound kernels (docs/decisions.md 47): 16-byte accesses, no single-block passes ---- */

/* 8 consecutive elements as floats from fp32 (two 16-byte loads; p 32-byte aligned) or bf16 storage (one
 * 16-byte load; p 16-byte aligned), and back: bf16 rounded to nearest even (bf16_bits, as sm90::st) */
__device__ __forceinline__ void ld8(const float *p, float (&f)[8])
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void ld8(const unsigned short *p, float (&f)[8])
{
    const uint4 u = *(const uint4 *)p;
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void st8(float *p, const float (&f)[8])
{
    float4 a, b;
    a.x = f[0], a.y = f[1], a.z = f[2], a.w = f[3], b.x = f[4], b.y = f[5], b.z = f[6], b.w = f[7];
    *(float4 *)p = a;
    *(float4 *)(p + 4) = b;
}
__device__ __forceinline__ void st8(unsigned short *p, const float (&f)[8])
{
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (unsigned)bf16_bits(f[2 * i]) | ((unsigned)bf16_bits(f[2 * i + 1]) << 16);
    uint4 u;
    u.x = w[0], u.y = w[1], u.z = w[2], u.w = w[3];
    *(uint4 *)p = u;
}

/* 8 consecutive elements as loaded (16 bytes of bf16, 32 of fp32), widened by get as ld8 does. On the GPU the
 * loads are plain ld.global (inline PTX), not the read-only path's ld.global.nc that the compiler may sink
 * below later stores (it did: a thread of rope_apply had 2 of its 8 loads in flight; decision 52): a plain
 * load stays before a store that may alias it. */
template <class T> struct Raw8;
template <> struct Raw8<unsigned short> {
    uint4 u;
    __device__ __forceinline__ void load(const unsigned short *p)
    {
#ifdef __CUDA_ARCH__
        asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
#else
        u = *(const uint4 *)p;
#endif
    }
    __device__ __forceinline__ void get(float (&f)[8]) const
    {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};
template <> struct Raw8<float> {
    float4 a, b;
    __device__ __forceinline__ void load(const float *p)
    {
#ifdef __CUDA_ARCH__
        asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a.x), "=f"(a.y), "=f"(a.z), "=f"(a.w) : "l"(p));
        asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(b.x), "=f"(b.y), "=f"(b.z), "=f"(b.w) : "l"(p + 4));
#else
        a = *(const float4 *)p, b = *(const float4 *)(p + 4);
#endif
    }
    __device__ __forceinline__ void get(float (&f)[8]) const
    {
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    }
};

/* two floats rounded to bf16 (to nearest even, as bf16_bits for every finite value), packed lo | hi << 16: on the
 * GPU one cvt.rn.bf16x2.f32 */
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi)
{
#ifdef __CUDA_ARCH__
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
#else
    return (unsigned)bf16_bits(lo) | ((unsigned)bf16_bits(hi) << 16);
#endif
}

/* RoPE's bf16 results without double arithmetic where that provably gives the reference's bits (decision 58).
 * The reference (exact) computes y1 = bf16(float(a c - b s)), y2 = bf16(float(b c + a s)) in double from the
 * table's doubles c, s (|c|, |s| <= 1) and the widened inputs a, b. Here r1 = fma(a, cf, -(b sf)) and
 * r2 = fma(b, cf, a sf) in fp32 with cf, sf the table's values rounded to float: |r - v| < 3.5 2^-24 (|a| + |b|)
 * + 2^-148 for the exact v, and the reference's double result vd is as close to v (2^-51 (|a| + |b|)), so
 * vd lies in [r - E, r + E] with E = 2^-20 (|a| + |b|) + 2^-120 (the bounds' own rounding included, 4x margin).
 * float() and bf16() are monotone, so when both ends of the interval give the same bf16, that is the
 * reference's result; the ends differ where the interval holds a bf16 rounding boundary (about 1 element in
 * 10^4), straddles zero (|r| < E: zeros, signs of zero), or E is not below 2^100 (inf, NaN, overflow): then
 * ok turns false and the caller computes the group in double, as the reference. */
__device__ __forceinline__ void rope_pair_bf16(float a0, float b0, float a1, float b1, float c0, float s0, float c1,
                                               float s1, unsigned &y1, unsigned &y2, bool &ok)
{
    const float e0 = fmaf(__fadd_rn(fabsf(a0), fabsf(b0)), 0x1p-20f, 0x1p-120f);
    const float e1 = fmaf(__fadd_rn(fabsf(a1), fabsf(b1)), 0x1p-20f, 0x1p-120f);
    const float p0 = fmaf(a0, c0, -__fmul_rn(b0, s0)), q0 = fmaf(b0, c0, __fmul_rn(a0, s0));
    const float p1 = fmaf(a1, c1, -__fmul_rn(b1, s1)), q1 = fmaf(b1, c1, __fmul_rn(a1, s1));
    y1 = pack_bf16(__fsub_rn(p0, e0), __fsub_rn(p1, e1));
    y2 = pack_bf16(__fsub_rn(q0, e0), __fsub_rn(q1, e1));
    const unsigned h1 = pack_bf16(__fadd_rn(p0, e0), __fadd_rn(p1, e1));
    const unsigned h2 = pack_bf16(__fadd_rn(q0, e0), __fadd_rn(q1, e1));
    ok = ok & (y1 == h1) & (y2 == h2) & (e0 < 0x1p100f) & (e1 < 0x1p100f);
}

/* RoPE, step 2 of 2: y = x rotated, pairs (j, j + HD/2) of every head by the angle whose cos and sin step 1
 * wrote into the tables (decision 58): cs [S, HD/2] of double pairs (cos, sin) with the very expressions of
 * the reference kernel, and csf the same rounded to float. rope_dx (NEG) rotates by minus the angle: the
 * reference's -1.0 * sin, an exact negation. One thread per (row, 8 consecutive j, HG heads): 16-byte loads
 * and stores (bf16) or two of each (fp32), every head's loads before the first store (decision 52). Results
 * the reference's bit for bit: fp32 outputs in double as the reference; bf16 outputs through
 * rope_pair_bf16 in fp32, each 8-pair group whose interval test fails again in double. HD % 16 == 0,
 * H % HG == 0. */
template <long long S, int H, int HD, int HG, bool NEG, class TY, class TX>
__device__ void rope_apply(TY *y, const TX *x, const double *cs, const float *csf, long long rows)
{
    constexpr int HALF = HD / 2, Q = HALF / 8;
    static_assert(HD % 16 == 0 && H % HG == 0, "rope_apply: HD % 16, H % HG");
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < rows * (H / HG) * Q;
         idx += (long long)gridDim.x * blockDim.x) {
        const int q = (int)(idx % Q), hg = (int)(idx / Q % (H / HG));
        const long long row = idx / ((long long)Q * (H / HG)), s = row % S;
        const long long t0 = s * HALF + 8 * q; /* the group's first (position, pair) */
        /* every head's loads first, then the heads' rotations and stores (decision 52) */
        const long long at0 = row * ((long long)H * HD) + (long long)hg * HG * HD + 8 * q;
        Raw8<TX> r1[HG], r2[HG];
#pragma unroll
        for (int hh = 0; hh < HG; hh++) {
            r1[hh].load(x + at0 + (long long)hh * HD);
            r2[hh].load(x + at0 + (long long)hh * HD + HALF);
        }
        if constexpr (sizeof(TY) == 2) {
            float c[8], sn[8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 t = *(const float4 *)(csf + 2 * t0 + 4 * u);
                c[2 * u] = t.x, sn[2 * u] = NEG ? -t.y : t.y, c[2 * u + 1] = t.z, sn[2 * u + 1] = NEG ? -t.w : t.w;
            }
#pragma unroll
            for (int hh = 0; hh < HG; hh++) {
                float x1[8], x2[8];
                r1[hh].get(x1);
                r2[hh].get(x2);
                unsigned o1[4], o2[4];
                bool ok = true;
#pragma unroll
                for (int i = 0; i < 4; i++)
                    rope_pair_bf16(x1[2 * i], x2[2 * i], x1[2 * i + 1], x2[2 * i + 1], c[2 * i], sn[2 * i],
                                   c[2 * i + 1], sn[2 * i + 1], o1[i], o2[i], ok);
                if (!ok) { /* rare: the group in double, as the reference */
                    float y1[8], y2[8];
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        const double cd = cs[2 * (t0 + i)], sd = NEG ? -1.0 * cs[2 * (t0 + i) + 1] : cs[2 * (t0 + i) + 1];
                        const double a = x1[i], b = x2[i];
                        y1[i] = (float)(a * cd - b * sd);
                        y2[i] = (float)(b * cd + a * sd);
                    }
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        o1[i] = (unsigned)bf16_bits(y1[2 * i]) | ((unsigned)bf16_bits(y1[2 * i + 1]) << 16);
                        o2[i] = (unsigned)bf16_bits(y2[2 * i]) | ((unsigned)bf16_bits(y2[2 * i + 1]) << 16);
                    }
                }
                uint4 u1, u2;
                u1.x = o1[0], u1.y = o1[1], u1.z = o1[2], u1.w = o1[3];
                u2.x = o2[0], u2.y = o2[1], u2.z = o2[2], u2.w = o2[3];
                *(uint4 *)(y + at0 + (long long)hh * HD) = u1;
                *(uint4 *)(y + at0 + (long long)hh * HD + HALF) = u2;
            }
        } else {
            double c[8], sn[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                c[i] = cs[2 * (t0 + i)], sn[i] = NEG ? -1.0 * cs[2 * (t0 + i) + 1] : cs[2 * (t0 + i) + 1];
#pragma unroll
            for (int hh = 0; hh < HG; hh++) {
                float x1[8], x2[8], y1[8], y2[8];
                r1[hh].get(x1);
                r2[hh].get(x2);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const double a = x1[i], b = x2[i];
                    y1[i] = (float)(a * c[i] - b * sn[i]);
                    y2[i] = (float)(b * c[i] + a * sn[i]);
                }
                st8(y + at0 + (long long)hh * HD, y1);
                st8(y + at0 + (long long)hh * HD + HALF, y2);
            }
        }
    }
}

/* route_plan and expert_counts: a stable counting sort of NI keys in [0, NB) over chunks of CH keys,
 * many blocks (the reference sorts in one block). Step 1 (count): cnt [NCH, NB] <- each chunk's keys per
 * bucket (shared-memory integer atomics: exact); a key out of range stops the kernel (__trap), as the
 * CPU backend dies. */
template <int NB> __device__ void sort_count(int *cnt, const int *key, long long NI, long long CH)
{
    const long long NCH = (NI + CH - 1) / CH;
    __shared__ int h[NB];
    for (long long c = blockIdx.x; c < NCH; c += gridDim.x) {
        for (int b = threadIdx.x; b < NB; b += blockDim.x)
            h[b] = 0;
        __syncthreads();
        const long long i1 = (c + 1) * CH < NI ? (c + 1) * CH : NI;
        for (long long i = c * CH + threadIdx.x; i < i1; i += blockDim.x) {
            const int k = key[i];
            if (k < 0 || k >= NB)
                __trap(); /* an expert id out of range: the CPU backend stops too */
            atomicAdd(&h[k], 1);
        }
        __syncthreads();
        for (int b = threadIdx.x; b < NB; b += blockDim.x)
            cnt[c * NB + b] = h[b];
        __syncthreads();
    }
}

/* Step 2 (place), 256 threads per block: pos [NI] <- each key's position in the stable bucket-major order,
 * the CPU's. Chunk c's first position in bucket b is the keys of buckets < b plus those of bucket b in
 * chunks < c, summed from cnt by every block (integers: any order gives the same); inside the chunk, 256
 * keys at a time, the rank among equal keys of the warp (__match_any_sync) after the earlier warps'. */
template <int NB>
__device__ void sort_place(int *pos, const int *key, const int *cnt, long long NI, long long CH)
{
    const long long NCH = (NI + CH - 1) / CH;
    __shared__ int run[NB], tot[NB], wc[8 * NB];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long c = blockIdx.x; c < NCH; c += gridDim.x) {
        for (int b = threadIdx.x; b < NB; b += blockDim.x)
            run[b] = 0, tot[b] = 0;
        for (int b = threadIdx.x; b < 8 * NB; b += blockDim.x)
            wc[b] = 0;
        __syncthreads();
        for (long long i = threadIdx.x; i < NCH * NB; i += blockDim.x) {
            const int v = cnt[i], b = (int)(i % NB);
            atomicAdd(&tot[b], v);
            if (i / NB < c)
                atomicAdd(&run[b], v);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int start = 0;
            for (int b = 0; b < NB; b++) {
                run[b] += start;
                start += tot[b];
            }
        }
        __syncthreads();
        const long long i1 = (c + 1) * CH < NI ? (c + 1) * CH : NI;
        for (long long c0 = c * CH; c0 < i1; c0 += blockDim.x) {
            const long long i = c0 + threadIdx.x;
            int k = i < i1 ? key[i] : -1;
            const bool valid = k >= 0 && k < NB;
            if (!valid)
                k = -1;
            const unsigned peers = __match_any_sync(0xffffffffu, k);
            const int rank = __popc(peers & ((1u << lane) - 1u));
            if (valid && rank == 0)
                wc[warp * NB + k] = __popc(peers);
            __syncthreads();
            if (valid) {
                int r = run[k] + rank;
                for (int w = 0; w < warp; w++)
                    r += wc[w * NB + k];
                pos[i] = r;
            }
            __syncthreads();
            if (valid && rank == 0) {
                atomicAdd(&run[k], __popc(peers));
                wc[warp * NB + k] = 0;
            }
            __syncthreads();
        }
    }
}

/* expert_counts' step 2: counts [NB] <- the chunks' counts added (integers: exact), one thread per bucket */
template <int NB> __device__ void sort_totals(int *counts, const int *cnt, long long NCH)
{
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < NB; b += (long long)gridDim.x * blockDim.x) {
        int s = 0;
        for (long long c = 0; c < NCH; c++)
            s += cnt[c * NB + b];
        counts[b] = s;
    }
}

/* RMSNorm and its gradients, one row per block of TB threads (a multiple of 32), each thread NC groups of 8
 * consecutive columns held in registers (one 16-byte load per group, two for fp32), so a row is read once.
 * The sums in double as the reference's: each thread's elements in column order, then the block's fixed
 * tree (block_sum); every other expression the reference's. D % 8 == 0. */
template <int D, int TB> struct RowPart {
    static constexpr int NC = (D / 8 + TB - 1) / TB;
    static __device__ __forceinline__ int col(int c) { return 8 * ((int)threadIdx.x + c * TB); }
};

/* rmsnorm's bf16 results without double arithmetic where that provably gives the reference's bits (decision
 * 58; the argument of rope_pair_bf16). The reference computes bf16(float((double)v * inv * w)) with inv the
 * row's 1 / rms in double; here r = (v invf) w in fp32 with invf = (float)inv: three roundings of a product,
 * |r - v inv w| <= 3.01 2^-24 |v inv w| + 2^-150 (|w| + 1) (subnormal intermediates), and the reference's
 * double result within 2^-52 of it; E = 2^-20 |r| + 2^-100 covers both while inv is in [2^-100, 2^100] and
 * |w| < 2^40 (the caller checks these once a row and once a thread). Where both ends of [r - E, r + E] give
 * the same bf16, that is the reference's result; otherwise (a rounding boundary inside, zero, inf, NaN) ok
 * turns false and the caller computes the group in double. */
__device__ __forceinline__ unsigned rms_pair_bf16(float v0, float v1, float w0, float w1, float invf, bool &ok)
{
    const float r0 = __fmul_rn(__fmul_rn(v0, invf), w0), r1 = __fmul_rn(__fmul_rn(v1, invf), w1);
    const float e0 = fmaf(fabsf(r0), 0x1p-20f, 0x1p-100f), e1 = fmaf(fabsf(r1), 0x1p-20f, 0x1p-100f);
    const unsigned lo = pack_bf16(__fsub_rn(r0, e0), __fsub_rn(r1, e1));
    const unsigned hi = pack_bf16(__fadd_rn(r0, e0), __fadd_rn(r1, e1));
    ok = ok & (lo == hi) & (e0 < 0x1p100f) & (e1 < 0x1p100f);
    return lo;
}

/* y = x / rms(x) * w; rinv (not null) gets each row's 1 / rms, the very double rms_inv_rows computes (the
 * same sums in the same order), for rmsnorm_dw (decision 52). bf16 y (decision 58): w's columns loaded once a
 * thread, the products in fp32 through rms_pair_bf16, each 8-column group whose interval test fails again in
 * double: 1 fp32 -> fp64 conversion an element (the sum of squares) where there were 3. */
template <int D, int TB, class TY, class TX>
__device__ void rmsnorm_rows(TY *y, const TX *x, const float *w, double eps, double *rinv, long long rows)
{
    typedef RowPart<D, TB> P;
    float wv[P::NC][8];
    bool wok = true; /* this thread's columns of w allow the fp32 path */
    if constexpr (sizeof(TY) == 2) {
#pragma unroll
        for (int c = 0; c < P::NC; c++)
            if (P::col(c) < D) {
                ld8(w + P::col(c), wv[c]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    wok = wok & (fabsf(wv[c][i]) < 0x1p40f);
            }
    }
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float v[P::NC][8];
        double ss = 0.0;
#pragma unroll
        for (int c = 0; c < P::NC; c++)
            if (P::col(c) < D) {
                ld8(x + r * D + P::col(c), v[c]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    ss += (double)v[c][i] * v[c][i];
            }
        ss = block_sum<TB>(ss);
        const double inv = 1.0 / sqrt(ss / (double)D + eps);
        if (rinv && threadIdx.x == 0)
            rinv[r] = inv;
        if constexpr (sizeof(TY) == 2) {
            const float invf = (float)inv;
            const bool rok = wok & (inv >= 0x1p-100) & (inv <= 0x1p100);
#pragma unroll
            for (int c = 0; c < P::NC; c++)
                if (P::col(c) < D) {
                    uint4 u;
                    bool ok = rok;
                    u.x = rms_pair_bf16(v[c][0], v[c][1], wv[c][0], wv[c][1], invf, ok);
                    u.y = rms_pair_bf16(v[c][2], v[c][3], wv[c][2], wv[c][3], invf, ok);
                    u.z = rms_pair_bf16(v[c][4], v[c][5], wv[c][4], wv[c][5], invf, ok);
                    u.w = rms_pair_bf16(v[c][6], v[c][7], wv[c][6], wv[c][7], invf, ok);
                    if (ok) {
                        *(uint4 *)(y + r * D + P::col(c)) = u;
                    } else { /* rare: the group in double, as the reference */
                        float o[8];
#pragma unroll
                        for (int i = 0; i < 8; i++)
                            o[i] = (float)((double)v[c][i] * inv * wv[c][i]);
                        st8(y + r * D + P::col(c), o);
                    }
                }
        } else {
#pragma unroll
            for (int c = 0; c < P::NC; c++)
                if (P::col(c) < D) {
                    float w8[8], o[8];
                    ld8(w + P::col(c), w8);
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        o[i] = (float)((double)v[c][i] * inv * w8[i]);
                    st8(y + r * D + P::col(c), o);
                }
        }
    }
}

/* dx_j = r w_j dy_j - x_j r^3 / D * sum_i w_i dy_i x_i, r = 1 / rms(x) */
template <int D, int TB, class TDX, class TDY, class TX>
__device__ void rmsnorm_dx_rows(TDX *dx, const TDY *dy, const TX *x, const float *w, double eps, long long rows)
{
    typedef RowPart<D, TB> P;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float xv[P::NC][8], gv[P::NC][8], wv[P::NC][8];
        double ss = 0.0, s = 0.0;
#pragma unroll
        for (int c = 0; c < P::NC; c++)
            if (P::col(c) < D) {
                ld8(x + r * D + P::col(c), xv[c]);
                ld8(dy + r * D + P::col(c), gv[c]);
                ld8(w + P::col(c), wv[c]);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    ss += (double)xv[c][i] * xv[c][i];
                    s += (double)wv[c][i] * gv[c][i] * xv[c][i];
                }
            }
        ss = block_sum<TB>(ss);
        const double inv = 1.0 / sqrt(ss / (double)D + eps);
        s = block_sum<TB>(s);
#pragma unroll
        for (int c = 0; c < P::NC; c++)
            if (P::col(c) < D) {
                float o[8];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    o[i] = (float)(inv * wv[c][i] * gv[c][i] - (double)xv[c][i] * inv * inv * inv / (double)D * s);
                st8(dx + r * D + P::col(c), o);
            }
    }
}

/* rmsnorm_dw's step 1: rinv [r] = 1 / rms(x_r) */
template <int D, int TB, class TX>
__device__ void rms_inv_rows(double *rinv, const TX *x, double eps, long long rows)
{
    typedef RowPart<D, TB> P;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        double ss = 0.0;
#pragma unroll
        for (int c = 0; c < P::NC; c++)
            if (P::col(c) < D) {
                float v[8];
                ld8(x + r * D + P::col(c), v);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    ss += (double)v[i] * v[i];
            }
        ss = block_sum<TB>(ss);
        if (threadIdx.x == 0)
            rinv[r] = 1.0 / sqrt(ss / (double)D + eps);
    }
}

/* rmsnorm_dw's step 2 (decision 52): part [c][D] <- for chunk c of ch rows and each column, the sum of
 * (float)(dy x rinv) over the chunk's rows in row order (fp32, the reference's per-row term), C columns a
 * thread: 4 with 16-byte loads (D % 4 == 0, dy and x 16-byte aligned) or 1; 4 rows' loads in flight */
template <int C> struct Cols;
template <> struct Cols<4> {
    float v[4];
    __device__ __forceinline__ void load(const float *p)
    {
        const float4 t = *(const float4 *)p;
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    }
};
template <> struct Cols<1> {
    float v[1];
    __device__ __forceinline__ void load(const float *p) { v[0] = *p; }
};
template <int D, int C>
__device__ void rms_dw_chunks(float *part, const float *dy, const float *x, const double *rinv, long long rows,
                              long long ch)
{
    static_assert(D % C == 0, "rms_dw_chunks: D % C");
    constexpr long long Q = D / C;
    const long long chunks = (rows + ch - 1) / ch;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < chunks * Q;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long c = idx / Q, col = C * (idx % Q), r0 = c * ch, r1 = r0 + ch < rows ? r0 + ch : rows;
        float acc[C];
#pragma unroll
        for (int j = 0; j < C; j++)
            acc[j] = 0.0f;
        for (long long r = r0; r < r1; r += 4) {
            Cols<C> g[4], v[4];
            double ri[4];
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (r + u < r1) {
                    g[u].load(dy + (r + u) * D + col);
                    v[u].load(x + (r + u) * D + col);
                    ri[u] = rinv[r + u];
                }
#pragma unroll
            for (int u = 0; u < 4; u++)
                if (r + u < r1)
#pragma unroll
                    for (int j = 0; j < C; j++)
                        acc[j] += (float)((double)g[u].v[j] * v[u].v[j] * ri[u]);
        }
#pragma unroll
        for (int j = 0; j < C; j++)
            part[c * D + col + j] = acc[j];
    }
}

/* rmsnorm_dw's step 3: dw [D] <- the chunks' partials of each column added in a fixed order by a block of
 * 32 columns (a lane per column): warp w adds chunks w, w + W, ... in order, then lane j of warp 0 adds the
 * W warps' sums in warp order. Blocks of 32 W threads. */
template <int D, int W> __device__ void rms_dw_sum(float *dw, const float *part, long long chunks)
{
    __shared__ float red[W][33];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long c0 = 32 * (long long)blockIdx.x; c0 < D; c0 += 32 * (long long)gridDim.x) {
        const long long col = c0 + lane;
        float s = 0.0f;
        if (col < D)
            for (long long c = warp; c < chunks; c += W)
                s += part[c * D + col];
        red[warp][lane] = s;
        __syncthreads();
        if (warp == 0 && col < D) {
            float t = 0.0f;
            for (int w = 0; w < W; w++)
                t += red[w][lane];
            dw[col] = t;
        }
        __syncthreads();
    }
}

/* slice of the last dimension, 8 elements per thread (W, OFF, SIZE % 8 == 0): a copy, bf16 widened exactly
 * and stored rounded as the reference; rows at run time */
template <long long W, long long OFF, long long SIZE, class TY, class TX>
__device__ void slice8(long long rows, TY *y, const TX *x)
{
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < rows * SIZE / 8;
         q += (long long)gridDim.x * blockDim.x) {
        const long long i = 8 * q;
        float v[8];
        ld8(x + i / SIZE * W + OFF + i % SIZE, v);
        st8(y + i, v);
    }
}

/* combine: out [T, D] f32, token t sums its KS expert rows y [R, D] f32 (rows through plan [T, KS]) in
 * slot order from 0.0f, as the reference combine (the same sums, bit for bit); one block per token, 4
 * columns (16 bytes) per thread. A plan row past R reads nothing, as in the reference only rows < R exist. */
template <int KS, long long D> __device__ void combine_rows(float *out, const float *y, const int *plan, long long T)
{
    for (long long t = blockIdx.x; t < T; t += gridDim.x) {
        long long row[KS];
#pragma unroll
        for (int j = 0; j < KS; j++)
            row[j] = plan[t * KS + j];
        for (long long c = 4 * threadIdx.x; c < D; c += 4 * blockDim.x) {
            float4 acc;
            acc.x = 0.0f, acc.y = 0.0f, acc.z = 0.0f, acc.w = 0.0f;
#pragma unroll
            for (int j = 0; j < KS; j++) {
                const float4 v = *(const float4 *)(y + row[j] * D + c);
                acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
            }
            *(float4 *)(out + t * D + c) = acc;
        }
    }
}

/* ---- the cross entropy streamed, one warp per row (docs/decisions.md 52): the row is read once with 16-byte
 * loads, U float4 per lane in flight, and no block barrier anywhere, so the warps of an SM overlap one row's
 * arithmetic with other rows' loads (the kernels above hold a row in a block's registers: one row an SM, its
 * loads and its reductions in turn). Each lane keeps an online maximum m and sum s of exp(l - m): a group of
 * U float4 is exponentiated in fp32 against the lane's maximum after the group (expf, as above), summed in
 * fp32 and added to s in double; when the maximum grows, s is rescaled by exp(m_old - m_new) in double. The
 * lanes' (m, s) are then combined by an xor butterfly (every lane the same bits), s_lane * exp(m_lane - M) in
 * double with M the row's max (exact: any order gives it). Deterministic; within a few fp32 ulps of the
 * two-pass sum. V % 4 == 0. */
template <int V> struct CeWarp {
    static constexpr int Q = V / 4, U = 4;
    /* row l's max (every lane) and sum of exp(l - max) (every lane) */
    static __device__ __forceinline__ void stats(const float *l, float &mx, double &sum)
    {
        const int lane = threadIdx.x & 31;
        const float ninf = -__int_as_float(0x7f800000);
        float m = ninf;
        double s = 0.0;
        for (int q0 = lane; q0 < Q; q0 += 32 * U) {
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                v[u] = q0 + 32 * u < Q ? *(const float4 *)(l + 4 * (q0 + 32 * u)) : make_float4(ninf, ninf, ninf, ninf);
            float gm = m;
#pragma unroll
            for (int u = 0; u < U; u++)
                gm = fmaxf(gm, fmaxf(fmaxf(v[u].x, v[u].y), fmaxf(v[u].z, v[u].w)));
            if (gm > m) {
                if (m != ninf)
                    s *= exp((double)m - (double)gm);
                m = gm;
            }
            float fs = 0.0f;
#pragma unroll
            for (int u = 0; u < U; u++)
                if (q0 + 32 * u < Q)
                    fs += (expf(v[u].x - m) + expf(v[u].y - m)) + (expf(v[u].z - m) + expf(v[u].w - m));
            s += (double)fs;
        }
        float M = m;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        s = m == ninf ? 0.0 : s * exp((double)m - (double)M);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        mx = M;
        sum = s;
    }
};

/* cross_entropy's step 1, streamed: each row's loss log(sum) + max - l[target] (double), whether it counts,
 * and, where the gradient reads them (KEEP), the row's (max, sum) into stats [N][2] */
template <int V, long long IGNORE, bool KEEP>
__device__ void ce_rows_warp(double *row_loss, int *row_counted, double *stats, const float *logits, const int *targets,
                             long long N)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
    for (long long r = (long long)blockIdx.x * warps + threadIdx.x / 32; r < N; r += (long long)gridDim.x * warps) {
        const int t = targets[r];
        const bool counted = !(t == IGNORE || t < 0 || t >= V);
        double loss = 0.0, sum = 0.0;
        float mx = 0.0f;
        if (counted) { /* the same for the whole warp */
            CeWarp<V>::stats(logits + r * V, mx, sum);
            loss = log(sum) + (double)mx - (double)logits[r * V + t];
        }
        if (lane == 0) {
            row_loss[r] = loss;
            row_counted[r] = counted;
            if (KEEP) {
                stats[2 * r] = (double)mx;
                stats[2 * r + 1] = sum;
            }
        }
    }
}

/* cross_entropy_dx with the forward's kept (max, sum): dx = dl (softmax - onehot) / count, each row read once
 * and written once (16-byte loads and stores, U float4 per lane in flight), one warp per row; the expression
 * of ce_dx_rows (expf(l - max) * (float)(1 / sum)) */
template <int V, long long IGNORE>
__device__ void ce_dx_rows_kept(float *dx, const float *dloss, const float *logits, const int *targets, const int *count,
                                const double *stats, long long N)
{
    constexpr int Q = V / 4, U = CeWarp<V>::U;
    const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
    const double dl = dloss[0];
    const int cnt = count[0];
    const float scale = cnt ? (float)(dl / (double)cnt) : 0.0f;
    for (long long r = (long long)blockIdx.x * warps + threadIdx.x / 32; r < N; r += (long long)gridDim.x * warps) {
        const int t = targets[r];
        float *d = dx + r * V;
        const float *l = logits + r * V;
        if (t == IGNORE || t < 0 || t >= V || cnt == 0) { /* the same for the whole warp */
            for (int q = lane; q < Q; q += 32)
                *(float4 *)(d + 4 * q) = make_float4(0.f, 0.f, 0.f, 0.f);
            continue;
        }
        const float mx = (float)stats[2 * r], rs = (float)(1.0 / stats[2 * r + 1]);
        for (int q0 = lane; q0 < Q; q0 += 32 * U) {
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (q0 + 32 * u < Q)
                    v[u] = *(const float4 *)(l + 4 * (q0 + 32 * u));
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int j = 4 * (q0 + 32 * u);
                if (j < V) {
                    float4 o;
                    o.x = (expf(v[u].x - mx) * rs - (j == t ? 1.0f : 0.0f)) * scale;
                    o.y = (expf(v[u].y - mx) * rs - (j + 1 == t ? 1.0f : 0.0f)) * scale;
                    o.z = (expf(v[u].z - mx) * rs - (j + 2 == t ? 1.0f : 0.0f)) * scale;
                    o.w = (expf(v[u].w - mx) * rs - (j + 3 == t ? 1.0f : 0.0f)) * scale;
                    *(float4 *)(d + j) = o;
                }
            }
        }
    }
}

} /* namespace fast */
} /* namespace moec */
