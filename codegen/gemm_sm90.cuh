/* gemm_sm90.cuh - a persistent, warp-specialised bf16 grouped GEMM for Hopper (sm_90a), built on
 * codegen/sm90.cuh and the tile scheduler of codegen/gemm_sm90_sched.h (paste both first). The
 * Makefile turns this file into the C string cuda_prelude_gemm_sm90. docs/kernels-sm90.md
 * describes the design; tests/gpu/gemm_sm90.c checks and times it.
 *
 * M-grouped: D[rows of g, N] = A[rows of g, K] . W[g]^T for each group g < E, with
 *   A  [rows_cap, K]  bf16 row-major (K contiguous)       - through tensor map tma_a
 *   W  [E, N, K]      bf16, K contiguous (viewed [E*N, K]) - through tensor map tma_b
 *   D  [rows_cap, N]  bf16 row-major, fp32 accumulation, stored from registers
 *   offsets [E + 1]   int32 in device memory, offsets[0] = 0, non-decreasing, each a multiple of
 *                     BLOCK_M (128); group g owns rows [offsets[g], offsets[g+1]).
 * TRANS_B 1 takes W the other way round, D = A . W[g] with
 *   W  [E, K, N]      bf16, N contiguous (viewed [E*K, N]) - through tensor map tma_b, box {64, 64}
 * (the data gradients of the forward's products, on the same weights: no transposed copy). Its B
 * tile is MN-major for wgmma, BLOCK_N / 64 boxes of 64 k-rows x 64 n side by side, as the
 * K-grouped kernel's X operand below.
 * Rows past a group's real count (padding) are computed like any other row: D there is don't-care
 * and A there may hold anything (rows are independent). Rows >= offsets[E] are neither read nor
 * written.
 *
 * Block: 384 threads = 3 warpgroups. Warpgroup 0 is the producer: one elected thread issues the TMA
 * loads of A (BLOCK_M x 64) and B (BLOCK_N x 64) tiles into a STAGES-deep ring of shared-memory
 * slots, each slot guarded by a `full` mbarrier (TMA transaction bytes) and an `empty` mbarrier
 * (one arrival per consumer warp). Warpgroups 1 and 2 are the consumers: each owns 64 rows of the
 * 128-row tile and issues m64nBLOCK_Nk16 wgmma from the slots, keeping one k-block of wgmma in
 * flight, freeing a slot once the wgmma reading it has completed. The producer gives registers
 * away (setmaxnreg 40) to the consumers (232). Grid: one block per SM (persistent); tiles are
 * handed out round-robin in the banded order of moec_sched_tile.
 *
 * Accumulator fragment of m64nNk16 (per warpgroup, fp32): thread (warp w of the warpgroup, lane l)
 * holds d[4j + 2i + c] = D[16 w + l/4 + 8 i][8 j + 2 (l%4) + c] for j < N/8, i, c in {0, 1}. */

namespace moec {
namespace sm90 {

/* The TMA-store epilogue of a consumer warpgroup (both M-grouped kernels): its 64 x BLOCK_N fp32
 * accumulators (the m64nN fragment) to bf16, in 64 x 64 chunks: chunk cc (columns 64 cc .. 64 cc + 63)
 * is written into staging buffer cc % 2 of the warpgroup (out_buf + (2 half + cc % 2) * 8 KB) in
 * the TMA's 128-byte swizzled layout (row r at 128 r, its 16-byte unit u at (u ^ r % 8) * 16:
 * conflict-free for the fragment's 8 rows x 4 lanes), then one thread stores it to D at (col0 +
 * 64 cc, row0 + 64 half) through tma_d (bf16, box {64, 64}). A buffer is rewritten only after the
 * store that last read it is done (bulk_wait_read 1); the last stores drain while the next tile's
 * main loop runs (bulk_wait 0 before the block ends). Named barrier 1 + half. */
template <int BLOCK_N>
__device__ __forceinline__ void store_tile_bf16_tma(const float (&acc)[BLOCK_N / 2], unsigned out_buf, int half, int wq,
                                                    int lane, const TmaDesc *tma_d, int col0, int row0)
{
    constexpr int OUT_CHUNK_BYTES = 64 * 64 * 2;
    const int tid = threadIdx.x % 128;
    const int r = wq * 16 + lane / 4; /* and r + 8; r % 8 = lane / 4 */
#pragma unroll
    for (int cc = 0; cc < BLOCK_N / 64; cc++) {
        const unsigned buf = out_buf + (half * 2 + (cc & 1)) * OUT_CHUNK_BYTES;
        if (tid == 0)
            bulk_wait_read<1>(); /* the store that last read this buffer is done */
        named_barrier(1 + half, 128);
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const int j = cc * 8 + jj;
            const unsigned off = (unsigned)(((jj ^ (r & 7)) * 16) + 4 * (lane % 4));
            st_shared_u32(buf + r * 128 + off, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]));
            st_shared_u32(buf + (r + 8) * 128 + off, pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
        }
        fence_proxy_async();
        named_barrier(1 + half, 128);
        if (tid == 0) {
            tma_store_2d(tma_d, buf, col0 + cc * 64, row0 + half * 64);
            bulk_commit();
        }
    }
}

/* EPILOGUE: 0 (default) = through shared memory and TMA stores (64 x 64 chunks, two buffers per
 * consumer warpgroup, asynchronous: the next tile's main loop starts while the last chunks are
 * written); 1 = 16-byte stores from registers (quad transpose; 32 KB less shared memory);
 * 2 = plain 4-byte stores from registers (kept for timing comparisons);
 * 3 = SwiGLU (GLU): as 0, and then a = silu(gate) * up * probs[row] into a second output through
 * tensor map tma_act (box {64, 64}): with W's rows interleaved in blocks of 128 (plan.h PlanBuf.glu_f)
 * a 256-wide tile of D holds gate columns 128t .. 128t + 127 in its first half and the matching up
 * columns in its second, so each thread holds both factors of its 64 outputs of a (BLOCK_N 256 only;
 * a [rows, N / 2], its columns 128 nb ..);
 * 4 = fp32 out (the dense linears of --kernels fast, which the graph keeps in fp32): d is then a float
 * [., N] cast to unsigned short *, 8-byte stores from registers, rows >= d_rows skipped (the padding
 * rows of A past the graph's row count);
 * 5, 6 = dSwiGLU (decision 60; the expert MLP backward's da = dy w_down launch, N = F): da is never stored.
 * The epilogue rounds each accumulator to bf16 (the value a store of da would keep), reads the matching
 * gate and up values of the forward's h [rows, 2N] (bf16, `h`; 5: gate/up interleaved in blocks of 128
 * as plan.h PlanBuf.glu_f, 6: [gate | up]) straight from global memory (each consumer thread prefetches
 * its share of the tile's h lines into L2 before the tile's main loop), and writes dh [rows, 2N] (h's
 * layout, through tma_d) and a [rows, N] (through tma_act) with dswiglu1 (dswiglu.cuh), three 64 x 64 chunks per 64
 * columns of da through the staging buffers, and dpart [rows, N / 128] f32: per row and 128 columns the
 * sum of the t terms (each thread its 32 in column order, then the quad's fixed xor tree). The backward's
 * scatter (moe_fast.cuh) sums a row's N / 128 partials in index order. Any schedule, BLOCK_N 128 or 256.
 *
 * PINGPONG 0 (cooperative, the original): the two consumer warpgroups share each 128 x BLOCK_N tile
 * (64 rows each), so both run their epilogues at the same time and the tensor cores wait for them.
 * PINGPONG 1: each consumer warpgroup owns whole 64 x BLOCK_N tiles (BLOCK_M 64: tma_a's box is
 * {64, 64}); the block's tiles alternate between them (its i-th tile, i = 0, 1, ..., to warpgroup
 * 1 + i % 2), the producer fills the ring with the tiles' k-blocks in that order, and an ordering
 * barrier (named barriers 3 and 4) lets a warpgroup start its main loop only once the other has
 * issued all of its previous tile's wgmma: one warpgroup's main loop then runs while the other
 * stores its tile. Same accumulators per thread (BLOCK_N / 2), same epilogues, same staging buffers
 * (two per warpgroup); the scheduler's band is 2 BAND blocks of 64 rows (the same rows as BAND
 * blocks of 128).
 * PINGPONG 2: the same alternation with 128 x 128 tiles per warpgroup (BLOCK_N 128, BLOCK_M 128: the
 * operands' L2 and shared-memory traffic per flop of the cooperative BLOCK_N 128 kernel, where the
 * 64 x 256 tiles of PINGPONG 1 read 25% more per flop from L2); each thread holds two m64n128
 * fragments (rows 0-63 and 64-127 of the tile, 128 fp32 in all) and issues two wgmma per 16-deep
 * slice. Epilogues 0, 3, 5 and 6 only. The SwiGLU epilogue (3) takes 64 gate and the matching 64 up rows
 * of W into one tile: tile column block nb is gate columns 256 (nb / 2) + 64 (nb % 2) .. + 63 of D's
 * interleaved layout and the up columns 128 further (tma_b's box {64, 64}: two boxes per stage), so
 * each thread again holds both factors of its outputs of a (columns 128 (nb / 2) + 64 (nb % 2) ..).
 * docs/kernels-sm90.md, decision 49. */
template <int E, int N, int K, int BLOCK_N, int STAGES, int EPILOGUE = 0, int TRANS_B = 0, int PINGPONG = 0,
          int BAND = 16>
struct GemmMGrouped {
    static constexpr int BLOCK_M = PINGPONG == 1 ? 64 : 128, BLOCK_K = 64, THREADS = 384;
    static constexpr int BOX_BYTES = 64 * 64 * 2; /* TRANS_B: one 64 x 64 box of the B tile */
    static constexpr int A_BYTES = BLOCK_M * BLOCK_K * 2;
    static constexpr int B_BYTES = BLOCK_N * BLOCK_K * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    /* TMA-store epilogue: 2 consumer warpgroups x 2 buffers of 64 x 64 bf16 */
    static constexpr int OUT_CHUNK_BYTES = 64 * 64 * 2;
    static constexpr bool DSWIGLU = EPILOGUE == 5 || EPILOGUE == 6; /* the dSwiGLU epilogue (decision 60) */
    static constexpr bool TMA_OUT = EPILOGUE == 0 || EPILOGUE == 3 || DSWIGLU; /* stores through the staging buffers */
    static constexpr int OUT_BYTES = TMA_OUT ? 4 * OUT_CHUNK_BYTES : 0;
    /* 1024 bytes of slack to align the ring to 1024 (128-byte swizzle atoms), the ring, the output
     * buffers, the barriers */
    static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + OUT_BYTES + 2 * STAGES * 8;
    static constexpr int KBLOCKS = K / BLOCK_K;
    static constexpr int NUM_N = N / BLOCK_N;
    static constexpr int ACC = BLOCK_N / 2; /* fp32 accumulators per consumer thread (per fragment for PINGPONG 2) */
    static constexpr bool GLU_SPLIT = PINGPONG == 2 && EPILOGUE == 3; /* two 64-row boxes of W per stage */
    /* the warps that free a slot: both consumer warpgroups (cooperative), the one owning the tile (ping-pong) */
    static constexpr int CONSUMER_WARPS = PINGPONG ? 4 : 8;
    static constexpr int SCHED_BAND = PINGPONG == 1 ? 2 * BAND : BAND;
    static_assert(K % BLOCK_K == 0, "K must be a multiple of 64");
    static_assert(N % BLOCK_N == 0, "N must be a multiple of BLOCK_N");
    static_assert(BLOCK_N == 128 || BLOCK_N == 256, "BLOCK_N is 128 or 256");
    static_assert(EPILOGUE != 3 || BLOCK_N == 256 || PINGPONG == 2, "the SwiGLU epilogue takes 256-wide tiles");
    static_assert(EPILOGUE >= 0 && EPILOGUE <= 6, "EPILOGUE is 0 to 6");
    static_assert(!DSWIGLU || N % 128 == 0, "the dSwiGLU epilogue's partials of dprobs are per 128 columns");
    static_assert(PINGPONG >= 0 && PINGPONG <= 2, "PINGPONG is 0 (cooperative), 1 or 2");
    static_assert(PINGPONG != 2 || (BLOCK_N == 128 && (EPILOGUE == 0 || EPILOGUE == 3 || DSWIGLU)),
                  "PINGPONG 2 takes BLOCK_N 128 and epilogue 0, 3, 5 or 6");
    static_assert(!GLU_SPLIT || N % 256 == 0, "the SwiGLU epilogue pairs 128-column gate and up blocks");
    static_assert(STAGES >= 2 && SMEM_BYTES <= 232448, "the ring does not fit in shared memory");
    static_assert((long long)E * (N > K ? N : K) < 2147483647ll, "the rows of W must fit an int coordinate");

    __device__ static __forceinline__ void mma(float (&acc)[ACC], unsigned long long da, unsigned long long db,
                                               int accumulate)
    {
        if constexpr (BLOCK_N == 256)
            wgmma_m64n256k16<0, TRANS_B>(acc, da, db, accumulate);
        else
            wgmma_m64n128k16<0, TRANS_B>(acc, da, db, accumulate);
    }

    /* One k-block (BLOCK_K) of a consumer warpgroup's 64 rows: its wgmma from slot `stage` (A rows at
     * a_row0 of the slot's A tile), issued and committed; then the previous k-block's are waited for and
     * its slot (prev) freed. */
    __device__ static __forceinline__ void kblock(float (&acc)[ACC], unsigned a_ring, unsigned b_ring, int stage,
                                                  int a_row0, int kb, int prev, unsigned empty_bar, int lane)
    {
        const unsigned a = a_ring + stage * A_BYTES + a_row0 * 128;
        const unsigned b = b_ring + stage * B_BYTES;
        const unsigned long long da = desc_sw128(a);
        /* K-major B: the k-th 16-wide slice 32 bytes further; MN-major B: 16 k-rows = 2048 bytes */
        const unsigned long long db = TRANS_B ? desc_mn_sw128(b, BOX_BYTES) : desc_sw128(b);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BLOCK_K / 16; k++)
            mma(acc, da + 2 * k, db + (TRANS_B ? 128 : 2) * k, (kb | k) != 0);
        wgmma_commit();
        /* the previous k-block's wgmma are done: free its slot */
        wgmma_wait<1>();
        reg_fence(acc);
        if (kb > 0 && lane == 0)
            mbar_arrive(empty_bar + 8 * prev);
    }

    /* PINGPONG 2: one k-block of a warpgroup's 128 x 128 tile, two m64n128k16 per 16-deep slice (rows 0-63 into
     * acc0, 64-127 into acc1), one commit group; then as kblock */
    __device__ static __forceinline__ void kblock2(float (&acc0)[ACC], float (&acc1)[ACC], unsigned a_ring,
                                                   unsigned b_ring, int stage, int kb, int prev, unsigned empty_bar,
                                                   int lane)
    {
        const unsigned a = a_ring + stage * A_BYTES;
        const unsigned b = b_ring + stage * B_BYTES;
        const unsigned long long da0 = desc_sw128(a), da1 = desc_sw128(a + 64 * 128);
        const unsigned long long db = TRANS_B ? desc_mn_sw128(b, BOX_BYTES) : desc_sw128(b);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BLOCK_K / 16; k++) {
            mma(acc0, da0 + 2 * k, db + (TRANS_B ? 128 : 2) * k, (kb | k) != 0);
            mma(acc1, da1 + 2 * k, db + (TRANS_B ? 128 : 2) * k, (kb | k) != 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        reg_fence(acc0);
        reg_fence(acc1);
        if (kb > 0 && lane == 0)
            mbar_arrive(empty_bar + 8 * prev);
    }

    /* One 64 x 64 chunk of a warpgroup's bf16 output through staging buffer `buf` (the TMA's 128-byte swizzled
     * layout, as store_tile_bf16_tma): the 8-column groups j0 .. j0 + 7 of the m64n128 fragment acc, or with
     * GLU the values silu(acc[j]) acc[j + 8] p of groups j0 .. j0 + 7 (j0 = 0: gate columns 0-63, up 64-127);
     * stored at (col, row) of tma. Named barrier 1 + bh. */
    template <int J0, bool GLU>
    __device__ static __forceinline__ void chunk2(const float (&acc)[ACC], unsigned buf, int bh, int wq, int lane,
                                                  const TmaDesc *tma, int col, int row, float p0, float p1)
    {
        const int tid = threadIdx.x % 128;
        const int r = wq * 16 + lane / 4; /* and r + 8 */
        if (tid == 0)
            bulk_wait_read<1>(); /* the store that last read this buffer is done */
        named_barrier(1 + bh, 128);
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if constexpr (GLU) {
                    const float gt = acc[4 * jj + e];
                    v[e] = gt / (1.0f + __expf(-gt)) * acc[4 * (jj + 8) + e] * (e < 2 ? p0 : p1);
                } else {
                    v[e] = acc[4 * (J0 + jj) + e];
                }
            }
            const unsigned off = (unsigned)(((jj ^ (r & 7)) * 16) + 4 * (lane % 4));
            st_shared_u32(buf + r * 128 + off, pack_bf16x2(v[0], v[1]));
            st_shared_u32(buf + (r + 8) * 128 + off, pack_bf16x2(v[2], v[3]));
        }
        fence_proxy_async();
        named_barrier(1 + bh, 128);
        if (tid == 0) {
            tma_store_2d(tma, buf, col, row);
            bulk_commit();
        }
    }
    /* PINGPONG 2's epilogue for one m64n128 fragment of the warpgroup's tile (rows row0 .. row0 + 63, hh = 0 or 1:
     * the tile's first or second 64 rows): two 64-column chunks of D (EPILOGUE 3: the gate chunk at D column
     * 256 (nb / 2) + 64 (nb % 2), the up chunk 128 further; else nb 128 and nb 128 + 64), then for EPILOGUE 3
     * one chunk of a at column 128 (nb / 2) + 64 (nb % 2). */
    __device__ static __forceinline__ void epilogue2(const float (&acc)[ACC], unsigned out_buf, int bh, int wq,
                                                     int lane, const TmaDesc &tma_d, const TmaDesc *tma_act,
                                                     const float *probs, int nb, int row0, int hh)
    {
        const unsigned buf0 = out_buf + (bh * 2) * OUT_CHUNK_BYTES, buf1 = buf0 + OUT_CHUNK_BYTES;
        /* the buffers strictly alternate over the warpgroup's whole sequence of chunks (bulk_wait_read 1 frees only
         * the older one): 2 chunks per fragment without GLU (b0 b1 | b0 b1), 3 with it (b0 b1 b0 | b1 b0 b1) */
        const int start = (EPILOGUE == 3 && hh == 1) ? 1 : 0;
        const unsigned bA = start ? buf1 : buf0, bB = start ? buf0 : buf1;
        const int c0 = EPILOGUE == 3 ? (nb / 2) * 256 + (nb % 2) * 64 : nb * 128;
        const int c1 = EPILOGUE == 3 ? c0 + 128 : c0 + 64;
        chunk2<0, false>(acc, bA, bh, wq, lane, &tma_d, c0, row0, 0.0f, 0.0f);
        chunk2<8, false>(acc, bB, bh, wq, lane, &tma_d, c1, row0, 0.0f, 0.0f);
        if constexpr (EPILOGUE == 3) {
            const int r = wq * 16 + lane / 4;
            const float p0 = probs[(long long)row0 + r], p1 = probs[(long long)row0 + r + 8];
            chunk2<0, true>(acc, bA, bh, wq, lane, tma_act, (nb / 2) * 128 + (nb % 2) * 64, row0, p0, p1);
        }
    }

    /* EPILOGUE 5, 6: the column of h (and dh) holding the gate (up 0) or up (up 1) factor of da's column f */
    __device__ static __forceinline__ int dsw_hcol(int f, int up)
    {
        return EPILOGUE == 5 ? 256 * (f / 128) + f % 128 + 128 * up : f + N * up;
    }
    /* EPILOGUE 5, 6: before a tile's main loop, each of the warpgroup's 128 threads prefetches into L2 its
     * share of the h lines the tile's epilogue will read: rows row0 .. row0 + rows - 1, the gate and up
     * columns of da's columns col0 .. col0 + ncols - 1 (128-byte lines of 64 bf16) */
    __device__ static __forceinline__ void dsw_prefetch(const unsigned short *h, int row0, int rows, int col0,
                                                        int ncols)
    {
        const int per_row = 2 * (ncols / 64), lines = rows * per_row;
        for (int l = threadIdx.x % 128; l < lines; l += 128) {
            const int rr = l / per_row, k = l % per_row;
            const unsigned short *p = h + (long long)(row0 + rr) * (2ll * N) + dsw_hcol(col0 + 64 * (k / 2), k % 2);
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
        }
    }
    /* EPILOGUE 5, 6 (the dSwiGLU epilogue): one consumer warpgroup's 64 x 2 ACC fragment (rows row0 .. row0 + 63,
     * da columns col_base .. col_base + 2 ACC - 1, col_base a multiple of 128) -> dh, a and the partials of
     * dprobs (above). Per 64 columns of da (chunk cc): the thread's 32 h pairs loaded, the dh gate chunk into
     * one staging buffer (du and a kept packed), then the dh up chunk and the a chunk: stores alternate
     * strictly between the warpgroup's two buffers (3 a chunk, ACC / 32 chunks: an even count, so every
     * fragment starts at buffer 0). Named barrier 1 + bh. */
    __device__ static __forceinline__ void epilogue_dswiglu(const float (&acc)[ACC], unsigned out_buf, int bh, int wq,
                                                            int lane, const TmaDesc &tma_dh, const TmaDesc *tma_act,
                                                            const float *probs, const unsigned short *h,
                                                            float *dpart, int col_base, int row0)
    {
        constexpr int NP = N / 128;
        const int tid = threadIdx.x % 128;
        const int r = wq * 16 + lane / 4; /* and r + 8 */
        const long long prow = (long long)row0 + r;
        const float pr[2] = {probs[prow], probs[prow + 8]};
        const unsigned short *hr = h + prow * (2ll * N) + 2 * (lane % 4);
        float s[2] = {0.0f, 0.0f};
#pragma unroll
        for (int cc = 0; cc < ACC / 32; cc++) {
            const int f0 = col_base + 64 * cc, gc = dsw_hcol(f0, 0), uc = dsw_hcol(f0, 1);
            const unsigned bX = out_buf + (bh * 2 + (cc & 1)) * OUT_CHUNK_BYTES;
            const unsigned bY = out_buf + (bh * 2 + ((cc + 1) & 1)) * OUT_CHUNK_BYTES;
            unsigned hg[2][8], hu[2][8], pdu[2][8], po[2][8];
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int jj = 0; jj < 8; jj++) {
                    hg[i][jj] = __ldg((const unsigned *)(hr + i * 16ll * N + gc + 8 * jj));
                    hu[i][jj] = __ldg((const unsigned *)(hr + i * 16ll * N + uc + 8 * jj));
                }
            if (tid == 0)
                bulk_wait_read<1>(); /* the store that last read bX is done */
            named_barrier(1 + bh, 128);
#pragma unroll
            for (int jj = 0; jj < 8; jj++) {
                const unsigned off = (unsigned)(((jj ^ (r & 7)) * 16) + 4 * (lane % 4));
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int j = cc * 8 + jj;
                    /* da as a bf16 store would keep it */
                    const unsigned dab = pack_bf16x2(acc[4 * j + 2 * i], acc[4 * j + 2 * i + 1]);
                    float dg[2], du[2], o[2];
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float g = __uint_as_float(c ? hg[i][jj] & 0xffff0000u : hg[i][jj] << 16);
                        const float u = __uint_as_float(c ? hu[i][jj] & 0xffff0000u : hu[i][jj] << 16);
                        const float da = __uint_as_float(c ? dab & 0xffff0000u : dab << 16);
                        float t;
                        dswiglu1(g, u, da, pr[i], dg[c], du[c], o[c], t);
                        s[i] = __fadd_rn(s[i], t);
                    }
                    st_shared_u32(bX + (r + 8 * i) * 128 + off, pack_bf16x2(dg[0], dg[1]));
                    pdu[i][jj] = pack_bf16x2(du[0], du[1]);
                    po[i][jj] = pack_bf16x2(o[0], o[1]);
                }
            }
            fence_proxy_async();
            named_barrier(1 + bh, 128);
            if (tid == 0) {
                tma_store_2d(&tma_dh, bX, gc, row0);
                bulk_commit();
            }
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const unsigned buf = q ? bX : bY;
                if (tid == 0)
                    bulk_wait_read<1>();
                named_barrier(1 + bh, 128);
#pragma unroll
                for (int jj = 0; jj < 8; jj++) {
                    const unsigned off = (unsigned)(((jj ^ (r & 7)) * 16) + 4 * (lane % 4));
                    st_shared_u32(buf + r * 128 + off, q ? po[0][jj] : pdu[0][jj]);
                    st_shared_u32(buf + (r + 8) * 128 + off, q ? po[1][jj] : pdu[1][jj]);
                }
                fence_proxy_async();
                named_barrier(1 + bh, 128);
                if (tid == 0) {
                    if (q)
                        tma_store_2d(tma_act, buf, f0, row0);
                    else
                        tma_store_2d(&tma_dh, buf, uc, row0);
                    bulk_commit();
                }
            }
            if (cc & 1) {
                /* the 128 columns f0 - 64 .. f0 + 63: the quad's partials in a fixed tree */
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    s[i] = __fadd_rn(s[i], __shfl_xor_sync(0xffffffffu, s[i], 1));
                    s[i] = __fadd_rn(s[i], __shfl_xor_sync(0xffffffffu, s[i], 2));
                    if (lane % 4 == 0)
                        dpart[(prow + 8 * i) * NP + f0 / 128] = s[i];
                    s[i] = 0.0f;
                }
            }
        }
    }

    /* The epilogue of one consumer warpgroup: its 64 x BLOCK_N accumulators (rows row_base .. + 63 of D,
     * columns nb BLOCK_N ..) to D (and a, EPILOGUE 3); bh (0 or 1) picks the warpgroup's two staging
     * buffers and named barrier 1 + bh. */
    __device__ static __forceinline__ void epilogue(float (&acc)[ACC], unsigned out_buf, int bh, int wq, int lane,
                                                    const TmaDesc &tma_d, unsigned short *d, const TmaDesc *tma_act,
                                                    const float *probs, long long d_rows, int nb, long long row_base)
    {
        /* epilogue 1: fp32 -> bf16, from the fragment to D in 16-byte stores. For each half
         * row (i) and each 4 consecutive 8-column chunks (4c .. 4c+3), the 4 threads of a
         * quad hold 2 columns of each chunk; a 4 x 4 transpose across the quad (store_quad)
         * gives thread q all 8 columns of chunk 4c+q: one warp store then covers 8 rows x
         * 64 contiguous bytes instead of 8 rows x 16. */
        const long long row0 = row_base + wq * 16 + lane / 4;
        if constexpr (EPILOGUE == 0 || EPILOGUE == 3) {
            /* chunk cc: columns 64 cc .. 64 cc + 63 of this warpgroup's 64 rows, written into
             * buffer cc % 2 in the TMA's 128-byte swizzled layout (row r at 128 r, its 16-byte
             * unit u at (u ^ r % 8) * 16: conflict-free for the fragment's 8 rows x 4 lanes) */
            const int tid = threadIdx.x % 128;
            const int r = wq * 16 + lane / 4; /* and r + 8; r % 8 = lane / 4 */
            /* (store_tile_bf16_tma writes at row0 + 64 half) */
            store_tile_bf16_tma<BLOCK_N>(acc, out_buf, bh, wq, lane, &tma_d, nb * BLOCK_N, (int)(row_base - 64 * bh));
            if constexpr (EPILOGUE == 3) {
                /* a = silu(gate) up p from the fp32 accumulators: gate chunk j (< 16), up chunk j + 16;
                 * two 64-wide chunks of a, through the same two buffers (the h chunks used buffers
                 * 0, 1, 0, 1, so these continue with 0, 1) */
                const long long prow = row_base + r;
                const float p0 = probs[prow], p1 = probs[prow + 8];
#pragma unroll
                for (int cc = 0; cc < 2; cc++) {
                    const unsigned buf = out_buf + (bh * 2 + (cc & 1)) * OUT_CHUNK_BYTES;
                    if (tid == 0)
                        bulk_wait_read<1>();
                    named_barrier(1 + bh, 128);
#pragma unroll
                    for (int jj = 0; jj < 8; jj++) {
                        const int j = cc * 8 + jj, u = j + 16;
                        float v[4];
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float gt = acc[4 * j + e];
                            v[e] = gt / (1.0f + __expf(-gt)) * acc[4 * u + e] * (e < 2 ? p0 : p1);
                        }
                        const unsigned off = (unsigned)(((jj ^ (r & 7)) * 16) + 4 * (lane % 4));
                        st_shared_u32(buf + r * 128 + off, pack_bf16x2(v[0], v[1]));
                        st_shared_u32(buf + (r + 8) * 128 + off, pack_bf16x2(v[2], v[3]));
                    }
                    fence_proxy_async();
                    named_barrier(1 + bh, 128);
                    if (tid == 0) {
                        tma_store_2d(tma_act, buf, nb * (BLOCK_N / 2) + cc * 64, (int)row_base);
                        bulk_commit();
                    }
                }
            }
        } else if constexpr (EPILOGUE == 4) {
            float *p0 = (float *)d + row0 * N + (long long)nb * BLOCK_N + 2 * (lane % 4);
            const bool in0 = row0 < d_rows, in1 = row0 + 8 < d_rows;
#pragma unroll
            for (int j = 0; j < BLOCK_N / 8; j++) {
                if (in0)
                    st_global_f32x2(p0 + 8 * j, acc[4 * j + 0], acc[4 * j + 1]);
                if (in1)
                    st_global_f32x2(p0 + 8ll * N + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
            }
        } else if constexpr (EPILOGUE == 2) {
            /* the plain way, kept for A/B timing: 4-byte stores straight from the fragment */
            unsigned short *p0 = d + row0 * N + (long long)nb * BLOCK_N + 2 * (lane % 4);
#pragma unroll
            for (int j = 0; j < BLOCK_N / 8; j++) {
                st_global_u32(p0 + 8 * j, pack_bf16x2(acc[4 * j + 0], acc[4 * j + 1]));
                st_global_u32(p0 + 8ll * N + 8 * j, pack_bf16x2(acc[4 * j + 2], acc[4 * j + 3]));
            }
        } else {
            unsigned short *p0 = d + row0 * N + (long long)nb * BLOCK_N + 8 * (lane % 4);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int c = 0; c < BLOCK_N / 32; c++) {
                    unsigned v[4];
#pragma unroll
                    for (int t = 0; t < 4; t++)
                        v[t] = pack_bf16x2(acc[4 * (4 * c + t) + 2 * i], acc[4 * (4 * c + t) + 2 * i + 1]);
                    store_quad(p0 + 8ll * i * N + 32 * c, v, lane);
                }
        }
    }

    __device__ static __forceinline__ void run(const TmaDesc &tma_a, const TmaDesc &tma_b, const TmaDesc &tma_d,
                                               unsigned short *d, const int *offsets, int rows_cap,
                                               const TmaDesc *tma_act = nullptr, const float *probs = nullptr,
                                               long long d_rows = 0, const unsigned short *h = nullptr,
                                               float *dpart = nullptr)
    {
        extern __shared__ unsigned char smem_raw[];
        const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
        const unsigned a_ring = base, b_ring = base + STAGES * A_BYTES;
        const unsigned out_buf = base + STAGES * STAGE_BYTES;
        const unsigned full_bar = out_buf + OUT_BYTES, empty_bar = full_bar + STAGES * 8;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;

        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full_bar + 8 * s, 1);
                mbar_init(empty_bar + 8 * s, CONSUMER_WARPS);
            }
            mbar_init_fence();
        }
        __syncthreads();

        const int num_m = moec_sched_num_m(offsets, E, rows_cap, BLOCK_M);
        const int tiles = num_m * NUM_N;

        if (wg == 0) {
            /* producer: the k-blocks of the block's tiles in order (ping-pong: alternately for
             * consumer warpgroup 1 and 2) */
            setmaxnreg_dec<40>();
            if (warp == 0 && elect_one()) {
                tma_prefetch_desc(&tma_a);
                tma_prefetch_desc(&tma_b);
                int stage = 0;
                unsigned phase = 0;
                for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                    int mb, nb;
                    moec_sched_tile(t, num_m, NUM_N, SCHED_BAND, &mb, &nb);
                    const int g = moec_sched_group_of(offsets, E, mb * BLOCK_M);
                    const int brow = g * N + nb * BLOCK_N;
                    for (int kb = 0; kb < KBLOCKS; kb++) {
                        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
                        mbar_arrive_expect_tx(full_bar + 8 * stage, STAGE_BYTES);
                        tma_load_2d(a_ring + stage * A_BYTES, &tma_a, full_bar + 8 * stage, kb * BLOCK_K, mb * BLOCK_M);
                        if constexpr (TRANS_B) {
                            /* W[g] rows k (64 of them), columns n: BLOCK_N / 64 boxes side by side */
#pragma unroll
                            for (int j = 0; j < BLOCK_N / 64; j++)
                                tma_load_2d(b_ring + stage * B_BYTES + j * BOX_BYTES, &tma_b, full_bar + 8 * stage,
                                            nb * BLOCK_N + 64 * j, g * K + kb * BLOCK_K);
                        } else if constexpr (GLU_SPLIT) {
                            /* 64 gate rows and the matching 64 up rows, 128 rows further in W's interleaved layout */
                            const int grow = g * N + (nb / 2) * 256 + (nb % 2) * 64;
                            tma_load_2d(b_ring + stage * B_BYTES, &tma_b, full_bar + 8 * stage, kb * BLOCK_K, grow);
                            tma_load_2d(b_ring + stage * B_BYTES + 64 * 128, &tma_b, full_bar + 8 * stage, kb * BLOCK_K,
                                        grow + 128);
                        } else {
                            tma_load_2d(b_ring + stage * B_BYTES, &tma_b, full_bar + 8 * stage, kb * BLOCK_K, brow);
                        }
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            }
        } else if constexpr (PINGPONG) {
            /* consumer warpgroup c = wg - 1 takes the block's tiles i = c, c + 2, ...; tile i's k-blocks
             * are the producer's k-block numbers i KBLOCKS .. i KBLOCKS + KBLOCKS - 1 (slot n % STAGES,
             * phase n / STAGES % 2). Ordering: before tile i's main loop (i >= 1) a warpgroup waits at
             * named barrier 3 + c, where the other arrives once it has issued tile i - 1's last wgmma. The
             * barrier is needed for more than speed: it makes every k-block before i KBLOCKS loaded before
             * the warpgroup waits on its first slot, so a slot's `full` barrier is never two phases behind
             * the parity waited for (which would read as complete: K of one or two k-blocks, 4 stages). */
            setmaxnreg_inc<232>();
            const int c = wg - 1, wq = warp % 4;
            float acc[ACC], acc1[PINGPONG == 2 ? ACC : 1]; /* PINGPONG 2: acc rows 0-63, acc1 rows 64-127 */
            for (int i = c, t = blockIdx.x + c * gridDim.x; t < tiles; i += 2, t += 2 * gridDim.x) {
                int mb, nb;
                moec_sched_tile(t, num_m, NUM_N, SCHED_BAND, &mb, &nb);
                const long long n0 = (long long)i * KBLOCKS;
                int stage = (int)(n0 % STAGES);
                unsigned phase = (unsigned)((n0 / STAGES) & 1);
                if constexpr (DSWIGLU)
                    dsw_prefetch(h, mb * BLOCK_M, BLOCK_M, nb * BLOCK_N, BLOCK_N);
                if (i > 0)
                    named_barrier(3 + c, 256); /* the other warpgroup has issued tile i - 1 */
                int prev = 0;
                for (int kb = 0; kb < KBLOCKS; kb++) {
                    mbar_wait(full_bar + 8 * stage, phase);
                    if constexpr (PINGPONG == 2)
                        kblock2(acc, acc1, a_ring, b_ring, stage, kb, prev, empty_bar, lane);
                    else
                        kblock(acc, a_ring, b_ring, stage, 0, kb, prev, empty_bar, lane);
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                /* tile i + 1 (the other warpgroup's) may start its main loop */
                if (t + gridDim.x < tiles)
                    named_barrier_arrive(3 + (c ^ 1), 256);
                wgmma_wait<0>();
                reg_fence(acc);
                if constexpr (PINGPONG == 2)
                    reg_fence(acc1);
                if (lane == 0)
                    mbar_arrive(empty_bar + 8 * prev);
                if constexpr (DSWIGLU) {
                    epilogue_dswiglu(acc, out_buf, c, wq, lane, tma_d, tma_act, probs, h, dpart, nb * BLOCK_N,
                                     mb * BLOCK_M);
                    if constexpr (PINGPONG == 2)
                        epilogue_dswiglu(acc1, out_buf, c, wq, lane, tma_d, tma_act, probs, h, dpart, nb * BLOCK_N,
                                         mb * BLOCK_M + 64);
                } else if constexpr (PINGPONG == 2) {
                    epilogue2(acc, out_buf, c, wq, lane, tma_d, tma_act, probs, nb, mb * BLOCK_M, 0);
                    epilogue2(acc1, out_buf, c, wq, lane, tma_d, tma_act, probs, nb, mb * BLOCK_M + 64, 1);
                } else {
                    epilogue(acc, out_buf, c, wq, lane, tma_d, d, tma_act, probs, d_rows, nb, (long long)mb * BLOCK_M);
                }
            }
            if constexpr (TMA_OUT) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>(); /* the last stores have landed before the block ends */
            }
        } else {
            /* consumers: warpgroup 1 rows 0-63 of the tile, warpgroup 2 rows 64-127 */
            setmaxnreg_inc<232>();
            const int half = wg - 1, wq = warp % 4;
            float acc[ACC];
            int stage = 0;
            unsigned phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                int mb, nb;
                moec_sched_tile(t, num_m, NUM_N, SCHED_BAND, &mb, &nb);
                if constexpr (DSWIGLU)
                    dsw_prefetch(h, mb * BLOCK_M + half * 64, 64, nb * BLOCK_N, BLOCK_N);
                int prev = 0;
                for (int kb = 0; kb < KBLOCKS; kb++) {
                    mbar_wait(full_bar + 8 * stage, phase);
                    kblock(acc, a_ring, b_ring, stage, half * 64, kb, prev, empty_bar, lane);
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                wgmma_wait<0>();
                reg_fence(acc);
                if (lane == 0)
                    mbar_arrive(empty_bar + 8 * prev);
                if constexpr (DSWIGLU)
                    epilogue_dswiglu(acc, out_buf, half, wq, lane, tma_d, tma_act, probs, h, dpart, nb * BLOCK_N,
                                     mb * BLOCK_M + half * 64);
                else
                    epilogue(acc, out_buf, half, wq, lane, tma_d, d, tma_act, probs, d_rows, nb,
                             (long long)mb * BLOCK_M + half * 64);
            }
            if constexpr (TMA_OUT) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>(); /* the last stores have landed before the block ends */
            }
        }
    }
};

/* The gradient norm's squares from a weight-gradient GEMM (decision 73): the K-grouped kernels below take an
 * optional `double *sumsq` and, where it is given, add up the squares of every dW value they store, so that the
 * optimizer's gradient norm need not read dW again (moec_grad_sumsq). A consumer thread sums each stored fragment's
 * squares in fp32 (sumsq_f32: two chains, fixed order) and adds that into a double over its tiles; at the end each
 * consumer warp adds its 32 lanes' doubles in a fixed butterfly and lane 0 writes sumsq[8 blockIdx.x + w] (w the
 * consumer warp, 0..7). So a launch of G blocks writes 8 G doubles, each a deterministic function of the grid,
 * which the optimizer's moec_sum_partials adds with the other gradients' partials. An empty group's tiles add 0. */
template <int NV>
__device__ __forceinline__ float sumsq_f32(const float (&v)[NV])
{
    static_assert(NV % 2 == 0, "an even fragment");
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i += 2) {
        s0 = __fmaf_rn(v[i], v[i], s0);
        s1 = __fmaf_rn(v[i + 1], v[i + 1], s1);
    }
    return __fadd_rn(s0, s1);
}
__device__ __forceinline__ void put_sumsq(double *sumsq, double s, int consumer_warp, int lane)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0)
        sumsq[KGEMM_SUMSQ_PER_BLOCK * blockIdx.x + consumer_warp] = s;
}

/* K-grouped: dW[g] = dY[rows of g]^T . X[rows of g] for each group g < E (the weight gradient of
 * the M-grouped product), fp32 out:
 *   dY [rows_cap, N] bf16 row-major  - tensor map tma_dy, box {64, 64}
 *   X  [rows_cap, K] bf16 row-major  - tensor map tma_x,  box {64, 64}
 *   dW [E, N, K]     fp32 row-major (viewed [E*N, K]) - EPILOGUE 0: through tensor map tma_dw (fp32,
 *                    128-byte swizzle, box {32, 64}); EPILOGUE 1: stored from registers at dw
 *   offsets [E + 1]  as for GemmMGrouped (multiples of 64 suffice here); the rows of each group
 *                    are the reduction. Padding rows must be zero in dY or in X (and finite in
 *                    both): unlike the M-grouped product they enter every sum. An empty group
 *                    gets dW[g] = 0.
 * Both operands are MN-major for wgmma (the reduction index is the row, the strided one): each
 * stage holds 64 rows; A = dY^T is two 64-wide boxes (one per consumer warpgroup: its 64 n),
 * B = X is BLOCK_N / 64 boxes side by side (leading byte offset 8 KB). Same pipeline, warp roles
 * and persistent loop as GemmMGrouped; the tile count E * (N / 128) * (K / BLOCK_N) is fixed.
 *
 * EPILOGUE: 0 = asynchronous TMA stores: each consumer warpgroup writes its 64 x BLOCK_N fp32 in
 * 64 x 32 chunks (8 KB: one 128-byte swizzle row per dW row) into two staging buffers in shared
 * memory and one thread stores each chunk with cp.async.bulk.tensor; the next tile's main loop
 * starts while they drain (32 KB more shared memory); 1 = 8-byte stores straight from the
 * accumulator fragment, waited for (the original; kept for A/B timing and for a dW whose address
 * is not 16-byte aligned, which a tensor map cannot take).
 *
 * GLU_F > 0: dY's columns (the rows of dW) come interleaved in blocks of 128 as the gate_up weight's
 * working copy (plan.h PlanBuf.glu_f): each 128-row block of dW is written to the gate or up rows it
 * stands for (dst_row0), so the gradient keeps the param's layout.
 *
 * PINGPONG 1 (decision 49): the M-grouped kernel's ping-pong schedule (GemmMGrouped PINGPONG 2): each consumer
 * warpgroup owns whole 128 x 128 tiles of dW (BLOCK_N 128; two m64n128 fragments: n rows 0-63 from the stage's
 * first dY^T box, 64-127 from the second), the block's tiles alternating between them, an ordering barrier
 * (named barriers 3, 4) between their main loops. A tile's reduction length (its group's rows) varies, so a
 * consumer finds the ring number of its tile's first stage by summing the steps of all the block's earlier
 * tiles, the other warpgroup's included (two offsets reads a tile). */
template <int E, int N, int K, int BLOCK_N, int STAGES, int EPILOGUE = 1, int BAND = 16, int GLU_F = 0,
          int PINGPONG = 0>
struct GemmKGrouped {
    static constexpr int BLOCK_N_OUT = 128; /* rows of dW (n) per tile: 2 consumer warpgroups x 64 */
    static constexpr int BLOCK_R = 64;      /* reduction rows per stage */
    static constexpr int BOX_BYTES = 64 * 64 * 2;
    static constexpr int A_BYTES = 2 * BOX_BYTES;
    static constexpr int B_BYTES = (BLOCK_N / 64) * BOX_BYTES;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    /* TMA-store epilogue: 2 consumer warpgroups x 2 buffers of 64 rows x 32 fp32 (128 bytes a row) */
    static constexpr int OUT_COLS = 32;
    static constexpr int OUT_CHUNK_BYTES = 64 * OUT_COLS * 4;
    static constexpr int OUT_BYTES = EPILOGUE == 0 ? 4 * OUT_CHUNK_BYTES : 0;
    static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + OUT_BYTES + 2 * STAGES * 8;
    static constexpr int NUM_N = N / BLOCK_N_OUT, NUM_K = K / BLOCK_N;
    static constexpr int TILES = E * NUM_N * NUM_K;
    static constexpr int ACC = BLOCK_N / 2;
    static constexpr int CONSUMER_WARPS = 8;
    static_assert(N % BLOCK_N_OUT == 0, "N must be a multiple of 128");
    static_assert(K % BLOCK_N == 0, "K must be a multiple of BLOCK_N");
    static_assert(BLOCK_N == 128 || BLOCK_N == 256, "BLOCK_N is 128 or 256");
    static_assert(EPILOGUE == 0 || EPILOGUE == 1, "EPILOGUE is 0 (TMA stores) or 1 (stores from registers)");
    static_assert(STAGES >= 2 && SMEM_BYTES <= 232448, "the ring does not fit in shared memory");
    static_assert((long long)E * N * K < (1ll << 40), "dW too large");
    static_assert(EPILOGUE != 0 || (long long)E * N < 2147483647ll, "the rows of dW must fit an int coordinate");
    static_assert(GLU_F == 0 || (N == 2 * GLU_F && GLU_F % 128 == 0), "GLU_F: dY's columns are [E, 2F] interleaved");
    static_assert(PINGPONG == 0 || (PINGPONG == 1 && BLOCK_N == 128), "PINGPONG 1 takes BLOCK_N 128");

    /* The first row of dW (viewed [E * N, K]) that tile (group g, n block nb) writes: its 128 rows are
     * dst_row0 .. dst_row0 + 127 (consumer warpgroup h: + 64 h). Both epilogues take the destination
     * from here and nowhere else, so a remapped row order is a change of this one line. */
    __device__ static __forceinline__ long long dst_row0(int g, int nb)
    {
        if constexpr (GLU_F > 0)
            return (long long)g * N + ((nb & 1) ? GLU_F + 128ll * (nb / 2) : 128ll * (nb / 2));
        else
            return (long long)g * N + (long long)nb * BLOCK_N_OUT;
    }

    __device__ static __forceinline__ void mma(float (&acc)[ACC], unsigned long long da, unsigned long long db,
                                               int accumulate)
    {
        if constexpr (BLOCK_N == 256)
            wgmma_m64n256k16<1, 1>(acc, da, db, accumulate);
        else
            wgmma_m64n128k16<1, 1>(acc, da, db, accumulate);
    }

    __device__ static __forceinline__ int group_rows(const int *offsets, int g, int rows_cap, int *r0)
    {
        int a = offsets[g], b = offsets[g + 1];
        a = a < rows_cap ? a : rows_cap;
        b = b < rows_cap ? b : rows_cap;
        *r0 = a;
        return b > a ? (b - a) / BLOCK_R : 0;
    }

    /* The epilogue of one consumer warpgroup's 64 x BLOCK_N fragment: dW rows row0 .. row0 + 63, columns kb BLOCK_N ..
     * (zeros for an empty group: steps 0); bh picks the warpgroup's two staging buffers and named barrier 1 + bh.
     * The TMA-store epilogue's chunks alternate between the buffers (BLOCK_N / 32 of them, an even number, so
     * the alternation holds across fragments and tiles). */
    __device__ static __forceinline__ void store_rows(const float (&acc)[ACC], unsigned out_buf, int bh, int wq, int lane,
                                                      const TmaDesc *tma_dw, float *dw, int steps, long long row0, int kb)
    {
        if constexpr (EPILOGUE == 0) {
            /* chunk cc: columns 32 cc .. 32 cc + 31 of the warpgroup's 64 rows (128 bytes a row),
             * into buffer cc % 2 in the TMA's 128-byte swizzled layout: row r at 128 r, its
             * 16-byte unit u at (u ^ r % 8) * 16. Thread (r = 16 wq + lane/4 [+ 8], q = lane % 4)
             * holds columns 8 jj + 2 q, +1 of each 8-column group jj: 8 bytes in unit 2 jj + q/2,
             * at 8 (q % 2) inside it. A warp's 8 rows x 4 lanes x 8 bytes then cover every bank
             * exactly twice: two wavefronts, the minimum for 256 bytes. */
            const int tid = threadIdx.x % 128, q = lane % 4;
            const int r = wq * 16 + lane / 4; /* and r + 8; r % 8 = lane / 4 */
#pragma unroll
            for (int cc = 0; cc < BLOCK_N / OUT_COLS; cc++) {
                const unsigned buf = out_buf + (bh * 2 + (cc & 1)) * OUT_CHUNK_BYTES;
                if (tid == 0)
                    bulk_wait_read<1>(); /* the store that last read this buffer is done */
                named_barrier(1 + bh, 128);
#pragma unroll
                for (int jj = 0; jj < OUT_COLS / 8; jj++) {
                    const int j = cc * (OUT_COLS / 8) + jj;
                    const unsigned off = (unsigned)((((2 * jj + q / 2) ^ (r & 7)) * 16) + 8 * (q & 1));
                    if (steps > 0) {
                        st_shared_f32x2(buf + r * 128 + off, acc[4 * j + 0], acc[4 * j + 1]);
                        st_shared_f32x2(buf + (r + 8) * 128 + off, acc[4 * j + 2], acc[4 * j + 3]);
                    } else {
                        st_shared_f32x2(buf + r * 128 + off, 0.0f, 0.0f);
                        st_shared_f32x2(buf + (r + 8) * 128 + off, 0.0f, 0.0f);
                    }
                }
                fence_proxy_async();
                named_barrier(1 + bh, 128);
                if (tid == 0) {
                    tma_store_2d(tma_dw, buf, kb * BLOCK_N + cc * OUT_COLS, (int)row0);
                    bulk_commit();
                }
            }
        } else {
            /* fp32 pairs straight from the fragment (a quad writes 32 contiguous bytes) */
            float *p0 = dw + (row0 + wq * 16 + lane / 4) * K + (long long)kb * BLOCK_N + 2 * (lane % 4);
            if (steps > 0) {
#pragma unroll
                for (int j = 0; j < BLOCK_N / 8; j++) {
                    st_global_f32x2(p0 + 8 * j, acc[4 * j + 0], acc[4 * j + 1]);
                    st_global_f32x2(p0 + 8ll * K + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < BLOCK_N / 8; j++) {
                    st_global_f32x2(p0 + 8 * j, 0.0f, 0.0f);
                    st_global_f32x2(p0 + 8ll * K + 8 * j, 0.0f, 0.0f);
                }
            }
        }
    }

    /* either epilogue (EPILOGUE 1 ignores tma_dw) */
    __device__ static __forceinline__ void run(const TmaDesc &tma_dy, const TmaDesc &tma_x, const TmaDesc &tma_dw,
                                               float *dw, const int *offsets, int rows_cap, double *sumsq = nullptr)
    {
        body(&tma_dy, &tma_x, &tma_dw, dw, offsets, rows_cap, sumsq);
    }
    /* EPILOGUE 1 (no tensor map over dW) */
    __device__ static __forceinline__ void run(const TmaDesc &tma_dy, const TmaDesc &tma_x, float *dw,
                                               const int *offsets, int rows_cap, double *sumsq = nullptr)
    {
        static_assert(EPILOGUE == 1, "the TMA-store epilogue needs tma_dw");
        body(&tma_dy, &tma_x, nullptr, dw, offsets, rows_cap, sumsq);
    }

    /* sumsq: nullptr, or the gradient norm's squares (sumsq_f32 above: KGEMM_SUMSQ_PER_BLOCK doubles a block) */
    __device__ static __forceinline__ void body(const TmaDesc *tma_dy, const TmaDesc *tma_x, const TmaDesc *tma_dw,
                                                float *dw, const int *offsets, int rows_cap, double *sumsq = nullptr)
    {
        extern __shared__ unsigned char smem_raw[];
        const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
        const unsigned a_ring = base, b_ring = base + STAGES * A_BYTES;
        const unsigned out_buf = base + STAGES * STAGE_BYTES;
        const unsigned full_bar = out_buf + OUT_BYTES, empty_bar = full_bar + STAGES * 8;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;

        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full_bar + 8 * s, 1);
                mbar_init(empty_bar + 8 * s, PINGPONG ? 4 : CONSUMER_WARPS);
            }
            mbar_init_fence();
        }
        __syncthreads();

        if (wg == 0) {
            setmaxnreg_dec<40>();
            if (warp == 0 && elect_one()) {
                tma_prefetch_desc(tma_dy);
                tma_prefetch_desc(tma_x);
                if constexpr (EPILOGUE == 0)
                    tma_prefetch_desc(tma_dw);
                int stage = 0;
                unsigned phase = 0;
                for (int t = blockIdx.x; t < TILES; t += gridDim.x) {
                    int g, nb, kb, r0;
                    moec_sched_ktile(t, NUM_N, NUM_K, BAND, &g, &nb, &kb);
                    const int steps = group_rows(offsets, g, rows_cap, &r0);
                    for (int i = 0; i < steps; i++) {
                        const int r = r0 + i * BLOCK_R;
                        const unsigned fb = full_bar + 8 * stage;
                        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
                        mbar_arrive_expect_tx(fb, STAGE_BYTES);
                        const unsigned a = a_ring + stage * A_BYTES, b = b_ring + stage * B_BYTES;
                        tma_load_2d(a, tma_dy, fb, nb * BLOCK_N_OUT, r);
                        tma_load_2d(a + BOX_BYTES, tma_dy, fb, nb * BLOCK_N_OUT + 64, r);
#pragma unroll
                        for (int j = 0; j < BLOCK_N / 64; j++)
                            tma_load_2d(b + j * BOX_BYTES, tma_x, fb, kb * BLOCK_N + 64 * j, r);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            }
        } else if constexpr (PINGPONG) {
            /* consumer warpgroup c takes the block's tiles j = c, c + 2, ...; tile j's first stage is ring number
             * n0 = the steps of tiles 0 .. j - 1 */
            setmaxnreg_inc<232>();
            const int c = wg - 1, wq = warp % 4;
            float acc0[ACC], acc1[ACC]; /* dW rows 0-63 and 64-127 of the tile */
            long long n0 = 0;
            double ss = 0.0; /* the squares of what this thread stored (sumsq) */
            for (int j = 0, t = blockIdx.x; t < TILES; j++, t += gridDim.x) {
                int g, nb, kb, r0;
                moec_sched_ktile(t, NUM_N, NUM_K, BAND, &g, &nb, &kb);
                const int steps = group_rows(offsets, g, rows_cap, &r0);
                if ((j & 1) != c) {
                    n0 += steps;
                    continue;
                }
                int stage = (int)(n0 % STAGES);
                unsigned phase = (unsigned)((n0 / STAGES) & 1);
                n0 += steps;
                if (j > 0)
                    named_barrier(3 + c, 256); /* the other warpgroup has issued tile j - 1 */
                int prev = 0;
                for (int i = 0; i < steps; i++) {
                    mbar_wait(full_bar + 8 * stage, phase);
                    const unsigned a = a_ring + stage * A_BYTES;
                    const unsigned long long da0 = desc_mn_sw128(a, BOX_BYTES), da1 = desc_mn_sw128(a + BOX_BYTES, BOX_BYTES);
                    const unsigned long long db = desc_mn_sw128(b_ring + stage * B_BYTES, BOX_BYTES);
                    wgmma_fence();
#pragma unroll
                    for (int k = 0; k < BLOCK_R / 16; k++) { /* 16 rows = 2048 bytes further */
                        mma(acc0, da0 + 128 * k, db + 128 * k, (i | k) != 0);
                        mma(acc1, da1 + 128 * k, db + 128 * k, (i | k) != 0);
                    }
                    wgmma_commit();
                    wgmma_wait<1>();
                    reg_fence(acc0);
                    reg_fence(acc1);
                    if (i > 0 && lane == 0)
                        mbar_arrive(empty_bar + 8 * prev);
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                if (t + gridDim.x < TILES)
                    named_barrier_arrive(3 + (c ^ 1), 256); /* tile j + 1 may start its main loop */
                wgmma_wait<0>();
                if (steps > 0) {
                    reg_fence(acc0);
                    reg_fence(acc1);
                    if (lane == 0)
                        mbar_arrive(empty_bar + 8 * prev);
                }
                const long long row0 = dst_row0(g, nb);
                store_rows(acc0, out_buf, c, wq, lane, tma_dw, dw, steps, row0, kb);
                store_rows(acc1, out_buf, c, wq, lane, tma_dw, dw, steps, row0 + 64, kb);
                if (sumsq && steps > 0)
                    ss = __dadd_rn(ss, (double)__fadd_rn(sumsq_f32(acc0), sumsq_f32(acc1)));
            }
            if (sumsq)
                put_sumsq(sumsq, ss, warp - 4, lane);
            if constexpr (EPILOGUE == 0) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>(); /* the last stores have landed before the block ends */
            }
        } else {
            setmaxnreg_inc<232>();
            const int half = wg - 1, wq = warp % 4;
            float acc[ACC];
            int stage = 0;
            unsigned phase = 0;
            double ss = 0.0; /* the squares of what this thread stored (sumsq) */
            for (int t = blockIdx.x; t < TILES; t += gridDim.x) {
                int g, nb, kb, r0;
                moec_sched_ktile(t, NUM_N, NUM_K, BAND, &g, &nb, &kb);
                const int steps = group_rows(offsets, g, rows_cap, &r0);
                int prev = 0;
                for (int i = 0; i < steps; i++) {
                    mbar_wait(full_bar + 8 * stage, phase);
                    const unsigned long long da = desc_mn_sw128(a_ring + stage * A_BYTES + half * BOX_BYTES, BOX_BYTES);
                    const unsigned long long db = desc_mn_sw128(b_ring + stage * B_BYTES, BOX_BYTES);
                    wgmma_fence();
#pragma unroll
                    for (int k = 0; k < BLOCK_R / 16; k++) /* 16 rows = 2048 bytes further */
                        mma(acc, da + 128 * k, db + 128 * k, (i | k) != 0);
                    wgmma_commit();
                    wgmma_wait<1>();
                    reg_fence(acc);
                    if (i > 0 && lane == 0)
                        mbar_arrive(empty_bar + 8 * prev);
                    prev = stage;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                /* an empty group's tile is zeros (acc is not touched then: writing it outside wgmma
                 * would make the compiler serialise the wgmma) */
                wgmma_wait<0>(); /* (nothing pending for an empty group; lets the compiler see every path waited) */
                if (steps > 0) {
                    reg_fence(acc);
                    if (lane == 0)
                        mbar_arrive(empty_bar + 8 * prev);
                }
                const long long row0 = dst_row0(g, nb) + half * 64; /* this warpgroup's 64 rows of dW */
                store_rows(acc, out_buf, half, wq, lane, tma_dw, dw, steps, row0, kb);
                if (sumsq && steps > 0)
                    ss = __dadd_rn(ss, (double)sumsq_f32(acc));
            }
            if (sumsq)
                put_sumsq(sumsq, ss, warp - 4, lane);
            if constexpr (EPILOGUE == 0) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>(); /* the last stores have landed before the block ends */
            }
        }
    }
};

/* The slot of column c (< 128) in the K-grouped FP8 kernel's decoded column scales fb (MXFP8's fb[k] keep
 * column order: see its promote): c = 8 j + 2 q + e as in the accumulator fragment (j < 16, q = lane % 4, e < 2) sits at
 * 16 (j / 2) + 4 q + 2 (j % 2) + e, so a consumer thread's four columns of fragments j and j + 1 (j even) are
 * one 16-byte ld.shared.v4 (8 loads a promotion instead of 16; 4 addresses a warp, no bank conflict). */
__device__ __forceinline__ int fp8_fb_slot(int c)
{
    const int j = c >> 3, q = (c >> 1) & 3, e = c & 1;
    return 16 * (j >> 1) + 4 * q + 2 * (j & 1) + e;
}

/* The FP8 kernels' software-pipelined promotion (SCHED 0, decision 51): NG promotion groups (NG a
 * compile-time constant) through two temporary accumulator sets t0, t1, one group always in flight while
 * the one before it is promoted: issue group 0 into t0; then for each q, issue q + 1 into the other set,
 * wait until one commit group is pending (q done: wgmma.wait_group 1), promote q. Only the body's last
 * promotion (wait_group 0) has none of this warpgroup's wgmma under it. Everything is unrolled and nothing
 * is in flight across the caller's loop back edge: ptxas follows which set each commit group writes only
 * in straight-line code (through a back edge it serialises every wgmma, C7514). IS(T, Q) issues group Q
 * into set T (wgmma_fence first, one commit); PR(T, Q) promotes set T (reg_fence first). */
#define MOEC_FP8_PIPE(NG, IS, PR)                                                                          \
    do {                                                                                                    \
        IS(t0, 0);                                                                                          \
        _Pragma("unroll") for (int q_ = 0; q_ < (NG); q_++)                                                 \
        {                                                                                                   \
            if (q_ + 1 < (NG)) {                                                                            \
                if (q_ % 2 == 0)                                                                            \
                    IS(t1, q_ + 1);                                                                         \
                else                                                                                        \
                    IS(t0, q_ + 1);                                                                         \
                wgmma_wait<1>();                                                                            \
            } else {                                                                                        \
                wgmma_wait<0>();                                                                            \
            }                                                                                               \
            if (q_ % 2 == 0)                                                                                \
                PR(t0, q_);                                                                                 \
            else                                                                                            \
                PR(t1, q_);                                                                                 \
        }                                                                                                   \
    } while (0)

/* ======================================================================== FP8 (E4M3) M-grouped GEMM
 * D[rows of g, N] = dequant(A)[rows of g, K] . dequant(W[g])^T with the products on the FP8 tensor
 * cores (wgmma m64n128k32 e4m3.e4m3, SASS QGMMA) and the block scales applied in software in fp32:
 *   A  [rows_cap, K] E4M3 codes, row-major (K contiguous)  - tensor map tma_a (uint8, box {128, 128})
 *   W  [E, N, K]     E4M3 codes, K contiguous (viewed [E*N, K]) - tensor map tma_b (uint8, box {128, 128})
 *   sa, sb           the scales, laid out as gemm_sm90_sched.h says (moec_fp8_block_* / moec_mxfp8_*)
 *   offsets          as GemmMGrouped: multiples of 128, group g owns rows [offsets[g], offsets[g+1])
 *   D  OUT 0: [rows_cap, N] bf16 through tma_d (box {64, 64}), store_tile_bf16_tma, asynchronous;
 *      OUT 1: [rows_cap, N] fp32 at d, 8-byte stores from the fragment (for exact checks).
 * FP8 wgmma takes K-major A and B only; both are (activations with K contiguous, W as [N, K] like the
 * bf16 kernel's default, no transposed mode here). The same scheduler (moec_sched_*), warp roles,
 * stage ring with full/empty mbarriers and persistent loop as GemmMGrouped; BLOCK_M 128, BLOCK_N 128,
 * BLOCK_K 128 (one 128-byte swizzle row of E4M3 = four k32 wgmma).
 *
 * Promotion. The tensor core sums a k32 instruction's products into its accumulator with ~14 bits
 * kept, so no accumulator is left to it for long: a "group" of k32 steps goes into a temporary tmp
 * (the first with scale-d 0), then each consumer thread adds tmp * scale into its fp32 acc:
 *   MODE 0, fp8-block: a group is the 4 steps of a stage (128 K); scale = sa[row] * sb (one per
 *     tile and K block: the weights' 128 x 128 block); E8M0 codes (decision 35), decoded by the
 *     consumers (two rows and one tile scale per 128 K);
 *   MODE 1, MXFP8: a group is one k32 step; scale = sa[row][k32] * sb[col][k32] (E8M0 codes, decoded
 *     into fp32 in shared memory by warp 1 of the producer warpgroup, so the consumers spend no
 *     instruction on it).
 * Two tmp sets (t0, t1) alternate: group p + 1 is issued before group p is promoted, so the
 * promotion's FMULs/FFMAs overlap the next wgmma (and the other consumer warpgroup's). fp8-block (and
 * SCHED 1) in pairs: nothing of this warpgroup's runs under the pair's second promotion; MXFP8 with
 * SCHED 0 (the default, decision 51) in MOEC_FP8_PIPE bodies of 8 groups: one promotion in 8 alone.
 * Registers per consumer thread: acc 64 + t0 64 + t1 64.
 *
 * Shared memory: the A and B rings (STAGES x 16 KB each), the bf16 staging buffers (32 KB, OUT 0),
 * STAGES x (A scales 128 B [MXFP8: 512 B + W scales 512 B + decoded fp32 scales 4 KB]), the barriers (full,
 * empty, ready).
 *
 * GLU (fp8-block's fused SwiGLU, decision 57; NoGlu: off): the gate_up GEMM (N = 2F, W's rows gate 0 .. F - 1
 * then up F .. 2F - 1, as stored: no interleave) also writes a = silu(gate) up probs quantised 1 x 128 along F.
 * A tile is (mb, j < F / 128), two passes over K on the same A rows: pass 0 the gate columns 128 j .. (D columns
 * 128 j ..), stored to h through the usual TMA-store epilogue, whose staging buffers keep them; pass 1 the up
 * columns (D columns F + 128 j ..): each consumer thread reads its gate fragment back from the staging buffers
 * (the bf16 words it stored there, the very bits of h), stores up to h the same way, then GLU::run computes its
 * 64 values of a from the bf16 gate and up (the separate SwiGLU quantiser's arithmetic on the same bits), a row's
 * amax over its quad (shuffles over lanes xor 1, 2: the row's 128 values of a, one 1 x 128 block), and writes the
 * E4M3 codes aq [rows_cap, F] and the scale codes asc [F / 128][rows_cap] (moec_fp8_block_sa_index). The same
 * A and W traffic per flop as two N tiles; OUT 0 and fp8-block only. GLU is a class from fp8_block_fast.cuh
 * (moec::fp8b::SwigluQuantEpi<F>), named only where instantiated: a plain GEMM source compiles without it. */
struct NoGlu {
    static constexpr bool ON = false;
};
template <int E, int N, int K, int STAGES, int MODE, int OUT, int BAND = 16, int SCHED = 0, class GLU = NoGlu,
          int CLUSTER = 1>
struct GemmFp8MGrouped {
    static constexpr int BLOCK_M = 128, BLOCK_N = 128, BLOCK_K = 128, THREADS = 384;
    static constexpr int A_BYTES = BLOCK_M * BLOCK_K, B_BYTES = BLOCK_N * BLOCK_K;
    static constexpr int SA_BYTES = MODE == 1 ? 512 : 128; /* E8M0 x 128 rows (x 4 for MXFP8) */
    static constexpr int SB_BYTES = MODE == 1 ? 512 : 0;   /* 4 E8M0 x 128 columns */
    static constexpr int FS_BYTES = MODE == 1 ? 4096 : 0;  /* fa [4][128] + fb [4][128] fp32 */
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES + FS_BYTES;
    static constexpr int TX_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES; /* what the copies bring */
    static constexpr int OUT_BYTES = OUT == 0 ? 4 * 64 * 64 * 2 : 0;
    static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + OUT_BYTES + 3 * STAGES * 8;
    static constexpr int KBLOCKS = K / BLOCK_K, NUM_N = N / BLOCK_N;
    static constexpr bool FUSED = GLU::ON;
    static constexpr int PASSES = FUSED ? 2 : 1;  /* N tiles (gate, up) per scheduled tile */
    static constexpr int NUM_T = NUM_N / PASSES; /* the scheduler's tile columns */
    static constexpr int GROUP = MODE == 0 ? 4 : 1; /* k32 steps per promotion */
    static constexpr int GPS = 4 / GROUP;           /* promotion groups per stage */
    static constexpr int P = KBLOCKS * GPS;         /* promotion groups per tile */
    static constexpr int ACC = BLOCK_N / 2;
    static constexpr int CONSUMER_WARPS = 8;
    static_assert(K % 256 == 0, "K must be a multiple of 256 (an even number of 128-deep K blocks)");
    static_assert(N % BLOCK_N == 0, "N must be a multiple of 128");
    static_assert(MODE == 0 || MODE == 1, "MODE is 0 (fp8-block) or 1 (MXFP8)");
    static_assert(OUT == 0 || OUT == 1, "OUT is 0 (bf16, TMA stores) or 1 (fp32 from registers)");
    static_assert(SCHED == 0 || SCHED == 1, "SCHED is 0 (pipelined promotion) or 1 (the pairs of decision 38)");
    static_assert(!FUSED || (MODE == 0 && OUT == 0 && N % 256 == 0), "GLU: fp8-block, bf16 h, F a multiple of 128");
    /* MXFP8, SCHED 0: K blocks per MOEC_FP8_PIPE body (4 k32 groups each) */
    static constexpr int MX_BODY = 2;
    static_assert(STAGES >= 2 && SMEM_BYTES <= 232448, "the ring does not fit in shared memory");
    static_assert((long long)E * N < 2147483647ll, "the rows of W must fit an int coordinate");
    static_assert((STAGES * (A_BYTES + B_BYTES)) % 1024 == 0 && OUT_BYTES % 1024 == 0, "swizzled buffers 1024-aligned");
    /* CLUSTER 2 (decision 71): the two blocks of a cluster take the tiles (m, 2 j) and (m, 2 j + 1), the same
     * A rows; rank 0's producer multicasts each A stage into both blocks' rings, and a stage is free again
     * once both blocks' consumers have released it (each consumer warp arrives on both blocks' `empty`) */
    static_assert(CLUSTER == 1 || (CLUSTER == 2 && NUM_T % 2 == 0), "CLUSTER is 1, or 2 with an even number of tile columns");
    static constexpr int NUM_TC = NUM_T / CLUSTER; /* the scheduler's columns: pairs of tiles under CLUSTER 2 */

    /* the persistent loop over scheduled tiles: cluster c (a block alone when CLUSTER 1) takes c, c + #clusters, ...;
     * tile t of the banded raster is (mb, nt) for this block's rank */
    __device__ static __forceinline__ int first_tile() { return (int)blockIdx.x / CLUSTER; }
    __device__ static __forceinline__ int tile_stride() { return (int)gridDim.x / CLUSTER; }
    __device__ static __forceinline__ void tile_of(int t, int num_m, int rank, int &mb, int &nt)
    {
        int ntc;
        moec_sched_tile(t, num_m, NUM_TC, BAND, &mb, &ntc);
        nt = ntc * CLUSTER + rank;
    }

    /* shared-memory map (base 1024-byte aligned): the A ring, the B ring, the bf16 staging buffers (all
     * three need 1024-byte alignment for the 128-byte swizzle; their sizes are multiples of 16 KB), then
     * the per-stage scale areas (16-byte aligned for the bulk copies), then the barriers */
    __device__ static __forceinline__ unsigned a_at(unsigned base, int s) { return base + s * A_BYTES; }
    __device__ static __forceinline__ unsigned b_at(unsigned base, int s) { return base + STAGES * A_BYTES + s * B_BYTES; }
    __device__ static __forceinline__ unsigned out_at(unsigned base) { return base + STAGES * (A_BYTES + B_BYTES); }
    __device__ static __forceinline__ unsigned sa_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + s * SA_BYTES;
    }
    __device__ static __forceinline__ unsigned sb_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + STAGES * SA_BYTES + s * SB_BYTES;
    }
    __device__ static __forceinline__ unsigned fs_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + STAGES * (SA_BYTES + SB_BYTES) + s * FS_BYTES;
    }

    /* E8M0 code -> 2^(c - 127) exactly (code 0: the fp32 subnormal 2^-127; 255: NaN). fp8-block's
     * sa * sb is then exact unless the two exponents sum below -149 (a block of amax < 2^-100 or so). */
    __device__ static __forceinline__ float e8m0(unsigned c)
    {
        return __uint_as_float(c == 0 ? 0x00400000u : c == 255 ? 0x7FC00000u : c << 23);
    }

    /* issues promotion group p (0 <= p < GPS) of the K block in stage st of the ring into t */
    __device__ static __forceinline__ void issue(float (&t)[ACC], unsigned base, int st, int p, int half)
    {
        const unsigned long long da = desc_sw128(a_at(base, st) + half * (64 * 128));
        const unsigned long long db = desc_sw128(b_at(base, st));
        const int k0 = p * GROUP; /* p: the group's index inside its stage */
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < GROUP; i++) /* the k-th 32-deep slice: 32 bytes further */
            wgmma_m64n128k32_e4m3(t, da + 2 * (k0 + i), db + 2 * (k0 + i), i != 0);
        wgmma_commit();
    }

    /* acc += t * scale for group p (0 <= p < GPS) of the K block in stage st; sbv: fp8-block's weight scale of it */
    __device__ static __forceinline__ void promote(float (&acc)[ACC], const float (&t)[ACC], unsigned base, int st,
                                                   int p, int r, int lane, float sbv)
    {
        if constexpr (MODE == 0) {
            const float s0 = e8m0(ld_shared_u8(sa_at(base, st) + r)) * sbv;
            const float s1 = e8m0(ld_shared_u8(sa_at(base, st) + r + 8)) * sbv;
#pragma unroll
            for (int j = 0; j < ACC / 4; j++) {
                acc[4 * j + 0] = __fmaf_rn(t[4 * j + 0], s0, acc[4 * j + 0]);
                acc[4 * j + 1] = __fmaf_rn(t[4 * j + 1], s0, acc[4 * j + 1]);
                acc[4 * j + 2] = __fmaf_rn(t[4 * j + 2], s1, acc[4 * j + 2]);
                acc[4 * j + 3] = __fmaf_rn(t[4 * j + 3], s1, acc[4 * j + 3]);
            }
        } else {
            const int k = p; /* the group's (k32 step's) index inside its stage */
            const unsigned fa = fs_at(base, st) + k * 512, fb = fs_at(base, st) + 2048 + k * 512;
            const float a0 = ld_shared_f32(fa + 4 * r), a1 = ld_shared_f32(fa + 4 * (r + 8));
            /* fb in column order, 8-byte loads (16 a promotion): with the K-grouped kernel's 16-byte loads of a
             * permuted fb (fp8_fb_slot), or even its permuted layout alone, ptxas spills a few registers in the
             * pipelined loop (measured in the SASS: 2 to 3 LDL/STL pairs; 240 consumer registers did not help) */
#pragma unroll
            for (int j = 0; j < ACC / 4; j++) {
                float b0, b1; /* columns 8 j + 2 (lane % 4), + 1 */
                ld_shared_f32x2(fb + 4 * (8 * j + 2 * (lane % 4)), b0, b1);
                acc[4 * j + 0] = __fmaf_rn(t[4 * j + 0] * b0, a0, acc[4 * j + 0]);
                acc[4 * j + 1] = __fmaf_rn(t[4 * j + 1] * b1, a0, acc[4 * j + 1]);
                acc[4 * j + 2] = __fmaf_rn(t[4 * j + 2] * b0, a1, acc[4 * j + 2]);
                acc[4 * j + 3] = __fmaf_rn(t[4 * j + 3] * b1, a1, acc[4 * j + 3]);
            }
        }
    }

    __device__ static __forceinline__ void run(const TmaDesc &tma_a, const TmaDesc &tma_b, const TmaDesc &tma_d,
                                               void *d, const void *sa, const void *sb, const int *offsets,
                                               int rows_cap, unsigned char *aq = nullptr, unsigned char *asc = nullptr,
                                               const float *probs = nullptr)
    {
        extern __shared__ unsigned char smem_raw[];
        const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
        const unsigned out_buf = out_at(base);
        const unsigned full_bar = base + STAGES * STAGE_BYTES + OUT_BYTES, empty_bar = full_bar + STAGES * 8,
                       ready_bar = empty_bar + STAGES * 8;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;

        const unsigned rank = CLUSTER > 1 ? cluster_ctarank() : 0u;

        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full_bar + 8 * s, 1);
                mbar_init(empty_bar + 8 * s, CONSUMER_WARPS * CLUSTER);
                mbar_init(ready_bar + 8 * s, 1);
            }
            mbar_init_fence();
        }
        if constexpr (CLUSTER > 1)
            cluster_sync(); /* the peer's barriers are initialised before anything signals them */
        else
            __syncthreads();

        /* the tile count is read after setmaxnreg in each role: a value live across it is spilled */
        if (wg == 0) {
            setmaxnreg_dec<40>();
            const int num_m = moec_sched_num_m(offsets, E, rows_cap, BLOCK_M);
            const int tiles = num_m * NUM_TC;
            if (warp == 0 && elect_one()) {
                /* the producer: A, B tiles by TMA, the scale vectors by bulk copies, one stage per K block */
                tma_prefetch_desc(&tma_a);
                tma_prefetch_desc(&tma_b);
                int stage = 0;
                unsigned phase = 0;
                for (int t = first_tile(); t < tiles; t += tile_stride()) {
                    int mb, nt;
                    tile_of(t, num_m, (int)rank, mb, nt);
                    const int g = moec_sched_group_of(offsets, E, mb * BLOCK_M);
                    for (int kp = 0; kp < PASSES * KBLOCKS; kp++) {
                        const int kb = kp % KBLOCKS, nb = nt + (kp / KBLOCKS) * NUM_T; /* GLU: gate, then up */
                        const unsigned fb = full_bar + 8 * stage;
                        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
                        mbar_arrive_expect_tx(fb, TX_BYTES); /* A's bytes too: under CLUSTER 2 rank 0's copy brings them */
                        if constexpr (CLUSTER == 1)
                            tma_load_2d(a_at(base, stage), &tma_a, fb, kb * BLOCK_K, mb * BLOCK_M);
                        else if (rank == 0)
                            tma_load_2d_mc(a_at(base, stage), &tma_a, fb, kb * BLOCK_K, mb * BLOCK_M,
                                           (unsigned short)((1u << CLUSTER) - 1));
                        tma_load_2d(b_at(base, stage), &tma_b, fb, kb * BLOCK_K, g * N + nb * BLOCK_N);
                        if constexpr (MODE == 0) {
                            bulk_load(sa_at(base, stage),
                                      (const unsigned char *)sa + moec_fp8_block_sa_index(mb * BLOCK_M, kb, rows_cap),
                                      SA_BYTES, fb);
                        } else {
                            bulk_load(sa_at(base, stage),
                                      (const unsigned char *)sa + moec_mxfp8_sa_index(mb * BLOCK_M, 4 * kb, rows_cap),
                                      SA_BYTES, fb);
                            bulk_load(sb_at(base, stage),
                                      (const unsigned char *)sb + moec_mxfp8_sb_index(g, nb * BLOCK_N, 4 * kb, N, K),
                                      SB_BYTES, fb);
                        }
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            } else if (MODE == 1 && warp == 1) {
                /* MXFP8: decodes each stage's E8M0 codes into fp32, fa[k][row] and fb[k][col], once
                 * the copies have landed; the consumers wait for `ready`. The slot cannot be
                 * overwritten early: its next copies wait for `empty`, which the consumers give
                 * after their last read of fa/fb. */
                int stage = 0;
                unsigned phase = 0;
                for (int t = first_tile(); t < tiles; t += tile_stride()) {
                    for (int kb = 0; kb < PASSES * KBLOCKS; kb++) {
                        mbar_wait(full_bar + 8 * stage, phase);
                        const unsigned fs = fs_at(base, stage);
#pragma unroll 1
                        for (int i = 0; i < 4; i++) {
                            const int x = lane + 32 * i; /* a row of A, a column of W */
                            const unsigned wa = ld_shared_u32(sa_at(base, stage) + 4 * x);
                            const unsigned wb = ld_shared_u32(sb_at(base, stage) + 4 * x);
#pragma unroll
                            for (int k = 0; k < 4; k++) {
                                st_shared_f32(fs + k * 512 + 4 * x, e8m0((wa >> (8 * k)) & 255u));
                                st_shared_f32(fs + 2048 + k * 512 + 4 * x, e8m0((wb >> (8 * k)) & 255u));
                            }
                        }
                        __syncwarp();
                        if (lane == 0)
                            mbar_arrive(ready_bar + 8 * stage);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            }
        } else {
            setmaxnreg_inc<232>();
            const int num_m = moec_sched_num_m(offsets, E, rows_cap, BLOCK_M);
            const int tiles = num_m * NUM_TC;
            const int half = wg - 1, wq = warp % 4;
            const int r = half * 64 + wq * 16 + lane / 4; /* this thread's rows of the tile: r, r + 8 */
            float acc[ACC], t0[ACC], t1[ACC];
            int ist = 0, rst = 0; /* the stage of the next group to issue, of the next to promote */
            unsigned iph = 0;
            for (int t = first_tile(); t < tiles; t += tile_stride()) {
                int mb, nt;
                tile_of(t, num_m, (int)rank, mb, nt);
                const int g = moec_sched_group_of(offsets, E, mb * BLOCK_M);
#pragma unroll 1
                for (int pass = 0; pass < PASSES; pass++) {
                    const int nb = nt + pass * NUM_T; /* GLU: pass 0 the gate columns, 1 the up columns */
                    const unsigned char *sbp =
                        (const unsigned char *)sb + moec_fp8_block_sb_index(g, nb * BLOCK_N, 0, N, K);
#pragma unroll
                    for (int i = 0; i < ACC; i++)
                        acc[i] = 0.0f;
                    float sb0 = 0.0f, sb1 = 0.0f; /* fp8-block: the weight scale of the group in t0, t1 */
                    /* group p goes to t[p % 2]; p + 1 is issued before p is promoted */
/* group (KB, I): the I-th promotion group (0 <= I < GPS, a constant after unrolling) of K block KB */
#define MOEC_FP8_ISSUE(T, SBV, KB, I)                                                                    \
    do {                                                                                                \
        if ((I) == 0) {                                                                           \
            mbar_wait(full_bar + 8 * ist, iph);                                                         \
            if constexpr (MODE == 1)                                                                    \
                mbar_wait(ready_bar + 8 * ist, iph);                                                    \
        }                                                                                               \
        if constexpr (MODE == 0)                                                                        \
            SBV = e8m0(__ldg(sbp + (KB)));                                                              \
        issue(T, base, ist, (I), half);                                                                 \
        if ((I) == GPS - 1 && ++ist == STAGES) {                                                  \
            ist = 0;                                                                                    \
            iph ^= 1;                                                                                   \
        }                                                                                               \
        } while (0)
#define MOEC_FP8_PROMOTE(T, SBV, I)                                                                      \
    do {                                                                                                \
        reg_fence(T);                                                                                   \
        promote(acc, T, base, rst, (I), r, lane, SBV);                                                  \
        if ((I) == GPS - 1) { /* the stage's last group: free its slot */                               \
            __syncwarp();                                                                               \
            if (lane == 0) {                                                                            \
                mbar_arrive(empty_bar + 8 * rst);                                                       \
                if constexpr (CLUSTER > 1) /* rank 0's multicast writes this stage of every block */     \
                    mbar_arrive_cta(empty_bar + 8 * rst, rank ^ 1u);                                    \
            }                                                                                           \
            if (++rst == STAGES)                                                                        \
                rst = 0;                                                                                \
        }                                                                                               \
        } while (0)
                    /* fp8-block: K blocks in pairs, kb into t0 and kb + 1 into t1, both issued before
                     * t0 is promoted: t0's promotion overlaps t1's wgmma, t1's overlaps the other
                     * consumer warpgroup's. Nothing stays in flight across the loop's back edge: ptxas
                     * keeps two sets apart only then (with t0 of the next pair issued before promoting
                     * t1 it serialised every wgmma, C7514). */
                    if constexpr (MODE == 0) {
                        for (int kb = 0; kb < KBLOCKS; kb += 2) {
                            MOEC_FP8_ISSUE(t0, sb0, kb, 0);
                            MOEC_FP8_ISSUE(t1, sb1, kb + 1, 0);
                            wgmma_wait<1>();
                            MOEC_FP8_PROMOTE(t0, sb0, 0);
                            wgmma_wait<0>();
                            MOEC_FP8_PROMOTE(t1, sb1, 0);
                        }
                    } else if constexpr (SCHED == 0) {
                        /* MXFP8, pipelined (decision 51): MX_BODY K blocks (4 MX_BODY k32 groups) per body,
                         * group q + 1 in flight while q is promoted; one promotion in 4 MX_BODY alone */
#pragma unroll 1
                        for (int kb = 0; kb < KBLOCKS; kb += MX_BODY) {
#define MOEC_FP8_MX_IS(T, Q) MOEC_FP8_ISSUE(T, sb0, kb + (Q) / 4, (Q) % 4)
#define MOEC_FP8_MX_PR(T, Q) MOEC_FP8_PROMOTE(T, sb0, (Q) % 4)
                            MOEC_FP8_PIPE(4 * MX_BODY, MOEC_FP8_MX_IS, MOEC_FP8_MX_PR);
#undef MOEC_FP8_MX_IS
#undef MOEC_FP8_MX_PR
                        }
                    } else {
                        /* MXFP8, SCHED 1 (decision 38): the same pairs, of k32 steps: (0, 1) and (2, 3) of
                         * each stage (with the next group issued before promoting, as in the loop over K
                         * blocks first tried, ptxas spilled the accumulators past 232 registers and
                         * serialised the wgmma). */
                        for (int kb = 0; kb < KBLOCKS; kb++) {
#pragma unroll
                            for (int i = 0; i < 4; i += 2) {
                                MOEC_FP8_ISSUE(t0, sb0, kb, i);
                                MOEC_FP8_ISSUE(t1, sb1, kb, i + 1);
                                wgmma_wait<1>();
                                MOEC_FP8_PROMOTE(t0, sb0, i);
                                wgmma_wait<0>();
                                MOEC_FP8_PROMOTE(t1, sb1, i + 1);
                            }
                        }
                    }
#undef MOEC_FP8_ISSUE
#undef MOEC_FP8_PROMOTE
                    if constexpr (FUSED) {
                        if (pass == 1) {
                            /* the gate half of h, as pass 0 stored it to the staging buffers (store_tile_bf16_tma's
                             * layout: chunk cc in buffer 2 half + cc, row rr at 128 rr, unit jj at (jj ^ rr % 8) 16):
                             * gw[2 j + i] = the bf16 pair of row rr + 8 i, columns 8 j + 2 (lane % 4), + 1 */
                            const int rr = wq * 16 + lane / 4;
                            unsigned gw[ACC / 2];
#pragma unroll
                            for (int j = 0; j < BLOCK_N / 8; j++) {
                                const unsigned buf = out_buf + (half * 2 + j / 8) * (64 * 64 * 2);
                                const unsigned off = (unsigned)((((j % 8) ^ (rr & 7)) * 16) + 4 * (lane % 4));
                                gw[2 * j] = ld_shared_u32(buf + rr * 128 + off);
                                gw[2 * j + 1] = ld_shared_u32(buf + (rr + 8) * 128 + off);
                            }
                            /* the up half (its first barrier orders every thread's reads above before any store) */
                            store_tile_bf16_tma<BLOCK_N>(acc, out_buf, half, wq, lane, &tma_d, nb * BLOCK_N, mb * BLOCK_M);
                            GLU::run(gw, acc, probs, aq, asc, (long long)rows_cap, mb * BLOCK_M + r, nt, lane);
                        } else {
                            store_tile_bf16_tma<BLOCK_N>(acc, out_buf, half, wq, lane, &tma_d, nb * BLOCK_N, mb * BLOCK_M);
                        }
                    } else if constexpr (OUT == 0) {
                        store_tile_bf16_tma<BLOCK_N>(acc, out_buf, half, wq, lane, &tma_d, nb * BLOCK_N, mb * BLOCK_M);
                    } else {
                        float *p0 = (float *)d + ((long long)mb * BLOCK_M + r) * N + (long long)nb * BLOCK_N + 2 * (lane % 4);
#pragma unroll
                        for (int j = 0; j < BLOCK_N / 8; j++) {
                            st_global_f32x2(p0 + 8 * j, acc[4 * j + 0], acc[4 * j + 1]);
                            st_global_f32x2(p0 + 8ll * N + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
                        }
                    }
                } /* pass */
            }
            if constexpr (OUT == 0) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>();
            }
        }
        /* no block leaves while its peer may still signal its barriers or copy into its ring */
        if constexpr (CLUSTER > 1)
            cluster_sync();
    }
};

/* ======================================================================== FP8 (E4M3) K-grouped GEMM
 * The weight gradient of fp8-block's expert GEMMs on the FP8 tensor cores (decision 45):
 *   dW[g][n][k] = sum over the padded rows t of group g of  dY[t][n] . X[t][k]
 * with dY and X quantised 128 x 1 (one E8M0 scale per column and 128-row block, within each group: a
 * group's padding rows are zeros, so its last block is fp8-block's partial block), as the CPU reference
 * (runtime/cpu/fp8_block.c fp8b_gemm_ref on dY^T and X^T quantised 1 x 128 along the tokens): for each
 * 128-token block tb of the group, in order,
 *   acc[n][k] += (sum_{t in tb} a[n][t] b[k][t]) . sa[tb][n] . sb[tb][k]     (a, b: the E4M3 values)
 * The operands are stored transposed, K-major for FP8 wgmma (the reduction index, the token, contiguous):
 *   A = dY^T  [N, rows_cap] E4M3 codes - tensor map tma_a (uint8, box {128, 128})
 *   B = X^T   [K, rows_cap] E4M3 codes - tensor map tma_b (uint8, box {128, 128})
 *   sa [rows_cap / 128][N], sb [rows_cap / 128][K]: E8M0 codes (moec_fp8_kgrouped_s_index), the codes of
 *                      one 128-token block for 128 rows of dW (or columns) 128 contiguous bytes
 *   offsets [E + 1]    multiples of 128 (the fast MLP's padded groups): each 128-token block lies in one
 *                      group; an empty group gets dW[g] = 0
 *   dW [E, N, K] fp32: EPI 1 (GEMM_SM90_KEPI_REGS, the default) 8-byte stores from the accumulator fragment;
 *                      EPI 0 (GEMM_SM90_KEPI_TMA) asynchronous TMA stores through tma_dw (dW viewed [E N, K],
 *                      fp32, box {32, 64}, as GemmKGrouped's EPILOGUE 0: 64 x 32 chunks, two 8 KB staging
 *                      buffers a consumer warpgroup, 32 KB more shared memory, so one stage fewer fits).
 * Tiles 128 (n) x 128 (k), E (N / 128) (K / 128) of them (moec_sched_ktile); per tile, one stage per
 * 128-token block: a 128 x 128 A tile and B tile (the M-grouped FP8 kernel's stage exactly, so the same
 * descriptors and four k32 wgmma per stage), and 128 + 128 scale codes by bulk copies. Warp 1 of the
 * producer warpgroup decodes each stage's codes into fp32 (fa [128], fb [128]; MXFP8's decoder), the
 * consumers wait for `ready`. Promotion every stage (128 tokens) into fp32: acc = fma(t . fb[k], fa[n],
 * acc): t . fb[k] . fa[n] is the block's partial times the outer product of the scale vectors, each
 * multiply by a power of two exact (as fp8b_gemm_ref's p . (sa sb)) unless it leaves fp32's range.
 * SCHED 0 (the default, decision 51): a group's stages in MOEC_FP8_PIPE bodies of 4 (stage q + 1's wgmma run
 * while q is promoted; one promotion in 4 alone), its last steps % 4 in a body of 3, 2 or 1. SCHED 1: stages in
 * pairs into t0, t1 (t0's promotion overlaps t1's wgmma), a group's odd last block alone. fb is stored in
 * fp8_fb_slot's order (16-byte loads). Registers per consumer thread: acc 64 + t0 64 + t1 64. */
template <int E, int N, int K, int STAGES, int EPI = 1, int BAND = 16, int SCHED = 0, int PINGPONG = 0>
struct GemmFp8KGrouped {
    static constexpr int BLOCK = 128, THREADS = 384;
    /* the rows of dW (n) a tile covers: 128 (both consumer warpgroups, 64 each) or, ping-pong, 64 (one warpgroup) */
    static constexpr int TILE_N = PINGPONG ? 64 : 128;
    static constexpr int A_BYTES = TILE_N * 128, B_BYTES = 128 * 128;
    static constexpr int SA_BYTES = TILE_N, SB_BYTES = 128, FS_BYTES = 1024; /* fa [128] + fb [128] fp32 */
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES + FS_BYTES;
    static constexpr int TX_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES;
    static constexpr int OUT_COLS = 32, OUT_CHUNK_BYTES = 64 * OUT_COLS * 4; /* EPI 0: 64 rows x 32 fp32 */
    static constexpr int OUT_BYTES = EPI == 0 ? 4 * OUT_CHUNK_BYTES : 0;
    /* sumsq: each consumer thread's running double in shared memory, not in registers (the consumers have none to
     * spare: two more made ptxas spill two values into local memory, read in the main loop) */
    static constexpr int SS_BYTES = 256 * 8;
    static constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + OUT_BYTES + 3 * STAGES * 8 + SS_BYTES;
    static constexpr int NUM_N = N / TILE_N, NUM_K = K / 128, TILES = E * NUM_N * NUM_K;
    /* ping-pong: a band of 2 BAND 64-row blocks covers the rows of BAND 128-row ones */
    static constexpr int SCHED_BAND = PINGPONG ? 2 * BAND : BAND;
    static constexpr int ACC = 64;
    /* the warps that free a slot: both consumer warpgroups (cooperative), the one owning the tile (ping-pong) */
    static constexpr int CONSUMER_WARPS = PINGPONG ? 4 : 8;
    static_assert(N % 128 == 0 && K % 128 == 0, "N and K must be multiples of 128");
    static_assert(PINGPONG == 0 || PINGPONG == 1, "PINGPONG is 0 (cooperative 128 x 128 tiles) or 1 (64 x 128 a warpgroup)");
    /* (with the register stores ptxas spills two scalars into the main loop; the TMA stores are what overlaps) */
    static_assert(PINGPONG == 0 || EPI == 0, "the ping-pong schedule takes the TMA-store epilogue (EPI 0)");
    static_assert((STAGES * (A_BYTES + B_BYTES)) % 1024 == 0, "swizzled buffers 1024-aligned");
    static_assert(STAGES >= 2 && SMEM_BYTES <= 232448, "the ring does not fit in shared memory");
    static_assert((long long)E * N * K < (1ll << 40), "dW too large");
    static_assert(N < 2147483647 / 2 && K < 2147483647 / 2, "the rows of the operands must fit an int coordinate");
    static_assert(EPI == 0 || EPI == 1, "EPI is 0 (TMA stores) or 1 (stores from registers)");
    static_assert(SCHED == 0 || SCHED == 1, "SCHED is 0 (pipelined promotion) or 1 (the pairs of decision 45)");
    static constexpr int BODY = 4; /* SCHED 0: stages per MOEC_FP8_PIPE body; a group's last steps % 4 in a tail */
    static_assert(EPI != 0 || (long long)E * N < 2147483647ll, "the rows of dW must fit an int coordinate");

    /* shared-memory map (base 1024-aligned): the A ring, the B ring, the fp32 staging buffers (EPI 0; all three
     * 1024-aligned for the 128-byte swizzle), the scale codes, the decoded scales, the barriers */
    __device__ static __forceinline__ unsigned a_at(unsigned base, int s) { return base + s * A_BYTES; }
    __device__ static __forceinline__ unsigned b_at(unsigned base, int s) { return base + STAGES * A_BYTES + s * B_BYTES; }
    __device__ static __forceinline__ unsigned out_at(unsigned base) { return base + STAGES * (A_BYTES + B_BYTES); }
    __device__ static __forceinline__ unsigned sa_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + s * SA_BYTES;
    }
    __device__ static __forceinline__ unsigned sb_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + STAGES * SA_BYTES + s * SB_BYTES;
    }
    __device__ static __forceinline__ unsigned fs_at(unsigned base, int s)
    {
        return out_at(base) + OUT_BYTES + STAGES * (SA_BYTES + SB_BYTES) + s * FS_BYTES;
    }
    /* sumsq's running double of this consumer thread, its index read again where used (tid_fresh: volatile, so no
     * register holds it across the main loop; with one, ptxas spilled two values into local memory) */
    __device__ static __forceinline__ unsigned ss_at(unsigned base)
    {
        return base + STAGES * STAGE_BYTES + OUT_BYTES + 3 * STAGES * 8 + 8 * (tid_fresh() - 128);
    }
    /* E8M0 code -> 2^(c - 127) exactly (code 0: 2^-127, a subnormal; 255: NaN) */
    __device__ static __forceinline__ float e8m0(unsigned c)
    {
        return __uint_as_float(c == 0 ? 0x00400000u : c == 255 ? 0x7FC00000u : c << 23);
    }

    /* the 128-token blocks of group g (rows clamped to rows_cap), its first row through r0 */
    __device__ static __forceinline__ int group_blocks(const int *offsets, int g, int rows_cap, int *r0)
    {
        int a = offsets[g], b = offsets[g + 1];
        a = a < rows_cap ? a : rows_cap;
        b = b < rows_cap ? b : rows_cap;
        *r0 = a;
        return b > a ? (b - a) / BLOCK : 0;
    }

    /* the stage in slot st into t: four k32 steps (32 tokens each); half: the 64 rows of the stage's A tile (0 for
     * ping-pong, whose A tile is 64 rows) */
    __device__ static __forceinline__ void issue(float (&t)[ACC], unsigned base, int st, int half)
    {
        const unsigned long long da = desc_sw128(a_at(base, st) + half * (64 * 128));
        const unsigned long long db = desc_sw128(b_at(base, st));
        wgmma_fence();
#pragma unroll
        for (int i = 0; i < 4; i++)
            wgmma_m64n128k32_e4m3(t, da + 2 * i, db + 2 * i, i != 0);
        wgmma_commit();
    }

    /* acc += t . fb[col] . fa[row] for the stage in slot st */
    __device__ static __forceinline__ void promote(float (&acc)[ACC], const float (&t)[ACC], unsigned base, int st,
                                                   int r, int lane)
    {
        const unsigned fa = fs_at(base, st), fb = fa + 512;
        const float a0 = ld_shared_f32(fa + 4 * r), a1 = ld_shared_f32(fa + 4 * (r + 8));
#pragma unroll
        for (int j = 0; j < ACC / 4; j += 2) {
            float b0, b1, b2, b3; /* columns 8 j + 2 (lane % 4), + 1 and 8 (j + 1) + 2 (lane % 4), + 1 */
            ld_shared_f32x4(fb + 4 * fp8_fb_slot(8 * j + 2 * (lane % 4)), b0, b1, b2, b3);
            acc[4 * j + 0] = __fmaf_rn(t[4 * j + 0] * b0, a0, acc[4 * j + 0]);
            acc[4 * j + 1] = __fmaf_rn(t[4 * j + 1] * b1, a0, acc[4 * j + 1]);
            acc[4 * j + 2] = __fmaf_rn(t[4 * j + 2] * b0, a1, acc[4 * j + 2]);
            acc[4 * j + 3] = __fmaf_rn(t[4 * j + 3] * b1, a1, acc[4 * j + 3]);
            acc[4 * j + 4] = __fmaf_rn(t[4 * j + 4] * b2, a0, acc[4 * j + 4]);
            acc[4 * j + 5] = __fmaf_rn(t[4 * j + 5] * b3, a0, acc[4 * j + 5]);
            acc[4 * j + 6] = __fmaf_rn(t[4 * j + 6] * b2, a1, acc[4 * j + 6]);
            acc[4 * j + 7] = __fmaf_rn(t[4 * j + 7] * b3, a1, acc[4 * j + 7]);
        }
    }

    /* EPI 1 (tma_dw unused: nullptr) or EPI 0; sumsq: nullptr, or the gradient norm's squares (sumsq_f32 above) */
    __device__ static __forceinline__ void run(const TmaDesc &tma_a, const TmaDesc &tma_b, float *dw, const void *sa,
                                               const void *sb, const int *offsets, int rows_cap,
                                               const TmaDesc *tma_dw = nullptr, double *sumsq = nullptr)
    {
        extern __shared__ unsigned char smem_raw[];
        const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
        const unsigned full_bar = base + STAGES * STAGE_BYTES + OUT_BYTES, empty_bar = full_bar + STAGES * 8,
                       ready_bar = empty_bar + STAGES * 8;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;

        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full_bar + 8 * s, 1);
                mbar_init(empty_bar + 8 * s, CONSUMER_WARPS);
                mbar_init(ready_bar + 8 * s, 1);
            }
            mbar_init_fence();
        }
        __syncthreads();

        if (wg == 0) {
            setmaxnreg_dec<40>();
            if (warp == 0 && elect_one()) {
                tma_prefetch_desc(&tma_a);
                tma_prefetch_desc(&tma_b);
                if constexpr (EPI == 0)
                    tma_prefetch_desc(tma_dw);
                int stage = 0;
                unsigned phase = 0;
                for (int t = blockIdx.x; t < TILES; t += gridDim.x) {
                    int g, nb, kb, r0;
                    moec_sched_ktile(t, NUM_N, NUM_K, SCHED_BAND, &g, &nb, &kb);
                    const int steps = group_blocks(offsets, g, rows_cap, &r0);
                    for (int i = 0; i < steps; i++) {
                        const int row = r0 + i * BLOCK;
                        const unsigned fb = full_bar + 8 * stage;
                        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
                        mbar_arrive_expect_tx(fb, TX_BYTES);
                        tma_load_2d(a_at(base, stage), &tma_a, fb, row, nb * TILE_N);
                        tma_load_2d(b_at(base, stage), &tma_b, fb, row, kb * 128);
                        bulk_load(sa_at(base, stage),
                                  (const unsigned char *)sa + moec_fp8_kgrouped_s_index(row, nb * TILE_N, N), SA_BYTES,
                                  fb);
                        bulk_load(sb_at(base, stage),
                                  (const unsigned char *)sb + moec_fp8_kgrouped_s_index(row, kb * 128, K), SB_BYTES, fb);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            } else if (warp == 1) {
                /* the decoder: each stage's codes into fp32 fa [128] (rows of the tile), fb [128] (columns) once
                 * the copies have landed; the slot is not overwritten before the consumers are done with it (its
                 * next copies wait for `empty`) */
                int stage = 0;
                unsigned phase = 0;
                for (int t = blockIdx.x; t < TILES; t += gridDim.x) {
                    int g, nb, kb, r0;
                    moec_sched_ktile(t, NUM_N, NUM_K, SCHED_BAND, &g, &nb, &kb);
                    const int steps = group_blocks(offsets, g, rows_cap, &r0);
                    for (int i = 0; i < steps; i++) {
                        mbar_wait(full_bar + 8 * stage, phase);
                        /* (ping-pong: 64 row codes, lanes 0-15) */
                        const bool has_a = 4 * lane < SA_BYTES;
                        const unsigned wa = has_a ? ld_shared_u32(sa_at(base, stage) + 4 * lane) : 0u;
                        const unsigned wb = ld_shared_u32(sb_at(base, stage) + 4 * lane);
                        const unsigned fs = fs_at(base, stage);
#pragma unroll
                        for (int k = 0; k < 4; k++) {
                            if (has_a)
                                st_shared_f32(fs + 4 * (4 * lane + k), e8m0((wa >> (8 * k)) & 255u));
                            st_shared_f32(fs + 512 + 4 * fp8_fb_slot(4 * lane + k), e8m0((wb >> (8 * k)) & 255u));
                        }
                        __syncwarp();
                        if (lane == 0)
                            mbar_arrive(ready_bar + 8 * stage);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1;
                        }
                    }
                }
            }
        } else {
            setmaxnreg_inc<232>();
            /* warpgroup c = wg - 1. Cooperative: rows 64 c .. 64 c + 63 of every tile of the block (the stage's A tile
             * is 128 rows). Ping-pong: the block's tiles j = c, c + 2, ... whole (64 rows, the stage's A tile); tile j's
             * stages are the ring numbers n0 .. n0 + steps - 1, n0 the steps of the block's tiles 0 .. j - 1 (the other
             * warpgroup's included: ist, iph advance over the other's tiles), and an ordering barrier (named barrier
             * 3 + c: the other warpgroup arrives once it
             * has issued tile j - 1's last stage) starts its first issue. Besides the overlap, the barrier keeps every
             * ring number before n0 waited for (landed) before this warpgroup waits on n0, so a slot's `full` or
             * `ready` barrier is never two phases behind the parity waited for (decision 49's argument). */
            const int c = wg - 1, wq = warp % 4;
            const int half = PINGPONG ? 0 : c;            /* the 64 rows of the stage's A tile this warpgroup takes */
            const int r = half * 64 + wq * 16 + lane / 4; /* this thread's rows of the tile: r, r + 8 */
            float acc[ACC], t0[ACC], t1[ACC];
            int ist = 0, rst = 0; /* the slot of the next stage to issue, of the next to promote */
            unsigned iph = 0;
            st_shared_f64(ss_at(base), 0.0);
            for (int j = 0, t = blockIdx.x; t < TILES; j++, t += gridDim.x) {
                int g, nb, kb, r0;
                moec_sched_ktile(t, NUM_N, NUM_K, SCHED_BAND, &g, &nb, &kb);
                const int steps = group_blocks(offsets, g, rows_cap, &r0);
                int left = steps; /* ping-pong: stages still to issue */
                if constexpr (PINGPONG) {
                    if ((j & 1) != c) { /* the other warpgroup's tile: its stages' ring numbers */
                        const int q = ist + steps;
                        ist = q % STAGES;
                        iph ^= (unsigned)(q / STAGES) & 1u;
                        continue;
                    }
                    rst = ist; /* every stage issued so far has been promoted (each body ends with wait_group 0) */
                    if (j > 0)
                        named_barrier(3 + c, 256); /* the other warpgroup has issued tile j - 1 */
                }
#pragma unroll
                for (int i = 0; i < ACC; i++)
                    acc[i] = 0.0f;
                /* ping-pong: after the tile's last issue, tile j + 1 (the other warpgroup's) may start its issues while
                 * this one promotes and stores */
#define MOEC_FP8K_ISSUE(T)                                                                                  \
    do {                                                                                                    \
        mbar_wait(full_bar + 8 * ist, iph);                                                                 \
        mbar_wait(ready_bar + 8 * ist, iph);                                                                \
        issue(T, base, ist, half);                                                                          \
        if (++ist == STAGES) {                                                                              \
            ist = 0;                                                                                        \
            iph ^= 1;                                                                                       \
        }                                                                                                   \
        if (PINGPONG && --left == 0 && t + (int)gridDim.x < TILES)                                          \
            named_barrier_arrive(3 + (c ^ 1), 256);                                                         \
    } while (0)
#define MOEC_FP8K_PROMOTE(T)                                                                                \
    do {                                                                                                    \
        reg_fence(T);                                                                                       \
        promote(acc, T, base, rst, r, lane);                                                                \
        __syncwarp();                                                                                       \
        if (lane == 0)                                                                                      \
            mbar_arrive(empty_bar + 8 * rst);                                                               \
        if (++rst == STAGES)                                                                                \
            rst = 0;                                                                                        \
    } while (0)
                if constexpr (SCHED == 0) {
                    /* pipelined (decision 51): BODY stages per body, stage q + 1 in flight while q is
                     * promoted (one promotion in BODY alone); the group's last steps % BODY stages by an
                     * unrolled body of their own count (a runtime count inside a body serialises) */
#define MOEC_FP8K_IS(T, Q) MOEC_FP8K_ISSUE(T)
#define MOEC_FP8K_PR(T, Q) MOEC_FP8K_PROMOTE(T)
                    int i = 0;
                    for (; i + BODY <= steps; i += BODY)
                        MOEC_FP8_PIPE(BODY, MOEC_FP8K_IS, MOEC_FP8K_PR);
                    static_assert(BODY == 4, "the tails below are 1 to 3 stages");
                    const int tail = steps - i;
                    if (tail == 3)
                        MOEC_FP8_PIPE(3, MOEC_FP8K_IS, MOEC_FP8K_PR);
                    else if (tail == 2)
                        MOEC_FP8_PIPE(2, MOEC_FP8K_IS, MOEC_FP8K_PR);
                    else if (tail == 1)
                        MOEC_FP8_PIPE(1, MOEC_FP8K_IS, MOEC_FP8K_PR);
#undef MOEC_FP8K_IS
#undef MOEC_FP8K_PR
                } else {
                    /* SCHED 1 (decision 45): stages in pairs, nothing in flight between pairs */
                    int i = 0;
                    for (; i + 1 < steps; i += 2) {
                        MOEC_FP8K_ISSUE(t0);
                        MOEC_FP8K_ISSUE(t1);
                        wgmma_wait<1>();
                        MOEC_FP8K_PROMOTE(t0);
                        wgmma_wait<0>();
                        MOEC_FP8K_PROMOTE(t1);
                    }
                    if (i < steps) {
                        MOEC_FP8K_ISSUE(t0);
                        wgmma_wait<0>();
                        MOEC_FP8K_PROMOTE(t0);
                    }
                }
#undef MOEC_FP8K_ISSUE
#undef MOEC_FP8K_PROMOTE
                if (PINGPONG && steps == 0 && t + (int)gridDim.x < TILES)
                    named_barrier_arrive(3 + (c ^ 1), 256); /* an empty group's tile: nothing issued, zeros stored */
                if constexpr (EPI == 0) {
                    /* GemmKGrouped's EPILOGUE 0: chunk cc (columns 32 cc .. + 31 of the warpgroup's 64 rows, 128
                     * bytes a row) into buffer cc % 2 in the TMA's 128-byte swizzled layout (row rr at 128 rr, its
                     * 16-byte unit u at (u ^ rr % 8) * 16; conflict-free), one thread stores it; a buffer is
                     * rewritten once the store that read it is done; the last drain during the next tile */
                    const int tid = threadIdx.x % 128, q = lane % 4, rr = wq * 16 + lane / 4;
                    const int row0 = g * N + nb * TILE_N + half * 64;
                    const unsigned out_buf = out_at(base);
#pragma unroll
                    for (int cc = 0; cc < 128 / OUT_COLS; cc++) {
                        /* warpgroup c's two buffers and named barrier 1 + c */
                        const unsigned buf = out_buf + (c * 2 + (cc & 1)) * OUT_CHUNK_BYTES;
                        if (tid == 0)
                            bulk_wait_read<1>();
                        named_barrier(1 + c, 128);
#pragma unroll
                        for (int jj = 0; jj < OUT_COLS / 8; jj++) {
                            const int j = cc * (OUT_COLS / 8) + jj;
                            const unsigned off = (unsigned)((((2 * jj + q / 2) ^ (rr & 7)) * 16) + 8 * (q & 1));
                            st_shared_f32x2(buf + rr * 128 + off, acc[4 * j + 0], acc[4 * j + 1]);
                            st_shared_f32x2(buf + (rr + 8) * 128 + off, acc[4 * j + 2], acc[4 * j + 3]);
                        }
                        fence_proxy_async();
                        named_barrier(1 + c, 128);
                        if (tid == 0) {
                            tma_store_2d(tma_dw, buf, kb * 128 + cc * OUT_COLS, row0);
                            bulk_commit();
                        }
                    }
                } else {
                    float *p0 =
                        dw + ((long long)g * N + (long long)nb * TILE_N + r) * K + (long long)kb * 128 + 2 * (lane % 4);
#pragma unroll
                    for (int j = 0; j < ACC / 4; j++) {
                        st_global_f32x2(p0 + 8 * j, acc[4 * j + 0], acc[4 * j + 1]);
                        st_global_f32x2(p0 + 8ll * K + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
                    }
                }
                if (sumsq && steps > 0) /* 64 FFMA a tile */
                    st_shared_f64(ss_at(base), __dadd_rn(ld_shared_f64(ss_at(base)), (double)sumsq_f32(acc)));
            }
            if (sumsq)
                put_sumsq(sumsq, ld_shared_f64(ss_at(base)), (int)(tid_fresh() / 32) - 4, (int)(tid_fresh() % 32));
            if constexpr (EPI == 0) {
                if (threadIdx.x % 128 == 0)
                    bulk_wait<0>(); /* the last stores have landed before the block ends */
            }
        }
    }
};

} /* namespace sm90 */
} /* namespace moec */

/* Instantiates the kernel NAME for one shape. Launch contract: grid (#SMs, 1, 1) (any count works:
 * blocks loop over the tiles), block (384, 1, 1), dynamic shared memory GemmMGrouped<...>::SMEM_BYTES
 * (set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first); tensor maps, all bf16 and 128-byte
 * swizzled: tma_a over A [rows_cap, K] with box {64, 128}; tma_b over W viewed [E*N, K] with box
 * {64, BLOCK_N}; tma_d over D [rows_cap, N] with box {64, 64} (read only by EPILOGUE 0); d = D's
 * address (EPILOGUE 1 and 2); TRANS_B 1: tma_b over W viewed [E*K, N] with box {64, 64}. MOEC_SM90_GEMM_MGROUPED is the default epilogue (0).
 * MOEC_SM90_GEMM_MGROUPED_SCHED picks the schedule: PINGPONG 1 takes tma_a with box {64, 64} (64-row tiles). */
#define MOEC_SM90_GEMM_MGROUPED_SCHED(NAME, E, N, K, BLOCK_N, STAGES, EPILOGUE, TRANS_B, PINGPONG)          \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, \
             const __grid_constant__ moec::sm90::TmaDesc tma_d, unsigned short *d, const int *offsets, int rows_cap) \
    {                                                                                                         \
        moec::sm90::GemmMGrouped<E, N, K, BLOCK_N, STAGES, EPILOGUE, TRANS_B, PINGPONG>::run(tma_a, tma_b, tma_d, d, \
                                                                                            offsets, rows_cap); \
    }
#define MOEC_SM90_GEMM_MGROUPED_EX(NAME, E, N, K, BLOCK_N, STAGES, EPILOGUE, TRANS_B)                       \
    MOEC_SM90_GEMM_MGROUPED_SCHED(NAME, E, N, K, BLOCK_N, STAGES, EPILOGUE, TRANS_B, 0)
#define MOEC_SM90_GEMM_MGROUPED(NAME, E, N, K, BLOCK_N, STAGES) MOEC_SM90_GEMM_MGROUPED_EX(NAME, E, N, K, BLOCK_N, STAGES, 0, 0)

/* The K-grouped kernel NAME (weight gradient, fp32 out), register-store epilogue (1). Launch
 * contract: grid (#SMs, 1, 1), block (384, 1, 1), dynamic shared memory GemmKGrouped<...>::SMEM_BYTES;
 * tensor maps, bf16, 128-byte swizzled, box {64, 64}: tma_dy over dY [rows_cap, N], tma_x over
 * X [rows_cap, K]. */
#define MOEC_SM90_GEMM_KGROUPED(NAME, E, N, K, BLOCK_N, STAGES)                                              \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_dy, const __grid_constant__ moec::sm90::TmaDesc tma_x, \
             float *dw, const int *offsets, int rows_cap)                                                    \
    {                                                                                                         \
        moec::sm90::GemmKGrouped<E, N, K, BLOCK_N, STAGES, 1>::run(tma_dy, tma_x, dw, offsets, rows_cap);     \
    }
/* The same with a choice of epilogue and a third tensor map: tma_dw over dW viewed [E * N, K], fp32,
 * 128-byte swizzle, box {32, 64} (read only by EPILOGUE 0; dw only by EPILOGUE 1). */
#define MOEC_SM90_GEMM_KGROUPED_EX(NAME, E, N, K, BLOCK_N, STAGES, EPILOGUE)                                 \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_dy, const __grid_constant__ moec::sm90::TmaDesc tma_x, \
             const __grid_constant__ moec::sm90::TmaDesc tma_dw, float *dw, const int *offsets, int rows_cap)  \
    {                                                                                                         \
        moec::sm90::GemmKGrouped<E, N, K, BLOCK_N, STAGES, EPILOGUE>::run(tma_dy, tma_x, tma_dw, dw, offsets,     \
                                                                          rows_cap);                          \
    }
/* The same with a schedule: PINGPONG 1 is the ping-pong one (BLOCK_N 128; decision 49); either epilogue (dw is read
 * by EPILOGUE 1 only, tma_dw by EPILOGUE 0 only). */
#define MOEC_SM90_GEMM_KGROUPED_SCHED(NAME, E, N, K, BLOCK_N, STAGES, EPILOGUE, PINGPONG)                      \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_dy, const __grid_constant__ moec::sm90::TmaDesc tma_x, \
             const __grid_constant__ moec::sm90::TmaDesc tma_dw, float *dw, const int *offsets, int rows_cap)  \
    {                                                                                                         \
        moec::sm90::GemmKGrouped<E, N, K, BLOCK_N, STAGES, EPILOGUE, 16, 0, PINGPONG>::body(&tma_dy, &tma_x, &tma_dw, \
                                                                                        dw, offsets, rows_cap); \
    }

/* The FP8 M-grouped kernel NAME (GemmFp8MGrouped): MODE 0 fp8-block, 1 MXFP8; OUT 0 bf16 D through
 * tma_d, 1 fp32 D at d. Launch contract: grid (#SMs, 1, 1), block (384, 1, 1), dynamic shared memory
 * GemmFp8MGrouped<...>::SMEM_BYTES (gemm_fp8_smem_bytes); tensor maps from gemm_fp8_tensor_maps
 * (uint8 A [rows_cap, K] box {128, 128}, W [E*N, K] box {128, 128}, bf16 D box {64, 64}); sa, sb 16-byte
 * aligned in the layouts of gemm_sm90_sched.h; rows_cap % 16 == 0; offsets multiples of 128.
 * MOEC_SM90_GEMM_FP8_S chooses the promotion schedule: SCHED 0 (MOEC_SM90_GEMM_FP8's: pipelined, decision
 * 51) or 1 (the pairs of decision 38, kept for side-by-side timing; fp8-block runs the pairs in both). */
#define MOEC_SM90_GEMM_FP8_S(NAME, E, N, K, STAGES, MODE, OUT, SCHED)                                       \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, \
             const __grid_constant__ moec::sm90::TmaDesc tma_d, void *d, const void *sa, const void *sb,        \
             const int *offsets, int rows_cap)                                                               \
    {                                                                                                         \
        moec::sm90::GemmFp8MGrouped<E, N, K, STAGES, MODE, OUT, 16, SCHED>::run(tma_a, tma_b, tma_d, d, sa, sb,  \
                                                                             offsets, rows_cap);              \
    }
#define MOEC_SM90_GEMM_FP8(NAME, E, N, K, STAGES, MODE, OUT) MOEC_SM90_GEMM_FP8_S(NAME, E, N, K, STAGES, MODE, OUT, 0)
/* the same with the cluster size chosen (decision 71): CLUSTER 1 (the forms above) or 2 (launch with cluster
 * dimension (2, 1, 1) on twice the clusters that fit at once: runtime/gpu/cudrv.h cudrv_launch,
 * cudrv_persistent_grid) */
#define MOEC_SM90_GEMM_FP8_SC(NAME, E, N, K, STAGES, MODE, OUT, SCHED, CLUSTER)                             \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, \
             const __grid_constant__ moec::sm90::TmaDesc tma_d, void *d, const void *sa, const void *sb,        \
             const int *offsets, int rows_cap)                                                               \
    {                                                                                                         \
        moec::sm90::GemmFp8MGrouped<E, N, K, STAGES, MODE, OUT, 16, SCHED, moec::sm90::NoGlu, CLUSTER>::run(     \
            tma_a, tma_b, tma_d, d, sa, sb, offsets, rows_cap);                                               \
    }

/* The FP8 K-grouped kernel NAME (GemmFp8KGrouped, fp8-block weight gradient, fp32 out). Launch contract:
 * grid (#SMs, 1, 1), block (384, 1, 1), dynamic shared memory gemm_fp8_kgrouped_smem_bytes(); tensor maps
 * from gemm_fp8_kgrouped_tensor_maps (uint8 dY^T [N, rows_cap] box {128, 128} (ping-pong {128, 64}), X^T [K,
 * rows_cap] box {128, 128}); sa, sb 16-byte aligned in moec_fp8_kgrouped_s_index's layout; rows_cap % 16 == 0;
 * offsets multiples of 128. The _S forms choose the promotion schedule: SCHED 0 (the plain forms': pipelined,
 * decision 51) or 1 (the pairs of decision 45, kept for side-by-side timing); the _SP forms also the tile
 * schedule: PINGPONG 0 (cooperative 128 x 128 tiles) or 1 (64 x 128 a consumer warpgroup, decision 56). */
#define MOEC_SM90_GEMM_FP8_KGROUPED_SP(NAME, E, N, K, STAGES, SCHED, PINGPONG)                              \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, \
             float *dw, const void *sa, const void *sb, const int *offsets, int rows_cap)                     \
    {                                                                                                         \
        moec::sm90::GemmFp8KGrouped<E, N, K, STAGES, 1, 16, SCHED, PINGPONG>::run(tma_a, tma_b, dw, sa, sb, offsets, \
                                                                                 rows_cap);                   \
    }
#define MOEC_SM90_GEMM_FP8_KGROUPED_S(NAME, E, N, K, STAGES, SCHED)                                          \
    MOEC_SM90_GEMM_FP8_KGROUPED_SP(NAME, E, N, K, STAGES, SCHED, 0)
#define MOEC_SM90_GEMM_FP8_KGROUPED(NAME, E, N, K, STAGES) MOEC_SM90_GEMM_FP8_KGROUPED_S(NAME, E, N, K, STAGES, 0)
/* The same with the TMA-store epilogue (EPI 0) and a third tensor map: tma_dw over dW viewed [E * N, K], fp32,
 * 128-byte swizzle, box {32, 64} (gemm_fp8_kgrouped_dw_map); dw is not read. */
#define MOEC_SM90_GEMM_FP8_KGROUPED_TMA_SP(NAME, E, N, K, STAGES, SCHED, PINGPONG)                          \
    extern "C" __global__ void __launch_bounds__(384, 1)                                                     \
        NAME(const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, \
             const __grid_constant__ moec::sm90::TmaDesc tma_dw, float *dw, const void *sa, const void *sb,     \
             const int *offsets, int rows_cap)                                                               \
    {                                                                                                         \
        moec::sm90::GemmFp8KGrouped<E, N, K, STAGES, 0, 16, SCHED, PINGPONG>::run(tma_a, tma_b, dw, sa, sb, offsets, \
                                                                                 rows_cap, &tma_dw);          \
    }
#define MOEC_SM90_GEMM_FP8_KGROUPED_TMA_S(NAME, E, N, K, STAGES, SCHED)                                      \
    MOEC_SM90_GEMM_FP8_KGROUPED_TMA_SP(NAME, E, N, K, STAGES, SCHED, 0)
#define MOEC_SM90_GEMM_FP8_KGROUPED_TMA(NAME, E, N, K, STAGES)                                               \
    MOEC_SM90_GEMM_FP8_KGROUPED_TMA_S(NAME, E, N, K, STAGES, 0)
