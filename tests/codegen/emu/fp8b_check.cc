// fp8b_check.cc - the fp8-block quantisers of codegen/fp8_block_fast.cuh (built with fp8b_kernels.cu on the
// CPU emulator) against the CPU reference runtime/cpu/fp8_block.c, bit for bit (tests/codegen/fp8b_quant.test):
//  1. xs rows gathered into zero-padded expert groups and quantised 1x128 along H: E4M3 codes and E8M0
//     scale codes in GemmFp8MGrouped's layout (gemm_sm90_sched.h moec_fp8_block_sa_index), against
//     fp8b_quantize(FP8B_ROWWISE) of each graph row; padding rows all zero with scale code 0; probs gathered;
//  2. the same rows quantised 128x1 within each expert group, the codes transposed [H, RCAP] (the tokens
//     contiguous, for GemmFp8KGrouped) and the scales [RCAP / 128][H] (moec_fp8_kgrouped_s_index), against
//     fp8b_quantize(FP8B_COLWISE) of each group's rows; padding rows' codes 0;
//  3. the SwiGLU output a = silu(gate) up p and dh = dSwiGLU(da p) computed from bf16 h, da: rowwise and
//     colwise (transposed codes and their scales, as 2), against the reference quantiser on the same floats
//     computed here;
//  4. a weight [2, 256, 384] in 128x128 tiles (moec_fp8_block_sb_index layout) and its transposed copy,
//     against fp8b_quantize(FP8B_TILE) of each expert's W and of W^T;
//  5. dprobs against a double sum (within 1e-5);
//  6. the optimizer's kernels moec generates for tests/gpu/fast_mlp_fp8.moe (decision 44) on w_down's shape
//     [4, 256, 256]: moec_adamw_fp8b_4x256x256's w, m and v bit for bit against moec_adamw's on the same
//     inputs, its e4m3 copy (tiles, transposed tiles, both scales) against moec_fp8b_copy_4x256x256 (the
//     quantiser on the updated w) and against fp8b_quantize(FP8B_TILE) of each expert's new W and W^T; again
//     with the four arrays 4 bytes off 16-byte alignment (the kernel's element-at-a-time path);
//  7. the gate_up GEMM's fused SwiGLU epilogue (GemmFp8MGrouped's GLU, moec::fp8b::SwigluQuantEpi, decision 57)
//     on the fp32 accumulators, through k_glu_epi (the GEMM's fragment layout, 256 threads a tile), with groups
//     of 0, 1, 127 and 129 rows: h rounded to nearest even, a's codes and scale codes bit for bit against the
//     separate quantiser the plans launched before (quant_tiles over Swiglu<F> on that h) and fp8b_quantize;
//  1b. the same through the dispatch (decision 64): token rows, a dispatch plan inverted on the device
//     (token_of_rows), the gather reading token rows (GraphRows with tok): the same bytes;
//  8. fp8-block's E4M3 copy of h for the backward (decision 64): its codes and scales against fp8b_quantize, and the
//     backward's quantisers and dprobs reading it bit for bit what they give on h's dequantised values in bf16;
//  9. the merged passes of decision 69 byte for byte against the separate launches (swiglu_h_tiles: a and h's copy;
//     the dSwiGLU quantiser with dprobs' partials: dh rowwise and colwise), the partials within 1e-5 of a double sum.
// Inputs mix ordinary values with signed zeros, NaN, +-Inf, float subnormals, amax exactly 448 x 2^k and
// per-row magnitudes from 2^-40 to 2^40. Prints a summary; exit 1 on any difference.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" {
#include "fp8_block.h"
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
/* one value of a row of magnitude 2^mag */
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

int main(void)
{
    /* offsets on the device, as the plan's offsets kernel computes them */
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
    std::vector<unsigned char> q((size_t)(RCAP * H), 0xAB), sa((size_t)(H / 128 * RCAP), 0xAB);
    std::vector<float> pp((size_t)RCAP, -1.0f);
    void *a1[] = {q.data(), sa.data(), pp.data(), x.data(), p.data(), ofs.data()};
    emu_launch("k_rows_x", 7, 256, a1);
    const long long TS = (RCAP + 127) / 128; /* token blocks of the transposed copies' scales */
    std::vector<unsigned char> xt((size_t)(H * RCAP), 0xAB), xts((size_t)(TS * H), 0xAB);
    void *a2[] = {xt.data(), xts.data(), x.data(), ofs.data()};
    emu_launch("k_cols_x", 5, 256, a2);
    /* the kernels the plans launch write both in one pass: the same bytes */
    std::vector<unsigned char> q2((size_t)(RCAP * H), 0xAB), sa2((size_t)(H / 128 * RCAP), 0xAB);
    std::vector<unsigned char> xt2((size_t)(H * RCAP), 0xAB), xts2((size_t)(TS * H), 0xAB);
    std::vector<float> pp2((size_t)RCAP, -1.0f);
    void *a3[] = {q2.data(), sa2.data(), xt2.data(), xts2.data(), pp2.data(), x.data(), p.data(), ofs.data()};
    emu_launch("k_both_x", 4, 256, a3);
    check(q2 == q && sa2 == sa && memcmp(pp2.data(), pp.data(), pp.size() * 4) == 0 && xt2 == xt && xts2 == xts,
          "rowwise and colwise in one pass: the same bytes as apart", 0);
    /* the dispatch read through: the graph rows as token rows xt [perm[r]] = x [r], the plan (one slot a token)
     * plan [perm[r]] = r inverted on the device into tok, and the gather through tok: the same bytes */
    {
        std::vector<int> perm((size_t)R), plan((size_t)R, -1), tok((size_t)R, -7);
        for (long long r = 0; r < R; r++)
            perm[(size_t)r] = (int)r;
        for (long long r = R - 1; r > 0; r--) {
            long long k = (long long)(next() % (uint64_t)(r + 1));
            int t = perm[(size_t)r];
            perm[(size_t)r] = perm[(size_t)k];
            perm[(size_t)k] = t;
        }
        std::vector<float> xtok((size_t)(R * H));
        for (long long r = 0; r < R; r++) {
            memcpy(&xtok[(size_t)(perm[(size_t)r] * H)], &x[(size_t)(r * H)], (size_t)H * 4);
            plan[(size_t)perm[(size_t)r]] = (int)r;
        }
        void *at[] = {tok.data(), plan.data(), ofs.data()};
        emu_launch("k_tokens", 2, 256, at);
        for (long long r = 0; r < start[E]; r++)
            check(tok[(size_t)r] == perm[(size_t)r], "token of an expert-major row", r);
        std::vector<unsigned char> q3((size_t)(RCAP * H), 0xAB), sa3((size_t)(H / 128 * RCAP), 0xAB);
        std::vector<unsigned char> xt3((size_t)(H * RCAP), 0xAB), xts3((size_t)(TS * H), 0xAB);
        std::vector<float> pp3((size_t)RCAP, -1.0f);
        void *a3t[] = {q3.data(), sa3.data(), xt3.data(), xts3.data(), pp3.data(), xtok.data(), tok.data(), p.data(),
                       ofs.data()};
        emu_launch("k_both_x_tok", 4, 256, a3t);
        check(q3 == q2 && sa3 == sa2 && memcmp(pp3.data(), pp2.data(), pp2.size() * 4) == 0 && xt3 == xt2 && xts3 == xts2,
              "through the dispatch (token rows and the inverted plan): the same bytes as from its rows", 0);
    }
    for (int g = 0; g < E; g++) {
        long long n = start[g + 1] - start[g], padded = ofs[g + 1] - ofs[g];
        std::vector<unsigned char> vq((size_t)(n * H) + 1), vs((size_t)(n * 2) + 1);
        fp8b_quantize(x.data() + start[g] * H, n, H, FP8B_ROWWISE, vq.data(), vs.data());
        std::vector<unsigned char> cq((size_t)(n * H) + 1), cs((size_t)((n + 127) / 128 * H) + 1);
        fp8b_quantize(x.data() + start[g] * H, n, H, FP8B_COLWISE, cq.data(), cs.data());
        for (long long k = 0; k < padded; k++) {
            long long pr = ofs[g] + k;
            for (long long c = 0; c < H; c++) {
                unsigned char want = k < n ? vq[(size_t)(k * H + c)] : 0;
                check(q[(size_t)(pr * H + c)] == want, "xs rowwise code", pr * H + c);
                check(xt[(size_t)(c * RCAP + pr)] == (k < n ? cq[(size_t)(k * H + c)] : 0), "xs colwise code (transposed)",
                      c * RCAP + pr);
                if (k % 128 == 0)
                    check(xts[(size_t)moec_fp8_kgrouped_s_index(pr, c, H)] == cs[(size_t)(k / 128 * H + c)],
                          "xs colwise scale", pr);
            }
            for (int kb = 0; kb < H / 128; kb++)
                check(sa[(size_t)moec_fp8_block_sa_index(pr, kb, RCAP)] == (k < n ? vs[(size_t)(k * 2 + kb)] : 0),
                      "xs rowwise scale", pr);
            check(pp[(size_t)pr] == (k < n ? p[(size_t)(start[g] + k)] : 0.0f), "probs", pr);
        }
    }

    /* 3: from bf16 h [., 2F], da [., F] over the padded rows */
    std::vector<float> hf((size_t)(total * 2 * F)), daf((size_t)(total * F));
    fill_rows(hf.data(), total, 2 * F, 0);
    fill_rows(daf.data(), total, F, 0);
    std::vector<unsigned short> h((size_t)(RCAP * 2 * F), 0), da((size_t)(RCAP * F), 0);
    for (size_t i = 0; i < hf.size(); i++) { /* keep h finite and moderate: silu of +-Inf is NaN either way */
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
    struct Case {
        const char *rows, *cols, *name;
        long long C;
        const std::vector<float> *v;
    } cases[2] = {{"k_rows_a", "k_cols_a", "a", F, &av}, {"k_rows_dh", "k_cols_dh", "dh", 2 * F, &dhv}};
    for (const Case &cs : cases) {
        long long C = cs.C;
        std::vector<unsigned char> cq((size_t)(RCAP * C), 0xAB), cs_((size_t)(C / 128 * RCAP), 0xAB);
        std::vector<unsigned char> ct((size_t)(C * RCAP), 0xAB), cts((size_t)(TS * C), 0xAB);
        if (C == F) {
            void *ar[] = {cq.data(), cs_.data(), h.data(), pp.data(), ofs.data()};
            emu_launch(cs.rows, 3, 256, ar);
            void *ac[] = {ct.data(), cts.data(), h.data(), pp.data(), ofs.data()};
            emu_launch(cs.cols, 2, 256, ac);
        } else {
            void *ar[] = {cq.data(), cs_.data(), h.data(), da.data(), pp.data(), ofs.data()};
            emu_launch(cs.rows, 3, 256, ar);
            void *ac[] = {ct.data(), cts.data(), h.data(), da.data(), pp.data(), ofs.data()};
            emu_launch(cs.cols, 2, 256, ac);
        }
        std::vector<unsigned char> vq((size_t)(total * C)), vs((size_t)(total * C / 128));
        fp8b_quantize(cs.v->data(), total, C, FP8B_ROWWISE, vq.data(), vs.data());
        /* 128-row blocks from row 0: the groups' blocks */
        std::vector<unsigned char> wq((size_t)(total * C)), ws((size_t)(total / 128 * C));
        fp8b_quantize(cs.v->data(), total, C, FP8B_COLWISE, wq.data(), ws.data());
        char what[64];
        for (long long pr = 0; pr < total; pr++) {
            for (long long c = 0; c < C; c++) {
                snprintf(what, sizeof what, "%s rowwise code", cs.name);
                check(cq[(size_t)(pr * C + c)] == vq[(size_t)(pr * C + c)], what, pr * C + c);
                snprintf(what, sizeof what, "%s colwise code (transposed)", cs.name);
                check(ct[(size_t)(c * RCAP + pr)] == wq[(size_t)(pr * C + c)], what, c * RCAP + pr);
                if (pr % 128 == 0) {
                    snprintf(what, sizeof what, "%s colwise scale", cs.name);
                    check(cts[(size_t)moec_fp8_kgrouped_s_index(pr, c, C)] == ws[(size_t)(pr / 128 * C + c)], what, pr);
                }
            }
            for (int kb = 0; kb < C / 128; kb++) {
                snprintf(what, sizeof what, "%s rowwise scale", cs.name);
                check(cs_[(size_t)moec_fp8_block_sa_index(pr, kb, RCAP)] == vs[(size_t)(pr * (C / 128) + kb)], what, pr);
            }
        }
    }

    /* 5: dprobs */
    std::vector<float> dp((size_t)RCAP, -1.0f);
    void *a5[] = {dp.data(), h.data(), da.data(), ofs.data()};
    emu_launch("k_dprobs", 3, 256, a5);
    for (long long pr = 0; pr < total; pr++) {
        double s = 0, sa_ = 0;
        for (long long c = 0; c < F; c++) {
            double gt = bf2f(h[(size_t)(pr * 2 * F + c)]), u = bf2f(h[(size_t)(pr * 2 * F + F + c)]);
            double t = bf2f(da[(size_t)(pr * F + c)]) * gt / (1.0 + exp(-gt)) * u;
            s += t;
            sa_ += fabs(t);
        }
        check(fabs(dp[(size_t)pr] - s) <= 1e-5 * sa_ + 1e-30 || (isnan(s) && isnan(dp[(size_t)pr])), "dprobs", pr);
    }

    /* 8: fp8-block's E4M3 copy of h for the backward (decision 64): k_rows_h quantises the bf16 h 1x128 along 2F,
     * bit for bit fp8b_quantize of h's values; the backward's sources reading that copy (HE4m3: codes times the
     * block's power of two) give bit for bit what the bf16 sources give on h's dequantised values, which bf16
     * holds exactly: dh's rowwise and colwise codes and scales, a's colwise ones, dprobs */
    {
        const long long C = 2 * F;
        std::vector<unsigned char> hq((size_t)(RCAP * C), 0xAB), hs((size_t)(C / 128 * RCAP), 0xAB);
        void *a8[] = {hq.data(), hs.data(), h.data(), ofs.data()};
        emu_launch("k_rows_h", 3, 256, a8);
        std::vector<float> hv((size_t)(total * C));
        for (size_t i = 0; i < hv.size(); i++)
            hv[i] = bf2f(h[i]);
        std::vector<unsigned char> vq((size_t)(total * C)), vs((size_t)(total * C / 128));
        fp8b_quantize(hv.data(), total, C, FP8B_ROWWISE, vq.data(), vs.data());
        for (long long pr = 0; pr < total; pr++) {
            for (long long c = 0; c < C; c++)
                check(hq[(size_t)(pr * C + c)] == vq[(size_t)(pr * C + c)], "h copy code", pr * C + c);
            for (int kb = 0; kb < C / 128; kb++)
                check(hs[(size_t)moec_fp8_block_sa_index(pr, kb, RCAP)] == vs[(size_t)(pr * (C / 128) + kb)],
                      "h copy scale", pr);
        }
        std::vector<unsigned short> hd((size_t)(RCAP * C), 0);
        fp8b_fake_quant(hv.data(), total, C, FP8B_ROWWISE);
        for (size_t i = 0; i < hv.size(); i++) {
            check((fbits(hv[i]) & 0xFFFFu) == 0, "h copy's values exact in bf16", (long long)i);
            hd[i] = (unsigned short)(fbits(hv[i]) >> 16);
        }
        struct {
            const char *bf, *q, *name;
            long long C;
            int cols;
        } cs8[3] = {{"k_rows_dh", "k_rows_dh_q", "dh rowwise from the h copy", 2 * F, 0},
                    {"k_cols_dh", "k_cols_dh_q", "dh colwise from the h copy", 2 * F, 1},
                    {"k_cols_a", "k_cols_a_q", "a colwise from the h copy", F, 1}};
        for (auto &k : cs8) {
            size_t nq = (size_t)(RCAP * k.C), ns = k.cols ? (size_t)(TS * k.C) : (size_t)(k.C / 128 * RCAP);
            std::vector<unsigned char> q1(nq, 0xAB), s1(ns, 0xAB), q2(nq, 0xCD), s2(ns, 0xCD);
            if (k.C == F) {
                void *b1[] = {q1.data(), s1.data(), hd.data(), pp.data(), ofs.data()};
                void *b2[] = {q2.data(), s2.data(), hq.data(), hs.data(), pp.data(), ofs.data()};
                emu_launch(k.bf, 2, 256, b1);
                emu_launch(k.q, 2, 256, b2);
            } else {
                void *b1[] = {q1.data(), s1.data(), hd.data(), da.data(), pp.data(), ofs.data()};
                void *b2[] = {q2.data(), s2.data(), hq.data(), hs.data(), da.data(), pp.data(), ofs.data()};
                emu_launch(k.bf, 3, 256, b1);
                emu_launch(k.q, 3, 256, b2);
            }
            long long diff = 0;
            for (long long pr = 0; pr < total; pr++)
                for (long long c = 0; c < k.C; c++) {
                    size_t i = k.cols ? (size_t)(c * RCAP + pr) : (size_t)(pr * k.C + c);
                    diff += q1[i] != q2[i];
                }
            for (long long pr = 0; pr < total; pr++)
                for (long long c = 0; c < (k.cols ? k.C : k.C / 128); c++) {
                    size_t i = k.cols ? (pr % 128 ? (size_t)-1 : (size_t)moec_fp8_kgrouped_s_index(pr, c, k.C))
                                      : (size_t)moec_fp8_block_sa_index(pr, (int)c, RCAP);
                    if (i != (size_t)-1)
                        diff += s1[i] != s2[i];
                }
            check(diff == 0, k.name, diff);
        }
        std::vector<float> d1((size_t)RCAP, -1.0f), d2((size_t)RCAP, -2.0f);
        void *b1[] = {d1.data(), hd.data(), da.data(), ofs.data()};
        void *b2[] = {d2.data(), hq.data(), hs.data(), da.data(), ofs.data()};
        emu_launch("k_dprobs", 3, 256, b1);
        emu_launch("k_dprobs_q", 3, 256, b2);
        check(memcmp(d1.data(), d2.data(), (size_t)total * 4) == 0, "dprobs from the h copy", 0);

        /* 9: the merged passes (decision 69), against the separate launches, byte for byte over the groups' rows:
         * the forward's k_swiglu_h (a rowwise, h's copy) on the bf16 h; the backward's dSwiGLU quantiser writing
         * dprobs' partials too (k_dh_dp: dh rowwise and colwise), the partials summed per row in index order in
         * double against the separate kernel and a double sum (both within 1e-5 of the sum of |terms|) */
        auto same = [&](const std::vector<unsigned char> &x, const std::vector<unsigned char> &y, long long C, int cols,
                        int scales, const char *what) {
            long long diff = 0;
            for (long long pr = 0; pr < total; pr++) {
                if (!scales)
                    for (long long c = 0; c < C; c++) {
                        size_t i = cols ? (size_t)(c * RCAP + pr) : (size_t)(pr * C + c);
                        diff += x[i] != y[i];
                    }
                else if (cols && pr % 128 == 0)
                    for (long long c = 0; c < C; c++) {
                        size_t i = (size_t)moec_fp8_kgrouped_s_index(pr, c, C);
                        diff += x[i] != y[i];
                    }
                else if (!cols)
                    for (int kb = 0; kb < C / 128; kb++) {
                        size_t i = (size_t)moec_fp8_block_sa_index(pr, kb, RCAP);
                        diff += x[i] != y[i];
                    }
            }
            check(diff == 0, what, diff);
        };
        {
            std::vector<unsigned char> aq1((size_t)(RCAP * F), 0xAB), as1((size_t)(F / 128 * RCAP), 0xAB);
            std::vector<unsigned char> aq2((size_t)(RCAP * F), 0xCD), as2((size_t)(F / 128 * RCAP), 0xCD);
            std::vector<unsigned char> hq2((size_t)(RCAP * C), 0xCD), hs2((size_t)(C / 128 * RCAP), 0xCD);
            void *r1[] = {aq1.data(), as1.data(), h.data(), pp.data(), ofs.data()};
            emu_launch("k_rows_a", 3, 256, r1);
            void *r2[] = {aq2.data(), as2.data(), hq2.data(), hs2.data(), h.data(), pp.data(), ofs.data()};
            emu_launch("k_swiglu_h", 3, 256, r2);
            same(aq1, aq2, F, 0, 0, "merged forward: a's codes");
            same(as1, as2, F, 0, 1, "merged forward: a's scales");
            same(hq, hq2, C, 0, 0, "merged forward: h copy's codes");
            same(hs, hs2, C, 0, 1, "merged forward: h copy's scales");
        }
        {
            /* the dSwiGLU quantiser with dprobs' partials, rowwise and colwise in one launch */
            const size_t nq = (size_t)(RCAP * C), ns = (size_t)(C / 128 * RCAP), nts = (size_t)(TS * C);
            std::vector<unsigned char> q1(nq, 0xAB), s1(ns, 0xAB), t1(nq, 0xAB), ts1(nts, 0xAB);
            std::vector<unsigned char> q2(nq, 0xCD), s2(ns, 0xCD), t2(nq, 0xCD), ts2(nts, 0xCD);
            void *x1[] = {q1.data(), s1.data(), hq.data(), hs.data(), da.data(), pp.data(), ofs.data()};
            emu_launch("k_rows_dh_q", 3, 256, x1);
            void *x2[] = {t1.data(), ts1.data(), hq.data(), hs.data(), da.data(), pp.data(), ofs.data()};
            emu_launch("k_cols_dh_q", 3, 256, x2);
            std::vector<float> part((size_t)(RCAP * (F / 128)), -3.0f);
            void *y[] = {q2.data(), s2.data(), t2.data(), ts2.data(), part.data(), hq.data(), hs.data(), da.data(),
                         pp.data(), ofs.data()};
            emu_launch("k_dh_dp", 2, 256, y);
            same(q1, q2, C, 0, 0, "dSwiGLU with dprobs: dh rowwise codes");
            same(s1, s2, C, 0, 1, "dSwiGLU with dprobs: dh rowwise scales");
            same(t1, t2, C, 1, 0, "dSwiGLU with dprobs: dh colwise codes");
            same(ts1, ts2, C, 1, 1, "dSwiGLU with dprobs: dh colwise scales");
            /* dprobs on a da without NaN or infinities (da's NaN, 1 value in 40, makes nearly every row's sum NaN) */
            std::vector<unsigned short> dac(da);
            for (auto &b : dac)
                if ((b & 0x7F80u) == 0x7F80u)
                    b = 0x3F00u; /* 0.5 */
            std::vector<float> partc((size_t)(RCAP * (F / 128)), -3.0f), dc((size_t)RCAP, -1.0f);
            void *yc[] = {q2.data(), s2.data(), t2.data(), ts2.data(), partc.data(), hq.data(), hs.data(), dac.data(),
                          pp.data(), ofs.data()};
            emu_launch("k_dh_dp", 2, 256, yc);
            void *bc[] = {dc.data(), hq.data(), hs.data(), dac.data(), ofs.data()};
            emu_launch("k_dprobs_q", 3, 256, bc);
            long long finite = 0;
            for (long long pr = 0; pr < total; pr++) {
                double sum = 0, s = 0, sa_ = 0;
                for (long long k = 0; k < F / 128; k++)
                    sum += (double)partc[(size_t)(pr * (F / 128) + k)];
                for (long long c = 0; c < F; c++) {
                    double gt = bf2f(hd[(size_t)(pr * C + c)]), u = bf2f(hd[(size_t)(pr * C + F + c)]);
                    double t = bf2f(dac[(size_t)(pr * F + c)]) * gt / (1.0 + exp(-gt)) * u;
                    s += t;
                    sa_ += fabs(t);
                }
                const float fs = (float)sum;
                finite += isfinite(s) && sa_ > 0;
                check(fabs(fs - s) <= 1e-5 * sa_ + 1e-30, "dSwiGLU with dprobs: dprobs (finite da)", pr);
                check(fabs(fs - dc[(size_t)pr]) <= 1e-5 * sa_ + 1e-30,
                      "dSwiGLU with dprobs: dprobs against the separate kernel (finite da)", pr);
            }
            check(finite > total / 4, "dSwiGLU with dprobs: rows with a finite nonzero dprobs", finite);
        }
    }

    /* 4: the weight [2, 256, 384] in tiles, and its transposed copy */
    const int WE = 2;
    const long long N = 256, K = 384;
    std::vector<float> w((size_t)(WE * N * K));
    fill_rows(w.data(), WE * N, K, 1);
    std::vector<unsigned char> wq((size_t)(WE * N * K), 0xAB), ws((size_t)(WE * 2 * 3), 0xAB);
    std::vector<unsigned char> wqt((size_t)(WE * N * K), 0xAB), wst((size_t)(WE * 2 * 3), 0xAB);
    void *a4[] = {wq.data(), ws.data(), wqt.data(), wst.data(), w.data()};
    emu_launch("k_weight", 4, 512, a4);
    std::vector<unsigned char> wq2((size_t)(WE * N * K), 0xAB), ws2((size_t)(WE * 2 * 3), 0xAB);
    void *a4b[] = {wq2.data(), ws2.data(), w.data()};
    emu_launch("k_weight_nt", 3, 512, a4b);
    for (int g = 0; g < WE; g++) {
        std::vector<unsigned char> vq((size_t)(N * K)), vs(6), vqt((size_t)(N * K)), vst(6);
        fp8b_quantize(w.data() + g * N * K, N, K, FP8B_TILE, vq.data(), vs.data());
        std::vector<float> wt((size_t)(N * K));
        for (long long n = 0; n < N; n++)
            for (long long k = 0; k < K; k++)
                wt[(size_t)(k * N + n)] = w[(size_t)(g * N * K + n * K + k)];
        fp8b_quantize(wt.data(), K, N, FP8B_TILE, vqt.data(), vst.data());
        for (long long i = 0; i < N * K; i++) {
            check(wq[(size_t)(g * N * K + i)] == vq[(size_t)i], "weight tile code", i);
            check(wq2[(size_t)(g * N * K + i)] == vq[(size_t)i], "weight tile code (no transposed copy)", i);
            check(wqt[(size_t)(g * N * K + i)] == vqt[(size_t)i], "transposed weight tile code", i);
        }
        for (int nb = 0; nb < 2; nb++)
            for (int kb = 0; kb < 3; kb++) {
                check(ws[(size_t)moec_fp8_block_sb_index(g, nb * 128, kb, (int)N, (int)K)] == vs[(size_t)(nb * 3 + kb)],
                      "weight tile scale", nb * 3 + kb);
                check(ws2[(size_t)moec_fp8_block_sb_index(g, nb * 128, kb, (int)N, (int)K)] == vs[(size_t)(nb * 3 + kb)],
                      "weight tile scale (no transposed copy)", nb * 3 + kb);
                check(wst[(size_t)moec_fp8_block_sb_index(g, kb * 128, nb, (int)K, (int)N)] ==
                          vst[(size_t)(kb * 2 + nb)],
                      "transposed weight tile scale", kb * 2 + nb);
            }
    }
    /* 6: the optimizer writing the e4m3 copy */
    {
        const long long OE = 4, ON = 256, OK = 256, NW = OE * ON * OK, OS = OE * (ON / 128) * (OK / 128);
        const long long CB = 2 * NW + 2 * OS; /* plan.h PlanFp8Copy: q, qt, s, st */
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
            emu_launch("k_adamw_fp8b", 5, 512, r2);
            char what[96];
            for (int k = 0; k < 3; k++) {
                snprintf(what, sizeof what, "adamw_fp8b %s (shift %d) against moec_adamw", k == 0 ? "w" : k == 1 ? "m" : "v",
                         shift);
                long long first = -1;
                for (long long i = 0; i < NW && first < 0; i++)
                    if (memcmp(&a[k][i], &a[4 + k][i], 4) != 0)
                        first = i;
                check(first < 0, what, first);
            }
            check(memcmp(a[0], w0.data(), (size_t)NW * 4) != 0, "adamw moved w", 0);
            void *r3[] = {c2.data(), a[4]};
            emu_launch("k_fp8b_copy", 3, 512, r3);
            check(c == c2, "adamw_fp8b's copy against moec_fp8b_copy's of the new w", shift);
            for (int g = 0; g < OE; g++) {
                std::vector<unsigned char> vq((size_t)(ON * OK)), vs(4), vqt((size_t)(ON * OK)), vst(4);
                const float *wg = a[4] + g * ON * OK;
                fp8b_quantize(wg, ON, OK, FP8B_TILE, vq.data(), vs.data());
                std::vector<float> wt((size_t)(ON * OK));
                for (long long n = 0; n < ON; n++)
                    for (long long k = 0; k < OK; k++)
                        wt[(size_t)(k * ON + n)] = wg[n * OK + k];
                fp8b_quantize(wt.data(), OK, ON, FP8B_TILE, vqt.data(), vst.data());
                for (long long i = 0; i < ON * OK; i++) {
                    check(c[(size_t)(g * ON * OK + i)] == vq[(size_t)i], "copy: tile code", i);
                    check(c[(size_t)(NW + g * ON * OK + i)] == vqt[(size_t)i], "copy: transposed tile code", i);
                }
                for (int nb = 0; nb < 2; nb++)
                    for (int kb = 0; kb < 2; kb++) {
                        check(c[(size_t)(2 * NW + moec_fp8_block_sb_index(g, nb * 128, kb, (int)ON, (int)OK))] ==
                                  vs[(size_t)(nb * 2 + kb)],
                              "copy: tile scale", nb * 2 + kb);
                        check(c[(size_t)(2 * NW + OS + moec_fp8_block_sb_index(g, kb * 128, nb, (int)OK, (int)ON))] ==
                                  vst[(size_t)(kb * 2 + nb)],
                              "copy: transposed tile scale", kb * 2 + nb);
                    }
            }
        }
    }
    /* 7: the gate_up GEMM's fused SwiGLU epilogue (decision 57) against the separate quantiser and the reference */
    {
        const int E2 = 4;
        const long long R2 = 257, F2 = 256, RCAP2 = (R2 + 128 * E2 + 15) / 16 * 16;
        const int splits2[E2] = {0, 1, 127, 129}; /* an empty expert, one row, one short of a tile, one past it */
        std::vector<int> sp2(splits2, splits2 + E2), ofs2(2 * E2 + 2, -1);
        void *b0[] = {ofs2.data(), sp2.data()};
        emu_launch("k_offsets2", 1, 32, b0);
        const int total2 = ofs2[E2];
        if (total2 != 512 || ofs2[E2 + 1 + E2] != R2) {
            printf("FAIL: offsets of the ragged groups\n");
            return 1;
        }
        /* the GEMM's fp32 accumulators [RCAP2, 2 F2] (gate | up) over every padded row, and the padded probs */
        std::vector<float> dacc((size_t)(RCAP2 * 2 * F2), 0.0f), pp2((size_t)RCAP2, 0.0f);
        fill_rows(dacc.data(), total2, 2 * F2, 1);
        for (int g = 0; g < E2; g++)
            for (int k = 0; k < splits2[g]; k++)
                pp2[(size_t)(ofs2[g] + k)] = k % 29 == 7 ? 0.0f : (float)(next() % 1000) / 997.0f;
        std::vector<unsigned short> h2((size_t)(RCAP2 * 2 * F2), 0xABCD);
        std::vector<unsigned char> fq((size_t)(RCAP2 * F2), 0xAB), fs((size_t)(F2 / 128 * RCAP2), 0xAB);
        void *b1[] = {h2.data(), fq.data(), fs.data(), dacc.data(), pp2.data(), ofs2.data()};
        emu_launch("k_glu_epi", 3, 256, b1);
        std::vector<unsigned char> sq((size_t)(RCAP2 * F2), 0xAB), ss((size_t)(F2 / 128 * RCAP2), 0xAB);
        void *b2[] = {sq.data(), ss.data(), h2.data(), pp2.data(), ofs2.data()};
        emu_launch("k_rows_a2", 3, 256, b2);
        /* the reference: a from the same bf16 h, quantised by runtime/cpu/fp8_block.c */
        std::vector<float> a2((size_t)(total2 * F2));
        for (long long pr = 0; pr < total2; pr++)
            for (long long c = 0; c < F2; c++) {
                float gt = bf2f(h2[(size_t)(pr * 2 * F2 + c)]), u = bf2f(h2[(size_t)(pr * 2 * F2 + F2 + c)]);
                a2[(size_t)(pr * F2 + c)] = gt * (1.0f / (1.0f + expf(-gt))) * u * pp2[(size_t)pr];
            }
        std::vector<unsigned char> rq((size_t)(total2 * F2)), rs((size_t)(total2 * F2 / 128));
        fp8b_quantize(a2.data(), total2, F2, FP8B_ROWWISE, rq.data(), rs.data());
        for (long long pr = 0; pr < total2; pr++) {
            for (long long c = 0; c < 2 * F2; c++) { /* h: the accumulators rounded to nearest even */
                float v = dacc[(size_t)(pr * 2 * F2 + c)];
                unsigned short hb = h2[(size_t)(pr * 2 * F2 + c)];
                uint32_t u = fbits(v);
                check(isnan(v) ? isnan(bf2f(hb)) : hb == (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16),
                      "glu epilogue: h", pr * 2 * F2 + c);
            }
            for (long long c = 0; c < F2; c++) {
                check(fq[(size_t)(pr * F2 + c)] == sq[(size_t)(pr * F2 + c)], "glu epilogue: a code vs quant_tiles",
                      pr * F2 + c);
                check(fq[(size_t)(pr * F2 + c)] == rq[(size_t)(pr * F2 + c)], "glu epilogue: a code vs fp8b_quantize",
                      pr * F2 + c);
            }
            for (int kb = 0; kb < F2 / 128; kb++) {
                const long long i = moec_fp8_block_sa_index(pr, kb, RCAP2);
                check(fs[(size_t)i] == ss[(size_t)i], "glu epilogue: a scale vs quant_tiles", pr);
                check(fs[(size_t)i] == rs[(size_t)(pr * (F2 / 128) + kb)], "glu epilogue: a scale vs fp8b_quantize", pr);
            }
        }
        /* nothing written past the groups' padded rows */
        for (long long i = (long long)total2 * F2; i < RCAP2 * F2; i++)
            check(fq[(size_t)i] == 0xAB, "glu epilogue: a code past the rows", i);
    }

    printf("fp8b quantisers: %lld checks (xs rowwise and colwise, a and dh rowwise and colwise, dprobs, weight "
           "tiles and their transposed copy, the optimizer's AdamW + e4m3 copy against moec_adamw and the "
           "quantiser, the gate_up GEMM's fused SwiGLU epilogue: h, a's codes and scales against quant_tiles and "
           "fp8b_quantize with groups of 0, 1, 127 and 129 rows; the merged passes of decision 69 against the "
           "separate launches), %d failed\n", checks, fails);
    if (!fails)
        printf("all bit-identical to runtime/cpu/fp8_block.c\n");
    return fails ? 1 : 0;
}
