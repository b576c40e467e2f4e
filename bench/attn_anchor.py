#!/usr/bin/env python3
"""bench/attn_anchor.py - PyTorch's scaled_dot_product_attention at the shapes of bench/models/attn/*.moe,
forward + backward of loss = mean(y^2) in bf16 (q, k, v [B, heads, S, hd], requires_grad), timed like
bench/layer.c: 3 warm-up steps, the median of 20 between CUDA events. Each SDPA backend PyTorch has on
this GPU (flash, cuDNN, memory-efficient) is timed and the fastest reported, with the default choice.
FLOPs as bench/layer.c counts them: 3.5 x 4 B S^2 heads hd (half when causal). GQA through enable_gqa.
Prints `TORCH name backend ms tflops` lines; bench/attn.sh puts them beside moec's. Run on the GPU machine."""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, B, S, heads, kv_heads, hd, causal (bench/models/attn/attn_NAME.moe)
    ("bio", 4, 1024, 16, 16, 64, True),
    ("bio_bidir", 4, 1024, 16, 16, 64, False),
    ("mixtral", 2, 4096, 32, 8, 128, True),
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
    only = set(sys.argv[1:])
    torch.manual_seed(0)
    for name, B, S, H, KV, hd, causal in SHAPES:
        if only and name not in only:
            continue
        q = torch.randn(B, H, S, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, KV, S, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, KV, S, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        flop = 3.5 * 4.0 * B * S * S * H * hd * (0.5 if causal else 1.0)

        def step():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=KV != H)
            y.float().pow(2).mean().backward()

        results = []
        for label, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                if backend is None:
                    ms = timed(step)
                else:
                    with sdpa_kernel([backend]):
                        ms = timed(step)
            except RuntimeError as e:
                print(f"# {name} {label}: not available ({str(e).splitlines()[0][:100]})")
                continue
            results.append((ms, label))
            print(f"TORCH {name} {label} {ms:.4f} {flop / (ms / 1e3) / 1e12:.1f}")
        ms, label = min(results)
        print(f"TORCH_BEST {name} {label} {ms:.4f} {flop / (ms / 1e3) / 1e12:.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
