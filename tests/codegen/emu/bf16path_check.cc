// bf16path_check.cc - RoPE's and RMSNorm's bf16-output paths of codegen/dense_fast.cuh (decision 58) against the
// reference's expressions, bit for bit, on the CPU emulator (tests/codegen/bf16_path.test; built by
// bf16path_run.sh with bf16path_kernels.cu). The kernels compute in fp32 and keep a result only where an
// interval test proves it equal to the reference's double expression rounded to float and then to bf16; every
// other 8-element group is computed again in double. The inputs mix ordinary values with the cases the test
// must send to the double path: zeros of both signs, bf16 subnormals, values near the float range's ends,
// infinities and NaN; rope_groups_ok counts the groups that took the double path (some must).
// Prints a summary; exit 1 on any difference.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" int emu_launch(const char *name, long long grid, int block, void **args);

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
// bf16 rounding as codegen/prelude.cuh bf16_bits
static uint16_t bf16(float x)
{
    uint32_t u = u_of(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float widen(uint16_t b) { return f_of((uint32_t)b << 16); }

// a float whose kind varies: mostly ordinary, sometimes a case the fp32 path must leave to the double path
static float value(void)
{
    uint64_t k = next() % 512, m = next();
    float sign = (m & 1) ? -1.0f : 1.0f;
    switch (k) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return f_of((uint32_t)(m >> 8) & 0x807fffffu);               // subnormal (or zero)
    case 3: return sign * f_of(0x7f000000u | ((uint32_t)(m >> 9) & 0x7fffffu)); // near the top of the range
    case 4: return sign * INFINITY;
    case 5: return NAN;
    case 6: return sign * f_of(0x00800000u | ((uint32_t)(m >> 9) & 0x7fffffu)); // the smallest normals
    default: {
        int e = (int)((m >> 1) % 40) - 20; // 2^-20 .. 2^19
        return sign * ldexpf(1.0f + (float)((m >> 8) & 0xffffff) / 16777216.0f, e);
    }
    }
}

static int failures;
static long long compared;
static void compare(const char *what, const std::vector<uint16_t> &got, const std::vector<uint16_t> &want)
{
    long long bad = 0;
    for (size_t i = 0; i < got.size(); i++)
        if (got[i] != want[i]) {
            if (bad < 5)
                printf("  %s: element %zu: 0x%04x, the reference's 0x%04x\n", what, i, got[i], want[i]);
            bad++;
        }
    compared += (long long)got.size();
    if (bad) {
        printf("%s: %lld of %zu differ\n", what, bad, got.size());
        failures++;
    }
}

int main(void)
{
    // ---- RoPE: 96 rows (2 x 48 positions) of 4 heads of 32, theta 1e4 (bf16path_kernels.cu)
    const long long ROWS = 96, S = 48;
    const int H = 4, HD = 32, HALF = HD / 2;
    std::vector<double> cs(2 * S * HALF);
    std::vector<float> csf(2 * S * HALF);
    for (long long s = 0; s < S; s++)
        for (int j = 0; j < HALF; j++) {
            double ang = (double)s * pow(1e4, -2.0 * (double)j / (double)HD);
            long long i = s * HALF + j;
            cs[2 * i] = cos(ang), cs[2 * i + 1] = sin(ang);
            csf[2 * i] = (float)cs[2 * i], csf[2 * i + 1] = (float)cs[2 * i + 1];
        }
    const long long NX = ROWS * H * HD;
    long long slow_groups = 0, groups = 0;
    for (int round = 0; round < 120; round++) {
        std::vector<uint16_t> xb(NX), y(NX), want(NX);
        std::vector<float> xf(NX);
        for (long long i = 0; i < NX; i++) {
            xf[i] = round % 4 == 3 ? value() : widen(bf16(value())); // every 4th round: fp32 input
            xb[i] = bf16(xf[i]);
        }
        const bool f32_in = round % 4 == 3, neg = round % 4 == 1;
        for (long long r = 0; r < ROWS; r++)
            for (int h = 0; h < H; h++)
                for (int j = 0; j < HALF; j++) {
                    long long at = r * H * HD + h * HD + j, t = r % S * HALF + j;
                    double c = cs[2 * t], sn = neg ? -1.0 * cs[2 * t + 1] : cs[2 * t + 1];
                    double a = f32_in ? xf[at] : widen(xb[at]), b = f32_in ? xf[at + HALF] : widen(xb[at + HALF]);
                    want[at] = bf16((float)(a * c - b * sn));
                    want[at + HALF] = bf16((float)(b * c + a * sn));
                }
        void *args[4] = {y.data(), f32_in ? (void *)xf.data() : (void *)xb.data(), cs.data(), csf.data()};
        const char *k = f32_in ? "rope_f32_in_bf16_out" : neg ? "rope_dx_bf16" : "rope_bf16";
        if (!emu_launch(k, 3, 64, args))
            return 1;
        compare(k, y, want);
        if (!f32_in && !neg) {
            std::vector<int> ok(ROWS * H * (HALF / 8));
            void *a2[3] = {ok.data(), xb.data(), csf.data()};
            if (!emu_launch("rope_groups_ok", 2, 64, a2))
                return 1;
            for (int o : ok)
                slow_groups += !o, groups++;
        }
    }
    printf("rope: 120 runs (bf16 and fp32 inputs, rope and rope_dx), %lld of %lld groups through the double path\n",
           slow_groups, groups);
    if (slow_groups == 0 || slow_groups * 2 > groups) {
        printf("rope: the double path should take some groups but not most\n");
        failures++;
    }

    // ---- RMSNorm: 200 rows of 256; rows at many scales, a row of zeros, rows with inf and NaN, and columns of w
    // outside the fp32 path's range (|w| >= 2^40) or zero
    const long long NR = 200;
    const int D = 256;
    for (int round = 0; round < 6; round++) {
        const bool bf_in = round % 2 == 1;
        std::vector<float> x(NR * D), w(D);
        std::vector<uint16_t> xb(NR * D), y(NR * D), want(NR * D);
        std::vector<double> rinv(NR);
        for (int i = 0; i < D; i++)
            w[i] = i == 5 ? 0x1p41f : i == 6 ? 0.0f : i == 7 ? -0x1p-30f : value();
        for (long long r = 0; r < NR; r++) {
            float scale = ldexpf(1.0f, (int)(next() % 160) - 80);
            for (int i = 0; i < D; i++) {
                float v = r == 3 ? 0.0f : (next() % 8 ? scale * (float)((int)(next() % 2001) - 1000) / 997.0f : value());
                x[r * D + i] = bf_in ? widen(bf16(v)) : v;
                xb[r * D + i] = bf16(v);
            }
        }
        void *args[4] = {y.data(), bf_in ? (void *)xb.data() : (void *)x.data(), w.data(), rinv.data()};
        const char *k = bf_in ? "rms_bf16_in" : "rms_bf16";
        if (!emu_launch(k, 7, 32, args))
            return 1;
        // the kernel's own 1 / rms (its sums' order is rmsnorm's, tested by membound_fast.test); the output's
        // expression the reference's
        for (long long r = 0; r < NR; r++)
            for (int i = 0; i < D; i++)
                want[r * D + i] = bf16((float)((double)x[r * D + i] * rinv[r] * w[i]));
        compare(k, y, want);
    }
    printf("rmsnorm: 6 runs (fp32 and bf16 inputs), 200 rows of 256\n");
    if (failures) {
        printf("FAILED: %d checks\n", failures);
        return 1;
    }
    printf("all %lld bf16 results equal the reference's bit for bit\n", compared);
    return 0;
}
