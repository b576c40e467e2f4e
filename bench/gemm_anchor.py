#!/usr/bin/env python3
"""bench/gemm_anchor.py - torch._grouped_mm (bf16, fp32 accumulation) at the anchor shapes of the sm_90a
grouped GEMM (tests/gpu/gemm_sm90.c), timed the same way: random inputs, 3 warm-up calls, median of 20
timed by CUDA events; TFLOP/s = 2 M N K / time. A = [M, K] bf16, W = [E, N, K] bf16 passed transposed
([E, K, N] view, K-major like ours), offs = the groups' cumulative ends (int32). Then the weight gradients (K-grouped,
torch._grouped_mm(dY^T, X, offs), bf16 out) and an 8192^3 bf16 torch.matmul as the chip's practical ceiling. Prints `TORCH name tflops` lines; tests/gpu/gemm_sm90.sh
puts them next to moec's. Run on the GPU machine."""
import statistics
import sys

import torch

ANCHORS = [  # name, E, M (routed rows, uniform), N, K
    ("mixtral_gate_up", 8, 16384, 28672, 4096),
    ("mixtral_down", 8, 16384, 4096, 14336),
    ("bio_up", 16, 16384, 5632, 1024),
    ("bio_down", 16, 16384, 1024, 2816),
]


def timed(f, warm=3, reps=20):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        f()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return statistics.median(ts)


def main():
    torch.manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for name, E, M, N, K in ANCHORS:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(E, N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
        offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * (M // E)
        ms = timed(lambda: torch._grouped_mm(a, w.transpose(-2, -1), offs=offs))
        print(f"TORCH {name} {2 * M * N * K / (ms * 1e-3) / 1e12:.1f}  ({ms:.4f} ms)", flush=True)
        del a, w
    # the weight gradient, K-grouped: dW[g] = dY_g^T X_g; torch._grouped_mm(dY^T [N, M], X [M, K], offs)
    # gives [E, N, K] in bf16 (ours writes fp32: twice the output bytes)
    for name, E, M, N, K in ANCHORS:
        dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        offs = torch.arange(1, E + 1, device="cuda", dtype=torch.int32) * (M // E)
        try:
            ms = timed(lambda: torch._grouped_mm(dy.t(), x, offs=offs))
            print(f"TORCH wgrad_{name} {2 * M * N * K / (ms * 1e-3) / 1e12:.1f}  ({ms:.4f} ms)", flush=True)
        except Exception as e:  # a layout torch does not take
            print(f"TORCH wgrad_{name} failed: {e}".splitlines()[0], flush=True)
        del dy, x
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timed(lambda: x @ y)
    print(f"TORCH mm_8192 {2 * 8192 ** 3 / (ms * 1e-3) / 1e12:.1f}  ({ms:.4f} ms)", flush=True)


if __name__ == "__main__":
    main()
