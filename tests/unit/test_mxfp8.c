/* test_mxfp8.c - unit tests of runtime/cpu/mxfp8: bit-exact agreement with
 * the vectors that tests/mxfp8/gen_vectors.py made with torch and ml_dtypes
 * (tests/mxfp8/vectors.txt, read relative to the repository root, or the
 * path given as the first argument), plus checks that need no reference:
 * E4M3 rounding against a brute-force nearest-value search, the two scale
 * rules against their defining inequalities, colwise = rowwise of the
 * transpose, fake-quant idempotence, special values, and misuse refused.
 *
 * Floats are compared by their bits, except that any NaN matches any NaN of
 * the same sign: torch, ml_dtypes and C disagree on NaN payloads, which
 * carry no meaning here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/util.h"
#include "../../runtime/cpu/mxfp8.h"
#include "check.h"


static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Same bits, or both NaN with the same sign. */
static int same_float(uint32_t got, uint32_t want)
{
    int nan_got = (got & 0x7FFFFFFFu) > 0x7F800000u;
    int nan_want = (want & 0x7FFFFFFFu) > 0x7F800000u;
    if (nan_got || nan_want)
        return nan_got && nan_want && (got >> 31) == (want >> 31);
    return got == want;
}

/* ------------------------------------------------------------ vectors -- */

typedef struct Counts {
    int e4m3_decode, e4m3_encode, e8m0_decode, e8m0_encode, quant, quant_elems;
} Counts;

/* Reads whitespace-separated hex numbers from s into out (at most n);
 * returns how many were read. */
static int64_t parse_hex(const char *s, uint32_t *out, int64_t n)
{
    int64_t k = 0;
    char *end;
    while (k < n) {
        unsigned long v = strtoul(s, &end, 16);
        if (end == s)
            break;
        out[k++] = (uint32_t)v;
        s = end;
    }
    while (*s == ' ' || *s == '\n' || *s == '\r')
        s++;
    return *s ? -1 : k; /* trailing junk or too many numbers: malformed */
}

/* Reads the next line of f, which must start with `tag `, into a fresh
 * array of exactly n numbers. Returns NULL (after a failed CHECK) if not. */
static uint32_t *read_array(FILE *f, const char *tag, int64_t n, const char *name)
{
    char *line = NULL;
    size_t cap = 0;
    size_t tl = strlen(tag);
    uint32_t *a = NULL;
    if (getline(&line, &cap, f) < 0 || strncmp(line, tag, tl) != 0 || line[tl] != ' ') {
        CHECK(0, "case %s: expected a `%s` line", name, tag);
        goto out;
    }
    a = malloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    if (!a)
        die("out of memory");
    int64_t got = parse_hex(line + tl, a, n);
    if (got != n) {
        CHECK(0, "case %s: `%s` line has %lld numbers or junk, want %lld", name, tag, (long long)got,
              (long long)n);
        free(a);
        a = NULL;
    }
out:
    free(line);
    return a;
}

/* One `quant` case: quantize, dequantize and fake-quant must all agree
 * with the reference. */
static void run_quant_case(FILE *f, const char *hdr, Counts *cnt)
{
    char name[128], rule_s[8], axis_s[8];
    long long rows, cols;
    if (sscanf(hdr, "quant %127s %7s %7s %lld %lld", name, rule_s, axis_s, &rows, &cols) != 5) {
        CHECK(0, "bad quant header: %s", hdr);
        return;
    }
    int rule = strcmp(rule_s, "ocp") == 0 ? MXFP8_SCALE_OCP : MXFP8_SCALE_TE;
    int axis = strcmp(axis_s, "col") == 0 ? MXFP8_COLWISE : MXFP8_ROWWISE;
    int64_t n = rows * cols, ns = n / MXFP8_BLOCK;
    char id[160];
    snprintf(id, sizeof id, "%s/%s/%s", name, rule_s, axis_s);

    uint32_t *in = read_array(f, "in", n, id);
    uint32_t *val = in ? read_array(f, "val", n, id) : NULL;
    uint32_t *scale = val ? read_array(f, "scale", ns, id) : NULL;
    uint32_t *deq = scale ? read_array(f, "deq", n, id) : NULL;
    if (!deq)
        goto out;

    float *x = malloc((size_t)n * sizeof *x);
    float *y = malloc((size_t)n * sizeof *y);
    uint8_t *v = malloc((size_t)n);
    uint8_t *s = malloc((size_t)(ns > 0 ? ns : 1));
    if (!x || !y || !v || !s)
        die("out of memory");
    for (int64_t i = 0; i < n; i++)
        x[i] = bitsf(in[i]);

    int st = mxfp8_quantize(x, rows, cols, axis, rule, v, s);
    CHECK(st == MXFP8_OK, "%s: quantize: %s", id, mxfp8_status_str(st));
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (v[i] != val[i] && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %lld value codes differ; first at %lld: in %08x got %02x want %02x", id,
          (long long)bad, (long long)first, first >= 0 ? in[first] : 0, first >= 0 ? v[first] : 0,
          first >= 0 ? val[first] : 0);
    bad = 0;
    for (int64_t i = 0; i < ns; i++)
        if (s[i] != scale[i] && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %lld scale codes differ; first at block %lld: got %02x want %02x", id, (long long)bad,
          (long long)first, bad ? s[first] : 0, bad ? scale[first] : 0);

    /* Dequantize the reference codes, so a value mismatch above does not
     * hide a dequantization bug. */
    for (int64_t i = 0; i < n; i++)
        v[i] = (uint8_t)val[i];
    for (int64_t i = 0; i < ns; i++)
        s[i] = (uint8_t)scale[i];
    st = mxfp8_dequantize(v, s, rows, cols, axis, y);
    CHECK(st == MXFP8_OK, "%s: dequantize: %s", id, mxfp8_status_str(st));
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!same_float(fbits(y[i]), deq[i]) && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %lld dequantized values differ; first at %lld: got %08x want %08x", id, (long long)bad,
          (long long)first, bad ? fbits(y[first]) : 0, bad ? deq[first] : 0);

    st = mxfp8_fake_quant(x, rows, cols, axis, rule);
    CHECK(st == MXFP8_OK, "%s: fake_quant: %s", id, mxfp8_status_str(st));
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!same_float(fbits(x[i]), deq[i]) && bad++ == 0)
            first = i;
    CHECK(bad == 0, "%s: %lld fake-quant values differ; first at %lld: got %08x want %08x", id, (long long)bad,
          (long long)first, bad ? fbits(x[first]) : 0, bad ? deq[first] : 0);

    cnt->quant++;
    cnt->quant_elems += (int)n;
    free(x);
    free(y);
    free(v);
    free(s);
out:
    free(in);
    free(val);
    free(scale);
    free(deq);
}

static void test_vectors(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s (run from the repository root)", path);
    if (!f)
        return;
    Counts cnt = {0};
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        unsigned a, b;
        int e;
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "e4m3_decode %x %x", &a, &b) == 2) {
            CHECK(same_float(fbits(e4m3_to_float((uint8_t)a)), b), "e4m3_decode %02x: got %08x want %08x", a,
                  fbits(e4m3_to_float((uint8_t)a)), b);
            cnt.e4m3_decode++;
        } else if (sscanf(line, "e4m3_encode %x %x", &a, &b) == 2) {
            uint8_t got = e4m3_from_float(bitsf(a));
            CHECK(got == b, "e4m3_encode %08x (%g): got %02x want %02x", a, (double)bitsf(a), got, b);
            cnt.e4m3_encode++;
        } else if (sscanf(line, "e8m0_decode %x %x", &a, &b) == 2) {
            CHECK(same_float(fbits(e8m0_to_float((uint8_t)a)), b), "e8m0_decode %02x: got %08x want %08x", a,
                  fbits(e8m0_to_float((uint8_t)a)), b);
            cnt.e8m0_decode++;
        } else if (sscanf(line, "e8m0_encode %d %x", &e, &b) == 2) {
            CHECK(e8m0_from_exponent(e) == b, "e8m0_encode %d: got %02x want %02x", e, e8m0_from_exponent(e), b);
            cnt.e8m0_encode++;
        } else if (strncmp(line, "quant ", 6) == 0) {
            run_quant_case(f, line, &cnt);
        } else {
            CHECK(0, "%s:%d: unrecognised line", path, lineno);
        }
    }
    free(line);
    fclose(f);
    /* A truncated or emptied file must not pass quietly. */
    CHECK(cnt.e4m3_decode == 256, "%d e4m3_decode records, want 256", cnt.e4m3_decode);
    CHECK(cnt.e8m0_decode == 256, "%d e8m0_decode records, want 256", cnt.e8m0_decode);
    CHECK(cnt.e8m0_encode == 255, "%d e8m0_encode records, want 255", cnt.e8m0_encode);
    CHECK(cnt.e4m3_encode >= 5000, "only %d e4m3_encode records", cnt.e4m3_encode);
    CHECK(cnt.quant >= 80 && cnt.quant_elems >= 20000, "only %d quant cases, %d elements", cnt.quant,
          cnt.quant_elems);
    printf("test_mxfp8: vectors: %d e4m3 decodes, %d e4m3 encodes, %d e8m0 decodes, %d e8m0 encodes, "
           "%d quant cases (%d elements)\n",
           cnt.e4m3_decode, cnt.e4m3_encode, cnt.e8m0_decode, cnt.e8m0_encode, cnt.quant, cnt.quant_elems);
}

/* --------------------------------------------------- reference-free -- */

/* Deterministic generator for the tests below (xorshift64*). */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Nearest E4M3 code by search over all finite codes in double, ties to the
 * even code (the code's low bit is the mantissa's), with saturation. */
static uint8_t e4m3_oracle(float x)
{
    static double v[127];
    static int init;
    if (!init) {
        for (int c = 0; c < 127; c++)
            v[c] = c < 8 ? ldexp(c, -9) : ldexp(8 + (c & 7), (c >> 3) - 10);
        init = 1;
    }
    uint8_t sign = (uint8_t)((fbits(x) >> 24) & 0x80);
    if (isnan(x))
        return sign | 0x7F;
    double a = fabs((double)x);
    if (a >= 448.0)
        return sign | 0x7E;
    int i = 0;
    while (v[i + 1] <= a)
        i++;
    double d0 = a - v[i], d1 = v[i + 1] - a;
    int pick = d0 < d1 ? i : d1 < d0 ? i + 1 : (i % 2 == 0 ? i : i + 1);
    return sign | (uint8_t)pick;
}

static void test_e4m3(void)
{
    CHECK(e4m3_from_float(0.0f) == 0x00, "+0");
    CHECK(e4m3_from_float(-0.0f) == 0x80, "-0 keeps its sign");
    CHECK(e4m3_from_float(448.0f) == 0x7E, "448");
    CHECK(e4m3_from_float(463.99997f) == 0x7E && e4m3_from_float(464.0f) == 0x7E &&
              e4m3_from_float(1e30f) == 0x7E && e4m3_from_float(-1e30f) == 0xFE,
          "finite values beyond 448 saturate");
    CHECK(e4m3_from_float(INFINITY) == 0x7E && e4m3_from_float(-INFINITY) == 0xFE, "Inf saturates");
    CHECK(e4m3_from_float(NAN) == 0x7F && e4m3_from_float(-NAN) == 0xFF, "NaN keeps its sign");
    CHECK(e4m3_from_float(0x1p-10f) == 0x00, "2^-10 is a tie between 0 and 2^-9: even is 0");
    CHECK(e4m3_from_float(0x1.000002p-10f) == 0x01, "just above 2^-10 rounds up");
    CHECK(e4m3_from_float(3 * 0x1p-10f) == 0x02, "3 * 2^-10 ties to the even code 2");
    CHECK(e4m3_from_float(1.0625f) == 0x38, "1.0625 ties down to 1.0");
    CHECK(e4m3_from_float(1.1875f) == 0x3A, "1.1875 ties up to 1.25");
    CHECK(e4m3_from_float(-0x1p-149f) == 0x80, "a negative float subnormal gives -0");
    CHECK(e4m3_to_float(0x01) == 0x1p-9f && e4m3_to_float(0x08) == 0x1p-6f && e4m3_to_float(0x7E) == 448.0f &&
              e4m3_to_float(0xFE) == -448.0f,
          "decode of landmarks");
    CHECK(fbits(e4m3_to_float(0x80)) == 0x80000000u, "0x80 is -0");
    CHECK(isnan(e4m3_to_float(0x7F)) && isnan(e4m3_to_float(0xFF)) && signbit(e4m3_to_float(0xFF)), "NaN codes");

    int rt_bad = 0;
    for (int c = 0; c < 256; c++)
        if ((c & 0x7F) != 0x7F && e4m3_from_float(e4m3_to_float((uint8_t)c)) != c)
            rt_bad++;
    CHECK(rt_bad == 0, "%d finite codes do not survive decode + encode", rt_bad);

    /* Every 4099th bit pattern (a million patterns spread over all
     * exponents) and a million random ones near E4M3's range. */
    int bad = 0;
    uint32_t first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) {
        float x = bitsf((uint32_t)u);
        if (e4m3_from_float(x) != e4m3_oracle(x) && bad++ == 0)
            first = (uint32_t)u;
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (rnd32() & 0x807FFFFFu) | ((uint32_t)(127 - 12 + rnd32() % 22) << 23);
        if (e4m3_from_float(bitsf(u)) != e4m3_oracle(bitsf(u)) && bad++ == 0)
            first = u;
    }
    CHECK(bad == 0, "%d encodes differ from the brute-force oracle; first %08x", bad, first);
}

static void test_e8m0(void)
{
    CHECK(e8m0_from_exponent(0) == 127 && e8m0_from_exponent(-127) == 0 && e8m0_from_exponent(127) == 254,
          "e8m0 codes");
    CHECK(e8m0_from_exponent(-1000) == 0 && e8m0_from_exponent(1000) == 254, "exponents clamp to [-127, 127]");
    CHECK(e8m0_to_float(0) == ldexpf(1.0f, -127) && e8m0_to_float(127) == 1.0f &&
              e8m0_to_float(254) == ldexpf(1.0f, 127),
          "e8m0 values");
    CHECK(isnan(e8m0_to_float(E8M0_NAN)), "0xFF is NaN");
    int bad = 0;
    for (int e = -127; e <= 127; e++)
        if (e8m0_to_float(e8m0_from_exponent(e)) != ldexpf(1.0f, e))
            bad++;
    CHECK(bad == 0, "%d exponents do not round-trip", bad);
}

/* The rules by their defining inequalities, in double (exact for these
 * powers of two): TE: 448 * 2^(e-1) < amax <= 448 * 2^e; OCP:
 * 2^(e+8) <= amax < 2^(e+9); both unless clamped. */
static void test_scale_rules(void)
{
    int bad_te = 0, bad_ocp = 0;
    uint32_t first_te = 0, first_ocp = 0;
    for (uint32_t u = 1; u < 0x7F800000u; u += 997) {
        double a = bitsf(u);
        int e = mxfp8_scale_exponent(bitsf(u), MXFP8_SCALE_TE);
        int ok = (e == -127 ? a <= ldexp(448, -127) : ldexp(448, e - 1) < a && a <= ldexp(448, e));
        if (!ok && bad_te++ == 0)
            first_te = u;
        e = mxfp8_scale_exponent(bitsf(u), MXFP8_SCALE_OCP);
        ok = (e == -127 ? a < ldexp(1, -118) : ldexp(1, e + 8) <= a && a < ldexp(1, e + 9));
        if (!ok && bad_ocp++ == 0)
            first_ocp = u;
    }
    CHECK(bad_te == 0, "TE rule broken for %d amax values; first %08x", bad_te, first_te);
    CHECK(bad_ocp == 0, "OCP rule broken for %d amax values; first %08x", bad_ocp, first_ocp);
    CHECK(mxfp8_scale_exponent(0.0f, MXFP8_SCALE_TE) == -127 && mxfp8_scale_exponent(0.0f, MXFP8_SCALE_OCP) == -127,
          "amax 0 gives the smallest scale");
    CHECK(mxfp8_scale_exponent(INFINITY, MXFP8_SCALE_TE) == 127 &&
              mxfp8_scale_exponent(INFINITY, MXFP8_SCALE_OCP) == 127,
          "infinite amax gives the largest scale");
    CHECK(mxfp8_scale_exponent(0x1.fffffep127f, MXFP8_SCALE_TE) == 120, "FLT_MAX needs 2^120 under TE");
    CHECK(mxfp8_scale_exponent(448.0f, MXFP8_SCALE_TE) == 0 && mxfp8_scale_exponent(0x1.c00002p8f, MXFP8_SCALE_TE) == 1,
          "448 and the float after it");
}

/* Where the rules differ: amax 480 = 1.875 * 2^8. TE picks 2^1 and keeps
 * 480 exactly (240 is an E4M3 value); OCP picks 2^0 and 480 saturates to
 * 448. A block with amax 1.0 gets the same scale, 2^-8, from both. */
static void test_ocp_rule(void)
{
    float x[MXFP8_BLOCK] = {480.0f, -3.0f, 0.5f, 1e-3f};
    uint8_t v[MXFP8_BLOCK], s;
    CHECK(mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_OCP, v, &s) == MXFP8_OK, "ocp quantize");
    CHECK(s == 127 && v[0] == 0x7E, "OCP: scale code %02x (want 7f), 480 -> %02x (want 7e, saturated)", s, v[0]);
    CHECK(v[1] == e4m3_from_float(-3.0f) && v[2] == e4m3_from_float(0.5f) && v[3] == e4m3_from_float(1e-3f),
          "OCP: the rest are plain casts at scale 1");
    CHECK(mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s) == MXFP8_OK, "te quantize");
    CHECK(s == 128 && v[0] == 0x77 && e4m3_to_float(v[0]) * e8m0_to_float(s) == 480.0f,
          "TE: scale code %02x (want 80), 480 -> %02x (want 77 = 240)", s, v[0]);

    float y[MXFP8_BLOCK] = {1.0f, 0.75f, -0.3f};
    uint8_t s_te, s_ocp, v_te[MXFP8_BLOCK], v_ocp[MXFP8_BLOCK];
    mxfp8_quantize(y, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v_te, &s_te);
    mxfp8_quantize(y, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_OCP, v_ocp, &s_ocp);
    CHECK(s_te == 127 - 8 && s_ocp == s_te && memcmp(v_te, v_ocp, sizeof v_te) == 0 && v_te[0] == 0x78,
          "amax 1: both rules give 2^-8 and 1.0 -> 256 (code 78)");

    /* Away from the clamps TE's exponent is OCP's or one more: one more
     * exactly when amax's mantissa (in [1, 2)) is above 1.75, and only then
     * can OCP saturate. */
    int bad = 0, sat = 0, differ = 0;
    for (int i = 0; i < 20000; i++) {
        float amax = bitsf((rnd32() & 0x007FFFFFu) | ((uint32_t)(127 - 60 + rnd32() % 120) << 23));
        int e_te = mxfp8_scale_exponent(amax, MXFP8_SCALE_TE);
        int e_ocp = mxfp8_scale_exponent(amax, MXFP8_SCALE_OCP);
        int above = (fbits(amax) & 0x7FFFFFu) > 0x600000u; /* mantissa > 1.75 */
        bad += e_te != e_ocp + above;
        differ += above;
        float z[MXFP8_BLOCK] = {amax};
        uint8_t vz[MXFP8_BLOCK], sz;
        mxfp8_quantize(z, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_OCP, vz, &sz);
        sat += above && vz[0] == 0x7E && ldexpf(amax, -e_ocp) > 448.0f;
    }
    CHECK(bad == 0, "%d amax values where TE's exponent is not OCP's (+1 above mantissa 1.75)", bad);
    CHECK(differ > 0 && sat == differ, "OCP saturates exactly where the rules differ (%d of %d)", sat, differ);
}

static void fill_matrix(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        /* Random values over 2^-40 .. 2^40, with a few specials mixed in. */
        float v = ldexpf((float)(int32_t)rnd32() / 2147483648.0f, (int)(rnd32() % 81) - 40);
        uint32_t r = rnd32() % 500;
        x[i] = r == 0 ? NAN : r == 1 ? -INFINITY : r == 2 ? -0.0f : r == 3 ? 0x1p-140f : v;
    }
}

static void test_colwise_is_rowwise_of_transpose(void)
{
    enum { R = 96, C = 64 };
    static float x[R * C], xt[C * R];
    static uint8_t vc[R * C], vr[C * R], sc[R / 32 * C], sr[C * (R / 32)];
    fill_matrix(x, R * C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++)
            xt[c * R + r] = x[r * C + c];
    for (int rule = MXFP8_SCALE_TE; rule <= MXFP8_SCALE_OCP; rule++) {
        CHECK(mxfp8_quantize(x, R, C, MXFP8_COLWISE, rule, vc, sc) == MXFP8_OK, "colwise");
        CHECK(mxfp8_quantize(xt, C, R, MXFP8_ROWWISE, rule, vr, sr) == MXFP8_OK, "rowwise of transpose");
        int bad_v = 0, bad_s = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                bad_v += vc[r * C + c] != vr[c * R + r];
        for (int b = 0; b < R / 32; b++)
            for (int c = 0; c < C; c++)
                bad_s += sc[b * C + c] != sr[c * (R / 32) + b];
        CHECK(bad_v == 0 && bad_s == 0, "rule %d: %d values and %d scales differ from the transpose's", rule, bad_v,
              bad_s);

        /* And the rowwise and colwise copies really differ (different blocks). */
        static uint8_t vrow[R * C], srow[R * (C / 32)];
        mxfp8_quantize(x, R, C, MXFP8_ROWWISE, rule, vrow, srow);
        CHECK(memcmp(vrow, vc, sizeof vrow) != 0, "rowwise and colwise copies are not the same");
    }
}

static void test_fake_quant(void)
{
    enum { R = 64, C = 96 };
    static float x[R * C], y[R * C], z[R * C];
    static uint8_t v[R * C], s[R * C / 32];
    for (int axis = MXFP8_ROWWISE; axis <= MXFP8_COLWISE; axis++)
        for (int rule = MXFP8_SCALE_TE; rule <= MXFP8_SCALE_OCP; rule++) {
            fill_matrix(x, R * C);
            CHECK(mxfp8_quantize(x, R, C, axis, rule, v, s) == MXFP8_OK, "quantize");
            CHECK(mxfp8_dequantize(v, s, R, C, axis, y) == MXFP8_OK, "dequantize");
            memcpy(z, x, sizeof x);
            CHECK(mxfp8_fake_quant(z, R, C, axis, rule) == MXFP8_OK, "fake_quant");
            int bad = 0;
            for (int i = 0; i < R * C; i++)
                bad += !same_float(fbits(z[i]), fbits(y[i]));
            CHECK(bad == 0, "axis %d rule %d: fake_quant differs from dequantize(quantize) in %d", axis, rule, bad);
            memcpy(y, z, sizeof z);
            CHECK(mxfp8_fake_quant(z, R, C, axis, rule) == MXFP8_OK, "fake_quant again");
            bad = 0;
            for (int i = 0; i < R * C; i++)
                bad += !same_float(fbits(z[i]), fbits(y[i]));
            CHECK(bad == 0, "axis %d rule %d: fake_quant is not idempotent (%d values moved)", axis, rule, bad);
        }
}

static void test_special_blocks(void)
{
    float x[MXFP8_BLOCK];
    uint8_t v[MXFP8_BLOCK], s;

    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = i % 2 ? -0.0f : 0.0f;
    mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s);
    CHECK(s == 0 && v[0] == 0x00 && v[1] == 0x80, "zero block: scale 2^-127, signed zeros");

    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = (float)(i + 1);
    x[3] = NAN;
    mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s);
    CHECK(s == 127 - 3 && v[3] == 0x7F && v[31] == e4m3_from_float(256.0f),
          "NaN stays in its element; scale from the rest (amax 32 -> 2^-3)");
    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = NAN;
    mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s);
    CHECK(s == 0 && v[0] == 0x7F, "all-NaN block: scale 2^-127, NaN codes");

    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = (float)(i + 1);
    x[5] = -INFINITY;
    mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s);
    CHECK(s == 254 && v[5] == 0xFE && v[0] == 0x00 && v[31] == 0x00,
          "Inf block: scale 2^127, Inf -> -448, the rest flush to zero");
    float y[MXFP8_BLOCK];
    mxfp8_dequantize(v, &s, 1, MXFP8_BLOCK, MXFP8_ROWWISE, y);
    CHECK(isinf(y[5]) && y[5] < 0 && y[0] == 0.0f, "the Inf comes back as -Inf (448 * 2^127 overflows)");

    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = 1.0f;
    x[0] = 0x1.fffffep127f;
    mxfp8_fake_quant(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE);
    CHECK(isinf(x[0]) && x[1] == 0.0f, "FLT_MAX rounds to 256 * 2^120 = 2^128, which is Inf in float");

    /* Blocks so small that the scale is clamped at 2^-127: values still
     * scaled exactly (TE's kernels multiply by 1 here and lose them). */
    for (int i = 0; i < MXFP8_BLOCK; i++)
        x[i] = ldexpf((float)(i + 1), -130);
    mxfp8_quantize(x, 1, MXFP8_BLOCK, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, &s);
    CHECK(s == 0 && v[31] == e4m3_from_float(ldexpf(32.0f, -3)), "tiny block kept: got %02x", v[31]);
}

static void test_misuse(void)
{
    float x[64 * 48] = {0};
    uint8_t v[64 * 48], s[128];
    memset(v, 0xAB, sizeof v);
    memset(s, 0xAB, sizeof s);
    CHECK(mxfp8_quantize(x, 2, 33, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_ERR_SHAPE, "cols 33 rowwise");
    CHECK(mxfp8_quantize(x, 48, 32, MXFP8_COLWISE, MXFP8_SCALE_TE, v, s) == MXFP8_ERR_SHAPE, "rows 48 colwise");
    CHECK(v[0] == 0xAB && s[0] == 0xAB, "nothing written on error");
    CHECK(mxfp8_quantize(x, 48, 32, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_OK,
          "rows 48 is fine rowwise (only the blocked dimension counts)");
    CHECK(mxfp8_quantize(x, 64, 48, MXFP8_COLWISE, MXFP8_SCALE_TE, v, s) == MXFP8_OK, "cols 48 is fine colwise");
    CHECK(mxfp8_quantize(x, -1, 32, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_ERR_SHAPE, "negative rows");
    CHECK(mxfp8_quantize(x, INT64_MAX / 2, 64, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_ERR_SHAPE,
          "rows * cols overflows");
    CHECK(mxfp8_quantize(x, 1, 32, 2, MXFP8_SCALE_TE, v, s) == MXFP8_ERR_AXIS, "bad axis");
    CHECK(mxfp8_quantize(x, 1, 32, MXFP8_ROWWISE, 7, v, s) == MXFP8_ERR_RULE, "bad rule");
    CHECK(mxfp8_quantize(x, 0, 32, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_OK &&
              mxfp8_quantize(x, 5, 0, MXFP8_ROWWISE, MXFP8_SCALE_TE, v, s) == MXFP8_OK,
          "empty matrices are fine");
    CHECK(mxfp8_dequantize(v, s, 1, 40, MXFP8_ROWWISE, x) == MXFP8_ERR_SHAPE, "dequantize checks too");
    CHECK(mxfp8_fake_quant(x, 40, 1, MXFP8_COLWISE, MXFP8_SCALE_OCP) == MXFP8_ERR_SHAPE, "fake_quant checks too");
    CHECK(strstr(mxfp8_status_str(MXFP8_ERR_SHAPE), "multiple of 32") != NULL, "status text");
    CHECK(strcmp(mxfp8_status_str(MXFP8_OK), "ok") == 0, "ok text");
}

int main(int argc, char **argv)
{
    test_vectors(argc > 1 ? argv[1] : "tests/mxfp8/vectors.txt");
    test_e4m3();
    test_e8m0();
    test_scale_rules();
    test_ocp_rule();
    test_colwise_is_rowwise_of_transpose();
    test_fake_quant();
    test_special_blocks();
    test_misuse();
    printf("test_mxfp8: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
