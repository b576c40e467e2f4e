#!/usr/bin/env python3
"""The PyTorch/transformers anchors of moec's benchmark, measured in the same run as moec.

    python3 bench/anchors.py --out anchors.json [--quick] bench/models/bench_small.moe ...

(a) Whole model: for each bench model, transformers' MixtralForCausalLM built from a MixtralConfig with
    exactly the model's sizes (read from the .moe file's consts and train section), trained with AdamW
    (fused), grad-norm clipping 1.0, batch x seq of the model's train section, random protein tokens;
    bf16 (parameters in bf16) and fp32 (fp32 matmuls, no TF32), config._experts_implementation "eager" and
    "grouped_mm". One step = zero_grad, forward with labels (loss), backward, clip, optimizer step, timed
    with CUDA events; the median over the steps after the warm-up.
(b) MoE layer, forward + backward (loss = mean of the squared output), bf16, the shapes of
    the MoE-layer anchors first measured on the H200 on 2026-11-29 (small T=256 H=384 F=1536 E=4; bio T=8192 H=1024 F=2816 E=16; Mixtral T=8192
    H=4096 F=14336 E=8; top-2): MixtralSparseMoeBlock eager and grouped_mm, and a plain PyTorch block on
    torch._grouped_mm with the same weights (checked against the HF block's output).
    --layer-models FILE... takes the shapes from moec's layer models instead (bench/models/layer/*.moe:
    the anchors' three and a sweep of experts and top-k at bio shapes), as bench/layer.sh does.

Everything that can fail (an implementation missing from this transformers, out of memory, ...) is
recorded in the JSON as {"status": "error", "error": ...} and the rest still runs. Python is used here
only for these device-side comparisons; moec itself is C.
"""
import argparse
import ast
import datetime
import json
import math
import operator
import os
import platform
import re
import statistics
import sys
import time
import traceback

VOCAB_DEFAULT = 33

# ------------------------------------------------------------------ .moe parsing (stdlib only)

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _eval_const(expr, env):
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return _BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError("unsupported const expression: %r" % expr)
    v = ev(ast.parse(expr.strip(), mode="eval"))
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v


def _consts(text):
    """The `const` definitions of a .moe text (comments removed), evaluated in order."""
    env = {}
    for m in re.finditer(r"^\s*const\s+(.+)$", text, re.M):
        for item in m.group(1).split(","):
            if "=" in item:
                k, v = item.split("=", 1)
                env[k.strip()] = _eval_const(v, env)
    return env


def parse_layer_moe(path):
    """The shape of a layer model (bench/models/layer/*.moe: consts T, hidden, ffn, experts, top_k), as a
    LAYER_SHAPES entry named after the model without its layer_ prefix."""
    text = "\n".join(line.split("#", 1)[0] for line in open(path).read().splitlines())
    m = re.search(r"\bmodel\s+(\w+)", text)
    name = m.group(1) if m else os.path.splitext(os.path.basename(path))[0]
    env = _consts(text)
    return {"shape": name[len("layer_"):] if name.startswith("layer_") else name, "T": env["T"],
            "H": env["hidden"], "F": env["ffn"], "E": env["experts"], "k": env["top_k"], "source": path}


def parse_moe(path):
    """The sizes of a Mixtral-shaped .moe model: its consts, batch and seq, rope theta, norm eps."""
    src = open(path).read()
    text = "\n".join(line.split("#", 1)[0] for line in src.splitlines())
    m = re.search(r"\bmodel\s+(\w+)", text)
    name = m.group(1) if m else os.path.splitext(os.path.basename(path))[0]
    env = _consts(text)
    train = text[text.find("train"):] if re.search(r"^\s*train\s*\{", text, re.M) else ""
    batch = re.search(r"\bbatch\s+(\d+)", train)
    seq = re.search(r"\bseq\s+(\d+)", train)
    theta = re.search(r"rope_theta\s*=\s*([\w.+-]+)", text)
    eps = re.search(r"rmsnorm\([^)]*eps\s*=\s*([\w.+-]+)", text)
    hidden = env.get("d", env.get("hidden"))
    heads = env["heads"]
    spec = {
        "name": name, "source": path,
        "vocab": env.get("vocab", VOCAB_DEFAULT), "hidden": hidden, "ffn": env["ffn"],
        "experts": env["experts"], "top_k": env["top_k"], "layers": env["layers"],
        "heads": heads, "kv_heads": env.get("kv_heads", heads),
        "head_dim": env.get("head_dim", hidden // heads),
        "batch": int(batch.group(1)) if batch else 1, "seq": int(seq.group(1)) if seq else 256,
        "rope_theta": float(_eval_const(theta.group(1), env)) if theta else 1e6,
        "rms_norm_eps": float(_eval_const(eps.group(1), env)) if eps else 1e-5,
    }
    return spec


# ------------------------------------------------------------------ helpers

def log(*a):
    print(*a, flush=True)


def err_text(e):
    s = "%s: %s" % (type(e).__name__, e)
    return s if len(s) < 600 else s[:600] + "..."


def cuda_median_ms(fn, warmup, reps, sync):
    """fn() timed with CUDA events, each call on its own pair; returns the list of ms after warm-up."""
    import torch
    for _ in range(warmup):
        fn()
    sync()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    sync()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def summarize_ms(ms):
    return {"ms_median": statistics.median(ms), "ms_min": min(ms), "ms_max": max(ms), "reps": len(ms)}


class GroupedMMCounter:
    """Counts calls of torch._grouped_mm and torch.nn.functional.grouped_mm while active: shows whether
    a grouped GEMM really ran (transformers falls back to a loop where it cannot use one)."""

    def __init__(self, torch):
        self.slots = [(torch, "_grouped_mm"), (torch.nn.functional, "grouped_mm")]
        self.orig = [getattr(mod, name, None) for mod, name in self.slots]
        self.n = 0

    def __enter__(self):
        for (mod, name), orig in zip(self.slots, self.orig):
            if orig is not None:
                setattr(mod, name, self._wrap(orig))
        return self

    def _wrap(self, orig):
        def counted(*a, **k):
            self.n += 1
            return orig(*a, **k)
        return counted

    def __exit__(self, *exc):
        for (mod, name), orig in zip(self.slots, self.orig):
            if orig is not None:
                setattr(mod, name, orig)
        return False


def set_experts_impl(config, impl):
    """Set config._experts_implementation; returns None or an error string."""
    try:
        config._experts_implementation = impl
    except Exception as e:  # noqa: BLE001
        return "config._experts_implementation = %r failed: %s" % (impl, err_text(e))
    got = getattr(config, "_experts_implementation", None)
    if got != impl:
        return "config._experts_implementation reads %r after setting %r" % (got, impl)
    return None


def mixtral_config(spec, impl, transformers):
    cfg = transformers.MixtralConfig(
        vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["ffn"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"],
        num_local_experts=spec["experts"], num_experts_per_tok=spec["top_k"],
        max_position_embeddings=max(4096, spec["seq"]), rope_theta=spec["rope_theta"],
        rms_norm_eps=spec["rms_norm_eps"], tie_word_embeddings=False, use_cache=False,
        output_router_logits=False, router_jitter_noise=0.0, attention_dropout=0.0,
    )
    cfg._attn_implementation = "sdpa"
    return cfg, set_experts_impl(cfg, impl)


# ------------------------------------------------------------------ (a) whole model

def bench_model(spec, dtype_name, impl, steps, warmup, torch, transformers):
    r = {"dtype": dtype_name, "impl": impl, "status": "error"}
    dev = torch.device("cuda")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    model = opt = None
    try:
        cfg, e = mixtral_config(spec, impl, transformers)
        if e:
            r.update(status="unavailable", error=e)
            return r
        torch.manual_seed(0)
        with torch.device(dev):
            model = transformers.MixtralForCausalLM(cfg)
        model.to(dtype=dtype)
        eff = getattr(model.config, "_experts_implementation", None)
        if eff != impl and hasattr(model, "set_experts_implementation"):
            try:
                model.set_experts_implementation(impl)
            except Exception as ex:  # noqa: BLE001
                r.update(status="unavailable", error="set_experts_implementation(%r): %s" % (impl, err_text(ex)))
                return r
            eff = getattr(model.config, "_experts_implementation", None)
        r["impl_effective"] = eff
        if eff != impl:
            r.update(status="unavailable", error="experts implementation is %r, not %r" % (eff, impl))
            return r
        model.train()
        r["params"] = sum(p.numel() for p in model.parameters())
        try:
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                    weight_decay=0.1, fused=True)
            r["optimizer"] = "AdamW fused"
        except Exception:  # noqa: BLE001
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
            r["optimizer"] = "AdamW (default: fused refused)"
        B, S = spec["batch"], spec["seq"]
        gen = torch.Generator(device=dev).manual_seed(1)
        batches = [torch.randint(4, spec["vocab"], (B, S), device=dev, generator=gen) for _ in range(4)]
        it = [0]
        losses = []

        def step():
            ids = batches[it[0] % len(batches)]
            it[0] += 1
            opt.zero_grad(set_to_none=True)
            out = model(input_ids=ids, labels=ids, use_cache=False)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(out.loss.detach())

        with GroupedMMCounter(torch) as cnt:
            step()
        r["grouped_mm_calls_first_step"] = cnt.n
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ms = cuda_median_ms(step, max(0, warmup - 1), steps, torch.cuda.synchronize)
        s = summarize_ms(ms)
        tok = B * S
        r.update(s, status="ok", batch=B, seq=S, tokens_per_step=tok,
                 tokens_per_s=tok / (s["ms_median"] / 1e3), step_ms_all=[round(x, 4) for x in ms],
                 peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
                 loss_first=float(losses[0]), loss_last=float(losses[-1]))
        if not all(math.isfinite(float(x)) for x in (losses[0], losses[-1])):
            r["warning"] = "non-finite loss"
    except Exception as e:  # noqa: BLE001
        r.update(status="error", error=err_text(e), traceback=traceback.format_exc()[-2000:])
    finally:
        model = opt = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return r


# ------------------------------------------------------------------ (b) MoE layer

LAYER_SHAPES = [
    {"shape": "small", "T": 256, "H": 384, "F": 1536, "E": 4, "k": 2},
    {"shape": "bio", "T": 8192, "H": 1024, "F": 2816, "E": 16, "k": 2},
    {"shape": "mixtral", "T": 8192, "H": 4096, "F": 14336, "E": 8, "k": 2},
]


def plain_grouped_block(torch, x, router_w, w_gate_up, w_down, k):
    """A plain PyTorch MoE block on torch._grouped_mm (Mixtral routing: softmax, top-k, renormalise)."""
    F = torch.nn.functional
    E = w_gate_up.shape[0]
    probs = F.softmax(F.linear(x, router_w).float(), dim=-1)
    topv, topi = probs.topk(k, dim=-1)
    topv = (topv / topv.sum(-1, keepdim=True)).to(x.dtype)
    flat = topi.reshape(-1)
    order = torch.argsort(flat, stable=True)
    tok = order // k
    counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
    offs = counts.cumsum(0).to(torch.int32)
    h = torch._grouped_mm(x[tok], w_gate_up.transpose(-2, -1), offs=offs)
    g, u = h.chunk(2, dim=-1)
    a = F.silu(g) * u * topv.reshape(-1)[order].unsqueeze(-1)
    y = torch._grouped_mm(a, w_down.transpose(-2, -1), offs=offs)
    return torch.zeros_like(x).index_add_(0, tok, y)


def bench_layer(sh, warmup, reps, torch, transformers):
    from transformers.models.mixtral import modeling_mixtral as mm
    T, H, Fd, E, k = sh["T"], sh["H"], sh["F"], sh["E"], sh["k"]
    flop = 3 * 2 * T * k * 3 * H * Fd
    out = dict(sh, flop=flop, bf16_floor_ms_at_782=flop / 782e12 * 1e3, runs=[])
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(2)
    xs = [torch.randn(1, T, H, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(2)]
    weights = weights_ref_out = None
    for impl in ("eager", "grouped_mm", "torch_grouped_mm"):
        r = {"impl": impl, "status": "error"}
        block = None
        try:
            if impl == "torch_grouped_mm":
                if weights is None:
                    raise RuntimeError("needs the HF block's weights, which were not built")
                if not hasattr(torch, "_grouped_mm"):
                    raise RuntimeError("torch._grouped_mm is not in this torch")
                router_w, w_gu, w_dn = weights

                def fwd(x):
                    return plain_grouped_block(torch, x.view(-1, H), router_w, w_gu, w_dn, k)
                params = [router_w, w_gu, w_dn]
                # same function as the HF block? (bf16: ~1e-2 at most)
                with torch.no_grad():
                    ref = weights_ref_out
                    got = fwd(xs[0]).float().view(-1, H)
                    r["rel_err_vs_hf"] = float((got - ref).norm() / ref.norm())
            else:
                cfg = transformers.MixtralConfig(hidden_size=H, intermediate_size=Fd, num_local_experts=E,
                                                 num_experts_per_tok=k, router_jitter_noise=0.0)
                e = set_experts_impl(cfg, impl)
                if e:
                    r.update(status="unavailable", error=e)
                    out["runs"].append(r)
                    continue
                with torch.device(dev):
                    block = mm.MixtralSparseMoeBlock(cfg)
                block.to(dtype=torch.bfloat16).train()
                torch.manual_seed(3)
                with torch.no_grad():
                    for p in block.parameters():  # the experts are torch.empty: never time uninitialised data
                        p.normal_(0.0, 0.02)

                def fwd(x, block=block):
                    y = block(x)
                    return y[0] if isinstance(y, tuple) else y
                params = list(block.parameters())
                if weights is None:
                    weights = (block.gate.weight.detach(), block.experts.gate_up_proj.detach().clone(),
                               block.experts.down_proj.detach().clone())
                    weights = tuple(w.clone().requires_grad_(True) for w in weights)
                    with torch.no_grad():
                        weights_ref_out = fwd(xs[0]).float().view(-1, H)
            with GroupedMMCounter(torch) as cnt:
                fwd(xs[0]).float().pow(2).mean().backward()
            r["grouped_mm_calls_first_fwd_bwd"] = cnt.n
            it = [0]

            def step():
                x = xs[it[0] % 2]
                it[0] += 1
                for p in params:
                    p.grad = None
                fwd(x).float().pow(2).mean().backward()
            ms = cuda_median_ms(step, warmup, reps, torch.cuda.synchronize)
            s = summarize_ms(ms)
            r.update(s, status="ok", tokens_per_s=T / (s["ms_median"] / 1e3),
                     tflops=flop / (s["ms_median"] / 1e3) / 1e12)
        except Exception as ex:  # noqa: BLE001
            r.update(status="error", error=err_text(ex), traceback=traceback.format_exc()[-2000:])
        finally:
            block = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        out["runs"].append(r)
        if r["status"] == "ok":
            log("  layer %-8s %-17s %8.3f ms  %9.0f tokens/s  %6.1f TFLOP/s" %
                (sh["shape"], impl, r["ms_median"], r["tokens_per_s"], r["tflops"]))
        else:
            log("  layer %-8s %-17s %s: %s" % (sh["shape"], impl, r["status"], r.get("error")))
    weights = weights_ref_out = xs = None
    torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="bench .moe files (Mixtral-shaped)")
    ap.add_argument("--out", required=True, help="JSON results file")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps per model run (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--layer-reps", type=int, default=30)
    ap.add_argument("--no-layers", action="store_true", help="skip the MoE-layer anchors")
    ap.add_argument("--layer-models", nargs="+", metavar="MOE", default=None,
                    help="time the MoE-layer anchors at these layer models' shapes (bench/models/layer/*.moe, "
                         "the files bench/layer.sh times moec on) instead of the built-in three")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--impls", default="eager,grouped_mm")
    ap.add_argument("--quick", action="store_true", help="3 timed steps, 5 layer reps (smoke test)")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.warmup, a.layer_reps = 3, 2, 5
    t_start = time.time()
    res = {"format": "moec-bench-anchors", "version": 1,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "argv": sys.argv[1:], "python": platform.python_version(),
           "method": {"steps": a.steps, "warmup": a.warmup, "layer_reps": a.layer_reps,
                      "timing": "CUDA events around each step, median of the timed steps"},
           "models": [], "layers": [], "status": "error"}

    def save():
        res["wall_s"] = time.time() - t_start
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, a.out)

    specs = []
    for path in a.models:
        try:
            specs.append(parse_moe(path))
        except Exception as e:  # noqa: BLE001
            res["models"].append({"config": os.path.splitext(os.path.basename(path))[0], "source": path,
                                  "status": "error", "error": "cannot read its sizes: " + err_text(e)})
    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001
        res["error"] = "import: " + err_text(e)
        for s in specs:
            res["models"].append({"config": s["name"], "spec": s, "status": "error", "error": res["error"]})
        save()
        log("anchors: " + res["error"])
        return 1
    res["torch"] = torch.__version__
    res["transformers"] = transformers.__version__
    res["cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        res["error"] = "torch sees no CUDA device"
        save()
        log("anchors: " + res["error"])
        return 1
    p = torch.cuda.get_device_properties(0)
    res["gpu"] = torch.cuda.get_device_name(0)
    res["gpu_sms"] = p.multi_processor_count
    res["gpu_mem_gib"] = p.total_memory / 2**30
    res["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    res["has_grouped_mm"] = hasattr(torch, "_grouped_mm")
    log("anchors: %s, torch %s, transformers %s, CUDA %s" % (res["gpu"], torch.__version__,
                                                             transformers.__version__, torch.version.cuda))
    try:
        from transformers.integrations import moe as _moe  # noqa: F401
        res["experts_implementations"] = ["eager"] + sorted(getattr(_moe, "ALL_EXPERTS_FUNCTIONS", {}).keys())
    except Exception as e:  # noqa: BLE001
        res["experts_implementations"] = "unknown: " + err_text(e)

    for s in specs:
        m = {"config": s["name"], "source": s["source"], "spec": s, "runs": [], "status": "ok"}
        res["models"].append(m)
        for dt in a.dtypes.split(","):
            for impl in a.impls.split(","):
                r = bench_model(s, dt, impl, a.steps, a.warmup, torch, transformers)
                m["runs"].append(r)
                if r["status"] == "ok":
                    log("  model %-12s %-4s %-10s %9.0f tokens/s  (%.2f ms/step, peak %.1f GiB, loss %.3f -> %.3f)" %
                        (s["name"], dt, impl, r["tokens_per_s"], r["ms_median"], r["peak_mem_gib"],
                         r["loss_first"], r["loss_last"]))
                else:
                    log("  model %-12s %-4s %-10s %s: %s" % (s["name"], dt, impl, r["status"], r.get("error")))
                save()
    shapes = LAYER_SHAPES
    if a.layer_models:
        shapes = []
        for path in a.layer_models:
            try:
                shapes.append(parse_layer_moe(path))
            except Exception as e:  # noqa: BLE001
                res["layers"].append({"shape": os.path.basename(path), "source": path, "status": "error",
                                      "error": "cannot read its shape: " + err_text(e)})
    if not a.no_layers:
        for sh in shapes:
            try:
                res["layers"].append(bench_layer(sh, a.warmup, a.layer_reps, torch, transformers))
            except Exception as e:  # noqa: BLE001
                res["layers"].append(dict(sh, status="error", error=err_text(e)))
            save()
    res["status"] = "ok"
    save()
    log("anchors: done in %.0f s -> %s" % (time.time() - t_start, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
