/* gemm_sm90_sched.h - the tile scheduler of the sm_90 grouped GEMM (codegen/gemm_sm90.cuh), written
 * once for both sides: NVRTC pastes it in front of the kernel (it is one of the strings of
 * $(GEN)/cuda_prelude.c), and C code includes it (tests/unit/test_gemm_sm90.c checks the schedule
 * with it on the CPU). Plain integer code, no headers, no state.
 *
 * M-grouped schedule. Group g (an expert) owns rows [offsets[g], offsets[g+1]) of A and D, with
 * every offsets[g] a multiple of BLOCK_M (the dispatch pads each group to a multiple of BLOCK_M).
 * So the M blocks of all groups are simply the blocks 0 .. offsets[E]/BLOCK_M - 1 of the row space,
 * and no block straddles two groups; an empty group owns none. The output tiles are
 * num_m x num_n; a persistent block takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... until
 * they run out, so the tile count is derived on the device from offsets[E] and the host never
 * reads the offsets.
 *
 * Tile order (L2): tiles are numbered in bands of `band` M blocks; inside a band the M index runs
 * fastest. The ~132 tiles in flight at once then touch `band` M blocks of A and about 132/band
 * N blocks of B (which are in one or two groups' weights), instead of one row of A against all of
 * B, so both operands of a wave stay in L2. */
#ifndef MOEC_GEMM_SM90_SCHED_H
#define MOEC_GEMM_SM90_SCHED_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MOEC_SCHED_FN inline __host__ __device__
#else
#define MOEC_SCHED_FN static inline
#endif

/* The doubles a K-grouped (weight-gradient) launch given `sumsq` writes per block for the optimizer's gradient
 * norm: one per consumer warp (decision 73; codegen/gemm_sm90.cuh put_sumsq, the runtime's norm slots) */
enum { KGEMM_SUMSQ_PER_BLOCK = 8 };

/* The group owning row `row` (0 <= row < offsets[E]): the largest g with offsets[g] <= row.
 * Empty groups (offsets[g] == offsets[g+1]) are never returned. Binary search, E + 1 offsets. */
MOEC_SCHED_FN int moec_sched_group_of(const int *offsets, int E, int row)
{
    int lo = 0, hi = E; /* offsets[lo] <= row < offsets[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) >> 1;
        if (offsets[mid] <= row)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The M blocks to schedule: offsets[E] / block_m, clamped to the row capacity of A and D (a
 * corrupt offsets array can then not make the kernel read or write past the buffers). */
MOEC_SCHED_FN int moec_sched_num_m(const int *offsets, int E, int rows_cap, int block_m)
{
    int rows = offsets[E];
    if (rows > rows_cap)
        rows = rows_cap;
    return rows > 0 ? rows / block_m : 0;
}

/* Tile t (0 <= t < num_m * num_n) of the banded raster: its M block and N block. */
MOEC_SCHED_FN void moec_sched_tile(int t, int num_m, int num_n, int band, int *m_block, int *n_block)
{
    int per_band = band * num_n;
    int b = t / per_band;
    int m0 = b * band;
    int bm = num_m - m0 < band ? num_m - m0 : band;
    int r = t - b * per_band;
    *m_block = m0 + r % bm;
    *n_block = r / bm;
}

/* K-grouped schedule (the weight gradient dW_g = dY_g^T . X_g, reduction over each group's rows):
 * the output tiles are E x num_n x num_k, fixed at compile time; a group's tiles are consecutive
 * (t / (num_n num_k) = g) so the blocks in flight share that group's rows in L2, and inside a
 * group the same banded raster. An empty group's tiles are still produced (as zeros). */
MOEC_SCHED_FN void moec_sched_ktile(int t, int num_n, int num_k, int band, int *group, int *n_block, int *k_block)
{
    int per_group = num_n * num_k;
    *group = t / per_group;
    moec_sched_tile(t - *group * per_group, num_n, num_k, band, n_block, k_block);
}

/* Scale layouts of the FP8 M-grouped kernel (GemmFp8MGrouped, docs/kernels-sm90.md), one definition
 * for the kernel and the C side (the harness's quantiser writes them, the unit test checks them).
 * K128 = K / 128 (the kernel's K block: one 128-byte swizzle row of E4M3). Element offsets:
 *
 * fp8-block (1 x 128 activations, 128 x 128 weights; E8M0 codes, one byte each, as decision 35):
 *   A: [K128][rows_cap], "MN-major": the 128 rows of an M block for one K block are 128 contiguous
 *      bytes (one bulk copy per pipeline stage); rows_cap % 16 == 0 keeps them 16-byte aligned.
 *   W: [E][N / 128][K128]: one code per (expert, 128 n, 128 k), read by the consumers with a plain
 *      load (the same address for the whole tile).
 * MXFP8 (1 x 32 both, E8M0 codes, one byte each):
 *   A: [K128][rows_cap][4]: row r's four 32-wide K blocks of one K128 block in one 32-bit word.
 *   W: [E][K128][N][4]: the same for each column n of W[g] (a row of W [E, N, K]).
 *   Per stage an M block's A scales and an N block's W scales are 512 contiguous bytes each
 *   (rows_cap % 4 == 0 suffices for their alignment; the kernel asks rows_cap % 16 == 0 for both). */
MOEC_SCHED_FN long long moec_fp8_block_sa_index(long long row, int kb128, long long rows_cap)
{
    return (long long)kb128 * rows_cap + row;
}
MOEC_SCHED_FN long long moec_fp8_block_sb_index(int g, int n, int kb128, int N, int K)
{
    return ((long long)g * (N / 128) + n / 128) * (K / 128) + kb128;
}
/* fp8-block weight gradient (GemmFp8KGrouped, decision 45): the 128 x 1 scales of an operand stored
 * transposed, dY^T [N, rows_cap] or X^T [K, rows_cap] (a row per column of dY or X, the tokens contiguous):
 * [rows_cap / 128][cols], the code of padded row `row`'s 128-token block for column c at
 * (row / 128) cols + c. One 128-token block's codes for 128 columns are 128 contiguous bytes (cols % 16 == 0
 * keeps them 16-byte aligned for the kernel's bulk copies); the quantisers (fp8_block_fast.cuh quant_tiles)
 * write them a tile at a time. */
MOEC_SCHED_FN long long moec_fp8_kgrouped_s_index(long long row, long long c, long long cols)
{
    return row / 128 * cols + c;
}
MOEC_SCHED_FN long long moec_mxfp8_sa_index(long long row, int kb32, long long rows_cap)
{
    return ((long long)(kb32 / 4) * rows_cap + row) * 4 + kb32 % 4;
}
MOEC_SCHED_FN long long moec_mxfp8_sb_index(int g, int n, int kb32, int N, int K)
{
    return (((long long)g * (K / 128) + kb32 / 4) * N + n) * 4 + kb32 % 4;
}

#endif
