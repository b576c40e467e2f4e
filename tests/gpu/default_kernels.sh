#!/usr/bin/env bash
# tests/gpu/default_kernels.sh [--build-only | --run-only] [OUTDIR]
# Decision 48 on the GPU: `moec compile` without --kernels gives the fast step, not part of `make test`:
#   fast_default  tests/gpu/fast_mlp.moe compiled with no --kernels (and --arch sm_90a): its plan line says
#                 the bf16 tensor cores, and 30 GPU steps' losses agree with the same binary's on the CPU
#                 (which rounds the bf16-stored tensors as the GPU stores them) within 2e-2 per step
#   same_as_fast  the default binary's GPU losses equal those of --kernels fast's, step for step (the same plan)
#   ref_oracle    the --kernels reference binary: GPU against CPU within 1e-4 per step (the fp32 oracle)
#   quickstart    models/protein_tiny.moe compiled as tools/quickstart.sh does (no --kernels, no --arch: NVRTC
#                 at start, then cached), 30 steps with --device auto: on the GPU ("device: cuda"), losses within
#                 1e-3 of the reference binary's on the GPU (no node of the tiny model takes the sm_90a
#                 kernels; the fast plan differs in summation order and the optimizer's fp32 arithmetic)
#   speed         tokens/s of the default and the reference fast_mlp binaries (reported; the default must be
#                 faster)
# Build (here: make, flex/bison, cJSON, NVRTC; no GPU needed) writes OUTDIR (default build/gpu-default):
# moec, the binaries, libcjson.so.1, the FASTA data. Run (the GPU machine: a driver, NVRTC for quickstart)
# writes OUTDIR/logs and prints one row per check; exit 0 when every row is ok.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-default}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make -j2 build/moec >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp build/moec "$OUT/bin/moec"
  cp tests/train/compare_losses.sh "$OUT/bin/"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp /usr/share/doc/mmseqs2/example-data/DB.fasta.gz "$OUT/data/proteins.fasta.gz"
  build/moec compile tests/gpu/fast_mlp.moe -o "$OUT/bin/fast_default" --arch "$ARCH" >/dev/null
  build/moec compile tests/gpu/fast_mlp.moe --kernels fast -o "$OUT/bin/fast_explicit" --arch "$ARCH" >/dev/null
  build/moec compile tests/gpu/fast_mlp.moe --kernels reference -o "$OUT/bin/fast_ref" --arch "$ARCH" >/dev/null
  build/moec compile models/protein_tiny.moe -o "$OUT/bin/quickstart" >/dev/null
  build/moec compile models/protein_tiny.moe --kernels reference -o "$OUT/bin/quickstart_ref" >/dev/null
  set +e
fi
[ "$MODE" = build ] && exit 0
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin L=$OUT/logs DATA=$OUT/data/proteins.fasta.gz
rm -rf "$L" "$MOEC_CACHE_DIR"
mkdir -p "$L"
rows=()
status=0
row() { rows+=("$(printf '%-13s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }
common=(--data "$DATA" --eval-every 0 --log-every 1 --steps 30)
run() { # NAME BINARY DEVICE [flags]: the log and the JSONL
  local n=$1 b=$2 d=$3; shift 3
  "$B/$b" "${common[@]}" --device "$d" --log "$L/$n.jsonl" "$@" >"$L/$n.log" 2>&1
}
toks() { grep -o '[0-9]* tok/s' "$L/$1.log" | tail -1 | grep -o '[0-9]*'; }

run fast_gpu fast_default cuda; rc=$?
run fast_cpu fast_default cpu
"$B/compare_losses.sh" "$L/fast_cpu.jsonl" "$L/fast_gpu.jsonl" 2e-2 >"$L/fast_cmp.log" 2>&1; c=$?
grep -q 'precision bf16 (bf16 tensor cores where a node qualifies' "$L/fast_gpu.log"; p=$?
row fast_default "$([ $rc -eq 0 ] && [ $c -eq 0 ] && [ $p -eq 0 ] && echo ok || echo FAIL)" \
    "$(tail -1 "$L/fast_cmp.log") (CPU vs GPU); $(grep -o "the fast kernels' plan: [0-9]* node tensors stored in bf16" "$L/fast_gpu.log")"
run fast_explicit_gpu fast_explicit cuda
"$B/compare_losses.sh" "$L/fast_explicit_gpu.jsonl" "$L/fast_gpu.jsonl" 0 >"$L/same_cmp.log" 2>&1
row same_as_fast "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/same_cmp.log") (--kernels fast vs the default)"
run ref_gpu fast_ref cuda; rc=$?
run ref_cpu fast_ref cpu
"$B/compare_losses.sh" "$L/ref_cpu.jsonl" "$L/ref_gpu.jsonl" 1e-4 >"$L/ref_cmp.log" 2>&1; c=$?
row ref_oracle "$([ $rc -eq 0 ] && [ $c -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/ref_cmp.log") (CPU vs GPU)"
run quick_gpu quickstart auto; rc=$?
run quick_ref_gpu quickstart_ref cuda
"$B/compare_losses.sh" "$L/quick_ref_gpu.jsonl" "$L/quick_gpu.jsonl" 1e-3 >"$L/quick_cmp.log" 2>&1; c=$?
grep -q '^device: cuda' "$L/quick_gpu.log"; d=$?
row quickstart "$([ $rc -eq 0 ] && [ $c -eq 0 ] && [ $d -eq 0 ] && echo ok || echo FAIL)" \
    "$(tail -1 "$L/quick_cmp.log") (reference vs default, GPU); $(grep -o 'kernels from [^;]*' "$L/quick_gpu.log")"
tf=$(toks fast_gpu) tr=$(toks ref_gpu)
row speed "$([ -n "$tf" ] && [ -n "$tr" ] && [ "$tf" -gt "$tr" ] && echo ok || echo FAIL)" \
    "fast_mlp: default ${tf:-?} tok/s, --kernels reference ${tr:-?} tok/s"
echo
printf '%s\n' "${rows[@]}"
exit $status
