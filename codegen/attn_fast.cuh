/* attn_fast.cuh - flash attention on the Hopper tensor cores (--kernels fast; codegen/cuda_attention.c):
 * bf16 operands, fp32 accumulators and softmax statistics, wgmma (sm_90a). Pasted into a plan's
 * kernels.cu after codegen/sm90.cuh only when a node uses it; the Makefile turns it into the C string
 * cuda_prelude_attn_fast. Design and tolerances: docs/kernels-sm90.md ("Attention").
 *
 * Layouts are the graph's: q and o [B, S, H HD], k and v [B, S, KV HD] row-major (head h's columns
 * h HD .. h HD + HD - 1), the backward's output [B, S, H HD + 2 KV HD] = [dq | dk | dv]. Where the plan
 * stores q, k and v in bf16 (docs/decisions.md 40: the projections and RoPE write bf16) the kernels read
 * them where they are; else the node first rounds them to bf16 once (to_bf16 below; the forward keeps
 * them for the backward). o and the backward's [dq | dk | dv] are written in fp32 or bf16 (st2), and the
 * backward rounds dO unless it is bf16. Softmax statistics are base 2: lse2 = log2(sum_j
 * 2^(s_ij log2e / sqrt(HD))) per (b, h, i), kept by the forward for the backward.
 *
 * Every tile kernel is one warpgroup (4 warps, 128 threads) owning 64 rows (queries, or in dk/dv keys),
 * the m64 of the warpgroup MMA: warp w holds rows 16 w .. 16 w + 15, thread (g = lane / 4, t = lane % 4)
 * rows g and g + 8 and columns 8 n + 2 t, 8 n + 2 t + 1 of every 8-column block n of an accumulator. The
 * other operand streams through shared memory (cp.async, two buffers) in the layout a 128-byte-swizzled
 * TMA box would give (load_sw), read by the tensor cores through matrix descriptors: K-major for both
 * operands of the score-like products (q k^T, dO v^T), MN-major for the B of the products with the
 * probabilities, whose A (P, dS, as bf16) stays in registers. No float atomics: dq is its own launch
 * (one block per query tile, over the key tiles) and dk/dv another (one block per key tile, over the
 * group's heads and query tiles), so runs repeat bit for bit; the price is computing the probabilities
 * twice in the backward (7 matrix products instead of 5).
 *
 * Masks: key j is visible to query i when j < S, (causal) j <= i, and (with segment ids) both are in one
 * segment, or i == j for a padding query (segment -1): the reference's seg_sees. Every query sees
 * itself, so no row is empty; fully masked tiles in a row are skipped only by the causal bound. */
namespace moec {
namespace attn {

enum { ROWS = 64 };        /* rows of a tile: 4 warps x 16 (an enumerator: no unused warning in a unit without attention) */
enum { THREADS = 128 };    /* the one-warpgroup kernels' block (an enumerator: no warning where none is used) */
[[maybe_unused]] constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float neg_inff() { return __int_as_float(0xff800000u); }

using sm90::pack_bf16x2; /* codegen/sm90.cuh, pasted before this file */
/* two adjacent outputs (8-byte aligned): fp32, or rounded to bf16 where the plan stores the output in bf16 */
__device__ __forceinline__ void st2(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
__device__ __forceinline__ void st2(unsigned short *p, float a, float b) { sm90::st_global_u32(p, pack_bf16x2(a, b)); }
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, asynchronously; src_bytes 0 fills zeros (rows past the end) */
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* The tile of a launch's item numbered (tile, b, head) with the N heads fastest, and its batch row b (B, the batch,
 * is a run-time argument: the kernels' code is the same at every batch, docs/decisions.md 62): tile = item / (B N)
 * and b = item / N % B, with one division by B, in 32 bits: a launch has fewer than 2^31 items
 * (cuda_fast_attention_ok), and a 64-bit division by a run-time value costs the head-dim-64 kernels registers (the
 * forward's 128 went to 131, one block less an SM) */
template <int N> __device__ __forceinline__ long long item_tile(long long item, long long B, long long &b)
{
    const unsigned bt = (unsigned)(item / N), t = bt / (unsigned)B;
    b = bt - t * (unsigned)B;
    return t;
}

/* segment-aware visibility (the reference's seg_sees; seg nullptr: always) */
__device__ __forceinline__ bool seg_ok(const int *seg, long long row, long long i, long long j)
{
    if (!seg)
        return true;
    int si = seg[row + i];
    return si >= 0 ? seg[row + j] == si : i == j;
}

/* ---- fp32 -> bf16, n elements (n % 8 == 0): 16-byte stores, 32-byte loads */
__device__ inline void to_bf16(long long n, unsigned short *dst, const float *src)
{
    for (long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n;
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

/* ---- backward preparation: dO -> bf16 and D = rowsum(dO o) per (b, s, h); one group of HD / 8 threads
 * per row, 8 elements each. dO and o are fp32 or bf16 (the plan's storage, docs/decisions.md 40); dob
 * nullptr: dO is bf16 already and the dq / dk-dv kernels read it where it is, only D is made here */
template <long long S, int H, int HD, typename DT, typename OT>
__device__ void bwd_prep(long long B, unsigned short *dob, float *dsum, const DT *dout, const OT *o)
{
    constexpr int G = HD / 8;
    const long long ROWS_ALL = B * S * H;
    for (long long base = (long long)blockIdx.x * blockDim.x; base < ROWS_ALL * G;
         base += (long long)gridDim.x * blockDim.x) { /* whole warps iterate together (the shuffles) */
        long long idx = base + threadIdx.x;
        bool in = idx < ROWS_ALL * G;
        idx = in ? idx : 0;
        long long r = idx / G; /* (b s) h */
        int c = (int)(idx % G) * 8;
        float d[8], ov[8];
        sm90::ld8(d, dout + r * HD + c);
        sm90::ld8(ov, o + r * HD + c);
        if (dob && in) {
            uint4 u;
            u.x = pack_bf16x2(d[0], d[1]);
            u.y = pack_bf16x2(d[2], d[3]);
            u.z = pack_bf16x2(d[4], d[5]);
            u.w = pack_bf16x2(d[6], d[7]);
            *(uint4 *)(dob + r * HD + c) = u;
        }
        float acc = d[0] * ov[0];
#pragma unroll
        for (int e = 1; e < 8; e++)
            acc += d[e] * ov[e];
#pragma unroll
        for (int off = 1; off < G; off <<= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (in && c == 0) {
            long long bs = r / H, hh = r % H, bb = bs / S, s = bs % S;
            dsum[(bb * H + hh) * S + s] = acc;
        }
    }
}

/* ---- the warpgroup MMAs (m64nNk16, bf16 in, fp32 accumulators in the fragment layout above) */
/* D[64 x 32] (+)= A[64 x 16] B[32 x 16]^T: A and B K-major in shared memory (desc_k); acc 0
 * overwrites D */
__device__ __forceinline__ void wg_ss_n32(float (&d)[16], unsigned long long da, unsigned long long db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
                 "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(acc));
}
/* D[64 x 64] (+)= A[64 x 16] B[64 x 16]^T: A and B K-major in shared memory (desc_k); acc 0
 * overwrites D */
__device__ __forceinline__ void wg_ss_n64(float (&d)[32], unsigned long long da, unsigned long long db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(acc));
}
/* D[64 x 64] (+)= A[64 x 16] B[16 x 64]: A in registers (each warp's 16 rows as the m16n8k16 A
 * fragment), B in shared memory, MN-major (TRANS_B 1, desc_mn) or K-major (TRANS_B 0, desc_k); acc 0
 * overwrites D */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n64(float (&d)[32], const unsigned (&a)[4], unsigned long long db, int acc = 1)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TRANS_B));
}
/* D[64 x 128] (+)= A[64 x 16] B[16 x 128]: A in registers (each warp's 16 rows as the m16n8k16 A
 * fragment), B in shared memory, MN-major (TRANS_B 1, desc_mn) or K-major (TRANS_B 0, desc_k); acc 0
 * overwrites D */
template <int TRANS_B>
__device__ __forceinline__ void wg_rs_n128(float (&d)[64], const unsigned (&a)[4], unsigned long long db, int acc = 1)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
                 "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc), "n"(TRANS_B));
}
/* rows [r0, r0 + NR) of a bf16 [.., W] matrix, columns col .. col + HD - 1, into shared memory at dst
 * (1024-byte aligned) as HD / 64 boxes of [NR][64 bf16] with 128-byte swizzle: the 16-byte chunk c of
 * row r of a box at r 128 + ((c ^ r % 8) 16). Rows at or past `rows` are zeros. Each thread copies the
 * same chunk of every STEP-th row (STEP a multiple of 8, so its swizzle is fixed): the addresses are a
 * base plus constants, a few instructions per 16 bytes. */
template <int HD, int NR>
__device__ __forceinline__ void load_sw(unsigned dst, const unsigned short *src, long long W, long long r0,
                                        long long rows, long long col)
{
    constexpr int CHUNKS = HD / 8, STEP = THREADS / CHUNKS;
    static_assert(STEP % 8 == 0 && NR % STEP == 0, "whole passes of rows, one swizzle per thread");
    const int k = threadIdx.x % CHUNKS, r = threadIdx.x / CHUNKS;
    const unsigned d0 = dst + (unsigned)((k >> 3) * NR * 128 + r * 128 + (((k & 7) ^ (r & 7)) << 4));
    const unsigned short *s0 = src + (r0 + r) * W + col + k * 8;
    if (r0 + NR <= rows) {
#pragma unroll
        for (int i = 0; i < NR / STEP; i++)
            cp_async16(d0 + (unsigned)(i * STEP * 128), s0 + i * STEP * W, 16);
    } else {
#pragma unroll
        for (int i = 0; i < NR / STEP; i++) {
            bool in = r0 + r + i * STEP < rows;
            cp_async16(d0 + (unsigned)(i * STEP * 128), in ? s0 + i * STEP * W : src, in ? 16 : 0);
        }
    }
}
/* the kk-th 16-wide K slice of a K-major load_sw tile of NR rows */
template <int NR> __device__ __forceinline__ unsigned long long desc_k(unsigned tile, int kk)
{
    return sm90::desc_sw128(tile + (unsigned)((kk >> 2) * NR * 128 + (kk & 3) * 32));
}
/* the kk-th 16-deep K slice (rows 16 kk ..) of a load_sw tile of NR rows read MN-major (N along its columns) */
template <int NR> __device__ __forceinline__ unsigned long long desc_mn(unsigned tile, int kk)
{
    return sm90::desc_mn_sw128(tile + (unsigned)(kk * 2048), NR * 128);
}
/* D[64 x HD] += A[64 x 16] B[16 x HD] (B: desc_mn) */
template <int HD> __device__ __forceinline__ void wg_rs_hd(float (&d)[HD / 2], const unsigned (&a)[4], unsigned long long db)
{
    if constexpr (HD == 64)
        wg_rs_n64<1>(d, a, db);
    else
        wg_rs_n128<1>(d, a, db);
}
/* the A fragments (k-steps of 16 columns) of this warp's 16 rows (its warpgroup's warp w: rows 16 w ..) of a
 * K-major load_sw tile of ROWS rows, for products with the operand in registers: ldmatrix from the swizzled
 * layout */
template <int HD> __device__ __forceinline__ void load_frags(unsigned (&a)[HD / 16][4], unsigned tile)
{
    const int lane = threadIdx.x & 31, r = ((threadIdx.x >> 5) & 3) * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        int c = kk * 2 + (lane >> 4); /* 16-byte chunk of the row */
        unsigned addr = tile + (unsigned)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                     : "r"(addr));
    }
}
/* D[64 x N] (+)= A B^T, both K-major (N 32 or 64) */
template <int N> __device__ __forceinline__ void wg_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db, int acc)
{
    if constexpr (N == 32)
        wg_ss_n32(d, da, db, acc);
    else
        wg_ss_n64(d, da, db, acc);
}
/* waits for the wgmma batch just committed, then keeps the compiler from reading d earlier */
template <int R> __device__ __forceinline__ void wg_done(float (&d)[R])
{
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::reg_fence(d);
}
/* keeps the A registers of a wgmma in flight alive (and unmodified) until after its wait */
template <int R> __device__ __forceinline__ void reg_fence_u(unsigned (&a)[R][4])
{
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int x = 0; x < 4; x++)
            asm volatile("" : "+r"(a[i][x])::"memory");
}
/* 2^x (MUFU.EX2; subnormal results flush to 0, -inf gives 0): the probabilities' exponent */
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* 0, computed from x so that ptxas cannot move the computation of x below its use (prmt with every byte taken
 * from the constant 0; ptxas does not fold it) */
__device__ __forceinline__ int opaque_zero(unsigned x)
{
    unsigned z;
    asm volatile("prmt.b32 %0, %1, 0, 0x4444;\n" : "=r"(z) : "r"(x));
    return (int)z;
}
/* the fence of SCHED >= 1 (fwd_ws, bwd_dq_ws) before a wgmma wait: a barrier of the warpgroup's 128 threads
 * (named barrier id, 3 or 4: one a consumer warpgroup) whose id depends on dep. ptxas moves a wgmma wait up past
 * any arithmetic (decision 50's forward waited for its product with v_{j-1} before the first exponential), but
 * not past a bar.sync, and the bar.sync cannot go above the arithmetic dep comes from; the four warps of a
 * warpgroup are in step anyway (every wgmma is warpgroup-wide) */
__device__ __forceinline__ void wg_fence(int id, unsigned dep)
{
    sm90::named_barrier(id + opaque_zero(dep), 128);
}
/* the shared-memory window, 1024-byte aligned (the emitters ask for 1 KB more than the kernels use) */
__device__ __forceinline__ unsigned smem_base()
{
    extern __shared__ __align__(16) unsigned short attn_smem[];
    return (smem_u32(attn_smem) + 1023u) & ~1023u;
}
__device__ __forceinline__ unsigned char *smem_ptr(unsigned addr)
{
    extern __shared__ __align__(16) unsigned short attn_smem[];
    return (unsigned char *)attn_smem + (addr - smem_u32(attn_smem));
}
/* copies waited for, made visible to the tensor cores (async proxy) and to every thread */
template <int N> __device__ __forceinline__ void tiles_ready()
{
    cp_async_wait<N>();
    sm90::fence_proxy_async();
    __syncthreads();
}

/* ---- forward: one block per (b, h, 64 queries). Key tile j: s_j = q k_j^T (both operands in shared
 * memory), then P_j from s_j in registers. o += P_{j-1} v_{j-1} is issued right behind s_j, so the
 * tensor cores work on it while the warpgroup computes the softmax of s_j; o is rescaled to the new
 * running max once it is done. Shared memory: q, k_j and k_{j+1}, v_{j-1} and v_j. */
/* o: fp32 or bf16 (OT unsigned short: the plan stores the output in bf16, rounded to nearest even) */
template <long long S, int H, int KV, int HD, bool CAUSAL, typename OT>
__device__ void fwd(long long B, long long item, OT *o, float *lse2, const unsigned short *q, const unsigned short *k,
                    const unsigned short *v, const int *seg)
{
    constexpr int NB = ROWS / 8, TILE = ROWS * HD * 2;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, QTILES = (S + ROWS - 1) / ROWS;
    const unsigned qb = smem_base(), kb = qb + TILE, vb = kb + 2 * TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD);

    long long b;
    long long qt = QTILES - 1 - item_tile<H>(item, B, b); /* the heaviest causal tiles first */
    int h = (int)(item % H);
    int kvh = h / (H / KV);
    long long q0 = qt * ROWS, row = b * S;
    long long kend = CAUSAL ? (q0 + ROWS < S ? q0 + ROWS : S) : S;
    int ntiles = (int)((kend + ROWS - 1) / ROWS);
    const unsigned short *kp = k + row * WK, *vp = v + row * WK;

    load_sw<HD, ROWS>(qb, q + row * WQ, WQ, q0, S, (long long)h * HD);
    load_sw<HD, ROWS>(kb, kp, WK, 0, S, (long long)kvh * HD);
    cp_async_commit();

    float acc[HD / 2];
#pragma unroll
    for (int x = 0; x < HD / 2; x++)
        acc[x] = 0.f;
    float m[2] = {neg_inff(), neg_inff()}, l[2] = {0.f, 0.f}; /* m: the running max of s sl2 */
    const long long i0 = q0 + warp * 16 + g; /* this thread's rows: i0, i0 + 8 */
    unsigned p[NB / 2][4];                   /* P_{j-1}, the A of the product in flight */
    unsigned qa[HD / 16][4];                 /* q, the A of s = q k^T */

    for (int jt = 0; jt < ntiles; jt++) {
        __syncthreads(); /* the buffers refilled below are no longer read */
        if (jt + 1 < ntiles)
            load_sw<HD, ROWS>(kb + (unsigned)(((jt + 1) & 1) * TILE), kp, WK, (long long)(jt + 1) * ROWS, S,
                              (long long)kvh * HD);
        load_sw<HD, ROWS>(vb + (unsigned)((jt & 1) * TILE), vp, WK, (long long)jt * ROWS, S, (long long)kvh * HD);
        cp_async_commit();
        tiles_ready<1>(); /* k_j and v_{j-1} */
        const unsigned kt = kb + (unsigned)((jt & 1) * TILE), vprev = vb + (unsigned)(((jt + 1) & 1) * TILE);
        const long long j0 = (long long)jt * ROWS;

        float s[NB * 4];
#pragma unroll
        for (int x = 0; x < NB * 4; x++)
            s[x] = 0.f;
        if (jt == 0)
            load_frags<HD>(qa, qb);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            wg_rs_n64<0>(s, qa[kk], desc_k<ROWS>(kt, kk), kk);
        sm90::wgmma_commit();
        if (jt > 0) { /* o += P_{j-1} v_{j-1}: v [key][hd] read MN-major */
#pragma unroll
            for (int kk = 0; kk < NB / 2; kk++)
                wg_rs_hd<HD>(acc, p[kk], desc_mn<ROWS>(vprev, kk));
        }
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>(); /* s_j; the product with v_{j-1} may still run */
        sm90::reg_fence(s);
        /* mask, running max (of s; scaled by sl2 > 0 afterwards) */
        const bool edge = seg || j0 + ROWS > S || (CAUSAL && j0 + ROWS - 1 > q0);
        float mx[2] = {neg_inff(), neg_inff()};
#pragma unroll
        for (int n = 0; n < NB; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                long long i = i0 + 8 * (e >> 1), j = j0 + n * 8 + 2 * t + (e & 1);
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) || !seg_ok(seg, row, i, j)))
                    s[4 * n + e] = neg_inff();
                mx[e >> 1] = fmaxf(mx[e >> 1], s[4 * n + e]);
            }
        float alpha[2], rs[2] = {0.f, 0.f}, nb[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            float mn = fmaxf(m[r], mx[r] * sl2);
            float base = mn == neg_inff() ? 0.f : mn;
            alpha[r] = ex2(m[r] - base); /* m = -inf: 0 */
            m[r] = mn;
            nb[r] = -base;
        }
        unsigned pn[NB / 2][4];
#pragma unroll
        for (int n = 0; n < NB; n++) {
            float e0 = ex2(fmaf(s[4 * n], sl2, nb[0])), e1 = ex2(fmaf(s[4 * n + 1], sl2, nb[0]));
            float e2 = ex2(fmaf(s[4 * n + 2], sl2, nb[1])), e3 = ex2(fmaf(s[4 * n + 3], sl2, nb[1]));
            rs[0] += e0 + e1;
            rs[1] += e2 + e3;
            pn[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(e0, e1);
            pn[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(e2, e3);
        }
        l[0] = l[0] * alpha[0] + rs[0];
        l[1] = l[1] * alpha[1] + rs[1];
        sm90::wgmma_wait<0>();
        sm90::reg_fence(acc);
        reg_fence_u(p);
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            acc[4 * n] *= alpha[0];
            acc[4 * n + 1] *= alpha[0];
            acc[4 * n + 2] *= alpha[1];
            acc[4 * n + 3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < NB / 2; kk++)
#pragma unroll
            for (int x = 0; x < 4; x++)
                p[kk][x] = pn[kk][x];
    }
    /* o += P_last v_last */
    tiles_ready<0>();
    const unsigned vlast = vb + (unsigned)(((ntiles - 1) & 1) * TILE);
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NB / 2; kk++)
        wg_rs_hd<HD>(acc, p[kk], desc_mn<ROWS>(vlast, kk));
    wg_done(acc);
    reg_fence_u(p);
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
        OT *out = o + (row + i) * WQ + (long long)h * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            st2(out + n * 8, acc[4 * n + 2 * r] * inv, acc[4 * n + 2 * r + 1] * inv);
        }
        if (t == 0)
            lse2[((b * H + h) * S) + i] = m[r] + log2f(l[r]);
    }
}

/* ---- forward, warp-specialised (the backward's bwd_dq_ws structure): one block of three warpgroups per
 * (b, head, 128 queries), the heaviest causal tiles first. The producer (one thread of warpgroup 0) loads
 * each consumer's q tile once an item (q_full; refilled when both consumers are done with the item:
 * q_empty) and streams k and v tiles of 64 keys by TMA through a ring of NS slots (full: the TMA bytes;
 * empty: one arrival per consumer warp). Warpgroups 1 and 2 own queries q0 .. q0 + 63 and q0 + 64 ..
 * q0 + 127 and do what fwd does per key tile (s_j = q k_j^T with q in registers, the product with v_{j-1}
 * issued behind it and run during the softmax of s_j), freeing slot j - 1 once that product is done.
 * Causal: the first consumer stops a tile early (it only frees the last slot). Tensor maps, rows past S
 * and krow0 / vrow0 as in bwd_dkv_ws. SCHED (docs/decisions.md 59): 0 decision 50's step; 1 every exponential
 * before the wait for the product with v_{j-1} (wg_fence); 2 that and the two consumers' products in strict
 * alternation (named barriers 1 and 2: a consumer waits at 1 + cw before issuing, arrives at 2 - cw after; the
 * first consumer skips its block's first wait, the second arrives after every step but its block's last, and a
 * skipped causal tile is still a turn, so the barriers balance). The results do not depend on SCHED. */
template <long long S, int H, int KV, int HD, bool CAUSAL, int NS, int SCHED, typename OT>
__device__ void fwd_ws(long long items, long long B, long long krow0, long long vrow0, OT *o, float *lse2,
                       const sm90::TmaDesc *tq, const sm90::TmaDesc *tk, const sm90::TmaDesc *tv, const int *seg)
{
    constexpr int NB = ROWS / 8, TILE = ROWS * HD * 2, QB = 2 * ROWS, BOX = ROWS * 128;
    constexpr long long WQ = (long long)H * HD, QTILES = (S + QB - 1) / QB;
    const unsigned qb = smem_base(), kb = qb + 2 * TILE, vb = kb + NS * TILE;
    const unsigned full = vb + NS * TILE, empty = full + 8 * NS, q_full = empty + 8 * NS, q_empty = q_full + 8;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int x = 0; x < NS; x++) {
            sm90::mbar_init(full + 8 * x, 1);
            sm90::mbar_init(empty + 8 * x, 8);
        }
        sm90::mbar_init(q_full, 1);
        sm90::mbar_init(q_empty, 8);
        sm90::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        sm90::setmaxnreg_dec<40>();
        if (warp != 0 || lane != 0)
            return;
        sm90::tma_prefetch_desc(tq);
        sm90::tma_prefetch_desc(tk);
        sm90::tma_prefetch_desc(tv);
        int stage = 0;
        unsigned phase = 0, qph = 0;
        for (long long item = blockIdx.x; item < items; item += gridDim.x) {
            long long b;
            const long long qt = QTILES - 1 - item_tile<H>(item, B, b), q0 = qt * QB, row = b * S;
            const int h = (int)(item % H), kvh = h / (H / KV);
            const long long kend = CAUSAL ? (q0 + QB < S ? q0 + QB : S) : S;
            const int ntiles = (int)((kend + ROWS - 1) / ROWS);
            sm90::mbar_wait(q_empty, qph ^ 1);
            qph ^= 1;
            sm90::mbar_arrive_expect_tx(q_full, 2 * TILE);
#pragma unroll
            for (int w = 0; w < 2; w++)
#pragma unroll
                for (int c = 0; c < HD / 64; c++)
                    sm90::tma_load_2d(qb + (unsigned)(w * TILE + c * BOX), tq, q_full, h * HD + 64 * c,
                                      (int)(row + q0 + 64 * w));
            for (int jt = 0; jt < ntiles; jt++) {
                sm90::mbar_wait(empty + 8 * stage, phase ^ 1);
                sm90::mbar_arrive_expect_tx(full + 8 * stage, 2 * TILE);
#pragma unroll
                for (int c = 0; c < HD / 64; c++) {
                    const unsigned off = (unsigned)(stage * TILE + c * BOX);
                    sm90::tma_load_2d(kb + off, tk, full + 8 * stage, kvh * HD + 64 * c,
                                      (int)(krow0 + row + jt * ROWS));
                    sm90::tma_load_2d(vb + off, tv, full + 8 * stage, kvh * HD + 64 * c,
                                      (int)(vrow0 + row + jt * ROWS));
                }
                if (++stage == NS) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    /* consumers */
    sm90::setmaxnreg_inc<232>();
    const int cw = wg - 1, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD);
    const unsigned qw = qb + (unsigned)(cw * TILE);
    int stage = 0;
    unsigned phase = 0, qph = 0;
    bool first_turn = true; /* SCHED 2: the block's first key tile (warpgroup 1 goes first) */
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        long long b;
        const long long qt = QTILES - 1 - item_tile<H>(item, B, b), q0 = qt * QB, row = b * S;
        const int h = (int)(item % H);
        const long long kend = CAUSAL ? (q0 + QB < S ? q0 + QB : S) : S;
        const int ntiles = (int)((kend + ROWS - 1) / ROWS);
        const long long qc = q0 + cw * ROWS, iw = qc + warp * 16 + g; /* this thread's queries: iw, iw + 8 */
        /* the key tiles this warpgroup uses (causal: up to its last query's); it frees the rest unread */
        const int mine = CAUSAL && qc / ROWS + 1 < ntiles ? (int)(qc / ROWS) + 1 : ntiles;
        bool iin[2] = {iw < S, iw + 8 < S};
        int segq[2] = {0, 0};
        if (seg) {
            segq[0] = iin[0] ? seg[row + iw] : 0;
            segq[1] = iin[1] ? seg[row + iw + 8] : 0;
        }
        float acc[HD / 2];
#pragma unroll
        for (int x = 0; x < HD / 2; x++)
            acc[x] = 0.f;
        float m[2] = {neg_inff(), neg_inff()}, l[2] = {0.f, 0.f}; /* m: the running max of s sl2 */
        const bool last_item = item + gridDim.x >= items;
        unsigned p[NB / 2][4];                                    /* P_{j-1}, the A of the product in flight */
        unsigned qa[HD / 16][4];                                  /* q, the A of s = q k^T */
        sm90::mbar_wait(q_full, qph);
        qph ^= 1;
        load_frags<HD>(qa, qw);
        int prev = 0; /* the slot of tile j - 1 */

        /* P_{-1} = 0 and "v_{-1}" the k tile: the product of tile 0 adds exact zeros, so every step issues the
         * same wgmma. (ptxas serialises every wgmma of the kernel where one sits on a conditional path, and
         * also where p is given a value before the loop rather than in it: hence the zeros at jt 0.) */
        for (int jt = 0; jt < mine; jt++) {
            const long long j0 = (long long)jt * ROWS;
            sm90::mbar_wait(full + 8 * stage, phase);
            const unsigned kt = kb + (unsigned)(stage * TILE), vprev = jt > 0 ? vb + (unsigned)(prev * TILE) : kt;
            float s[NB * 4];
#pragma unroll
            for (int x = 0; x < NB * 4; x++)
                s[x] = 0.f;
            if (jt == 0) {
#pragma unroll
                for (int kk = 0; kk < NB / 2; kk++)
#pragma unroll
                    for (int x = 0; x < 4; x++)
                        p[kk][x] = 0u;
            }
            if constexpr (SCHED == 2) { /* ping-pong: issue only once the other warpgroup has issued its step */
                if (cw == 1 || !first_turn)
                    sm90::named_barrier(1 + cw, 256);
                first_turn = false;
            }
            sm90::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++)
                wg_rs_n64<0>(s, qa[kk], desc_k<ROWS>(kt, kk), kk);
            sm90::wgmma_commit();
            /* o += P_{j-1} v_{j-1}: v [key][hd] read MN-major */
#pragma unroll
            for (int kk = 0; kk < NB / 2; kk++)
                wg_rs_hd<HD>(acc, p[kk], desc_mn<ROWS>(vprev, kk));
            sm90::wgmma_commit();
            if constexpr (SCHED == 2) /* the other warpgroup may issue its step (none after the block's last) */
                if (cw == 0 || !(last_item && jt == ntiles - 1))
                    sm90::named_barrier_arrive(2 - cw, 256);
            sm90::wgmma_wait<1>(); /* s_j; the product with v_{j-1} may still run */
            sm90::reg_fence(s);
            /* mask (32-bit offsets as in bwd_dq_ws), running max (of s; scaled by sl2 > 0 afterwards) */
            const bool edge = seg || j0 + ROWS > S || qc + ROWS > S || (CAUSAL && j0 + ROWS - 1 > qc);
            const int dij = (int)(iw - j0) - 2 * t, jlim = (int)(S - j0 < ROWS ? S - j0 : ROWS) - 2 * t;
            float mx[2] = {neg_inff(), neg_inff()};
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1, d = 8 * r - n * 8 - (e & 1);
                    if (edge) {
                        bool vis = iin[r] && n * 8 + (e & 1) < jlim && (!CAUSAL || dij + d >= 0);
                        if (seg && vis) {
                            const int sj = seg[row + j0 + n * 8 + 2 * t + (e & 1)];
                            vis = segq[r] >= 0 ? sj == segq[r] : dij + d == 0;
                        }
                        if (!vis)
                            s[4 * n + e] = neg_inff();
                    }
                    mx[r] = fmaxf(mx[r], s[4 * n + e]);
                }
            float alpha[2], rs[2] = {0.f, 0.f}, nb[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mn = fmaxf(m[r], mx[r] * sl2);
                float base = mn == neg_inff() ? 0.f : mn;
                alpha[r] = ex2(m[r] - base); /* m = -inf: 0 */
                m[r] = mn;
                nb[r] = -base;
            }
            if constexpr (SCHED >= 1) {
                /* the exponentials in place (fp32), all of them before the wait for P_{j-1} v_{j-1} (wg_fence on
                 * the row sums; SCHED 0's wait came before the first exponential), packed into P_j after it */
#pragma unroll
                for (int n = 0; n < NB; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        s[4 * n + e] = ex2(fmaf(s[4 * n + e], sl2, nb[e >> 1]));
                    rs[0] += s[4 * n] + s[4 * n + 1];
                    rs[1] += s[4 * n + 2] + s[4 * n + 3];
                }
                l[0] = l[0] * alpha[0] + rs[0];
                l[1] = l[1] * alpha[1] + rs[1];
                wg_fence(3 + cw, __float_as_uint(l[0]) ^ __float_as_uint(l[1]));
                sm90::wgmma_wait<0>();
                sm90::reg_fence(acc);
                reg_fence_u(p);
                if (jt > 0) { /* v_{j-1} read: its slot is free */
                    __syncwarp();
                    if (lane == 0)
                        sm90::mbar_arrive(empty + 8 * prev);
                }
#pragma unroll
                for (int n = 0; n < HD / 8; n++) {
                    acc[4 * n] *= alpha[0];
                    acc[4 * n + 1] *= alpha[0];
                    acc[4 * n + 2] *= alpha[1];
                    acc[4 * n + 3] *= alpha[1];
                }
#pragma unroll
                for (int n = 0; n < NB; n++) {
                    p[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(s[4 * n], s[4 * n + 1]);
                    p[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(s[4 * n + 2], s[4 * n + 3]);
                }
            } else {
                unsigned pn[NB / 2][4];
#pragma unroll
                for (int n = 0; n < NB; n++) {
                    float e0 = ex2(fmaf(s[4 * n], sl2, nb[0])), e1 = ex2(fmaf(s[4 * n + 1], sl2, nb[0]));
                    float e2 = ex2(fmaf(s[4 * n + 2], sl2, nb[1])), e3 = ex2(fmaf(s[4 * n + 3], sl2, nb[1]));
                    rs[0] += e0 + e1;
                    rs[1] += e2 + e3;
                    pn[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(e0, e1);
                    pn[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(e2, e3);
                }
                l[0] = l[0] * alpha[0] + rs[0];
                l[1] = l[1] * alpha[1] + rs[1];
                sm90::wgmma_wait<0>();
                sm90::reg_fence(acc);
                reg_fence_u(p);
                if (jt > 0) { /* v_{j-1} read: its slot is free */
                    __syncwarp();
                    if (lane == 0)
                        sm90::mbar_arrive(empty + 8 * prev);
                }
#pragma unroll
                for (int n = 0; n < HD / 8; n++) {
                    acc[4 * n] *= alpha[0];
                    acc[4 * n + 1] *= alpha[0];
                    acc[4 * n + 2] *= alpha[1];
                    acc[4 * n + 3] *= alpha[1];
                }
#pragma unroll
                for (int kk = 0; kk < NB / 2; kk++)
#pragma unroll
                    for (int x = 0; x < 4; x++)
                        p[kk][x] = pn[kk][x];
            }
            prev = stage;
            if (++stage == NS) {
                stage = 0;
                phase ^= 1;
            }
        }
        /* o += P_last v_last (mine >= 1: tile 0 holds key 0, which every query sees) */
        const unsigned vlast = vb + (unsigned)(prev * TILE);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NB / 2; kk++)
            wg_rs_hd<HD>(acc, p[kk], desc_mn<ROWS>(vlast, kk));
        wg_done(acc);
        reg_fence_u(p);
        __syncwarp();
        if (lane == 0) {
            sm90::mbar_arrive(empty + 8 * prev);
            sm90::mbar_arrive(q_empty); /* q is in registers since the item began */
        }
        for (int jt = mine; jt < ntiles; jt++) { /* the tiles past this warpgroup's queries: freed unread */
            if constexpr (SCHED == 2) { /* still a turn of the ping-pong (causal: warpgroup 1's last tile) */
                if (cw == 1 || !first_turn)
                    sm90::named_barrier(1 + cw, 256);
                first_turn = false;
                if (cw == 0 || !(last_item && jt == ntiles - 1))
                    sm90::named_barrier_arrive(2 - cw, 256);
            }
            sm90::mbar_wait(full + 8 * stage, phase);
            __syncwarp();
            if (lane == 0)
                sm90::mbar_arrive(empty + 8 * stage);
            if (++stage == NS) {
                stage = 0;
                phase ^= 1;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const long long i = iw + 8 * r;
            if (!iin[r])
                continue;
            float inv = 1.f / l[r];
            OT *out = o + (row + i) * WQ + (long long)h * HD + 2 * t;
#pragma unroll
            for (int n = 0; n < HD / 8; n++)
                st2(out + n * 8, acc[4 * n + 2 * r] * inv, acc[4 * n + 2 * r + 1] * inv);
            if (t == 0)
                lse2[((b * H + h) * S) + i] = m[r] + log2f(l[r]);
        }
    }
}

/* ---- backward, dq: one block per (b, h, 64 queries) over the key tiles; s = q k^T and
 * dP = dO v^T (shared memory operands), dq += dS k (dS in registers, k read MN-major) */
template <long long S, int H, int KV, int HD, bool CAUSAL, typename OT>
__device__ void bwd_dq(long long B, long long item, OT *out, const unsigned short *q, const unsigned short *k,
                          const unsigned short *v, const unsigned short *dob, const float *lse2, const float *dsum,
                          const int *seg)
{
    constexpr int NB = ROWS / 8, TILE = ROWS * HD * 2;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    constexpr long long QTILES = (S + ROWS - 1) / ROWS;
    const unsigned qb = smem_base(), dob_s = qb + TILE, kb = dob_s + TILE, vb = kb + 2 * TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);

    long long b;
    long long qt = QTILES - 1 - item_tile<H>(item, B, b);
    int h = (int)(item % H);
    int kvh = h / (H / KV);
    long long q0 = qt * ROWS, row = b * S;
    long long kend = CAUSAL ? (q0 + ROWS < S ? q0 + ROWS : S) : S;
    int ntiles = (int)((kend + ROWS - 1) / ROWS);

    load_sw<HD, ROWS>(qb, q + row * WQ, WQ, q0, S, (long long)h * HD);
    load_sw<HD, ROWS>(dob_s, dob + row * WQ, WQ, q0, S, (long long)h * HD);
    load_sw<HD, ROWS>(kb, k + row * WK, WK, 0, S, (long long)kvh * HD);
    load_sw<HD, ROWS>(vb, v + row * WK, WK, 0, S, (long long)kvh * HD);
    cp_async_commit();

    const long long i0 = q0 + warp * 16 + g;
    float lse[2], dd[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = i0 + 8 * r;
        lse[r] = i < S ? lse2[(b * H + h) * S + i] : 0.f;
        dd[r] = i < S ? dsum[(b * H + h) * S + i] : 0.f;
    }
    float dq[HD / 2];
#pragma unroll
    for (int x = 0; x < HD / 2; x++)
        dq[x] = 0.f;
    unsigned qa[HD / 16][4], da[HD / 16][4]; /* q and dO, the A of s = q k^T and dP = dO v^T */

    for (int jt = 0; jt < ntiles; jt++) {
        const int buf = jt & 1;
        if (jt + 1 < ntiles) {
            load_sw<HD, ROWS>(kb + (unsigned)((buf ^ 1) * TILE), k + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                              (long long)kvh * HD);
            load_sw<HD, ROWS>(vb + (unsigned)((buf ^ 1) * TILE), v + row * WK, WK, (long long)(jt + 1) * ROWS, S,
                              (long long)kvh * HD);
        }
        cp_async_commit();
        tiles_ready<1>();
        const unsigned kt = kb + (unsigned)(buf * TILE), vt = vb + (unsigned)(buf * TILE);
        const long long j0 = (long long)jt * ROWS;
        float s[NB * 4], dp[NB * 4];
#pragma unroll
        for (int x = 0; x < NB * 4; x++)
            s[x] = dp[x] = 0.f;
        if (jt == 0) {
            load_frags<HD>(qa, qb);
            load_frags<HD>(da, dob_s);
        }
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            wg_rs_n64<0>(s, qa[kk], desc_k<ROWS>(kt, kk), kk);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            wg_rs_n64<0>(dp, da[kk], desc_k<ROWS>(vt, kk), kk);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(s);
        sm90::reg_fence(dp);
        const bool edge = seg || j0 + ROWS > S || (CAUSAL && j0 + ROWS - 1 > q0);
        unsigned ds[NB / 2][4];
#pragma unroll
        for (int n = 0; n < NB; n++) {
            float x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                long long i = i0 + 8 * (e >> 1), j = j0 + n * 8 + 2 * t + (e & 1);
                float pij = ex2(fmaf(s[4 * n + e], sl2, -lse[e >> 1]));
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) || !seg_ok(seg, row, i, j)))
                    pij = 0.f;
                x[e] = pij * (dp[4 * n + e] - dd[e >> 1]);
            }
            ds[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
            ds[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
        }
        /* dq += dS k: k [key][hd] read MN-major */
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NB / 2; kk++)
            wg_rs_hd<HD>(dq, ds[kk], desc_mn<ROWS>(kt, kk));
        wg_done(dq);
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long i = i0 + 8 * r;
        if (i >= S)
            continue;
        OT *dst = out + (row + i) * WP + (long long)h * HD + 2 * t;
#pragma unroll
        for (int n = 0; n < HD / 8; n++)
            st2(dst + n * 8, dq[4 * n + 2 * r] * scale, dq[4 * n + 2 * r + 1] * scale);
    }
}

/* ---- backward, dk and dv: one block per (b, kv head, 64 keys) over the group's heads and the query
 * tiles (QR at a time); s^T = k q^T, dP^T = v dO^T (shared memory operands), dv += P^T dO and
 * dk += dS^T q (P^T, dS^T in registers, dO and q read MN-major) */
template <long long S, int H, int KV, int HD, bool CAUSAL, int QR, typename OT>
__device__ void bwd_dkv(long long B, long long item, OT *out, const unsigned short *q, const unsigned short *k,
                           const unsigned short *v, const unsigned short *dob, const float *lse2, const float *dsum,
                           const int *seg)
{
    constexpr int NQ = QR / 8, REP = H / KV, TILE = ROWS * HD * 2, QT = QR * HD * 2;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    static_assert(ROWS % QR == 0 && (QR == 32 || QR == 64), "query tiles of 32 or 64 rows");
    const unsigned kb = smem_base(), vb = kb + TILE, qb = vb + TILE, dob_s = qb + 2 * QT;
    float *st = (float *)smem_ptr(dob_s + 2 * QT); /* [2][2][QR]: lse2, D per buffer */
    int *sq = (int *)(st + 4 * QR);                 /* [2][QR] query segment ids */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);

    long long b;
    long long ktile = item_tile<KV>(item, B, b); /* causal: early key tiles see the most queries, so go first */
    int kvh = (int)(item % KV);
    long long j0 = ktile * ROWS, row = b * S;
    long long istart = CAUSAL ? j0 : 0;
    int nqt = (int)((S - istart + QR - 1) / QR), total = REP * nqt;

    load_sw<HD, ROWS>(kb, k + row * WK, WK, j0, S, (long long)kvh * HD);
    load_sw<HD, ROWS>(vb, v + row * WK, WK, j0, S, (long long)kvh * HD);
    auto stage = [&](int it, int buf) {
        int h = kvh * REP + it / nqt;
        long long i0 = istart + (long long)(it % nqt) * QR;
        load_sw<HD, QR>(qb + (unsigned)(buf * QT), q + row * WQ, WQ, i0, S, (long long)h * HD);
        load_sw<HD, QR>(dob_s + (unsigned)(buf * QT), dob + row * WQ, WQ, i0, S, (long long)h * HD);
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
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int x = 0; x < HD / 2; x++)
        dk[x] = dv[x] = 0.f;

    for (int it = 0; it < total; it++) {
        const int buf = it & 1;
        __syncthreads(); /* the other buffer's last readers are done */
        if (it + 1 < total)
            stage(it + 1, buf ^ 1);
        cp_async_commit();
        tiles_ready<1>();
        const unsigned qt_ = qb + (unsigned)(buf * QT), dt = dob_s + (unsigned)(buf * QT);
        const float *lse = st + buf * 2 * QR, *dd = lse + QR;
        const int *sg = sq + buf * QR;
        const long long i0 = istart + (long long)(it % nqt) * QR;
        float s[NQ * 4], dp[NQ * 4];
#pragma unroll
        for (int x = 0; x < NQ * 4; x++)
            s[x] = dp[x] = 0.f;
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            wg_ss<QR>(s, desc_k<ROWS>(kb, kk), desc_k<QR>(qt_, kk), kk);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            wg_ss<QR>(dp, desc_k<ROWS>(vb, kk), desc_k<QR>(dt, kk), kk);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(s);
        sm90::reg_fence(dp);
        const bool edge = seg || i0 + QR > S || jw - g + 16 > S || (CAUSAL && i0 < j0 + ROWS);
        unsigned pt[NQ / 2][4], dst[NQ / 2][4];
#pragma unroll
        for (int n = 0; n < NQ; n++) {
            float p[4], x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int ci = n * 8 + 2 * t + (e & 1);
                long long j = jw + 8 * (e >> 1), i = i0 + ci;
                float pij = ex2(fmaf(s[4 * n + e], sl2, -lse[ci]));
                if (edge && (j >= S || i >= S || (CAUSAL && j > i) ||
                             (seg && (sg[ci] >= 0 ? segk[e >> 1] != sg[ci] : i != j))))
                    pij = 0.f;
                p[e] = pij;
                x[e] = pij * (dp[4 * n + e] - dd[ci]);
            }
            pt[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(p[0], p[1]);
            pt[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(p[2], p[3]);
            dst[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
            dst[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
        }
        /* dv += P^T dO, dk += dS^T q: dO and q [query][hd] read MN-major */
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < NQ / 2; kk++)
            wg_rs_hd<HD>(dv, pt[kk], desc_mn<QR>(dt, kk));
#pragma unroll
        for (int kk = 0; kk < NQ / 2; kk++)
            wg_rs_hd<HD>(dk, dst[kk], desc_mn<QR>(qt_, kk));
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();
        sm90::reg_fence(dv);
        sm90::reg_fence(dk);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        long long j = jw + 8 * r;
        if (j >= S)
            continue;
        OT *dkp = out + (row + j) * WP + WQ + (long long)kvh * HD + 2 * t, *dvp = dkp + WK;
#pragma unroll
        for (int n = 0; n < HD / 8; n++) {
            st2(dkp + n * 8, dk[4 * n + 2 * r] * scale, dk[4 * n + 2 * r + 1] * scale);
            st2(dvp + n * 8, dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
        }
    }
}

/* ---- backward, dk and dv, warp-specialised (FlashAttention-3's structure; docs/kernels-sm90.md): one
 * block of three warpgroups per (b, kv head, 128 keys). Warpgroup 0 is the producer (registers given
 * away by setmaxnreg): its first warp streams the query steps, q and dO tiles of 64 queries by TMA and
 * their lse2, D and segment ids by plain loads, through a ring of NS slots guarded by mbarriers
 * (full: 32 producer arrivals and the TMA bytes; empty: one arrival per consumer warp). Warpgroups 1 and
 * 2 are consumers, each with its own 64 keys of the block and its own dk, dv accumulators, doing what
 * bwd_dkv does per step; they share the slots (the q / dO traffic of 128 keys, not 64) and wait only on
 * the barriers, so one's wgmma run while the other recomputes its probabilities. Causal: a consumer
 * whose 64 keys are all past the step's queries skips the step (it still frees the slot). Loops over
 * the items itself (items = blocks of 128 keys, the earliest first) with the barriers' phases carried
 * on; k and v of an item are loaded once (kv_full) and refilled only when both consumers have freed
 * them (kv_empty). The tensor maps are 64-row x 64-column boxes with 128-byte swizzle, so the tiles land
 * as load_sw lays them out; rows past S of a batch read the next rows of the map (or zeros past its
 * end): finite values whose probabilities the mask sets to 0. k and v are rows krow0 + b S + j and
 * vrow0 + b S + j of their maps (the q/k/v workspace read as [rows][KV HD]: offsets B S H / KV and
 * B S (H / KV + 1)); items, B, krow0 and vrow0 are run-time arguments. */
template <long long S, int H, int KV, int HD, bool CAUSAL, int NS, typename OT>
__device__ void bwd_dkv_ws(long long items, long long B, long long krow0, long long vrow0, OT *out,
                           const sm90::TmaDesc *tq, const sm90::TmaDesc *tk, const sm90::TmaDesc *tv,
                           const sm90::TmaDesc *tdo, const float *lse2, const float *dsum, const int *seg)
{
    constexpr int QR = 64, NQ = QR / 8, REP = H / KV, TILE = ROWS * HD * 2, QT = QR * HD * 2;
    constexpr int KB = 2 * ROWS, BOX = ROWS * 128; /* keys per block; bytes of a 64 x 64 box */
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    const unsigned kb = smem_base(), vb = kb + 2 * TILE, qb = vb + 2 * TILE, dob_s = qb + NS * QT;
    const unsigned stb = dob_s + NS * QT;                           /* [NS][3][QR] words: lse2, D, segment ids */
    const unsigned full = stb + NS * 3 * QR * 4, empty = full + 8 * NS; /* mbarriers, 8 bytes each */
    const unsigned kv_full = empty + 8 * NS, kv_empty = kv_full + 8;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int x = 0; x < NS; x++) {
            sm90::mbar_init(full + 8 * x, 32);
            sm90::mbar_init(empty + 8 * x, 8);
        }
        sm90::mbar_init(kv_full, 1);
        sm90::mbar_init(kv_empty, 8);
        sm90::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        sm90::setmaxnreg_dec<40>();
        if (warp != 0)
            return;
        if (lane == 0) {
            sm90::tma_prefetch_desc(tq);
            sm90::tma_prefetch_desc(tk);
            sm90::tma_prefetch_desc(tv);
            sm90::tma_prefetch_desc(tdo);
        }
        int stage = 0;
        unsigned phase = 0, kvph = 0;
        for (long long item = blockIdx.x; item < items; item += gridDim.x) {
            long long b;
            const long long ktile = item_tile<KV>(item, B, b), j0 = ktile * KB, row = b * S;
            const int kvh = (int)(item % KV);
            const long long istart = CAUSAL ? j0 : 0;
            const int nqt = (int)((S - istart + QR - 1) / QR), total = REP * nqt;
            if (lane == 0) {
                sm90::mbar_wait(kv_empty, kvph ^ 1);
                sm90::mbar_arrive_expect_tx(kv_full, 4 * TILE);
#pragma unroll
                for (int w = 0; w < 2; w++)
#pragma unroll
                    for (int c = 0; c < HD / 64; c++) {
                        const unsigned off = (unsigned)(w * TILE + c * BOX);
                        sm90::tma_load_2d(kb + off, tk, kv_full, kvh * HD + 64 * c, (int)(krow0 + row + j0 + 64 * w));
                        sm90::tma_load_2d(vb + off, tv, kv_full, kvh * HD + 64 * c, (int)(vrow0 + row + j0 + 64 * w));
                    }
            }
            kvph ^= 1;
            for (int it = 0; it < total; it++) {
                const int h = kvh * REP + it / nqt;
                const long long i0 = istart + (long long)(it % nqt) * QR;
                sm90::mbar_wait(empty + 8 * stage, phase ^ 1);
                float *st = (float *)smem_ptr(stb + (unsigned)(stage * 3 * QR * 4));
#pragma unroll
                for (int x = lane; x < QR; x += 32) {
                    const long long i = i0 + x;
                    st[x] = i < S ? lse2[(b * H + h) * S + i] : 0.f;
                    st[QR + x] = i < S ? dsum[(b * H + h) * S + i] : 0.f;
                    ((int *)st)[2 * QR + x] = seg && i < S ? seg[row + i] : 0;
                }
                if (lane == 0) {
                    sm90::mbar_arrive_expect_tx(full + 8 * stage, 2 * QT);
#pragma unroll
                    for (int c = 0; c < HD / 64; c++) {
                        const unsigned off = (unsigned)(stage * QT + c * BOX);
                        sm90::tma_load_2d(qb + off, tq, full + 8 * stage, h * HD + 64 * c, (int)(row + i0));
                        sm90::tma_load_2d(dob_s + off, tdo, full + 8 * stage, h * HD + 64 * c, (int)(row + i0));
                    }
                } else {
                    sm90::mbar_arrive(full + 8 * stage);
                }
                if (++stage == NS) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    /* consumers: warpgroup 1 keys j0 .. j0 + 63, warpgroup 2 keys j0 + 64 .. j0 + 127 */
    sm90::setmaxnreg_inc<232>();
    const int cw = wg - 1, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);
    const unsigned kw = kb + (unsigned)(cw * TILE), vw = vb + (unsigned)(cw * TILE);
    int stage = 0;
    unsigned phase = 0, kvph = 0;
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        long long b;
        const long long ktile = item_tile<KV>(item, B, b), j0 = ktile * KB, row = b * S;
        const int kvh = (int)(item % KV);
        const long long istart = CAUSAL ? j0 : 0, jc = j0 + cw * ROWS; /* this warpgroup's first key */
        const int nqt = (int)((S - istart + QR - 1) / QR), total = REP * nqt;
        const long long jw = jc + warp * 16 + g; /* this thread's keys: jw, jw + 8 */
        int segk[2] = {0, 0};
        if (seg) {
            segk[0] = jw < S ? seg[row + jw] : 0;
            segk[1] = jw + 8 < S ? seg[row + jw + 8] : 0;
        }
        float dk[HD / 2], dv[HD / 2];
#pragma unroll
        for (int x = 0; x < HD / 2; x++)
            dk[x] = dv[x] = 0.f;
        sm90::mbar_wait(kv_full, kvph);
        kvph ^= 1;

        for (int it = 0; it < total; it++) {
            const long long i0 = istart + (long long)(it % nqt) * QR;
            sm90::mbar_wait(full + 8 * stage, phase);
            if (!(CAUSAL && i0 + QR <= jc)) { /* else every query of the step is before this warpgroup's keys */
                const unsigned qt_ = qb + (unsigned)(stage * QT), dt = dob_s + (unsigned)(stage * QT);
                const float *lse = (const float *)smem_ptr(stb + (unsigned)(stage * 3 * QR * 4)), *dd = lse + QR;
                const int *sg = (const int *)(dd + QR);
                float s[NQ * 4], dp[NQ * 4];
#pragma unroll
                for (int x = 0; x < NQ * 4; x++)
                    s[x] = dp[x] = 0.f;
                sm90::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    wg_ss<QR>(s, desc_k<ROWS>(kw, kk), desc_k<QR>(qt_, kk), kk);
                sm90::wgmma_commit();
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    wg_ss<QR>(dp, desc_k<ROWS>(vw, kk), desc_k<QR>(dt, kk), kk);
                sm90::wgmma_commit();
                sm90::wgmma_wait<1>(); /* s^T; dP^T may still run */
                sm90::reg_fence(s);
                /* the masks in 32 bits: element (n, e) is query i0 + c, c = 2 t + n 8 + (e & 1), and key
                 * jw + 8 (e >> 1), so i - j = dij + n 8 + (e & 1) - 8 (e >> 1) and i < S iff c < S - i0 */
                const bool edge = seg || i0 + QR > S || jc + ROWS > S || (CAUSAL && i0 < jc + ROWS);
                const int dij = (int)(i0 - jw) + 2 * t, ilim = (int)(S - i0 < QR ? S - i0 : QR) - 2 * t;
                const bool jin[2] = {jw < S, jw + 8 < S};
                unsigned pt[NQ / 2][4], dst[NQ / 2][4];
#pragma unroll
                for (int n = 0; n < NQ; n++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int ci = n * 8 + 2 * t + (e & 1), r = e >> 1, d = n * 8 + (e & 1) - 8 * r;
                        float pij = ex2(fmaf(s[4 * n + e], sl2, -lse[ci]));
                        if (edge && (!jin[r] || n * 8 + (e & 1) >= ilim || (CAUSAL && dij + d < 0) ||
                                     (seg && (sg[ci] >= 0 ? segk[r] != sg[ci] : dij + d != 0))))
                            pij = 0.f;
                        s[4 * n + e] = pij; /* P^T, kept in fp32 for dS^T */
                    }
                    pt[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(s[4 * n], s[4 * n + 1]);
                    pt[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(s[4 * n + 2], s[4 * n + 3]);
                }
                /* dv += P^T dO (dO [query][hd] read MN-major) while dP^T finishes */
                sm90::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < NQ / 2; kk++)
                    wg_rs_hd<HD>(dv, pt[kk], desc_mn<QR>(dt, kk));
                sm90::wgmma_commit();
                sm90::wgmma_wait<1>(); /* dP^T; the product into dv may still run */
                sm90::reg_fence(dp);
#pragma unroll
                for (int n = 0; n < NQ; n++) {
                    float x[4];
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        x[e] = s[4 * n + e] * (dp[4 * n + e] - dd[n * 8 + 2 * t + (e & 1)]);
                    dst[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
                    dst[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
                }
                /* dk += dS^T q (q [query][hd] read MN-major) */
                sm90::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < NQ / 2; kk++)
                    wg_rs_hd<HD>(dk, dst[kk], desc_mn<QR>(qt_, kk));
                sm90::wgmma_commit();
                sm90::wgmma_wait<0>();
                sm90::reg_fence(dv);
                sm90::reg_fence(dk);
                reg_fence_u(pt);
                reg_fence_u(dst);
            }
            __syncwarp();
            if (lane == 0)
                sm90::mbar_arrive(empty + 8 * stage); /* this warp's reads of the slot are done */
            if (++stage == NS) {
                stage = 0;
                phase ^= 1;
            }
        }
        __syncwarp();
        if (lane == 0)
            sm90::mbar_arrive(kv_empty); /* this warp's products with k and v are done */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            long long j = jw + 8 * r;
            if (j >= S)
                continue;
            OT *dkp = out + (row + j) * WP + WQ + (long long)kvh * HD + 2 * t, *dvp = dkp + WK;
#pragma unroll
            for (int n = 0; n < HD / 8; n++) {
                st2(dkp + n * 8, dk[4 * n + 2 * r] * scale, dk[4 * n + 2 * r + 1] * scale);
                st2(dvp + n * 8, dv[4 * n + 2 * r], dv[4 * n + 2 * r + 1]);
            }
        }
    }
}

/* ---- backward, dq, warp-specialised (bwd_dkv_ws's structure): one block of three warpgroups per (b, head,
 * 128 queries), the heaviest causal tiles first. The producer (one thread of warpgroup 0) loads each
 * consumer's q and dO tiles once an item (qd_full; refilled when both consumers freed them: qd_empty) and
 * streams the key tiles, k and v of 64 keys by TMA, through a ring of NS slots (full: the TMA bytes; empty:
 * one arrival per consumer warp). Warpgroups 1 and 2 own queries q0 .. q0 + 63 and q0 + 64 .. q0 + 127:
 * s = q k^T and dP = dO v^T with both operands in shared memory, P from the kept log-sum-exp while dP
 * finishes, dS = P (dP - D), dq += dS k (dS in registers, k read MN-major). Causal: the first consumer
 * skips the key tile past its last query. Tensor maps, rows past S and krow0 / vrow0 as in bwd_dkv_ws. SCHED as in
 * fwd_ws: 1 every element of P before the wait for dP, 2 that and the consumers' s and dP issued in turns. */
template <long long S, int H, int KV, int HD, bool CAUSAL, int NS, int SCHED, typename OT>
__device__ void bwd_dq_ws(long long items, long long B, long long krow0, long long vrow0, OT *out,
                          const sm90::TmaDesc *tq, const sm90::TmaDesc *tk, const sm90::TmaDesc *tv,
                          const sm90::TmaDesc *tdo, const float *lse2, const float *dsum, const int *seg)
{
    constexpr int NB = ROWS / 8, TILE = ROWS * HD * 2, QB = 2 * ROWS, BOX = ROWS * 128;
    constexpr long long WQ = (long long)H * HD, WK = (long long)KV * HD, WP = WQ + 2 * WK;
    constexpr long long QTILES = (S + QB - 1) / QB;
    const unsigned qb = smem_base(), dob_s = qb + 2 * TILE, kb = dob_s + 2 * TILE, vb = kb + NS * TILE;
    const unsigned full = vb + NS * TILE, empty = full + 8 * NS, qd_full = empty + 8 * NS, qd_empty = qd_full + 8;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int x = 0; x < NS; x++) {
            sm90::mbar_init(full + 8 * x, 1);
            sm90::mbar_init(empty + 8 * x, 8);
        }
        sm90::mbar_init(qd_full, 1);
        sm90::mbar_init(qd_empty, 8);
        sm90::mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) { /* producer */
        sm90::setmaxnreg_dec<40>();
        if (warp != 0 || lane != 0)
            return;
        sm90::tma_prefetch_desc(tq);
        sm90::tma_prefetch_desc(tk);
        sm90::tma_prefetch_desc(tv);
        sm90::tma_prefetch_desc(tdo);
        int stage = 0;
        unsigned phase = 0, qph = 0;
        for (long long item = blockIdx.x; item < items; item += gridDim.x) {
            long long b;
            const long long qt = QTILES - 1 - item_tile<H>(item, B, b), q0 = qt * QB, row = b * S;
            const int h = (int)(item % H), kvh = h / (H / KV);
            const long long kend = CAUSAL ? (q0 + QB < S ? q0 + QB : S) : S;
            const int ntiles = (int)((kend + ROWS - 1) / ROWS);
            sm90::mbar_wait(qd_empty, qph ^ 1);
            qph ^= 1;
            sm90::mbar_arrive_expect_tx(qd_full, 4 * TILE);
#pragma unroll
            for (int w = 0; w < 2; w++)
#pragma unroll
                for (int c = 0; c < HD / 64; c++) {
                    const unsigned off = (unsigned)(w * TILE + c * BOX);
                    sm90::tma_load_2d(qb + off, tq, qd_full, h * HD + 64 * c, (int)(row + q0 + 64 * w));
                    sm90::tma_load_2d(dob_s + off, tdo, qd_full, h * HD + 64 * c, (int)(row + q0 + 64 * w));
                }
            for (int jt = 0; jt < ntiles; jt++) {
                sm90::mbar_wait(empty + 8 * stage, phase ^ 1);
                sm90::mbar_arrive_expect_tx(full + 8 * stage, 2 * TILE);
#pragma unroll
                for (int c = 0; c < HD / 64; c++) {
                    const unsigned off = (unsigned)(stage * TILE + c * BOX);
                    sm90::tma_load_2d(kb + off, tk, full + 8 * stage, kvh * HD + 64 * c,
                                      (int)(krow0 + row + jt * ROWS));
                    sm90::tma_load_2d(vb + off, tv, full + 8 * stage, kvh * HD + 64 * c,
                                      (int)(vrow0 + row + jt * ROWS));
                }
                if (++stage == NS) {
                    stage = 0;
                    phase ^= 1;
                }
            }
        }
        return;
    }

    /* consumers */
    sm90::setmaxnreg_inc<232>();
    const int cw = wg - 1, g = lane >> 2, t = lane & 3;
    const float sl2 = LOG2E / sqrtf((float)HD), scale = 1.f / sqrtf((float)HD);
    const unsigned qw = qb + (unsigned)(cw * TILE), dw = dob_s + (unsigned)(cw * TILE);
    int stage = 0;
    unsigned phase = 0, qph = 0;
    bool first_turn = true; /* SCHED 2: the block's first key tile (warpgroup 1 goes first) */
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        long long b;
        const long long qt = QTILES - 1 - item_tile<H>(item, B, b), q0 = qt * QB, row = b * S;
        const int h = (int)(item % H);
        const bool last_item = item + gridDim.x >= items;
        const long long kend = CAUSAL ? (q0 + QB < S ? q0 + QB : S) : S;
        const int ntiles = (int)((kend + ROWS - 1) / ROWS);
        const long long qc = q0 + cw * ROWS, iw = qc + warp * 16 + g; /* this thread's queries: iw, iw + 8 */
        float lse[2], dd[2];
        bool iin[2];
        int segq[2] = {0, 0};
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const long long i = iw + 8 * r;
            iin[r] = i < S;
            lse[r] = iin[r] ? lse2[(b * H + h) * S + i] : 0.f;
            dd[r] = iin[r] ? dsum[(b * H + h) * S + i] : 0.f;
            if (seg)
                segq[r] = iin[r] ? seg[row + i] : 0;
        }
        float dq[HD / 2];
#pragma unroll
        for (int x = 0; x < HD / 2; x++)
            dq[x] = 0.f;
        sm90::mbar_wait(qd_full, qph);
        qph ^= 1;

        for (int jt = 0; jt < ntiles; jt++) {
            const long long j0 = (long long)jt * ROWS;
            sm90::mbar_wait(full + 8 * stage, phase);
            /* SCHED 2: the two warpgroups issue s and dP in turns (named barriers 1 and 2), one warpgroup's
             * probabilities under the other's products; a skipped tile is still a turn */
            const bool pp_arrive = cw == 0 || !(last_item && jt == ntiles - 1); /* none after the block's last */
            if constexpr (SCHED == 2) {
                if (cw == 1 || !first_turn)
                    sm90::named_barrier(1 + cw, 256);
                first_turn = false;
            }
            if (!(CAUSAL && j0 > qc + ROWS - 1)) { /* else every key of the tile is past this warpgroup's queries */
                const unsigned kt = kb + (unsigned)(stage * TILE), vt = vb + (unsigned)(stage * TILE);
                float s[NB * 4], dp[NB * 4];
#pragma unroll
                for (int x = 0; x < NB * 4; x++)
                    s[x] = dp[x] = 0.f;
                sm90::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    wg_ss_n64(s, desc_k<ROWS>(qw, kk), desc_k<ROWS>(kt, kk), kk);
                sm90::wgmma_commit();
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++)
                    wg_ss_n64(dp, desc_k<ROWS>(dw, kk), desc_k<ROWS>(vt, kk), kk);
                sm90::wgmma_commit();
                if constexpr (SCHED == 2)
                    if (pp_arrive)
                        sm90::named_barrier_arrive(2 - cw, 256);
                sm90::wgmma_wait<1>(); /* s; dP may still run */
                sm90::reg_fence(s);
                /* the masks in 32 bits: element (n, e) is query iw + 8 (e >> 1) and key j0 + c,
                 * c = 2 t + n 8 + (e & 1), so i - j = dij + 8 (e >> 1) - n 8 - (e & 1), j < S iff c < S - j0 */
                const bool edge = seg || j0 + ROWS > S || qc + ROWS > S || (CAUSAL && j0 + ROWS - 1 > qc);
                const int dij = (int)(iw - j0) - 2 * t, jlim = (int)(S - j0 < ROWS ? S - j0 : ROWS) - 2 * t;
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1, d = 8 * r - n * 8 - (e & 1);
                        float pij = ex2(fmaf(s[4 * n + e], sl2, -lse[r]));
                        if (edge) {
                            bool vis = iin[r] && n * 8 + (e & 1) < jlim && (!CAUSAL || dij + d >= 0);
                            if (seg && vis) {
                                const int sj = seg[row + j0 + n * 8 + 2 * t + (e & 1)];
                                vis = segq[r] >= 0 ? sj == segq[r] : dij + d == 0;
                            }
                            if (!vis)
                                pij = 0.f;
                        }
                        s[4 * n + e] = pij;
                    }
                if constexpr (SCHED >= 1) { /* every element of P before the wait for dP (wg_fence) */
                    unsigned dep = 0;
#pragma unroll
                    for (int x = 0; x < NB * 4; x++)
                        dep ^= __float_as_uint(s[x]);
                    wg_fence(3 + cw, dep);
                }
                sm90::reg_fence(s);    /* P is computed before the wait, while dP runs */
                sm90::wgmma_wait<0>(); /* dP */
                sm90::reg_fence(dp);
                unsigned ds[NB / 2][4];
#pragma unroll
                for (int n = 0; n < NB; n++) {
                    float x[4];
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        x[e] = s[4 * n + e] * (dp[4 * n + e] - dd[e >> 1]);
                    ds[n / 2][(n & 1) * 2 + 0] = pack_bf16x2(x[0], x[1]);
                    ds[n / 2][(n & 1) * 2 + 1] = pack_bf16x2(x[2], x[3]);
                }
                /* dq += dS k: k [key][hd] read MN-major */
                sm90::wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < NB / 2; kk++)
                    wg_rs_hd<HD>(dq, ds[kk], desc_mn<ROWS>(kt, kk));
                sm90::wgmma_commit();
                sm90::wgmma_wait<0>();
                sm90::reg_fence(dq);
                reg_fence_u(ds);
            } else if constexpr (SCHED == 2) {
                if (pp_arrive)
                    sm90::named_barrier_arrive(2 - cw, 256);
            }
            __syncwarp();
            if (lane == 0)
                sm90::mbar_arrive(empty + 8 * stage); /* this warp's reads of the slot are done */
            if (++stage == NS) {
                stage = 0;
                phase ^= 1;
            }
        }
        __syncwarp();
        if (lane == 0)
            sm90::mbar_arrive(qd_empty); /* this warp's products with q and dO are done */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (!iin[r])
                continue;
            OT *dst = out + (row + iw + 8 * r) * WP + (long long)h * HD + 2 * t;
#pragma unroll
            for (int n = 0; n < HD / 8; n++)
                st2(dst + n * 8, dq[4 * n + 2 * r] * scale, dq[4 * n + 2 * r + 1] * scale);
        }
    }
}

} /* namespace attn */
} /* namespace moec */
