/* gemm_fp8.c - checks and times the sm_90a FP8 (E4M3) M-grouped GEMM (codegen/gemm_sm90.cuh
 * GemmFp8MGrouped) on a GPU: fp8-block (1 x 128 / 128 x 128 scales) and MXFP8 (1 x 32), E8M0 scale codes;
 * and the FP8 K-grouped GEMM of fp8-block's weight gradients (GemmFp8KGrouped, the kblock_* configs: see
 * the section "the FP8 K-grouped kernel" below for its inputs, reference and tolerance).
 *
 *   gemm_fp8 --emit DIR   (no GPU) NVRTC-compiles every configuration for sm_90a into DIR/NAME.cubin
 *                         (+ NAME.cu); fails on any NVRTC warning
 *   gemm_fp8 --selftest   (no GPU) the quantiser, the scale layouts and the checker on the CPU: see selftest()
 *   gemm_fp8 --run DIR [SEED]  (GPU) per configuration:
 *     inputs: pseudo-random floats (a hash of the index and the seed; magnitudes vary by row and by
 *             128-block so the scales differ), quantised on the host by the reference quantiser
 *             below, uploaded with their scales in the kernel's layouts (gemm_sm90_sched.h);
 *     check:  D poisoned with NaN first; against a double-precision GEMM of the dequantised
 *             operands, every element of the real rows (small shapes) or the first and last row of
 *             each group plus 2048 random elements (big ones); ragged groups (0 rows, 1, non-multiples
 *             of 128); two runs bit-identical;
 *     time:   3 warm-up launches, median of 20 (CUDA events); TFLOP/s = 2 M N K / time, M = real rows.
 *
 * Reference quantiser (exactly defined; the fp8-block recipe's CPU side is another branch's): a
 * block's scale is 2^e with e = ceil(log2(amax / 448)) (computed exactly: amax = m 2^p, m in [0.5, 1),
 * e = p - 9 + (m > 0.875)), amax the largest |x| of the block; a zero block gets e = 0 (scale 1).
 * Values: moec_e4m3_encode(x 2^-e) (util/e4m3.h: round to nearest even, saturating). Blocks: A 1 x 128
 * and W 128 x 128 (fp8-block), or 1 x 32 along K for both (MXFP8); scales stored as E8M0 codes e + 127
 * (decision 35's format; its rule gives an all-zero block 2^-127, this one 1: the kernel takes either).
 *
 * Tolerance, per element, with S = sum_k |a_k b_k| of the dequantised operands:
 *   |d - ref| <= G 2^-12 S + (K / 32) 2^-23 S + (bf16 out: 2^-8 |ref|)
 * The products of two E4M3 values are exact; the FP8 tensor core adds them into its accumulator
 * keeping ~14 bits (DeepSeek-V3 s. 3.3.2, measured on H800): an error of ~2^-13 of the magnitudes
 * involved per k32 instruction, taken as 2^-12 of that instruction's sum of |products| (twice the
 * estimate: the hardware's alignment and truncation are not documented), and G instructions share a
 * temporary before the kernel promotes it in fp32 (G = 4 for fp8-block, 1 for MXFP8); the fp32
 * promotion adds K/128 or K/32 partials (gamma_n = n 2^-24, doubled). Normwise
 * ||d - ref|| / ||ref|| <= 2^-11 (4.9e-4) for fp32 out: random data should land at 1e-5..1e-4 (the
 * per-instruction errors of ~2^-14 relative partly cancel), but truncation is biased, so the bound is
 * the worst case of a 128-deep fp8-block interval (4 x 2^-13); 2^-8 for bf16 out (its rounding). A
 * wrong scale or a wrong expert is O(1e-2) or more (the self-test shows both caught).
 * tests/gpu/gemm_fp8.sh drives it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>

#include "../../codegen/gemm_sm90.h"
#include "../../codegen/gemm_sm90_sched.h"
#include "../../runtime/gpu/tma.h"
#include "../../util/e4m3.h"
#include "../../runtime/cpu/fp8_block.h"
#include "nvrtc.h"
#include "../../runtime/gpu/cudrv.h"

typedef struct Cfg {
    const char *name;
    GemmFp8Shape s;
    int timed, full;
    int rows[32];
    int sched; /* GEMM_FP8_SCHED_PIPE (0: what codegen emits) or GEMM_FP8_SCHED_PAIRS (the *_pairs rows) */
    const char *same_as; /* a config of the same shape whose kernel must give the same bits on the same inputs */
} Cfg;

#define U8(r) {r, r, r, r, r, r, r, r}
#define U16(r) {r, r, r, r, r, r, r, r, r, r, r, r, r, r, r, r}
#define RAG6 {0, 1, 200, 128, 1000, 333}
#define RAG16 {0, 1, 1000, 2048, 777, 129, 0, 1500, 3000, 64, 128, 2000, 1111, 999, 1, 2500}
enum { BLK = GEMM_FP8_BLOCK, MX = GEMM_FP8_MX, BF = GEMM_FP8_OUT_BF16, F32 = GEMM_FP8_OUT_F32 };
enum { PIPE = GEMM_FP8_SCHED_PIPE, PAIRS = GEMM_FP8_SCHED_PAIRS };
static const Cfg cfgs[] = {
    {"block_ragged_f32", {6, 512, 768, 6, BLK, F32, 0, 0}, 0, 1, RAG6, PIPE, NULL},
    {"mx_ragged_f32", {6, 512, 768, 5, MX, F32, 0, 0}, 0, 1, RAG6, PIPE, NULL},
    {"block_ragged_bf16", {6, 512, 768, 6, BLK, BF, 0, 0}, 0, 1, RAG6, PIPE, NULL},
    {"mx_ragged_bf16", {6, 512, 768, 5, MX, BF, 0, 0}, 0, 1, RAG6, PIPE, NULL},
    {"block_ragged_bio_up_f32", {16, 5632, 1024, 6, BLK, F32, 0, 0}, 0, 0, RAG16, PIPE, NULL},
    {"mx_ragged_bio_up_f32", {16, 5632, 1024, 5, MX, F32, 0, 0}, 0, 0, RAG16, PIPE, NULL},
    {"block_ragged_mixtral_down", {8, 4096, 14336, 6, BLK, BF, 0, 0}, 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000}, PIPE, NULL},
    {"block_mixtral_gate_up", {8, 28672, 4096, 6, BLK, BF, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    {"block_mixtral_down", {8, 4096, 14336, 6, BLK, BF, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    /* the backward's data gradient of gate_up (dxs = dY W: K = 2F), the layer's longest FP8 GEMM */
    {"block_mixtral_dxs", {8, 4096, 28672, 6, BLK, BF, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    {"block_bio_up", {16, 5632, 1024, 6, BLK, BF, 0, 0}, 1, 0, U16(1024), PIPE, NULL},
    {"block_bio_down", {16, 1024, 2816, 6, BLK, BF, 0, 0}, 1, 0, U16(1024), PIPE, NULL},
    {"block_mixtral_gate_up_f32", {8, 28672, 4096, 6, BLK, F32, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    {"mx_mixtral_gate_up", {8, 28672, 4096, 5, MX, BF, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    {"mx_mixtral_down", {8, 4096, 14336, 5, MX, BF, 0, 0}, 1, 0, U8(2048), PIPE, NULL},
    {"mx_bio_up", {16, 5632, 1024, 5, MX, BF, 0, 0}, 1, 0, U16(1024), PIPE, NULL},
    {"mx_bio_down", {16, 1024, 2816, 5, MX, BF, 0, 0}, 1, 0, U16(1024), PIPE, NULL},
    /* decision 51: the MXFP8 rows above run the pipelined promotion (one k32 group always in flight while the
     * one before it is promoted); these run decision 38's pairs, checked and timed in the same run */
    {"mx_ragged_f32_pairs", {6, 512, 768, 5, MX, F32, 0, 0}, 0, 1, RAG6, PAIRS, NULL},
    {"mx_ragged_bio_up_f32_pairs", {16, 5632, 1024, 5, MX, F32, 0, 0}, 0, 0, RAG16, PAIRS, NULL},
    {"mx_mixtral_gate_up_pairs", {8, 28672, 4096, 5, MX, BF, 0, 0}, 1, 0, U8(2048), PAIRS, NULL},
    {"mx_mixtral_down_pairs", {8, 4096, 14336, 5, MX, BF, 0, 0}, 1, 0, U8(2048), PAIRS, NULL},
    {"mx_bio_up_pairs", {16, 5632, 1024, 5, MX, BF, 0, 0}, 1, 0, U16(1024), PAIRS, NULL},
    {"mx_bio_down_pairs", {16, 1024, 2816, 5, MX, BF, 0, 0}, 1, 0, U16(1024), PAIRS, NULL},
    /* decision 71: clusters of two blocks on the tiles (m, 2j), (m, 2j + 1), A multicast into both; each
     * checked like the others and bit for bit against its one-block twin on the same inputs */
    {"block_ragged_f32_c2", {6, 512, 768, 6, BLK, F32, 0, 2}, 0, 1, RAG6, PIPE, "block_ragged_f32"},
    {"block_ragged_bf16_c2", {6, 512, 768, 6, BLK, BF, 0, 2}, 0, 1, RAG6, PIPE, "block_ragged_bf16"},
    {"mx_ragged_bf16_c2", {6, 512, 768, 5, MX, BF, 0, 2}, 0, 1, RAG6, PIPE, "mx_ragged_bf16"},
    {"block_ragged_bio_up_f32_c2", {16, 5632, 1024, 6, BLK, F32, 0, 2}, 0, 0, RAG16, PIPE, "block_ragged_bio_up_f32"},
    {"block_ragged_mixtral_down_c2", {8, 4096, 14336, 6, BLK, BF, 0, 2}, 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000},
     PIPE, "block_ragged_mixtral_down"},
    {"block_mixtral_gate_up_c2", {8, 28672, 4096, 6, BLK, BF, 0, 2}, 1, 0, U8(2048), PIPE, "block_mixtral_gate_up"},
    {"block_mixtral_down_c2", {8, 4096, 14336, 6, BLK, BF, 0, 2}, 1, 0, U8(2048), PIPE, "block_mixtral_down"},
    {"block_mixtral_dxs_c2", {8, 4096, 28672, 6, BLK, BF, 0, 2}, 1, 0, U8(2048), PIPE, "block_mixtral_dxs"},
    {"block_bio_up_c2", {16, 5632, 1024, 6, BLK, BF, 0, 2}, 1, 0, U16(1024), PIPE, "block_bio_up"},
    {"block_bio_down_c2", {16, 1024, 2816, 6, BLK, BF, 0, 2}, 1, 0, U16(1024), PIPE, "block_bio_down"},
};
#define NCFG ((int)(sizeof cfgs / sizeof *cfgs))

static int kemit(const char *dir);
static int name_listed(const char *list, const char *name);
static int krun_all(const char *dir, int sms, unsigned seed, const char *only);
static int kselftest(void);

static void die(const char *what, const char *why)
{
    fprintf(stderr, "gemm_fp8: %s: %s\n", what, why);
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
    *len = (size_t)n;
    return b;
}

static int emit(const char *dir)
{
    char err[1024], path[1024];
    int bad = 0;
    const char *only = getenv("GEMM_FP8_ONLY"); /* --emit too: compiles only those */
    for (int i = 0; i < NCFG; i++) {
        const Cfg *c = &cfgs[i];
        int needed = !only || !*only || name_listed(only, c->name);
        for (int j = 0; j < NCFG && !needed; j++) /* the twin of a listed config */
            needed = cfgs[j].same_as && strcmp(cfgs[j].same_as, c->name) == 0 && name_listed(only, cfgs[j].name);
        if (!needed)
            continue;
        if (!gemm_fp8_check_shape(&c->s, err, sizeof err))
            die(c->name, err);
        char *src = gemm_fp8_source_sched(&c->s, c->sched, "moec_gemm_fp8", NULL);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_fp8.cu", "sm_90a", &out, err, sizeof err);
        if (out.log && *out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_fp8.cu");
        int serial = out.log && strstr(out.log, "serialized");
        printf("emit %-36s NVRTC %d.%d: %s, %d warnings%s, %.2f s\n", c->name, out.major, out.minor, ok ? "ok" : err,
               out.nwarnings, serial ? ", ptxas SERIALISED the wgmma" : "", out.seconds);
        bad += !ok || out.nwarnings != 0 || serial;
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
    bad += kemit(dir);
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------- the host side: inputs, quantiser */
static unsigned long long mix(unsigned long long x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* uniform in (-1, 1) times 2^scale_exp (-16 <= scale_exp <= 0); about 1 in 64 elements exactly 0 */
static float fpow2[32]; /* fpow2[e + 16] = 2^e */
static float gen(unsigned seed, unsigned long long i, int scale_exp)
{
    unsigned long long x = mix(i * 0x9E3779B97F4A7C15ull + (unsigned long long)seed * 0xD1B54A32D192ED03ull);
    if ((x & 63) == 0)
        return 0.0f;
    float u = (float)((x >> 40) & 0xFFFFFF) * (2.0f / 16777216.0f) - 1.0f;
    return u * fpow2[scale_exp + 16];
}
/* the magnitudes: A by row (and a zero K block now and then), W by its 128 x 128 block */
static float gen_a(unsigned seed, long long r, int k, int K)
{
    if ((r * 7 + k / 128) % 23 == 5)
        return 0.0f; /* a zero block: scale 1 */
    return gen(seed, (unsigned long long)r * K + k, (int)(r % 9) - 8);
}
static float gen_w(unsigned seed, int g, int n, int k, int N, int K)
{
    return gen(seed, ((unsigned long long)g * N + n) * K + k, -3 - (int)((n / 128 + k / 128 + g) % 5));
}

/* the scale exponent of a block: ceil(log2(amax / 448)), 0 for a zero block */
static int scale_exp(float amax)
{
    if (amax == 0.0f)
        return 0;
    int p;
    float m = frexpf(amax, &p);
    return p - 9 + (m > 0.875f);
}

static float lut[256];
static double pow2[256]; /* pow2[e + 128] = 2^e */
static void init_tables(void)
{
    for (int i = 0; i < 256; i++) {
        lut[i] = moec_e4m3_decode((unsigned)i);
        pow2[i] = ldexp(1.0, i - 128);
    }
    for (int i = 0; i < 32; i++)
        fpow2[i] = ldexpf(1.0f, i - 16);
}

/* quantised operands on the host: codes, and the block exponent of every block (ea, ew) */
typedef struct Q {
    unsigned char *a, *w;   /* codes */
    signed char *ea, *ew;   /* A: [rows_cap][K / BK]; W: [E][N][K / 32] (MXFP8) or [E][N / 128][K / 128] */
    void *sa, *sb;          /* the kernel's scale arrays */
    size_t sa_bytes, sb_bytes;
} Q;

typedef struct QJob {
    const GemmFp8Shape *s;
    long long rows_cap;
    unsigned seed_a, seed_w;
    Q *q;
    int nthreads, tid;
} QJob;

/* A rows tid, tid + nthreads, ... and W (expert, 128-row block) units likewise */
static void *quantise_part(void *arg)
{
    const QJob *j = arg;
    const GemmFp8Shape *s = j->s;
    Q *q = j->q;
    const int E = s->E, N = s->N, K = s->K, mx = s->mode == GEMM_FP8_MX;
    const int BK = mx ? 32 : 128;
    const long long rows_cap = j->rows_cap;
    float *blk = malloc(sizeof(float) * 128 * 128);
    if (!blk)
        die("quantise", "out of host memory");
    for (long long r = j->tid; r < rows_cap; r += j->nthreads)
        for (int kb = 0; kb < K / BK; kb++) {
            float amax = 0;
            for (int i = 0; i < BK; i++) {
                blk[i] = gen_a(j->seed_a, r, kb * BK + i, K);
                amax = fmaxf(amax, fabsf(blk[i]));
            }
            int e = scale_exp(amax);
            float inv = ldexpf(1.0f, -e);
            for (int i = 0; i < BK; i++)
                q->a[r * K + kb * BK + i] = (unsigned char)moec_e4m3_encode(blk[i] * inv);
            q->ea[r * (K / BK) + kb] = (signed char)e;
            if (mx)
                ((unsigned char *)q->sa)[moec_mxfp8_sa_index(r, kb, rows_cap)] = (unsigned char)(e + 127);
            else
                ((unsigned char *)q->sa)[moec_fp8_block_sa_index(r, kb, rows_cap)] = (unsigned char)(e + 127);
        }
    for (long long u = j->tid; u < (long long)E * (N / 128); u += j->nthreads) {
        const int g = (int)(u / (N / 128)), nb = (int)(u % (N / 128));
        for (int kb = 0; kb < K / 128; kb++) {
            for (int n = 0; n < 128; n++)
                for (int k = 0; k < 128; k++)
                    blk[n * 128 + k] = gen_w(j->seed_w, g, nb * 128 + n, kb * 128 + k, N, K);
            if (mx) {
                for (int n = 0; n < 128; n++)
                    for (int k4 = 0; k4 < 4; k4++) {
                        float amax = 0;
                        for (int i = 0; i < 32; i++)
                            amax = fmaxf(amax, fabsf(blk[n * 128 + k4 * 32 + i]));
                        int e = scale_exp(amax);
                        float inv = ldexpf(1.0f, -e);
                        size_t row = ((size_t)g * N + nb * 128 + n) * K + (size_t)kb * 128 + k4 * 32;
                        for (int i = 0; i < 32; i++)
                            q->w[row + i] = (unsigned char)moec_e4m3_encode(blk[n * 128 + k4 * 32 + i] * inv);
                        int kb32 = kb * 4 + k4;
                        q->ew[((size_t)g * N + nb * 128 + n) * (K / 32) + kb32] = (signed char)e;
                        ((unsigned char *)q->sb)[moec_mxfp8_sb_index(g, nb * 128 + n, kb32, N, K)] =
                            (unsigned char)(e + 127);
                    }
            } else {
                float amax = 0;
                for (int i = 0; i < 128 * 128; i++)
                    amax = fmaxf(amax, fabsf(blk[i]));
                int e = scale_exp(amax);
                float inv = ldexpf(1.0f, -e);
                for (int n = 0; n < 128; n++)
                    for (int k = 0; k < 128; k++)
                        q->w[((size_t)g * N + nb * 128 + n) * K + (size_t)kb * 128 + k] =
                            (unsigned char)moec_e4m3_encode(blk[n * 128 + k] * inv);
                q->ew[((size_t)g * (N / 128) + nb) * (K / 128) + kb] = (signed char)e;
                ((unsigned char *)q->sb)[moec_fp8_block_sb_index(g, nb * 128, kb, N, K)] = (unsigned char)(e + 127);
            }
        }
    }
    free(blk);
    return NULL;
}

/* every element of A [rows_cap, K] (padding rows too: they must not matter) and W [E, N, K]; the same
 * result for any thread count (each block is quantised by one thread, from the index alone) */
static void quantise(const GemmFp8Shape *s, long long rows_cap, unsigned seed_a, unsigned seed_w, Q *q)
{
    const int E = s->E, N = s->N, K = s->K, mx = s->mode == GEMM_FP8_MX;
    const int BK = mx ? 32 : 128;
    q->a = malloc((size_t)rows_cap * K);
    q->w = malloc((size_t)E * N * K);
    q->ea = malloc((size_t)rows_cap * (K / BK));
    q->ew = mx ? malloc((size_t)E * N * (K / 32)) : malloc((size_t)E * (N / 128) * (K / 128));
    if (mx) {
        q->sa_bytes = (size_t)rows_cap * (K / 32);
        q->sb_bytes = (size_t)E * N * (K / 32);
    } else {
        q->sa_bytes = (size_t)rows_cap * (K / 128);
        q->sb_bytes = (size_t)E * (N / 128) * (K / 128);
    }
    q->sa = malloc(q->sa_bytes);
    q->sb = malloc(q->sb_bytes);
    if (!q->a || !q->w || !q->ea || !q->ew || !q->sa || !q->sb)
        die("quantise", "out of host memory");
    enum { MAXT = 64 };
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nproc < 1 ? 1 : nproc > MAXT ? MAXT : (int)nproc;
    pthread_t th[MAXT];
    QJob jobs[MAXT];
    for (int t = 0; t < nt; t++) {
        jobs[t] = (QJob){s, rows_cap, seed_a, seed_w, q, nt, t};
        if (t > 0 && pthread_create(&th[t], NULL, quantise_part, &jobs[t]) != 0)
            die("quantise", "pthread_create failed");
    }
    quantise_part(&jobs[0]);
    for (int t = 1; t < nt; t++)
        pthread_join(th[t], NULL);
}

static double deq_a(const GemmFp8Shape *s, const Q *q, long long r, int k)
{
    const int BK = s->mode == GEMM_FP8_MX ? 32 : 128;
    return (double)lut[q->a[r * s->K + k]] * pow2[q->ea[r * (s->K / BK) + k / BK] + 128];
}
static double deq_w(const GemmFp8Shape *s, const Q *q, int g, int n, int k)
{
    int e = s->mode == GEMM_FP8_MX ? q->ew[((size_t)g * s->N + n) * (s->K / 32) + k / 32]
                                   : q->ew[((size_t)g * (s->N / 128) + n / 128) * (s->K / 128) + k / 128];
    return (double)lut[q->w[((size_t)g * s->N + n) * s->K + k]] * pow2[e + 128];
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
    double max_ratio, err2, ref2;
} Stats;

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
    int pass, deterministic, timed, regs, local;
    int same; /* K-grouped configs with a same_as: 1 bit-identical to it, -1 not, 0 no such check */
    long long bad, checked;
    double normwise, max_ratio, ms, tflops;
} Result;

static void check_one(const GemmFp8Shape *s, const Q *q, const void *dh, int g, long long r, int n, Stats *st)
{
    double sum = 0, sa = 0;
    for (int k = 0; k < s->K; k++) {
        double p = deq_a(s, q, r, k) * deq_w(s, q, g, n, k);
        sum += p;
        sa += fabs(p);
    }
    const int G = s->mode == GEMM_FP8_MX ? 1 : 4;
    double got = s->out == GEMM_FP8_OUT_F32 ? (double)((const float *)dh)[r * s->N + n]
                                            : (double)bf2f(((const unsigned short *)dh)[r * s->N + n]);
    double tol = G * ldexp(sa, -12) + (double)(s->K / 32) * ldexp(sa, -23) +
                 (s->out == GEMM_FP8_OUT_BF16 ? ldexp(fabs(sum), -8) : 0);
    double e = fabs(got - sum);
    st->n++;
    if (got != got) {
        st->nan++;
        st->bad++;
        return;
    }
    st->bad += e > tol;
    if (tol > 0 && e / tol > st->max_ratio)
        st->max_ratio = e / tol;
    st->err2 += e * e;
    st->ref2 += sum * sum;
}

/* compares D (the rows of each group's real count) with the reference: res->normwise, max_ratio, pass
 * (determinism not included) */
static void verify(const Cfg *c, const Q *q, const int *off, long long real, const void *d1, unsigned seed,
                   Result *res)
{
    const GemmFp8Shape *s = &c->s;
    const int E = s->E, N = s->N;
    Stats st = {0};
    rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    if (c->full) {
        for (int g = 0; g < E; g++)
            for (long long r = off[g]; r < off[g] + c->rows[g]; r++)
                for (int n = 0; n < N; n++)
                    check_one(s, q, d1, g, r, n, &st);
    } else {
        for (int g = 0; g < E; g++) {
            if (!c->rows[g])
                continue;
            long long pick[2] = {off[g], off[g] + c->rows[g] - 1};
            for (int pi = 0; pi < 2; pi++)
                for (int j = 0; j < 256; j++)
                    check_one(s, q, d1, g, pick[pi], (int)(rng_next() % (unsigned long long)N), &st);
        }
        for (int i = 0; i < 2048; i++) {
            long long rr = (long long)(rng_next() % (unsigned long long)real);
            int g = 0;
            while (rr >= c->rows[g])
                rr -= c->rows[g++];
            check_one(s, q, d1, g, off[g] + rr, (int)(rng_next() % (unsigned long long)N), &st);
        }
    }
    res->normwise = st.ref2 > 0 ? sqrt(st.err2 / st.ref2) : 0;
    res->max_ratio = st.max_ratio;
    double bound = s->out == GEMM_FP8_OUT_F32 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    res->pass = st.bad == 0 && res->normwise <= bound;
    res->bad = st.bad;
    res->checked = st.n;
}

static const Cfg *cfg_named(const char *name)
{
    for (int i = 0; i < NCFG; i++)
        if (strcmp(cfgs[i].name, name) == 0)
            return &cfgs[i];
    die(name, "no such config");
    return NULL;
}

/* config c's kernel (DIR/NAME.cubin) loaded into *mod, its dynamic shared memory allowed (*smem bytes), and the
 * grid it is launched on: one block an SM, or for clusters the clusters that fit at once */
static CUfunction mload(const Cfg *c, const char *dir, int sms, CUmodule *mod, int *smem, unsigned *grid)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUfunction fn;
    ck(cu.cuModuleLoadData(mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, *mod, "moec_gemm_fp8"), "cuModuleGetFunction");
    *smem = gemm_fp8_smem_bytes(&c->s);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, *smem), "cuFuncSetAttribute");
    CUresult gr;
    *grid = cudrv_persistent_grid(fn, sms, 384, (unsigned)*smem, c->s.cluster, &gr);
    ck(gr, "cuOccupancyMaxActiveClusters");
    return fn;
}

/* config c's kernel once with the arguments of another config's launch (the same operands on the device), D
 * poisoned with NaN first; D copied to out */
static void mlaunch_into(const Cfg *c, const char *dir, int sms, void **args, CUdeviceptr D, size_t dbytes, void *out)
{
    CUmodule mod;
    int smem;
    unsigned grid;
    CUfunction fn = mload(c, dir, sms, &mod, &smem, &grid);
    ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison D");
    ck(cudrv_launch(fn, grid, 384, (unsigned)smem, NULL, args, c->s.cluster), "launch");
    ck(cu.cuCtxSynchronize(), "twin run");
    ck(cu.cuMemcpyDtoH(out, D, dbytes), "D DtoH");
    cu.cuModuleUnload(mod);
}

static void run_one(const Cfg *c, const char *dir, int sms, unsigned seed, Result *res)
{
    char err[512];
    const GemmFp8Shape *s = &c->s;
    const int E = s->E, N = s->N, K = s->K, BM = 128;
    memset(res, 0, sizeof *res);
    res->name = c->name;
    CUmodule mod;
    int smem;
    unsigned grid;
    CUfunction fn = mload(c, dir, sms, &mod, &smem, &grid);
    cu.cuFuncGetAttribute(&res->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cu.cuFuncGetAttribute(&res->local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);

    int off[33];
    long long real = 0;
    off[0] = 0;
    for (int g = 0; g < E; g++) {
        off[g + 1] = off[g] + (c->rows[g] + BM - 1) / BM * BM;
        real += c->rows[g];
    }
    long long rows_cap = off[E] + 64; /* a multiple of 16 */
    unsigned seed_a = seed * 2 + 1, seed_w = seed * 2 + 2;
    clock_t t0 = clock();
    Q q;
    quantise(s, rows_cap, seed_a, seed_w, &q);
    double qsec = (double)(clock() - t0) / CLOCKS_PER_SEC;
    size_t esize = s->out == GEMM_FP8_OUT_F32 ? 4 : 2, dbytes = (size_t)rows_cap * N * esize;
    CUdeviceptr A, W, D, SA, SB, OFF;
    ck(cu.cuMemAlloc(&A, (size_t)rows_cap * K), "alloc A");
    ck(cu.cuMemAlloc(&W, (size_t)E * N * K), "alloc W");
    ck(cu.cuMemAlloc(&D, dbytes), "alloc D");
    ck(cu.cuMemAlloc(&SA, q.sa_bytes), "alloc sa");
    ck(cu.cuMemAlloc(&SB, q.sb_bytes), "alloc sb");
    ck(cu.cuMemAlloc(&OFF, sizeof(int) * (size_t)(E + 1)), "alloc offsets");
    ck(cu.cuMemcpyHtoD(A, q.a, (size_t)rows_cap * K), "A HtoD");
    ck(cu.cuMemcpyHtoD(W, q.w, (size_t)E * N * K), "W HtoD");
    ck(cu.cuMemcpyHtoD(SA, q.sa, q.sa_bytes), "sa HtoD");
    ck(cu.cuMemcpyHtoD(SB, q.sb, q.sb_bytes), "sb HtoD");
    ck(cu.cuMemcpyHtoD(OFF, off, sizeof(int) * (size_t)(E + 1)), "offsets HtoD");
    ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison D");
    CUtensorMap ta, tb, td;
    if (!gemm_fp8_tensor_maps(s, A, rows_cap, W, D, &ta, &tb, &td, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args[] = {&ta, &tb, &td, &D, &SA, &SB, &OFF, &rc_int};
    ck(cudrv_launch(fn, grid, 384, (unsigned)smem, NULL, args, s->cluster), "launch");
    ck(cu.cuCtxSynchronize(), "run 1");
    void *d1 = malloc(dbytes), *d2 = malloc(dbytes);
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
            ck(cudrv_launch(fn, grid, 384, (unsigned)smem, NULL, args, s->cluster), "launch");
            ck(cu.cuEventRecord(e1, NULL), "record");
            ck(cu.cuEventSynchronize(e1), "timed run");
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
        ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison D");
        ck(cudrv_launch(fn, grid, 384, (unsigned)smem, NULL, args, s->cluster), "launch");
    }
    ck(cu.cuCtxSynchronize(), "last run");
    ck(cu.cuMemcpyDtoH(d2, D, dbytes), "D DtoH");
    int same = 1;
    for (int g = 0; g < E && same; g++)
        same = memcmp((char *)d1 + (size_t)off[g] * N * esize, (char *)d2 + (size_t)off[g] * N * esize,
                      (size_t)c->rows[g] * N * esize) == 0;
    res->deterministic = same;

    verify(c, &q, off, real, d1, seed, res);
    res->pass = res->pass && same;
    if (c->same_as) {
        /* the twin's kernel on the same inputs: the real rows of every group the same bits */
        const Cfg *ref = cfg_named(c->same_as);
        if (ref->s.E != E || ref->s.N != N || ref->s.K != K || ref->s.mode != s->mode || ref->s.out != s->out ||
            memcmp(ref->rows, c->rows, sizeof c->rows) != 0)
            die(c->name, "its same_as config has another shape or other groups");
        mlaunch_into(ref, dir, sms, args, D, dbytes, d2);
        long long ndiff = 0;
        for (int g = 0; g < E; g++)
            for (long long i = 0; i < (long long)c->rows[g] * N; i++)
                ndiff += memcmp((char *)d1 + ((size_t)off[g] * N + (size_t)i) * esize,
                                (char *)d2 + ((size_t)off[g] * N + (size_t)i) * esize, esize) != 0;
        res->same = ndiff == 0 ? 1 : -1;
        res->pass = res->pass && ndiff == 0;
        printf("%-36s against %s on the same inputs: %lld of %lld elements differ in some bit\n", c->name, ref->name,
               ndiff, real * N);
    }
    printf("%-36s %s E %2d N %5d K %5d out %s, promotion %s, %u blocks%s: rows %lld (padded %d), regs %d, local %d B, "
           "smem %d B, quantised in %.1f s\n",
           c->name, s->mode == GEMM_FP8_MX ? "MXFP8" : "fp8-block", E, N, K, s->out == GEMM_FP8_OUT_F32 ? "fp32" : "bf16",
           c->sched == GEMM_FP8_SCHED_PAIRS || s->mode == GEMM_FP8_BLOCK ? "pairs" : "pipelined", grid,
           s->cluster > 1 ? " in clusters of 2" : "", real, off[E], res->regs, res->local, smem, qsec);
    printf("  check %lld elements: %lld over tolerance (NaN included); max err/tol %.3f, normwise %.3g (bound %.3g); two "
           "runs bit-identical: %s -> %s\n",
           res->checked, res->bad, res->max_ratio, res->normwise, s->out == GEMM_FP8_OUT_F32 ? ldexp(1.0, -11) : ldexp(1.0, -8),
           same ? "yes" : "NO", res->pass ? "PASS" : "FAIL");
    if (res->timed)
        printf("  time: median %.4f ms of 20, %.1f TFLOP/s (2 M N K, M = %lld real rows)\n", res->ms, res->tflops, real);
    fflush(stdout);
    free(d1);
    free(d2);
    free(q.a);
    free(q.w);
    free(q.ea);
    free(q.ew);
    free(q.sa);
    free(q.sb);
    cu.cuMemFree(A);
    cu.cuMemFree(W);
    cu.cuMemFree(D);
    cu.cuMemFree(SA);
    cu.cuMemFree(SB);
    cu.cuMemFree(OFF);
    cu.cuModuleUnload(mod);
}

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
    init_tables();
    if (!cudrv_load(err, sizeof err))
        die("CUDA driver", err);
    CUdevice dev;
    CUcontext ctx;
    ck(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    ck(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    char name[128];
    int sms = 0, major = 0;
    cu.cuDeviceGetName(name, sizeof name, dev);
    cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    printf("device %s, %d SMs, driver %d; seed %u\n", name, sms, cu.version, seed);
    if (major != 9)
        die(name, "not a Hopper GPU (sm_90a kernels)");
    const char *only = getenv("GEMM_FP8_ONLY");
    Result res[NCFG];
    int n = 0, fails = 0;
    for (int i = 0; i < NCFG; i++) {
        if (only && *only && !name_listed(only, cfgs[i].name))
            continue;
        run_one(&cfgs[i], dir, sms, seed + (unsigned)i, &res[n]);
        fails += !res[n].pass;
        n++;
    }
    printf("\n%-36s %5s %5s %9s %8s %6s %9s %8s\n", "config", "regs", "local", "normwise", "err/tol", "check", "ms",
           "TFLOP/s");
    for (int i = 0; i < n; i++) {
        printf("%-36s %5d %5d %9.2e %8.3f %6s", res[i].name, res[i].regs, res[i].local, res[i].normwise,
               res[i].max_ratio, res[i].pass ? "PASS" : "FAIL");
        if (res[i].timed)
            printf(" %9.4f %8.1f\n", res[i].ms, res[i].tflops);
        else
            printf(" %9s %8s\n", "-", "-");
    }
    fails += krun_all(dir, sms, seed, only);
    return fails ? 1 : 0;
}

/* ---------------------------------------------------------------- --selftest (no GPU)
 * Emulates the kernel's arithmetic on the CPU from the arrays the GPU would get, read through the
 * kernel's index functions (gemm_sm90_sched.h): per promotion group an fp32 sum of the exact E4M3
 * products (the tensor core keeps fewer bits; fp32 here), then acc += tmp * scale in fp32 (fp8-block:
 * scale = sa[row] sb; MXFP8: (tmp b) a), bf16 or fp32 out. The checker must pass it, and must fail it
 * once a scale is wrong (one block's scale doubled) or a group's rows are swapped: this tests the
 * quantiser, the layouts and the checker, not the kernel. */
static unsigned short f2bf(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even (finite inputs) */
    return (unsigned short)(u >> 16);
}

static float e8m0f(unsigned char c)
{
    return c == 0 ? ldexpf(1.0f, -127) : ldexpf(1.0f, (int)c - 127);
}

static void emulate(const GemmFp8Shape *s, const Q *q, const int *off, const int *rows, long long rows_cap, void *dh)
{
    const int E = s->E, N = s->N, K = s->K, mx = s->mode == GEMM_FP8_MX, BK = mx ? 32 : 128;
    for (int g = 0; g < E; g++)
        for (long long r = off[g]; r < off[g] + rows[g]; r++)
            for (int n = 0; n < N; n++) {
                float acc = 0;
                for (int kb = 0; kb < K / BK; kb++) {
                    float tmp = 0;
                    for (int k = kb * BK; k < kb * BK + BK; k++)
                        tmp += lut[q->a[r * K + k]] * lut[q->w[((size_t)g * N + n) * K + k]];
                    if (mx) {
                        float a = e8m0f(((const unsigned char *)q->sa)[moec_mxfp8_sa_index(r, kb, rows_cap)]);
                        float b = e8m0f(((const unsigned char *)q->sb)[moec_mxfp8_sb_index(g, n, kb, N, K)]);
                        acc = fmaf(tmp * b, a, acc);
                    } else {
                        float sc = e8m0f(((const unsigned char *)q->sa)[moec_fp8_block_sa_index(r, kb, rows_cap)]) *
                                   e8m0f(((const unsigned char *)q->sb)[moec_fp8_block_sb_index(g, n, kb, N, K)]);
                        acc = fmaf(tmp, sc, acc);
                    }
                }
                if (s->out == GEMM_FP8_OUT_F32)
                    ((float *)dh)[r * N + n] = acc;
                else
                    ((unsigned short *)dh)[r * N + n] = f2bf(acc);
            }
}

static int selftest(void)
{
    init_tables();
    int fails = 0;
    for (int i = 0; i < NCFG; i++) {
        const Cfg *c = &cfgs[i];
        if (!c->full)
            continue; /* the small ragged shapes */
        const GemmFp8Shape *s = &c->s;
        int off[33];
        long long real = 0;
        off[0] = 0;
        for (int g = 0; g < s->E; g++) {
            off[g + 1] = off[g] + (c->rows[g] + 127) / 128 * 128;
            real += c->rows[g];
        }
        long long rows_cap = off[s->E] + 64;
        Q q;
        quantise(s, rows_cap, 11, 12, &q);
        size_t esize = s->out == GEMM_FP8_OUT_F32 ? 4 : 2, dbytes = (size_t)rows_cap * s->N * esize;
        void *dh = calloc(1, dbytes);
        Result ok, bad_scale, bad_rows;
        emulate(s, &q, off, c->rows, rows_cap, dh);
        verify(c, &q, off, real, dh, 1, &ok);
        /* one scale of A wrong: the 201st real row of group 2 (block 1), scale doubled */
        long long r = off[2] + 150;
        unsigned char *code = (unsigned char *)q.sa + (s->mode == GEMM_FP8_MX ? moec_mxfp8_sa_index(r, 1, rows_cap)
                                                                              : moec_fp8_block_sa_index(r, 1, rows_cap));
        (*code)++;
        emulate(s, &q, off, c->rows, rows_cap, dh);
        (*code)--;
        verify(c, &q, off, real, dh, 1, &bad_scale);
        /* group 4's result computed with group 3's weights (a wrong expert) */
        int off2[33];
        memcpy(off2, off, sizeof off2);
        emulate(s, &q, off, c->rows, rows_cap, dh);
        {
            int rows3[32];
            memcpy(rows3, c->rows, sizeof rows3);
            for (int g = 0; g < s->E; g++)
                if (g != 4)
                    rows3[g] = 0;
            off2[3] = off[4]; /* group 3's weights on group 4's rows */
            rows3[3] = c->rows[4];
            rows3[4] = 0;
            emulate(s, &q, off2, rows3, rows_cap, dh);
        }
        verify(c, &q, off, real, dh, 1, &bad_rows);
        int good = ok.pass && !bad_scale.pass && !bad_rows.pass;
        printf("selftest %-22s emulated: normwise %.3g, max err/tol %.3f (%s); a doubled scale: %lld elements over "
               "tolerance (%s); a wrong expert: %lld over (%s) -> %s\n",
               c->name, ok.normwise, ok.max_ratio, ok.pass ? "pass" : "FAIL", bad_scale.bad,
               bad_scale.pass ? "NOT caught" : "caught", bad_rows.bad, bad_rows.pass ? "NOT caught" : "caught",
               good ? "PASS" : "FAIL");
        fails += !good;
        free(dh);
        free(q.a);
        free(q.w);
        free(q.ea);
        free(q.ew);
        free(q.sa);
        free(q.sb);
    }
    fails += kselftest();
    return fails ? 1 : 0;
}

/* ================================================================ the FP8 K-grouped kernel (GemmFp8KGrouped)
 * fp8-block's weight gradient, decision 45: dW[g] [N, K] fp32 = sum over group g's padded rows t of
 * dequant(dY)[t][n] dequant(X)[t][k], dY and X quantised 128 x 1 within each group (per column and 128-token
 * block; a group's padding rows are zeros: its last block is the partial block), stored transposed as the
 * kernel reads them: dY^T [N, rows_cap], X^T [K, rows_cap] E4M3 codes, scales [rows_cap / 128][N or K]
 * (moec_fp8_kgrouped_s_index). Each config's groups are ragged (0, 1, 127, 129 rows ...); rows past the groups
 * (offsets[E] .. rows_cap) hold NaN codes and NaN scale codes, which the kernel must never read.
 *   inputs:  the scale rule is fp8-block's (runtime/cpu/fp8_block.c: an all-zero block gets 2^-127, code 0);
 *            magnitudes vary by column (2^0 .. 2^-12) and by token block, with a zero block now and then;
 *   check:   dW poisoned with NaN first; against a double-precision sum of the dequantised products (the
 *            scaled definition: sum over blocks of (sum a b) 2^(ea + eb)), every element (small shapes) or
 *            the first and last row of each group's dW plus 2048 random elements (big ones), every empty
 *            group's elements checked exactly 0; two runs bit-identical;
 *   tolerance (docs/fp8-block.md, the GPU kernel's): |d - ref| <= 2^-10 S + (blocks) 2^-23 S per element,
 *            S = sum |a b| 2^(ea + eb) (4 k32 instructions per promotion at ~2^-12 each, the fp32 promotion);
 *            normwise <= 2^-11;
 *   time:    as the M-grouped configs; TFLOP/s = 2 T N K, T = the real rows of all groups. */
typedef struct KCfg {
    const char *name;
    GemmFp8Shape s;
    int timed, full;
    int rows[32];
    int sched; /* GEMM_FP8_SCHED_PIPE (0: what codegen emits) or GEMM_FP8_SCHED_PAIRS (the *_pairs rows) */
    /* a config whose kernel must give this one's dW bit for bit on the same inputs (the ping-pong rows against
     * the cooperative kernel: the same instructions and the same fp32 promotion order per element), or NULL */
    const char *same_as;
    int grid; /* blocks: 0 = one per SM (what codegen launches); fewer give each block many tiles */
} KCfg;
#define FP8K(E, N, K) {E, N, K, 6, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32, 0, 0}
#define FP8KT(E, N, K) {E, N, K, 5, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32_TMA, 0, 0} /* TMA stores: 32 KB, one stage fewer */
/* ping-pong (decision 56): 64 x 128 tiles a consumer warpgroup, 24 KB stages, 7 beside the TMA stores' 32 KB (the
 * only epilogue it takes) */
#define FP8KTP(E, N, K) {E, N, K, 7, GEMM_FP8_BLOCK, GEMM_FP8_OUT_F32_TMA, 1, 0}
static const KCfg kcfgs[] = {
    {"kblock_ragged", FP8K(6, 256, 384), 0, 1, {0, 1, 127, 129, 300, 256}, PIPE, NULL, 0},
    {"kblock_ragged_b", FP8K(8, 384, 256), 0, 1, {129, 0, 1, 127, 700, 0, 385, 2}, PIPE, NULL, 0},
    {"kblock_ragged_bio_dw_up", FP8K(16, 5632, 1024), 0, 0, RAG16, PIPE, NULL, 0},
    {"kblock_ragged_mixtral_dw_down", FP8K(8, 4096, 14336), 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000}, PIPE, NULL, 0},
    {"kblock_mixtral_dw_gate_up", FP8K(8, 28672, 4096), 1, 0, U8(2048), PIPE, NULL, 0},
    {"kblock_mixtral_dw_down", FP8K(8, 4096, 14336), 1, 0, U8(2048), PIPE, NULL, 0},
    {"kblock_bio_dw_up", FP8K(16, 5632, 1024), 1, 0, U16(1024), PIPE, NULL, 0},
    {"kblock_bio_dw_down", FP8K(16, 1024, 2816), 1, 0, U16(1024), PIPE, NULL, 0},
    /* the TMA-store epilogue (what codegen emits, decision 51) */
    {"kblock_ragged_tma", FP8KT(6, 256, 384), 0, 1, {0, 1, 127, 129, 300, 256}, PIPE, NULL, 0},
    {"kblock_ragged_b_tma", FP8KT(8, 384, 256), 0, 1, {129, 0, 1, 127, 700, 0, 385, 2}, PIPE, NULL, 0},
    {"kblock_mixtral_dw_gate_up_tma", FP8KT(8, 28672, 4096), 1, 0, U8(2048), PIPE, NULL, 0},
    {"kblock_mixtral_dw_down_tma", FP8KT(8, 4096, 14336), 1, 0, U8(2048), PIPE, NULL, 0},
    {"kblock_bio_dw_up_tma", FP8KT(16, 5632, 1024), 1, 0, U16(1024), PIPE, NULL, 0},
    {"kblock_bio_dw_down_tma", FP8KT(16, 1024, 2816), 1, 0, U16(1024), PIPE, NULL, 0},
    /* decision 51: the rows above run the pipelined promotion (a group's stages in bodies of 4, one always in
     * flight while the one before it is promoted; its last steps % 4 by a tail); these run decision 45's pairs */
    {"kblock_ragged_b_pairs", FP8K(8, 384, 256), 0, 1, {129, 0, 1, 127, 700, 0, 385, 2}, PAIRS, NULL, 0},
    {"kblock_mixtral_dw_gate_up_pairs", FP8K(8, 28672, 4096), 1, 0, U8(2048), PAIRS, NULL, 0},
    {"kblock_mixtral_dw_down_pairs", FP8K(8, 4096, 14336), 1, 0, U8(2048), PAIRS, NULL, 0},
    {"kblock_bio_dw_up_pairs", FP8K(16, 5632, 1024), 1, 0, U16(1024), PAIRS, NULL, 0},
    {"kblock_bio_dw_down_pairs", FP8K(16, 1024, 2816), 1, 0, U16(1024), PAIRS, NULL, 0},
    {"kblock_ragged_tma_pairs", FP8KT(6, 256, 384), 0, 1, {0, 1, 127, 129, 300, 256}, PAIRS, NULL, 0},
    {"kblock_mixtral_dw_gate_up_tma_pairs", FP8KT(8, 28672, 4096), 1, 0, U8(2048), PAIRS, NULL, 0},
    {"kblock_mixtral_dw_down_tma_pairs", FP8KT(8, 4096, 14336), 1, 0, U8(2048), PAIRS, NULL, 0},
    {"kblock_bio_dw_up_tma_pairs", FP8KT(16, 5632, 1024), 1, 0, U16(1024), PAIRS, NULL, 0},
    {"kblock_bio_dw_down_tma_pairs", FP8KT(16, 1024, 2816), 1, 0, U16(1024), PAIRS, NULL, 0},
    /* decision 56: the ping-pong schedule (each consumer warpgroup its own 64 x 128 tiles, one's stores under the
     * other's main loop), every element against the definition and bit for bit against the cooperative kernel
     * on the same inputs; groups of 0, 1, 127, 129 ... rows (empty groups' tiles take their turn), 1-6 stages
     * (every tail); grids of 7, 5 and 1 blocks for the small shapes (72 or 96 tiles: 10-96 a block, odd and even
     * counts, both warpgroups' turns and the ring's phases over many tiles), one per SM for the rest (_1tile: each
     * block one tile, the second warpgroup idle) */
    {"kblock_ragged_tma_pp", FP8KTP(6, 256, 384), 0, 1, {0, 1, 127, 129, 300, 256}, PIPE, "kblock_ragged_tma", 7},
    {"kblock_ragged_tma_pp_1tile", FP8KTP(6, 256, 384), 0, 1, {0, 1, 127, 129, 300, 256}, PIPE, "kblock_ragged_tma",
     0},
    {"kblock_ragged_b_tma_pp", FP8KTP(8, 384, 256), 0, 1, {129, 0, 1, 127, 700, 0, 385, 2}, PIPE, "kblock_ragged_b_tma",
     5},
    {"kblock_ragged_b_tma_pp_pairs", FP8KTP(8, 384, 256), 0, 1, {129, 0, 1, 127, 700, 0, 385, 2}, PAIRS,
     "kblock_ragged_b_tma", 1},
    {"kblock_ragged_bio_dw_up_tma_pp", FP8KTP(16, 5632, 1024), 0, 0, RAG16, PIPE, "kblock_ragged_bio_dw_up", 0},
    {"kblock_ragged_mixtral_dw_down_tma_pp", FP8KTP(8, 4096, 14336), 0, 0, {3000, 0, 1, 2049, 5000, 127, 2000, 4000},
     PIPE, "kblock_ragged_mixtral_dw_down", 0},
    {"kblock_mixtral_dw_gate_up_tma_pp", FP8KTP(8, 28672, 4096), 1, 0, U8(2048), PIPE, "kblock_mixtral_dw_gate_up_tma",
     0},
    {"kblock_mixtral_dw_down_tma_pp", FP8KTP(8, 4096, 14336), 1, 0, U8(2048), PIPE, "kblock_mixtral_dw_down_tma", 0},
    {"kblock_bio_dw_up_tma_pp", FP8KTP(16, 5632, 1024), 1, 0, U16(1024), PIPE, "kblock_bio_dw_up_tma", 0},
    {"kblock_bio_dw_down_tma_pp", FP8KTP(16, 1024, 2816), 1, 0, U16(1024), PIPE, "kblock_bio_dw_down_tma", 0},
    /* decision 70: the per-tile cost, Mixtral's dW_gate_up with the same tokens in 4 groups of 4096 (32 stages a
     * tile, half the tiles and half the fp32 dW) */
    {"kblock_mixtral_dw_gate_up_g4_tma", FP8KT(4, 28672, 4096), 1, 0, {4096, 4096, 4096, 4096}, PIPE, NULL, 0},
};
#define NKCFG ((int)(sizeof kcfgs / sizeof *kcfgs))

/* GEMM_FP8_ONLY for the K-grouped configs: the names listed; the word "pingpong" lists the ping-pong rows and their
 * cooperative twins (decision 56's A/B in one short run) */
static int klisted(const char *only, const KCfg *c)
{
    if (!only || !*only)
        return 1;
    if (name_listed(only, c->name))
        return 1;
    if (!name_listed(only, "pingpong"))
        return 0;
    if (c->s.pingpong)
        return 1;
    for (int j = 0; j < NKCFG; j++)
        if (kcfgs[j].s.pingpong && kcfgs[j].same_as && strcmp(kcfgs[j].same_as, c->name) == 0)
            return 1;
    return 0;
}

static int kemit(const char *dir)
{
    char err[1024], path[1024];
    int bad = 0;
    const char *only = getenv("GEMM_FP8_ONLY");
    for (int i = 0; i < NKCFG; i++) {
        const KCfg *c = &kcfgs[i];
        int needed = klisted(only, c);
        for (int j = 0; j < NKCFG && !needed; j++) /* the reference of a listed config */
            needed = kcfgs[j].same_as && strcmp(kcfgs[j].same_as, c->name) == 0 && klisted(only, &kcfgs[j]);
        if (!needed)
            continue;
        if (!gemm_fp8_kgrouped_check_shape(&c->s, err, sizeof err))
            die(c->name, err);
        char *src = gemm_fp8_kgrouped_source_sched(&c->s, c->sched, "moec_gemm_fp8k", NULL);
        NvrtcOutput out;
        int ok = nvrtc_compile(src, "gemm_fp8k.cu", "sm_90a", &out, err, sizeof err);
        if (out.log && *out.log)
            nvrtc_print_log(stderr, out.log, src, "gemm_fp8k.cu");
        int serial = out.log && strstr(out.log, "serialized");
        printf("emit %-36s NVRTC %d.%d: %s, %d warnings%s, %.2f s\n", c->name, out.major, out.minor, ok ? "ok" : err,
               out.nwarnings, serial ? ", ptxas SERIALISED the wgmma" : "", out.seconds);
        bad += !ok || out.nwarnings != 0 || serial;
        if (ok) {
            snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
            FILE *f = fopen(path, "wb");
            if (!f || fwrite(out.image, 1, out.image_size, f) != out.image_size)
                die(path, "cannot write");
            fclose(f);
        }
        nvrtc_output_free(&out);
        free(src);
    }
    return bad;
}

/* the operands, quantised: codes [cols, rows_cap] and the block exponents [rows_cap / 128][cols] */
typedef struct KQ {
    unsigned char *at, *bt;   /* dY^T [N, rows_cap], X^T [K, rows_cap] */
    signed char *ea, *eb;     /* exponents, -127 .. 127 (moec_fp8_kgrouped_s_index order) */
    unsigned char *sa, *sb;   /* the scale codes the kernel gets (NaN codes past the groups) */
    size_t sa_bytes, sb_bytes;
} KQ;

typedef struct KJob {
    int cols, which, nthreads, tid, E;
    long long rows_cap;
    const int *off, *rows;
    unsigned seed;
    KQ *q;
} KJob;

/* the fp8-block scale exponent (runtime/cpu/fp8_block.c fp8b_scale_exponent): 2^-127 for an all-zero block */
static int kscale_exp(float amax)
{
    if (amax == 0.0f)
        return -127;
    int p;
    float m = frexpf(amax, &p);
    int e = p - 9 + (m > 0.875f);
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/* value (column c, padded row t) of operand `which` (0: dY, 1: X): magnitude by column and token block */
static float kgen(unsigned seed, int which, long long c, long long t, long long rows_cap)
{
    if ((c * 5 + t / 128 * 3 + which) % 29 == 7)
        return 0.0f; /* an all-zero block: scale code 0 */
    int mag = -(int)((c * 7 + t / 128 + which) % 13);
    return gen(seed, (unsigned long long)(which * 0x100000000ll + c * rows_cap + t), mag > -16 ? mag : -16);
}

/* columns tid, tid + nthreads, ... of one operand: each (column, block) by one thread from the index alone */
static void *kquantise_part(void *arg)
{
    const KJob *j = arg;
    KQ *q = j->q;
    const long long rc = j->rows_cap;
    unsigned char *codes = j->which ? q->bt : q->at, *sc = j->which ? q->sb : q->sa;
    signed char *ex = j->which ? q->eb : q->ea;
    for (long long c = j->tid; c < j->cols; c += j->nthreads) {
        for (long long t = j->off[j->E]; t < rc; t++)
            codes[c * rc + t] = 0x7F; /* NaN past the groups: never read */
        for (long long t = j->off[j->E]; t < rc; t += 128)
            sc[moec_fp8_kgrouped_s_index(t, c, j->cols)] = 0xFF;
        for (int g = 0; g < j->E; g++)
            for (long long t0 = j->off[g]; t0 < j->off[g + 1]; t0 += 128) {
                float v[128], amax = 0.0f;
                for (int i = 0; i < 128; i++) {
                    long long t = t0 + i;
                    v[i] = t < j->off[g] + j->rows[g] ? kgen(j->seed, j->which, c, t, rc) : 0.0f;
                    amax = fmaxf(amax, fabsf(v[i]));
                }
                int e = kscale_exp(amax);
                for (int i = 0; i < 128; i++)
                    codes[c * rc + t0 + i] = (unsigned char)moec_e4m3_encode(ldexpf(v[i], -e));
                long long si = moec_fp8_kgrouped_s_index(t0, c, j->cols);
                ex[si] = (signed char)e;
                sc[si] = (unsigned char)(e + 127);
            }
    }
    return NULL;
}

static void kquantise(const GemmFp8Shape *s, long long rows_cap, const int *off, const int *rows, unsigned seed, KQ *q)
{
    const long long nblk = (rows_cap + 127) / 128;
    q->at = malloc((size_t)s->N * rows_cap);
    q->bt = malloc((size_t)s->K * rows_cap);
    q->sa_bytes = (size_t)(nblk * s->N);
    q->sb_bytes = (size_t)(nblk * s->K);
    q->ea = calloc(q->sa_bytes, 1);
    q->eb = calloc(q->sb_bytes, 1);
    q->sa = calloc(q->sa_bytes, 1);
    q->sb = calloc(q->sb_bytes, 1);
    if (!q->at || !q->bt || !q->ea || !q->eb || !q->sa || !q->sb)
        die("quantise", "out of host memory");
    enum { MAXT = 64 };
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = nproc < 1 ? 1 : nproc > MAXT ? MAXT : (int)nproc;
    for (int which = 0; which < 2; which++) {
        pthread_t th[MAXT];
        KJob jobs[MAXT];
        for (int t = 0; t < nt; t++) {
            jobs[t] = (KJob){which ? s->K : s->N, which, nt, t, s->E, rows_cap, off, rows, seed, q};
            if (t > 0 && pthread_create(&th[t], NULL, kquantise_part, &jobs[t]) != 0)
                die("quantise", "pthread_create failed");
        }
        kquantise_part(&jobs[0]);
        for (int t = 1; t < nt; t++)
            pthread_join(th[t], NULL);
    }
}

static void kfree(KQ *q)
{
    free(q->at);
    free(q->bt);
    free(q->ea);
    free(q->eb);
    free(q->sa);
    free(q->sb);
}

/* dW[g][n][k] against the double sum of the scaled definition */
static void kcheck_one(const GemmFp8Shape *s, const KQ *q, const int *off, long long rows_cap, const float *dw, int g,
                       int n, int k, Stats *st)
{
    double sum = 0, sabs = 0;
    int blocks = 0;
    for (long long t0 = off[g]; t0 < off[g + 1]; t0 += 128, blocks++) {
        const int ea = q->ea[moec_fp8_kgrouped_s_index(t0, n, s->N)], eb = q->eb[moec_fp8_kgrouped_s_index(t0, k, s->K)];
        const double sc = ldexp(1.0, ea + eb);
        double p = 0, pa = 0;
        for (long long t = t0; t < t0 + 128; t++) {
            double x = (double)lut[q->at[(long long)n * rows_cap + t]] * lut[q->bt[(long long)k * rows_cap + t]];
            p += x;
            pa += fabs(x);
        }
        sum += p * sc;
        sabs += pa * sc;
    }
    double got = dw[((long long)g * s->N + n) * s->K + k];
    double tol = ldexp(sabs, -10) + blocks * ldexp(sabs, -23);
    double e = fabs(got - sum);
    st->n++;
    if (got != got) {
        st->nan++;
        st->bad++;
        return;
    }
    st->bad += e > tol;
    if (tol > 0 && e / tol > st->max_ratio)
        st->max_ratio = e / tol;
    st->err2 += e * e;
    st->ref2 += sum * sum;
}

static void kverify(const KCfg *c, const KQ *q, const int *off, long long rows_cap, const float *dw, unsigned seed,
                    Result *res)
{
    const GemmFp8Shape *s = &c->s;
    Stats st = {0};
    rng_state = 0x9E3779B97F4A7C15ull ^ seed;
    for (int g = 0; g < s->E; g++) {
        if (c->full || off[g + 1] == off[g]) { /* every element; an empty group's are exactly 0 (tol 0) */
            for (int n = 0; n < s->N; n++)
                for (int k = 0; k < s->K; k++)
                    kcheck_one(s, q, off, rows_cap, dw, g, n, k, &st);
            continue;
        }
        for (int pi = 0; pi < 2; pi++)
            for (int j = 0; j < 256; j++)
                kcheck_one(s, q, off, rows_cap, dw, g, pi ? s->N - 1 : 0, (int)(rng_next() % (unsigned)s->K), &st);
    }
    if (!c->full)
        for (int i = 0; i < 2048; i++) {
            int g = (int)(rng_next() % (unsigned)s->E);
            kcheck_one(s, q, off, rows_cap, dw, g, (int)(rng_next() % (unsigned)s->N), (int)(rng_next() % (unsigned)s->K),
                       &st);
        }
    res->normwise = st.ref2 > 0 ? sqrt(st.err2 / st.ref2) : 0;
    res->max_ratio = st.max_ratio;
    res->pass = st.bad == 0 && res->normwise <= ldexp(1.0, -11);
    res->bad = st.bad;
    res->checked = st.n;
}

static void kgroups(const KCfg *c, int *off, long long *real, long long *rows_cap)
{
    off[0] = 0;
    *real = 0;
    for (int g = 0; g < c->s.E; g++) {
        off[g + 1] = off[g] + (c->rows[g] + 127) / 128 * 128;
        *real += c->rows[g];
    }
    /* the checked configs: a multiple of 16, not of 128 (rows past the groups, a partial 128 block: every TMA row of
     * the transposed operands then starts 16-byte aligned only); the timed ones: a multiple of 128, as the plans'
     * rows_cap (decision 70: the unaligned rows cost the Mixtral dW_gate_up 30% on an H100, 598 against 861 TFLOP/s) */
    *rows_cap = off[c->s.E] + (c->timed ? 128 : 80);
}

static const KCfg *kcfg_named(const char *name)
{
    for (int i = 0; i < NKCFG; i++)
        if (strcmp(kcfgs[i].name, name) == 0)
            return &kcfgs[i];
    die(name, "no such K-grouped config");
    return NULL;
}

/* config c's kernel (DIR/NAME.cubin) once on the operands already on the device, dW poisoned with NaN first; dW
 * copied to out */
static void klaunch_into(const KCfg *c, const char *dir, int sms, CUdeviceptr A, CUdeviceptr B, CUdeviceptr D,
                         CUdeviceptr SA, CUdeviceptr SB, CUdeviceptr OFF, long long rows_cap, size_t dbytes, float *out)
{
    char err[512], path[1024];
    const GemmFp8Shape *s = &c->s;
    snprintf(path, sizeof path, "%s/%s.cubin", dir, c->name);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUmodule mod;
    CUfunction fn;
    ck(cu.cuModuleLoadData(&mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, mod, "moec_gemm_fp8k"), "cuModuleGetFunction");
    int smem = gemm_fp8_kgrouped_smem_bytes(s);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute");
    CUtensorMap ta, tb, tdw;
    if (!gemm_fp8_kgrouped_tensor_maps(s, A, B, rows_cap, &ta, &tb, err, sizeof err))
        die(c->name, err);
    const int tma_epi = s->out == GEMM_FP8_OUT_F32_TMA;
    if (tma_epi && !gemm_fp8_kgrouped_dw_map(s, D, &tdw, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args_regs[] = {&ta, &tb, &D, &SA, &SB, &OFF, &rc_int};
    void *args_tma[] = {&ta, &tb, &tdw, &D, &SA, &SB, &OFF, &rc_int};
    ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison dW");
    ck(cu.cuLaunchKernel(fn, (unsigned)(c->grid ? c->grid : sms), 1, 1, 384, 1, 1, (unsigned)smem, NULL,
                         tma_epi ? args_tma : args_regs,
                         NULL),
       "launch");
    ck(cu.cuCtxSynchronize(), "reference run");
    ck(cu.cuMemcpyDtoH(out, D, dbytes), "dW DtoH");
    cu.cuModuleUnload(mod);
}

static void krun_one(const KCfg *c, const char *dir, int sms, unsigned seed, Result *res)
{
    char err[512], path[1024];
    const GemmFp8Shape *s = &c->s;
    const int E = s->E, N = s->N, K = s->K, grid = c->grid ? c->grid : sms;
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
    ck(cu.cuModuleGetFunction(&fn, mod, "moec_gemm_fp8k"), "cuModuleGetFunction");
    int smem = gemm_fp8_kgrouped_smem_bytes(s);
    ck(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem), "cuFuncSetAttribute");
    cu.cuFuncGetAttribute(&res->regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    cu.cuFuncGetAttribute(&res->local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
    int off[33];
    long long real, rows_cap;
    kgroups(c, off, &real, &rows_cap);
    clock_t t0 = clock();
    KQ q;
    kquantise(s, rows_cap, off, c->rows, seed, &q);
    double qsec = (double)(clock() - t0) / CLOCKS_PER_SEC;
    size_t dbytes = (size_t)E * N * K * 4;
    CUdeviceptr A, B, D, SA, SB, OFF;
    ck(cu.cuMemAlloc(&A, (size_t)N * rows_cap), "alloc dY^T");
    ck(cu.cuMemAlloc(&B, (size_t)K * rows_cap), "alloc X^T");
    ck(cu.cuMemAlloc(&D, dbytes), "alloc dW");
    ck(cu.cuMemAlloc(&SA, q.sa_bytes), "alloc sa");
    ck(cu.cuMemAlloc(&SB, q.sb_bytes), "alloc sb");
    ck(cu.cuMemAlloc(&OFF, sizeof(int) * (size_t)(E + 1)), "alloc offsets");
    ck(cu.cuMemcpyHtoD(A, q.at, (size_t)N * rows_cap), "dY^T HtoD");
    ck(cu.cuMemcpyHtoD(B, q.bt, (size_t)K * rows_cap), "X^T HtoD");
    ck(cu.cuMemcpyHtoD(SA, q.sa, q.sa_bytes), "sa HtoD");
    ck(cu.cuMemcpyHtoD(SB, q.sb, q.sb_bytes), "sb HtoD");
    ck(cu.cuMemcpyHtoD(OFF, off, sizeof(int) * (size_t)(E + 1)), "offsets HtoD");
    ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison dW");
    CUtensorMap ta, tb, tdw;
    if (!gemm_fp8_kgrouped_tensor_maps(s, A, B, rows_cap, &ta, &tb, err, sizeof err))
        die(c->name, err);
    const int tma_epi = s->out == GEMM_FP8_OUT_F32_TMA;
    if (tma_epi && !gemm_fp8_kgrouped_dw_map(s, D, &tdw, err, sizeof err))
        die(c->name, err);
    int rc_int = (int)rows_cap;
    void *args_regs[] = {&ta, &tb, &D, &SA, &SB, &OFF, &rc_int};
    void *args_tma[] = {&ta, &tb, &tdw, &D, &SA, &SB, &OFF, &rc_int};
    void **args = tma_epi ? args_tma : args_regs;
    ck(cu.cuLaunchKernel(fn, (unsigned)grid, 1, 1, 384, 1, 1, (unsigned)smem, NULL, args, NULL), "launch");
    ck(cu.cuCtxSynchronize(), "run 1");
    float *d1 = malloc(dbytes), *d2 = malloc(dbytes);
    if (!d1 || !d2)
        die(c->name, "out of host memory");
    ck(cu.cuMemcpyDtoH(d1, D, dbytes), "dW DtoH");
    if (c->timed) {
        CUevent e0, e1;
        ck(cu.cuEventCreate(&e0, CU_EVENT_DEFAULT), "event");
        ck(cu.cuEventCreate(&e1, CU_EVENT_DEFAULT), "event");
        enum { WARM = 3, REPS = 20 };
        float t[REPS];
        for (int r = 0; r < WARM + REPS; r++) {
            ck(cu.cuEventRecord(e0, NULL), "record");
            ck(cu.cuLaunchKernel(fn, (unsigned)grid, 1, 1, 384, 1, 1, (unsigned)smem, NULL, args, NULL), "launch");
            ck(cu.cuEventRecord(e1, NULL), "record");
            ck(cu.cuEventSynchronize(e1), "timed run");
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
        ck(cu.cuMemsetD32Async(D, 0xFFFFFFFFu, dbytes / 4, NULL), "poison dW");
        ck(cu.cuLaunchKernel(fn, (unsigned)grid, 1, 1, 384, 1, 1, (unsigned)smem, NULL, args, NULL), "launch");
    }
    ck(cu.cuCtxSynchronize(), "last run");
    ck(cu.cuMemcpyDtoH(d2, D, dbytes), "dW DtoH");
    res->deterministic = memcmp(d1, d2, dbytes) == 0;
    kverify(c, &q, off, rows_cap, d1, seed, res);
    res->pass = res->pass && res->deterministic;
    if (c->same_as) {
        const KCfg *ref = kcfg_named(c->same_as);
        if (ref->s.E != E || ref->s.N != N || ref->s.K != K || memcmp(ref->rows, c->rows, sizeof c->rows) != 0)
            die(c->name, "its same_as config has another shape or other groups");
        klaunch_into(ref, dir, sms, A, B, D, SA, SB, OFF, rows_cap, dbytes, d2);
        long long ndiff = 0;
        for (size_t i = 0; i < dbytes / 4; i++)
            ndiff += memcmp(&d1[i], &d2[i], 4) != 0;
        res->same = ndiff == 0 ? 1 : -1;
        res->pass = res->pass && ndiff == 0;
        printf("%-36s against %s on the same inputs: %lld of %zu elements differ in some bit\n", c->name, ref->name,
               ndiff, dbytes / 4);
    }
    printf("%-36s fp8-block wgrad E %2d N %5d K %5d, %s, %d stages, %d blocks, %s, promotion %s: rows %lld (padded %d, "
           "rows_cap %lld), regs %d, local %d B, smem %d B, quantised in %.1f s\n",
           c->name, E, N, K, s->pingpong ? "ping-pong 64 x 128" : "cooperative 128 x 128", s->stages, grid,
           tma_epi ? "TMA stores" : "stores from registers",
           c->sched == GEMM_FP8_SCHED_PAIRS ? "pairs" : "pipelined", real, off[E], rows_cap, res->regs, res->local, smem,
           qsec);
    printf("  check %lld elements: %lld over tolerance (NaN included); max err/tol %.3f, normwise %.3g (bound %.3g); two "
           "runs bit-identical: %s%s%s%s -> %s\n",
           res->checked, res->bad, res->max_ratio, res->normwise, ldexp(1.0, -11), res->deterministic ? "yes" : "NO",
           c->same_as ? "; bit-identical to " : "", c->same_as ? c->same_as : "",
           !c->same_as ? "" : res->same == 1 ? ": yes" : ": NO", res->pass ? "PASS" : "FAIL");
    if (res->timed)
        printf("  time: median %.4f ms of 20, %.1f TFLOP/s (2 T N K, T = %lld real rows)\n", res->ms, res->tflops, real);
    fflush(stdout);
    free(d1);
    free(d2);
    kfree(&q);
    cu.cuMemFree(A);
    cu.cuMemFree(B);
    cu.cuMemFree(D);
    cu.cuMemFree(SA);
    cu.cuMemFree(SB);
    cu.cuMemFree(OFF);
    cu.cuModuleUnload(mod);
}

/* the K-grouped configs (after the M-grouped ones in --run): their table; the number failed */
static int krun_all(const char *dir, int sms, unsigned seed, const char *only)
{
    Result res[NKCFG];
    int n = 0, fails = 0;
    for (int i = 0; i < NKCFG; i++) {
        if (!klisted(only, &kcfgs[i]))
            continue;
        krun_one(&kcfgs[i], dir, sms, seed + 1000u + (unsigned)i, &res[n]);
        fails += !res[n].pass;
        n++;
    }
    if (!n)
        return 0;
    printf("\n%-36s %5s %5s %9s %8s %6s %9s %8s\n", "config (K-grouped)", "regs", "local", "normwise", "err/tol", "check",
           "ms", "TFLOP/s");
    for (int i = 0; i < n; i++) {
        printf("%-36s %5d %5d %9.2e %8.3f %6s", res[i].name, res[i].regs, res[i].local, res[i].normwise,
               res[i].max_ratio, res[i].pass ? "PASS" : "FAIL");
        if (res[i].timed)
            printf(" %9.4f %8.1f\n", res[i].ms, res[i].tflops);
        else
            printf(" %9s %8s\n", "-", "-");
    }
    return fails;
}

/* --selftest for the K-grouped configs: the kernel's arithmetic emulated on the CPU from the arrays the GPU
 * gets (per 128-token block an fp32 sum of the exact products, then acc = fmaf(tmp 2^eb, 2^ea, acc)) must
 * pass the checker; a scale code off by one (one column's block) and a group's rows taken from the next
 * group must fail it. The quantiser is also checked against the definition: every block's largest |code|
 * is in [224, 448] (a scaled amax in (224, 448], rounded) unless the block is all zero (code 0 scale). */
static void kemulate(const GemmFp8Shape *s, const KQ *q, const int *off, long long rows_cap, float *dw, int shift)
{
    for (int g = 0; g < s->E; g++)
        for (int n = 0; n < s->N; n++)
            for (int k = 0; k < s->K; k++) {
                float acc = 0.0f;
                for (long long t0 = off[g]; t0 < off[g + 1]; t0 += 128) {
                    long long u0 = shift && g == 2 && t0 + 128 <= rows_cap - 128 ? t0 + 128 : t0;
                    float tmp = 0.0f;
                    for (long long t = u0; t < u0 + 128; t++)
                        tmp += lut[q->at[(long long)n * rows_cap + t]] * lut[q->bt[(long long)k * rows_cap + t]];
                    float a = e8m0f(q->sa[moec_fp8_kgrouped_s_index(u0, n, s->N)]);
                    float b = e8m0f(q->sb[moec_fp8_kgrouped_s_index(u0, k, s->K)]);
                    acc = fmaf(tmp * b, a, acc);
                }
                dw[((long long)g * s->N + n) * s->K + k] = acc;
            }
}

static int kselftest(void)
{
    int fails = 0;
    for (int i = 0; i < NKCFG; i++) {
        const KCfg *c = &kcfgs[i];
        if (!c->full)
            continue;
        const GemmFp8Shape *s = &c->s;
        int off[33];
        long long real, rows_cap;
        kgroups(c, off, &real, &rows_cap);
        KQ q;
        kquantise(s, rows_cap, off, c->rows, 21, &q);
        int qbad = 0;
        for (int g = 0; g < s->E; g++)
            for (long long t0 = off[g]; t0 < off[g + 1]; t0 += 128)
                for (int which = 0; which < 2; which++)
                    for (int col = 0; col < (which ? s->K : s->N); col++) {
                        const unsigned char *codes = which ? q.bt : q.at;
                        float m = 0;
                        for (long long t = t0; t < t0 + 128; t++)
                            m = fmaxf(m, fabsf(lut[codes[(long long)col * rows_cap + t]]));
                        int code = (which ? q.sb : q.sa)[moec_fp8_kgrouped_s_index(t0, col, which ? s->K : s->N)];
                        qbad += m == 0 ? code != 0 : !(m >= 224 && m <= 448); /* (224, 448], 224 by rounding */
                    }
        float *dw = malloc((size_t)s->E * s->N * s->K * 4);
        if (!dw)
            die("selftest", "out of host memory");
        Result ok, bad_scale, bad_rows;
        kemulate(s, &q, off, rows_cap, dw, 0);
        kverify(c, &q, off, rows_cap, dw, 1, &ok);
        /* the CPU reference (runtime/cpu/fp8_block.c): each group's dY^T [N, T_g] and X^T [K, T_g] (its real
         * rows) quantised 1 x 128 along the tokens by fp8b_quantize give the same codes and scale codes, and
         * fp8b_gemm_ref on them the emulated kernel's dW bit for bit (the padded zero rows add +0) */
        long long refbad = 0, refn = 0;
        for (int g = 0; g < s->E; g++) {
            const long long T = c->rows[g], tb = (T + 127) / 128;
            if (!T)
                continue;
            unsigned char *cv[2], *cs[2];
            for (int which = 0; which < 2; which++) {
                const int cols = which ? s->K : s->N;
                float *x = malloc(sizeof(float) * (size_t)(cols * T));
                cv[which] = malloc((size_t)(cols * T));
                cs[which] = malloc((size_t)(cols * tb));
                if (!x || !cv[which] || !cs[which])
                    die("selftest", "out of host memory");
                for (long long col = 0; col < cols; col++)
                    for (long long t = 0; t < T; t++)
                        x[col * T + t] = kgen(21, which, col, off[g] + t, rows_cap);
                if (fp8b_quantize(x, cols, T, FP8B_ROWWISE, cv[which], cs[which]) != FP8B_OK)
                    die("selftest", "fp8b_quantize failed");
                const unsigned char *codes = which ? q.bt : q.at, *sc = which ? q.sb : q.sa;
                for (long long col = 0; col < cols; col++) {
                    for (long long t = 0; t < T; t++)
                        refbad += cv[which][col * T + t] != codes[col * rows_cap + off[g] + t];
                    for (long long b = 0; b < tb; b++)
                        refbad += cs[which][col * tb + b] != sc[moec_fp8_kgrouped_s_index(off[g] + 128 * b, col, cols)];
                }
                free(x);
            }
            float *ref = malloc(sizeof(float) * (size_t)s->N * s->K);
            if (!ref)
                die("selftest", "out of host memory");
            if (fp8b_gemm_ref(cv[0], cs[0], cv[1], cs[1], FP8B_ROWWISE, s->N, s->K, T, ref, NULL) != FP8B_OK)
                die("selftest", "fp8b_gemm_ref failed");
            for (long long i = 0; i < (long long)s->N * s->K; i++, refn++)
                refbad += ref[i] != dw[(long long)g * s->N * s->K + i];
            free(ref);
            for (int which = 0; which < 2; which++) {
                free(cv[which]);
                free(cs[which]);
            }
        }
        /* the scale code of dY's one block in the first group of 1 .. 128 rows, one higher, in a column whose
         * first value there is not zero */
        int g1 = 0, n1 = 0;
        while (g1 < s->E - 1 && !(c->rows[g1] >= 1 && c->rows[g1] <= 128))
            g1++;
        while (n1 < s->N - 1 && lut[q.at[(long long)n1 * rows_cap + off[g1]]] == 0)
            n1++;
        unsigned char *code = q.sa + moec_fp8_kgrouped_s_index(off[g1], n1, s->N);
        (*code)++;
        kemulate(s, &q, off, rows_cap, dw, 0);
        (*code)--;
        kverify(c, &q, off, rows_cap, dw, 1, &bad_scale);
        kemulate(s, &q, off, rows_cap, dw, 1); /* group 2 reads the 128 rows after its own */
        kverify(c, &q, off, rows_cap, dw, 1, &bad_rows);
        int good = qbad == 0 && refbad == 0 && ok.pass && !bad_scale.pass && !bad_rows.pass;
        printf("selftest %-22s quantiser: %d blocks off the rule; against fp8b_quantize + fp8b_gemm_ref: %lld of %lld "
               "differ; emulated: normwise %.3g, max err/tol %.3f (%s); a "
               "scale code +1: %lld elements over tolerance (%s); shifted rows: %lld over (%s) -> %s\n",
               c->name, qbad, refbad, refn, ok.normwise, ok.max_ratio, ok.pass ? "pass" : "FAIL", bad_scale.bad,
               bad_scale.pass ? "NOT caught" : "caught", bad_rows.bad, bad_rows.pass ? "NOT caught" : "caught",
               good ? "PASS" : "FAIL");
        fails += !good;
        free(dw);
        kfree(&q);
    }
    return fails;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--selftest") == 0)
        return selftest();
    if (argc >= 3 && strcmp(argv[1], "--emit") == 0)
        return emit(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "--run") == 0) {
        unsigned seed = argc >= 4 ? (unsigned)strtoul(argv[3], NULL, 10) : (unsigned)time(NULL);
        return run(argv[2], seed);
    }
    fprintf(stderr, "usage: gemm_fp8 --emit DIR | --run DIR [SEED] | --selftest\n");
    return 2;
}
