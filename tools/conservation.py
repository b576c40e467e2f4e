#!/usr/bin/env python3
"""Zero-shot variant scores against alignment conservation (issue 16's real-data check).

    python3 tools/conservation.py TRAIN CKPT ALN [WT_ID]

ALN is a CLUSTAL alignment (.aln or .aln.gz, e.g. the t-coffee example b11.aln.gz: 11 serine proteases).
Conservation per alignment column is computed here, from the alignment alone: 1 - H/ln(20), H the Shannon
entropy of the residues in the column (gaps left out), for the columns where at least half the sequences have
a residue. The wild type (WT_ID, default the first sequence) is written out ungapped; every single substitution
to the other 19 standard amino acids at each of its positions goes to `TRAIN score --wt --mutations`
(masked marginal for a masked LM, log-likelihood ratio for a causal one); a position's score is the mean over its
19. Printed: the Spearman rank correlation between the position scores and the conservation of their columns
(expected negative: substitutions at conserved columns score lower). A reported figure, not a threshold.
Python's standard library only.
"""
import gzip
import math
import os
import subprocess
import sys
import tempfile

AA = "ACDEFGHIKLMNPQRSTVWY"


def read_clustal(path):
    op = gzip.open if path.endswith(".gz") else open
    seqs, order = {}, []
    with op(path, "rt") as f:
        for i, line in enumerate(f):
            if i == 0 or not line.strip() or line[0] in " \t*:.":
                continue
            parts = line.split()
            if len(parts) < 2:
                continue
            if parts[0] not in seqs:
                seqs[parts[0]] = ""
                order.append(parts[0])
            seqs[parts[0]] += parts[1]
    return order, seqs


def ranks(v):
    idx = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and v[idx[j + 1]] == v[idx[i]]:
            j += 1
        for k in range(i, j + 1):
            r[idx[k]] = (i + j) / 2.0
        i = j + 1
    return r


def pearson(a, b):
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    sab = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return sab / (sa * sb)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    train, ckpt, aln = sys.argv[1:4]
    order, seqs = read_clustal(aln)
    wt_id = sys.argv[4] if len(sys.argv) > 4 else order[0]
    if wt_id not in seqs:
        sys.exit(f"{aln}: no sequence {wt_id}")
    ncol = len(seqs[wt_id])
    cons = []
    for c in range(ncol):
        col = [seqs[s][c].upper() for s in order if c < len(seqs[s]) and seqs[s][c] not in "-."]
        if len(col) * 2 < len(order):
            cons.append(None)
            continue
        h = 0.0
        for a in set(col):
            p = col.count(a) / len(col)
            h -= p * math.log(p)
        cons.append(1 - h / math.log(20))
    wt, colof = "", []
    for c, ch in enumerate(seqs[wt_id]):
        if ch not in "-.":
            wt += ch.upper()
            colof.append(c)
    with tempfile.TemporaryDirectory() as d:
        wtp, mp, op = os.path.join(d, "wt.fa"), os.path.join(d, "m.csv"), os.path.join(d, "s.csv")
        with open(wtp, "w") as f:
            f.write(f">{wt_id}\n{wt}\n")
        muts = []
        with open(mp, "w") as f:
            f.write("mutant\n")
            for i, w in enumerate(wt):
                if w not in AA:
                    continue
                for m in AA:
                    if m != w:
                        muts.append((i, f"{w}{i + 1}{m}"))
                        f.write(f"{w}{i + 1}{m}\n")
        subprocess.run([train, "score", "--init", ckpt, "--wt", wtp, "--mutations", mp, "-o", op], check=True)
        with open(op) as f:
            rows = [l.strip().split(",") for l in f][1:]
    per = {}
    for (i, _), (name, score) in zip(muts, rows):
        per.setdefault(i, []).append(float(score))
    xs, ys = [], []
    for i, v in per.items():
        c = cons[colof[i]]
        if c is not None:
            xs.append(sum(v) / len(v))
            ys.append(c)
    rho = pearson(ranks(xs), ranks(ys))
    print(f"{wt_id}: {len(wt)} residues, {len(muts)} substitutions, {len(xs)} positions in columns with "
          f">= 50% residues; Spearman(mean substitution score, conservation) = {rho:.3f}")


if __name__ == "__main__":
    main()
