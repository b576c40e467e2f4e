/* prelude.cuh - the device library every generated kernels.cu starts with.
 *
 * The per-node kernels that moec emits bind their shapes, strides and
 * attributes as compile-time constants and do their work either inline
 * (elementwise ops) or by calling one of the templates below (GEMM tiles,
 * grouped GEMMs, attention, routing). Each template is the GPU counterpart of
 * a function in runtime/cpu/kernels.inc and says how it differs (summation
 * order only). Plain code, written for correctness: register-blocked
 * shared-memory GEMM tiles whose per-element fp32 sums are those of the
 * reference 16 x 16 tile bit for bit, double where kernels.inc uses double
 * (norms, softmax, losses, attention), deterministic reductions (fixed trees,
 * no floating-point atomics). A faster kernel for an op replaces its emitter
 * in codegen/cuda.c, not this file.
 *
 * Every template that synchronises must be called by all threads of the
 * block with the same arguments; blockDim.x is the NT (or 256) it names. */

#define MOEC_FOR(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (long long)(n); \
         i += (long long)gridDim.x * blockDim.x)

namespace moec {

__device__ __forceinline__ double neg_inf() { return -__longlong_as_double(0x7ff0000000000000ll); }

/* The index in a param's working copy of its element i (plan.h PlanBuf.glu_f): i itself, or for a
 * gate_up weight [E, 2F, K] with glu_f = F, rows interleaved in blocks of 128 (gate block t at rows
 * 256t .., up block t at 256t + 128 ..). */
__device__ __forceinline__ long long glu_index(long long i, long long F, long long K)
{
    if (F == 0)
        return i;
    const long long per = 2 * F * K, e = i / per, rem = i % per, r = rem / K, k = rem % K;
    const long long rr = r < F ? 256 * (r / 128) + r % 128 : 256 * ((r - F) / 128) + 128 + (r - F) % 128;
    return e * per + rr * K + k;
}

/* fp32 -> bf16 bits, round to nearest even, NaN stays a (quiet) NaN: the rounding of every bf16 value
 * moec stores (the params' working copies, the fast kernels' operands), and of the CPU's bf16 */
__device__ __forceinline__ unsigned short bf16_bits(float x)
{
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

/* ---------------------------------------------------------- activations
 * as kernels.inc: in double */
__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ double silu(double x) { return x * sigmoid(x); }
__device__ __forceinline__ double silu_d(double x)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}
__device__ __forceinline__ double gelu(double x)
{
    const double c = 0.7978845608028654; /* sqrt(2 / pi) */
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
__device__ __forceinline__ double gelu_d(double x)
{
    const double c = 0.7978845608028654;
    double u = c * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

/* ---------------------------------------------------------- reductions
 * Block-wide sum / max of doubles; every thread gets the result. A fixed
 * tree (warp shuffles, then the warps' partials in order), so the result
 * does not depend on timing. */
template <int NT> __device__ double block_sum(double v)
{
    __shared__ double part[NT / 32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads(); /* a previous call may still be reading part */
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < NT / 32; w++)
        s += part[w];
    return s;
}

template <int NT> __device__ double block_max(double v)
{
    __shared__ double part[NT / 32];
    for (int o = 16; o > 0; o >>= 1) {
        double u = __shfl_down_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    double m = part[0];
    for (int w = 1; w < NT / 32; w++)
        m = part[w] > m ? part[w] : m;
    return m;
}

/* ---------------------------------------------------------- GEMM tiles
 * Every GEMM of the generated kernels computes each output element with one
 * fixed sequence of fp32 operations, whatever the tile shape or the caller:
 *
 *     acc = 0.0f;
 *     for (k = 0; k < K16; k++)        K16 = K rounded up to a multiple of 16
 *         acc = fmaf(a_k, b_k, acc);   a_k = A[m, k], b_k = B[k, n] for k < K,
 *                                      both 0.0f past K
 *
 * (explicit __fmaf_rn, so no contraction choice of the compiler can differ).
 * The zero padding is part of the sequence: fmaf(0, 0, -0.0f) is +0.0f, so
 * dropping it would change the sign of a zero result. Hence every tile
 * below, of any size, gives bit-identical results, and a fused kernel and
 * the unfused chain that use them agree bit for bit. */

struct GemmSmem {
    float a[16][17];
    float b[16][17];
};

/* The reference tile: one 16 x 16 tile of C = A B with 256 threads, one
 * output each:
 *   C[m * ldc + n] = sum_k A[m * sam + k * sak] * B[k * sbk + n * sbn]
 * for m < mlim, n < nlim, k < K; A, B, C point at the tile's origin, k
 * ascending in steps of 16 (zero-padded past K). The GEMMs use it for
 * their 16 x 16 tiles (launches with small grids, GemmTile<16> below) and
 * gemm_tile otherwise; the register-blocked tiles are checked against it
 * (tests/codegen/tile.test, bit for bit). */
__device__ void gemm_tile16(float *C, long long ldc, const float *A, long long sam, long long sak, const float *B,
                            long long sbk, long long sbn, long long mlim, long long nlim, long long K, GemmSmem &sm)
{
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    float acc = 0.0f;
    for (long long k0 = 0; k0 < K; k0 += 16) {
        sm.a[ty][tx] = ty < mlim && k0 + tx < K ? A[ty * sam + (k0 + tx) * sak] : 0.0f;
        sm.b[ty][tx] = k0 + ty < K && tx < nlim ? B[(k0 + ty) * sbk + tx * sbn] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < 16; kk++)
            acc = __fmaf_rn(sm.a[ty][kk], sm.b[kk][tx], acc);
        __syncthreads();
    }
    if (ty < mlim && tx < nlim)
        C[ty * ldc + tx] = acc;
}

/* Register-blocked tiles: 256 threads as a TY x TX grid (TX = 256 / TY),
 * a (TY RM) x (TX RN) tile of C, thread (ty, tx) = (tid / TX, tid % TX)
 * computing the RM x RN outputs at rows ty RM + i, columns tx RN + j. Per
 * step of 16 k, A [TY RM x 16] and B [16 x TX RN] go to shared memory (A
 * transposed, so both are read as rows: float4 / float2 loads); the next
 * step's values are loaded into registers while this one computes. Global
 * loads run along whichever of A's (B's) strides is 1, so a warp reads
 * consecutive floats. Each output's sum is the sequence above: k ascending
 * from 0, zeros past K up to the next multiple of 16, zeros (never read
 * memory) for rows or columns outside the tile, one __fmaf_rn per k.
 * 64 x 64 (TY 16, RM = RN = 4) and 32 x 32 (RM = RN = 2) for the GEMMs;
 * 16 x 128 (TY 4, RM 4, RN 2) for the fused MLP's 16-row tiles. TY RM and
 * TX RN are multiples of 16. */
template <int RM, int RN, int TY = 16> struct alignas(16) TileSmem {
    static_assert(TY * RM % 16 == 0 && 256 / TY * RN % 16 == 0, "tile sides must be multiples of 16");
    float a[16][TY * RM + 4];       /* a[k][m] */
    float b[16][256 / TY * RN + 4]; /* b[k][n] */
};

template <int R> __device__ __forceinline__ void tile_lds(float (&v)[R], const float *p)
{
    if constexpr (R == 4) {
        float4 t = *reinterpret_cast<const float4 *>(p);
        v[0] = t.x;
        v[1] = t.y;
        v[2] = t.z;
        v[3] = t.w;
    } else if constexpr (R == 2) {
        float2 t = *reinterpret_cast<const float2 *>(p);
        v[0] = t.x;
        v[1] = t.y;
    } else {
#pragma unroll
        for (int r = 0; r < R; r++)
            v[r] = p[r];
    }
}

template <int RM, int RN, int TY = 16>
__device__ __forceinline__ void gemm_tile(float *C, long long ldc, const float *A, long long sam, long long sak,
                                          const float *B, long long sbk, long long sbn, long long mlim,
                                          long long nlim, long long K, TileSmem<RM, RN, TY> &sm)
{
    constexpr int TX = 256 / TY, BM = TY * RM, BN = TX * RN, QA = BM / 16, QB = BN / 16;
    const int tid = threadIdx.x, ty = tid / TX, tx = tid % TX;
    /* this thread's share of the loads: element q of A is (am[q], ak[q]) of the tile, of B (bk[q], bn[q]) */
    int am[QA], ak[QA], bk[QB], bn[QB];
#pragma unroll
    for (int q = 0; q < QA; q++) {
        int e = tid + 256 * q;
        am[q] = sak == 1 ? e >> 4 : e % BM;
        ak[q] = sak == 1 ? e & 15 : e / BM;
    }
#pragma unroll
    for (int q = 0; q < QB; q++) {
        int e = tid + 256 * q;
        bn[q] = sbn == 1 ? e % BN : e >> 4;
        bk[q] = sbn == 1 ? e / BN : e & 15;
    }
    float acc[RM][RN], ra[QA], rb[QB];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < RN; j++)
            acc[i][j] = 0.0f;
    if (K > 0) {
#pragma unroll
        for (int q = 0; q < QA; q++)
            ra[q] = am[q] < mlim && ak[q] < K ? A[am[q] * sam + ak[q] * sak] : 0.0f;
#pragma unroll
        for (int q = 0; q < QB; q++)
            rb[q] = bk[q] < K && bn[q] < nlim ? B[bk[q] * sbk + bn[q] * sbn] : 0.0f;
    }
    for (long long k0 = 0; k0 < K; k0 += 16) {
#pragma unroll
        for (int q = 0; q < QA; q++)
            sm.a[ak[q]][am[q]] = ra[q];
#pragma unroll
        for (int q = 0; q < QB; q++)
            sm.b[bk[q]][bn[q]] = rb[q];
        __syncthreads();
        long long k1 = k0 + 16;
        if (k1 < K) {
#pragma unroll
            for (int q = 0; q < QA; q++)
                ra[q] = am[q] < mlim && k1 + ak[q] < K ? A[am[q] * sam + (k1 + ak[q]) * sak] : 0.0f;
#pragma unroll
            for (int q = 0; q < QB; q++)
                rb[q] = k1 + bk[q] < K && bn[q] < nlim ? B[(k1 + bk[q]) * sbk + bn[q] * sbn] : 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            float a[RM], b[RN];
            tile_lds<RM>(a, &sm.a[kk][ty * RM]);
            tile_lds<RN>(b, &sm.b[kk][tx * RN]);
#pragma unroll
            for (int i = 0; i < RM; i++)
#pragma unroll
                for (int j = 0; j < RN; j++)
                    acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < RN; j++)
            if (ty * RM + i < mlim && tx * RN + j < nlim)
                C[(ty * RM + i) * ldc + tx * RN + j] = acc[i][j];
}

/* The GEMMs' tiles: T x T outputs per block, T = 64 (TY 16, RM = RN = 4:
 * the default), 32 (RM = RN = 2) or 16 (gemm_tile16). The emitters pick T
 * per launch: 64 unless its grid has fewer blocks than CG_GEMM_MIN_BLOCKS
 * (codegen/cuda_internal.h), then the largest smaller T that reaches it,
 * else 16. Every T computes the same sequence per output, so the choice
 * changes the speed, never a bit of the result. */
constexpr int GEMM_T = 64;
template <int T> struct GemmTile {
    static_assert(T == 32 || T == 64, "GEMM tiles are 16, 32 or 64");
    typedef TileSmem<T / 16, T / 16> Smem;
    static __device__ __forceinline__ void run(float *C, long long ldc, const float *A, long long sam, long long sak,
                                               const float *B, long long sbk, long long sbn, long long mlim,
                                               long long nlim, long long K, Smem &sm)
    {
        gemm_tile<T / 16, T / 16>(C, ldc, A, sam, sak, B, sbk, sbn, mlim, nlim, K, sm);
    }
};
template <> struct GemmTile<16> {
    typedef GemmSmem Smem;
    static __device__ __forceinline__ void run(float *C, long long ldc, const float *A, long long sam, long long sak,
                                               const float *B, long long sbk, long long sbn, long long mlim,
                                               long long nlim, long long K, Smem &sm)
    {
        gemm_tile16(C, ldc, A, sam, sak, B, sbk, sbn, mlim, nlim, K, sm);
    }
};

/* C [M, N] = A B over all T x T tiles of the grid (grid-stride over tiles). M and K are arguments: one of
 * them is the row count, which the kernel takes at run time (docs/decisions.md 62); a caller passing a
 * constant gets it folded in, as a template argument was (inlined). */
template <long long N, long long SAM, long long SAK, long long SBK, long long SBN, int T = GEMM_T>
__device__ __forceinline__ void gemm(float *C, const float *A, const float *B, long long M, long long K)
{
    constexpr long long TN = (N + T - 1) / T;
    const long long TM = (M + T - 1) / T;
    __shared__ typename GemmTile<T>::Smem sm;
    for (long long t = blockIdx.x; t < TM * TN; t += gridDim.x) {
        long long m0 = t / TN * T, n0 = t % TN * T;
        GemmTile<T>::run(C + m0 * N + n0, N, A + m0 * SAM, SAM, SAK, B + n0 * SBN, SBK, SBN, M - m0 < T ? M - m0 : T,
                         N - n0 < T ? N - n0 : T, K, sm);
    }
}

/* The same with the tile T (64, 32 or 16) an argument: the emitters pick it from the grid's block count,
 * which depends on the row count, an argument too (docs/decisions.md 62). A uniform branch; each T's shared
 * tile its own. */
template <long long N, long long SAM, long long SAK, long long SBK, long long SBN>
__device__ __forceinline__ void gemm_tiled(float *C, const float *A, const float *B, long long M, long long K, int tile)
{
    if (tile == 64)
        gemm<N, SAM, SAK, SBK, SBN, 64>(C, A, B, M, K);
    else if (tile == 32)
        gemm<N, SAM, SAK, SBK, SBN, 32>(C, A, B, M, K);
    else
        gemm<N, SAM, SAK, SBK, SBN, 16>(C, A, B, M, K);
}

/* ---------------------------------------------------------- expert groups
 * Rows of a grouped tensor: group e < E holds rows [start[e], start[e+1])
 * (the split sizes added up); rows from start[E] to R are padding (expert
 * parallelism's receive capacity), group E, which reads and writes zeros.
 * Each group is cut into tiles of T rows; tile[e] is the first tile of
 * group e and tile[E + 1] the number of tiles, at most R / T + E + 1. */
template <int E> struct Groups {
    long long start[E + 2];
    long long tile[E + 2];
};

template <int E, int T> __device__ void load_groups(Groups<E> &gr, const int *splits, long long R)
{
    __syncthreads(); /* a previous use of gr may still be reading it */
    if (threadIdx.x == 0) {
        gr.start[0] = 0;
        for (int e = 0; e < E; e++)
            gr.start[e + 1] = gr.start[e] + splits[e];
        if (gr.start[E] > R)
            __trap(); /* split sizes past the rows: the CPU backend stops here too */
        gr.start[E + 1] = R;
        gr.tile[0] = 0;
        for (int e = 0; e <= E; e++)
            gr.tile[e + 1] = gr.tile[e] + (gr.start[e + 1] - gr.start[e] + T - 1) / T;
    }
    __syncthreads();
}

/* The group of row tile t < tile[E + 1], its first row and its row count. */
template <int E, int T> __device__ int group_tile(const Groups<E> &gr, long long t, long long *row0, long long *rows)
{
    int e = 0;
    while (gr.tile[e + 1] <= t)
        e++;
    *row0 = gr.start[e] + (t - gr.tile[e]) * T;
    long long left = gr.start[e + 1] - *row0;
    *rows = left < T ? left : T;
    return e;
}

/* grouped_linear (and its dx): C [R, N] with rows of group e times the
 * group's weight: C[r, n] = sum_k A[r, k] B[e * SBE + k * SBK + n * SBN];
 * padding rows are zero. T-row tiles of each group times T columns (T as
 * for gemm). kernels.inc: grouped_rows / grouped_dx_rows. */
template <int E, long long K, long long N, long long SBE, long long SBK, long long SBN, int T = GEMM_T>
__device__ void grouped_gemm(float *C, const float *A, const float *B, const int *splits, long long R)
{
    constexpr long long TN = (N + T - 1) / T;
    __shared__ Groups<E> gr;
    __shared__ typename GemmTile<T>::Smem sm;
    load_groups<E, T>(gr, splits, R);
    for (long long t = blockIdx.x; t < gr.tile[E + 1] * TN; t += gridDim.x) {
        long long row0, rows, n0 = t % TN * T, nlim = N - n0 < T ? N - n0 : T;
        int e = group_tile<E, T>(gr, t / TN, &row0, &rows);
        if (e == E) {
            for (long long i = threadIdx.x; i < rows * nlim; i += blockDim.x)
                C[(row0 + i / nlim) * N + n0 + i % nlim] = 0.0f;
            continue;
        }
        GemmTile<T>::run(C + row0 * N + n0, N, A + row0 * K, K, 1, B + e * SBE + n0 * SBN, SBK, SBN, rows, nlim, K,
                         sm);
    }
}

/* grouped_gemm with the tile side a run-time argument (64, 32, else 16): the emitters pick it from the
 * row count (cg_gemm_tile), which scales with the batch, and the kernel's code must not (docs/decisions.md
 * 62). Every tile gives the same bits; the three share no shared memory (static: their sum). */
template <int E, long long K, long long N, long long SBE, long long SBK, long long SBN>
__device__ void grouped_gemm_tiled(float *C, const float *A, const float *B, const int *splits, long long R, int T)
{
    if (T == 64)
        grouped_gemm<E, K, N, SBE, SBK, SBN, 64>(C, A, B, splits, R);
    else if (T == 32)
        grouped_gemm<E, K, N, SBE, SBK, SBN, 32>(C, A, B, splits, R);
    else
        grouped_gemm<E, K, N, SBE, SBK, SBN, 16>(C, A, B, splits, R);
}

/* grouped_linear's weight gradient: dw [E, M, N], dw[e, m, n] = sum over
 * the rows r of group e of dy[r, m] x[r, n] (dy [R, M], x [R, N]); T x T
 * tiles of each expert's dw (T as for gemm). kernels.inc: grouped_dw_items. */
template <int E, long long M, long long N, int T = GEMM_T>
__device__ void grouped_gemm_wgrad(float *dw, const float *dy, const float *x, const int *splits, long long R)
{
    constexpr long long TM = (M + T - 1) / T, TN = (N + T - 1) / T;
    __shared__ Groups<E> gr;
    __shared__ typename GemmTile<T>::Smem sm;
    load_groups<E, T>(gr, splits, R);
    for (long long t = blockIdx.x; t < E * TM * TN; t += gridDim.x) {
        long long e = t / (TM * TN), m0 = t / TN % TM * T, n0 = t % TN * T;
        GemmTile<T>::run(dw + e * M * N + m0 * N + n0, N, dy + gr.start[e] * M + m0, 1, M, x + gr.start[e] * N + n0, N,
                         1, M - m0 < T ? M - m0 : T, N - n0 < T ? N - n0 : T, gr.start[e + 1] - gr.start[e], sm);
    }
}

/* quantize_mxfp8_grouped: colwise blocks of 32 rows inside each expert
 * group of x [R, C] (a group's last block zero-padded); padding rows are
 * zero. kernels.inc: fq_grouped. One thread per (block of rows, column). */
template <int E, long long C>
__device__ void quantize_grouped(float *y, const float *x, const int *splits, long long R)
{
    __shared__ Groups<E> gr;
    load_groups<E, 32>(gr, splits, R);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < gr.tile[E + 1] * C;
         i += (long long)gridDim.x * blockDim.x) {
        long long row0, rows, c = i % C;
        int e = group_tile<E, 32>(gr, i / C, &row0, &rows);
        if (e == E) {
            for (long long r = 0; r < rows; r++)
                y[(row0 + r) * C + c] = 0.0f;
        } else {
            moec_mx_fq_block(x + row0 * C + c, y + row0 * C + c, C, (int)rows);
        }
    }
}

/* ---------------------------------------------------------- the fused expert MLP
 * Its GEMMs are register-blocked 16 x 128 tiles (4 x 2 per thread) over
 * the block's 16-row tile: the same per-element sequence as every GEMM
 * tile. */
constexpr int MLP_TN = 128;
typedef TileSmem<4, MLP_TN / 64, 4> MlpTileSmem;

/* grouped_mlp: y = grouped_linear(scaled_swiglu(grouped_linear(xs, w1), p), w2)
 * for one expert group's row tile per block iteration, h and a kept in
 * workspace rows only this block touches, so the whole MLP is one launch.
 * MX (mxfp8): xs's rows and a's rows are quantized rowwise in the kernel (the
 * weights arrive quantized by the node's first launch), exactly as the
 * precision pass quantizes the unfused chain. Bit-identical to the unfused
 * grouped_linear / scaled_swiglu / quantize kernels on the GPU. */
template <int E, long long H, long long F, bool MX>
__device__ void grouped_mlp_fwd(float *y, float *h, float *a, float *qx, const float *xs, const float *w1,
                                const float *w2, const int *splits, const float *p, long long R)
{
    __shared__ Groups<E> gr;
    __shared__ MlpTileSmem sm;
    load_groups<E, 16>(gr, splits, R);
    for (long long t = blockIdx.x; t < gr.tile[E + 1]; t += gridDim.x) {
        long long row0, rows;
        int e = group_tile<E, 16>(gr, t, &row0, &rows);
        if (e == E) {
            for (long long i = threadIdx.x; i < rows * H; i += blockDim.x)
                y[row0 * H + i] = 0.0f;
            continue;
        }
        const float *x = xs;
        if (MX) {
            for (long long b = threadIdx.x; b < rows * (H / 32); b += blockDim.x)
                moec_mx_fq_block(xs + row0 * H + b * 32, qx + row0 * H + b * 32, 1, 32);
            __syncthreads();
            x = qx;
        }
        for (long long n0 = 0; n0 < 2 * F; n0 += MLP_TN)
            gemm_tile<4, MLP_TN / 64, 4>(h + row0 * 2 * F + n0, 2 * F, x + row0 * H, H, 1, w1 + e * 2 * F * H + n0 * H, 1,
                                      H, rows, 2 * F - n0 < MLP_TN ? 2 * F - n0 : MLP_TN, H, sm);
        __syncthreads();
        for (long long i = threadIdx.x; i < rows * F; i += blockDim.x) {
            long long r = row0 + i / F, f = i % F;
            a[r * F + f] = (float)(silu(h[r * 2 * F + f]) * h[r * 2 * F + F + f] * p[r]);
        }
        __syncthreads();
        if (MX) {
            for (long long b = threadIdx.x; b < rows * (F / 32); b += blockDim.x)
                moec_mx_fq_block(a + row0 * F + b * 32, a + row0 * F + b * 32, 1, 32);
            __syncthreads();
        }
        for (long long n0 = 0; n0 < H; n0 += MLP_TN)
            gemm_tile<4, MLP_TN / 64, 4>(y + row0 * H + n0, H, a + row0 * F, F, 1, w2 + e * H * F + n0 * F, 1, F, rows,
                                      H - n0 < MLP_TN ? H - n0 : MLP_TN, F, sm);
    }
}

/* x rounded to bf16 (to nearest, ties to even; a NaN kept), as util/bf16.h bf16_round on the host */
__device__ __forceinline__ float bf16_round_f(float x)
{
    unsigned u = moec_mx_f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x;
    return moec_mx_u2f((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* The row-local part of grouped_mlp_bwd, one row tile per block iteration:
 * recompute h = xs w1 and a = swiglu(h) p, da = dy w2 (dgrad through the
 * down projection), dh = dSwiGLU, dp = sum_f da * silu(gate) * up, and
 * dxs = dh w1 (dgrad through gate_up). MX: xs, dy and dh rowwise, h
 * rowwise from its bf16 rounding (the backward's copy of h), the
 * weights arrive quantized (w1 rowwise in q1, w1 and w2 colwise in q1c,
 * q2c). kernels.inc: grouped_mlp_bwd, whose order of operations this keeps. */
template <int E, long long H, long long F, bool MX>
__device__ void grouped_mlp_bwd_rows(float *dxs, float *dp, float *h, float *a, float *da, float *dh, float *qx,
                                     float *qdy, float *qdh, const float *dy, const float *xs, const float *w1,
                                     const float *w1c, const float *w2c, const int *splits, const float *p,
                                     long long R)
{
    __shared__ Groups<E> gr;
    __shared__ MlpTileSmem sm;
    load_groups<E, 16>(gr, splits, R);
    for (long long t = blockIdx.x; t < gr.tile[E + 1]; t += gridDim.x) {
        long long row0, rows;
        int e = group_tile<E, 16>(gr, t, &row0, &rows);
        if (e == E) {
            for (long long i = threadIdx.x; i < rows * H; i += blockDim.x)
                dxs[row0 * H + i] = 0.0f;
            for (long long i = threadIdx.x; i < rows; i += blockDim.x)
                dp[row0 + i] = 0.0f;
            continue;
        }
        const float *x = xs, *g = dy;
        if (MX) {
            for (long long b = threadIdx.x; b < rows * (H / 32); b += blockDim.x) {
                moec_mx_fq_block(xs + row0 * H + b * 32, qx + row0 * H + b * 32, 1, 32);
                moec_mx_fq_block(dy + row0 * H + b * 32, qdy + row0 * H + b * 32, 1, 32);
            }
            __syncthreads();
            x = qx;
            g = qdy;
        }
        for (long long n0 = 0; n0 < 2 * F; n0 += MLP_TN)
            gemm_tile<4, MLP_TN / 64, 4>(h + row0 * 2 * F + n0, 2 * F, x + row0 * H, H, 1, w1 + e * 2 * F * H + n0 * H, 1,
                                      H, rows, 2 * F - n0 < MLP_TN ? 2 * F - n0 : MLP_TN, H, sm);
        if (MX) {
            /* the backward reads h's MXFP8 copy, of h rounded to bf16 (docs/decisions.md 64; kernels.inc) */
            __syncthreads();
            for (long long b = threadIdx.x; b < rows * (2 * F / 32); b += blockDim.x) {
                float *hb = h + row0 * 2 * F + b * 32;
                for (int i = 0; i < 32; i++)
                    hb[i] = bf16_round_f(hb[i]);
                moec_mx_fq_block(hb, hb, 1, 32);
            }
            __syncthreads();
        }
        /* da[r, f] = sum_j dy[r, j] w2[e, j, f] */
        for (long long n0 = 0; n0 < F; n0 += MLP_TN)
            gemm_tile<4, MLP_TN / 64, 4>(da + row0 * F + n0, F, g + row0 * H, H, 1, w2c + e * H * F + n0, F, 1, rows,
                                      F - n0 < MLP_TN ? F - n0 : MLP_TN, H, sm);
        __syncthreads();
        for (long long i = threadIdx.x; i < rows * F; i += blockDim.x) {
            long long r = row0 + i / F, f = i % F;
            double gt = h[r * 2 * F + f], up = h[r * 2 * F + F + f], d = da[r * F + f] * (double)p[r];
            a[r * F + f] = (float)(silu(gt) * h[r * 2 * F + F + f] * p[r]);
            dh[r * 2 * F + f] = (float)(d * up * silu_d(gt));
            dh[r * 2 * F + F + f] = (float)(d * silu(gt));
        }
        for (long long r = row0; r < row0 + rows; r++) {
            double s = 0.0;
            for (long long f = threadIdx.x; f < F; f += blockDim.x)
                s += (double)da[r * F + f] * silu(h[r * 2 * F + f]) * h[r * 2 * F + F + f];
            s = block_sum<256>(s);
            if (threadIdx.x == 0)
                dp[r] = (float)s;
        }
        __syncthreads();
        const float *d2 = dh;
        if (MX) {
            for (long long b = threadIdx.x; b < rows * (2 * F / 32); b += blockDim.x)
                moec_mx_fq_block(dh + row0 * 2 * F + b * 32, qdh + row0 * 2 * F + b * 32, 1, 32);
            __syncthreads();
            d2 = qdh;
        }
        /* dxs[r, i] = sum_o dh[r, o] w1[e, o, i] */
        for (long long n0 = 0; n0 < H; n0 += MLP_TN)
            gemm_tile<4, MLP_TN / 64, 4>(dxs + row0 * H + n0, H, d2 + row0 * 2 * F, 2 * F, 1, w1c + e * 2 * F * H + n0,
                                      H, 1, rows, H - n0 < MLP_TN ? H - n0 : MLP_TN, 2 * F, sm);
    }
}

/* ---------------------------------------------------------- routing
 * Stable counting sort of NI keys into NB buckets by one block of 256
 * threads: pos[i] = the position of item i when the items are ordered by
 * bucket, then by index (kernels.inc: route_plan's counting sort). Keys
 * outside [0, NB) get -1 when SKIP, else stop the kernel (__trap: the CPU
 * backend dies on an expert id out of range). count [NB + 1] and wcnt
 * [8 * NB] are global scratch this kernel zeroes itself; on return count[b]
 * is bucket b's first position and count[NB] the number of items sorted. */
template <long long NB, bool SKIP>
__device__ void stable_bucket_sort(int *pos, const int *key, int *count, int *wcnt, long long NI)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long b = threadIdx.x; b <= NB; b += blockDim.x)
        count[b] = 0;
    for (long long b = threadIdx.x; b < 8 * NB; b += blockDim.x)
        wcnt[b] = 0;
    __syncthreads();
    for (long long i = threadIdx.x; i < NI; i += blockDim.x) {
        int k = key[i];
        if (k < 0 || k >= NB) {
            if (!SKIP)
                __trap();
            continue;
        }
        atomicAdd(&count[k], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (long long b = 0; b <= NB; b++) {
            int c = b < NB ? count[b] : 0;
            count[b] = run;
            run += c;
        }
    }
    __syncthreads();
    for (long long c0 = 0; c0 < NI; c0 += blockDim.x) {
        long long i = c0 + threadIdx.x;
        int k = i < NI ? key[i] : -1;
        bool valid = k >= 0 && k < NB;
        if (!valid)
            k = -1;
        unsigned peers = __match_any_sync(0xffffffffu, k);
        int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid && rank == 0)
            wcnt[warp * NB + k] = __popc(peers);
        __syncthreads();
        if (valid) {
            int r = count[k] + rank;
            for (int w = 0; w < warp; w++)
                r += wcnt[w * NB + k];
            pos[i] = r;
        } else if (i < NI) {
            pos[i] = -1;
        }
        __syncthreads();
        if (valid && rank == 0) {
            atomicAdd(&count[k], __popc(peers));
            wcnt[warp * NB + k] = 0;
        }
        __syncthreads();
    }
    /* count[b] now holds the end of bucket b: shift back to the starts */
    if (threadIdx.x == 0) {
        int end = count[NB - 1];
        for (long long b = NB - 1; b > 0; b--)
            count[b] = count[b - 1];
        count[0] = 0;
        count[NB] = end;
    }
    __syncthreads();
}

/* ---------------------------------------------------------- attention
 * Flash-style: one block per (batch, head, tile of QT queries), one thread
 * per query, keys and values staged through shared memory KT at a time,
 * online softmax in double; never an S x S matrix. kernels.inc: sdpa_items
 * (which normalises the probabilities first; same math). seg (or nullptr):
 * [B, S] segment ids (segment_ids): query i sees key j only in its own
 * segment; a padding query (-1) sees only itself. B, the batch, is a
 * run-time argument (docs/decisions.md 62): it bounds the items only. */
__device__ inline bool seg_sees(const int *seg, long long row, long long i, long long j)
{
    if (!seg)
        return true;
    int si = seg[row + i];
    return si >= 0 ? seg[row + j] == si : i == j;
}

template <long long S, int H, int KV, int HD, bool CAUSAL, int QT, int KT>
__device__ void sdpa_fwd(long long B, float *o, const float *q, const float *k, const float *v, const int *seg = nullptr)
{
    constexpr long long WQ = H * HD, WK = KV * HD, QTILES = (S + QT - 1) / QT;
    __shared__ float ks[KT][HD], vs[KT][HD];
    const double scale = 1.0 / sqrt((double)HD);
    for (long long item = blockIdx.x; item < B * H * QTILES; item += gridDim.x) {
        long long b = item / (H * QTILES), qt = item % QTILES;
        int h = (int)(item / QTILES % H), g = h / (H / KV);
        long long i = qt * QT + threadIdx.x;
        bool active = i < S;
        float qi[HD];
        double acc[HD], m = neg_inf(), l = 0.0;
        for (int t = 0; t < HD; t++) {
            qi[t] = active ? q[(b * S + i) * WQ + h * HD + t] : 0.0f;
            acc[t] = 0.0;
        }
        long long kend = CAUSAL ? ((qt + 1) * QT < S ? (qt + 1) * QT : S) : S;
        for (long long j0 = 0; j0 < kend; j0 += KT) {
            for (int idx = threadIdx.x; idx < KT * HD; idx += QT) {
                long long j = j0 + idx / HD;
                ks[idx / HD][idx % HD] = j < S ? k[(b * S + j) * WK + g * HD + idx % HD] : 0.0f;
                vs[idx / HD][idx % HD] = j < S ? v[(b * S + j) * WK + g * HD + idx % HD] : 0.0f;
            }
            __syncthreads();
            for (int jj = 0; active && jj < KT; jj++) {
                long long j = j0 + jj;
                if (j >= S || (CAUSAL && j > i))
                    break;
                if (!seg_sees(seg, b * S, i, j))
                    continue;
                double s = 0.0;
                for (int t = 0; t < HD; t++)
                    s += (double)qi[t] * ks[jj][t];
                s *= scale;
                if (s > m) {
                    double c = exp(m - s);
                    l *= c;
                    for (int t = 0; t < HD; t++)
                        acc[t] *= c;
                    m = s;
                }
                double pj = exp(s - m);
                l += pj;
                for (int t = 0; t < HD; t++)
                    acc[t] += pj * vs[jj][t];
            }
            __syncthreads();
        }
        if (active)
            for (int t = 0; t < HD; t++)
                o[(b * S + i) * WQ + h * HD + t] = (float)(acc[t] / l);
    }
}

/* Backward, first launch: per (batch, head, query tile), one thread per
 * query, recompute the row's softmax statistics (max m, sum l) and output,
 * D = rowsum(dO * O), then dq = sum_j dS_ij k_j / sqrt(hd) with
 * dS = P (dP - D), dP = dO v^T. stats [B, H, S, 3] = (m, l, D) for the
 * second launch. Writes dq into the packed [dq | dk | dv] output. */
template <long long S, int H, int KV, int HD, bool CAUSAL, int QT, int KT>
__device__ void sdpa_bwd_dq(long long B, float *out, double *stats, const float *dy, const float *q, const float *k,
                            const float *v, const int *seg = nullptr)
{
    constexpr long long WQ = H * HD, WK = KV * HD, WP = WQ + 2 * WK, QTILES = (S + QT - 1) / QT;
    __shared__ float ks[KT][HD], vs[KT][HD];
    const double scale = 1.0 / sqrt((double)HD);
    for (long long item = blockIdx.x; item < B * H * QTILES; item += gridDim.x) {
        long long b = item / (H * QTILES), qt = item % QTILES;
        int h = (int)(item / QTILES % H), g = h / (H / KV);
        long long i = qt * QT + threadIdx.x;
        bool active = i < S;
        float qi[HD], doi[HD];
        double acc[HD], m = neg_inf(), l = 0.0;
        for (int t = 0; t < HD; t++) {
            qi[t] = active ? q[(b * S + i) * WQ + h * HD + t] : 0.0f;
            doi[t] = active ? dy[(b * S + i) * WQ + h * HD + t] : 0.0f;
            acc[t] = 0.0;
        }
        long long kend = CAUSAL ? ((qt + 1) * QT < S ? (qt + 1) * QT : S) : S;
        for (int pass = 0; pass < 2; pass++) {
            double D = 0.0;
            if (pass == 1) {
                for (int t = 0; t < HD; t++) {
                    D += (double)doi[t] * (acc[t] / l);
                    acc[t] = 0.0; /* now dq */
                }
                if (active) {
                    double *st = stats + ((b * H + h) * S + i) * 3;
                    st[0] = m;
                    st[1] = l;
                    st[2] = D;
                }
            }
            for (long long j0 = 0; j0 < kend; j0 += KT) {
                for (int idx = threadIdx.x; idx < KT * HD; idx += QT) {
                    long long j = j0 + idx / HD;
                    ks[idx / HD][idx % HD] = j < S ? k[(b * S + j) * WK + g * HD + idx % HD] : 0.0f;
                    vs[idx / HD][idx % HD] = j < S ? v[(b * S + j) * WK + g * HD + idx % HD] : 0.0f;
                }
                __syncthreads();
                for (int jj = 0; active && jj < KT; jj++) {
                    long long j = j0 + jj;
                    if (j >= S || (CAUSAL && j > i))
                        break;
                    if (!seg_sees(seg, b * S, i, j))
                        continue;
                    double s = 0.0;
                    for (int t = 0; t < HD; t++)
                        s += (double)qi[t] * ks[jj][t];
                    s *= scale;
                    if (pass == 0) {
                        if (s > m) {
                            double c = exp(m - s);
                            l *= c;
                            for (int t = 0; t < HD; t++)
                                acc[t] *= c;
                            m = s;
                        }
                        double pj = exp(s - m);
                        l += pj;
                        for (int t = 0; t < HD; t++)
                            acc[t] += pj * vs[jj][t];
                    } else {
                        double pj = exp(s - m) / l, dpj = 0.0;
                        for (int t = 0; t < HD; t++)
                            dpj += (double)doi[t] * vs[jj][t];
                        double ds = pj * (dpj - D) * scale;
                        for (int t = 0; t < HD; t++)
                            acc[t] += ds * ks[jj][t];
                    }
                }
                __syncthreads();
            }
        }
        if (active)
            for (int t = 0; t < HD; t++)
                out[(b * S + i) * WP + h * HD + t] = (float)acc[t];
    }
}

/* Backward, second launch: per (batch, kv head, key tile), one thread per
 * key j, dk_j = sum over the group's heads and queries i of dS_ij q_i /
 * sqrt(hd), dv_j = sum P_ij dO_i, probabilities recomputed from stats. */
template <long long S, int H, int KV, int HD, bool CAUSAL, int KT, int QT>
__device__ void sdpa_bwd_dkv(long long B, float *out, const double *stats, const float *dy, const float *q, const float *k,
                             const float *v, const int *seg = nullptr)
{
    constexpr long long WQ = H * HD, WK = KV * HD, WP = WQ + 2 * WK, KTILES = (S + KT - 1) / KT;
    constexpr int REP = H / KV;
    __shared__ float qs[QT][HD], ds_[QT][HD];
    __shared__ double st[QT][3];
    const double scale = 1.0 / sqrt((double)HD);
    for (long long item = blockIdx.x; item < B * KV * KTILES; item += gridDim.x) {
        long long b = item / (KV * KTILES), kt = item % KTILES;
        int g = (int)(item / KTILES % KV);
        long long j = kt * KT + threadIdx.x;
        bool active = j < S;
        float kj[HD], vj[HD];
        double dk[HD], dv[HD];
        for (int t = 0; t < HD; t++) {
            kj[t] = active ? k[(b * S + j) * WK + g * HD + t] : 0.0f;
            vj[t] = active ? v[(b * S + j) * WK + g * HD + t] : 0.0f;
            dk[t] = 0.0;
            dv[t] = 0.0;
        }
        long long istart = CAUSAL ? kt * KT / QT * QT : 0;
        for (int h = g * REP; h < (g + 1) * REP; h++)
            for (long long i0 = istart; i0 < S; i0 += QT) {
                for (int idx = threadIdx.x; idx < QT * HD; idx += KT) {
                    long long i = i0 + idx / HD;
                    qs[idx / HD][idx % HD] = i < S ? q[(b * S + i) * WQ + h * HD + idx % HD] : 0.0f;
                    ds_[idx / HD][idx % HD] = i < S ? dy[(b * S + i) * WQ + h * HD + idx % HD] : 0.0f;
                }
                for (int idx = threadIdx.x; idx < QT * 3; idx += KT) {
                    long long i = i0 + idx / 3;
                    st[idx / 3][idx % 3] = i < S ? stats[((b * H + h) * S + i) * 3 + idx % 3] : 0.0;
                }
                __syncthreads();
                for (int ii = 0; active && ii < QT; ii++) {
                    long long i = i0 + ii;
                    if (i >= S)
                        break;
                    if ((CAUSAL && i < j) || !seg_sees(seg, b * S, i, j))
                        continue;
                    double s = 0.0, dpj = 0.0;
                    for (int t = 0; t < HD; t++) {
                        s += (double)qs[ii][t] * kj[t];
                        dpj += (double)ds_[ii][t] * vj[t];
                    }
                    s *= scale;
                    double pj = exp(s - st[ii][0]) / st[ii][1];
                    double dsij = pj * (dpj - st[ii][2]) * scale;
                    for (int t = 0; t < HD; t++) {
                        dk[t] += dsij * qs[ii][t];
                        dv[t] += pj * ds_[ii][t];
                    }
                }
                __syncthreads();
            }
        if (active)
            for (int t = 0; t < HD; t++) {
                out[(b * S + j) * WP + WQ + g * HD + t] = (float)dk[t];
                out[(b * S + j) * WP + WQ + WK + g * HD + t] = (float)dv[t];
            }
    }
}

/* ---------------------------------------------------------- expert parallelism
 * ep_sort / ep_unsort: rows ordered (source rank i, local expert e) <->
 * (expert e, source i); rc [EP, EL] counts each block's rows; rows past
 * the received total are zero. kernels.inc: ep_permute. */
template <int EP, int EL, long long D, bool TO_EXPERT_MAJOR>
__device__ void ep_permute(float *out, const float *in, const int *rc, long long ROWS)
{
    __shared__ long long src_off[EP * EL], dst_off[EP * EL], cnt[EP * EL];
    if (threadIdx.x == 0) {
        long long s = 0;
        for (int i = 0; i < EP; i++)
            for (int e = 0; e < EL; e++) {
                long long d = 0;
                for (int e2 = 0; e2 < e; e2++)
                    for (int i2 = 0; i2 < EP; i2++)
                        d += rc[i2 * EL + e2];
                for (int i2 = 0; i2 < i; i2++)
                    d += rc[i2 * EL + e];
                src_off[i * EL + e] = s;
                dst_off[i * EL + e] = d;
                cnt[i * EL + e] = rc[i * EL + e];
                s += rc[i * EL + e];
            }
    }
    __syncthreads();
    MOEC_FOR(idx, ROWS * D) {
        long long r = idx / D, c = idx % D, from = -1;
        for (int b = 0; b < EP * EL; b++) {
            long long first = TO_EXPERT_MAJOR ? dst_off[b] : src_off[b];
            if (r >= first && r < first + cnt[b]) {
                from = (TO_EXPERT_MAJOR ? src_off[b] : dst_off[b]) + r - first;
                break;
            }
        }
        out[idx] = from >= 0 ? in[from * D + c] : 0.0f;
    }
}

} /* namespace moec */
