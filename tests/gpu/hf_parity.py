#!/usr/bin/env python3
"""hf_parity.py - moec against Hugging Face transformers on the same Mixtral.

Runs on the GPU machine (torch + transformers 5, no internet); the only Python in
the repository's tests, and never in CI. It

  1. makes a small random MixtralForCausalLM (vocab 33, hidden 64, intermediate 128,
     2 layers, 4 heads, 2 kv heads, 4 experts top-2, fp32) and save_pretrained()s it;
  2. `moec import-hf` -> m.moe + m.init.safetensors, and checks that the checkpoint
     holds exactly the model's weights;
  3. `moec compile`, then trains with the binary: --init m.init.safetensors --dump DIR
     --dump-steps STEPS (every step's tokens, targets, loss, raw gradients, updated
     parameters and lr);
  4. replays the same batches in transformers with the same AdamW (betas, eps, weight
     decay off for norm weights and the embedding, grad clipping, the dumped lr), and
     compares: step-1 loss, every step-1 gradient (||a-b||/||b||), the loss curves,
     the final parameters;
  5. `moec export-hf` of the init checkpoint -> from_pretrained -> logits against the
     original model's; and of moec's final checkpoint -> loss on the last batch against
     the replayed transformers model.

With --kernels fast (the bf16 mode): hidden 128 and intermediate 256 (the fast kernels want multiples of
128), moec compiled with --kernels fast (the expert MLP on the sm_90a bf16 GEMMs, fp32 master weights),
transformers' forward under torch.autocast(bfloat16) (fp32 master weights, bf16 matmuls), and the
bounds of bf16 training: the loss within 1% at every step (the Speed I issue's contract), step-1
gradients within 5e-2 and the step-1 gradient norm within 2e-2 (the later norms reported), the final
parameters within 2e-1 (two bf16 runs drift apart; the routers' weights reported, not checked: see below);
the import and export checks unchanged.

usage: hf_parity.py --moec build/moec --data FASTA --out DIR [--device cuda|cpu]
                    [--steps 50] [--lr 3e-3] [--seed 0] [--kernels fast]
Prints a table last; exits 1 when a check fails, 2 on a usage or setup problem.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

V, H, FF, L, NH, NKV, E, K = 33, 64, 128, 2, 4, 2, 4, 2


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    sys.stdout.write(r.stdout[-4000:])
    sys.stderr.write(r.stderr[-4000:])
    return r


def hf_param_name(moec):
    """moec parameter name -> transformers 5 name (docs/huggingface.md)."""
    top = {"embed": "model.embed_tokens.weight", "norm_f": "model.norm.weight", "lm_head": "lm_head.weight"}
    if moec in top:
        return top[moec]
    _, i, blk, p = moec.split(".")
    m = {("attn", "norm"): "input_layernorm.weight", ("attn", "wq"): "self_attn.q_proj.weight",
         ("attn", "wk"): "self_attn.k_proj.weight", ("attn", "wv"): "self_attn.v_proj.weight",
         ("attn", "wo"): "self_attn.o_proj.weight", ("moe", "norm"): "post_attention_layernorm.weight",
         ("moe", "router"): "mlp.gate.weight", ("moe", "w_gate_up"): "mlp.experts.gate_up_proj",
         ("moe", "w_down"): "mlp.experts.down_proj"}
    return "model.layers.%s.%s" % (i, m[(blk, p)])


def moec_names():
    names = ["embed", "norm_f", "lm_head"]
    for i in range(L):
        names += ["layers.%d.attn.%s" % (i, p) for p in ("norm", "wq", "wk", "wv", "wo")]
        names += ["layers.%d.moe.%s" % (i, p) for p in ("norm", "router", "w_gate_up", "w_down")]
    return names


def hf_tensor(params, moec, grad=False):
    """The transformers tensor (or its gradient) in moec's layout; also for the
    per-expert layout of older transformers."""
    n = hf_param_name(moec)
    if n in params:
        t = params[n]
        return (t.grad if grad else t).detach()
    i = moec.split(".")[1]
    pre = "model.layers.%s.block_sparse_moe." % i
    get = (lambda x: params[x].grad) if grad else (lambda x: params[x])
    if moec.endswith("router"):
        return get(pre + "gate.weight").detach()
    if moec.endswith("w_gate_up"):
        return torch.stack([torch.cat([get(pre + "experts.%d.w1.weight" % e), get(pre + "experts.%d.w3.weight" % e)])
                            for e in range(E)]).detach()
    return torch.stack([get(pre + "experts.%d.w2.weight" % e) for e in range(E)]).detach()


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    d = (a - b).norm().item()
    n = b.norm().item()
    return d / n if n > 0 else d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moec", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--kernels", default="reference", choices=["reference", "fast"])
    a = ap.parse_args()
    global H, FF
    fast = a.kernels == "fast"
    if fast:
        H, FF = 128, 256
    # the bounds: fp32 against fp32 (reference kernels), or bf16 training on both sides (fast)
    # fast: the params drift as two bf16 runs do (7.5e-2 after 50 steps at lr 3e-3, measured 2026-12-01; the
    # fp32 pair stays within 1e-6), so their bound is 2e-1: it still catches a missed update or a wrong layout
    tol = {"loss1": 1e-2 if fast else 1e-5, "grad1": 5e-2 if fast else 1e-4, "curve": 1e-2,
           "norm": 2e-2 if fast else 1e-3, "params": 2e-1 if fast else 1e-2}
    import transformers
    from transformers import MixtralConfig, MixtralForCausalLM
    from safetensors.torch import load_file

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(a.out, exist_ok=True)
    out = os.path.abspath(a.out)
    moec = os.path.abspath(a.moec)
    results = []   # (check, value, limit, ok)

    def check(name, value, limit, ok=None):
        ok = (value <= limit) if ok is None else ok
        results.append((name, value, limit, ok))
        print("%-58s %12.3e  (limit %.0e)  %s" % (name, value, limit, "ok" if ok else "FAIL"), flush=True)

    # 1. a random Mixtral
    torch.manual_seed(a.seed)
    cfg = MixtralConfig(vocab_size=V, hidden_size=H, intermediate_size=FF, num_hidden_layers=L,
                        num_attention_heads=NH, num_key_value_heads=NKV, num_local_experts=E,
                        num_experts_per_tok=K, max_position_embeddings=4096, rms_norm_eps=1e-5,
                        rope_theta=1e6, tie_word_embeddings=False, sliding_window=None, attention_dropout=0.0,
                        router_jitter_noise=0.0, output_router_logits=False)
    cfg._attn_implementation = "eager"
    model = MixtralForCausalLM(cfg).float()
    with torch.no_grad():   # norms away from 1, so their gradients and updates matter
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                p.add_(0.1 * torch.randn_like(p))
    hf_dir = os.path.join(out, "hf_init")
    model.save_pretrained(hf_dir)
    print("transformers %s, torch %s; parameters: %s" % (transformers.__version__, torch.__version__,
                                                         ", ".join(n for n, _ in model.named_parameters())[:400]))
    model.to(dev)

    # 2. import
    m_moe = os.path.join(out, "m.moe")
    r = run([moec, "import-hf", hf_dir, "-o", m_moe, "--seq", str(a.seq), "--batch", str(a.batch),
             "--steps", str(a.steps), "--lr", a.lr])
    if r.returncode != 0:
        print("import-hf failed")
        return 1
    init = load_file(os.path.join(out, "m.init.safetensors"))
    params = dict(model.named_parameters())
    worst = max(rel(init["param." + n], hf_tensor(params, n)) for n in moec_names())
    check("import: init checkpoint vs HF weights (max rel)", worst, 0.0)

    # 5a. export the init checkpoint, reload, logits must equal the original model's
    exp0 = os.path.join(out, "export_init")
    r = run([moec, "export-hf", m_moe, os.path.join(out, "m.init.safetensors"), "-o", exp0])
    if r.returncode != 0:
        print("export-hf failed")
        return 1
    re0 = MixtralForCausalLM.from_pretrained(exp0, attn_implementation="eager", dtype=torch.float32).to(dev)
    g = torch.Generator().manual_seed(1)
    probe = torch.randint(0, V, (4, 64), generator=g).to(dev)
    model.eval()
    re0.eval()
    with torch.no_grad():
        l0, l1 = model(input_ids=probe).logits, re0(input_ids=probe).logits
    check("export-hf(init) -> from_pretrained: logits max |diff|", (l0 - l1).abs().max().item(), 1e-6)
    del re0

    # 3. train with moec, dumping every step
    train_bin = os.path.join(out, "train_m")
    if run([moec, "compile", m_moe, "-o", train_bin, "--kernels", a.kernels]).returncode != 0:
        return 1
    dump = os.path.join(out, "dump")
    cmd = [train_bin, "--init", os.path.join(out, "m.init.safetensors"), "--data", a.data, "--steps",
           str(a.steps), "--log-every", "1", "--eval-every", "0", "--dump", dump, "--dump-steps", str(a.steps),
           "--ckpt-dir", os.path.join(out, "ck"), "--overwrite-ckpt", "--log", os.path.join(out, "metrics.jsonl"),
           "--device", a.device]
    r = run(cmd)
    if r.returncode != 0 and a.device == "cuda":
        print("the training binary failed with --device cuda; trying --device cpu")
        cmd[-1] = "cpu"
        r = run(cmd)
    if r.returncode != 0:
        if "--dump" in r.stderr:
            print("this training binary has no --dump yet (the dump contract of runtime/train.c)")
        summary(results)
        return 1
    train_device = cmd[-1]
    print("moec trained with --device %s; transformers runs on %s" % (train_device, dev))

    # 4. replay in transformers
    model.train()
    names = moec_names()
    no_decay = {hf_param_name(n) for n in names if n in ("embed",) or n.endswith("norm") or n == "norm_f"}
    if "model.layers.0.mlp.gate.weight" not in params:
        print("note: transformers without the fused expert layout; names are mapped per expert")
    decay_p = [p for n, p in model.named_parameters() if n not in no_decay]
    nodecay_p = [p for n, p in model.named_parameters() if n in no_decay]
    opt = torch.optim.AdamW([{"params": decay_p, "weight_decay": 0.1}, {"params": nodecay_p, "weight_decay": 0.0}],
                            lr=float(a.lr), betas=(0.9, 0.95), eps=1e-8, foreach=False)
    moec_loss, hf_loss, grad_errs, norm_pairs = [], [], {}, []
    last = None
    for k in range(1, a.steps + 1):
        path = os.path.join(dump, "step_%d.safetensors" % k)
        if not os.path.exists(path):
            print("missing %s" % path)
            return 1
        d = load_file(path)
        from safetensors import safe_open
        with safe_open(path, "pt") as f:
            meta = f.metadata() or {}
        tokens, targets = d["tokens"].long().to(dev), d["targets"].long().to(dev)
        with torch.autocast(device_type="cuda" if dev == "cuda" else "cpu", dtype=torch.bfloat16, enabled=fast):
            logits = model(input_ids=tokens).logits.float()
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if k == 1:   # the raw gradients: clip_grad_norm_ scales them in place
            for n in names:
                grad_errs[n] = rel(d["grad." + n], hf_tensor(params, n, grad=True))
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        for gpar in opt.param_groups:
            gpar["lr"] = float(meta["lr"])
        opt.step()
        moec_loss.append(float(d["loss"].reshape(-1)[0]))
        hf_loss.append(loss.item())
        norm_pairs.append((float(meta.get("grad_norm", "nan")), gn.item()))
        last = (d, tokens, targets)
    # final parameters
    prel = {n: rel(last[0]["param." + n], hf_tensor(params, n)) for n in names}
    # --kernels fast: the routers' weights are reported, not checked. Drawn at 0.02 and moved by AdamW steps of
    # ~lr per element whatever their gradient's size, they follow the sign of tiny gradients that a flipped
    # top-k choice changes: two bf16 runs part there first (2026-12-01, H200: layers.1 router 0.48 after 50
    # steps, every other tensor <= 0.14, the loss curves within 2.4e-3)
    checked = [n for n in prel if not (fast and n.endswith(".router"))]
    pname = max(checked, key=prel.get)
    pworst = prel[pname]
    print("params after %d steps, ||a-b||/||b|| per tensor: %s" % (a.steps, ", ".join(
        "%s %.2e" % (n, prel[n]) for n in sorted(prel, key=prel.get, reverse=True))))

    check("step-1 loss relative difference", abs(moec_loss[0] - hf_loss[0]) / abs(hf_loss[0]), tol["loss1"])
    wname = max(grad_errs, key=grad_errs.get)
    check("step-1 gradients: worst ||a-b||/||b|| (%s)" % wname, grad_errs[wname], tol["grad1"])
    curve = max(abs(x - y) / abs(y) for x, y in zip(moec_loss, hf_loss))
    check("%d-step loss curves: max relative difference" % a.steps, curve, tol["curve"])
    gnd = [abs(x - y) / y for x, y in norm_pairs]
    if fast:
        # two bf16 trajectories (moec rounds the expert MLP's operands, autocast every matmul) drift apart:
        # the gradient norm is compared where both start from the same weights, then reported
        check("grad norm (before clipping), step 1: relative difference", gnd[0], tol["norm"])
        worst = max(range(len(gnd)), key=gnd.__getitem__)
        check("grad norm, every step: max relative difference (step %d)" % (worst + 1), gnd[worst], 1.0)
    else:
        check("grad norm (before clipping): max relative difference", max(gnd), tol["norm"])
    check("params after %d steps: worst ||a-b||/||b|| (%s)" % (a.steps, pname), pworst, tol["params"])

    # 5b. export moec's final checkpoint; its loss on the last batch vs the replayed model's
    exp1 = os.path.join(out, "export_final")
    if run([moec, "export-hf", m_moe, os.path.join(out, "ck", "checkpoint.safetensors"), "-o", exp1,
            "--layout", "per-expert"]).returncode != 0:
        return 1
    re1 = MixtralForCausalLM.from_pretrained(exp1, attn_implementation="eager", dtype=torch.float32).to(dev)
    re1.eval()
    model.eval()
    with torch.no_grad():
        _, tokens, targets = last
        la = F.cross_entropy(re1(input_ids=tokens).logits.float().reshape(-1, V), targets.reshape(-1))
        lb = F.cross_entropy(model(input_ids=tokens).logits.float().reshape(-1, V), targets.reshape(-1))
    check("export-hf(final, per-expert) loss vs replayed HF model", abs(la.item() - lb.item()) / lb.item(), 1e-2)

    with open(os.path.join(out, "parity.json"), "w") as f:
        json.dump({"moec_loss": moec_loss, "hf_loss": hf_loss, "step1_grad_rel": grad_errs,
                   "train_device": train_device, "checks": [list(r) for r in results]}, f, indent=1)
    print("\nstep-1 gradient errors:")
    for n in names:
        print("  %-26s %.3e" % (n, grad_errs[n]))
    print("\nloss curve (step: moec / transformers):")
    for k in range(0, a.steps, max(1, a.steps // 10)):
        print("  %3d: %.6f / %.6f" % (k + 1, moec_loss[k], hf_loss[k]))
    print("\nmoec --device %s%s, transformers on %s%s" % (train_device, " --kernels fast" if fast else "", dev,
                                                    " under autocast(bfloat16)" if fast else ""))
    return summary(results)


def summary(results):
    print("\n%-58s %12s  %s" % ("check", "value", "verdict"))
    for name, value, limit, ok in results:
        print("%-58s %12.3e  %s (limit %.0e)" % (name, value, "ok  " if ok else "FAIL", limit))
    bad = [r for r in results if not r[3]]
    print("hf_parity: %d checks, %d failed" % (len(results), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
