#!/usr/bin/env bash
# tests/gpu/data_check.sh [--build-only | --run-only] [OUTDIR]
# Issue 15's GPU checks (docs/data.md), not part of `make test`:
#   step1_packed  protein_tiny (masked LM: attention segmented by sequence, packing packed), one step on the
#                 CPU and on the GPU with --dump: loss, every gradient, every updated parameter (ckpt-diff)
#   step1_rows    the same with --packing rows (one sequence per row, padding masked)
#   curve_rows    30 steps, CPU vs GPU, --packing rows: per-step losses
#   shards        the same 30 GPU steps on a shard directory (moec prep) as on the FASTA: identical losses
# The GPU's segmented attention is also checked node by node against the CPU, whose isolation of each
# sequence tests/unit/test_gradcheck.c proves, by tests/gpu/run_plan.sh (ops.moe is segmented).
# Build (make, NVRTC; no GPU) writes OUTDIR (default build/gpu-data); run needs a driver only.
# Run on the H200 on 2026-12-01 (the merged main, build dd6479f): all four rows ok (bench/RESULTS.md).
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-data}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make -j2 >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp build/moec "$OUT/bin/moec"
  cp tests/train/compare_losses.sh "$OUT/bin/"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp /usr/share/doc/mmseqs2/example-data/DB.fasta.gz "$OUT/data/proteins.fasta.gz"
  build/moec compile models/protein_tiny.moe --kernels reference -o "$OUT/bin/protein_tiny" --arch "$ARCH" >/dev/null
  set +e
fi
[ "$MODE" = build ] && exit 0
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin L=$OUT/logs DATA=$OUT/data/proteins.fasta.gz
rm -rf "$L" "$OUT/data/shards"
mkdir -p "$L"
rows=()
status=0
row() { rows+=("$(printf '%-14s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }
common=(--data "$DATA" --eval-every 0 --log-every 1)
for p in packed rows; do
  "$B/protein_tiny" "${common[@]}" --packing "$p" --steps 1 --device cpu --dump "$L/cpu_$p" >"$L/step1_cpu_$p.log" 2>&1
  "$B/protein_tiny" "${common[@]}" --packing "$p" --steps 1 --device cuda --dump "$L/gpu_$p" >"$L/step1_gpu_$p.log" 2>&1
  rc=$?
  {
    "$B/moec" ckpt-diff "$L/cpu_$p/step_1.safetensors" "$L/gpu_$p/step_1.safetensors" --prefix loss --rtol 1e-5
    "$B/moec" ckpt-diff "$L/cpu_$p/step_1.safetensors" "$L/gpu_$p/step_1.safetensors" --prefix grad. --rtol 1e-4
    "$B/moec" ckpt-diff "$L/cpu_$p/step_1.safetensors" "$L/gpu_$p/step_1.safetensors" --prefix param. --rtol 1e-5
  } >"$L/step1_diff_$p.log" 2>&1
  d=$?
  summ=$(grep -o 'largest relative difference [^ ]* ([^)]*)' "$L/step1_diff_$p.log" | sed 's/largest relative difference //' | paste -sd' ' -)
  row "step1_$p" "$([ $rc -eq 0 ] && [ $d -eq 0 ] && echo ok || echo FAIL)" "loss/grad/param: $summ; $(grep -o 'packing: [a-z]*' "$L/step1_gpu_$p.log")"
done
"$B/protein_tiny" "${common[@]}" --packing rows --steps 30 --device cpu --log "$L/rows_cpu.jsonl" >"$L/rows_cpu.log" 2>&1
"$B/protein_tiny" "${common[@]}" --packing rows --steps 30 --device cuda --log "$L/rows_gpu.jsonl" >"$L/rows_gpu.log" 2>&1
"$B/compare_losses.sh" "$L/rows_cpu.jsonl" "$L/rows_gpu.jsonl" 1e-3 >"$L/rows_cmp.log" 2>&1
row curve_rows "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/rows_cmp.log")"
"$B/moec" prep "$DATA" -o "$OUT/data/shards" --alphabet protein >"$L/prep.log" 2>&1
"$B/protein_tiny" --data "$OUT/data/shards" --eval-every 0 --log-every 1 --steps 30 --device cuda --log "$L/shards_gpu.jsonl" >"$L/shards_gpu.log" 2>&1
"$B/protein_tiny" "${common[@]}" --steps 30 --device cuda --log "$L/fasta_gpu.jsonl" >"$L/fasta_gpu.log" 2>&1
"$B/compare_losses.sh" "$L/fasta_gpu.jsonl" "$L/shards_gpu.jsonl" 0 >"$L/shards_cmp.log" 2>&1
row shards "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/shards_cmp.log") (FASTA vs its shards, GPU)"
echo
printf '%s\n' "${rows[@]}"
exit $status
