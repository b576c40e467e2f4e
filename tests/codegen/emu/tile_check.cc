// tile_check.cc - the register-blocked GEMM tiles of codegen/prelude.cuh
// against the reference 16 x 16 tile, bit for bit, on the CPU emulator
// (tests/codegen/tile.test; built by tile_run.sh with tile_kernels.cu).
//
// 1. Single tiles (64 x 64, 16 x 64, 32 x 32, 64 x 16, 16 x 16 with 16 x 16
//    threads; 16 x 128, 16 x 256 with 4 x 64, 16 x 128 with 8 x 32) with run-time shapes and strides: M, N, K not multiples of 16
//    or 64, K = 0, 1, 15, 16, 17, 100, both layouts of A and of B, gaps
//    between rows filled with NaN (a read past K or past the tile shows),
//    C's gaps holding a sentinel that must survive. Every output must equal
//    the reference tile's and the sequence acc = fmaf(a_k, b_k, acc) over
//    k < K rounded up to 16 (zeros past K) computed here on the host.
//    Rows of tiny values make products that round to -0.0f, so the
//    padding's fmaf(0, 0, -0) = +0 is exercised.
// 2. moec::gemm in the emitters' three layouts, grouped_gemm (both forms)
//    and grouped_gemm_wgrad with empty groups and padding rows, each with
//    the three tiles the emitters choose from (64 x 64, 32 x 32, 16 x 16),
//    against the GEMMs as they were written with gemm_tile16, on shapes the
//    emitters put on either side of their threshold (CG_GEMM_MIN_BLOCKS).
// 3. The fused MLP's GEMMs (16 x 128 tiles in 16-row tiles) against the
//    unfused grouped_gemm on the same operands.
// Prints a summary; exit 1 on any difference.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" int emu_launch(const char *name, long long grid, int block, void **args);

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float value(void)
{
    double u = (double)(next() >> 11) / 9007199254740992.0;
    uint64_t kind = next() % 20;
    if (kind == 0)
        return 0.0f;
    if (kind == 1)
        return -0.0f;
    if (kind == 2)
        return u < 0.5 ? 1e-30f : -1e-30f; /* products round to (signed) zero */
    return (float)(2.0 * u - 1.0);
}

static const uint32_t SENTINEL = 0x7fc0deadu;
static float nanf_(void)
{
    float f;
    uint32_t u = 0x7fc00001u;
    memcpy(&f, &u, 4);
    return f;
}
static float sentinel(void)
{
    float f;
    memcpy(&f, &SENTINEL, 4);
    return f;
}
static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* the sequence every GEMM tile computes */
static float seq(const float *A, long long sam, long long sak, const float *B, long long sbk, long long sbn,
                 long long m, long long n, long long K, int pad)
{
    float acc = 0.0f;
    long long K16 = pad ? (K + 15) / 16 * 16 : K;
    for (long long k = 0; k < K16; k++) {
        float a = k < K ? A[m * sam + k * sak] : 0.0f, b = k < K ? B[k * sbk + n * sbn] : 0.0f;
        acc = fmaf(a, b, acc);
    }
    return acc;
}

static int failures, signed_zero_cases;

/* every valid C element against the host sequence */
static void check_seq(const char *what, const float *C, long long ldc, const float *A, long long sam, long long sak,
                      const float *B, long long sbk, long long sbn, long long M, long long N, long long K)
{
    int bad = 0;
    for (long long m = 0; m < M; m++)
        for (long long n = 0; n < N; n++) {
            float want = seq(A, sam, sak, B, sbk, sbn, m, n, K, 1);
            if (bits(want) == 0 && bits(seq(A, sam, sak, B, sbk, sbn, m, n, K, 0)) == 0x80000000u)
                signed_zero_cases++;
            if (bits(C[m * ldc + n]) != bits(want) && bad++ < 3)
                fprintf(stderr, "%s: C[%lld, %lld] = %a (0x%08x), the sequence gives %a (0x%08x)\n", what, m, n,
                        C[m * ldc + n], bits(C[m * ldc + n]), want, bits(want));
        }
    failures += bad != 0;
}

static void check_same(const char *what, const float *got, const float *ref, long long count)
{
    int bad = 0;
    for (long long i = 0; i < count; i++)
        if (bits(got[i]) != bits(ref[i]) && bad++ < 3)
            fprintf(stderr, "%s: element %lld is %a (0x%08x), the reference %a (0x%08x)\n", what, i, got[i],
                    bits(got[i]), ref[i], bits(ref[i]));
    failures += bad != 0;
}


/* ---- 1. single tiles */
static int tile_runs;
static void tile_case(long long M, long long N, long long K, int la, int lb, long long gap, int tiny)
{
    long long sam = la ? 1 : K + gap, sak = la ? M + gap : 1;
    long long sbk = lb ? N + gap : 1, sbn = lb ? 1 : K + gap, ldc = N + gap;
    long long na = (M + gap) * (K + gap) + 64, nb = (N + gap) * (K + gap) + 64, nc = M * ldc + 64;
    std::vector<float> A((size_t)na, nanf_()), B((size_t)nb, nanf_());
    for (long long m = 0; m < M; m++)
        for (long long k = 0; k < K; k++)
            A[(size_t)(m * sam + k * sak)] = tiny && m == 0 ? -1e-30f : value();
    for (long long k = 0; k < K; k++)
        for (long long n = 0; n < N; n++)
            B[(size_t)(k * sbk + n * sbn)] = tiny && n == 0 ? 1e-30f : value();
    long long p[8] = {M, N, K, sam, sak, sbk, sbn, ldc};
    std::vector<float> Cref((size_t)nc, sentinel());
    void *args[4] = {Cref.data(), A.data(), B.data(), p};
    emu_launch("t_ref", 1 + (M + N + K) % 3, 256, args);
    char what[160];
    snprintf(what, sizeof what, "gemm_tile16 M %lld N %lld K %lld %s %s gap %lld", M, N, K, la ? "A^T" : "A",
             lb ? "B" : "B^T", gap);
    check_seq(what, Cref.data(), ldc, A.data(), sam, sak, B.data(), sbk, sbn, M, N, K);
    const char *names[] = {"t_44", "t_14", "t_22", "t_41", "t_11", "t_424", "t_444", "t_248"};
    for (const char *name : names) {
        std::vector<float> C((size_t)nc, sentinel());
        args[0] = C.data();
        emu_launch(name, 1 + (M + K) % 4, 256, args);
        snprintf(what, sizeof what, "%s M %lld N %lld K %lld %s %s gap %lld", name, M, N, K, la ? "A^T" : "A",
                 lb ? "B" : "B^T", gap);
        check_same(what, C.data(), Cref.data(), nc);
        check_seq(what, C.data(), ldc, A.data(), sam, sak, B.data(), sbk, sbn, M, N, K);
        tile_runs++;
    }
}

/* ---- 2. the GEMMs, with each tile side the emitters pick from (64, 32, 16) */
static int gemm_runs;
static const char *const TILES[] = {"new", "n32", "n16"};
static const char *const TILE_NAMES[] = {"64 x 64", "32 x 32", "16 x 16"};

static void gemm_case(const char *s, long long M, long long N, long long K)
{
    const char *forms[] = {"fwd", "dx", "dw"};
    for (int f = 0; f < 3; f++) {
        std::vector<float> A((size_t)(M * K)), B((size_t)(K * N)), Cref((size_t)(M * N), sentinel());
        for (float &v : A)
            v = value();
        for (float &v : B)
            v = value();
        char name[64], what[128];
        void *args[3] = {Cref.data(), A.data(), B.data()};
        snprintf(name, sizeof name, "ref_%s_%s", s, forms[f]);
        emu_launch(name, 5, 256, args);
        for (int t = 0; t < 3; t++) {
            std::vector<float> C((size_t)(M * N), sentinel());
            args[0] = C.data();
            snprintf(name, sizeof name, "%s_%s_%s", TILES[t], s, forms[f]);
            emu_launch(name, 3 + t, 256, args);
            snprintf(what, sizeof what, "moec::gemm %s_%s (%s)", s, forms[f], TILE_NAMES[t]);
            check_same(what, C.data(), Cref.data(), M * N);
            long long sam = f == 2 ? 1 : K, sak = f == 2 ? M : 1, sbk = f == 0 ? 1 : N, sbn = f == 0 ? K : 1;
            check_seq(what, C.data(), N, A.data(), sam, sak, B.data(), sbk, sbn, M, N, K);
            gemm_runs++;
        }
    }
}

static void grouped_case(const char *s, int E, long long R, long long K, long long N, const std::vector<int> &splits)
{
    const char *forms[] = {"fwd", "dx", "dw"};
    std::vector<long long> start((size_t)E + 1, 0);
    for (int e = 0; e < E; e++)
        start[(size_t)e + 1] = start[(size_t)e] + splits[(size_t)e];
    for (int f = 0; f < 3; f++) {
        long long nc = f == 2 ? E * K * N : R * N;
        std::vector<float> A((size_t)(R * K)), B((size_t)(f == 2 ? R * N : E * K * N)), Cref((size_t)nc, sentinel());
        for (float &v : A)
            v = value();
        for (float &v : B)
            v = value();
        std::vector<int> sp(splits);
        char name[64], what[160];
        void *args[4] = {Cref.data(), A.data(), B.data(), sp.data()};
        snprintf(name, sizeof name, "ref_%s_%s", s, forms[f]);
        emu_launch(name, 4, 256, args);
        for (int t = 0; t < 3; t++) {
            std::vector<float> C((size_t)nc, sentinel());
            args[0] = C.data();
            snprintf(name, sizeof name, "%s_%s_%s", TILES[t], s, forms[f]);
            emu_launch(name, 3 + t, 256, args);
            snprintf(what, sizeof what, "%s %s_%s (%s) splits %d %d %d%s",
                     f == 2 ? "grouped_gemm_wgrad" : "grouped_gemm", s, forms[f], TILE_NAMES[t], splits[0], splits[1],
                     splits[2], E > 3 ? " ..." : "");
            check_same(what, C.data(), Cref.data(), nc);
            for (int e = 0; e < E; e++) {
                long long r0 = start[(size_t)e], rows = splits[(size_t)e];
                if (f == 0)
                    check_seq(what, C.data() + r0 * N, N, A.data() + r0 * K, K, 1, B.data() + e * N * K, 1, K, rows, N,
                              K);
                else if (f == 1)
                    check_seq(what, C.data() + r0 * N, N, A.data() + r0 * K, K, 1, B.data() + e * K * N, N, 1, rows, N,
                              K);
                else
                    check_seq(what, C.data() + e * K * N, N, A.data() + r0 * K, 1, K, B.data() + r0 * N, N, 1, K, N,
                              rows);
            }
            if (f < 2)
                for (long long i = start[(size_t)E] * N; i < R * N; i++)
                    if (bits(C[(size_t)i]) != 0) {
                        fprintf(stderr, "%s: padding element %lld is not +0\n", what, i);
                        failures++;
                        break;
                    }
            gemm_runs++;
        }
    }
}

/* ---- 3. the fused MLP's GEMMs against grouped_gemm */
static int mlp_runs;
static void mlp_case(const std::vector<int> &splits)
{
    const int E = 3;
    const long long R = 100, H = 70, F = 40;
    long long used = 0;
    for (int s : splits)
        used += s;
    auto buf = [](long long n, bool random) {
        std::vector<float> v((size_t)n, sentinel());
        if (random)
            for (float &x : v)
                x = value();
        return v;
    };
    std::vector<float> xs = buf(R * H, 1), w1 = buf(E * 2 * F * H, 1), w2 = buf(E * H * F, 1), p = buf(R, 1),
                       dy = buf(R * H, 1);
    std::vector<float> y = buf(R * H, 0), h = buf(R * 2 * F, 0), a = buf(R * F, 0), out = buf(R * H + R, 0),
                       da = buf(R * F, 0), dh = buf(R * 2 * F, 0), h2 = buf(R * 2 * F, 0), y2 = buf(R * H, 0),
                       da2 = buf(R * F, 0), dxs2 = buf(R * H, 0);
    std::vector<int> sp(splits);
    void *fwd[] = {y.data(), h.data(), a.data(), xs.data(), w1.data(), w2.data(), sp.data(), p.data()};
    emu_launch("mlp_fwd", 3, 256, fwd);
    void *gh[] = {h2.data(), xs.data(), w1.data(), sp.data()};
    emu_launch("mlp_h", 3, 256, gh);
    check_same("grouped_mlp_fwd h", h.data(), h2.data(), used * 2 * F);
    void *gy[] = {y2.data(), a.data(), w2.data(), sp.data()};
    emu_launch("mlp_y", 3, 256, gy);
    check_same("grouped_mlp_fwd y", y.data(), y2.data(), R * H);
    std::vector<float> hb = buf(R * 2 * F, 0);
    void *bwd[] = {out.data(), out.data() + R * H, hb.data(), a.data(), da.data(), dh.data(), dy.data(), xs.data(),
                   w1.data(), w2.data(), sp.data(), p.data()};
    emu_launch("mlp_bwd_rows", 3, 256, bwd);
    check_same("grouped_mlp_bwd_rows h", hb.data(), h2.data(), used * 2 * F);
    void *gda[] = {da2.data(), dy.data(), w2.data(), sp.data()};
    emu_launch("mlp_da", 3, 256, gda);
    check_same("grouped_mlp_bwd_rows da", da.data(), da2.data(), used * F);
    void *gdx[] = {dxs2.data(), dh.data(), w1.data(), sp.data()};
    emu_launch("mlp_dxs", 3, 256, gdx);
    check_same("grouped_mlp_bwd_rows dxs", out.data(), dxs2.data(), R * H);
    mlp_runs++;
}

int main(void)
{
    static const long long shapes[][3] = {{1, 1, 1},     {15, 17, 1},  {17, 15, 15},  {64, 64, 16}, {65, 63, 17},
                                          {100, 37, 100}, {130, 70, 33}, {16, 200, 130}, {3, 64, 0},  {70, 129, 64},
                                          {128, 128, 32}, {1, 100, 17}, {200, 1, 15}};
    int i = 0;
    for (const auto &s : shapes) {
        for (int la = 0; la < 2; la++)
            for (int lb = 0; lb < 2; lb++)
                tile_case(s[0], s[1], s[2], la, lb, i % 3, (i + la + lb) % 2 == 0);
        i++;
    }
    printf("tiles: %d runs of 8 register blocks against gemm_tile16 and the host sequence, %d with -0 turned +0 by "
           "the padding\n",
           tile_runs, signed_zero_cases);
    gemm_case("g1", 100, 70, 17);
    gemm_case("g2", 65, 130, 100);
    gemm_case("g3", 1, 15, 1);
    gemm_case("g4", 128, 64, 15);
    gemm_case("g5", 17, 200, 64);
    gemm_case("g6", 1024, 64, 64);    /* the emitters take 16 x 16 tiles */
    gemm_case("g7", 600, 480, 17);    /* 32 x 32 (80 blocks of 64 x 64, 285 of 32 x 32) */
    gemm_case("g8", 1030, 1000, 17);  /* 64 x 64 (272 blocks) */
    grouped_case("q1", 4, 200, 70, 65, {70, 0, 1, 65});
    grouped_case("q1", 4, 200, 70, 65, {0, 0, 0, 0});
    grouped_case("q1", 4, 200, 70, 65, {50, 50, 50, 50});
    grouped_case("q1", 4, 200, 70, 65, {129, 64, 0, 7});
    grouped_case("q2", 3, 130, 17, 100, {17, 64, 40});
    grouped_case("q2", 3, 130, 17, 100, {0, 130, 0});
    grouped_case("q2", 3, 130, 17, 100, {1, 1, 1});
    grouped_case("q3", 4, 1000, 17, 260, {300, 0, 517, 150});  /* 32 x 32; its wgrad 16 x 16 */
    grouped_case("q4", 4, 1000, 17, 780, {250, 250, 1, 490}); /* 64 x 64 */
    printf("gemms: %d runs (gemm, grouped_gemm, grouped_gemm_wgrad; 64 x 64, 32 x 32 and 16 x 16 tiles) against the "
           "16 x 16 reference\n",
           gemm_runs);
    mlp_case({30, 0, 50});
    mlp_case({1, 17, 64});
    mlp_case({0, 0, 100});
    printf("fused mlp: %d runs, h, y, da, dxs against grouped_gemm\n", mlp_runs);
    if (failures) {
        printf("%d checks differ\n", failures);
        return 1;
    }
    printf("all bit-identical\n");
    return 0;
}
