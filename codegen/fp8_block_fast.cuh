/* fp8_block_fast.cuh - device code of the fp8-block fast grouped MLP (codegen/cuda_moe_fp8.c,
 * docs/fp8-block.md, decision 38): the quantisers around the FP8 grouped GEMM (gemm_sm90.cuh
 * GemmFp8MGrouped). Pasted into a plan's kernels.cu only when a node got these kernels, after
 * moe_fast.cuh (whose offsets, f2bf and unpack8 it uses) and mxfp8.cuh / e4m3.h (the scale rule and the
 * E4M3 encoder, the lines the CPU reference runs: runtime/cpu/fp8_block.c).
 *
 * Bit-exact with fp8b_quantize on the same fp32 input: amax = the largest |x| of the block with NaN left
 * out (fmaxf drops a NaN operand, as `a > amax` does on the CPU), e = moec_mx_scale_exp(amax) (the TE rule
 * of fp8b_scale_exponent), code = moec_e4m3_encode(x * 2^-e) (one exact power-of-two multiply, which rounds
 * as ldexpf), scale code e + 127. Partial blocks do not arise here: the callers take H and F as multiples
 * of 256, and each expert group starts at a multiple of 128 padded rows with zero rows after its last
 * one, which is fp8-block's partial block exactly (docs/fp8-block.md, ragged ends).
 *
 * Layouts (gemm_sm90_sched.h moec_fp8_block_*): activation values [rcap, C] row-major, their scales
 * [C / 128][rcap] (row pr of K block kb at kb * rcap + pr); a weight W [E, N, K] in tiles: values as W,
 * scales [E][N / 128][K / 128]; its transposed copy W^T [E, K, N] with scales [E][K / 128][N / 128]
 * (tile(W)^T = tile(W^T): the same codes, transposed). */
namespace moec {
namespace fp8b {

/* two values, two exponents: moec_e4m3_encode(a 2^-ea) | moec_e4m3_encode(b 2^-eb) << 8, in one conversion
 * on the GPU (util/e4m3.h moec_e4m3_encode2) */
__device__ __forceinline__ unsigned q8x2(float a, int ea, float b, int eb)
{
    return moec_e4m3_encode2(a * moec_mx_pow2(-ea), b * moec_mx_pow2(-eb));
}
/* one 16-byte store (NVVM split the plain uint4 store of quant_tiles into four 4-byte ones) */
__device__ __forceinline__ void st16(void *p, unsigned a, unsigned b, unsigned c, unsigned d)
{
#ifdef __CUDA_ARCH__
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
#else
    *(uint4 *)p = make_uint4(a, b, c, d);
#endif
}
__device__ __forceinline__ float amax4(const float (&v)[4])
{
    return fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
}
__device__ __forceinline__ unsigned pack_q4(const float (&v)[4], int e)
{
    return q8x2(v[0], e, v[1], e) | (q8x2(v[2], e, v[3], e) << 16);
}

/* ---- sources: value (padded row pr, column c) of the tensor being quantised; `prep` once per padded
 * row (rowwise) or per 128-row block (colwise, group g of the block) */

/* graph rows x [R, C] fp32, grouped: padded row pr of group g is graph row start[g] + pr - ofs[g] while
 * that is below start[g + 1], else a zero row. With tok, x is the dispatch's token rows [T, C] and graph row r
 * is token tok[r]'s (the dispatch read through, never materialised: token_of_rows) */
template <int E, long long C> struct GraphRows {
    const float *x;
    const int *tok = nullptr;
    __device__ __forceinline__ const float *row(int pr, int g, const int *ofs) const
    {
        const int k = pr - ofs[g];
        if (k >= ofs[E + 2 + g] - ofs[E + 1 + g])
            return nullptr;
        const int r = ofs[E + 1 + g] + k;
        return x + (long long)(tok ? tok[r] : r) * C;
    }
    __device__ __forceinline__ void load8(const float *r, long long c, float (&v)[8]) const
    {
        const float4 a = r ? *(const float4 *)(r + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        const float4 b = r ? *(const float4 *)(r + c + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
};

/* bf16 rows x [., C] (the gate_up GEMM's h, for its E4M3 copy: decision 64): padded row pr is x's row pr */
template <long long C> struct Bf16Rows {
    const unsigned short *x;
    __device__ __forceinline__ const unsigned short *row(int pr, int, const int *) const { return x + (long long)pr * C; }
    __device__ __forceinline__ void load8(const unsigned short *r, long long c, float (&v)[8]) const
    {
        moec::fast::unpack8(*(const uint4 *)(r + c), v);
    }
};

/* ---- h [., 2F] (gate columns 0 .. F - 1, up F .. 2F - 1) as the backward reads it: load8(pr, c, v) gives
 * h [pr, c .. c + 7] (c % 8 == 0) in fp32, exactly as stored */
/* the forward's bf16 h (MXFP8; fp8-block's forward SwiGLU) */
template <long long F> struct HBf16 {
    const unsigned short *h;
    __device__ __forceinline__ void load8(int pr, long long c, float (&v)[8]) const
    {
        moec::fast::unpack8(*(const uint4 *)(h + (long long)pr * 2 * F + c), v);
    }
};
/* The copy kept for the backward (decision 64): codes q [rcap, 2F] and E8M0 scale codes s, one per BLK values along
 * a row, as the tile quantiser over Bf16Rows<2F> wrote them: fp8-block's 1 x 128 at moec_fp8_block_sa_index (pr,
 * c / 128, rcap) (HE4m3), MXFP8's 1 x 32 at moec_mxfp8_sa_index (pr, c / 32, rcap) (HMx). A value is its code's
 * E4M3 value times the block's power of two, exact in fp32 (the CPU's fake quantisation); the 8 values of a load
 * share one block (c % 8 == 0). */
template <long long F, int BLK = 128> struct HE4m3 {
    static_assert(BLK == 128 || BLK == 32, "fp8-block's 128 or MXFP8's 32");
    const unsigned char *q, *s;
    long long rcap;
    __device__ __forceinline__ void load8(int pr, long long c, float (&v)[8]) const
    {
        const uint2 w = *(const uint2 *)(q + (long long)pr * 2 * F + c);
        const long long si = BLK == 128 ? moec_fp8_block_sa_index(pr, (int)(c / 128), rcap)
                                        : moec_mxfp8_sa_index(pr, (int)(c / 32), rcap);
        const float sc = moec_mx_pow2((int)s[si] - 127);
        moec_e4m3_decode2(w.x, &v[0], &v[1]);
        moec_e4m3_decode2(w.x >> 16, &v[2], &v[3]);
        moec_e4m3_decode2(w.y, &v[4], &v[5]);
        moec_e4m3_decode2(w.y >> 16, &v[6], &v[7]);
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] *= sc;
    }
};
template <long long F> using HMx = HE4m3<F, 32>;

/* tok [r] <- the token whose slot expert-major row r is, for the rows of the groups (r < start[E]), from the
 * dispatch plan [T, KS] (each slot's expert-major row, -1 or past the groups for none): the inverse of the plan,
 * so the quantisers read the token rows through the dispatch (GraphRows with tok). Every row of the groups is one
 * slot's: written once. */
template <int E, int KS> __device__ void token_of_rows(int *tok, const int *plan, const int *ofs, long long T)
{
    const int rows = ofs[E + 1 + E];
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < T * KS; i += (long long)gridDim.x * blockDim.x) {
        const int r = plan[i];
        if (r >= 0 && r < rows)
            tok[r] = (int)(i / KS);
    }
}

/* one value of a = silu(gate) up p from the gate and up values: the bf16 path's dSwiGLU arithmetic for it
 * (moec::sm90::dswiglu1's o: the sigmoid's reciprocal by rcp.approx, every operation rounded explicitly; decision
 * 69), the one definition the separate quantisers (Swiglu: the forward's a, and the backward's, recomputed from h's
 * copy), the merged forward pass and the gate_up GEMM's fused epilogue (SwigluQuantEpi) share, so no contraction
 * can differ between them. Before decision 69 it was g / (1 + exp(-g)) u p with an IEEE division, whose slow-path
 * branch on every element made these passes latency-bound. */
__device__ __forceinline__ float swiglu_a(float g, float u, float p)
{
    const float sg = __fdividef(1.0f, __fadd_rn(1.0f, __expf(-g)));
    return __fmul_rn(__fmul_rn(__fmul_rn(g, sg), u), p);
}

/* a = silu(gate) up p from h [., 2F] bf16 (gate columns 0 .. F - 1, up F .. 2F - 1) and p [.] fp32:
 * the bf16 path's arithmetic (moe_fast.cuh swiglu). The backward's a colwise copy; the forward's 1 x 128
 * copy is SwigluQuantEpi's since decision 57 (this source gives the same bytes: fp8b_quant.test) */
template <long long F, class HS = HBf16<F>> struct Swiglu {
    HS h;
    const float *p;
    struct Row {
        int pr;
        float p;
    };
    __device__ __forceinline__ Row row(int pr, int, const int *) const { return Row{pr, p[pr]}; }
    __device__ __forceinline__ void load8(const Row &r, long long c, float (&v)[8]) const
    {
        float g[8], u[8];
        h.load8(r.pr, c, g);
        h.load8(r.pr, F + c, u);
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = swiglu_a(g[i], u[i], r.p);
    }
};

/* The gate_up GEMM's fused SwiGLU epilogue (GemmFp8MGrouped's GLU, decision 57): one consumer thread's part of
 * a 64 x 128 block of a, after the up pass. The thread holds rows pr and pr + 8 of the padded rows (pr = the
 * GEMM tile's row r) at a columns 128 j + 8 c + 2 (lane % 4) + e (c < 16, e < 2: the m64n128 accumulator
 * fragment): gw[2 c + i] the bf16 pair of the gate at row pr + 8 i, as h holds it (read back from the staging
 * buffers the TMA store wrote h from), up[4 c + 2 i + e] the fp32 accumulator of the up column, rounded here
 * by the same conversion (sm90.cuh pack_bf16x2) the TMA-store epilogue rounds h with. Each value of a is
 * swiglu_a of the same bf16 bits the separate quantiser (quant_tiles over Swiglu<F>) reads from h, with the
 * same p [pr]; a row's 128 values lie in the 4 lanes of a quad, so its amax is the thread's 32 then shuffles
 * over lanes xor 1, 2 (fmaxf from 0, NaN dropped: order-free, the same amax), the scale moec_mx_scale_exp, the
 * codes q8x2: bit for bit quant_tiles' (tests/codegen/fp8b_quant.test). Codes q [rcap, F] (2-byte stores, a
 * quad one row's 8 bytes), scale codes sa at moec_fp8_block_sa_index (pr, j, rcap) (lane % 4 == 0). */
template <long long F> struct SwigluQuantEpi {
    static constexpr bool ON = true;
    __device__ static __forceinline__ void run(const unsigned (&gw)[32], const float (&up)[64], const float *probs,
                                               unsigned char *q, unsigned char *sa, long long rcap, int pr, int j,
                                               int lane)
    {
        const float p0 = probs[pr], p1 = probs[pr + 8];
        float a[64];
#pragma unroll
        for (int c = 0; c < 16; c++) {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const unsigned g = gw[2 * c + i], u = moec::sm90::pack_bf16x2(up[4 * c + 2 * i], up[4 * c + 2 * i + 1]);
                const float p = i ? p1 : p0;
                a[4 * c + 2 * i] = swiglu_a(__uint_as_float(g << 16), __uint_as_float(u << 16), p);
                a[4 * c + 2 * i + 1] = swiglu_a(__uint_as_float(g & 0xffff0000u), __uint_as_float(u & 0xffff0000u), p);
            }
        }
        float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            m0 = fmaxf(m0, fmaxf(fabsf(a[4 * c]), fabsf(a[4 * c + 1])));
            m1 = fmaxf(m1, fmaxf(fabsf(a[4 * c + 2]), fabsf(a[4 * c + 3])));
        }
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, o));
            m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, o));
        }
        const int e0 = moec_mx_scale_exp(m0), e1 = moec_mx_scale_exp(m1);
        unsigned char *q0 = q + (long long)pr * F + 128ll * j + 2 * (lane % 4), *q1 = q0 + 8 * F;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            *(unsigned short *)(q0 + 8 * c) = (unsigned short)q8x2(a[4 * c], e0, a[4 * c + 1], e0);
            *(unsigned short *)(q1 + 8 * c) = (unsigned short)q8x2(a[4 * c + 2], e1, a[4 * c + 3], e1);
        }
        if (lane % 4 == 0) {
            sa[moec_fp8_block_sa_index(pr, j, rcap)] = (unsigned char)(e0 + 127);
            sa[moec_fp8_block_sa_index(pr + 8, j, rcap)] = (unsigned char)(e1 + 127);
        }
    }
};

/* dh [., 2F] = [d up silu'(gate) | d silu(gate)], d = da p, from h [., 2F], da [., F] (bf16) and p: the
 * bf16 path's arithmetic, moec::sm90::dswiglu1 (dswiglu.cuh: every operation rounded explicitly, so that this
 * source and the bf16 path's dSwiGLU give the same bits whatever the compiler contracts; decision 69). 8 columns
 * never straddle F (F % 128 == 0). */
template <long long F, class HS = HBf16<F>> struct Dswiglu {
    HS h;
    const unsigned short *da;
    const float *p;
    /* with it, quant_tiles also writes dprobs' partials (decision 69): per padded row and 128 columns of dh's gate
     * half, dpart [pr (F / 128) + c / 128] = the sum of da silu(gate) up over those columns (each thread's 8 terms
     * in column order, then the half-warp's 16 sums by a fixed xor tree: every lane the same value, fp32); the
     * scatter adds a row's F / 128 partials in index order in double (moec::fast::scatter, NP = F / 128) */
    float *dpart = nullptr;
    static constexpr bool PARTIALS = true;
    struct Row {
        int pr;
        const unsigned short *da;
        float p;
    };
    __device__ __forceinline__ Row row(int pr, int, const int *) const { return Row{pr, da + (long long)pr * F, p[pr]}; }
    /* v = dh [pr, c .. c + 7]; t = the sum of the 8 columns' dprobs terms (meaningful in the gate half, c < F) */
    __device__ __forceinline__ void load8t(const Row &r, long long c, float (&v)[8], float &t) const
    {
        const bool first = c < F;
        const long long f = first ? c : c - F;
        float g[8], u[8], d_a[8];
        h.load8(r.pr, f, g);
        h.load8(r.pr, F + f, u);
        moec::fast::unpack8(*(const uint4 *)(r.da + f), d_a);
        t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float dg, du, o, ti;
            moec::sm90::dswiglu1(g[i], u[i], d_a[i], r.p, dg, du, o, ti);
            v[i] = first ? dg : du;
            t = __fadd_rn(t, ti);
        }
    }
    __device__ __forceinline__ void load8(const Row &r, long long c, float (&v)[8]) const
    {
        float t;
        load8t(r, c, v, t);
    }
};

/* a source's dprobs partials (Dswiglu's PARTIALS, with its dpart set): quant_tiles loads through load8t and writes
 * them; any other source: no partials */
template <class S> __device__ constexpr auto has_partials(int) -> decltype((void)S::PARTIALS, bool()) { return S::PARTIALS; }
template <class S> __device__ constexpr bool has_partials(long) { return false; }

/* The tile quantiser: per 128 x 128 tile of the padded rows pr < ofs[E] (a tile never spans two groups: each
 * starts at a multiple of 128) reads each source value once into registers, and
 *  - with q: quantises each row's 128 values, one 1 x 128 block: values q [rcap, C], scales sa [C/128][rcap];
 *  - with colt: quantises each column's 128 values, one 128 x 1 block within the group (padding rows are
 *    zeros, so a group's last block is fp8-block's partial block), and writes the codes transposed, K-major
 *    for the FP8 K-grouped GEMM (GemmFp8KGrouped, decision 45): colt [C, rcap] (column c's codes of padded
 *    rows pr at c rcap + pr, the tokens contiguous), the scale codes to colts [rcap / 128][C]
 *    (moec_fp8_kgrouped_s_index);
 *  - with psrc: pdst [pr] <- the graph row's probability (0 on a padding row), in the tiles of column 0.
 * 256 threads; thread t holds columns 8 (t % 16) .. + 7 of rows 8 (t / 16) + j, j < 8 (64 fp32 values, read
 * with 16-byte loads, a half-warp a row; the row codes written with 8-byte stores, a half-warp a row's 128
 * bytes). A row's amax: shuffles within the half-warp; a column's: the thread's 8 rows, the other half-warp
 * by a shuffle, the 8 warps through 4 KB of static shared memory. The transposed codes go through a 16 KB
 * byte tile in static shared memory, ct[c] = column c's 128 row codes: a thread's 8 consecutive rows of a
 * column are one 8-byte store (16-byte unit u = rows 16 u .. 16 u + 15 stored at unit u ^ (c / 8 % 8): a
 * warp's 32 stores of one column index i land in 2 wavefronts, the minimum), then 16-byte loads, 8 threads
 * a column's 128 bytes, written as one 128-byte line of colt per column (the colwise case only).
 * Every amax starts from 0 and drops NaN (fmaxf), as the CPU's `a > amax`. C % 128 == 0. */

/* quant_tiles' two halves (rows8 also the merged SwiGLU tile kernel's, swiglu_h_tiles below):
 * one thread's 8 x 8 values v of a 128 x 128 tile, rows pr = 128 mb + 8 rg + j (j < 8), columns c .. c + 7 with
 * c = c0 + 8 cl (cl = threadIdx.x % 16, rg = threadIdx.x / 16; 256 threads a tile).
 * rows8: each row's 1 x 128 block (row1: a half-warp's 16 threads, the amax by shuffles within it), codes q [., C]
 * at row pr, column c (8-byte stores, a half-warp a row's 128 bytes), scale codes sa [C / 128][rcap]. */
template <long long C>
__device__ __forceinline__ void row1(const float (&v)[8], unsigned char *q, unsigned char *sa, long long rcap, long long pr,
                                     long long c)
{
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++)
        m = fmaxf(m, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const int e = moec_mx_scale_exp(m);
    uint2 p;
    p.x = q8x2(v[0], e, v[1], e) | (q8x2(v[2], e, v[3], e) << 16);
    p.y = q8x2(v[4], e, v[5], e) | (q8x2(v[6], e, v[7], e) << 16);
    *(uint2 *)(q + pr * C + c) = p;
    if (threadIdx.x % 16 == 0)
        sa[c / 128 * rcap + pr] = (unsigned char)(e + 127);
}
template <long long C>
__device__ __forceinline__ void rows8(const float (&v)[8][8], unsigned char *q, unsigned char *sa, long long rcap, int mb,
                                      long long c)
{
#pragma unroll
    for (int j = 0; j < 8; j++)
        row1<C>(v[j], q, sa, rcap, (long long)mb * 128 + 8 * (threadIdx.x / 16) + j, c);
}

/* a column's amax over the 16 rows of a warp (its two half-warps' 8 rows: the thread's 8, then a shuffle over
 * lane xor 16), written by the lanes < 16 to cmax [warp][column] (the tile's 128 columns); the caller's barrier
 * follows. Starts from 0 and drops NaN (fmaxf), as every amax here. quant_tiles' colwise halves (fp8-block's cols8,
 * MXFP8's) share it. */
__device__ __forceinline__ void col_amax16(const float (&v)[8][8], float (*cmax)[128])
{
    const int cl = threadIdx.x % 16, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float m[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        m[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            m[i] = fmaxf(m[i], fabsf(v[j][i]));
        m[i] = fmaxf(m[i], __shfl_xor_sync(0xffffffffu, m[i], 16));
    }
    if (lane < 16) {
        *(float4 *)&cmax[warp][8 * cl] = make_float4(m[0], m[1], m[2], m[3]);
        *(float4 *)&cmax[warp][8 * cl + 4] = make_float4(m[4], m[5], m[6], m[7]);
    }
}

/* cols8's shared memory: per warp and column the amax over its 16 rows, per column the scale exponent, and the
 * transposed codes (column c's 128 row codes, 16-byte units swizzled). One per block: a kernel declares it
 * __shared__ and passes it to every cols8 call (20.5 KB). */
struct ColSmem {
    float cmax[8][128];
    int cexp[128];
    uint4 ct16[128 * 8];
};

/* cols8: each column's 128 x 1 block (a tile never spans two groups: each starts at a multiple of 128, and
 * padding rows are zeros, so a group's last block is fp8-block's partial block), the codes written transposed,
 * K-major for the FP8 K-grouped GEMM: colt [C, rcap] (column c0 + cc's codes of padded rows 128 mb .. at
 * (c0 + cc) rcap + 128 mb, the tokens contiguous), the scale codes to colts [rcap / 128][C]
 * (moec_fp8_kgrouped_s_index). A column's amax: the thread's 8 rows, the other half-warp by a shuffle, the 8
 * warps through sm.cmax; the codes through sm.ct: a thread's 8 consecutive rows of a column are one 8-byte store
 * (16-byte unit u = rows 16 u .. 16 u + 15 stored at unit u ^ (c / 8 % 8): a warp's 32 stores of one column
 * index i land in 2 wavefronts, the minimum), then 16-byte loads, 8 threads a column's 128 bytes, written as one
 * 128-byte line of colt per column. Three barriers: every thread of the block calls it for the same tile; sm is
 * written again only after the next call's first barrier. */
template <long long C>
__device__ __forceinline__ void cols8(const float (&v)[8][8], unsigned char *colt, unsigned char *colts, long long rcap,
                                      int mb, long long c0, ColSmem &sm)
{
    const int cl = threadIdx.x % 16, rg = threadIdx.x / 16;
    unsigned char(*ct)[128] = (unsigned char(*)[128])sm.ct16;
    col_amax16(v, sm.cmax);
    __syncthreads();
    if (threadIdx.x < 128) {
        float a = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; w++)
            a = fmaxf(a, sm.cmax[w][threadIdx.x]);
        const int e = moec_mx_scale_exp(a);
        sm.cexp[threadIdx.x] = e;
        colts[moec_fp8_kgrouped_s_index((long long)mb * 128, c0 + threadIdx.x, C)] = (unsigned char)(e + 127);
    }
    __syncthreads(); /* cmax is written again only after this; cexp only after the next call's first barrier */
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int cc = 8 * cl + i, e = sm.cexp[cc];
        /* rows 8 rg .. 8 rg + 7: half (rg % 2) of 16-byte unit rg / 2, stored at unit (rg / 2) ^ (cc / 8 % 8) */
        uint2 p;
        p.x = q8x2(v[0][i], e, v[1][i], e) | (q8x2(v[2][i], e, v[3][i], e) << 16);
        p.y = q8x2(v[4][i], e, v[5][i], e) | (q8x2(v[6][i], e, v[7][i], e) << 16);
        *(uint2 *)&ct[cc][(((rg >> 1) ^ (cc >> 3 & 7)) << 4) + 8 * (rg & 1)] = p;
    }
    __syncthreads(); /* ct complete; it is written again only after the next call's first barrier */
#pragma unroll
    for (int it = 0; it < 4; it++) {
        const int x = threadIdx.x + 256 * it, cc = x / 8, u = x % 8; /* column cc, rows 16 u .. 16 u + 15 */
        const uint4 w = *(const uint4 *)&ct[cc][(u ^ (cc >> 3 & 7)) << 4];
        st16(colt + (c0 + cc) * rcap + (long long)mb * 128 + 16 * u, w.x, w.y, w.z, w.w);
    }
}

/* quant_tiles' tile load: the thread's 8 rows x 8 columns of the tile (rows 128 mb + 8 rg + j, columns c ..) from
 * src into v; with a source that has dprobs' partials (Dswiglu with dpart set, decision 69), also each row's terms
 * of these 8 columns, and for dh's gate half (c < C / 2) the rows' partials over the tile's 128 columns: the
 * half-warp's 16 sums by a fixed xor tree (lanes 8, 4, 2, 1: every lane the same value), written by lane 0 to
 * dpart [pr (C / 256) + cb]. */
template <long long C, class Src>
__device__ __forceinline__ void load_tile8(const Src &src, float (&v)[8][8], int mb, int g, long long c, long long cb,
                                           const int *ofs)
{
    const int cl = threadIdx.x % 16, rg = threadIdx.x / 16;
    [[maybe_unused]] float tp[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int pr = mb * 128 + 8 * rg + j;
        if constexpr (has_partials<Src>(0))
            src.load8t(src.row(pr, g, ofs), c, v[j], tp[j]);
        else
            src.load8(src.row(pr, g, ofs), c, v[j]);
    }
    if constexpr (has_partials<Src>(0)) {
        if (src.dpart && cb * 128 < C / 2) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float t = tp[j];
#pragma unroll
                for (int o = 8; o; o >>= 1)
                    t = __fadd_rn(t, __shfl_xor_sync(0xffffffffu, t, o));
                if (cl == 0)
                    src.dpart[(long long)(mb * 128 + 8 * rg + j) * (C / 256) + cb] = t;
            }
        }
    }
}

template <int E, long long C, class Src>
__device__ void quant_tiles(unsigned char *q, unsigned char *sa, long long rcap, unsigned char *colt,
                            unsigned char *colts, const Src src, float *pdst, const float *psrc, const int *ofs)
{
    static_assert(C % 128 == 0, "128-wide blocks along C");
    __shared__ ColSmem sm;
    constexpr long long CB = C / 128;
    const long long items = (long long)(ofs[E] / 128) * CB;
    const int cl = threadIdx.x % 16, rg = threadIdx.x / 16;
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        const int mb = (int)(it / CB);
        const long long cb = it % CB, c0 = cb * 128, c = c0 + 8 * cl;
        const int g = moec_sched_group_of(ofs, E, mb * 128);
        float v[8][8];
        load_tile8<C>(src, v, mb, g, c, cb, ofs);
        if (psrc && cb == 0 && cl == 0) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int pr = mb * 128 + 8 * rg + j, k = pr - ofs[g];
                pdst[pr] = k < ofs[E + 2 + g] - ofs[E + 1 + g] ? psrc[ofs[E + 1 + g] + k] : 0.0f;
            }
        }
        if (q)
            rows8<C>(v, q, sa, rcap, mb, c);
        if (colt)
            cols8<C>(v, colt, colts, rcap, mb, c0, sm);
    }
}

/* The forward's two passes over the bf16 h in one (decision 69): per 128 x 128 tile pair (gate block jb, up block
 * jb) of h [., 2F] each value read once, and written three ways, each a row's 1 x 128 block as quant_tiles' rows8:
 * h's E4M3 copy for the backward (hq [., 2F], hs: the gate tile at column 128 jb, block jb; the up tile at F + 128
 * jb, block F / 128 + jb: quant_tiles over Bf16Rows<2F>), and a = swiglu_a(gate, up, p) (aq [., F], as: quant_tiles
 * over Swiglu<F>). The same functions on the same values, so bit for bit the two separate launches' bytes
 * (tests/codegen/fp8b_quant.test); the gate and up tiles stay in registers as bf16 (64 words) and each row is
 * widened when quantised. */
template <int E, long long F>
__device__ void swiglu_h_tiles(unsigned char *aq, unsigned char *as, unsigned char *hq, unsigned char *hs,
                               const unsigned short *h, const float *p, const int *ofs, long long rcap)
{
    static_assert(F % 128 == 0, "128-wide blocks along F");
    constexpr long long FB = F / 128, C = 2 * F;
    const long long items = (long long)(ofs[E] / 128) * FB;
    const int cl = threadIdx.x % 16, rg = threadIdx.x / 16;
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        const int mb = (int)(it / FB);
        const long long jb = it % FB, c = 128 * jb + 8 * cl;
        uint4 gw[8], uw[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const long long pr = mb * 128 + 8 * rg + j;
            gw[j] = *(const uint4 *)(h + pr * C + c);
            uw[j] = *(const uint4 *)(h + pr * C + F + c);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const long long pr = mb * 128 + 8 * rg + j;
            float g[8], u[8], a[8];
            moec::fast::unpack8(gw[j], g);
            moec::fast::unpack8(uw[j], u);
            row1<C>(g, hq, hs, rcap, pr, c);
            row1<C>(u, hq, hs, rcap, pr, F + c);
            const float pj = p[pr];
#pragma unroll
            for (int i = 0; i < 8; i++)
                a[i] = swiglu_a(g[i], u[i], pj);
            row1<F>(a, aq, as, rcap, pr, c);
        }
    }
}

/* A weight w [E, N, K] fp32 in 128 x 128 tiles: q [E, N, K] and scales s [E][N/128][K/128]; with qt, the
 * transposed copy qt [E, K, N] and st [E][K/128][N/128] (through shared memory). One block of
 * WEIGHT_THREADS (512) per tile, each thread holding 32 of its values in registers (rows warp + 16 j,
 * columns 4 lane .. + 3: a warp reads a row's 512 bytes; 8 float4 loads a thread in flight): the weight is
 * read once, and at about 60 registers two blocks share an SM. The transposed copy: the tile's codes in
 * shared memory (rows of 33 words), read 4 bytes of a column a thread with a warp on 8 columns x 16 rows
 * (word 33 n + k / 4, bank n + k / 4 mod 32: 8 distinct words a load, the rest broadcast: conflict-free),
 * written 4 bytes of a W^T row a thread. N % 128 == K % 128 == 0.
 * The values come from src.load4(i): the 4 values at element i (a multiple of 4) of w [E, N, K], each read
 * once: WeightValues reads the fp32 weight; the fp8-block optimizer's source (codegen/cuda_optim.c
 * moec_adamw_fp8b_*, decision 44) updates w, m and v there and returns the new w. */
[[maybe_unused]] constexpr int WEIGHT_THREADS = 512; /* unused where only the MXFP8 code is */
struct WeightValues {
    const float *w;
    __device__ __forceinline__ float4 load4(long long i) const { return *(const float4 *)(w + i); }
};
template <int E, long long N, long long K, class Src>
__device__ void quant_weight_from(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st,
                                  const Src src)
{
    static_assert(N % 128 == 0 && K % 128 == 0, "128 x 128 tiles");
    constexpr long long NB = N / 128, KB = K / 128, TILES = (long long)E * NB * KB;
    constexpr int NW = WEIGHT_THREADS / 32, PER = 128 / NW; /* warps; rows (float4s) a thread */
    __shared__ unsigned tile[128][33]; /* the codes, 4 to a word, row r of the tile in tile[r] */
    __shared__ float red[NW];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (long long t = blockIdx.x; t < TILES; t += gridDim.x) {
        const long long g = t / (NB * KB), nb = t / KB % NB, kb = t % KB;
        const long long base = (g * N + nb * 128) * K + kb * 128;
        float v[PER][4];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const float4 f = src.load4(base + (long long)(warp + NW * j) * K + 4 * lane);
            v[j][0] = f.x, v[j][1] = f.y, v[j][2] = f.z, v[j][3] = f.w;
        }
#pragma unroll
        for (int j = 0; j < PER; j++)
            m = fmaxf(m, amax4(v[j]));
#pragma unroll
        for (int o = 16; o; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0)
            red[warp] = m;
        __syncthreads();
        m = 0.0f;
#pragma unroll
        for (int i = 0; i < NW; i++)
            m = fmaxf(m, red[i]);
        const int e = moec_mx_scale_exp(m);
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int r = warp + NW * j;
            const unsigned p = pack_q4(v[j], e);
            *(unsigned *)(q + (g * N + nb * 128 + r) * K + kb * 128 + 4 * lane) = p;
            if (qt)
                tile[r][lane] = p;
        }
        if (threadIdx.x == 0) {
            s[(g * NB + nb) * KB + kb] = (unsigned char)(e + 127);
            if (st)
                st[(g * KB + kb) * NB + nb] = (unsigned char)(e + 127);
        }
        __syncthreads(); /* the tile's codes complete; red read by all */
        if (qt) {
#pragma unroll
            for (int it = 0; it < 128 / NW; it++) {
                const int c = warp + NW * it, kg = c % 16, ng = c / 16; /* 8 columns k, 16 rows n of the tile */
                const int k = 8 * kg + lane % 8, n = 16 * ng + 4 * (lane / 8), sh = 8 * (k % 4);
                const unsigned p = ((tile[n][k / 4] >> sh) & 0xffu) | (((tile[n + 1][k / 4] >> sh) & 0xffu) << 8) |
                                   (((tile[n + 2][k / 4] >> sh) & 0xffu) << 16) |
                                   (((tile[n + 3][k / 4] >> sh) & 0xffu) << 24);
                *(unsigned *)(qt + (g * K + kb * 128 + k) * N + nb * 128 + n) = p;
            }
            __syncthreads(); /* tile is written again by the next tile */
        }
    }
}
template <int E, long long N, long long K>
__device__ void quant_weight(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st,
                             const float *w)
{
    quant_weight_from<E, N, K>(q, s, qt, st, WeightValues{w});
}

/* dp [pr] = sum_f da silu(gate) up over the padded rows (f32; double partials, the block's fixed-order
 * tree): the bf16 path's dprobs (moe_fast.cuh dswiglu) without its other outputs. 256 threads. */
template <int E, long long F, class HS = HBf16<F>>
__device__ void dprobs(float *dp, const HS h, const unsigned short *da, const int *ofs)
{
    const int total = ofs[E];
    for (int pr = blockIdx.x; pr < total; pr += gridDim.x) {
        double s = 0.0;
        for (long long f = 8 * threadIdx.x; f < F; f += 8 * blockDim.x) {
            float g[8], u[8], d_a[8];
            h.load8(pr, f, g);
            h.load8(pr, F + f, u);
            moec::fast::unpack8(*(const uint4 *)(da + (long long)pr * F + f), d_a);
            float part = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float sg = 1.0f / (1.0f + __expf(-g[i])), sl = g[i] * sg;
                part += d_a[i] * sl * u[i];
            }
            s += (double)part;
        }
        s = block_sum<256>(s);
        if (threadIdx.x == 0)
            dp[pr] = (float)s;
    }
}

/* ---- MXFP8 (--precision mxfp8 --kernels fast; docs/mxfp8.md, decision 53): 1 x 32 blocks along each GEMM's
 * reduction dimension, E8M0 scales, the same scale rule (moec_mx_scale_exp) and E4M3 encoder as fp8-block, so
 * bit-exact with runtime/cpu/mxfp8.c (mxfp8_quantize, MXFP8_SCALE_TE). Layouts: gemm_sm90_sched.h moec_mxfp8_*
 * (activation scales [C / 128][rcap][4], weight scales [E][K / 128][N][4]). The weight gradients run on the bf16
 * K-grouped GEMM (GemmFp8KGrouped promotes every 128 tokens only): their operands, quantised 32 x 1 within each
 * expert group as the CPU reference's fq_grouped, are written dequantised to bf16 [rcap, C] row-major, which is
 * exact (an E4M3 value times 2^e has 4 significant bits; bf16 keeps 8 and fp32's exponent range, down to its
 * subnormals at 2^-133: only a block with amax below 448 * 2^-125 could lose a bit). */
} /* namespace fp8b */

namespace mx8 {

/* The tile quantiser (the structure of fp8b::quant_tiles: 256 threads per 128 x 128 tile of the padded rows,
 * thread t holding columns 8 (t % 16) .. + 7 of rows 8 (t / 16) + j, j < 8, read once):
 *  - with q: each row's four 1 x 32 blocks (4 threads' 8 values: shuffles over lanes xor 1, 2), codes q [rcap, C],
 *    scale codes sa at moec_mxfp8_sa_index (pr, c / 32, rcap);
 *  - with colw: each column's four 32 x 1 blocks (rows 32 b .. 32 b + 31: warps 2 b and 2 b + 1; a tile never
 *    spans two groups and a group's padding rows are zeros, the CPU's zero-padded partial block), the values
 *    quantised and dequantised, written bf16 (exact) to colw [rcap, C] for the bf16 K-grouped GEMM;
 *  - with psrc: pdst [pr] <- the graph row's probability (0 on a padding row), in the tiles of column 0. */
template <int E, long long C, class Src>
__device__ void quant_tiles(unsigned char *q, unsigned char *sa, long long rcap, unsigned short *colw, const Src src,
                            float *pdst, const float *psrc, const int *ofs)
{
    static_assert(C % 128 == 0, "128-wide tiles along C");
    __shared__ float cmax[8][128]; /* per warp, per column: the amax over its 16 rows */
    constexpr long long CB = C / 128;
    const long long items = (long long)(ofs[E] / 128) * CB;
    const int cl = threadIdx.x % 16, rg = threadIdx.x / 16, warp = threadIdx.x / 32;
    for (long long it = blockIdx.x; it < items; it += gridDim.x) {
        const int mb = (int)(it / CB);
        const long long cb = it % CB, c0 = cb * 128, c = c0 + 8 * cl;
        const int g = moec_sched_group_of(ofs, E, mb * 128);
        float v[8][8];
        fp8b::load_tile8<C>(src, v, mb, g, c, cb, ofs);
        if (psrc && cb == 0 && cl == 0) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int pr = mb * 128 + 8 * rg + j, k = pr - ofs[g];
                pdst[pr] = k < ofs[E + 2 + g] - ofs[E + 1 + g] ? psrc[ofs[E + 1 + g] + k] : 0.0f;
            }
        }
        if (q) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int pr = mb * 128 + 8 * rg + j;
                float m = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    m = fmaxf(m, fabsf(v[j][i]));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                const int e = moec_mx_scale_exp(m);
                uint2 p;
                p.x = fp8b::q8x2(v[j][0], e, v[j][1], e) | (fp8b::q8x2(v[j][2], e, v[j][3], e) << 16);
                p.y = fp8b::q8x2(v[j][4], e, v[j][5], e) | (fp8b::q8x2(v[j][6], e, v[j][7], e) << 16);
                *(uint2 *)(q + (long long)pr * C + c) = p;
                if (cl % 4 == 0)
                    sa[moec_mxfp8_sa_index(pr, (int)(c / 32), rcap)] = (unsigned char)(e + 127);
            }
        }
        if (colw) {
            fp8b::col_amax16(v, cmax);
            __syncthreads();
            int e[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                e[i] = moec_mx_scale_exp(fmaxf(cmax[warp & ~1][8 * cl + i], cmax[warp | 1][8 * cl + i]));
            __syncthreads(); /* cmax is written again by the next tile */
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int pr = mb * 128 + 8 * rg + j;
                unsigned o[4];
#pragma unroll
                for (int i = 0; i < 8; i += 2) {
                    float lo, hi;
                    moec_e4m3_decode2(fp8b::q8x2(v[j][i], e[i], v[j][i + 1], e[i + 1]), &lo, &hi);
                    o[i / 2] = moec::fast::pack2(lo * moec_mx_pow2(e[i]), hi * moec_mx_pow2(e[i + 1]));
                }
                fp8b::st16(colw + (long long)pr * C + c, o[0], o[1], o[2], o[3]);
            }
        }
    }
}

/* A weight w [E, N, K] fp32 quantised 1 x 32 along K (the forward's operand): codes q [E, N, K], scale codes s
 * at moec_mxfp8_sb_index (g, n, k / 32, N, K). A thread per block of 32 (8 16-byte loads, 2 16-byte stores),
 * grid-stride. */
template <int E, long long N, long long K>
__device__ void weight_rows(unsigned char *q, unsigned char *s, const float *w)
{
    static_assert(K % 128 == 0, "K a multiple of 128");
    constexpr long long KB = K / 32, ITEMS = (long long)E * N * KB;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < ITEMS; i += (long long)gridDim.x * blockDim.x) {
        const long long gn = i / KB, kb = i % KB;
        const float *src = w + gn * K + kb * 32;
        float v[32];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 f = *(const float4 *)(src + 4 * j);
            v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
        }
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++)
            m = fmaxf(m, fabsf(v[j]));
        const int e = moec_mx_scale_exp(m);
        unsigned o[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] = fp8b::q8x2(v[4 * j], e, v[4 * j + 1], e) | (fp8b::q8x2(v[4 * j + 2], e, v[4 * j + 3], e) << 16);
        fp8b::st16(q + gn * K + kb * 32, o[0], o[1], o[2], o[3]);
        fp8b::st16(q + gn * K + kb * 32 + 16, o[4], o[5], o[6], o[7]);
        s[moec_mxfp8_sb_index((int)(gn / N), (int)(gn % N), (int)kb, (int)N, (int)K)] = (unsigned char)(e + 127);
    }
}

/* The data gradient's operand: W [E, N, K] quantised 32 x 1 (32 rows of W, along N: the dgrad's reduction),
 * stored as W^T [E, K, N] quantised 1 x 32 along its rows (colwise(W) = rowwise(W^T) transposed: docs/mxfp8.md),
 * so the FP8 GEMM reads it K-major: codes qt [E, K, N], scale codes st at moec_mxfp8_sb_index (g, k, n / 32, K, N).
 * A thread per (g, 32 rows n, column k): consecutive threads read consecutive k (coalesced), each writes its 32
 * codes of W^T's row k (2 16-byte stores). */
template <int E, long long N, long long K>
__device__ void weight_cols(unsigned char *qt, unsigned char *st, const float *w)
{
    static_assert(N % 128 == 0, "N a multiple of 128");
    constexpr long long NB = N / 32, ITEMS = (long long)E * NB * K;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < ITEMS; i += (long long)gridDim.x * blockDim.x) {
        const long long k = i % K, gnb = i / K, g = gnb / NB, nb = gnb % NB;
        const float *src = w + (g * N + nb * 32) * K + k;
        float v[32];
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = src[(long long)j * K];
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++)
            m = fmaxf(m, fabsf(v[j]));
        const int e = moec_mx_scale_exp(m);
        unsigned o[8];
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] = fp8b::q8x2(v[4 * j], e, v[4 * j + 1], e) | (fp8b::q8x2(v[4 * j + 2], e, v[4 * j + 3], e) << 16);
        unsigned char *dst = qt + (g * K + k) * N + nb * 32;
        fp8b::st16(dst, o[0], o[1], o[2], o[3]);
        fp8b::st16(dst + 16, o[4], o[5], o[6], o[7]);
        st[moec_mxfp8_sb_index((int)g, (int)k, (int)nb, (int)K, (int)N)] = (unsigned char)(e + 127);
    }
}

/* Both MXFP8 copies of a weight w [E, N, K] fp32 in one read (the optimizer's kernels, decision 55: the param's
 * e4m3 copy, plan.h PlanFp8Copy with mx): q, s as weight_rows (1 x 32 along K) and qt, st as weight_cols (32 x 1
 * along N stored as W^T 1 x 32 along its rows), the same bytes. One block of fp8b::WEIGHT_THREADS (512) per
 * 128 x 128 tile: warp w holds the 32 x 32 block (rows 32 (w / 4) .., columns 32 (w % 4) ..), lane l its rows
 * l / 8 + 4 j (j < 8) at columns 4 (l % 8) .. + 3, read once into registers: a row's 1 x 32 amax over lanes
 * xor 1, 2, 4, a column's 32 x 1 amax over lanes xor 8, 16 (each thread's 8 rows first). The 32 x 1 codes go
 * through shared memory (fp8b::quant_weight_from's transposed write: rows of 33 words, 4 bytes of a W^T row a
 * thread). The values come from src.load4(i) as in fp8b::quant_weight_from (fp8b::WeightValues, or the
 * optimizer's AdamwValues). N % 128 == K % 128 == 0. */
template <int E, long long N, long long K, class Src>
__device__ void quant_weight_from(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st,
                                  const Src src)
{
    static_assert(N % 128 == 0 && K % 128 == 0, "128 x 128 tiles");
    constexpr long long NB = N / 128, KB = K / 128, TILES = (long long)E * NB * KB;
    __shared__ unsigned tile[128][33]; /* the 32 x 1 codes, 4 to a word, row r of the tile in tile[r] */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, rb = warp / 4, cb = warp % 4;
    const int r0 = 32 * rb + lane / 8, c0 = 32 * cb + 4 * (lane % 8); /* rows r0 + 4 j, columns c0 .. + 3 */
    for (long long t = blockIdx.x; t < TILES; t += gridDim.x) {
        const long long g = t / (NB * KB), nb = t / KB % NB, kb = t % KB;
        const long long base = (g * N + nb * 128) * K + kb * 128;
        float v[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 f = src.load4(base + (long long)(r0 + 4 * j) * K + c0);
            v[j][0] = f.x, v[j][1] = f.y, v[j][2] = f.z, v[j][3] = f.w;
        }
        float cm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float m = fp8b::amax4(v[j]);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1)
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            const int e = moec_mx_scale_exp(m);
            const int r = r0 + 4 * j;
            *(unsigned *)(q + (g * N + nb * 128 + r) * K + kb * 128 + c0) = fp8b::pack_q4(v[j], e);
            if (lane % 8 == 0)
                s[moec_mxfp8_sb_index((int)g, (int)(nb * 128 + r), (int)(kb * 4 + cb), (int)N, (int)K)] =
                    (unsigned char)(e + 127);
#pragma unroll
            for (int i = 0; i < 4; i++)
                cm[i] = fmaxf(cm[i], fabsf(v[j][i]));
        }
        int ec[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int o = 8; o < 32; o <<= 1)
                cm[i] = fmaxf(cm[i], __shfl_xor_sync(0xffffffffu, cm[i], o));
            ec[i] = moec_mx_scale_exp(cm[i]);
            if (lane < 8)
                st[moec_mxfp8_sb_index((int)g, (int)(kb * 128 + c0 + i), (int)(nb * 4 + rb), (int)K, (int)N)] =
                    (unsigned char)(ec[i] + 127);
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
            tile[r0 + 4 * j][c0 / 4] = fp8b::q8x2(v[j][0], ec[0], v[j][1], ec[1]) |
                                       (fp8b::q8x2(v[j][2], ec[2], v[j][3], ec[3]) << 16);
        __syncthreads(); /* the tile's 32 x 1 codes complete */
        constexpr int NW = fp8b::WEIGHT_THREADS / 32;
#pragma unroll
        for (int it = 0; it < 128 / NW; it++) {
            const int c = warp + NW * it, kg = c % 16, ng = c / 16; /* 8 columns k, 16 rows n of the tile */
            const int k = 8 * kg + lane % 8, n = 16 * ng + 4 * (lane / 8), sh = 8 * (k % 4);
            const unsigned p = ((tile[n][k / 4] >> sh) & 0xffu) | (((tile[n + 1][k / 4] >> sh) & 0xffu) << 8) |
                               (((tile[n + 2][k / 4] >> sh) & 0xffu) << 16) |
                               (((tile[n + 3][k / 4] >> sh) & 0xffu) << 24);
            *(unsigned *)(qt + (g * K + kb * 128 + k) * N + nb * 128 + n) = p;
        }
        __syncthreads(); /* tile is written again by the next tile */
    }
}
template <int E, long long N, long long K>
__device__ void quant_weight(unsigned char *q, unsigned char *s, unsigned char *qt, unsigned char *st,
                             const float *w)
{
    mx8::quant_weight_from<E, N, K>(q, s, qt, st, fp8b::WeightValues{w}); /* qualified: no ADL into fp8b */
}

} /* namespace mx8 */
} /* namespace moec */
