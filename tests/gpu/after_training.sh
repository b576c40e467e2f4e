#!/usr/bin/env bash
# tests/gpu/after_training.sh [--build-only | --run-only] [OUTDIR]
# After training on the GPU backend, against the CPU backend (issue 16): a tiny masked LM (protein_tiny) and a
# tiny causal LM with an auxiliary loss (tests/train/micro_dna.moe, aux_loss 0.01) are trained on the GPU, then
# each command runs with --device "$GPU" and with --device cpu on the same checkpoint and the results are compared.
#   eval_mlm, eval_clm  --eval: eval_loss, perplexity, aux_loss, pseudo-perplexity (masked LM): |a - b| <=
#                       1e-5 max(|a|, 1) per number; the per-layer MoE metrics ("moe": load, max_load, entropy,
#                       aux) within 1e-3 max(|a|, 1) (a router tie broken the other way moves one token of
#                       ~24k); the counts equal
#   eval_memory         --eval on the GPU plans the forward pass alone: its activations below the training
#                       plan's, no AdamW state (the stderr line)
#   embed_mean, embed_residues  embed (mean pool; per residue after layer 1): ||a - b|| / ||a|| <= 1e-5 per
#                       tensor (moec ckpt-diff)
#   score_pll, score_ll, score_mm  score --fasta (pseudo-log-likelihood; log-likelihood) and --wt --mutations
#                       (masked marginals): |a - b| <= 1e-5 max(|a|, 1) per number
#   accum_gpu           --grad-accum 2 at batch 16 against batch 32 (a binary compiled for it), both on the GPU,
#                       step 1 (--dump; the loader draws the same rows): gradients <= 1e-5 and parameters
#                       <= 5e-5 normwise per tensor, the loss <= 1e-6 (tests/train/grad_accum.test's bounds)
#   accum_cpu_gpu       --grad-accum 2 on the GPU against the CPU: gradients <= 1e-4, parameters and loss
#                       <= 1e-5 (train_check.sh's CPU-vs-GPU bounds for one step)
#   accum_ep2           the same on two simulated ranks (protein_tiny compiled --ep 2, --simulate-ranks 2 on
#                       one GPU): --grad-accum 2 at batch 16 against batch 32, step 1, the accum_gpu bounds
#   step_metrics        micro_dna trained 20 steps on each backend from the same seed, --log-every 5: the
#                       training log's lm_loss and aux_loss (|a - b| <= 1e-4 max(|a|, 1)) and per-layer MoE
#                       metrics (1e-3, the eval rows' bound) of the GPU's steps (summed on the device) against
#                       the CPU's; the GPU's lines must carry them
#   accum_aux           micro_dna (aux_loss 0.01): --grad-accum 2 at batch 4 against batch 8 on the GPU,
#                       reported, not checked: the load-balancing loss is computed per micro-batch, so only
#                       the language-model part of the gradient is the large batch's (docs/training.md)
# Build (here: make, NVRTC; no GPU needed) writes OUTDIR (default build/gpu-after): moec, the training binaries
# (kernels embedded for sm_90a), libcjson.so.1, the data. Run (the GPU machine) writes OUTDIR/logs and prints
# a table last; exit 0 when every checked row is ok.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-after}
BUILD=${BUILD:-build}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 >/dev/null
  rm -rf "$OUT"
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp "$BUILD/moec" "$OUT/bin/moec"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp /usr/share/doc/mmseqs2/example-data/DB.fasta.gz "$OUT/data/proteins.fasta.gz"
  cp /usr/share/doc/t-coffee/examples/proteases1_small.fasta "$OUT/data/query.fasta"
  head -c 2000000 /usr/share/microbiomeutil-data/RESOURCES/rRNA16S.gold.fasta | sed '$d' | gzip > "$OUT/data/dna.fasta.gz"
  head -c 30000 /usr/share/microbiomeutil-data/RESOURCES/rRNA16S.gold.fasta | sed '$d' > "$OUT/data/dna_query.fasta"
  awk '/^>/{n++} n==3' /usr/share/doc/t-coffee/examples/proteases1_small.fasta > "$OUT/data/wt.fasta"
  printf 'mutant\nA6G\nL2K:A6G\nL3P\n' > "$OUT/data/mutations.csv"
  c() { "$BUILD/moec" compile --kernels reference "$@" --arch "$ARCH" >/dev/null; }  # the oracle
  c models/protein_tiny.moe -o "$OUT/bin/mlm"
  sed 's/batch 16,/batch 32,/' models/protein_tiny.moe > "$OUT/data/protein_tiny_b32.moe"
  grep -q 'batch 32,' "$OUT/data/protein_tiny_b32.moe"
  c "$OUT/data/protein_tiny_b32.moe" -o "$OUT/bin/mlm_b32"
  c models/protein_tiny.moe --ep 2 -o "$OUT/bin/mlm_ep2"
  c "$OUT/data/protein_tiny_b32.moe" --ep 2 -o "$OUT/bin/mlm_ep2_b32"
  c tests/train/micro_dna.moe -o "$OUT/bin/clm"
  sed 's/batch 4,/batch 8,/' tests/train/micro_dna.moe > "$OUT/data/micro_dna_b8.moe"
  grep -q 'batch 8,' "$OUT/data/micro_dna_b8.moe"
  c "$OUT/data/micro_dna_b8.moe" -o "$OUT/bin/clm_b8"
  set +e
  du -sh "$OUT"
fi
[ "$MODE" = build ] && exit 0

# MOEC_AFTER_DEVICE=cpu runs the whole script with the CPU in the GPU's place: a check of the script itself
# on a machine without a GPU (every comparison then exact), not of the GPU
GPU=${MOEC_AFTER_DEVICE:-cuda}
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
D=$OUT/data
L=$OUT/logs
rm -rf "$L"
mkdir -p "$L"
rows=()
status=0
row() { rows+=("$(printf '%-15s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || [ "$2" = info ] || status=1; }

# numbers(A, B, TOL, [SKIP]): the numbers of two texts (JSON, CSV), token by token; strings must be equal.
# Prints the largest |a - b| / max(|a|, |b|, 1) and exits 1 when one exceeds TOL or the texts differ otherwise.
# Tokens after a field named SKIP (a JSON key) are compared with TOL2 instead (the MoE metrics).
numbers() {
  awk -v tol="$3" -v tol2="${5:-$3}" -v skip="${4:-}" '
    function tok(s, arr,   n) { gsub(/[{}\[\]:,"\n]/, " ", s); return split(s, arr, " ") }
    function isnum(x) { return x ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ }
    FNR == NR { a = a $0 "\n"; next } { b = b $0 "\n" }
    END {
      na = tok(a, A); nb = tok(b, Bt)
      if (na != nb) { printf "different token counts: %d and %d\n", na, nb; exit 1 }
      worst = 0; worst2 = 0; bad = 0; in2 = 0
      for (i = 1; i <= na; i++) {
        if (skip != "" && A[i] == skip) in2 = 1
        if (isnum(A[i]) && isnum(Bt[i])) {
          d = A[i] - Bt[i]; if (d < 0) d = -d
          m = A[i] < 0 ? -A[i] : A[i]; mb = Bt[i] < 0 ? -Bt[i] : Bt[i]; if (mb > m) m = mb; if (m < 1) m = 1
          r = d / m
          if (in2) { if (r > worst2) worst2 = r; if (r > tol2) bad++ }
          else { if (r > worst) worst = r; if (r > tol) bad++ }
        } else if (A[i] != Bt[i]) { printf "token %d differs: %s and %s\n", i, A[i], Bt[i]; exit 1 }
      }
      printf "%d tokens, largest difference %.2e", na, worst
      if (skip != "") printf " (%s: %.2e)", skip, worst2
      printf "\n"
      exit bad > 0
    }' "$1" "$2"
}
ok() { [ "$1" -eq 0 ] && echo ok || echo FAIL; }

# train on the GPU
"$B/mlm" --device "$GPU" --data "$D/proteins.fasta.gz" --steps 100 --eval-every 0 --ckpt-dir "$L/mlm_ck" >"$L/train_mlm.log" 2>&1
r1=$?
"$B/clm" --device "$GPU" --data "$D/dna.fasta.gz" --steps 40 --eval-every 0 --ckpt-dir "$L/clm_ck" >"$L/train_clm.log" 2>&1
r2=$?
row train "$(ok $((r1 + r2)))" "protein_tiny 100 steps: $(grep '^step' "$L/train_mlm.log" | tail -1 | tr -s ' '); micro_dna 40 steps: rc $r2"
MCK=$L/mlm_ck/checkpoint.safetensors
CCK=$L/clm_ck/checkpoint.safetensors

# --eval on both backends
for side in gpu cpu; do
  dev=$([ $side = gpu ] && echo "$GPU" || echo cpu)
  "$B/mlm" --device "$dev" --eval "$D/query.fasta" --init "$MCK" >"$L/eval_mlm_$side.json" 2>"$L/eval_mlm_$side.err"
  "$B/clm" --device "$dev" --eval "$D/dna_query.fasta" --init "$CCK" >"$L/eval_clm_$side.json" 2>"$L/eval_clm_$side.err"
done
for m in mlm clm; do
  res=$(numbers "$L/eval_${m}_gpu.json" "$L/eval_${m}_cpu.json" 1e-5 moe 1e-3)
  rc=$?
  grep -q '"moe":\[' "$L/eval_${m}_gpu.json" && grep -q '"aux_loss"' "$L/eval_${m}_gpu.json" || rc=1
  [ $m = mlm ] && { grep -q '"pseudo_perplexity"' "$L/eval_${m}_gpu.json" || rc=1; }
  row "eval_$m" "$(ok $rc)" "$res; gpu $(grep -o '"eval_loss":[0-9.]*' "$L/eval_${m}_gpu.json"), cpu $(grep -o '"eval_loss":[0-9.]*' "$L/eval_${m}_cpu.json")"
done
mem=$(grep -h "^memory: forward passes only$([ "$GPU" = cuda ] && echo ' on the GPU'):" "$L/eval_mlm_gpu.err")
less=$(sed -n 's/.*activations \([0-9.]*\) \([KMG]\)iB (training plans \([0-9.]*\) \([KMG]\)iB.*/\1 \2 \3 \4/p' <<<"$mem" | awk 'function m(u) { return u == "K" ? 1024 : u == "M" ? 1048576 : 1073741824 } NF == 4 && $1 * m($2) < $3 * m($4) { print "yes" }')
row eval_memory "$([ "$less" = yes ] && grep -q 'no AdamW state' <<<"$mem" && echo ok || echo FAIL)" "${mem:-no memory line}"

# embed on both backends
for side in gpu cpu; do
  dev=$([ $side = gpu ] && echo "$GPU" || echo cpu)
  "$B/mlm" embed --device "$dev" --init "$MCK" --fasta "$D/query.fasta" -o "$L/mean_$side.safetensors" >"$L/embed_mean_$side.log" 2>&1
  "$B/mlm" embed --device "$dev" --init "$MCK" --fasta "$D/query.fasta" -o "$L/res_$side.safetensors" --pool none --layer 1 >"$L/embed_res_$side.log" 2>&1
done
"$B/moec" ckpt-diff "$L/mean_cpu.safetensors" "$L/mean_gpu.safetensors" --prefix mean. --rtol 1e-5 >"$L/embed_mean_diff.log" 2>&1
row embed_mean "$(ok $?)" "$(tail -1 "$L/embed_mean_diff.log")"
"$B/moec" ckpt-diff "$L/res_cpu.safetensors" "$L/res_gpu.safetensors" --prefix residues. --rtol 1e-5 >"$L/embed_res_diff.log" 2>&1
row embed_residues "$(ok $?)" "$(tail -1 "$L/embed_res_diff.log"); $(grep -o 'forward passes only on the GPU.*' "$L/embed_res_gpu.log" | head -1)"

# score on both backends
for side in gpu cpu; do
  dev=$([ $side = gpu ] && echo "$GPU" || echo cpu)
  "$B/mlm" score --device "$dev" --init "$MCK" --fasta "$D/query.fasta" -o "$L/pll_$side.csv" >"$L/score_pll_$side.log" 2>&1
  "$B/clm" score --device "$dev" --init "$CCK" --fasta "$D/dna_query.fasta" -o "$L/ll_$side.csv" >"$L/score_ll_$side.log" 2>&1
  "$B/mlm" score --device "$dev" --init "$MCK" --wt "$D/wt.fasta" --mutations "$D/mutations.csv" -o "$L/mm_$side.csv" >"$L/score_mm_$side.log" 2>&1
done
for s in pll ll mm; do
  res=$(numbers "$L/${s}_gpu.csv" "$L/${s}_cpu.csv" 1e-5)
  rc=$?
  [ -s "$L/${s}_gpu.csv" ] || rc=1
  row "score_$s" "$(ok $rc)" "$res ($(($(wc -l <"$L/${s}_gpu.csv") - 1)) rows)"
done

# --grad-accum on the GPU: 2 x 16 against 32, step 1
acc=(--data "$D/proteins.fasta.gz" --steps 1 --set warmup=1 --eval-every 0)
"$B/mlm" --device "$GPU" "${acc[@]}" --grad-accum 2 --dump "$L/acc_gpu" >"$L/accum_gpu.log" 2>&1
r1=$?
"$B/mlm_b32" --device "$GPU" "${acc[@]}" --dump "$L/big_gpu" >"$L/big_gpu.log" 2>&1
r2=$?
"$B/mlm" --device cpu "${acc[@]}" --grad-accum 2 --dump "$L/acc_cpu" >"$L/accum_cpu.log" 2>&1
r3=$?
S=step_1.safetensors
{
  "$B/moec" ckpt-diff "$L/big_gpu/$S" "$L/acc_gpu/$S" --prefix grad. --rtol 1e-5 &&
  "$B/moec" ckpt-diff "$L/big_gpu/$S" "$L/acc_gpu/$S" --prefix param. --rtol 5e-5 &&
  "$B/moec" ckpt-diff "$L/big_gpu/$S" "$L/acc_gpu/$S" --prefix loss --rtol 1e-6
} >"$L/accum_gpu_diff.log" 2>&1
d=$?
summ=$(grep -o 'largest relative difference [^ ]*' "$L/accum_gpu_diff.log" | sed 's/largest relative difference //' | paste -sd' ' -)
row accum_gpu "$(ok $((r1 + r2 + d)))" "grad/param/loss: $summ; $(grep -o '^gradient accumulation: 2 micro-batches of 16' "$L/accum_gpu.log")"
{
  "$B/moec" ckpt-diff "$L/acc_cpu/$S" "$L/acc_gpu/$S" --prefix grad. --rtol 1e-4 &&
  "$B/moec" ckpt-diff "$L/acc_cpu/$S" "$L/acc_gpu/$S" --prefix param. --rtol 1e-5 &&
  "$B/moec" ckpt-diff "$L/acc_cpu/$S" "$L/acc_gpu/$S" --prefix loss --rtol 1e-5
} >"$L/accum_cpu_gpu_diff.log" 2>&1
d=$?
summ=$(grep -o 'largest relative difference [^ ]*' "$L/accum_cpu_gpu_diff.log" | sed 's/largest relative difference //' | paste -sd' ' -)
row accum_cpu_gpu "$(ok $((r3 + d)))" "grad/param/loss: $summ"
# two ranks (expert parallel) on one GPU
"$B/mlm_ep2" --device "$GPU" "${acc[@]}" --simulate-ranks 2 --grad-accum 2 --dump "$L/acc_ep2" >"$L/accum_ep2.log" 2>&1
r1=$?
"$B/mlm_ep2_b32" --device "$GPU" "${acc[@]}" --simulate-ranks 2 --dump "$L/big_ep2" >"$L/big_ep2.log" 2>&1
r2=$?
{
  "$B/moec" ckpt-diff "$L/big_ep2/$S" "$L/acc_ep2/$S" --prefix grad. --rtol 1e-5 &&
  "$B/moec" ckpt-diff "$L/big_ep2/$S" "$L/acc_ep2/$S" --prefix param. --rtol 5e-5 &&
  "$B/moec" ckpt-diff "$L/big_ep2/$S" "$L/acc_ep2/$S" --prefix loss --rtol 1e-6
} >"$L/accum_ep2_diff.log" 2>&1
d=$?
summ=$(grep -o 'largest relative difference [^ ]*' "$L/accum_ep2_diff.log" | sed 's/largest relative difference //' | paste -sd' ' -)
row accum_ep2 "$(ok $((r1 + r2 + d)))" "grad/param/loss: $summ; $(grep -o '^ranks: 2 (expert parallel 2' "$L/accum_ep2.log")"
# the training steps' metrics (lm_loss, aux_loss, moe) in the log on both backends
for side in gpu cpu; do
  dev=$([ $side = gpu ] && echo "$GPU" || echo cpu)
  "$B/clm" --device "$dev" --data "$D/dna.fasta.gz" --steps 20 --log-every 5 --eval-every 0 --log "$L/steps_$side.jsonl" \
    >"$L/steps_$side.log" 2>&1
  grep '"step"' "$L/steps_$side.jsonl" | sed 's/.*"lm_loss"/"lm_loss"/' >"$L/steps_$side.txt"
done
res=$(numbers "$L/steps_gpu.txt" "$L/steps_cpu.txt" 1e-4 moe 1e-3)
rc=$?
[ "$(grep -c '"aux_loss".*"moe":\[{' "$L/steps_gpu.txt")" -eq 4 ] || rc=1
row step_metrics "$(ok $rc)" "$res; 4 log lines, gpu last: $(tail -1 "$L/steps_gpu.txt" | cut -c1-60)"
# with an auxiliary loss: reported
dacc=(--data "$D/dna.fasta.gz" --steps 1 --set warmup=1 --eval-every 0)
"$B/clm" --device "$GPU" "${dacc[@]}" --grad-accum 2 --dump "$L/aux_acc" >"$L/aux_acc.log" 2>&1
"$B/clm_b8" --device "$GPU" "${dacc[@]}" --dump "$L/aux_big" >"$L/aux_big.log" 2>&1
"$B/moec" ckpt-diff "$L/aux_big/$S" "$L/aux_acc/$S" --prefix grad. --rtol 1e-5 >"$L/aux_diff.log" 2>&1
"$B/moec" ckpt-diff "$L/aux_big/$S" "$L/aux_acc/$S" --prefix loss --rtol 1e-6 >>"$L/aux_diff.log" 2>&1
row accum_aux info "micro_dna aux_loss 0.01, grad then loss: $(grep -o 'largest relative difference [^ ]*' "$L/aux_diff.log" | sed 's/largest relative difference //' | paste -sd' ' -) (the aux term per micro-batch)"

tar -C "$OUT" -czf "$OUT/logs.tgz" logs
echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
printf '%-15s %-5s %s\n' check ok details
printf '%s\n' "${rows[@]}"
exit $status
