/* moe_fast.cuh - device code of the fast grouped MLP (codegen/cuda_moe_fast.c, docs/kernels-sm90.md):
 * everything around the sm_90a GEMMs (gemm_sm90.cuh). Pasted into a plan's kernels.cu only when a node
 * got the fast kernels, after moe_fast_offsets.h, gemm_sm90_sched.h, sm90.cuh and gemm_sm90.cuh.
 *
 * ofs, the node's int workspace [2E + 2]: ofs[0 .. E] the padded offsets (the GEMMs' `offsets`),
 * ofs[E + 1 .. 2E + 1] the graph's group starts. Padded row pr < ofs[E] of group g is graph row
 * start[g] + (pr - ofs[g]) when pr - ofs[g] < splits[g], else a zero row. Rows past ofs[E] are never
 * read by any GEMM and are left as they are. Storage: bf16 as unsigned short (raw bits). */
namespace moec {
namespace fast {

/* round to nearest even; NaN stays NaN (prelude.cuh) */
__device__ __forceinline__ unsigned short f2bf(float x) { return bf16_bits(x); }
__device__ __forceinline__ float bf2f(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16);
}
/* 8 consecutive fp32 <-> bf16 (16 bytes): the permutes' wide path where the row width is a multiple of 8
 * (decision 47: 16-byte stores and loads, where 4 columns per thread moved 8 bytes of bf16) */
__device__ __forceinline__ uint4 pack8f(const float *p)
{
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    return make_uint4(pack2(a.x, a.y), pack2(a.z, a.w), pack2(b.x, b.y), pack2(b.z, b.w));
}
__device__ __forceinline__ void unpack8f(float *p, uint4 u)
{
    *(float4 *)p = make_float4(bf2f((unsigned short)(u.x & 0xffffu)), bf2f((unsigned short)(u.x >> 16)),
                               bf2f((unsigned short)(u.y & 0xffffu)), bf2f((unsigned short)(u.y >> 16)));
    *(float4 *)(p + 4) = make_float4(bf2f((unsigned short)(u.z & 0xffffu)), bf2f((unsigned short)(u.z >> 16)),
                                     bf2f((unsigned short)(u.w & 0xffffu)), bf2f((unsigned short)(u.w >> 16)));
}

template <int E> __device__ void offsets(int *ofs, const int *splits, long long R)
{
    if (blockIdx.x == 0 && threadIdx.x == 0 && moec_fast_offsets(splits, E, R, ofs, ofs + E + 1) != 0)
        __trap(); /* split sizes past the rows: the CPU backend stops here too */
}

/* dst [., C] bf16 padded rows <- src [R, C] f32 graph rows; pdst [.] <- psrc [R] (if psrc). One block
 * per padded row, 8 columns per thread where C % 8 == 0, else 4. C % 4 == 0. */
template <int E, long long C>
__device__ void gather(unsigned short *dst, float *pdst, const float *src, const float *psrc, const int *ofs)
{
    const int total = ofs[E];
    for (int pr = blockIdx.x; pr < total; pr += gridDim.x) {
        const int g = moec_sched_group_of(ofs, E, pr), k = pr - ofs[g];
        const int live = k < ofs[E + 2 + g] - ofs[E + 1 + g];
        const long long row = (long long)ofs[E + 1 + g] + k;
        if constexpr (C % 8 == 0) {
            for (long long c = 8 * threadIdx.x; c < C; c += 8 * blockDim.x)
                *(uint4 *)(dst + (long long)pr * C + c) = live ? pack8f(src + row * C + c) : make_uint4(0u, 0u, 0u, 0u);
        } else {
            for (long long c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
                float4 v = live ? *(const float4 *)(src + row * C + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                *(uint2 *)(dst + (long long)pr * C + c) = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
            }
        }
        if (psrc && threadIdx.x == 0)
            pdst[pr] = live ? psrc[row] : 0.0f;
    }
}

/* The padded rows of one token's KS slots: plan_t [KS] holds their expert-major rows; row `row` of
 * group g (start[g] <= row < start[g + 1]) is padded row ofs[g] + row - start[g]; a row past the groups
 * gives -1. */
template <int E, int KS> __device__ __forceinline__ void padded_rows(long long (&pr)[KS], const int *plan_t, const int *ofs)
{
    const int *start = ofs + E + 1;
#pragma unroll
    for (int j = 0; j < KS; j++) {
        const int row = plan_t[j];
        pr[j] = -1;
        if (row >= 0 && row < start[E]) {
            const int g = moec_sched_group_of(start, E, row);
            pr[j] = (long long)ofs[g] + (row - start[g]);
        }
    }
}

/* dst [., C] bf16 padded rows <- the token rows x [T, C] f32 through a dispatch plan [T, KS] (the
 * expert-major row of each token's slot): padded row ofs[g] + row - start[g] of group g holding `row`
 * gets token t's row; pdst [.] <- p [row] (p expert-major, if p); the padding rows of every group zero.
 * Items: the T tokens (one block reads its token row once and writes its KS rows), then E x 128
 * padding slots. 8 columns per thread where C % 8 == 0, else 4. C % 4 == 0. */
template <int E, long long C, int KS>
__device__ void gather_tokens(unsigned short *dst, float *pdst, const float *x, const int *plan, const float *p,
                              const int *ofs, long long T)
{
    static_assert(KS >= 1 && KS <= 16, "top-k up to 16");
    const int *start = ofs + E + 1;
    const long long items = T + (long long)E * 128;
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        if (it < T) {
            long long pr[KS];
            padded_rows<E, KS>(pr, plan + it * KS, ofs);
            if constexpr (C % 8 == 0) {
                for (long long c = 8 * threadIdx.x; c < C; c += 8 * blockDim.x) {
                    const uint4 b = pack8f(x + it * C + c);
#pragma unroll
                    for (int j = 0; j < KS; j++)
                        if (pr[j] >= 0)
                            *(uint4 *)(dst + pr[j] * C + c) = b;
                }
            } else {
                for (long long c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
                    const float4 v = *(const float4 *)(x + it * C + c);
                    const uint2 b = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
#pragma unroll
                    for (int j = 0; j < KS; j++)
                        if (pr[j] >= 0)
                            *(uint2 *)(dst + pr[j] * C + c) = b;
                }
            }
#pragma unroll
            for (int j = 0; j < KS; j++)
                if (pdst && threadIdx.x == j && pr[j] >= 0)
                    pdst[pr[j]] = p[plan[it * KS + j]];
        } else {
            const int g = (int)((it - T) / 128), q = (int)((it - T) % 128);
            const long long pr = (long long)ofs[g] + (start[g + 1] - start[g]) + q;
            if (pr >= ofs[g + 1])
                continue;
            if constexpr (C % 8 == 0) {
                for (long long c = 8 * threadIdx.x; c < C; c += 8 * blockDim.x)
                    *(uint4 *)(dst + pr * C + c) = make_uint4(0u, 0u, 0u, 0u);
            } else {
                for (long long c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x)
                    *(uint2 *)(dst + pr * C + c) = make_uint2(0u, 0u);
            }
            if (pdst && threadIdx.x == 0)
                pdst[pr] = 0.0f;
        }
    }
}

/* out [T, D] f32: token t sums its KS expert rows, read from the padded bf16 rows yp [., D] (row ->
 * padded row as in gather_tokens), in slot order from 0.0f as the reference combine: the same values
 * (the reference reads the fp32 copy of the same bf16), the same sums. One block per token, 4 columns
 * per thread (8 where D % 8 == 0: 16-byte loads). D % 4 == 0. */
template <int E, int KS, long long D>
__device__ void combine_padded(float *out, const unsigned short *yp, const int *plan, const int *ofs, long long T)
{
    for (long long t = blockIdx.x; t < T; t += gridDim.x) {
        long long pr[KS];
        padded_rows<E, KS>(pr, plan + t * KS, ofs);
        if constexpr (D % 8 == 0) {
            /* 8 columns (16 bytes of bf16) per thread; each column's sum as below */
            for (long long c = 8 * threadIdx.x; c < D; c += 8 * blockDim.x) {
                float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, v[8];
#pragma unroll
                for (int j = 0; j < KS; j++) {
                    if (pr[j] < 0)
                        continue;
                    unpack8f(v, *(const uint4 *)(yp + pr[j] * D + c));
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[i] += v[i];
                }
                *(float4 *)(out + t * D + c) = make_float4(acc[0], acc[1], acc[2], acc[3]);
                *(float4 *)(out + t * D + c + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
            }
        } else {
            for (long long c = 4 * threadIdx.x; c < D; c += 4 * blockDim.x) {
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
                for (int j = 0; j < KS; j++) {
                    if (pr[j] < 0)
                        continue; /* a row past the groups: the reference reads a zero row there */
                    const uint2 u = *(const uint2 *)(yp + pr[j] * D + c);
                    acc.x += bf2f((unsigned short)(u.x & 0xffffu));
                    acc.y += bf2f((unsigned short)(u.x >> 16));
                    acc.z += bf2f((unsigned short)(u.y & 0xffffu));
                    acc.w += bf2f((unsigned short)(u.y >> 16));
                }
                *(float4 *)(out + t * D + c) = acc;
            }
        }
    }
}

/* dst [R, C] f32 graph rows <- src [., C] bf16 padded rows; rows past start[E] are zeros. pdst [R] <-
 * psrc (if psrc): padded row pr's NP partials psrc [pr NP .. pr NP + NP - 1] f32 summed in index order in
 * double, rounded once (NP 1: the value itself; the dSwiGLU epilogue's per-128-column partials of dprobs,
 * decision 60). One block per graph row. */
template <int E, long long C, int NP = 1>
__device__ void scatter(float *dst, float *pdst, const unsigned short *src, const float *psrc, const int *ofs,
                        long long R)
{
    const int *start = ofs + E + 1;
    for (long long r = blockIdx.x; r < R; r += gridDim.x) {
        const int live = r < start[E];
        long long pr = 0;
        if (live) {
            const int g = moec_sched_group_of(start, E, (int)r);
            pr = ofs[g] + (r - start[g]);
        }
        if constexpr (C % 8 == 0) {
            for (long long c = 8 * threadIdx.x; c < C; c += 8 * blockDim.x)
                unpack8f(dst + r * C + c, live ? *(const uint4 *)(src + pr * C + c) : make_uint4(0u, 0u, 0u, 0u));
        } else {
            for (long long c = 4 * threadIdx.x; c < C; c += 4 * blockDim.x) {
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (live) {
                    uint2 u = *(const uint2 *)(src + pr * C + c);
                    v = make_float4(bf2f((unsigned short)(u.x & 0xffffu)), bf2f((unsigned short)(u.x >> 16)),
                                    bf2f((unsigned short)(u.y & 0xffffu)), bf2f((unsigned short)(u.y >> 16)));
                }
                *(float4 *)(dst + r * C + c) = v;
            }
        }
        if (psrc && threadIdx.x == 0) {
            double sum = 0.0;
            for (int k = 0; live && k < NP; k++)
                sum += (double)psrc[pr * NP + k];
            pdst[r] = (float)sum;
        }
    }
}

/* bf16 copy of N floats (N % 4 == 0) */
template <long long N> __device__ void convert(unsigned short *dst, const float *src)
{
    for (long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x); i < N;
         i += 4ll * gridDim.x * blockDim.x) {
        float4 v = *(const float4 *)(src + i);
        *(uint2 *)(dst + i) = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
    }
}

/* 8 bf16 (16 bytes) <-> 8 floats */
__device__ __forceinline__ void unpack8(uint4 u, float (&f)[8])
{
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ uint4 pack8(const float (&f)[8])
{
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

/* pack8 with the tensor-core epilogues' rounding, cvt.rn.bf16x2.f32 (gemm_sm90.cuh pack_bf16x2): the same bits as
 * pack8 except that a NaN comes out as the canonical 0x7fff */
__device__ __forceinline__ uint4 pack8_cvt(const float (&f)[8])
{
    return make_uint4(sm90::pack_bf16x2(f[0], f[1]), sm90::pack_bf16x2(f[2], f[3]), sm90::pack_bf16x2(f[4], f[5]),
                      sm90::pack_bf16x2(f[6], f[7]));
}

/* a [., F] = silu(gate) * up * p over the padded rows of h [., 2F] (bf16), p [.] f32; the arithmetic in
 * float. One block per padded row, 8 columns (16-byte loads and stores) per thread. F % 8 == 0. */
template <int E, long long F> __device__ void swiglu(unsigned short *a, const unsigned short *h, const float *p,
                                                     const int *ofs)
{
    const int total = ofs[E];
    for (int pr = blockIdx.x; pr < total; pr += gridDim.x) {
        const float pp = p[pr];
        const unsigned short *hr = h + (long long)pr * 2 * F;
        for (long long f = 8 * threadIdx.x; f < F; f += 8 * blockDim.x) {
            float g[8], u[8], o[8];
            unpack8(*(const uint4 *)(hr + f), g);
            unpack8(*(const uint4 *)(hr + F + f), u);
#pragma unroll
            for (int i = 0; i < 8; i++)
                o[i] = g[i] / (1.0f + __expf(-g[i])) * u[i] * pp;
            *(uint4 *)(a + (long long)pr * F + f) = pack8(o);
        }
    }
}

/* The backward's row step over the padded rows: from h [., 2F], da [., F] (bf16) and p [.]:
 * dh = [d up silu'(gate) | d silu(gate)] with d = da p (bf16), a = silu(gate) up p (bf16, for dW_down)
 * and dp [pr] = sum_f da silu(gate) up (f32; double partials, the block's fixed-order tree, no atomics).
 * The arithmetic of one element is dswiglu.cuh's dswiglu1, as the dSwiGLU epilogue of the da GEMM
 * (decision 60), which replaces this kernel by default: the same dh and a, bit for bit; MOEC_DSWIGLU=separate
 * keeps it (A/B). One block of 256 threads per padded row, 8 columns (16-byte loads and stores) per thread. */
template <int E, long long F, int GLU = 0>
__device__ void dswiglu(unsigned short *dh, unsigned short *a, float *dp, const unsigned short *h,
                        const unsigned short *da, const float *p, const int *ofs)
{
    const int total = ofs[E];
    for (int pr = blockIdx.x; pr < total; pr += gridDim.x) {
        const float pp = p[pr];
        const unsigned short *hr = h + (long long)pr * 2 * F;
        double s = 0.0;
        for (long long f = 8 * threadIdx.x; f < F; f += 8 * blockDim.x) {
            /* h and dh: gate column f and up column F + f, or with GLU (interleaved in blocks of 128)
             * 256 (f / 128) + f % 128 and 128 further */
            const long long gc = GLU ? 256 * (f / 128) + f % 128 : f, uc = GLU ? gc + 128 : F + f;
            float g[8], u[8], d_a[8], dg[8], du[8], o[8];
            unpack8(*(const uint4 *)(hr + gc), g);
            unpack8(*(const uint4 *)(hr + uc), u);
            unpack8(*(const uint4 *)(da + (long long)pr * F + f), d_a);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float t;
                sm90::dswiglu1(g[i], u[i], d_a[i], pp, dg[i], du[i], o[i], t);
                part = __fadd_rn(part, t);
            }
            /* rounded as the dSwiGLU epilogue rounds (cvt.rn.bf16x2: pack8's rounding but for NaN payloads) */
            *(uint4 *)(dh + (long long)pr * 2 * F + gc) = pack8_cvt(dg);
            *(uint4 *)(dh + (long long)pr * 2 * F + uc) = pack8_cvt(du);
            *(uint4 *)(a + (long long)pr * F + f) = pack8_cvt(o);
            s += (double)part;
        }
        s = block_sum<256>(s);
        if (threadIdx.x == 0)
            dp[pr] = (float)s;
    }
}

} /* namespace fast */
} /* namespace moec */
