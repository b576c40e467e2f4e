/* attn_fast.cuh - flash attention on the tensor cores (--kernels fast; codegen/cuda_attention.c): bf16
 * operands, fp32 accumulators and softmax statistics, mma.sync m16n8k16 (sm_80 and later; moec compiles
 * it for sm_90a). Pasted into a plan's kernels.cu only when a node uses it; the Makefile turns it into
 * the C string cuda_prelude_attn_fast. Design and tolerances: docs/kernels-sm90.md ("Attention").
 *
 * Layouts are the graph's: q and o [B, S, H HD], k and v [B, S, KV HD] row-major (head h's columns
 * h HD .. h HD + HD - 1), the backward's output [B, S, H HD + 2 KV HD] = [dq | dk | dv]. The graph
 * stores fp32, so the node first rounds q, k and v to bf16 once (to_bf16 below; the forward keeps them
 * for the backward), and the backward rounds dO. Softmax statistics are base 2: lse2 = log2(sum_j
 * 2^(s_ij log2e / sqrt(HD))) per (b, h, i), kept by the forward for the backward.
 *
 * Every kernel: 4 warps, each owning 16 rows of a 64-row tile (queries, or in dk/dv keys); the other
 * operand streams through shared memory 64 rows at a time (cp.async, two buffers). Rows are padded by 8
 * bf16 (16 bytes) so the 8 row addresses of an ldmatrix fall in 8 different bank groups. No float
 * atomics: dq is its own launch (one block per query tile, over the key tiles) and dk/dv another (one
 * block per key tile, over the group's heads and query tiles), so runs repeat bit for bit; the price is
 * computing the probabilities twice in the backward (7 matrix products instead of 5).
 *
 * Masks: key j is visible to query i when j < S, (causal) j <= i, and (with segment ids) both are in one
 * segment, or i == j for a padding query (segment -1): the reference's seg_sees. Every query sees
 * itself, so no row is empty; fully masked tiles in a row are skipped only by the causal bound. */
namespace moec {
namespace attn {

constexpr int ROWS = 64;   /* rows of a tile: 4 warps x 16 */
constexpr int THREADS = 128;
constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inff() { return __int_as_float(0xff800000u); }

__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronously; src_bytes 0 fills zeros (rows past the end) */
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

/* d (16 x 8, fp32) += a (16 x 16 bf16, row) . b (16 x 8 bf16, col) */
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A fragment (16 x 16 at row r0, column c0) of a row-major bf16 tile in shared memory, row stride LD */
template <int LD> __device__ __forceinline__ void load_a(unsigned (&a)[4], unsigned base, int r0, int c0, int lane)
{
    int r = r0 + (lane & 7) + 8 * ((lane >> 3) & 1), c = c0 + 8 * (lane >> 4);
    ldsm_x4(a, base + (unsigned)(r * LD + c) * 2);
}
/* B fragments of two 8-column blocks (n0 .. n0 + 15) for k c0 .. c0 + 15, from a tile stored [n][k]
 * (b = tile^T): b[0], b[1] for columns n0 .. n0 + 7, b[2], b[3] for n0 + 8 .. */
template <int LD> __device__ __forceinline__ void load_b_nk(unsigned (&b)[4], unsigned base, int n0, int c0, int lane)
{
    int n = n0 + (lane & 7) + 8 * (lane >> 4), c = c0 + 8 * ((lane >> 3) & 1);
    ldsm_x4(b, base + (unsigned)(n * LD + c) * 2);
}
/* the same from a tile stored [k][n] (rows k0 .. k0 + 15, columns n0 .. n0 + 15), transposed on load */
template <int LD> __device__ __forceinline__ void load_b_kn(unsigned (&b)[4], unsigned base, int k0, int n0, int lane)
{
    int k = k0 + (lane & 7) + 8 * ((lane >> 3) & 1), n = n0 + 8 * (lane >> 4);
    ldsm_x4_t(b, base + (unsigned)(k * LD + n) * 2);
}

/* rows [r0, r0 + 64) of a bf16 [B S, W] matrix, columns col .. col + HD - 1, into a [64][HD + 8] tile;
 * rows at or past `rows` are zeros. 128 threads, 16 bytes each per step. */
template <int HD> __device__ __forceinline__ void load_tile(unsigned dst, const unsigned short *src, long long W,
                                                            long long r0, long long rows, long long col, int nrows = ROWS)
{
    constexpr int LD = HD + 8, CHUNKS = HD / 8;
    for (int c = threadIdx.x; c < nrows * CHUNKS; c += THREADS) {
        int r = c / CHUNKS, k = c % CHUNKS * 8;
        bool in = r0 + r < rows;
        const unsigned short *p = src + (in ? (r0 + r) * W + col + k : 0);
        cp_async16(dst + (unsigned)(r * LD + k) * 2, p, in ? 16 : 0);
    }
}

/* segment-aware visibility (the reference's seg_sees; seg nullptr: always) */
__device__ __forceinline__ bool seg_ok(const int *seg, long long row, long long i, long long j)
{
    if (!seg)
        return true;
    int si = seg[row + i];
    return si >= 0 ? seg[row + j] == si : i == j;
}

/* ---- fp32 -> bf16, N elements (N % 8 == 0): 16-byte stores, 32-byte loads */
template <long long N> __device__ void to_bf16(unsigned short *dst, const float *src)
{
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < N;
         i += (long long)gridDim.x * blockDim.x * 8) {
        float4 a = *(const float4 *)(src + i), b = *(const float4 *)(src + i + 4);
        uint4 o;
        o.x = pack_bf16x2(a.x, a.y);
        o.y = pack_bf16x2(a.z, a.w);
        o.z = pack_bf16x2(b.x, b.y);
        o.w = pack_bf16x2(b.z, b.w);
        *(uint4 *)(dst + i) = o;
    }
}

/* ---- forward: one block per (b, h, 64 queries), heaviest causal tiles first */
template <long long B, long long S, int H, int KV, int HD, bool CAUSAL>
__device__ void fwd(long long item, float *o, float *lse2, const unsigned short *q, const unsigned short *k, const unsigned short *v,
                    const int *seg)
{
    constexpr int LD = HD + 8, NB = ROWS / 8, HB = HD / 8;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, QTILES = (S + ROWS - 1) / ROWS;
    extern __shared__ __align__(16) unsigned short attn_smem[];
    unsigned short *qs = attn_smem, *ks = attn_smem + ROWS * LD, *vs = ks + 2 * ROWS * LD;
    const unsigned qb = smem_u32(qs), kb = smem_u32(ks), vb = smem_u32(vs);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD);

    long long qt = QTILES - 1 - item / (B * H); /* the heaviest causal tiles first */
    int h = (int)(item % H);
    long long b = item / H % B;
    int kvh = h / (H / KV);
    long long q0 = qt * ROWS, row = b * S;
    long long kend = CAUSAL ? (q0 + ROWS < S ? q0 + ROWS : S) : S;
    int ntiles = (int)((kend + ROWS - 1) / ROWS);

    load_tile<HD>(qb, q + row * WQ, WQ, q0, S, (long long)h * HD);
    load_tile<HD>(kb, k + row * WK, WK, 0, S, (long long)kvh * HD);
    load_tile<HD>(vb, v + row * WK, WK, 0, S, (long long)kvh * HD);
    cp_async_commit();

    float acc[HB][4];
#pragma unroll
    for (int n = 0; n < HB; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m[2] = {neg_inff(), neg_inff()}, l[2] = {0.f, 0.f};
    const long long i0 = q0 + warp * 16 + g; /* this thread's rows: i0, i0 + 8 */

    for (int jt = 0; jt < ntiles; jt++) {
        const int buf = jt & 1;
        if (jt + 1 < ntiles) {
            load_tile<HD>(kb + (unsigned)((buf ^ 1) * ROWS * LD * 2), k + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                          (long long)kvh * HD);
            load_tile<HD>(vb + (unsigned)((buf ^ 1) * ROWS * LD * 2), v + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                          (long long)kvh * HD);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const unsigned kt = kb + (unsigned)(buf * ROWS * LD * 2), vt = vb + (unsigned)(buf * ROWS * LD * 2);
        const long long j0 = (long long)jt * ROWS;

        float s[NB][4];
#pragma unroll
        for (int n = 0; n < NB; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            unsigned a[4];
            load_a<LD>(a, qb, warp * 16, kk * 16, lane);
#pragma unroll
            for (int n = 0; n < NB; n += 2) {
                unsigned bb[4];
                load_b_nk<LD>(bb, kt, n * 8, kk * 16, lane);
                mma(s[n], a, bb[0], bb[1]);
                mma(s[n + 1], a, bb[2], bb[3]);
            }
        }
        /* mask, scale (base 2), running max */
        const bool edge = seg || j0 + ROWS > S || (CAUSAL && j0 + ROWS - 1 > q0);
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                long long i = i0 + 8 * (e >> 1), j = j0 + n * 8 + 2 * t + (e & 1);
                float x = s[n][e] * sl2;
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) || !seg_ok(seg, row, i, j)))
                    x = neg_inff();
                s[n][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float base = mx[r] == neg_inff() ? 0.f : mx[r];
            alpha[r] = exp2f(m[r] - base);   /* m = -inf: 0 */
            m[r] = mx[r];
            mx[r] = base;
        }
        unsigned p[NB / 2][4];
#pragma unroll
        for (int n = 0; n < NB; n++) {
            float e0 = exp2f(s[n][0] - mx[0]), e1 = exp2f(s[n][1] - mx[0]);
            float e2 = exp2f(s[n][2] - mx[1]), e3 = exp2f(s[n][3] - mx[1]);
            rs[0] += e0 + e1;
            rs[1] += e2 + e3;
            p[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(e0, e1);
            p[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(e2, e3);
        }
        l[0] = l[0] * alpha[0] + rs[0];
        l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
        for (int n = 0; n < HB; n++) {
            acc[n][0] *= alpha[0];
            acc[n][1] *= alpha[0];
            acc[n][2] *= alpha[1];
            acc[n][3] *= alpha[1];
        }
        /* o += P v: P's 16 x 64 as four 16 x 16 A fragments, v [key][hd] transposed on load */
#pragma unroll
        for (int kk = 0; kk < NB / 2; kk++) {
#pragma unroll
            for (int n = 0; n < HB; n += 2) {
                unsigned bb[4];
                load_b_kn<LD>(bb, vt, kk * 16, n * 8, lane);
                mma(acc[n], p[kk], bb[0], bb[1]);
                mma(acc[n + 1], p[kk], bb[2], bb[3]);
            }
        }
        __syncthreads(); /* the buffer is refilled next iteration */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = i0 + 8 * r;
        if (i >= S)
            continue;
        float inv = 1.f / l[r];
        float *out = o + (row + i) * WQ + (long long)h * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HB; n++)
            *(float2 *)(out + n * 8) = make_float2(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
        if (t == 0)
            lse2[((b * H + h) * S) + i] = m[r] + log2f(l[r]);
    }
}

/* ---- backward preparation: dO -> bf16 and D = rowsum(dO o) per (b, s, h); one group of HD / 8 threads
 * per row, 8 elements each */
template <long long B, long long S, int H, int HD>
__device__ void bwd_prep(unsigned short *dob, float *dsum, const float *dout, const float *o)
{
    constexpr int G = HD / 8;
    constexpr long long ROWS_ALL = B * S * H;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < ROWS_ALL * G;
         base += (long long)gridDim.x * blockDim.x) { /* whole warps iterate together (the shuffles) */
        long long idx = base + threadIdx.x;
        bool in = idx < ROWS_ALL * G;
        idx = in ? idx : 0;
        long long r = idx / G; /* (b s) h */
        int c = (int)(idx % G) * 8;
        const float *pd = dout + r * HD + c, *po = o + r * HD + c;
        float4 d0 = *(const float4 *)pd, d1 = *(const float4 *)(pd + 4);
        float4 o0 = *(const float4 *)po, o1 = *(const float4 *)(po + 4);
        uint4 u;
        u.x = pack_bf16x2(d0.x, d0.y);
        u.y = pack_bf16x2(d0.z, d0.w);
        u.z = pack_bf16x2(d1.x, d1.y);
        u.w = pack_bf16x2(d1.z, d1.w);
        if (in)
            *(uint4 *)(dob + r * HD + c) = u;
        float acc = d0.x * o0.x + d0.y * o0.y + d0.z * o0.z + d0.w * o0.w + d1.x * o1.x + d1.y * o1.y +
                    d1.z * o1.z + d1.w * o1.w;
#pragma unroll
        for (int off = 1; off < G; off <<= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (in && c == 0) {
            long long bs = r / H, hh = r % H, bb = bs / S, s = bs % S;
            dsum[(bb * H + hh) * S + s] = acc;
        }
    }
}

/* ---- backward, dq: one block per (b, h, 64 queries), over the key tiles; dS = P (dP - D),
 * dq = dS k / sqrt(HD) */
template <long long B, long long S, int H, int KV, int HD, bool CAUSAL>
__device__ void bwd_dq(long long item, float *out, const unsigned short *q, const unsigned short *k, const unsigned short *v,
                       const unsigned short *dob, const float *lse2, const float *dsum, const int *seg)
{
    constexpr int LD = HD + 8, NB = ROWS / 8, HB = HD / 8;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    constexpr long long QTILES = (S + ROWS - 1) / ROWS;
    extern __shared__ __align__(16) unsigned short attn_smem[];
    unsigned short *qs = attn_smem, *dos = qs + ROWS * LD, *ks = dos + ROWS * LD, *vs = ks + 2 * ROWS * LD;
    const unsigned qb = smem_u32(qs), dob_s = smem_u32(dos), kb = smem_u32(ks), vb = smem_u32(vs);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);

    long long qt = QTILES - 1 - item / (B * H); /* the heaviest causal tiles first */
    int h = (int)(item % H);
    long long b = item / H % B;
    int kvh = h / (H / KV);
    long long q0 = qt * ROWS, row = b * S;
    long long kend = CAUSAL ? (q0 + ROWS < S ? q0 + ROWS : S) : S;
    int ntiles = (int)((kend + ROWS - 1) / ROWS);

    load_tile<HD>(qb, q + row * WQ, WQ, q0, S, (long long)h * HD);
    load_tile<HD>(dob_s, dob + row * WQ, WQ, q0, S, (long long)h * HD);
    load_tile<HD>(kb, k + row * WK, WK, 0, S, (long long)kvh * HD);
    load_tile<HD>(vb, v + row * WK, WK, 0, S, (long long)kvh * HD);
    cp_async_commit();

    const long long i0 = q0 + warp * 16 + g;
    float lse[2], dd[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = i0 + 8 * r;
        lse[r] = i < S ? lse2[(b * H + h) * S + i] : 0.f;
        dd[r] = i < S ? dsum[(b * H + h) * S + i] : 0.f;
    }
    float dq[HB][4];
#pragma unroll
    for (int n = 0; n < HB; n++)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

    for (int jt = 0; jt < ntiles; jt++) {
        const int buf = jt & 1;
        if (jt + 1 < ntiles) {
            load_tile<HD>(kb + (unsigned)((buf ^ 1) * ROWS * LD * 2), k + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                          (long long)kvh * HD);
            load_tile<HD>(vb + (unsigned)((buf ^ 1) * ROWS * LD * 2), v + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                          (long long)kvh * HD);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const unsigned kt = kb + (unsigned)(buf * ROWS * LD * 2), vt = vb + (unsigned)(buf * ROWS * LD * 2);
        const long long j0 = (long long)jt * ROWS;
        float s[NB][4], dp[NB][4];
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            unsigned a[4], ad[4];
            load_a<LD>(a, qb, warp * 16, kk * 16, lane);
            load_a<LD>(ad, dob_s, warp * 16, kk * 16, lane);
#pragma unroll
            for (int n = 0; n < NB; n += 2) {
                unsigned bb[4];
                load_b_nk<LD>(bb, kt, n * 8, kk * 16, lane);
                mma(s[n], a, bb[0], bb[1]);
                mma(s[n + 1], a, bb[2], bb[3]);
                load_b_nk<LD>(bb, vt, n * 8, kk * 16, lane);
                mma(dp[n], ad, bb[0], bb[1]);
                mma(dp[n + 1], ad, bb[2], bb[3]);
            }
        }
        const bool edge = seg || j0 + ROWS > S || (CAUSAL && j0 + ROWS - 1 > q0);
        unsigned ds[NB / 2][4];
#pragma unroll
        for (int n = 0; n < NB; n++) {
            float x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                long long i = i0 + 8 * (e >> 1), j = j0 + n * 8 + 2 * t + (e & 1);
                float pij = exp2f(s[n][e] * sl2 - lse[e >> 1]);
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) || !seg_ok(seg, row, i, j)))
                    pij = 0.f;
                x[e] = pij * (dp[n][e] - dd[e >> 1]);
            }
            ds[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
            ds[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
        }
        /* dq += dS k: k [key][hd] transposed on load */
#pragma unroll
        for (int kk = 0; kk < NB / 2; kk++)
#pragma unroll
            for (int n = 0; n < HB; n += 2) {
                unsigned bb[4];
                load_b_kn<LD>(bb, kt, kk * 16, n * 8, lane);
                mma(dq[n], ds[kk], bb[0], bb[1]);
                mma(dq[n + 1], ds[kk], bb[2], bb[3]);
            }
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = i0 + 8 * r;
        if (i >= S)
            continue;
        float *dst = out + (row + i) * WP + (long long)h * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HB; n++)
            *(float2 *)(dst + n * 8) = make_float2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
    }
}

/* ---- backward, dk and dv: one block per (b, kv head, 64 keys), over the group's heads and the query
 * tiles (QR queries at a time); each warp's 16 keys: S^T = k q^T, P^T from lse2, dP^T = v dO^T,
 * dS^T = P^T (dP^T - D), dv += P^T dO, dk += dS^T q / sqrt(HD) */
template <long long B, long long S, int H, int KV, int HD, bool CAUSAL, int QR>
__device__ void bwd_dkv(long long item, float *out, const unsigned short *q, const unsigned short *k, const unsigned short *v,
                        const unsigned short *dob, const float *lse2, const float *dsum, const int *seg)
{
    constexpr int LD = HD + 8, NQ = QR / 8, HB = HD / 8, REP = H / KV;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    static_assert(ROWS % QR == 0 && QR % 16 == 0, "query tiles divide the key tile");
    extern __shared__ __align__(16) unsigned short attn_smem[];
    unsigned short *ks = attn_smem, *vs = ks + ROWS * LD, *qs = vs + ROWS * LD, *dos = qs + 2 * QR * LD;
    float *st = (float *)(dos + 2 * QR * LD); /* [2][2][QR]: lse2, D per buffer */
    int *sq = (int *)(st + 4 * QR);           /* [2][QR] query segment ids */
    const unsigned kb = smem_u32(ks), vb = smem_u32(vs), qb = smem_u32(qs), dob_s = smem_u32(dos);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);

    long long kt = item / (B * KV); /* causal: early key tiles see the most queries, so go first */
    int kvh = (int)(item % KV);
    long long b = item / KV % B;
    long long j0 = kt * ROWS, row = b * S;
    long long istart = CAUSAL ? j0 : 0;
    int nqt = (int)((S - istart + QR - 1) / QR), total = REP * nqt;

    load_tile<HD>(kb, k + row * WK, WK, j0, S, (long long)kvh * HD);
    load_tile<HD>(vb, v + row * WK, WK, j0, S, (long long)kvh * HD);
    auto stage = [&](int it, int buf) {
        int h = kvh * REP + it / nqt;
        long long i0 = istart + (long long)(it % nqt) * QR;
        load_tile<HD>(qb + (unsigned)(buf * QR * LD * 2), q + row * WQ, WQ, i0, S, (long long)h * HD, QR);
        load_tile<HD>(dob_s + (unsigned)(buf * QR * LD * 2), dob + row * WQ, WQ, i0, S, (long long)h * HD, QR);
        for (int x = threadIdx.x; x < QR; x += THREADS) {
            long long i = i0 + x;
            st[buf * 2 * QR + x] = i < S ? lse2[(b * H + h) * S + i] : 0.f;
            st[buf * 2 * QR + QR + x] = i < S ? dsum[(b * H + h) * S + i] : 0.f;
            sq[buf * QR + x] = seg && i < S ? seg[row + i] : 0;
        }
    };
    stage(0, 0);
    cp_async_commit();

    const long long jw = j0 + warp * 16 + g; /* this thread's keys: jw, jw + 8 */
    int segk[2] = {0, 0};
    if (seg) {
        segk[0] = jw < S ? seg[row + jw] : 0;
        segk[1] = jw + 8 < S ? seg[row + jw + 8] : 0;
    }
    float dk[HB][4], dv[HB][4];
#pragma unroll
    for (int n = 0; n < HB; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dk[n][e] = dv[n][e] = 0.f;

    for (int it = 0; it < total; it++) {
        const int buf = it & 1;
        __syncthreads(); /* the other buffer's last readers are done */
        if (it + 1 < total)
            stage(it + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const unsigned qt_ = qb + (unsigned)(buf * QR * LD * 2), dt = dob_s + (unsigned)(buf * QR * LD * 2);
        const float *lse = st + buf * 2 * QR, *dd = lse + QR;
        const int *sg = sq + buf * QR;
        const long long i0 = istart + (long long)(it % nqt) * QR;
        float s[NQ][4], dp[NQ][4];
#pragma unroll
        for (int n = 0; n < NQ; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            unsigned a[4], av[4];
            load_a<LD>(a, kb, warp * 16, kk * 16, lane);
            load_a<LD>(av, vb, warp * 16, kk * 16, lane);
#pragma unroll
            for (int n = 0; n < NQ; n += 2) {
                unsigned bb[4];
                load_b_nk<LD>(bb, qt_, n * 8, kk * 16, lane);
                mma(s[n], a, bb[0], bb[1]);
                mma(s[n + 1], a, bb[2], bb[3]);
                load_b_nk<LD>(bb, dt, n * 8, kk * 16, lane);
                mma(dp[n], av, bb[0], bb[1]);
                mma(dp[n + 1], av, bb[2], bb[3]);
            }
        }
        const bool edge = seg || i0 + QR > S || jw - g + 16 > S || (CAUSAL && i0 < j0 + ROWS);
        unsigned pt[NQ / 2][4], dst[NQ / 2][4];
#pragma unroll
        for (int n = 0; n < NQ; n++) {
            float p[4], x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ci = n * 8 + 2 * t + (e & 1);
                long long j = jw + 8 * (e >> 1), i = i0 + ci;
                float pij = exp2f(s[n][e] * sl2 - lse[ci]);
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) ||
                             (seg && (sg[ci] >= 0 ? segk[e >> 1] != sg[ci] : i != j))))
                    pij = 0.f;
                p[e] = pij;
                x[e] = pij * (dp[n][e] - dd[ci]);
            }
            pt[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(p[0], p[1]);
            pt[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(p[2], p[3]);
            dst[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
            dst[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
        }
        /* dv += P^T dO, dk += dS^T q: dO, q [query][hd] transposed on load */
#pragma unroll
        for (int kk = 0; kk < NQ / 2; kk++)
#pragma unroll
            for (int n = 0; n < HB; n += 2) {
                unsigned bb[4];
                load_b_kn<LD>(bb, dt, kk * 16, n * 8, lane);
                mma(dv[n], pt[kk], bb[0], bb[1]);
                mma(dv[n + 1], pt[kk], bb[2], bb[3]);
                load_b_kn<LD>(bb, qt_, kk * 16, n * 8, lane);
                mma(dk[n], dst[kk], bb[0], bb[1]);
                mma(dk[n + 1], dst[kk], bb[2], bb[3]);
            }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long j = jw + 8 * r;
        if (j >= S)
            continue;
        float *dkp = out + (row + j) * WP + WQ + (long long)kvh * HD + 2 * t, *dvp = dkp + WK;
#pragma unroll
        for (int n = 0; n < HB; n++) {
            *(float2 *)(dkp + n * 8) = make_float2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
            *(float2 *)(dvp + n * 8) = make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}

} /* namespace attn */
} /* namespace moec */
