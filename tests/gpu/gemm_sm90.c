/* gemm_sm90.c - checks and times the sm_90a bf16 M-grouped GEMM (codegen/gemm_sm90.cuh) on a GPU.
 *
 *   gemm_sm90 --emit DIR   (no GPU) NVRTC-compiles every configuration below for sm_90a into
 *                          DIR/NAME.cubin (and DIR/NAME.cu); fails on any NVRTC warning
 *   gemm_sm90 --run DIR    (GPU) loads those cubins and, per configuration:
 *     check:  fresh pseudo-random bf16 inputs (seed printed; generated on the device by a hash of
 *             the element index that the CPU recomputes), D poisoned with NaN first; compares with
 *             a CPU reference (double accumulation of the bf16 inputs) every element of the real
 *             rows (small shapes) or the first and last row of each group plus random elements (big
 *             ones); ragged groups (0, 1, non-multiples of 128, big); two runs bit-identical;
 *     time:   uniform anchor shapes, 3 warm-up launches, median of 20 timed by CUDA events;
 *             TFLOP/s = 2 M N K / time with M the real routed rows.
 *   Tolerance, per element: |d - ref| <= 2^-8 |ref| + K 2^-23 sum_k |a_k b_k|: the bf16 rounding of
 *   the output (half an ulp is at most 2^-8 relative; the rest is slack for rounding a perturbed
 *   value) plus the worst case of fp32 accumulation in any order (gamma_K = K 2^-24, doubled). And
 *   normwise ||d - ref|| / ||ref|| <= 2^-8.
 * The dSwiGLU epilogue (EPILOGUE 5 and 6, decision 60; configurations named *dsw*): h [rows, 2N] and dy
 * random bf16, probs random in (0, 1); the fused kernel's dh and a must equal, bit for bit, the same
 * configuration with the plain epilogue (0: da stored in bf16) followed by a reference kernel that applies
 * dswiglu1 (the element function the separate dSwiGLU kernel of moe_fast.cuh uses) to every element, and the
 * per-row sum (in order, double) of its partials of dprobs must be within 2^-16 sum_f |t_f| of the reference's
 * double sum of the t terms; two runs bit-identical (dh, a and the partials). Timed ones print both kernels'
 * times (the fused one's TFLOP/s; "plain da" the epilogue-0 kernel's ms).
 * GEMM_SM90_ONLY="NAME ..." (environment) restricts --emit and --run to those configurations.
 * Prints a table last; tests/gpu/gemm_sm90.sh drives it (with bench/gemm_anchor.py for torch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../codegen/gemm_sm90.h"
#include "../../runtime/gpu/tma.h"
#include "nvrtc.h" /* runtime/gpu/ (codegen/ before the move): both are on the include path */
#include "../../runtime/gpu/cudrv.h"

/* the input generator, the same code on both sides: bf16 bits from a hash of (seed, index):
 * random sign, 7 random mantissa bits, magnitude in [2^-shift-3, 2^-shift+1) */
#define MOEC_HASH_FN(QUAL)                                                                              \
    QUAL unsigned short moec_hash_bf16(unsigned seed, unsigned long long i, int shift)                  \
    {                                                                                                   \
        unsigned long long x = i * 0x9E3779B97F4A7C15ull + (unsigned long long)seed * 0xD1B54A32D192ED03ull; \
        x ^= x >> 30;                                                                                   \
        x *= 0xBF58476D1CE4E5B9ull;                                                                     \
        x ^= x >> 27;                                                                                   \
        x *= 0x94D049BB133111EBull;                                                                     \
        x ^= x >> 31;                                                                                   \
        unsigned e = 127u - (unsigned)shift - (unsigned)((x >> 8) & 3u);                                \
        return (unsigned short)(((x >> 63) << 15) | (e << 7) | ((x >> 16) & 127u));                     \
    }
MOEC_HASH_FN(static)
#define STR_(...) #__VA_ARGS__
#define STR(...) STR_(__VA_ARGS__)
static const char fill_src[] =
    "\n" STR(MOEC_HASH_FN(__device__ __forceinline__)) "\n"
    "extern \"C\" __global__ void moec_fill(unsigned short *p, unsigned long long n, unsigned seed, int shift)\n"
    "{\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x)\n"
    "        p[i] = moec_hash_bf16(seed, i, shift);\n"
    "}\n";

#define SHIFT_A 0
#define SHIFT_W 5

typedef struct Cfg {
    const char *name;
    GemmSm90Shape s;
    int timed;      /* 1: an anchor (uniform groups, timed, sampled check); 0: a check (full or sampled) */
    int full;       /* check every element of the real rows */
    int rows[32];   /* real rows per group (E of them) */
} Cfg;

#define U8(r) {r, r, r, r, r, r, r, r}
#define U16(r) {r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r}
static const Cfg cfgs[] = {
    /* the default: BLOCK_N 256, 4 stages, TMA-store epilogue (0) */
    {"ragged_bn256", {6, 512, 512, 256, 4, 0, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bio_up", {16, 5632, 1024, 256, 4, 0, 0, 0}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"ragged_mixtral_down", {8, 4096, 14336, 256, 4, 0, 0, 0}, 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000}},
    {"mixtral_gate_up", {8, 28672, 4096, 256, 4, 0, 0, 0}, 1, 0, U8(2048)},
    {"mixtral_down", {8, 4096, 14336, 256, 4, 0, 0, 0}, 1, 0, U8(2048)},
    {"bio_up", {16, 5632, 1024, 256, 4, 0, 0, 0}, 1, 0, U16(1024)},
    {"bio_down", {16, 1024, 2816, 256, 4, 0, 0, 0}, 1, 0, U16(1024)},
    /* dense (E = 1): a check with a ragged row count, and 8192^3 against torch.matmul */
    {"dense_check", {1, 1024, 1024, 256, 4, 0, 0, 0}, 0, 1, {1000}},
    {"dense_8192", {1, 8192, 8192, 256, 4, 0, 0, 0}, 1, 0, {8192}},
    /* BLOCK_N 128 (6 stages, TMA stores) */
    {"ragged_bn128", {6, 512, 512, 128, 6, 0, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"mixtral_gate_up_bn128", {8, 28672, 4096, 128, 6, 0, 0, 0}, 1, 0, U8(2048)},
    {"mixtral_down_bn128", {8, 4096, 14336, 128, 6, 0, 0, 0}, 1, 0, U8(2048)},
    {"bio_up_bn128", {16, 5632, 1024, 128, 6, 0, 0, 0}, 1, 0, U16(1024)},
    {"bio_down_bn128", {16, 1024, 2816, 128, 6, 0, 0, 0}, 1, 0, U16(1024)},
    /* 16-byte stores from registers (1), 4-byte stores (2) */
    {"ragged_bn256_st16", {6, 512, 512, 256, 4, 1, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bn128_st16", {6, 512, 512, 128, 6, 1, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"mixtral_gate_up_st16", {8, 28672, 4096, 256, 4, 1, 0, 0}, 1, 0, U8(2048)},
    {"mixtral_down_st16", {8, 4096, 14336, 256, 4, 1, 0, 0}, 1, 0, U8(2048)},
    {"bio_up_st16", {16, 5632, 1024, 256, 4, 1, 0, 0}, 1, 0, U16(1024)},
    {"bio_down_st16", {16, 1024, 2816, 256, 4, 1, 0, 0}, 1, 0, U16(1024)},
    {"mixtral_gate_up_st4", {8, 28672, 4096, 256, 4, 2, 0, 0}, 1, 0, U8(2048)},
    {"bio_up_st4", {16, 5632, 1024, 256, 4, 2, 0, 0}, 1, 0, U16(1024)},
    /* trans_b: D = A . W[g], W [E, K, N] (the data gradients of the fused MLP on the forward's weights) */
    {"ragged_bn256_tb", {6, 512, 768, 256, 4, 0, 1, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bn128_tb", {6, 512, 768, 128, 6, 0, 1, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bio_dxs_tb", {16, 1024, 5632, 256, 4, 0, 1, 0}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"mixtral_da_tb", {8, 14336, 4096, 256, 4, 0, 1, 0}, 1, 0, U8(2048)},
    {"mixtral_dxs_tb", {8, 4096, 28672, 256, 4, 0, 1, 0}, 1, 0, U8(2048)},
    {"bio_da_tb", {16, 2816, 1024, 256, 4, 0, 1, 0}, 1, 0, U16(1024)},
    {"bio_dxs_tb", {16, 1024, 5632, 256, 4, 0, 1, 0}, 1, 0, U16(1024)},
    /* ping-pong (decision 49), pingpong 2: 128 x 128 tiles, one per consumer warpgroup (the plans' default) */
    {"ragged_pp", {6, 512, 512, 128, 6, 0, 0, 2}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_one_tile_pp", {3, 256, 128, 128, 6, 0, 0, 2}, 0, 1, {0, 1, 0}},
    {"ragged_bio_up_pp", {16, 5632, 1024, 128, 6, 0, 0, 2}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"ragged_mixtral_down_pp", {8, 4096, 14336, 128, 6, 0, 0, 2}, 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000}},
    {"dense_check_pp", {1, 1024, 1024, 128, 6, 0, 0, 2}, 0, 1, {1000}},
    {"mixtral_gate_up_pp", {8, 28672, 4096, 128, 6, 0, 0, 2}, 1, 0, U8(2048)},
    {"mixtral_down_pp", {8, 4096, 14336, 128, 6, 0, 0, 2}, 1, 0, U8(2048)},
    {"bio_up_pp", {16, 5632, 1024, 128, 6, 0, 0, 2}, 1, 0, U16(1024)},
    {"bio_down_pp", {16, 1024, 2816, 128, 6, 0, 0, 2}, 1, 0, U16(1024)},
    {"dense_8192_pp", {1, 8192, 8192, 128, 6, 0, 0, 2}, 1, 0, {8192}},
    {"ragged_tb_pp", {6, 512, 768, 128, 6, 0, 1, 2}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bio_dxs_tb_pp", {16, 1024, 5632, 128, 6, 0, 1, 2}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"mixtral_da_tb_pp", {8, 14336, 4096, 128, 6, 0, 1, 2}, 1, 0, U8(2048)},
    {"mixtral_dxs_tb_pp", {8, 4096, 28672, 128, 6, 0, 1, 2}, 1, 0, U8(2048)},
    {"bio_da_tb_pp", {16, 2816, 1024, 128, 6, 0, 1, 2}, 1, 0, U16(1024)},
    {"bio_dxs_tb_pp", {16, 1024, 5632, 128, 6, 0, 1, 2}, 1, 0, U16(1024)},
    /* ping-pong, pingpong 1: 64 x BLOCK_N tiles */
    {"ragged_bn256_pp64", {6, 512, 512, 256, 4, 0, 0, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bn128_pp64", {6, 512, 512, 128, 8, 0, 0, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bn256_st16_pp64", {6, 512, 512, 256, 4, 1, 0, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_one_tile_pp64", {3, 256, 128, 256, 4, 0, 0, 1}, 0, 1, {0, 1, 0}},
    {"ragged_bio_up_pp64", {16, 5632, 1024, 256, 4, 0, 0, 1}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"ragged_mixtral_down_pp64", {8, 4096, 14336, 256, 4, 0, 0, 1}, 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000}},
    {"dense_check_pp64", {1, 1024, 1024, 256, 4, 0, 0, 1}, 0, 1, {1000}},
    {"mixtral_gate_up_pp64", {8, 28672, 4096, 256, 4, 0, 0, 1}, 1, 0, U8(2048)},
    {"mixtral_down_pp64", {8, 4096, 14336, 256, 4, 0, 0, 1}, 1, 0, U8(2048)},
    {"bio_up_pp64", {16, 5632, 1024, 256, 4, 0, 0, 1}, 1, 0, U16(1024)},
    {"bio_down_pp64", {16, 1024, 2816, 256, 4, 0, 0, 1}, 1, 0, U16(1024)},
    {"dense_8192_pp64", {1, 8192, 8192, 256, 4, 0, 0, 1}, 1, 0, {8192}},
    {"ragged_bn256_tb_pp64", {6, 512, 768, 256, 4, 0, 1, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bn128_tb_pp64", {6, 512, 768, 128, 8, 0, 1, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"ragged_bio_dxs_tb_pp64", {16, 1024, 5632, 256, 4, 0, 1, 1}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"mixtral_da_tb_pp64", {8, 14336, 4096, 256, 4, 0, 1, 1}, 1, 0, U8(2048)},
    {"mixtral_dxs_tb_pp64", {8, 4096, 28672, 256, 4, 0, 1, 1}, 1, 0, U8(2048)},
    {"bio_da_tb_pp64", {16, 2816, 1024, 256, 4, 0, 1, 1}, 1, 0, U16(1024)},
    {"bio_dxs_tb_pp64", {16, 1024, 5632, 256, 4, 0, 1, 1}, 1, 0, U16(1024)},
    /* the dSwiGLU epilogue on the da launch (decision 60): every schedule, ragged groups (0, 1, 127, 129 rows),
     * h interleaved (5) and split (6), then the two layers' shapes with their plans' schedules */
    {"ragged_dsw_pp", {6, 512, 768, 128, 6, 5, 1, 2}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_dsw_coop", {6, 512, 768, 256, 4, 5, 1, 0}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_dsw_coop_bn128", {6, 384, 768, 128, 6, 5, 1, 0}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_dsw_pp64", {6, 512, 768, 256, 4, 5, 1, 1}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_dsw_split_pp", {6, 384, 768, 128, 6, 6, 1, 2}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_dsw_split_pp64", {6, 512, 768, 256, 4, 6, 1, 1}, 0, 1, {0, 1, 127, 129, 1000, 333}},
    {"ragged_bio_da_dsw_pp", {16, 2816, 1024, 128, 6, 5, 1, 2}, 0, 1, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 127, 2000, 1111, 999, 1, 2500}},
    {"mixtral_da_dsw_pp64", {8, 14336, 4096, 256, 4, 5, 1, 1}, 1, 0, U8(2048)},
    {"mixtral_da_dsw", {8, 14336, 4096, 256, 4, 5, 1, 0}, 1, 0, U8(2048)},
    {"bio_da_dsw_pp", {16, 2816, 1024, 128, 6, 5, 1, 2}, 1, 0, U16(1024)},
};
#define NCFG ((int)(sizeof cfgs / sizeof *cfgs))

/* K-grouped (weight gradient, fp32 dW [E, N, K] = dY^T X per group): N = the forward's N (dY's
 * width), K = the forward's K (X's width) */
static const Cfg kcfgs[] = {
    /* epilogue 1: fp32 stores from registers (the original) */
    {"wgrad_ragged", {6, 256, 512, 256, 4, 1, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_bn128", {6, 256, 512, 128, 6, 1, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_bio_up", {16, 5632, 1024, 256, 4, 1, 0, 0}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"wgrad_mixtral_gate_up", {8, 28672, 4096, 256, 4, 1, 0, 0}, 1, 0, U8(2048)},
    {"wgrad_mixtral_down", {8, 4096, 14336, 256, 4, 1, 0, 0}, 1, 0, U8(2048)},
    {"wgrad_bio_up", {16, 5632, 1024, 256, 4, 1, 0, 0}, 1, 0, U16(1024)},
    {"wgrad_bio_down", {16, 1024, 2816, 256, 4, 1, 0, 0}, 1, 0, U16(1024)},
    /* epilogue 0: asynchronous TMA stores of fp32 through shared memory (2 x 8 KB per consumer warpgroup) */
    {"wgrad_ragged_tma", {6, 256, 512, 256, 4, 0, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_bn128_tma", {6, 256, 512, 128, 6, 0, 0, 0}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_bio_up_tma", {16, 5632, 1024, 256, 4, 0, 0, 0}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"wgrad_mixtral_gate_up_tma", {8, 28672, 4096, 256, 4, 0, 0, 0}, 1, 0, U8(2048)},
    {"wgrad_mixtral_down_tma", {8, 4096, 14336, 256, 4, 0, 0, 0}, 1, 0, U8(2048)},
    {"wgrad_bio_up_tma", {16, 5632, 1024, 256, 4, 0, 0, 0}, 1, 0, U16(1024)},
    {"wgrad_bio_down_tma", {16, 1024, 2816, 256, 4, 0, 0, 0}, 1, 0, U16(1024)},
    /* ping-pong (decision 49): 128 x 128 tiles per consumer warpgroup, both epilogues, empty groups */
    {"wgrad_ragged_pp", {6, 256, 512, 128, 6, 0, 0, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_regs_pp", {6, 256, 512, 128, 6, 1, 0, 1}, 0, 1, {0, 1, 200, 128, 1000, 333}},
    {"wgrad_ragged_bio_up_pp", {16, 5632, 1024, 128, 6, 0, 0, 1}, 0, 0, {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}},
    {"wgrad_mixtral_gate_up_pp", {8, 28672, 4096, 128, 6, 0, 0, 1}, 1, 0, U8(2048)},
    {"wgrad_mixtral_down_pp", {8, 4096, 14336, 128, 6, 0, 0, 1}, 1, 0, U8(2048)},
    {"wgrad_bio_up_pp", {16, 5632, 1024, 128, 6, 0, 0, 1}, 1, 0, U16(1024)},
    {"wgrad_bio_down_pp", {16, 1024, 2816, 128, 6, 0, 0, 1}, 1, 0, U16(1024)},
};
#define NKCFG ((int)(sizeof kcfgs / sizeof *kcfgs))

static void die(const char *what, const char *why)
{
    fprintf(stderr, "gemm_sm90: %s: %s\n", what, why);
    exit(2);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b)
        b[n] = 0;
    *len = (size_t)n;
    return b;
}

static int name_listed(const char *list, const char *name);

/* The dSwiGLU configurations' module: the fused kernel moec_gemm_mgrouped, the same shape with the plain
 * epilogue as moec_gemm_da, the reference moec_dsw_ref (one thread per row, dswiglu1 on every element in
 * column order, dprobs and sum |t| in double) and the fill */
static char *dsw_source(const GemmSm90Shape *s)
{
    char *extra = malloc(strlen(fill_src) + 4096);
    if (!extra)
        return NULL;
    sprintf(extra,
            "%s\n"
            "extern \"C\" __global__ void __launch_bounds__(384, 1) moec_gemm_mgrouped("
            "const __grid_constant__ moec::sm90::TmaDesc tma_a, const __grid_constant__ moec::sm90::TmaDesc tma_b, "
            "const __grid_constant__ moec::sm90::TmaDesc tma_dh, const __grid_constant__ moec::sm90::TmaDesc tma_act, "
            "float *dpart, const unsigned short *h, const float *probs, const int *offsets, int rows_cap)\n"
            "{\n"
            "    moec::sm90::GemmMGrouped<%d, %d, %d, %d, %d, %d, %d, %d>::run(tma_a, tma_b, tma_dh, nullptr, offsets, "
            "rows_cap, &tma_act, probs, 0, h, dpart);\n"
            "}\n"
            "extern \"C\" __global__ void moec_dsw_ref(unsigned short *dh, unsigned short *a, double *dp, double *dpabs,\n"
            "    const unsigned short *h, const unsigned short *da, const float *probs, long long rows)\n"
            "{\n"
            "    const long long N = %d;\n"
            "    for (long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {\n"
            "        double s = 0.0, sa = 0.0;\n"
            "        for (long long f = 0; f < N; f++) {\n"
            "            const long long gc = %d ? 256 * (f / 128) + f %% 128 : f, uc = %d ? gc + 128 : N + f;\n"
            "            const float g = __uint_as_float((unsigned)h[r * 2 * N + gc] << 16);\n"
            "            const float u = __uint_as_float((unsigned)h[r * 2 * N + uc] << 16);\n"
            "            const float d = __uint_as_float((unsigned)da[r * N + f] << 16);\n"
            "            float dg, du, o, t;\n"
            "            moec::sm90::dswiglu1(g, u, d, probs[r], dg, du, o, t);\n"
            "            dh[r * 2 * N + gc] = (unsigned short)(moec::sm90::pack_bf16x2(dg, 0.0f) & 0xffffu);\n"
            "            dh[r * 2 * N + uc] = (unsigned short)(moec::sm90::pack_bf16x2(du, 0.0f) & 0xffffu);\n"
            "            a[r * N + f] = (unsigned short)(moec::sm90::pack_bf16x2(o, 0.0f) & 0xffffu);\n"
            "            s += (double)t;\n"
            "            sa += fabs((double)t);\n"
            "        }\n"
            "        dp[r] = s;\n"
            "        dpabs[r] = sa;\n"
            "    }\n"
            "}\n",
            fill_src, s->E, s->N, s->K, s->block_n, s->stages, s->epilogue, s->trans_b, s->pingpong, s->N,
            s->epilogue == GEMM_SM90_EPI_DSWIGLU, s->epilogue == GEMM_SM90_EPI_DSWIGLU);
    GemmSm90Shape s0 = *s;
    s0.epilogue = GEMM_SM90_EPI_TMA;
    char *src = gemm_sm90_source(&s0, "moec_gemm_da", extra);
    free(extra);
    return src;
}

static int emit(const char *dir)
{
    char err[1024], path[1024];
    int bad = 0;
    const char *only = getenv("GEMM_SM90_ONLY");
    for (int i = 0; i < NCFG + NKCFG; i++) {
        const Cfg *c = i < NCFG ? &cfgs[i] : &kcfgs[i - NCFG];
        int kg = i >= NCFG;
        if (only && *only && !name_listed(only, c->name))
            continue;
        if (!(kg ? gemm_sm90_kgrouped_check_shape(&c->s, err, sizeof err) : gemm_sm90_check_shape(&c->s, err, sizeof err)))
            die(c->name, err);
        char *src = kg                                      ? gemm_sm90_kgrouped_source(&c->s, "moec_gemm_kgrouped", fill_src)
                    : gemm_sm90_epi_dswiglu(c->s.epilogue) ? dsw_source(&c->s)
                                                            : gemm_sm90_source(&c->s, "moec_gemm_mgrouped", fill_src);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_sm90.cu", "sm_90a", &out, err, sizeof err);
        if (out.log && *out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_sm90.cu");
        printf("emit %-22s NVRTC %d.%d: %s, %d warnings, %.2f s\n", c->name, out.major, out.minor,
               ok ? "ok" : err, out.nwarnings, out.seconds);
        bad += !ok || out.nwarnings != 0;
        if (ok) {
            snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(out.image, 1, out.image_size, f) != out.image_size)
                die(path, "cannot write");
            fclose(f);
            snprintf(path, sizeof path, "%s/%s.cu", dir, c->name);
            f = fopen(path, "w");
            if (!f)
                die(path, "cannot write");
            fputs(src, f);
            fclose(f);
        }
        nvrtc_output_free(&out);
        free(src);
    }
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- GPU side */
static void ck(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        char b[200];
        die(what, cudrv_error(r, b, sizeof b));
    }
}

static float bf2f(unsigned short h)
{
    unsigned u = (unsigned)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct Stats {
    long long n, bad, nan;
    double max_abs, max_rel, max_ratio, err2, ref2;
} Stats;

static void stat_add_tol(Stats *st, double got, double ref, double tol)
{
    double e = fabs(got - ref);
    st->n++;
    if (got != got) {
        st->nan++;
        st->bad++;
        return;
    }
    if (e > tol)
        st->bad++;
    if (e > st->max_abs)
        st->max_abs = e;
    if (fabs(ref) > 1e-3 && e / fabs(ref) > st->max_rel)
        st->max_rel = e / fabs(ref);
    if (tol > 0 && e / tol > st->max_ratio)
        st->max_ratio = e / tol;
    st->err2 += e * e;
    st->ref2 += ref * ref;
}

/* bf16 output: 2^-8 |ref| (rounding) + K 2^-23 sum |a b| (fp32 accumulation, any order) */
static void stat_add(Stats *st, double got, double ref, double sumabs, int K)
{
    stat_add_tol(st, got, ref, ldexp(fabs(ref), -8) + (double)K * ldexp(sumabs, -23));
}

static unsigned long long rng_state;
static unsigned long long rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

typedef struct Result {
    const char *name;
    int checked, pass, deterministic, timed;
    Stats st;
    double ms, tflops;
    int regs, local;
} Result;

static CUfunction fill_fn;
static void fill(CUdeviceptr p, unsigned long long n, unsigned seed, int shift)
{
    void *args[] = {&p, &n, &seed, &shift};
    ck(cu.cuLaunchKernel(fill_fn, 132 * 8, 1, 1, 256, 1, 1, 0, NULL, args, NULL), "fill launch");
}

/* the index of W[g] element (n, k): W [E, N, K], or [E, K, N] with trans_b */
static unsigned long long widx(const GemmSm90Shape *s, int g, int n, int k)
{
    return s->trans_b ? ((unsigned long long)g * s->K + k) * s->N + n : ((unsigned long long)g * s->N + n) * s->K + k;
}

static void run_one(const Cfg *c, const char *dir, int sms, unsigned seed, Result *res)
{
    char err[512], path[1024];
    const GemmSm90Shape *s = &c->s;
    const int E = s->E, N = s->N, K = s->K, BM = GEMM_SM90_BLOCK_M;
    memset(res, 0, sizeof *res);
    res->name = c->name;
    snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUmodule mod;
    CUfunction fn;
    ck(cu.cuModuleLoadData(&mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, mod, "moec_gemm_mgrouped"), "cuModuleGetFunction gemm");
    ck(cu.cuModuleGetFunction(&fill_fn, mod, "moec_fill"), "cuModuleGetFunction fill");
    int smem = gemm_sm90_smem_bytes(s);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute");
    cu.cuFuncGetAttribute(&res->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cu.cuFuncGetAttribute(&res->local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);

    /* groups padded to BLOCK_M; a few spare rows of capacity past the end */
    int off[33];
    long long real = 0;
    off[0] = 0;
    for (int g = 0; g < E; g++) {
        off[g + 1] = off[g] + (c->rows[g] + BM - 1) / BM * BM;
        real += c->rows[g];
    }
    long long rows_cap = off[E] + 64;
    CUdeviceptr A, W, D, OFF;
    ck(cu.cuMemAlloc(&A, (size_t)rows_cap * K * 2), "alloc A");
    ck(cu.cuMemAlloc(&W, (size_t)E * N * K * 2), "alloc W");
    ck(cu.cuMemAlloc(&D, (size_t)rows_cap * N * 2), "alloc D");
    ck(cu.cuMemAlloc(&OFF, sizeof(int) * (size_t)(E + 1)), "alloc offsets");
    ck(cu.cuMemcpyHtoD(OFF, off, sizeof(int) * (size_t)(E + 1)), "offsets HtoD");
    unsigned seed_a = seed * 2 + 1, seed_w = seed * 2 + 2;
    fill(A, (unsigned long long)rows_cap * K, seed_a, SHIFT_A); /* padding rows too: they must not matter */
    fill(W, (unsigned long long)E * N * K, seed_w, SHIFT_W);
    ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, (size_t)rows_cap * N / 2, NULL), "poison D");

    CUtensorMap ta, tb, td;
    if (!gemm_sm90_tensor_maps(s, A, rows_cap, W, D, &ta, &tb, &td, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args[] = {&ta, &tb, &td, &D, &OFF, &rc_int};
    ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
       "gemm launch");
    ck(cu.cuCtxSynchronize(), "gemm run 1");
    size_t dbytes = (size_t)rows_cap * N * 2;
    unsigned short *d1 = malloc(dbytes), *d2 = malloc(dbytes);
    if (!d1 || !d2)
        die(c->name, "out of host memory");
    ck(cu.cuMemcpyDtoH(d1, D, dbytes), "D DtoH");

    if (c->timed) {
        CUevent e0, e1;
        ck(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), "event");
        ck(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), "event");
        enum { WARM = 3, REPS = 20 };
        float t[REPS];
        for (int r = 0; r < WARM + REPS; r++) {
            ck(cu.cuEventRecord(e0, NULL), "record");
            ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
               "gemm launch");
            ck(cu.cuEventRecord(e1, NULL), "record");
            ck(cu.cuEventSynchronize(e1), "gemm timed run");
            if (r >= WARM)
                ck(cu.cuEventElapsedTime(&t[r - WARM], e0, e1), "elapsed");
        }
        qsort(t, REPS, sizeof *t, cmp_float);
        res->ms = (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
        res->tflops = 2.0 * (double)real * N * K / (res->ms * 1e-3) / 1e12;
        res->timed = 1;
        cu.cuEventDestroy(e0);
        cu.cuEventDestroy(e1);
    } else {
        ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, (size_t)rows_cap * N / 2, NULL), "poison D");
        ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
           "gemm launch");
    }
    ck(cu.cuCtxSynchronize(), "gemm last run");
    ck(cu.cuMemcpyDtoH(d2, D, dbytes), "D DtoH");
    /* bit-identical over the real rows (the padding rows are computed the same way too) */
    int same = 1;
    for (int g = 0; g < E && same; g++)
        same = memcmp(d1 + (size_t)off[g] * N, d2 + (size_t)off[g] * N, (size_t)c->rows[g] * N * 2) == 0;
    res->deterministic = same;

    /* the CPU reference */
    Stats st = {0};
    if (c->full) {
        float *a = malloc(sizeof(float) * (size_t)rows_cap * K), *w = malloc(sizeof(float) * (size_t)E * N * K);
        for (long long i = 0; i < rows_cap * K; i++)
            a[i] = bf2f(moec_hash_bf16(seed_a, (unsigned long long)i, SHIFT_A));
        for (long long i = 0; i < (long long)E * N * K; i++)
            w[i] = bf2f(moec_hash_bf16(seed_w, (unsigned long long)i, SHIFT_W));
        for (int g = 0; g < E; g++)
            for (int r = off[g]; r < off[g] + c->rows[g]; r++)
                for (int n = 0; n < N; n++) {
                    const float *ar = a + (size_t)r * K;
                    double sum = 0, sa = 0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)ar[k] * w[widx(s, g, n, k)];
                        sum += p;
                        sa += fabs(p);
                    }
                    stat_add(&st, bf2f(d1[(size_t)r * N + n]), sum, sa, K);
                }
        free(a);
        free(w);
    } else {
        /* the first and last real row of each group in full, then random elements */
        float *ar = malloc(sizeof(float) * (size_t)K), *wr = malloc(sizeof(float) * (size_t)K);
        rng_state = 0x9E3779B97F4A7C15ull ^ seed;
        int samples = 0;
        for (int g = 0; g < E; g++) {
            if (!c->rows[g])
                continue;
            int pick[2] = {off[g], off[g] + c->rows[g] - 1};
            for (int pi = 0; pi < 2; pi++) {
                int r = pick[pi];
                for (int k = 0; k < K; k++)
                    ar[k] = bf2f(moec_hash_bf16(seed_a, (unsigned long long)r * K + k, SHIFT_A));
                int ncols = N <= 1024 || c->timed == 0 ? N : 256; /* big timed shapes: 256 random columns */
                for (int j = 0; j < ncols; j++) {
                    int n = ncols == N ? j : (int)(rng_next() % (unsigned long long)N);
                    double sum = 0, sa = 0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)ar[k] * bf2f(moec_hash_bf16(seed_w, widx(s, g, n, k), SHIFT_W));
                        sum += p;
                        sa += fabs(p);
                    }
                    stat_add(&st, bf2f(d1[(size_t)r * N + n]), sum, sa, K);
                    samples++;
                }
            }
        }
        for (int i = 0; i < 2048; i++) {
            long long rr = (long long)(rng_next() % (unsigned long long)real);
            int g = 0;
            while (rr >= c->rows[g])
                rr -= c->rows[g++];
            int r = off[g] + (int)rr, n = (int)(rng_next() % (unsigned long long)N);
            double sum = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)bf2f(moec_hash_bf16(seed_a, (unsigned long long)r * K + k, SHIFT_A)) *
                           bf2f(moec_hash_bf16(seed_w, widx(s, g, n, k), SHIFT_W));
                sum += p;
                sa += fabs(p);
            }
            stat_add(&st, bf2f(d1[(size_t)r * N + n]), sum, sa, K);
        }
        free(ar);
        free(wr);
    }
    res->st = st;
    res->checked = 1;
    double normwise = st.ref2 > 0 ? sqrt(st.err2 / st.ref2) : 0;
    res->pass = st.bad == 0 && normwise <= ldexp(1.0, -8) && res->deterministic;
    printf("%-22s E %2d N %5d K %5d BN %d epilogue %d trans_b %d %s: rows %lld (padded %d), regs %d, local %d B, smem %d B\n",
           c->name, E, N, K, s->block_n, s->epilogue, s->trans_b, s->pingpong ? "ping-pong" : "cooperative", real, off[E],
           res->regs, res->local, smem);
    printf("  check %lld elements: %lld over tolerance, %lld NaN; max abs %.3g, max rel %.3g, max err/tol %.3f, "
           "normwise %.3g; two runs bit-identical: %s -> %s\n",
           st.n, st.bad, st.nan, st.max_abs, st.max_rel, st.max_ratio, normwise, same ? "yes" : "NO",
           res->pass ? "PASS" : "FAIL");
    if (res->timed)
        printf("  time: median %.4f ms of 20, %.1f TFLOP/s (2 M N K, M = %lld real rows)\n", res->ms, res->tflops, real);
    fflush(stdout);
    free(d1);
    free(d2);
    cu.cuMemFree(A);
    cu.cuMemFree(W);
    cu.cuMemFree(D);
    cu.cuMemFree(OFF);
    cu.cuModuleUnload(mod);
}

/* The dSwiGLU epilogue (see the top): fused against plain + reference, bit for bit on dh and a */
static void run_one_dsw(const Cfg *c, const char *dir, int sms, unsigned seed, Result *res)
{
    char err[512], path[1024];
    const GemmSm90Shape *s = &c->s;
    const int E = s->E, N = s->N, K = s->K, BM = GEMM_SM90_BLOCK_M, NP = N / 128;
    memset(res, 0, sizeof *res);
    res->name = c->name;
    snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUmodule mod;
    CUfunction fn, fn0, fref;
    ck(cu.cuModuleLoadData(&mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, mod, "moec_gemm_mgrouped"), "cuModuleGetFunction fused");
    ck(cu.cuModuleGetFunction(&fn0, mod, "moec_gemm_da"), "cuModuleGetFunction da");
    ck(cu.cuModuleGetFunction(&fref, mod, "moec_dsw_ref"), "cuModuleGetFunction ref");
    ck(cu.cuModuleGetFunction(&fill_fn, mod, "moec_fill"), "cuModuleGetFunction fill");
    GemmSm90Shape s0 = *s;
    s0.epilogue = GEMM_SM90_EPI_TMA;
    int smem = gemm_sm90_smem_bytes(s), smem0 = gemm_sm90_smem_bytes(&s0);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute");
    ck(cu.cuFuncSetAttribute(fn0, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem0), "cuFuncSetAttribute");
    cu.cuFuncGetAttribute(&res->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cu.cuFuncGetAttribute(&res->local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);

    int off[33];
    long long real = 0;
    off[0] = 0;
    for (int g = 0; g < E; g++) {
        off[g + 1] = off[g] + (c->rows[g] + BM - 1) / BM * BM;
        real += c->rows[g];
    }
    long long rows_cap = off[E] + 64;
    size_t nd = (size_t)rows_cap * N, nh = 2 * nd, np = (size_t)rows_cap * NP;
    CUdeviceptr A, W, D, H, P, DH, ACT, DP, DHR, ACTR, DPR, DPA, OFF;
    ck(cu.cuMemAlloc(&A, (size_t)rows_cap * K * 2), "alloc A");
    ck(cu.cuMemAlloc(&W, (size_t)E * N * K * 2), "alloc W");
    ck(cu.cuMemAlloc(&D, nd * 2), "alloc D");
    ck(cu.cuMemAlloc(&H, nh * 2), "alloc h");
    ck(cu.cuMemAlloc(&P, (size_t)rows_cap * 4), "alloc probs");
    ck(cu.cuMemAlloc(&DH, nh * 2), "alloc dh");
    ck(cu.cuMemAlloc(&ACT, nd * 2), "alloc a");
    ck(cu.cuMemAlloc(&DP, np * 4), "alloc dpart");
    ck(cu.cuMemAlloc(&DHR, nh * 2), "alloc dh ref");
    ck(cu.cuMemAlloc(&ACTR, nd * 2), "alloc a ref");
    ck(cu.cuMemAlloc(&DPR, (size_t)rows_cap * 8), "alloc dprobs ref");
    ck(cu.cuMemAlloc(&DPA, (size_t)rows_cap * 8), "alloc sum |t|");
    ck(cu.cuMemAlloc(&OFF, sizeof(int) * (size_t)(E + 1)), "alloc offsets");
    ck(cu.cuMemcpyHtoD(OFF, off, sizeof(int) * (size_t)(E + 1)), "offsets HtoD");
    unsigned seed_a = seed * 2 + 1, seed_w = seed * 2 + 2, seed_h = seed * 2 + 3;
    fill(A, (unsigned long long)rows_cap * K, seed_a, SHIFT_A);
    fill(W, (unsigned long long)E * N * K, seed_w, SHIFT_W);
    fill(H, (unsigned long long)nh, seed_h, 0);
    float *probs = malloc(sizeof(float) * (size_t)rows_cap);
    rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    for (long long r = 0; r < rows_cap; r++)
        probs[r] = (float)((double)(rng_next() >> 11) / 9007199254740992.0);
    ck(cu.cuMemcpyHtoD(P, probs, sizeof(float) * (size_t)rows_cap), "probs HtoD");
    free(probs);

    CUtensorMap ta, tb, td, tdh, tact;
    if (!gemm_sm90_tensor_maps(&s0, A, rows_cap, W, D, &ta, &tb, &td, err, sizeof err) ||
        !tma_encode_bf16_2d(&tdh, DH, (unsigned long long)rows_cap, 2ull * N, 64, err, sizeof err) ||
        !tma_encode_bf16_2d(&tact, ACT, (unsigned long long)rows_cap, (unsigned long long)N, 64, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args[] = {&ta, &tb, &tdh, &tact, &DP, &H, &P, &OFF, &rc_int};
    void *args0[] = {&ta, &tb, &td, &D, &OFF, &rc_int};
    long long rows_ll = rows_cap;
    void *argsr[] = {&DHR, &ACTR, &DPR, &DPA, &H, &D, &P, &rows_ll};
    unsigned short *dh1 = malloc(nh * 2), *dh2 = malloc(nh * 2), *dhr = malloc(nh * 2);
    unsigned short *a1 = malloc(nd * 2), *a2 = malloc(nd * 2), *ar = malloc(nd * 2);
    float *p1 = malloc(np * 4), *p2 = malloc(np * 4);
    double *dpr = malloc((size_t)rows_cap * 8), *dpa = malloc((size_t)rows_cap * 8);
    if (!dh1 || !dh2 || !dhr || !a1 || !a2 || !ar || !p1 || !p2 || !dpr || !dpa)
        die(c->name, "out of host memory");
    for (int run = 0; run < 2; run++) {
        ck(cu.cuMemsetD32Async(DH, 0xFFFFFFFFu, nh / 2, NULL), "poison dh");
        ck(cu.cuMemsetD32Async(ACT, 0xFFFFFFFFu, nd / 2, NULL), "poison a");
        ck(cu.cuMemsetD32Async(DP, 0xFFFFFFFFu, np, NULL), "poison dpart");
        ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
           "fused launch");
        ck(cu.cuCtxSynchronize(), "fused run");
        ck(cu.cuMemcpyDtoH(run ? dh2 : dh1, DH, nh * 2), "dh DtoH");
        ck(cu.cuMemcpyDtoH(run ? a2 : a1, ACT, nd * 2), "a DtoH");
        ck(cu.cuMemcpyDtoH(run ? p2 : p1, DP, np * 4), "dpart DtoH");
    }
    /* the plain da GEMM, then the reference dSwiGLU */
    ck(cu.cuLaunchKernel(fn0, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem0, NULL, args0, NULL),
       "da launch");
    ck(cu.cuLaunchKernel(fref, (unsigned)((rows_cap + 127) / 128), 1, 1, 128, 1, 1, 0, NULL, argsr, NULL), "ref launch");
    ck(cu.cuCtxSynchronize(), "da + ref run");
    ck(cu.cuMemcpyDtoH(dhr, DHR, nh * 2), "dh ref DtoH");
    ck(cu.cuMemcpyDtoH(ar, ACTR, nd * 2), "a ref DtoH");
    ck(cu.cuMemcpyDtoH(dpr, DPR, (size_t)rows_cap * 8), "dprobs ref DtoH");
    ck(cu.cuMemcpyDtoH(dpa, DPA, (size_t)rows_cap * 8), "sum |t| DtoH");

    /* over the real rows: dh and a bit for bit, dprobs (the partials summed in order) within 2^-16 sum |t| */
    long long dh_diff = 0, a_diff = 0;
    int same = 1;
    Stats st = {0};
    for (int g = 0; g < E; g++)
        for (long long r = off[g]; r < off[g] + c->rows[g]; r++) {
            for (long long j = 0; j < 2ll * N; j++)
                dh_diff += dh1[r * 2 * N + j] != dhr[r * 2 * N + j];
            for (long long j = 0; j < N; j++)
                a_diff += a1[r * N + j] != ar[r * N + j];
            double sum = 0;
            for (int k = 0; k < NP; k++)
                sum += (double)p1[r * NP + k];
            stat_add_tol(&st, (double)(float)sum, dpr[r], ldexp(dpa[r], -16));
            same = same && memcmp(dh1 + r * 2 * N, dh2 + r * 2 * N, 4ull * N) == 0 &&
                   memcmp(a1 + r * N, a2 + r * N, 2ull * N) == 0 && memcmp(p1 + r * NP, p2 + r * NP, 4ull * NP) == 0;
        }
    res->deterministic = same;
    double t_plain = 0;
    if (c->timed) {
        CUevent e0, e1;
        ck(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), "event");
        ck(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), "event");
        enum { WARM = 3, REPS = 20 };
        float t[REPS];
        for (int which = 0; which < 2; which++) {
            for (int r = 0; r < WARM + REPS; r++) {
                ck(cu.cuEventRecord(e0, NULL), "record");
                if (which == 0)
                    ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args,
                                         NULL),
                       "fused launch");
                else
                    ck(cu.cuLaunchKernel(fn0, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem0, NULL,
                                         args0, NULL),
                       "da launch");
                ck(cu.cuEventRecord(e1, NULL), "record");
                ck(cu.cuEventSynchronize(e1), "timed run");
                if (r >= WARM)
                    ck(cu.cuEventElapsedTime(&t[r - WARM], e0, e1), "elapsed");
            }
            qsort(t, REPS, sizeof *t, cmp_float);
            if (which == 0)
                res->ms = (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
            else
                t_plain = (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
        }
        res->tflops = 2.0 * (double)real * N * K / (res->ms * 1e-3) / 1e12;
        res->timed = 1;
        cu.cuEventDestroy(e0);
        cu.cuEventDestroy(e1);
    }
    res->st = st;
    res->checked = 1;
    res->pass = dh_diff == 0 && a_diff == 0 && st.bad == 0 && st.n == real && same;
    printf("%-22s E %2d N %5d K %5d BN %d epilogue %d (dSwiGLU) trans_b %d %s: rows %lld (padded %d), regs %d, local "
           "%d B, smem %d B\n",
           c->name, E, N, K, s->block_n, s->epilogue, s->trans_b,
           s->pingpong == 2 ? "ping-pong" : s->pingpong ? "ping-pong 64" : "cooperative", real, off[E], res->regs,
           res->local, smem);
    printf("  check %lld rows: dh %lld and a %lld elements differ from the plain GEMM + reference dSwiGLU (want 0); "
           "dprobs %lld over 2^-16 sum|t|, max err/tol %.3f; two runs bit-identical: %s -> %s\n",
           real, dh_diff, a_diff, st.bad, st.max_ratio, same ? "yes" : "NO", res->pass ? "PASS" : "FAIL");
    if (res->timed)
        printf("  time: median %.4f ms of 20 (plain da GEMM %.4f ms), %.1f TFLOP/s (2 M N K, M = %lld real rows)\n",
               res->ms, t_plain, res->tflops, real);
    fflush(stdout);
    free(dh1), free(dh2), free(dhr), free(a1), free(a2), free(ar), free(p1), free(p2), free(dpr), free(dpa);
    CUdeviceptr bufs[] = {A, W, D, H, P, DH, ACT, DP, DHR, ACTR, DPR, DPA, OFF};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        cu.cuMemFree(bufs[i]);
    cu.cuModuleUnload(mod);
}

/* K-grouped: dW[g] = dY[rows of g]^T X[rows of g], fp32 out. Padding rows of X are zeroed (the
 * contract), those of dY hold random finite values. Tolerance: fp32 output, so
 * |d - ref| <= 2^-22 |ref| + R 2^-23 sum_r |dy x| with R the group's (padded) row count; normwise
 * <= 1e-4. Empty groups must come out exactly 0. */
static void run_one_k(const Cfg *c, const char *dir, int sms, unsigned seed, Result *res)
{
    char err[512], path[1024];
    const GemmSm90Shape *s = &c->s;
    const int E = s->E, N = s->N, K = s->K, BM = GEMM_SM90_BLOCK_M;
    memset(res, 0, sizeof *res);
    res->name = c->name;
    snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUmodule mod;
    CUfunction fn;
    ck(cu.cuModuleLoadData(&mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, mod, "moec_gemm_kgrouped"), "cuModuleGetFunction kgrouped");
    ck(cu.cuModuleGetFunction(&fill_fn, mod, "moec_fill"), "cuModuleGetFunction fill");
    int smem = gemm_sm90_kgrouped_smem_bytes(s);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute");
    cu.cuFuncGetAttribute(&res->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cu.cuFuncGetAttribute(&res->local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    int off[33];
    long long real = 0;
    off[0] = 0;
    for (int g = 0; g < E; g++) {
        off[g + 1] = off[g] + (c->rows[g] + BM - 1) / BM * BM;
        real += c->rows[g];
    }
    long long rows_cap = off[E] + 64;
    CUdeviceptr DY, X, DW, OFF;
    size_t dwn = (size_t)E * N * K;
    ck(cu.cuMemAlloc(&DY, (size_t)rows_cap * N * 2), "alloc dY");
    ck(cu.cuMemAlloc(&X, (size_t)rows_cap * K * 2), "alloc X");
    ck(cu.cuMemAlloc(&DW, dwn * 4), "alloc dW");
    ck(cu.cuMemAlloc(&OFF, sizeof(int) * (size_t)(E + 1)), "alloc offsets");
    ck(cu.cuMemcpyHtoD(OFF, off, sizeof(int) * (size_t)(E + 1)), "offsets HtoD");
    unsigned seed_dy = seed * 2 + 1, seed_x = seed * 2 + 2;
    fill(DY, (unsigned long long)rows_cap * N, seed_dy, SHIFT_A);
    fill(X, (unsigned long long)rows_cap * K, seed_x, SHIFT_W);
    for (int g = 0; g < E; g++) /* padding rows of X: zero */
        if (off[g + 1] > off[g] + c->rows[g])
            ck(cu.cuMemsetD32Async(X + (CUdeviceptr)(off[g] + c->rows[g]) * K * 2, 0,
                                   (size_t)(off[g + 1] - off[g] - c->rows[g]) * K / 2, NULL),
               "zero padding");
    ck(cu.cuMemsetD32Async(DW, 0xFFFFFFFFu, dwn, NULL), "poison dW");
    CUtensorMap tdy, tx, tdw;
    memset(&tdw, 0, sizeof tdw);
    if (!gemm_sm90_kgrouped_tensor_maps(s, DY, X, rows_cap, &tdy, &tx, err, sizeof err))
        die(c->name, err);
    int tma_epi = s->epilogue == GEMM_SM90_KEPI_TMA;
    if (tma_epi && !gemm_sm90_kgrouped_dw_map(s, DW, &tdw, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args_regs[] = {&tdy, &tx, &DW, &OFF, &rc_int}, *args_tma[] = {&tdy, &tx, &tdw, &DW, &OFF, &rc_int};
    /* the ping-pong kernels take the TMA epilogue's parameters either way (tma_dw unread with register stores) */
    void **args = tma_epi || s->pingpong ? args_tma : args_regs;
    ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
       "kgrouped launch");
    ck(cu.cuCtxSynchronize(), "kgrouped run 1");
    float *d1 = malloc(dwn * 4), *d2 = malloc(dwn * 4);
    if (!d1 || !d2)
        die(c->name, "out of host memory");
    ck(cu.cuMemcpyDtoH(d1, DW, dwn * 4), "dW DtoH");
    if (c->timed) {
        CUevent e0, e1;
        ck(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), "event");
        ck(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), "event");
        enum { WARM = 3, REPS = 20 };
        float t[REPS];
        for (int r = 0; r < WARM + REPS; r++) {
            ck(cu.cuEventRecord(e0, NULL), "record");
            ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
               "kgrouped launch");
            ck(cu.cuEventRecord(e1, NULL), "record");
            ck(cu.cuEventSynchronize(e1), "kgrouped timed run");
            if (r >= WARM)
                ck(cu.cuEventElapsedTime(&t[r - WARM], e0, e1), "elapsed");
        }
        qsort(t, REPS, sizeof *t, cmp_float);
        res->ms = (t[REPS / 2 - 1] + t[REPS / 2]) / 2;
        res->tflops = 2.0 * (double)real * N * K / (res->ms * 1e-3) / 1e12;
        res->timed = 1;
        cu.cuEventDestroy(e0);
        cu.cuEventDestroy(e1);
    } else {
        ck(cu.cuMemsetD32Async(DW, 0xFFFFFFFFu, dwn, NULL), "poison dW");
        ck(cu.cuLaunchKernel(fn, (unsigned)sms, 1, 1, GEMM_SM90_THREADS, 1, 1, (unsigned)smem, NULL, args, NULL),
           "kgrouped launch");
    }
    ck(cu.cuCtxSynchronize(), "kgrouped last run");
    ck(cu.cuMemcpyDtoH(d2, DW, dwn * 4), "dW DtoH");
    int same = memcmp(d1, d2, dwn * 4) == 0;
    res->deterministic = same;

    Stats st = {0};
    long long zeros_bad = 0;
    rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    for (int g = 0; g < E; g++) {
        const float *dg = d1 + (size_t)g * N * K;
        if (!c->rows[g]) { /* an empty group: exactly zeros */
            for (size_t i = 0; i < (size_t)N * K; i++)
                zeros_bad += dg[i] != 0.0f;
            continue;
        }
        int R = c->rows[g], Rpad = off[g + 1] - off[g];
        /* every (n, k), or 1024 random ones per group */
        long long count = c->full ? (long long)N * K : 1024;
        for (long long e = 0; e < count; e++) {
            int n, k;
            if (c->full) {
                n = (int)(e / K);
                k = (int)(e % K);
            } else {
                n = (int)(rng_next() % (unsigned long long)N);
                k = (int)(rng_next() % (unsigned long long)K);
            }
            double sum = 0, sa = 0;
            for (int r = 0; r < R; r++) {
                long long row = off[g] + r;
                double p = (double)bf2f(moec_hash_bf16(seed_dy, (unsigned long long)(row * N + n), SHIFT_A)) *
                           bf2f(moec_hash_bf16(seed_x, (unsigned long long)(row * K + k), SHIFT_W));
                sum += p;
                sa += fabs(p);
            }
            stat_add_tol(&st, dg[(size_t)n * K + k], sum, ldexp(fabs(sum), -22) + (double)Rpad * ldexp(sa, -23));
        }
    }
    st.bad += zeros_bad;
    res->st = st;
    res->checked = 1;
    double normwise = st.ref2 > 0 ? sqrt(st.err2 / st.ref2) : 0;
    res->pass = st.bad == 0 && normwise <= 1e-4 && res->deterministic;
    printf("%-22s E %2d N %5d K %5d BN %d K-grouped (fp32 dW, %s epilogue, %s): rows %lld (padded %d), regs %d, "
           "local %d B, smem %d B\n", c->name, E, N, K, s->block_n, tma_epi ? "TMA-store" : "register-store",
           s->pingpong ? "ping-pong" : "cooperative", real, off[E], res->regs, res->local, smem);
    printf("  check %lld elements (+ empty groups' zeros: %lld wrong): %lld over tolerance, %lld NaN; max abs %.3g, "
           "max rel %.3g, max err/tol %.3f, normwise %.3g; two runs bit-identical: %s -> %s\n",
           st.n, zeros_bad, st.bad, st.nan, st.max_abs, st.max_rel, st.max_ratio, normwise, same ? "yes" : "NO",
           res->pass ? "PASS" : "FAIL");
    if (res->timed)
        printf("  time: median %.4f ms of 20, %.1f TFLOP/s (2 M N K, M = %lld real rows)\n", res->ms, res->tflops, real);
    fflush(stdout);
    free(d1);
    free(d2);
    cu.cuMemFree(DY);
    cu.cuMemFree(X);
    cu.cuMemFree(DW);
    cu.cuMemFree(OFF);
    cu.cuModuleUnload(mod);
}

/* name is one of the space-separated words of list (not merely a substring: mixtral_down is not
 * wgrad_mixtral_down) */
static int name_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(list, name); p; p = strstr(p + 1, name))
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
            return 1;
    return 0;
}

static int run(const char *dir, unsigned seed)
{
    char err[512];
    if (!cudrv_load(err, sizeof err))
        die("CUDA driver", err);
    CUdevice dev;
    CUcontext ctx;
    ck(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    ck(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    char name[128];
    int sms = 0, optin = 0, major = 0, minor = 0;
    cu.cuDeviceGetName(name, sizeof name, dev);
    cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    cu.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    printf("device %s, sm_%d%d, %d SMs, %d B shared memory per block (opt-in), driver %d; seed %u\n", name, major,
           minor, sms, optin, cu.version, seed);
    if (major != 9)
        die(name, "not a Hopper GPU (sm_90a kernels)");
    const char *only = getenv("GEMM_SM90_ONLY");
    Result res[NCFG + NKCFG];
    int n = 0, fails = 0;
    for (int i = 0; i < NCFG + NKCFG; i++) {
        const Cfg *c = i < NCFG ? &cfgs[i] : &kcfgs[i - NCFG];
        if (only && *only && !name_listed(only, c->name))
            continue;
        if (i < NCFG && gemm_sm90_epi_dswiglu(c->s.epilogue))
            run_one_dsw(c, dir, sms, seed + (unsigned)i, &res[n]);
        else if (i < NCFG)
            run_one(c, dir, sms, seed + (unsigned)i, &res[n]);
        else
            run_one_k(c, dir, sms, seed + (unsigned)i, &res[n]);
        fails += !res[n].pass;
        n++;
    }
    printf("\n%-26s %5s %5s %9s %9s %8s %6s %9s %8s\n", "config", "regs", "local", "max_rel", "normwise", "err/tol",
           "check", "ms", "TFLOP/s");
    for (int i = 0; i < n; i++) {
        double nw = res[i].st.ref2 > 0 ? sqrt(res[i].st.err2 / res[i].st.ref2) : 0;
        printf("%-26s %5d %5d %9.2e %9.2e %8.3f %6s", res[i].name, res[i].regs, res[i].local, res[i].st.max_rel, nw,
               res[i].st.max_ratio, res[i].pass ? "PASS" : "FAIL");
        if (res[i].timed)
            printf(" %9.4f %8.1f\n", res[i].ms, res[i].tflops);
        else
            printf(" %9s %8s\n", "-", "-");
        if (res[i].timed)
            fprintf(stderr, "MOEC_ANCHOR %s %.1f\n", res[i].name, res[i].tflops);
    }
    return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--emit") == 0)
        return emit(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "--run") == 0) {
        unsigned seed = argc >= 4 ? (unsigned)strtoul(argv[3], NULL, 10) : (unsigned)time(NULL);
        return run(argv[2], seed);
    }
    fprintf(stderr, "usage: gemm_sm90 --emit DIR | --run DIR [SEED]\n");
    return 2;
}
