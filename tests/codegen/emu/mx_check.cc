// mx_check.cc - the MXFP8 quantisers of codegen/fp8_block_fast.cuh (namespace moec::mx8, decision 53; built with
// mx_kernels.cu on the CPU emulator) against the CPU reference runtime/cpu/mxfp8.c (MXFP8_SCALE_TE), bit for bit
// (tests/codegen/mx_quant.test):
//  1. xs rows gathered into zero-padded expert groups and quantised 1x32 along H: E4M3 codes and E8M0 scale codes
//     in GemmFp8MGrouped's MXFP8 layout (gemm_sm90_sched.h moec_mxfp8_sa_index), against mxfp8_quantize(ROWWISE)
//     of each graph row; padding rows all zero with scale code 0; probs gathered;
//  2. the same rows quantised 32x1 within each expert group (the CPU reference's fq_grouped: the group's rows
//     zero-padded to a multiple of 32, mxfp8_fake_quant(COLWISE)), written dequantised as bf16: the bf16 must be
//     the reference's float exactly (low 16 bits zero), NaN by NaN; padding rows zero;
//  3. a = silu(gate) up p and dh = dSwiGLU(da p) from bf16 h, da: rowwise codes and scales and the colwise bf16,
//     against the reference on the same floats computed here; rowwise and colwise in one launch give the same
//     bytes as apart;
//  4. a weight [2, 256, 384] quantised 1x32 along K (codes, moec_mxfp8_sb_index scales) against
//     mxfp8_quantize(ROWWISE) of each expert's W, and 32x1 along N stored as W^T [2, 384, 256] (codes, scales at
//     moec_mxfp8_sb_index(g, k, n / 32, K, N)) against mxfp8_quantize(COLWISE) of W;
//  5. both in one read (mx8::quant_weight, the optimizer's quantiser, decision 55): the same bytes as 4;
//  6. the optimizer writing the MXFP8 copy (moec_adamw_mx8_4x256x256 as generated for tests/gpu/fast_mlp_fp8.moe at
//     mxfp8): w, m, v bit for bit against moec_adamw's on the same inputs, with the arrays 16-byte aligned and 4
//     bytes off; the copy (plan.h PlanFp8Copy with mx: q, qt, s, st) equal to moec_mx8_copy's of the new w and
//     to mxfp8_quantize(ROWWISE) and (COLWISE) of each expert's new W;
//  7. MXFP8's copy of h for the backward (decision 64): codes and scales against mxfp8_quantize of the bf16 h, and the
//     backward's quantisers and dprobs reading it bit for bit what they give on h's dequantised values in bf16.
// Inputs mix ordinary values with signed zeros, NaN, +-Inf, float subnormals, amax exactly 448 x 2^k and per-row
// magnitudes from 2^-40 to 2^40. Prints a summary; exit 1 on any difference.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" {
#include "mxfp8.h"
int emu_launch(const char *name, long long grid, int block, void **args);
int checked_mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
}
#include "gemm_sm90_sched.h"

static const int E = 3;
static const long long R = 300, H = 256, F = 256, RCAP = (R + 128 * E + 15) / 16 * 16;
static const int SPLITS[E] = {5, 0, 260}; /* 265 rows in groups, 35 past them; one empty expert */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float value(int mag)
{
    double u = (double)(next() >> 11) / 9007199254740992.0;
    switch (next() % 40) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return bits(0x7FC00000u | (uint32_t)(next() & 1) << 31);  /* NaN of either sign */
    case 3: return next() % 4 ? ldexpf(448.0f, mag) : -ldexpf(448.0f, mag); /* amax exactly 448 x 2^k */
    case 4: return bits((uint32_t)(next() % 0x7FFFFF) | (uint32_t)(next() & 1) << 31); /* a subnormal */
    default: return ldexpf((float)(2.0 * u - 1.0), mag);
    }
}
static void fill_rows(float *x, long long rows, long long cols, int allow_inf)
{
    for (long long r = 0; r < rows; r++) {
        int mag = (int)(next() % 81) - 40;
        for (long long c = 0; c < cols; c++)
            x[r * cols + c] = value(mag);
        if (allow_inf && r % 17 == 3)
            x[r * cols + (long long)(next() % cols)] = next() % 2 ? INFINITY : -INFINITY;
    }
}
static float bf2f(unsigned short b) { return bits((uint32_t)b << 16); }

static int fails = 0;
static long long checks = 0;
static void check(int ok, const char *what, long long i)
{
    checks++;
    if (!ok && fails++ < 20)
        printf("FAIL: %s at %lld\n", what, i);
}
/* the bf16 the kernel wrote against the reference's float: exact, NaN for NaN */
static int same_bf16(unsigned short got, float want)
{
    if (isnan(want))
        return isnan(bf2f(got));
    return (fbits(want) & 0xFFFFu) == 0 && (unsigned short)(fbits(want) >> 16) == got;
}

/* Checks rowwise codes q / scales sa and colwise bf16 cw of padded rows [0, total) against the reference on v
 * [total, C] (the padded rows' values: zero rows in the padding); colwise blocks of 32 rows from row 0 are the
 * groups' blocks (each group starts at a multiple of 128 padded rows). */
static void check_tiles(const char *name, const std::vector<float> &v, long long total, long long C,
                        const std::vector<unsigned char> &q, const std::vector<unsigned char> &sa,
                        const std::vector<unsigned short> &cw)
{
    std::vector<unsigned char> vq((size_t)(total * C)), vs((size_t)(total * C / 32));
    mxfp8_quantize(v.data(), total, C, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq.data(), vs.data());
    std::vector<float> fq(v);
    mxfp8_fake_quant(fq.data(), total, C, MXFP8_COLWISE, MXFP8_SCALE_TE);
    char what[96];
    for (long long pr = 0; pr < total; pr++) {
        for (long long c = 0; c < C; c++) {
            snprintf(what, sizeof what, "%s rowwise code", name);
            check(q[(size_t)(pr * C + c)] == vq[(size_t)(pr * C + c)], what, pr * C + c);
            snprintf(what, sizeof what, "%s colwise bf16", name);
            check(same_bf16(cw[(size_t)(pr * C + c)], fq[(size_t)(pr * C + c)]), what, pr * C + c);
        }
        for (int kb = 0; kb < C / 32; kb++) {
            snprintf(what, sizeof what, "%s rowwise scale", name);
            check(sa[(size_t)moec_mxfp8_sa_index(pr, kb, RCAP)] == vs[(size_t)(pr * (C / 32) + kb)], what, pr);
        }
    }
}

int main(void)
{
    std::vector<int> splits(SPLITS, SPLITS + E), ofs(2 * E + 2, -1);
    void *a0[] = {ofs.data(), splits.data()};
    emu_launch("k_offsets", 1, 32, a0);
    const int *start = ofs.data() + E + 1;
    const int total = ofs[E];
    if (ofs[E] % 128 || start[E] != 265) {
        printf("FAIL: offsets\n");
        return 1;
    }

    /* 1, 2: the graph rows */
    std::vector<float> x((size_t)(R * H)), p((size_t)R);
    fill_rows(x.data(), R, H, 1);
    for (long long r = 0; r < R; r++)
        p[(size_t)r] = (float)(next() % 1000) / 997.0f;
    std::vector<unsigned char> q((size_t)(RCAP * H), 0xAB), sa((size_t)(H / 32 * RCAP), 0xAB);
    std::vector<float> pp((size_t)RCAP, -1.0f);
    void *a1[] = {q.data(), sa.data(), pp.data(), x.data(), p.data(), ofs.data()};
    emu_launch("k_rows_x", 7, 256, a1);
    std::vector<unsigned short> cw((size_t)(RCAP * H), 0xABAB);
    void *a2[] = {cw.data(), x.data(), ofs.data()};
    emu_launch("k_cols_x", 5, 256, a2);
    std::vector<unsigned char> q2((size_t)(RCAP * H), 0xAB), sa2((size_t)(H / 32 * RCAP), 0xAB);
    std::vector<unsigned short> cw2((size_t)(RCAP * H), 0xABAB);
    std::vector<float> pp2((size_t)RCAP, -1.0f);
    void *a3[] = {q2.data(), sa2.data(), cw2.data(), pp2.data(), x.data(), p.data(), ofs.data()};
    emu_launch("k_both_x", 4, 256, a3);
    check(q2 == q && sa2 == sa && memcmp(pp2.data(), pp.data(), pp.size() * 4) == 0 && cw2 == cw,
          "rowwise and colwise in one pass: the same bytes as apart", 0);
    /* the padded rows' values: each group's rows, then zero rows to its padded end */
    std::vector<float> xp((size_t)(total * H), 0.0f);
    for (int g = 0; g < E; g++)
        for (long long k = 0; k < start[g + 1] - start[g]; k++)
            memcpy(&xp[(size_t)((ofs[g] + k) * H)], &x[(size_t)((start[g] + k) * H)], (size_t)H * 4);
    /* the CPU reference's grouped colwise quantiser on the graph rows (runtime/cpu/kernels.inc fq_grouped) */
    std::vector<float> ref((size_t)(R * H), 0.0f);
    for (int g = 0; g < E; g++) {
        long long n = start[g + 1] - start[g], padded = (n + 31) / 32 * 32;
        if (!n)
            continue;
        std::vector<float> t((size_t)(padded * H), 0.0f);
        memcpy(t.data(), &x[(size_t)(start[g] * H)], (size_t)(n * H) * 4);
        check(mxfp8_fake_quant(t.data(), padded, H, MXFP8_COLWISE, MXFP8_SCALE_TE) == MXFP8_OK, "fq_grouped", g);
        for (long long k = 0; k < n; k++)
            for (long long c = 0; c < H; c++)
                check(same_bf16(cw[(size_t)((ofs[g] + k) * H + c)], t[(size_t)(k * H + c)]),
                      "xs colwise bf16 against the reference's grouped quantiser", (ofs[g] + k) * H + c);
        for (long long k = n; k < ofs[g + 1] - ofs[g]; k++)
            check(pp[(size_t)(ofs[g] + k)] == 0.0f, "probs of a padding row", ofs[g] + k);
        for (long long k = 0; k < n; k++)
            check(pp[(size_t)(ofs[g] + k)] == p[(size_t)(start[g] + k)], "probs", ofs[g] + k);
    }
    check_tiles("xs", xp, total, H, q, sa, cw);

    /* 3: from bf16 h [., 2F], da [., F] over the padded rows */
    std::vector<float> hf((size_t)(total * 2 * F)), daf((size_t)(total * F));
    fill_rows(hf.data(), total, 2 * F, 0);
    fill_rows(daf.data(), total, F, 0);
    std::vector<unsigned short> h((size_t)(RCAP * 2 * F), 0), da((size_t)(RCAP * F), 0);
    for (size_t i = 0; i < hf.size(); i++) {
        float v = isnan(hf[i]) || isinf(hf[i]) ? 1.5f : fmaxf(fminf(hf[i], 30.0f), -30.0f);
        h[i] = (unsigned short)(fbits(v) >> 16);
    }
    for (size_t i = 0; i < daf.size(); i++)
        da[i] = (unsigned short)(fbits(daf[i]) >> 16);
    std::vector<float> av((size_t)(total * F)), dhv((size_t)(total * 2 * F));
    for (long long pr = 0; pr < total; pr++) {
        float pv = pp[(size_t)pr];
        for (long long c = 0; c < F; c++) {
            float gt = bf2f(h[(size_t)(pr * 2 * F + c)]), u = bf2f(h[(size_t)(pr * 2 * F + F + c)]);
            av[(size_t)(pr * F + c)] = gt * (1.0f / (1.0f + expf(-gt))) * u * pv; /* swiglu_a, decision 69 */
            float sg = 1.0f / (1.0f + expf(-gt)), d = bf2f(da[(size_t)(pr * F + c)]) * pv;
            dhv[(size_t)(pr * 2 * F + c)] = d * u * (sg * (1.0f + gt * (1.0f - sg)));
            dhv[(size_t)(pr * 2 * F + F + c)] = d * (gt * sg);
        }
    }
    {
        std::vector<unsigned char> aq((size_t)(RCAP * F), 0xAB), asa((size_t)(F / 32 * RCAP), 0xAB);
        std::vector<unsigned short> aw((size_t)(RCAP * F), 0xABAB);
        void *aa[] = {aq.data(), asa.data(), aw.data(), h.data(), pp.data(), ofs.data()};
        emu_launch("k_both_a", 3, 256, aa);
        check_tiles("a", av, total, F, aq, asa, aw);
        std::vector<unsigned char> dq((size_t)(RCAP * 2 * F), 0xAB), dsa((size_t)(2 * F / 32 * RCAP), 0xAB);
        std::vector<unsigned short> dw((size_t)(RCAP * 2 * F), 0xABAB);
        void *ad[] = {dq.data(), dsa.data(), dw.data(), h.data(), da.data(), pp.data(), ofs.data()};
        emu_launch("k_both_dh", 3, 256, ad);
        check_tiles("dh", dhv, total, 2 * F, dq, dsa, dw);
    }

    /* 7: MXFP8's copy of h for the backward (decision 64): k_rows_h quantises the bf16 h 1x32 along 2F, bit for
     * bit mxfp8_quantize of h's values; the backward's sources reading the copy (HMx) give bit for bit what the
     * bf16 sources give on h's dequantised values, which bf16 holds exactly: dh's codes, scales and colwise bf16,
     * a's colwise bf16, dprobs */
    {
        const long long C = 2 * F;
        std::vector<unsigned char> hq((size_t)(RCAP * C), 0xAB), hs((size_t)(C / 32 * RCAP), 0xAB);
        void *a7[] = {hq.data(), hs.data(), h.data(), ofs.data()};
        emu_launch("k_rows_h", 3, 256, a7);
        std::vector<float> hv((size_t)(total * C));
        for (size_t i = 0; i < hv.size(); i++)
            hv[i] = bf2f(h[i]);
        std::vector<unsigned char> vq((size_t)(total * C)), vs((size_t)(total * C / 32));
        mxfp8_quantize(hv.data(), total, C, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq.data(), vs.data());
        for (long long pr = 0; pr < total; pr++) {
            for (long long c = 0; c < C; c++)
                check(hq[(size_t)(pr * C + c)] == vq[(size_t)(pr * C + c)], "h copy code", pr * C + c);
            for (int kb = 0; kb < C / 32; kb++)
                check(hs[(size_t)moec_mxfp8_sa_index(pr, kb, RCAP)] == vs[(size_t)(pr * (C / 32) + kb)], "h copy scale",
                      pr);
        }
        std::vector<unsigned short> hd((size_t)(RCAP * C), 0);
        mxfp8_fake_quant(hv.data(), total, C, MXFP8_ROWWISE, MXFP8_SCALE_TE);
        for (size_t i = 0; i < hv.size(); i++) {
            check((fbits(hv[i]) & 0xFFFFu) == 0, "h copy's values exact in bf16", (long long)i);
            hd[i] = (unsigned short)(fbits(hv[i]) >> 16);
        }
        const size_t nq = (size_t)(RCAP * C), ns = (size_t)(C / 32 * RCAP);
        std::vector<unsigned char> q1(nq, 0xAB), s1(ns, 0xAB), q2(nq, 0xCD), s2(ns, 0xCD);
        std::vector<unsigned short> w1(nq, 0xABAB), w2(nq, 0xCDCD);
        void *b1[] = {q1.data(), s1.data(), w1.data(), hd.data(), da.data(), pp.data(), ofs.data()};
        void *b2[] = {q2.data(), s2.data(), w2.data(), hq.data(), hs.data(), da.data(), pp.data(), ofs.data()};
        emu_launch("k_both_dh", 3, 256, b1);
        emu_launch("k_both_dh_q", 3, 256, b2);
        /* dh's rowwise codes, scales and colwise bf16 of two launches: the elements that differ in some bit */
        auto dh_diff = [&](const std::vector<unsigned char> &qa, const std::vector<unsigned char> &sa_,
                           const std::vector<unsigned short> &wa, const std::vector<unsigned char> &qb,
                           const std::vector<unsigned char> &sb_, const std::vector<unsigned short> &wb) {
            long long d = 0;
            for (long long pr = 0; pr < total; pr++) {
                for (long long c = 0; c < C; c++)
                    d += qa[(size_t)(pr * C + c)] != qb[(size_t)(pr * C + c)] ||
                         wa[(size_t)(pr * C + c)] != wb[(size_t)(pr * C + c)];
                for (int kb = 0; kb < C / 32; kb++)
                    d += sa_[(size_t)moec_mxfp8_sa_index(pr, kb, RCAP)] != sb_[(size_t)moec_mxfp8_sa_index(pr, kb, RCAP)];
            }
            return d;
        };
        const long long diff = dh_diff(q1, s1, w1, q2, s2, w2);
        check(diff == 0, "dh (rowwise codes, scales, colwise bf16) from the h copy", diff);
        std::vector<unsigned short> c1((size_t)(RCAP * F), 0xABAB), c2((size_t)(RCAP * F), 0xCDCD);
        void *e1[] = {c1.data(), hd.data(), pp.data(), ofs.data()};
        void *e2[] = {c2.data(), hq.data(), hs.data(), pp.data(), ofs.data()};
        emu_launch("k_cols_a", 2, 256, e1);
        emu_launch("k_cols_a_q", 2, 256, e2);
        check(memcmp(c1.data(), c2.data(), (size_t)(total * F) * 2) == 0, "a colwise from the h copy", 0);
        std::vector<float> d1((size_t)RCAP, -1.0f), d2((size_t)RCAP, -2.0f);
        void *f1[] = {d1.data(), hd.data(), da.data(), ofs.data()};
        void *f2[] = {d2.data(), hq.data(), hs.data(), da.data(), ofs.data()};
        emu_launch("k_dprobs", 3, 256, f1);
        emu_launch("k_dprobs_q", 3, 256, f2);
        check(memcmp(d1.data(), d2.data(), (size_t)total * 4) == 0, "dprobs from the h copy", 0);
        /* decision 69: the dSwiGLU quantiser with dprobs' partials: dh the same bytes as k_both_dh_q, the partials
         * summed in order within 1e-5 of sum |t| of the separate kernel's dprobs, on a da without NaN (nearly every
         * row's sum is NaN with the test's da) */
        std::vector<unsigned short> dac(da);
        for (auto &b : dac)
            if ((b & 0x7F80u) == 0x7F80u)
                b = 0x3F00u; /* 0.5 */
        std::vector<unsigned char> q3(nq, 0xEF), s3(ns, 0xEF);
        std::vector<unsigned short> w3(nq, 0xEFEF);
        std::vector<float> part((size_t)(RCAP * (F / 128)), -3.0f), dc((size_t)RCAP, -1.0f);
        void *h1[] = {q2.data(), s2.data(), w2.data(), hq.data(), hs.data(), dac.data(), pp.data(), ofs.data()};
        void *h2[] = {q3.data(), s3.data(), w3.data(), part.data(), hq.data(), hs.data(), dac.data(), pp.data(), ofs.data()};
        emu_launch("k_both_dh_q", 3, 256, h1);
        emu_launch("k_both_dh_dp", 2, 256, h2);
        const long long diff3 = dh_diff(q2, s2, w2, q3, s3, w3);
        check(diff3 == 0, "dh with dprobs' partials: the same bytes", diff3);
        void *f3[] = {dc.data(), hq.data(), hs.data(), dac.data(), ofs.data()};
        emu_launch("k_dprobs_q", 3, 256, f3);
        long long finite = 0;
        for (long long pr = 0; pr < total; pr++) {
            double sum = 0, sa_ = 0;
            for (long long k = 0; k < F / 128; k++)
                sum += (double)part[(size_t)(pr * (F / 128) + k)];
            for (long long c = 0; c < F; c++) {
                double gt = bf2f(hd[(size_t)(pr * C + c)]), u = bf2f(hd[(size_t)(pr * C + F + c)]);
                sa_ += fabs(bf2f(dac[(size_t)(pr * F + c)]) * gt / (1.0 + exp(-gt)) * u);
            }
            finite += isfinite(sa_) && sa_ > 0;
            check(fabs((float)sum - dc[(size_t)pr]) <= 1e-5 * sa_ + 1e-30, "dprobs' partials against the separate kernel",
                  pr);
        }
        check(finite > total / 4, "rows with a finite nonzero dprobs", finite);
    }

    /* 4: the weight [2, 256, 384]: 1x32 along K, and W^T 1x32 along N */
    const int WE = 2;
    const long long N = 256, K = 384;
    std::vector<float> w((size_t)(WE * N * K));
    fill_rows(w.data(), WE * N, K, 1);
    std::vector<unsigned char> wq((size_t)(WE * N * K), 0xAB), ws((size_t)(WE * N * K / 32), 0xAB);
    std::vector<unsigned char> wqt((size_t)(WE * N * K), 0xAB), wst((size_t)(WE * N * K / 32), 0xAB);
    void *a4[] = {wq.data(), ws.data(), w.data()};
    emu_launch("k_weight_rows", 5, 256, a4);
    void *a5[] = {wqt.data(), wst.data(), w.data()};
    emu_launch("k_weight_cols", 3, 256, a5);
    for (int g = 0; g < WE; g++) {
        std::vector<unsigned char> vq((size_t)(N * K)), vs((size_t)(N * K / 32)), cq((size_t)(N * K)), cs((size_t)(N * K / 32));
        mxfp8_quantize(w.data() + g * N * K, N, K, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq.data(), vs.data());
        mxfp8_quantize(w.data() + g * N * K, N, K, MXFP8_COLWISE, MXFP8_SCALE_TE, cq.data(), cs.data());
        for (long long n = 0; n < N; n++)
            for (long long k = 0; k < K; k++) {
                check(wq[(size_t)(g * N * K + n * K + k)] == vq[(size_t)(n * K + k)], "weight code (1x32 along K)",
                      n * K + k);
                check(wqt[(size_t)(g * N * K + k * N + n)] == cq[(size_t)(n * K + k)],
                      "transposed weight code (32x1 along N)", k * N + n);
                if (k % 32 == 0)
                    check(ws[(size_t)moec_mxfp8_sb_index(g, (int)n, (int)(k / 32), (int)N, (int)K)] ==
                              vs[(size_t)(n * (K / 32) + k / 32)],
                          "weight scale", n * K + k);
                if (n % 32 == 0)
                    check(wst[(size_t)moec_mxfp8_sb_index(g, (int)k, (int)(n / 32), (int)K, (int)N)] ==
                              cs[(size_t)(n / 32 * K + k)],
                          "transposed weight scale", k * N + n);
            }
    }
    /* 5: both copies in one read */
    {
        std::vector<unsigned char> bq((size_t)(WE * N * K), 0xCD), bs((size_t)(WE * N * K / 32), 0xCD);
        std::vector<unsigned char> bqt((size_t)(WE * N * K), 0xCD), bst((size_t)(WE * N * K / 32), 0xCD);
        void *a6[] = {bq.data(), bs.data(), bqt.data(), bst.data(), w.data()};
        emu_launch("k_weight_both", 5, 512, a6);
        check(bq == wq, "quant_weight's codes against weight_rows'", 0);
        check(bs == ws, "quant_weight's scales against weight_rows'", 0);
        check(bqt == wqt, "quant_weight's transposed codes against weight_cols'", 0);
        check(bst == wst, "quant_weight's transposed scales against weight_cols'", 0);
    }
    /* 6: the optimizer writing the MXFP8 copy */
    {
        const long long OE = 4, ON = 256, OK = 256, NW = OE * ON * OK, OS = NW / 32;
        const long long CB = 2 * NW + 2 * OS; /* plan.h PlanFp8Copy (mx): q, qt, s, st */
        std::vector<float> w0((size_t)NW), m0((size_t)NW), v0((size_t)NW), g0((size_t)NW);
        fill_rows(w0.data(), OE * ON, OK, 1);
        for (long long i = 0; i < NW; i++) {
            double u = (double)(next() >> 11) / 9007199254740992.0;
            g0[(size_t)i] = (float)((2 * u - 1) * 0.1);
            m0[(size_t)i] = (float)((u - 0.5) * 0.02);
            v0[(size_t)i] = (float)(u * u * 1e-4);
            if (i % 997 == 5)
                g0[(size_t)i] = 0.0f, m0[(size_t)i] = 0.0f, v0[(size_t)i] = 0.0f; /* 0 / (sqrt(0) + eps) */
        }
        double sc[7] = {3e-4, 1 - pow(0.9, 7), 1 - pow(0.95, 7), 0.8, 0, 0, 0}, wd = 0.1;
        long long nn = NW;
        for (int shift = 0; shift < 2; shift++) { /* shift 1: every array 4 bytes past 16-byte alignment */
            std::vector<float> buf((size_t)(8 * (NW + 8)));
            float *a[8];
            for (int k = 0; k < 8; k++) {
                float *b = buf.data() + k * (NW + 8);
                while (((uintptr_t)b & 15) != 0)
                    b++;
                a[k] = b + shift;
                memcpy(a[k], k % 4 == 0 ? w0.data() : k % 4 == 1 ? m0.data() : k % 4 == 2 ? v0.data() : g0.data(),
                       (size_t)NW * 4);
            }
            std::vector<unsigned char> c((size_t)CB, 0xAB), c2((size_t)CB, 0xCD);
            void *r1[] = {a[0], a[1], a[2], a[3], &nn, sc, &wd};
            emu_launch("k_adamw", 5, 256, r1);
            void *r2[] = {a[4], a[5], a[6], a[7], &nn, sc, &wd, c.data()};
            emu_launch("k_adamw_mx8", 5, 512, r2);
            char what[96];
            for (int k = 0; k < 3; k++) {
                snprintf(what, sizeof what, "adamw_mx8 %s (shift %d) against moec_adamw", k == 0 ? "w" : k == 1 ? "m" : "v",
                         shift);
                long long first = -1;
                for (long long i = 0; i < NW && first < 0; i++)
                    if (memcmp(&a[k][i], &a[4 + k][i], 4) != 0)
                        first = i;
                check(first < 0, what, first);
            }
            check(memcmp(a[0], w0.data(), (size_t)NW * 4) != 0, "adamw moved w", 0);
            void *r3[] = {c2.data(), a[4]};
            emu_launch("k_mx8_copy", 3, 512, r3);
            check(c == c2, "adamw_mx8's copy against moec_mx8_copy's of the new w", shift);
            for (int g = 0; g < OE; g++) {
                std::vector<unsigned char> vq((size_t)(ON * OK)), vs((size_t)(ON * OK / 32)), cq((size_t)(ON * OK)),
                    cs((size_t)(ON * OK / 32));
                const float *wg = a[4] + g * ON * OK;
                mxfp8_quantize(wg, ON, OK, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq.data(), vs.data());
                mxfp8_quantize(wg, ON, OK, MXFP8_COLWISE, MXFP8_SCALE_TE, cq.data(), cs.data());
                for (long long n = 0; n < ON; n++)
                    for (long long k = 0; k < OK; k++) {
                        check(c[(size_t)(g * ON * OK + n * OK + k)] == vq[(size_t)(n * OK + k)], "copy: code (1x32)",
                              n * OK + k);
                        check(c[(size_t)(NW + g * ON * OK + k * ON + n)] == cq[(size_t)(n * OK + k)],
                              "copy: transposed code (32x1)", k * ON + n);
                        if (k % 32 == 0)
                            check(c[(size_t)(2 * NW + moec_mxfp8_sb_index(g, (int)n, (int)(k / 32), (int)ON, (int)OK))] ==
                                      vs[(size_t)(n * (OK / 32) + k / 32)],
                                  "copy: scale", n * OK + k);
                        if (n % 32 == 0)
                            check(c[(size_t)(2 * NW + OS +
                                             moec_mxfp8_sb_index(g, (int)k, (int)(n / 32), (int)OK, (int)ON))] ==
                                      cs[(size_t)(n / 32 * OK + k)],
                                  "copy: transposed scale", k * ON + n);
                    }
            }
        }
    }
    printf("mxfp8 quantisers: %lld checks (xs rowwise and colwise, a and dh rowwise and colwise, the weights 1x32 "
           "along K and 32x1 along N transposed, both in one read, the optimizer's AdamW + MXFP8 copy against "
           "moec_adamw and the quantiser), %d failed\n", checks, fails);
    if (!fails)
        printf("all bit-identical to runtime/cpu/mxfp8.c\n");
    return fails ? 1 : 0;
}
