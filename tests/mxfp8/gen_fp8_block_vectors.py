#!/usr/bin/env python3
"""gen_fp8_block_vectors.py - torch oracle vectors for moec's fp8-block numerics.

Independent of runtime/cpu/fp8_block.c. Block amax values are torch
reductions on the GPU (NaN replaced by 0, Inf kept), the scale exponent of
each block is found with exact rational arithmetic (fractions.Fraction: the
smallest k in [-127, 127] with 448 * 2^k >= amax), scaling is exact in
float64, and E4M3 codes are torch's float8_e4m3fn cast after an explicit
clamp to +-448 (NaN passed through), on the GPU and on the CPU, which must
agree. It writes tests/mxfp8/fp8_block_vectors.txt, which
tests/unit/test_fp8_block.c parses. Records, hex without 0x, one per line:

    fp8b NAME LAYOUT ROWS COLS   LAYOUT row (1x128) | col (128x1) | tile (128x128); then
    in FLOATBITS...              the input, row-major [ROWS, COLS]
    val CODE...                  E4M3 codes, row-major [ROWS, COLS]
    scale CODE...                E8M0 codes (k + 127), row-major: [ROWS, ceil(COLS/128)] (row),
                                 [ceil(ROWS/128), COLS] (col), [ceil(ROWS/128), ceil(COLS/128)] (tile)
    deq FLOATBITS...             decoded value * 2^k, rounded to float32
    gemm NAME M N K              then
    a FLOATBITS...               A [M, K], quantized 1x128 along K by the consumer
    b FLOATBITS...               B [N, K], quantized in 128x128 tiles by the consumer
    c64 HI LO ...                deq(A) @ deq(B)^T in float64 (torch, CPU), each double as two 32-bit words

Blocks at ragged ends are partial: amax over the elements present (what zero
padding gives). Lines starting with # are comments; "# cases N" gives the
number of fp8b records; the header records versions and cross-checks.

Run on a machine with torch (CUDA optional but expected):
    cd tests/mxfp8 && python3 gen_fp8_block_vectors.py
"""

import math
import platform
import random
import struct
import sys
from fractions import Fraction

import torch

F8 = torch.float8_e4m3fn
B = 128
DEV = "cuda" if torch.cuda.is_available() else "cpu"
checks = {"cpu_vs_device": [0, 0]}


def bits(f):
    return struct.unpack("<I", struct.pack("<f", f))[0]


def from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def exponent(amax):
    """Smallest k in [-127, 127] with 448 * 2^k >= amax, exactly."""
    if amax == 0.0 or amax != amax:
        return -127
    if math.isinf(amax):
        return 127
    a = Fraction(amax)
    k = math.frexp(amax)[1] - 9
    while Fraction(448) * Fraction(2) ** k < a:
        k += 1
    while Fraction(448) * Fraction(2) ** (k - 1) >= a:
        k -= 1
    return max(-127, min(127, k))


def block_amax(x, layout):
    """[br, bc] block amax (NaN as 0), computed with torch on DEV."""
    t = x.to(DEV)
    t = torch.where(torch.isnan(t), torch.zeros_like(t), t.abs())
    R, C = t.shape
    if layout == "col":
        return block_amax(x.t().contiguous(), "row").t().contiguous()
    pc = (C + B - 1) // B * B
    if layout == "row":
        p = torch.zeros(R, pc, dtype=torch.float32, device=DEV)
        p[:, :C] = t
        return p.view(R, pc // B, B).amax(dim=2).cpu()
    pr = (R + B - 1) // B * B
    p = torch.zeros(pr, pc, dtype=torch.float32, device=DEV)
    p[:R, :C] = t
    return p.view(pr // B, B, pc // B, B).amax(dim=(1, 3)).cpu()


def expand(s, layout, R, C):
    """Per-block values [br, bc] -> per element [R, C]."""
    if layout == "row":
        return s.repeat_interleave(B, dim=1)[:, :C]
    if layout == "col":
        return s.repeat_interleave(B, dim=0)[:R, :]
    return s.repeat_interleave(B, dim=0).repeat_interleave(B, dim=1)[:R, :C]


def e4m3(t, device):
    t = t.to(device)
    t = torch.where(torch.isnan(t), t, torch.clamp(t, -448.0, 448.0))
    return t.to(F8).view(torch.uint8).cpu()


def quantize(x, layout):
    R, C = x.shape
    am = block_amax(x, layout)
    ks = torch.tensor([[exponent(a) for a in row] for row in am.tolist()], dtype=torch.int64).reshape(am.shape)
    k = expand(ks, layout, R, C)
    # x * 2^-k is exact in float64; its float32 rounding only matters below 2^-126, where E4M3 gives 0 anyway
    scaled = (x.double() * torch.pow(torch.tensor(2.0, dtype=torch.float64), -k.double())).float()
    codes = e4m3(scaled, DEV)
    if DEV != "cpu":
        c2 = e4m3(scaled, "cpu")
        checks["cpu_vs_device"][0] += codes.numel()
        checks["cpu_vs_device"][1] += int((c2 != codes).sum())
    dec = codes.view(F8).float()
    deq = torch.where(torch.isnan(dec), dec,
                      (dec.double() * torch.pow(torch.tensor(2.0, dtype=torch.float64), k.double())).float())
    return codes, (ks + 127).to(torch.uint8), deq


def hexs(t, fl):
    flat = t.reshape(-1).tolist()
    if fl:
        return " ".join("%08x" % bits(v) for v in flat)
    return " ".join("%02x" % v for v in flat)


def record(out, name, layout, x):
    R, C = x.shape
    v, s, d = quantize(x, layout)
    out.append("fp8b %s %s %d %d" % (name, layout, R, C))
    out.append("in " + hexs(x, True))
    out.append("val " + hexs(v, False))
    out.append("scale " + hexs(s, False))
    out.append("deq " + hexs(d, True))


def randmat(rng, R, C, lo, hi):
    return torch.tensor([[rng.choice((-1, 1)) * (1 + rng.random()) * 2.0 ** rng.randint(lo, hi) for _ in range(C)]
                         for _ in range(R)], dtype=torch.float32)


def randbits(rng, R, C):
    return torch.tensor([[from_bits(rng.getrandbits(32)) for _ in range(C)] for _ in range(R)], dtype=torch.float32)


def adversarial_rows():
    """(name, list of floats, length <= 128): edge blocks."""
    rows = []
    z = [0.0] * 128
    rows.append(("zeros", z))
    rows.append(("neg_zeros", [-0.0] * 128))
    rows.append(("mixed_zeros", [(-0.0 if i % 3 else 0.0) for i in range(128)]))
    for k in range(-140, 121, 20):
        v = 448.0 * 2.0 ** k
        if v > 3.4e38 or v == 0.0:
            continue
        f = struct.unpack("<f", struct.pack("<f", v))[0]
        up = from_bits(bits(f) + 1) if f != 0 else 0.0
        dn = from_bits(bits(f) - 1) if bits(f) > 0 else 0.0
        for nm, a in (("eq", f), ("above", up), ("below", dn), ("neg", -f)):
            if a != a or math.isinf(a):
                continue
            row = [a] + [a * (i / 128.0) for i in range(1, 128)]
            rows.append(("amax_448x2^%d_%s" % (k, nm), row))
    rows.append(("flt_max", [3.4028234663852886e38] + [1.0] * 127))
    rows.append(("pos_inf", [float("inf")] + [3.0] * 127))
    rows.append(("neg_inf", [2.0] * 64 + [float("-inf")] + [1.0] * 63))
    rows.append(("one_nan", [0.25] * 7 + [float("nan")] + [2.0] + [0.25] * 119))
    rows.append(("neg_nan", [from_bits(0xFFC00000)] + [1.5] * 127))
    rows.append(("all_nan", [float("nan")] * 128))
    rows.append(("nan_inf", [float("nan"), float("-inf")] + [1.0] * 126))
    # E4M3 midpoints at scale 2^0 (448 fixes the scale), and the floats either side
    codes = torch.arange(0, 0x7E).to(torch.uint8).view(F8).float().tolist()
    mids = [(codes[i] + codes[i + 1]) / 2 for i in range(len(codes) - 1)]
    for part in range(0, len(mids), 40):
        m = mids[part:part + 40]
        row = [448.0] + m + [from_bits(bits(v) + 1) for v in m] + [from_bits(bits(v) - 1) for v in m if v > 0]
        rows.append(("ties_%d" % part, row[:128] + [0.0] * (128 - len(row[:128]))))
    rows.append(("underflow", [448.0, 2.0 ** -10, -(2.0 ** -10), 3 * 2.0 ** -10, 2.0 ** -9, 2.0 ** -11, 1e-30] +
                 [0.0] * 121))
    rows.append(("f32_subnormals", [from_bits((i + 1) << 15) for i in range(128)]))
    rows.append(("f32_tiny_subnormals", [from_bits(i + 1) for i in range(128)]))
    rows.append(("mixed_signs", [((-1) ** i) * (i + 1) * 0.37 for i in range(128)]))
    return rows


def main():
    rng = random.Random(20261201)
    out = []
    # random matrices, ragged and whole, every layout
    shapes = [(1, 128), (3, 200), (130, 131), (129, 1), (7, 383), (1, 1), (2, 129)]
    for R, C in shapes:
        for layout in ("row", "col", "tile"):
            record(out, "rand_%dx%d" % (R, C), layout, randmat(rng, R, C, -20, 12))
    for R, C, layout in ((4, 300, "row"), (300, 4, "col"), (130, 129, "tile")):
        record(out, "bits_%dx%d" % (R, C), layout, randbits(rng, R, C))
    # per-row magnitudes 2^-135 ... 2^125
    x = torch.stack([randmat(rng, 1, 256, -3, 3)[0] * 2.0 ** e for e in range(-135, 126, 20)])
    record(out, "row_magnitudes", "row", x)
    record(out, "col_magnitudes", "col", x.t().contiguous())
    # adversarial blocks as a row, ragged (its first 100), and row 0 of a 3 x 130 matrix in tiles (the
    # first tile 3 x 128, the second a ragged 3 x 2 holding one 1.0); columns are rows transposed (the
    # random col cases and test_fp8_block's transpose identity cover that)
    for name, row in adversarial_rows():
        t = torch.tensor(row, dtype=torch.float32).reshape(1, -1)
        record(out, name, "row", t)
        record(out, name + "_ragged", "row", t[:, :100].contiguous())
        tile = torch.zeros(3, 130, dtype=torch.float32)
        tile[0, :t.shape[1]] = t[0]
        tile[2, 129] = 1.0
        record(out, name + "_tile", "tile", tile)
    ncases = sum(1 for l in out if l.startswith("fp8b "))
    # GEMMs: the consumer quantizes; torch gives the float64 product of the dequantized operands
    for name, M, N, K in (("small_ragged", 5, 130, 300), ("two_tiles", 16, 130, 256), ("short_k", 9, 20, 100)):
        a = randmat(rng, M, K, -6, 3)
        b = randmat(rng, N, K, -8, 1)
        _, _, da = quantize(a, "row")
        _, _, db = quantize(b, "tile")
        c = da.double() @ db.double().t()
        out.append("gemm %s %d %d %d" % (name, M, N, K))
        out.append("a " + hexs(a, True))
        out.append("b " + hexs(b, True))
        words = []
        for v in c.reshape(-1).tolist():
            u = struct.unpack("<Q", struct.pack("<d", v))[0]
            words.append("%08x %08x" % (u >> 32, u & 0xFFFFFFFF))
        out.append("c64 " + " ".join(words))
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device (CPU only)"
    n, bad = checks["cpu_vs_device"]
    header = [
        "# fp8-block vectors by tests/mxfp8/gen_fp8_block_vectors.py",
        "# python %s, torch %s, %s, device %s" % (platform.python_version(), torch.__version__, platform.machine(),
                                                  dev),
        "# amax on %s; torch CPU vs %s E4M3 casts: %d values, %d differ" % (DEV, DEV, n, bad),
        "# cases %d" % ncases,
    ]
    with open("fp8_block_vectors.txt", "w") as f:
        f.write("\n".join(header + out) + "\n")
    print("\n".join(header))
    if bad:
        print("torch's CPU and device casts disagree: the vectors are not trustworthy", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
