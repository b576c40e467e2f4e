#!/usr/bin/env python3
"""gen_vectors.py - reference vectors for moec's MXFP8 numerics.

An implementation independent of runtime/cpu/mxfp8.c: E4M3 conversions are
torch's own float8_e4m3fn casts (after an explicit clamp to +-448, which is
the saturation MXFP8 quantizers apply), E8M0 scales go through ml_dtypes'
float8_e8m0fnu, and block scale exponents are found with exact rational
arithmetic (fractions.Fraction) on the float's value. It writes
tests/mxfp8/vectors.txt, which tests/unit/test_mxfp8.c parses. The format,
one record per line, hex without 0x:

    e4m3_decode CODE FLOATBITS      torch: code -> float32
    e4m3_encode FLOATBITS CODE      torch: clamp(x, -448, 448) -> e4m3
    e8m0_decode CODE FLOATBITS      ml_dtypes: code -> float32
    e8m0_encode EXP CODE            ml_dtypes: float32(2^EXP) -> e8m0 (EXP decimal)
    quant NAME RULE AXIS ROWS COLS  RULE te|ocp, AXIS row|col, then four lines:
    in FLOATBITS...                 the input, row-major [ROWS, COLS]
    val CODE...                     E4M3 codes, row-major [ROWS, COLS]
    scale CODE...                   E8M0 codes, [ROWS, COLS/32] (row) or [ROWS/32, COLS] (col)
    deq FLOATBITS...                val * 2^(scale-127), rounded to float32

Lines starting with # are comments; the header records the versions and the
cross-checks (torch CPU vs CUDA casts, torch vs ml_dtypes casts).

Run: cd tests/mxfp8 && python3 gen_vectors.py   (writes vectors.txt here)
"""

import math
import platform
import sys
from fractions import Fraction

import numpy as np
import torch

try:
    import ml_dtypes
except ImportError:  # documented fallback: E8M0 codes computed with numpy
    ml_dtypes = None

F8 = torch.float8_e4m3fn
BLOCK = 32
E4M3_MAX = 448.0

notes = []  # header lines describing the cross-checks
disagreements = []  # their counts of differing values


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def bits_to_f32(u):
    return np.asarray(u, dtype=np.uint32).view(np.float32)


def f32_bits(a):
    return f32(a).view(np.uint32)


# ---------------------------------------------------------------- E4M3 ----

def torch_e4m3_codes(x, device="cpu"):
    """Saturating encode: clamp to +-448 (NaN passes through clamp), then
    torch's round-to-nearest-even cast."""
    t = torch.from_numpy(f32(x).copy()).to(device)
    # torch.where keeps NaN explicitly rather than trusting clamp with it.
    t = torch.where(torch.isnan(t), t, torch.clamp(t, -E4M3_MAX, E4M3_MAX))
    return t.to(F8).view(torch.uint8).cpu().numpy().copy()


def torch_e4m3_values(codes):
    t = torch.from_numpy(np.asarray(codes, dtype=np.uint8).copy())
    return t.view(F8).to(torch.float32).numpy().copy()


def same_code(a, b):
    """Codes equal, counting any two NaN codes of the same sign as equal."""
    a = np.asarray(a, dtype=np.uint8)
    b = np.asarray(b, dtype=np.uint8)
    nan_a = (a & 0x7F) == 0x7F
    nan_b = (b & 0x7F) == 0x7F
    return (a == b) | (nan_a & nan_b & ((a & 0x80) == (b & 0x80)))


def encode(x):
    """The reference encode, cross-checked against CUDA and ml_dtypes."""
    x = f32(x)
    codes = torch_e4m3_codes(x)
    if torch.cuda.is_available():
        g = torch_e4m3_codes(x, "cuda")
        check_counts["cuda"][0] += x.size
        check_counts["cuda"][1] += int((g != codes).sum())
    if ml_dtypes is not None:
        with np.errstate(invalid="ignore"):
            m = np.clip(x, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        check_counts["ml_dtypes"][0] += x.size
        check_counts["ml_dtypes"][1] += int((~same_code(m, codes)).sum())
    return codes


check_counts = {"cuda": [0, 0], "ml_dtypes": [0, 0]}

# ---------------------------------------------------------------- E8M0 ----


def e8m0_decode_all():
    codes = np.arange(256, dtype=np.uint8)
    if ml_dtypes is not None:
        return codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    out = np.ldexp(np.ones(256, dtype=np.float64), codes.astype(np.int64) - 127).astype(np.float32)
    out[255] = np.nan
    return out


def e8m0_code(e):
    """Code of the scale 2^e, through ml_dtypes (numpy fallback: e + 127)."""
    if ml_dtypes is not None:
        s = np.array([math.ldexp(1.0, e)], dtype=np.float32)
        return int(s.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)[0])
    return e + 127


# ------------------------------------------------------- scale exponent ----

def clamp_exp(e):
    return max(-127, min(127, e))


def te_exponent(amax):
    """Smallest integer k with 448 * 2^k >= amax, exactly, then clamped."""
    if amax == 0.0:
        return -127
    if math.isinf(amax):
        return 127
    a = Fraction(amax)
    k = math.frexp(amax)[1] - 9  # a starting guess; the loops make it exact
    while Fraction(448) * Fraction(2) ** k < a:
        k += 1
    while Fraction(448) * Fraction(2) ** (k - 1) >= a:
        k -= 1
    return clamp_exp(k)


def ocp_exponent(amax):
    """floor(log2(amax)) - 8, exactly, then clamped."""
    if amax == 0.0:
        return -127
    if math.isinf(amax):
        return 127
    a = Fraction(amax)
    k = math.frexp(amax)[1] - 1
    while Fraction(2) ** k > a:
        k -= 1
    while Fraction(2) ** (k + 1) <= a:
        k += 1
    return clamp_exp(k - 8)


def block_exponent(block, rule):
    a = np.abs(block.astype(np.float64))
    a = a[~np.isnan(a)]  # NaN does not take part in amax (TE's fmaxf)
    amax = float(a.max()) if a.size else 0.0
    return te_exponent(amax) if rule == "te" else ocp_exponent(amax)


def quantize(x, axis, rule):
    """x float32 [rows, cols] -> (codes [rows, cols], scales, dequant float32)."""
    rows, cols = x.shape
    if axis == "row":
        assert cols % BLOCK == 0
        scales_e = np.zeros((rows, cols // BLOCK), dtype=np.int64)
        for r in range(rows):
            for b in range(cols // BLOCK):
                scales_e[r, b] = block_exponent(x[r, b * BLOCK:(b + 1) * BLOCK], rule)
        elem_e = np.repeat(scales_e, BLOCK, axis=1)
    else:
        assert rows % BLOCK == 0
        scales_e = np.zeros((rows // BLOCK, cols), dtype=np.int64)
        for b in range(rows // BLOCK):
            for c in range(cols):
                scales_e[b, c] = block_exponent(x[b * BLOCK:(b + 1) * BLOCK, c], rule)
        elem_e = np.repeat(scales_e, BLOCK, axis=0)
    # x * 2^-e is exact in float64; back in float32 it is exact too unless
    # it falls below 2^-126, where every value rounds to +-0 in E4M3 anyway.
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.ldexp(x.astype(np.float64), -elem_e).astype(np.float32)
    codes = encode(scaled.reshape(-1)).reshape(rows, cols)
    scale_codes = np.vectorize(e8m0_code, otypes=[np.int64])(scales_e).astype(np.uint8)
    vals = torch_e4m3_values(codes.reshape(-1)).reshape(rows, cols).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        deq = np.ldexp(vals, elem_e).astype(np.float32)
    return codes, scale_codes, deq


# ------------------------------------------------------------- inputs ----

rng = np.random.default_rng(20240611)


def e4m3_positive_values():
    """The 126 positive finite E4M3 values, ascending (codes 0x00..0x7E)."""
    return torch_e4m3_values(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)


def midpoints():
    v = e4m3_positive_values()
    return (v[:-1] + v[1:]) / 2  # exact: five significant bits at most


def random_f32_bits(n, emin, emax):
    """Random float32 with biased exponent field uniform in [emin, emax]
    (0 gives subnormals), random mantissa and sign."""
    e = rng.integers(emin, emax + 1, size=n, dtype=np.uint32)
    m = rng.integers(0, 1 << 23, size=n, dtype=np.uint32)
    s = rng.integers(0, 2, size=n, dtype=np.uint32)
    return bits_to_f32((s << 31) | (e << 23) | m)


def up(x):
    """The next float32 above x (elementwise; a scalar stays a scalar)."""
    return np.nextafter(np.asarray(x, dtype=np.float32), np.float32(np.inf))


def down(x):
    return np.nextafter(np.asarray(x, dtype=np.float32), np.float32(-np.inf))


def fill_block(lead, rest_scale):
    """A block of 32: the given leading values, then random normals scaled by
    rest_scale (kept below the leading amax)."""
    lead = list(lead)
    rest = rng.standard_normal(BLOCK - len(lead)) * rest_scale
    return f32(lead + list(rest))


def scalar_encode_inputs():
    xs = []
    v = e4m3_positive_values()
    mid = midpoints()
    xs += list(v) + list(-v)
    xs += list(mid) + list(-mid)
    xs += list(up(mid)) + list(down(mid)) + list(-up(mid)) + list(-down(mid))
    big = [448.0, 449.0, 463.99997, 464.0, 464.00003, 479.0, 480.0, 481.0, 512.0, 1000.0, 1e10, 3.4028235e38]
    xs += big + [-b for b in big]
    tiny = [2.0 ** -10, float(up(2.0 ** -10)), float(down(2.0 ** -10)), 3 * 2.0 ** -10, 5 * 2.0 ** -10,
            7 * 2.0 ** -10, 15 * 2.0 ** -10, 2.0 ** -11, 2.0 ** -126, 2.0 ** -149, 1e-30, 0.0]
    xs += tiny + [-t for t in tiny]
    xs = list(f32(xs))
    specials = bits_to_f32([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x80000000])
    xs += list(specials)
    xs += list(random_f32_bits(4000, 127 - 14, 127 + 10))
    xs += list(random_f32_bits(1000, 0, 255))  # anything, NaN and Inf included
    return f32(xs)


def quant_cases():
    """(name, x [rows, cols] float32, axis list) for every quantization case."""
    cases = []
    # Random matrices over wide ranges.
    mags = 10.0 ** rng.uniform(-6, 6, size=(16, 1))
    cases.append(("rand_normal", f32(rng.standard_normal((16, 256)) * mags), ["row"]))
    cases.append(("rand_wide_bits", random_f32_bits(4 * 256, 1, 254).reshape(4, 256), ["row"]))
    cases.append(("rand_subnormal_bits", random_f32_bits(2 * 64, 0, 3).reshape(2, 64), ["row"]))
    blk_mag = np.ldexp(1.0, rng.integers(-135, 126, size=(16, 4)))
    x = rng.standard_normal((16, 4, BLOCK)) * blk_mag[:, :, None]
    cases.append(("rand_block_mag", f32(x.reshape(16, 128)), ["row"]))
    col_mag = 10.0 ** rng.uniform(-20, 20, size=(1, 48))
    cases.append(("rand_colwise", f32(rng.standard_normal((64, 48)) * col_mag), ["col"]))
    cases.append(("rand_both_axes", f32(rng.standard_normal((64, 32)) * 3.0), ["row", "col"]))

    # Adversarial rows of blocks; each also goes in as a [32, nblocks]
    # matrix quantized colwise (column j = block j).
    adv = []
    adv.append(("zeros", [f32(np.zeros(BLOCK))]))
    adv.append(("neg_zeros", [f32(-np.zeros(BLOCK))]))
    adv.append(("mixed_zeros", [f32([0.0, -0.0] * 16)]))
    ks = [-140, -133, -127, -126, -120, -20, -1, 0, 1, 20, 100, 119]
    adv.append(("amax_exact", [fill_block([E4M3_MAX * 2.0 ** k], 2.0 ** k) for k in ks]))
    adv.append(("amax_above", [fill_block([float(up(E4M3_MAX * 2.0 ** k))], 2.0 ** k) for k in ks]))
    adv.append(("amax_below", [fill_block([float(down(E4M3_MAX * 2.0 ** k))], 2.0 ** k) for k in ks]))
    adv.append(("amax_neg", [fill_block([-E4M3_MAX * 2.0 ** k], 2.0 ** k) for k in ks[:6]]))
    # Around amax = 448 * 2^-127, the one place where TE's float product
    # amax * (1/448) gives a different scale code than the exact rule.
    edge = E4M3_MAX * 2.0 ** -127
    adv.append(("amax_tiny_edge", [f32([edge] + [edge / 3] * 31), f32([float(up(edge))] + [edge / 3] * 31),
                                   f32([float(up(up(edge)))] + [-edge / 5] * 31),
                                   f32([float(down(edge))] + [edge / 7] * 31)]))
    mid = midpoints()
    allmid = np.concatenate([mid, -mid])
    tie_blocks = []
    for k in [0, -100, 5, 100]:
        for i in range(0, allmid.size, BLOCK - 1):
            chunk = allmid[i:i + BLOCK - 1]
            chunk = np.concatenate([chunk, np.zeros(BLOCK - 1 - chunk.size)])
            tie_blocks.append(f32(np.ldexp(np.concatenate([[E4M3_MAX], chunk]), k)))
    adv.append(("ties", tie_blocks))
    near = []
    for i in range(0, mid.size, BLOCK - 1):
        chunk = mid[i:i + BLOCK - 1]
        chunk = np.concatenate([chunk, np.zeros(BLOCK - 1 - chunk.size)])
        near.append(f32([E4M3_MAX] + list(up(chunk))))
        near.append(f32([E4M3_MAX] + list(-down(chunk))))
    adv.append(("ties_near", near))
    sub = [k * 2.0 ** -10 for k in range(0, 16)] + [-k * 2.0 ** -10 for k in range(1, 16)]
    adv.append(("e4m3_subnormals", [f32([E4M3_MAX] + sub)]))
    under = [2.0 ** -11, 2.0 ** -10, float(up(2.0 ** -10)), float(down(2.0 ** -10)), 1e-30, 2.0 ** -149,
             2.0 ** -126, -2.0 ** -10, -(2.0 ** -11), -1e-30, -(2.0 ** -149), -0.0]
    adv.append(("underflow", [f32([E4M3_MAX] + under + [0.0] * (BLOCK - 1 - len(under))),
                              f32([1.0] + [1e-5, -1e-5, 2.0 ** -17, -(2.0 ** -17), 2.0 ** -18] * 6 + [0.0])]))
    adv.append(("f32_subnormal_block", [random_f32_bits(BLOCK, 0, 0), f32([2.0 ** -149] * BLOCK),
                                        f32([2.0 ** -149, -(2.0 ** -149)] * 16)]))
    r = rng.standard_normal(BLOCK)
    nan_block = f32(r.copy())
    nan_block[5] = np.nan
    neg_nan = f32(r.copy())
    neg_nan[0] = bits_to_f32(0xFFC00000)
    adv.append(("nan", [nan_block, neg_nan, f32([np.nan] * BLOCK), f32([np.nan] + [0.0] * 31)]))
    inf_block = f32(r.copy())
    inf_block[7] = np.inf
    ninf_block = f32(r.copy())
    ninf_block[31] = -np.inf
    both = f32(r.copy())
    both[1] = np.inf
    both[2] = np.nan
    adv.append(("inf", [inf_block, ninf_block, both, f32([np.inf, -np.inf] * 16)]))
    fmax = 3.4028235e38
    adv.append(("huge", [f32([fmax, -fmax] + [1e38] * 30), f32([fmax * 0.875] + [1e30] * 31),
                         f32([float(down(E4M3_MAX * 2.0 ** 119))] + [-1e37] * 31)]))
    adv.append(("mixed_signs", [f32(np.abs(rng.standard_normal(BLOCK)) * np.tile([1, -1], 16) * 10.0 ** k)
                                for k in (-30, -3, 0, 3, 30)]))
    nz = f32(rng.standard_normal(BLOCK))
    nz[::4] = -0.0
    adv.append(("neg_zero_in_block", [nz]))
    ocp = [480.0, 500.0, 449.0, 460.8, 300.0, 256.0, 255.0, 1.9, 1.75, 1.76, 0.0009]
    adv.append(("rule_diff", [fill_block([a], a / 8) for a in ocp]))

    for name, blocks in adv:
        row = np.concatenate(blocks).reshape(1, -1)
        cases.append((name, f32(row), ["row"]))
        cases.append((name + "_colform", f32(np.stack(blocks, axis=1)), ["col"]))
    return cases


# -------------------------------------------------------------- output ----

def hexs(a, width):
    return " ".join(format(int(v), "0%dx" % width) for v in np.asarray(a).reshape(-1))


def main():
    out = []
    # E4M3: all codes decoded, cross-checked with ml_dtypes.
    codes = np.arange(256, dtype=np.uint8)
    dec = torch_e4m3_values(codes)
    if ml_dtypes is not None:
        md = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        nan_both = np.isnan(dec) & np.isnan(md)
        bad = int((~((f32_bits(dec) == f32_bits(md)) | nan_both)).sum())
        notes.append("e4m3 decode, torch vs ml_dtypes: 256 codes, %d differ (NaN payloads ignored)" % bad)
        disagreements.append(bad)
    for c, b in zip(codes, f32_bits(dec)):
        out.append("e4m3_decode %02x %08x" % (c, b))

    xs = scalar_encode_inputs()
    enc = encode(xs)
    for b, c in zip(f32_bits(xs), enc):
        out.append("e4m3_encode %08x %02x" % (b, c))

    e8 = e8m0_decode_all()
    for c, b in zip(codes, f32_bits(e8)):
        out.append("e8m0_decode %02x %08x" % (c, b))
    for e in range(-127, 128):
        out.append("e8m0_encode %d %02x" % (e, e8m0_code(e)))

    nvals = 0
    for name, x, axes in quant_cases():
        for axis in axes:
            for rule in ("te", "ocp"):
                v, s, d = quantize(x, axis, rule)
                rows, cols = x.shape
                out.append("quant %s %s %s %d %d" % (name, rule, axis, rows, cols))
                out.append("in " + hexs(f32_bits(x), 8))
                out.append("val " + hexs(v, 2))
                out.append("scale " + hexs(s, 2))
                out.append("deq " + hexs(f32_bits(d), 8))
                nvals += x.size

    for key, (n, bad) in check_counts.items():
        what = "torch CPU vs CUDA" if key == "cuda" else "torch vs ml_dtypes (after the same clamp)"
        if n:
            notes.append("e4m3 encode, %s: %d values, %d differ" % (what, n, bad))
        else:
            notes.append("e4m3 encode, %s: not run (%s unavailable)" % (what, key))
        disagreements.append(bad)

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    header = [
        "# MXFP8 reference vectors for tests/unit/test_mxfp8.c, written by tests/mxfp8/gen_vectors.py.",
        "# Do not edit; regenerate with: cd tests/mxfp8 && python3 gen_vectors.py",
        "# python %s, torch %s, numpy %s, ml_dtypes %s, machine %s, device %s"
        % (platform.python_version(), torch.__version__, np.__version__,
           ml_dtypes.__version__ if ml_dtypes is not None else "MISSING (E8M0 codes computed with numpy)",
           platform.machine(), dev),
        "# quantized elements: %d; e4m3_encode scalars: %d" % (nvals, xs.size),
    ] + ["# check: " + n for n in notes]
    with open("vectors.txt", "w") as f:
        f.write("\n".join(header + out) + "\n")
    print("\n".join(header))
    if any(disagreements):
        print("gen_vectors: the cross-checks disagree; see the # check lines", file=sys.stderr)


if __name__ == "__main__":
    main()
