/* test_gemm_sm90.c - CPU checks of the sm_90a grouped GEMM (codegen/gemm_sm90*):
 *   - the tile scheduler (codegen/gemm_sm90_sched.h, the same code the kernel runs), simulated for
 *     every block of persistent grids of several sizes over random ragged groups: every output
 *     tile of every group is produced exactly once, by a block of the right group, no tile past
 *     the rows of the offsets, empty groups produce nothing, every block's loop ends;
 *   - NVRTC compiles the kernel for sm_90a, warning-free, for a few shapes and both BLOCK_N
 *     (skipped without libnvrtc, except in CI or with MOEC_REQUIRE_NVRTC set);
 *   - the K-grouped (weight-gradient) order: every (group, n, k) tile exactly once, empty groups too;
 *   - the shape checks refuse what the kernel cannot do;
 *   - the ping-pong FP8 K-grouped kernel's barriers simulated over random interleavings (no stale-phase wait, no
 *     deadlock).
 * Run from the repository root. No GPU needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/gemm_sm90.h"
#include "../../runtime/gpu/tma.h"
#include "../../codegen/gemm_sm90_sched.h"
#include "check.h"
#include "nvrtc.h" /* runtime/gpu/ (codegen/ before the move): both are on the include path */


static unsigned long long rng = 0x2545F4914F6CDD1Dull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* One schedule: E groups of the given real row counts, padded to 128; grid blocks; band. */
static int check_schedule(int E, const int *rows, int num_n, int grid, int band, int rows_cap_slack)
{
    const int BM = 128;
    int *off = malloc(sizeof(int) * (size_t)(E + 1));
    off[0] = 0;
    for (int g = 0; g < E; g++)
        off[g + 1] = off[g] + (rows[g] + BM - 1) / BM * BM;
    int rows_cap = off[E] + rows_cap_slack;
    int num_m = moec_sched_num_m(off, E, rows_cap, BM);
    int bad = 0;
    if (num_m != off[E] / BM)
        bad++;
    int *seen = calloc((size_t)num_m * num_n + 1, sizeof(int));
    long long produced = 0;
    for (int b = 0; b < grid; b++) {
        long long iters = 0;
        for (int t = b; t < num_m * num_n; t += grid) { /* the kernel's persistent loop */
            if (++iters > (long long)num_m * num_n)
                return -1; /* would not terminate */
            int mb, nb;
            moec_sched_tile(t, num_m, num_n, band, &mb, &nb);
            if (mb < 0 || mb >= num_m || nb < 0 || nb >= num_n) {
                bad++;
                continue;
            }
            int g = moec_sched_group_of(off, E, mb * BM);
            /* the tile lies inside group g's padded rows, and g is not empty */
            if (g < 0 || g >= E || off[g] > mb * BM || mb * BM + BM > off[g + 1] || rows[g] == 0)
                bad++;
            /* no tile entirely past the group's real rows */
            if (mb * BM >= off[g] + rows[g])
                bad++;
            seen[mb * num_n + nb]++;
            produced++;
        }
    }
    /* exactly once each; the tiles of each group are the ceil(rows / 128) * num_n expected */
    long long expected = 0;
    for (int g = 0; g < E; g++)
        expected += (long long)(rows[g] + BM - 1) / BM * num_n;
    for (int i = 0; i < num_m * num_n; i++)
        bad += seen[i] != 1;
    bad += produced != expected;
    free(seen);
    free(off);
    return bad;
}

static void test_scheduler(void)
{
    int cases = 0, bad_cases = 0, loops = 0;
    const int grids[] = {1, 7, 132, 1000};
    const int bands[] = {1, 3, 16};
    for (int it = 0; it < 300; it++) {
        int E = 1 + (int)rnd(40);
        int rows[64];
        for (int g = 0; g < E; g++) {
            unsigned kind = rnd(6);
            rows[g] = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? 128 * (1 + (int)rnd(4)) : (int)rnd(1500);
        }
        int num_n = 1 + (int)rnd(9);
        for (int gi = 0; gi < 4; gi++)
            for (int bi = 0; bi < 3; bi++) {
                int r = check_schedule(E, rows, num_n, grids[gi], bands[bi], (int)rnd(3) * 64);
                cases++;
                bad_cases += r != 0;
                loops += r < 0;
            }
    }
    CHECK(bad_cases == 0, "%d of %d random ragged schedules wrong (%d did not terminate)", bad_cases, cases, loops);

    /* all groups empty: no tile at all; one group of every edge size */
    int zeros[5] = {0, 0, 0, 0, 0};
    CHECK(check_schedule(5, zeros, 3, 132, 16, 0) == 0, "all-empty groups");
    int edge[6] = {0, 1, 127, 128, 129, 4096};
    CHECK(check_schedule(6, edge, 4, 132, 16, 0) == 0, "edge group sizes");
    /* offsets past the row capacity are clamped: no tile beyond rows_cap */
    int off[3] = {0, 256, 1024};
    CHECK(moec_sched_num_m(off, 2, 512, 128) == 4, "num_m clamped to rows_cap: %d", moec_sched_num_m(off, 2, 512, 128));
    /* group_of skips empty groups */
    int off2[6] = {0, 0, 128, 128, 128, 384};
    CHECK(moec_sched_group_of(off2, 5, 0) == 1 && moec_sched_group_of(off2, 5, 127) == 1 &&
              moec_sched_group_of(off2, 5, 128) == 4 && moec_sched_group_of(off2, 5, 383) == 4,
          "group_of with empty groups");
}

/* the K-grouped order: every (group, n block, k block) exactly once over any grid, empty groups
 * included (their tiles are written as zeros) */
static void test_kscheduler(void)
{
    int bad = 0;
    const int grids[] = {1, 5, 132, 4000};
    for (int it = 0; it < 200; it++) {
        int E = 1 + (int)rnd(20), nn = 1 + (int)rnd(12), nk = 1 + (int)rnd(12), band = 1 + (int)rnd(16);
        int tiles = E * nn * nk;
        int *seen = calloc((size_t)tiles, sizeof(int));
        for (int gi = 0; gi < 4; gi++) {
            memset(seen, 0, sizeof(int) * (size_t)tiles);
            for (int b = 0; b < grids[gi]; b++)
                for (int t = b; t < tiles; t += grids[gi]) {
                    int g, n, k;
                    moec_sched_ktile(t, nn, nk, band, &g, &n, &k);
                    if (g < 0 || g >= E || n < 0 || n >= nn || k < 0 || k >= nk) {
                        bad++;
                        continue;
                    }
                    seen[(g * nn + n) * nk + k]++;
                }
            for (int i = 0; i < tiles; i++)
                bad += seen[i] != 1;
        }
        free(seen);
    }
    CHECK(bad == 0, "K-grouped schedule: %d tiles not produced exactly once", bad);
}

static void test_shapes(void)
{
    char err[256];
    GemmSm90Shape ok = {8, 4096, 14336, 256, 4, 0, 0, 0};
    CHECK(gemm_sm90_check_shape(&ok, err, sizeof err), "Mixtral down is a valid shape: %s", err);
    CHECK(gemm_sm90_smem_bytes(&ok) == 1024 + 4 * 49152 + 32768 + 64, "shared memory %d", gemm_sm90_smem_bytes(&ok));
    GemmSm90Shape badk = {8, 4096, 100, 256, 4, 0, 0, 0}, badn = {8, 4000, 128, 256, 4, 0, 0, 0}, badst = {8, 4096, 128, 256, 5, 0, 0, 0},
                  badbn = {8, 4096, 128, 64, 4, 0, 0, 0};
    CHECK(!gemm_sm90_check_shape(&badk, err, sizeof err) && strstr(err, "multiple of 64"), "K %% 64: %s", err);
    CHECK(!gemm_sm90_check_shape(&badn, err, sizeof err) && strstr(err, "BLOCK_N"), "N %% BLOCK_N: %s", err);
    CHECK(!gemm_sm90_check_shape(&badst, err, sizeof err) && strstr(err, "shared memory"), "5 stages: %s", err);
    CHECK(!gemm_sm90_check_shape(&badbn, err, sizeof err), "BLOCK_N 64 refused");
    GemmSm90Shape tb = {8, 4096, 28672, 256, 4, 0, 1, 0}, badtb = {8, 4096, 28672, 256, 4, 0, 2, 0},
                  bigk = {1024, 4096, 1 << 21, 256, 4, 0, 1, 0};
    CHECK(gemm_sm90_check_shape(&tb, err, sizeof err), "trans_b Mixtral dxs is a valid shape: %s", err);
    GemmSm90Shape glu128 = {16, 5632, 1024, 128, 6, 3, 0, 0};
    CHECK(!gemm_sm90_check_shape(&glu128, err, sizeof err) && strstr(err, "SwiGLU"), "GLU with BLOCK_N 128: %s", err);
    CHECK(!gemm_sm90_check_shape(&badtb, err, sizeof err) && strstr(err, "trans_b"), "trans_b 2: %s", err);
    CHECK(!gemm_sm90_check_shape(&bigk, err, sizeof err) && strstr(err, "E * K"), "E * K rows: %s", err);
    /* ping-pong with 64-row tiles (pingpong 1, decision 49): 4 stages of BLOCK_N 256 (40 KB each) and 8 of 128
     * fit beside the staging buffers, 5 of 256 do not */
    GemmSm90Shape pp = {8, 28672, 4096, 256, 4, 3, 0, 1}, pp128 = {16, 1024, 2816, 128, 8, 0, 1, 1},
                  pp5 = {8, 28672, 4096, 256, 5, 0, 0, 1}, ppbad = {8, 28672, 4096, 256, 4, 0, 0, 3};
    CHECK(gemm_sm90_block_m(&pp) == 64 && gemm_sm90_block_m(&ok) == 128, "BLOCK_M 64 for pingpong 1, 128 else");
    CHECK(gemm_sm90_check_shape(&pp, err, sizeof err) && gemm_sm90_smem_bytes(&pp) == 1024 + 4 * 40960 + 32768 + 64,
          "ping-pong gate_up with the GLU epilogue: %d bytes (%s)", gemm_sm90_smem_bytes(&pp), err);
    CHECK(gemm_sm90_check_shape(&pp128, err, sizeof err), "ping-pong BLOCK_N 128, 8 stages: %s", err);
    CHECK(!gemm_sm90_check_shape(&pp5, err, sizeof err) && strstr(err, "shared memory"), "ping-pong 5 stages: %s", err);
    CHECK(!gemm_sm90_check_shape(&ppbad, err, sizeof err) && strstr(err, "pingpong"), "pingpong 3: %s", err);
    /* ping-pong with 128 x 128 tiles (pingpong 2): BLOCK_N 128, 6 stages; the SwiGLU epilogue at BLOCK_N 128 with
     * W's box of 64 rows (gate and up boxes), the TMA epilogue with block_n; not BLOCK_N 256, not the register
     * epilogues */
    GemmSm90Shape q = {8, 28672, 4096, 128, 6, 3, 0, 2}, qt = {8, 4096, 14336, 128, 6, 0, 0, 2},
                  q256 = {8, 28672, 4096, 256, 4, 0, 0, 2}, qreg = {8, 28672, 4096, 128, 6, 1, 0, 2},
                  qglu = {8, 28544, 4096, 128, 6, 3, 0, 2};
    CHECK(gemm_sm90_check_shape(&q, err, sizeof err) && gemm_sm90_block_m(&q) == 128 && gemm_sm90_b_box_rows(&q) == 64 &&
              gemm_sm90_smem_bytes(&q) == 1024 + 6 * 32768 + 32768 + 96,
          "pingpong 2 gate_up with the SwiGLU epilogue: %d bytes, box %d (%s)", gemm_sm90_smem_bytes(&q),
          gemm_sm90_b_box_rows(&q), err);
    CHECK(gemm_sm90_check_shape(&qt, err, sizeof err) && gemm_sm90_b_box_rows(&qt) == 128, "pingpong 2 down: %s", err);
    CHECK(!gemm_sm90_check_shape(&q256, err, sizeof err) && strstr(err, "pingpong 2"), "pingpong 2 BLOCK_N 256: %s", err);
    CHECK(!gemm_sm90_check_shape(&qreg, err, sizeof err) && strstr(err, "pingpong 2"), "pingpong 2 epilogue 1: %s", err);
    CHECK(!gemm_sm90_check_shape(&qglu, err, sizeof err) && strstr(err, "multiple of 256"), "GLU N %% 256: %s", err);
    /* K-grouped: the TMA-store epilogue's 4 x 8 KB of staging fit beside 4 stages of BLOCK_N 256 and 6 of 128 */
    GemmSm90Shape kt = {8, 28672, 4096, 256, 4, 0, 0, 0}, kr = {8, 28672, 4096, 256, 4, 1, 0, 0},
                  kt128 = {16, 1024, 2816, 128, 6, 0, 0, 0}, kbad = {8, 28672, 4096, 256, 4, 2, 0, 0},
                  kbig = {1 << 12, 1 << 20, 128, 128, 6, 0, 0, 0};
    CHECK(gemm_sm90_kgrouped_check_shape(&kt, err, sizeof err) &&
              gemm_sm90_kgrouped_smem_bytes(&kt) == 1024 + 4 * 49152 + 32768 + 64,
          "K-grouped TMA epilogue, BLOCK_N 256, 4 stages: %d bytes", gemm_sm90_kgrouped_smem_bytes(&kt));
    CHECK(gemm_sm90_kgrouped_check_shape(&kr, err, sizeof err) &&
              gemm_sm90_kgrouped_smem_bytes(&kr) == 1024 + 4 * 49152 + 64,
          "K-grouped register epilogue: %d bytes", gemm_sm90_kgrouped_smem_bytes(&kr));
    CHECK(gemm_sm90_kgrouped_check_shape(&kt128, err, sizeof err), "K-grouped TMA epilogue, BLOCK_N 128: %s", err);
    CHECK(!gemm_sm90_kgrouped_check_shape(&kbad, err, sizeof err) && strstr(err, "epilogue"), "K-grouped epilogue 2: %s",
          err);
    CHECK(!gemm_sm90_kgrouped_check_shape(&kbig, err, sizeof err) && strstr(err, "E * N"), "E * N rows of dW: %s", err);
    GemmSm90Shape kpp = {8, 28672, 4096, 128, 6, 0, 0, 1}, kpp256 = {8, 28672, 4096, 256, 4, 0, 0, 1},
                  kpp2 = {8, 28672, 4096, 128, 6, 0, 0, 2};
    CHECK(gemm_sm90_kgrouped_check_shape(&kpp, err, sizeof err), "K-grouped ping-pong: %s", err);
    CHECK(!gemm_sm90_kgrouped_check_shape(&kpp256, err, sizeof err) && strstr(err, "pingpong"), "K-grouped ping-pong "
          "BLOCK_N 256: %s", err);
    CHECK(!gemm_sm90_kgrouped_check_shape(&kpp2, err, sizeof err) && strstr(err, "pingpong"), "K-grouped pingpong 2: %s",
          err);
}

static void test_nvrtc_compile(void)
{
    char err[1024];
    if (!nvrtc_load(err, sizeof err)) {
        const char *ci = getenv("CI"), *req = getenv("MOEC_REQUIRE_NVRTC");
        if ((ci && strcmp(ci, "true") == 0) || (req && *req)) {
            CHECK(0, "NVRTC is required here: %s", err);
            return;
        }
        printf("test_gemm_sm90: NVRTC not available, its checks skipped: %s\n", err);
        return;
    }
    const GemmSm90Shape shapes[] = {
        {8, 28672, 4096, 256, 4, 0, 0, 0}, /* Mixtral gate_up */
        {16, 1024, 2816, 128, 6, 0, 0, 0}, /* bio down, BLOCK_N 128 */
        {5, 512, 256, 256, 4, 0, 0, 0},    /* the GPU check's ragged shape */
        {8, 4096, 14336, 256, 4, 1, 0, 0}, /* Mixtral down, 16-byte-store epilogue */
        {1, 8192, 8192, 128, 6, 2, 0, 0},  /* dense, 4-byte stores */
        {8, 14336, 4096, 256, 4, 0, 1, 0}, /* trans_b: Mixtral da = dy w_down */
        {16, 1024, 5632, 128, 6, 0, 1, 0}, /* trans_b: bio dxs = dh w_gate_up, BLOCK_N 128 */
        {16, 5632, 1024, 256, 4, 3, 0, 0}, /* the SwiGLU epilogue: bio gate_up */
        /* ping-pong (decision 49), 128 x 128 tiles: the SwiGLU and TMA epilogues, both B layouts */
        {8, 28672, 4096, 128, 6, 3, 0, 2}, /* Mixtral gate_up, SwiGLU */
        {16, 5632, 1024, 128, 6, 3, 0, 2}, /* bio gate_up, SwiGLU */
        {8, 4096, 14336, 128, 6, 0, 0, 2}, /* Mixtral down */
        {8, 4096, 28672, 128, 6, 0, 1, 2}, /* Mixtral dxs, trans_b */
        /* ping-pong, 64-row tiles: every epilogue, both B layouts, both BLOCK_N */
        {8, 28672, 4096, 256, 4, 3, 0, 1}, /* Mixtral gate_up, SwiGLU */
        {8, 4096, 14336, 256, 4, 0, 0, 1}, /* Mixtral down */
        {8, 14336, 4096, 256, 4, 0, 1, 1}, /* Mixtral da, trans_b */
        {16, 1024, 5632, 128, 8, 0, 1, 1}, /* bio dxs, trans_b, BLOCK_N 128 */
        {5, 512, 256, 256, 4, 1, 0, 1},    /* 16-byte stores */
        {1, 1024, 1024, 128, 8, 2, 0, 1},  /* 4-byte stores */
        {1, 1024, 1024, 256, 4, 4, 0, 1},  /* fp32 out */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        char *src = gemm_sm90_source(&shapes[i], "moec_gemm_mgrouped", NULL);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_sm90.cu", "sm_90a", &out, err, sizeof err);
        if (!ok && out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_sm90.cu");
        CHECK(ok && out.image_size > 0 && out.nwarnings == 0 && out.nerrors == 0,
              "E %d N %d K %d BLOCK_N %d compiles for sm_90a warning-free: %s (%d warnings)", shapes[i].E, shapes[i].N,
              shapes[i].K, shapes[i].block_n, ok ? "" : err, out.nwarnings);
        if (ok && out.log && *out.log)
            fprintf(stderr, "%s\n", out.log);
        nvrtc_output_free(&out);
        free(src);
    }
    const GemmSm90Shape kshapes[] = {
        {8, 28672, 4096, 256, 4, 1, 0, 0}, /* Mixtral gate_up weight gradient, stores from registers */
        {16, 1024, 2816, 128, 6, 1, 0, 0}, /* bio down, BLOCK_N 128 */
        {8, 28672, 4096, 256, 4, 0, 0, 0}, /* Mixtral gate_up, TMA-store epilogue */
        {16, 1024, 2816, 128, 6, 0, 0, 0}, /* bio down, BLOCK_N 128, TMA stores */
        {8, 28672, 4096, 128, 6, 0, 0, 1}, /* ping-pong (decision 49), TMA stores */
        {16, 1024, 2816, 128, 6, 1, 0, 1}, /* ping-pong, stores from registers */
    };
    for (size_t i = 0; i < sizeof kshapes / sizeof *kshapes; i++) {
        CHECK(gemm_sm90_kgrouped_check_shape(&kshapes[i], err, sizeof err), "K-grouped shape: %s", err);
        char *src = gemm_sm90_kgrouped_source(&kshapes[i], "moec_gemm_kgrouped", NULL);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_sm90.cu", "sm_90a", &out, err, sizeof err);
        if (!ok && out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_sm90.cu");
        CHECK(ok && out.image_size > 0 && out.nwarnings == 0 && out.nerrors == 0,
              "K-grouped E %d N %d K %d BLOCK_N %d compiles for sm_90a warning-free: %s (%d warnings)", kshapes[i].E,
              kshapes[i].N, kshapes[i].K, kshapes[i].block_n, ok ? "" : err, out.nwarnings);
        if (ok && out.log && *out.log)
            fprintf(stderr, "%s\n", out.log);
        nvrtc_output_free(&out);
        free(src);
    }
}

/* ---- the FP8 kernel (GemmFp8MGrouped): its shapes, its scale layouts, its compile */
static void test_fp8_shapes(void)
{
    char err[256];
    GemmFp8Shape blk = {8, 28672, 4096, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 0},
                 mx = {8, 4096, 14336, 5, GEMM_FP8_MX, GEMM_FP8_OUT_BF16, 0, 0},
                 blk7 = {8, 28672, 4096, 7, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 0},
                 mx6 = {8, 28672, 4096, 6, GEMM_FP8_MX, GEMM_FP8_OUT_BF16, 0, 0},
                 f32 = {8, 28672, 4096, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 0},
                 badk = {8, 4096, 1088, 4, GEMM_FP8_BLOCK, 0, 0, 0}, badn = {8, 4160, 4096, 4, GEMM_FP8_BLOCK, 0, 0, 0},
                 badm = {8, 4096, 4096, 4, 2, 0, 0, 0}, bado = {8, 4096, 4096, 4, 0, 2, 0, 0};
    CHECK(gemm_fp8_check_shape(&blk, err, sizeof err) &&
              gemm_fp8_smem_bytes(&blk) == 1024 + 6 * (32768 + 128) + 32768 + 6 * 24,
          "fp8-block Mixtral gate_up, 6 stages, bf16 out: %d bytes %s", gemm_fp8_smem_bytes(&blk), err);
    CHECK(gemm_fp8_check_shape(&mx, err, sizeof err) &&
              gemm_fp8_smem_bytes(&mx) == 1024 + 5 * (32768 + 512 + 512 + 4096) + 32768 + 5 * 24,
          "MXFP8 Mixtral down, 5 stages: %d bytes %s", gemm_fp8_smem_bytes(&mx), err);
    CHECK(!gemm_fp8_check_shape(&blk7, err, sizeof err) && strstr(err, "shared memory"), "7 stages + bf16 staging: %s", err);
    CHECK(!gemm_fp8_check_shape(&mx6, err, sizeof err) && strstr(err, "shared memory"), "MXFP8, 6 stages: %s", err);
    CHECK(gemm_fp8_check_shape(&f32, err, sizeof err), "6 stages, fp32 out: %s", err);
    CHECK(!gemm_fp8_check_shape(&badk, err, sizeof err) && strstr(err, "K 1088"), "K %% 128: %s", err);
    GemmFp8Shape oddk = {8, 4096, 1152, 4, GEMM_FP8_BLOCK, 0, 0, 0};
    CHECK(!gemm_fp8_check_shape(&oddk, err, sizeof err) && strstr(err, "256"), "an odd number of K blocks: %s", err);
    CHECK(!gemm_fp8_check_shape(&badn, err, sizeof err) && strstr(err, "N 4160"), "N %% 128: %s", err);
    CHECK(!gemm_fp8_check_shape(&badm, err, sizeof err) && strstr(err, "mode"), "mode 2: %s", err);
    CHECK(!gemm_fp8_check_shape(&bado, err, sizeof err) && strstr(err, "out"), "out 2: %s", err);
    /* clusters of two blocks pair the N tiles (decision 71) */
    GemmFp8Shape c2 = blk, c2odd = {8, 4224, 4096, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 2}, c3 = blk;
    c2.cluster = 2;
    c3.cluster = 3;
    CHECK(gemm_fp8_check_shape(&c2, err, sizeof err) && gemm_fp8_smem_bytes(&c2) == gemm_fp8_smem_bytes(&blk),
          "cluster 2, Mixtral gate_up: %s", err);
    CHECK(!gemm_fp8_check_shape(&c2odd, err, sizeof err) && strstr(err, "N 4224") && strstr(err, "256"),
          "cluster 2, 33 N tiles: %s", err);
    CHECK(!gemm_fp8_check_shape(&c3, err, sizeof err) && strstr(err, "cluster"), "cluster 3: %s", err);
}

/* The scale layouts (gemm_sm90_sched.h) as the kernel uses them: each index function is a bijection
 * onto [0, size); the producer's per-stage bulk copy of an M block's A scales (and, MXFP8, an N
 * block's W scales) starts at the index of the block's first row/column for the stage's K block,
 * covers 128 (fp8-block) or 512 (MXFP8) contiguous bytes in which row (column) x of the block sits at
 * byte x (fp8-block) or 4 x + k % 4 (MXFP8's k-th 32-wide block: the decoder's order), and starts
 * 16-byte aligned when rows_cap % 16 == 0;
 * fp8-block's weight scale of K block kb is the tile's first (kb 0) plus kb (the consumers' sbp + p). */
static void test_fp8_scale_layout(void)
{
    int bad = 0;
    for (int it = 0; it < 40; it++) {
        int E = 1 + (int)rnd(5), N = 128 * (1 + (int)rnd(4)), K = 128 * (1 + (int)rnd(4));
        long long rows_cap = 128 * (1 + (int)rnd(5)) + 16 * (int)rnd(10); /* rows_cap % 16 == 0 */
        int K128 = K / 128, K32 = K / 32;
        /* fp8-block A: [K128][rows_cap] E8M0 bytes */
        long long na = (long long)K128 * rows_cap, nb = (long long)E * (N / 128) * K128;
        char *seen = calloc((size_t)(na > nb ? na : nb) + 1, 1);
        for (long long r = 0; r < rows_cap; r++)
            for (int kb = 0; kb < K128; kb++) {
                long long i = moec_fp8_block_sa_index(r, kb, rows_cap);
                bad += i < 0 || i >= na || seen[i]++;
                /* the stage copy of M block r / 128: 128 bytes from its first row, 16-byte aligned */
                if (r / 128 * 128 + 128 <= rows_cap)
                    bad += i != moec_fp8_block_sa_index(r / 128 * 128, kb, rows_cap) + r % 128;
                bad += r % 128 == 0 && i % 16 != 0;
            }
        memset(seen, 0, (size_t)nb + 1);
        for (int g = 0; g < E; g++)
            for (int n = 0; n < N; n++)
                for (int kb = 0; kb < K128; kb++) {
                    long long i = moec_fp8_block_sb_index(g, n, kb, N, K);
                    bad += i < 0 || i >= nb || i != moec_fp8_block_sb_index(g, n / 128 * 128, 0, N, K) + kb;
                    if (n % 128 == 0)
                        bad += i >= 0 && i < nb && seen[i]++; /* one scalar per (g, n block, k block) */
                }
        free(seen);
        /* MXFP8: bytes, A [K128][rows_cap][4], W [E][K128][N][4] */
        long long nma = (long long)K32 * rows_cap, nmb = (long long)E * N * K32;
        seen = calloc((size_t)(nma > nmb ? nma : nmb) + 1, 1);
        for (long long r = 0; r < rows_cap; r++)
            for (int k = 0; k < K32; k++) {
                long long i = moec_mxfp8_sa_index(r, k, rows_cap);
                bad += i < 0 || i >= nma || seen[i]++;
                if (r / 128 * 128 + 128 <= rows_cap)
                    bad += i != moec_mxfp8_sa_index(r / 128 * 128, k / 4 * 4, rows_cap) + 4 * (r % 128) + k % 4;
                bad += r % 128 == 0 && k % 4 == 0 && i % 16 != 0;
            }
        memset(seen, 0, (size_t)nmb + 1);
        for (int g = 0; g < E; g++)
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K32; k++) {
                    long long i = moec_mxfp8_sb_index(g, n, k, N, K);
                    bad += i < 0 || i >= nmb || seen[i]++;
                    bad += i != moec_mxfp8_sb_index(g, n / 128 * 128, k / 4 * 4, N, K) + 4 * (n % 128) + k % 4;
                    bad += n % 128 == 0 && k % 4 == 0 && i % 16 != 0;
                }
        free(seen);
    }
    CHECK(bad == 0, "FP8 scale layouts: %d index faults", bad);
}

static void test_fp8_compile(void)
{
    char err[1024];
    if (!nvrtc_load(err, sizeof err))
        return; /* test_nvrtc_compile said why (and failed where NVRTC is required) */
    const GemmFp8Shape shapes[] = {
        {8, 28672, 4096, 5, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 0}, /* Mixtral gate_up, fp8-block */
        {8, 4096, 14336, 5, GEMM_FP8_MX, GEMM_FP8_OUT_BF16, 0, 0},    /* Mixtral down, MXFP8 */
        {6, 512, 768, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 0},     /* the GPU check's ragged shape */
        {6, 512, 768, 5, GEMM_FP8_MX, GEMM_FP8_OUT_F32, 0, 0},
        {8, 4096, 28672, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 0, 2}, /* Mixtral dxs in clusters of two (decision 71) */
        {6, 512, 768, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 2},
        {6, 512, 768, 5, GEMM_FP8_MX, GEMM_FP8_OUT_BF16, 0, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const GemmFp8Shape *s = &shapes[i];
        CHECK(gemm_fp8_check_shape(s, err, sizeof err), "FP8 shape %zu: %s", i, err);
        /* MXFP8 in both promotion schedules (decision 51: the pipelined one is the default) */
        for (int sched = 0; sched < (s->mode == GEMM_FP8_MX ? 2 : 1); sched++) {
            char *src = sched ? gemm_fp8_source_sched(s, GEMM_FP8_SCHED_PAIRS, "moec_gemm_fp8", NULL)
                              : gemm_fp8_source(s, "moec_gemm_fp8", NULL);
            NvrtcOutput out;
            int ok = nvrtc_compile(src, "gemm_fp8.cu", "sm_90a", &out, err, sizeof err);
            if (!ok && out.log)
                nvrtc_print_log(stderr, out.log, src, "gemm_fp8.cu");
            CHECK(ok && out.image_size > 0 && out.nwarnings == 0 && out.nerrors == 0,
                  "FP8 E %d N %d K %d mode %d out %d cluster %d compiles for sm_90a warning-free: %s (%d warnings)", s->E,
                  s->N, s->K, s->mode, s->out, s->cluster, ok ? "" : err, out.nwarnings);
            /* ptxas says so (C7514 / C7515, an info line, not a warning) when it serialises the wgmma:
             * the two temporary accumulator sets must stay apart */
            CHECK(!(out.log && strstr(out.log, "serialized")), "FP8 mode %d out %d sched %d: ptxas serialised the wgmma:\n%s",
                  s->mode, s->out, sched, out.log ? out.log : "");
            if (ok && out.log && *out.log)
                fprintf(stderr, "%s\n", out.log);
            nvrtc_output_free(&out);
            free(src);
        }
    }
}

/* ---- the ping-pong FP8 K-grouped kernel's synchronisation (GemmFp8KGrouped PINGPONG 1, decision 56), simulated:
 * one block's agents as the kernel runs them, one step at a time in a random order: the producer (waits `empty`,
 * issues a stage's copies), the copies landing (any pending one, out of order: `full` completes), the decoder warp
 * (waits `full`, arrives on `ready`), and the two consumer warpgroups (the kernel's loop: ist / iph advanced over
 * the other's tiles; named barrier 3 + c before a tile's first issue; an issue waits `full` and `ready`, at most
 * two stages issued and not yet promoted; a promotion arrives on `empty`; after a tile's last issue, or at once
 * for an empty tile, the arrive for the other warpgroup's next tile). mbarrier parity waits as the hardware
 * answers them (a wait for parity P passes once the completed phases' count has parity != P), so a wait that
 * passes on a phase two behind the one meant is seen: each passing wait must find its stage landed (or decoded)
 * with the ring number the waiter expects in the slot. Also: no deadlock, every stage issued once by the right
 * warpgroup in ring order, a named barrier never holds two arrivals. */
enum { SIM_MAX_TILES = 16, SIM_MAX_STAGES = SIM_MAX_TILES * 8 };
static int sim_wait(int completed, int parity) { return (completed & 1) != parity; }

static int sim_pingpong_once(int S, int T, const int *steps, unsigned *why)
{
    int base[SIM_MAX_TILES + 1], total = 0;
    for (int j = 0; j < T; j++) {
        base[j] = total;
        total += steps[j];
    }
    base[T] = total;
    int full_done[8] = {0}, empty_done[8] = {0}, ready_done[8] = {0}, slot_ring[8], slot_decoded[8];
    for (int s = 0; s < 8; s++)
        slot_ring[s] = slot_decoded[s] = -1;
    int pending[SIM_MAX_STAGES], npending = 0; /* stages issued by the producer, not landed */
    int prod = 0, dec = 0;                      /* the next ring number of the producer, of the decoder */
    int nbar[2] = {0, 0};                       /* arrivals waiting at named barrier 3 + c */
    int issued_by[SIM_MAX_STAGES];
    for (int n = 0; n < total; n++)
        issued_by[n] = -1;
    struct Wg {
        int j, ist, iph, rst, left, inflight, state, done; /* state 0: tile start, 1: issuing, 2: draining */
    } wg[2] = {{0}, {0}};
    wg[1].j = 0;
    for (long long step = 0; step < 1000000; step++) {
        int can[5], ncan = 0;
        /* 0 producer, 1 a landing, 2 decoder, 3 + c warpgroup c */
        if (prod < total && sim_wait(empty_done[prod % S], ((prod / S) & 1) ^ 1))
            can[ncan++] = 0;
        if (npending)
            can[ncan++] = 1;
        if (dec < total && sim_wait(full_done[dec % S], (dec / S) & 1))
            can[ncan++] = 2;
        for (int c = 0; c < 2; c++) {
            struct Wg *w = &wg[c];
            if (w->done)
                continue;
            int ok = 0;
            if (w->state == 0)
                ok = w->j >= T || (w->j & 1) != c || w->j == 0 || nbar[c] > 0;
            else if (w->state == 1)
                ok = w->inflight > 0 || (w->left > 0 && sim_wait(full_done[w->ist], w->iph) &&
                                         sim_wait(ready_done[w->ist], w->iph));
            else
                ok = 1;
            if (ok)
                can[ncan++] = 3 + c;
        }
        if (wg[0].done && wg[1].done)
            return prod == total && dec == total && npending == 0 ? 0 : (*why = 1, 1);
        if (!ncan)
            return *why = 2, 1; /* deadlock */
        const int a = can[rnd((unsigned)ncan)];
        if (a == 0) {
            pending[npending++] = prod++;
        } else if (a == 1) {
            const int i = (int)rnd((unsigned)npending), n = pending[i];
            pending[i] = pending[--npending];
            if (slot_ring[n % S] != n - S && n >= S)
                return *why = 3, 1; /* a slot refilled before its previous stage was consumed */
            slot_ring[n % S] = n;
            full_done[n % S]++;
        } else if (a == 2) {
            if (slot_ring[dec % S] != dec)
                return *why = 4, 1; /* the decoder's wait passed on a stale phase */
            slot_decoded[dec % S] = dec;
            ready_done[dec % S]++;
            dec++;
        } else {
            const int c = a - 3;
            struct Wg *w = &wg[c];
            const int j = w->j;
            if (j >= T) {
                w->done = 1;
                continue;
            }
            const int next = j + 1 < T;
            if (w->state == 0) {
                if ((j & 1) != c) { /* the other's tile: advance the ring position */
                    const int q = w->ist + steps[j];
                    w->ist = q % S;
                    w->iph ^= (q / S) & 1;
                    w->j++;
                    continue;
                }
                if (j > 0)
                    nbar[c]--;
                w->rst = w->ist;
                w->left = steps[j];
                w->state = 1;
                if (steps[j] == 0) {
                    if (next && ++nbar[c ^ 1] > 1)
                        return *why = 5, 1;
                    w->state = 2;
                }
            } else if (w->state == 1) {
                /* promote the oldest in flight, or issue the next (at most two in flight, as the pipelined bodies) */
                const int can_issue = w->left > 0 && w->inflight < 2 && sim_wait(full_done[w->ist], w->iph) &&
                                      sim_wait(ready_done[w->ist], w->iph);
                if (w->inflight > 0 && (!can_issue || rnd(2))) {
                    empty_done[w->rst]++;
                    w->rst = (w->rst + 1) % S;
                    w->inflight--;
                    if (w->left == 0 && w->inflight == 0)
                        w->state = 2;
                } else {
                    const int n = base[j] + steps[j] - w->left;
                    if (w->ist != n % S || slot_ring[w->ist] != n || slot_decoded[w->ist] != n || issued_by[n] != -1)
                        return *why = 6, 1; /* a wait passed on the wrong stage */
                    issued_by[n] = c;
                    if (++w->ist == S) {
                        w->ist = 0;
                        w->iph ^= 1;
                    }
                    w->inflight++;
                    if (--w->left == 0 && next && ++nbar[c ^ 1] > 1)
                        return *why = 5, 1;
                }
            } else { /* the epilogue, then the next tile */
                w->state = 0;
                w->j++;
            }
        }
    }
    return *why = 7, 1;
}

static void test_fp8k_pingpong_protocol(void)
{
    int bad = 0, runs = 0;
    unsigned why = 0, first_why = 0;
    for (int it = 0; it < 3000; it++) {
        const int S = 2 + (int)rnd(7), T = 1 + (int)rnd(SIM_MAX_TILES);
        int steps[SIM_MAX_TILES];
        for (int j = 0; j < T; j++)
            steps[j] = rnd(4) == 0 ? 0 : (int)rnd(9);
        for (int rep = 0; rep < 4; rep++, runs++)
            if (sim_pingpong_once(S, T, steps, &why)) {
                if (!bad)
                    first_why = why;
                bad++;
            }
    }
    CHECK(bad == 0, "ping-pong FP8 K-grouped protocol: %d of %d random runs wrong (first: reason %u)", bad, runs,
          first_why);
}

/* ---- the FP8 M-grouped kernel in clusters of two (GemmFp8MGrouped CLUSTER 2, decision 71), simulated: both
 * blocks' agents one step at a time in a random order, with the mbarriers as the hardware keeps them (a phase
 * completes when its pending arrivals and its transaction bytes are both zero; complete_tx may come before the
 * expect_tx it matches, leaving the count negative for a while). Per block: the producer (waits its `empty`,
 * arrive.expect_tx of A + B on its `full`, then its own B copy, and on rank 0 the A copy multicast into both
 * blocks), the copies landing (any pending one, each destination on its own), and the consumer (up to two stages
 * read before the oldest is released, as the kernel's pairs; a release is W arrivals on its own `empty` and W on
 * the peer's, interleaved at random). Each landing must find its slot's previous stage read by that block's
 * consumer and the slot's `full` in the phase of its own stage; each read must find both operands of its own stage.
 * Also: no deadlock, every stage read once by each block. */
enum { SIMC_MAX_STAGES = 64 };
static int sim_cluster_once(int S, int n, int W, unsigned *why)
{
    enum { A_BYTES = 2, B_BYTES = 3 };
    int fpend[2][8], ftx[2][8], fdone[2][8], epend[2][8], edone[2][8], slot_a[2][8], slot_b[2][8];
    for (int b = 0; b < 2; b++)
        for (int s = 0; s < S; s++) {
            fpend[b][s] = 1, ftx[b][s] = fdone[b][s] = 0;
            epend[b][s] = 2 * W, edone[b][s] = 0;
            slot_a[b][s] = slot_b[b][s] = -1;
        }
    struct Copy {
        int blk, ring, a;
    } pend[4 * SIMC_MAX_STAGES];
    int npend = 0, prod[2] = {0, 0}, cons[2] = {0, 0}, rel[2] = {0, 0}, read_done[2] = {0, 0};
    int loc[2] = {0, 0}, rem[2] = {0, 0}; /* arrivals of the release under way (of stage rel[b]) */
    for (long long step = 0; step < 1000000; step++) {
        int can[8], ncan = 0; /* 0 + b producer, 2 a landing, 3 + b consumer read, 5 + b consumer release step */
        for (int b = 0; b < 2; b++) {
            if (prod[b] < n && sim_wait(edone[b][prod[b] % S], ((prod[b] / S) & 1) ^ 1))
                can[ncan++] = b;
            if (cons[b] < n && cons[b] - rel[b] < 2 && sim_wait(fdone[b][cons[b] % S], (cons[b] / S) & 1))
                can[ncan++] = 3 + b;
            if (rel[b] < cons[b])
                can[ncan++] = 5 + b;
        }
        if (npend)
            can[ncan++] = 2;
        if (!ncan)
            return prod[0] == n && prod[1] == n && rel[0] == n && rel[1] == n ? 0 : (*why = 1, 1); /* deadlock */
        const int a = can[rnd((unsigned)ncan)];
        if (a < 2) {
            const int b = a, r = prod[b]++, s = r % S;
            ftx[b][s] += A_BYTES + B_BYTES; /* arrive.expect_tx: the bytes first, then the arrival */
            if (--fpend[b][s] == 0 && ftx[b][s] == 0)
                fdone[b][s]++, fpend[b][s] = 1;
            pend[npend++] = (struct Copy){b, r, 0};
            if (b == 0) {
                pend[npend++] = (struct Copy){0, r, 1};
                pend[npend++] = (struct Copy){1, r, 1};
            }
        } else if (a == 2) {
            const int i = (int)rnd((unsigned)npend);
            const struct Copy c = pend[i];
            pend[i] = pend[--npend];
            const int s = c.ring % S;
            if (c.ring - S >= read_done[c.blk])
                return *why = 2, 1; /* written over a stage its block has not read */
            if (fdone[c.blk][s] != c.ring / S)
                return *why = 3, 1; /* completes bytes on another stage's phase */
            if (c.a)
                slot_a[c.blk][s] = c.ring;
            else
                slot_b[c.blk][s] = c.ring;
            ftx[c.blk][s] -= c.a ? A_BYTES : B_BYTES;
            if (fpend[c.blk][s] == 0 && ftx[c.blk][s] == 0)
                fdone[c.blk][s]++, fpend[c.blk][s] = 1;
        } else if (a < 5) {
            const int b = a - 3, r = cons[b]++, s = r % S;
            if (slot_a[b][s] != r || slot_b[b][s] != r)
                return *why = 4, 1; /* a wait passed before both operands of its stage landed */
        } else {
            const int b = a - 5, s = rel[b] % S;
            if (loc[b] == 0 && rem[b] == 0) { /* the release begins: the stage's reads are done */
                read_done[b] = rel[b] + 1;
                loc[b] = rem[b] = W;
            }
            const int to = loc[b] && (!rem[b] || rnd(2)) ? b : b ^ 1;
            if (to == b)
                loc[b]--;
            else
                rem[b]--;
            if (--epend[to][s] == 0)
                edone[to][s]++, epend[to][s] = 2 * W;
            if (loc[b] == 0 && rem[b] == 0)
                rel[b]++;
        }
    }
    return *why = 5, 1;
}

static void test_fp8_cluster_protocol(void)
{
    int bad = 0, runs = 0;
    unsigned why = 0, first_why = 0;
    for (int it = 0; it < 3000; it++) {
        const int S = 2 + (int)rnd(7), n = 1 + (int)rnd(SIMC_MAX_STAGES), W = 1 + (int)rnd(3);
        for (int rep = 0; rep < 4; rep++, runs++)
            if (sim_cluster_once(S, n, W, &why)) {
                if (!bad)
                    first_why = why;
                bad++;
            }
    }
    CHECK(bad == 0, "FP8 M-grouped cluster protocol: %d of %d random runs wrong (first: reason %u)", bad, runs, first_why);
}

/* ---- the FP8 K-grouped kernel (GemmFp8KGrouped, decision 45): shapes, its scale layout, its compile */
static void test_fp8_kgrouped(void)
{
    char err[1024];
    GemmFp8Shape gu = {8, 28672, 4096, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 0}, dn = {8, 4096, 14336, 6, GEMM_FP8_BLOCK,
                                                                                 GEMM_FP8_OUT_F32, 0, 0};
    GemmFp8Shape s7 = gu, bf = gu, mx = gu, badn = gu, oddk = {6, 256, 384, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 0};
    GemmFp8Shape tma5 = gu, tma6 = gu;
    tma5.out = tma6.out = GEMM_FP8_OUT_F32_TMA;
    tma5.stages = 5;
    s7.stages = 7;
    bf.out = GEMM_FP8_OUT_BF16;
    mx.mode = GEMM_FP8_MX;
    badn.N = 28672 + 64;
    CHECK(gemm_fp8_kgrouped_check_shape(&gu, err, sizeof err) &&
              gemm_fp8_kgrouped_smem_bytes(&gu) == 1024 + 6 * (32768 + 128 + 128 + 1024) + 6 * 24 + 2048,
          "FP8 K-grouped Mixtral dw_gate_up, 6 stages: %d bytes %s", gemm_fp8_kgrouped_smem_bytes(&gu), err);
    CHECK(gemm_fp8_kgrouped_check_shape(&dn, err, sizeof err), "FP8 K-grouped Mixtral dw_down: %s", err);
    CHECK(gemm_fp8_kgrouped_check_shape(&oddk, err, sizeof err), "K 384 (an odd number of 128 blocks): %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&s7, err, sizeof err) && strstr(err, "shared memory"), "7 stages: %s", err);
    CHECK(gemm_fp8_kgrouped_check_shape(&tma5, err, sizeof err) &&
              gemm_fp8_kgrouped_smem_bytes(&tma5) == 1024 + 5 * (32768 + 128 + 128 + 1024) + 5 * 24 + 32768 + 2048,
          "TMA stores, 5 stages: %d bytes %s", gemm_fp8_kgrouped_smem_bytes(&tma5), err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&tma6, err, sizeof err) && strstr(err, "shared memory"),
          "TMA stores, 6 stages: %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&bf, err, sizeof err) && strstr(err, "fp32"), "bf16 out: %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&mx, err, sizeof err) && strstr(err, "fp8-block"), "MXFP8: %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&badn, err, sizeof err) && strstr(err, "128"), "N %% 128: %s", err);
    /* (+ 2048: each consumer thread's running double of the gradient norm's squares, decision 73) */
    /* ping-pong (decision 56): a stage holds 64 rows of dY^T (8 KB) and their 64 scale codes; 7 stages beside the
     * TMA stores' 32 KB; the register stores refused; pingpong 2 refused; the M-grouped kernel takes none */
    GemmFp8Shape pp7 = tma5, pp8 = tma5, pp2 = tma5, ppr = gu, mpp = {8, 28672, 4096, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_BF16, 1, 0};
    pp7.pingpong = pp8.pingpong = ppr.pingpong = 1;
    pp7.stages = 7;
    pp8.stages = 8;
    ppr.stages = 4;
    pp2.pingpong = 2;
    CHECK(gemm_fp8_kgrouped_check_shape(&pp7, err, sizeof err) &&
              gemm_fp8_kgrouped_smem_bytes(&pp7) == 1024 + 7 * (8192 + 16384 + 64 + 128 + 1024) + 7 * 24 + 32768 + 2048 &&
              gemm_fp8_kgrouped_a_rows(&pp7) == 64 && gemm_fp8_kgrouped_a_rows(&gu) == 128,
          "ping-pong, TMA stores, 7 stages: %d bytes %s", gemm_fp8_kgrouped_smem_bytes(&pp7), err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&pp8, err, sizeof err) && strstr(err, "shared memory"),
          "ping-pong, TMA stores, 8 stages: %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&ppr, err, sizeof err) && strstr(err, "TMA stores"),
          "ping-pong, register stores: %s", err);
    CHECK(!gemm_fp8_kgrouped_check_shape(&pp2, err, sizeof err) && strstr(err, "pingpong"), "pingpong 2: %s", err);
    CHECK(!gemm_fp8_check_shape(&mpp, err, sizeof err) && strstr(err, "ping-pong"), "M-grouped pingpong: %s", err);

    /* the transposed operands' scales [rows_cap / 128][cols]: a 128-token block's codes for 128 columns from a
     * multiple of 128 are 128 contiguous bytes, 16-byte aligned for cols % 16 == 0, every index hit once */
    {
        const long long rows_cap = 1040, cols = 384, nb = (rows_cap + 127) / 128 * cols;
        unsigned char *seen = calloc((size_t)nb, 1);
        int bad = 0;
        for (long long r = 0; r < rows_cap; r += 128)
            for (long long c = 0; c < cols; c++) {
                long long i = moec_fp8_kgrouped_s_index(r, c, cols);
                bad += i < 0 || i >= nb || seen[i]++;
                bad += i != moec_fp8_kgrouped_s_index(r + 127 < rows_cap ? r + 127 : r, c / 128 * 128, cols) + c % 128;
                bad += c % 128 == 0 && i % 16 != 0;
            }
        for (long long i = 0; i < nb; i++)
            bad += !seen[i];
        free(seen);
        CHECK(bad == 0, "FP8 K-grouped scale layout: %d index faults", bad);
    }

    if (!nvrtc_load(err, sizeof err))
        return;
    GemmFp8Shape oddpp = pp7;
    oddpp.E = oddk.E;
    oddpp.N = oddk.N;
    oddpp.K = oddk.K;
    const GemmFp8Shape shapes[] = {gu, oddk, tma5, gu, pp7, oddpp, pp7};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const GemmFp8Shape *s = &shapes[i];
        /* 3 and 6: decisions 45's pairs (the others the pipelined promotion, decision 51); 4-6 ping-pong */
        char *src = i == 3 || i == 6 ? gemm_fp8_kgrouped_source_sched(s, GEMM_FP8_SCHED_PAIRS, "moec_gemm_fp8k", NULL)
                                     : gemm_fp8_kgrouped_source(s, "moec_gemm_fp8k", NULL);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_fp8k.cu", "sm_90a", &out, err, sizeof err);
        if (!ok && out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_fp8k.cu");
        CHECK(ok && out.image_size > 0 && out.nwarnings == 0 && out.nerrors == 0,
              "FP8 K-grouped E %d N %d K %d out %d pingpong %d compiles for sm_90a warning-free: %s (%d warnings)", s->E,
              s->N, s->K, s->out, s->pingpong, ok ? "" : err, out.nwarnings);
        CHECK(!(out.log && strstr(out.log, "serialized")), "FP8 K-grouped: ptxas serialised the wgmma:\n%s",
              out.log ? out.log : "");
        nvrtc_output_free(&out);
        free(src);
    }
}

int main(void)
{
    test_scheduler();
    test_kscheduler();
    test_shapes();
    test_nvrtc_compile();
    test_fp8_shapes();
    test_fp8_scale_layout();
    test_fp8_compile();
    test_fp8_kgrouped();
    test_fp8k_pingpong_protocol();
    test_fp8_cluster_protocol();
    printf("test_gemm_sm90: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
