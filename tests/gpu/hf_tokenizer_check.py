#!/usr/bin/env python3
"""hf_tokenizer_check.py - moec's Hugging Face export, tokenizer included, against moec's own scores.

Runs on the GPU machine (torch + transformers 5, no internet); never in CI. Given a folder written by
`moec export-hf` (config.json, model.safetensors, vocab.txt, tokenizer_config.json,
special_tokens_map.json) and moec's per-token output for the same checkpoint and FASTA
(`TRAIN score --init CKPT --fasta Q.fa -o S.csv --per-token T.csv`), it

  1. loads the tokenizer with AutoTokenizer.from_pretrained(DIR) and checks its special tokens' ids
     against config.json's bos/eos/pad/mask_token_id (and that the config carries them);
  2. tokenizes each sequence of Q.fa and checks the ids equal moec's record: BOS (config's
     bos_token_id), then T.csv's token_id column (the residues, then the EOS);
  3. loads the model with AutoModelForCausalLM.from_pretrained(DIR) (fp32) and scores the record
     in moec's windows of --seq positions (a causal window: positions w0 .. w0+S-1 of the record
     as input, each predicting the next; context does not cross a window, as in moec's score),
     and checks each token's log-probability against T.csv's log_prob (|diff| <= --tol, default
     1e-4) and each sequence's sum against S.csv's log_likelihood (|diff| <= --tol x (L + 1)).

The sequences must be upper case (moec reads either case; the exported tokenizer knows the
alphabet's upper-case letters only).

usage: hf_tokenizer_check.py --hf DIR --fasta Q.fa --per-token T.csv --scores S.csv --seq S
                             [--device cuda|cpu] [--tol 1e-4]
Prints a line per check and a summary last; exits 1 when a check fails, 2 on a usage or setup
problem.
"""
import argparse
import csv
import json
import math
import os
import sys


def read_fasta(path):
    recs, name, seq = [], None, []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith(">"):
                if name is not None:
                    recs.append((name, "".join(seq)))
                words = line[1:].split()
                name, seq = (words[0] if words else ""), []
            elif line:
                seq.append(line.rstrip("*"))
    if name is not None:
        recs.append((name, "".join(seq)))
    return [(n, s) for n, s in recs if s]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True)
    ap.add_argument("--fasta", required=True)
    ap.add_argument("--per-token", required=True)
    ap.add_argument("--scores", required=True)
    ap.add_argument("--seq", type=int, required=True, help="the model's seq (moec's window)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print("setup: %s" % e)
        return 2
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    failures = []

    def check(ok, what):
        print("%s: %s" % ("ok" if ok else "FAIL", what))
        if not ok:
            failures.append(what)

    with open(os.path.join(a.hf, "config.json")) as f:
        cfg = json.load(f)
    ids = {k: cfg.get(k + "_token_id") for k in ("bos", "eos", "pad", "mask")}
    check(all(v is not None for v in ids.values()), "config.json carries bos/eos/pad/mask_token_id: %s" % ids)

    tok = AutoTokenizer.from_pretrained(a.hf)
    print("tokenizer: %s" % type(tok).__name__)
    got = {"bos": tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id,
           "eos": tok.eos_token_id, "pad": tok.pad_token_id, "mask": tok.mask_token_id}
    check(got == ids, "the tokenizer's special ids %s equal config.json's" % got)

    per = {}
    with open(a.per_token) as f:
        for r in csv.DictReader(f):
            per.setdefault(r["id"], []).append((int(r["position"]), int(r["token_id"]), float(r["log_prob"])))
    scores = {}
    with open(a.scores) as f:
        for r in csv.DictReader(f):
            scores[r["id"]] = float(r["log_likelihood"])

    model = AutoModelForCausalLM.from_pretrained(a.hf, attn_implementation="eager", dtype=torch.float32).to(a.device).eval()
    worst_tok, worst_seq = 0.0, 0.0
    for name, seq in read_fasta(a.fasta):
        if name not in per or name not in scores:
            check(False, "%s: not in moec's files" % name)
            continue
        rows = sorted(per[name])
        moec_ids = [ids["bos"]] + [t for _, t, _ in rows]
        hf_ids = tok(seq)["input_ids"]
        check(hf_ids == moec_ids, "%s: %d token ids equal moec's%s" % (
            name, len(moec_ids), "" if hf_ids == moec_ids else " (transformers %s..., moec %s...)" % (
                hf_ids[:12], moec_ids[:12])))
        if hf_ids != moec_ids:
            continue
        # moec's causal windows: positions w0 .. w0+S-1 of the record predict w0+1 .. w0+S
        n_pred = len(moec_ids) - 1
        lps = []
        with torch.no_grad():
            for w0 in range(0, n_pred, a.seq):
                end = min(w0 + a.seq, n_pred)
                x = torch.tensor([moec_ids[w0:end]], device=a.device)
                logits = model(input_ids=x).logits[0].double()
                lp = torch.log_softmax(logits, dim=-1)
                tgt = torch.tensor(moec_ids[w0 + 1:end + 1], device=a.device)
                lps += lp[torch.arange(end - w0, device=a.device), tgt].tolist()
        d_tok = max(abs(x - y) for x, y in zip(lps, [p for _, _, p in rows]))
        d_seq = abs(sum(lps) - scores[name])
        worst_tok, worst_seq = max(worst_tok, d_tok), max(worst_seq, d_seq)
        check(d_tok <= a.tol, "%s: per-token log-probabilities within %g (largest difference %.3g)" % (
            name, a.tol, d_tok))
        check(d_seq <= a.tol * len(lps), "%s: log-likelihood %.6f against moec's %.6f (difference %.3g)" % (
            name, sum(lps), scores[name], d_seq))
    print("summary: %d failed; largest per-token difference %.3g, per-sequence %.3g" % (
        len(failures), worst_tok, worst_seq))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
