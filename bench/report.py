#!/usr/bin/env python3
"""bench/report.py OUTDIR [--warmup N] [--configs "A B"]: the results of one bench/run.sh run.

Reads what bench/run.sh left in OUTDIR (build-info.json, gpu.txt, moec_NAME.{rc,log,jsonl},
anchors.json), writes OUTDIR/results.json and OUTDIR/summary.md and prints the summary. Standard library
only, so that moec's numbers are reported even where torch is missing. Exit status 0 when every moec run
and the anchors succeeded, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

# the MoE-layer anchors as first measured on the H200 on 2026-11-29 with PyTorch 2.11 / transformers 5.17 (bench/anchors.py):
# forward + backward, bf16, ms (eager, grouped_mm, plain)
ANCHORS_MD_LAYER_MS = {"small": (6.58, 3.45, 2.55), "bio": (19.84, 4.79, 3.85), "mixtral": (58.05, 39.42, 35.01)}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def error_lines(log):
    """The lines of a failed run's log that say why (its errors, else its last lines)."""
    if not log:
        return "no log"
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error" in ln.lower() or "timed out" in ln or "fatal" in ln.lower()]
    pick = (errs or lines)[-3:]
    return " | ".join(pick)[:500]


def moec_result(outdir, name, warmup):
    r = {"config": name, "status": "error"}
    rc_text = read_text(os.path.join(outdir, "moec_%s.rc" % name))
    rc = None
    if rc_text:
        parts = rc_text.split()
        try:
            rc = int(parts[0])
        except (IndexError, ValueError):
            pass
        if "wall_s" in parts:
            r["wall_s"] = float(parts[parts.index("wall_s") + 1])
    r["exit"] = rc
    rows = []
    jl = read_text(os.path.join(outdir, "moec_%s.jsonl" % name)) or ""
    for ln in jl.splitlines():
        try:
            o = json.loads(ln)
        except ValueError:
            continue
        if isinstance(o, dict) and "step" in o and "tokens_per_s" in o:
            rows.append(o)
        elif isinstance(o, dict) and o.get("event") == "start":
            r["params"] = o.get("params")
    r["logged_steps"] = len(rows)
    timed = [o for o in rows if o["step"] > warmup]
    if not timed and len(rows) >= 2:
        timed = rows[1:]
        r["note"] = "fewer logged steps than the warm-up (%d): median over steps 2.." % warmup
    if timed:
        tps = [float(o["tokens_per_s"]) for o in timed]
        r.update(tokens_per_s=statistics.median(tps), tokens_per_s_min=min(tps), tokens_per_s_max=max(tps),
                 timed_steps=len(tps), first_timed_step=timed[0]["step"],
                 loss_first=rows[0].get("loss"), loss_last=rows[-1].get("loss"),
                 elapsed_s=rows[-1].get("elapsed_s"))
    if rc == 0 and timed:
        r["status"] = "ok"
    else:
        r["error"] = error_lines(read_text(os.path.join(outdir, "moec_%s.log" % name)))
        if rc is None:
            r["error"] = "not run: " + r["error"]
        if timed:
            r["status"] = "partial"
    return r


def fmt_tps(v):
    if v is None:
        return "–"
    if v >= 1e6:
        return "%.2f M" % (v / 1e6)
    if v >= 1e3:
        return "%.1f k" % (v / 1e3)
    return "%.0f" % v


def anchor_run(model, dtype, impl):
    for r in (model or {}).get("runs", []):
        if r.get("dtype") == dtype and r.get("impl") == impl:
            return r
    return None


def cell(r):
    if r is None:
        return "–"
    if r.get("status") == "ok":
        return fmt_tps(r.get("tokens_per_s"))
    return r.get("status", "error")


def git_commit(root):
    try:
        c = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                           timeout=10)
        return c.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--configs", default="")
    ap.add_argument("--no-anchors", action="store_true", help="the anchors were not run on purpose")
    a = ap.parse_args()
    out = a.outdir
    build = read_json(os.path.join(out, "build-info.json")) or {}
    anchors = read_json(os.path.join(out, "anchors.json"))
    configs = a.configs.split() or (build.get("configs") or "").split()
    gpu_txt = read_text(os.path.join(out, "gpu.txt")) or ""
    gpu_lines = [ln for ln in gpu_txt.splitlines()[1:] if ln.strip()]
    gpu = (anchors or {}).get("gpu") or (gpu_lines[0].split(",")[0].strip() if gpu_lines else "unknown GPU")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = build.get("commit") or git_commit(root) or "unknown"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    res = {"format": "moec-bench-results", "version": 1, "date": date, "gpu": gpu, "gpu_smi": gpu_lines,
           "commit": commit, "build": build, "warmup_steps": a.warmup, "configs": []}
    ok = True
    amodels = {m.get("config"): m for m in (anchors or {}).get("models", [])}
    rows = []
    for c in configs:
        m = moec_result(out, c, a.warmup)
        am = amodels.get(c)
        entry = {"config": c, "moec": m, "anchors": am}
        spec = (am or {}).get("spec")
        if not spec:
            try:
                sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
                from anchors import parse_moe  # stdlib only at import
                spec = parse_moe(os.path.join(root, "bench", "models", c + ".moe"))
            except Exception:  # noqa: BLE001
                spec = None
        if spec:
            entry["tokens_per_step"] = spec["batch"] * spec["seq"]
        anchor_ok = [r for r in (am or {}).get("runs", []) if r.get("status") == "ok"]
        best = max(anchor_ok, key=lambda r: r["tokens_per_s"], default=None)
        best32 = max((r for r in anchor_ok if r.get("dtype") == "fp32"), key=lambda r: r["tokens_per_s"], default=None)
        mt = m.get("tokens_per_s")
        if best:
            entry["best_anchor"] = {"dtype": best["dtype"], "impl": best["impl"], "tokens_per_s": best["tokens_per_s"]}
        if best32:
            entry["best_fp32_anchor"] = {"impl": best32["impl"], "tokens_per_s": best32["tokens_per_s"]}
        entry["ratio_vs_best"] = mt / best["tokens_per_s"] if mt and best else None
        entry["ratio_vs_best_fp32"] = mt / best32["tokens_per_s"] if mt and best32 else None
        res["configs"].append(entry)
        ok = ok and m["status"] == "ok"
        moec_cell = fmt_tps(mt) if mt else m["status"]
        if m["status"] == "partial":
            moec_cell += " (partial)"
        ratio = "%.3g×" % entry["ratio_vs_best"] if entry["ratio_vs_best"] else "–"
        ratio32 = "%.3g×" % entry["ratio_vs_best_fp32"] if entry["ratio_vs_best_fp32"] else "–"
        rows.append("| %s | %s | %s | %s / %s | %s / %s | %s | %s | %s | %s | %s |" % (
            c, entry.get("tokens_per_step", "?"), moec_cell,
            cell(anchor_run(am, "bf16", "eager")), cell(anchor_run(am, "fp32", "eager")),
            cell(anchor_run(am, "bf16", "grouped_mm")), cell(anchor_run(am, "fp32", "grouped_mm")),
            ratio, ratio32, gpu, date, commit))

    md = ["## moec vs transformers, whole training step, tokens/s (median after %d warm-up steps)" % a.warmup, "",
          "| config | tokens/step | moec | HF eager bf16 / fp32 | HF grouped_mm bf16 / fp32 | moec / best anchor "
          "| moec / best fp32 anchor | GPU | date | commit |",
          "|---|---|---|---|---|---|---|---|---|---|"] + rows
    errs = ["- moec %s: %s: %s" % (e["config"], e["moec"]["status"], e["moec"]["error"])
            for e in res["configs"] if e["moec"].get("error")]
    if anchors is None and a.no_anchors:
        pass
    elif anchors is None:
        ok = False
        errs.append("- anchors: no anchors.json (see anchors.log)")
    else:
        if anchors.get("error"):
            ok = False
            errs.append("- anchors: " + anchors["error"])
        for m in anchors.get("models", []):
            for r in m.get("runs", []):
                if r.get("status") != "ok":
                    errs.append("- anchor %s %s %s: %s: %s" % (m.get("config"), r.get("dtype"), r.get("impl"),
                                                               r.get("status"), r.get("error")))
    layers = (anchors or {}).get("layers", [])
    if layers:
        md += ["", "## MoE layer forward + backward, bf16, same run (ms, median; the 2026-11-29 anchor figure in brackets)", "",
               "| layer | HF eager | HF grouped_mm | torch._grouped_mm block | best tokens/s | best TFLOP/s |",
               "|---|---|---|---|---|---|"]
        for L in layers:
            runs = {r.get("impl"): r for r in L.get("runs", [])}
            ref = ANCHORS_MD_LAYER_MS.get(L.get("shape"), (None,) * 3)
            cells = []
            for impl, rv in zip(("eager", "grouped_mm", "torch_grouped_mm"), ref):
                r = runs.get(impl)
                v = ("%.2f" % r["ms_median"]) if r and r.get("status") == "ok" else (r or {}).get("status", "–")
                cells.append("%s (%s)" % (v, rv) if rv else v)
                if r and r.get("status") != "ok":
                    errs.append("- layer %s %s: %s" % (L.get("shape"), impl, r.get("error")))
            good = [r for r in runs.values() if r.get("status") == "ok"]
            best = min(good, key=lambda r: r["ms_median"], default=None)
            md.append("| %s T=%s H=%s F=%s E=%s k=%s | %s | %s | %s | %s | %s |" % (
                L.get("shape"), L.get("T"), L.get("H"), L.get("F"), L.get("E"), L.get("k"), *cells,
                fmt_tps(best["tokens_per_s"]) if best else "–", "%.0f" % best["tflops"] if best else "–"))
    if anchors:
        md += ["", "torch %s, transformers %s, CUDA %s; moec built %s on %s." % (
            anchors.get("torch"), anchors.get("transformers"), anchors.get("cuda"), build.get("built", "?"),
            build.get("host", "?"))]
    if errs:
        md += ["", "Errors:"] + errs
    res["summary_md"] = "\n".join(md)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(res["summary_md"] + "\n")
    print()
    print(res["summary_md"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
