#!/usr/bin/env bash
# tests/gpu/train_check.sh [--build-only | --run-only] [OUTDIR]
# The training binary on a GPU (runtime/gpu/), against the CPU backend:
#   step1_*   one training step (mixtral_tiny bf16 and mxfp8, protein_tiny) on the CPU and on the GPU,
#             both with --dump: loss, every gradient and every updated parameter compared (moec ckpt-diff)
#   curve_*   30 steps on each backend: per-step losses (tests/train/compare_losses.sh)
#   graph     the same GPU run with --no-cuda-graph: identical losses; tokens/s of both
#   ep2, ep4  the rank simulator on one GPU (--simulate-ranks, the model compiled --ep N): losses = ep 1's
#   sync_ep2, sync_ep4  the same runs (MOEC_SYNC_CHECK=1): no host wait and no device-to-host copy inside any
#             step of any rank, each step one CUDA graph (captured at steps 1-2, replayed after); and the checkpoint
#             byte-identical to the host path's (MOEC_HOST_COLLECTIVES=1: collectives staged through host memory,
#             the stream drained around each), the losses identical (decision 46)
#   nograph_ep2  ep 2 with --no-cuda-graph: still no host wait in a step, and the same checkpoint
#   resume    20 steps vs 10 + --resume 10 on the GPU: byte-identical checkpoints
#   cache     a binary without embedded kernels: NVRTC at start-up, then the on-disk cache
#   fallback  no embedded kernels and no NVRTC: --device auto falls back to the CPU with a notice, cuda fails
#   nofit     Mixtral-8x7B layers at batch 16 x 4096 on one GPU is refused before allocating, naming what to reduce
#   nofit_dry its --dry-run (no GPU used): exit 1, the same total the backend refused
#   mixtral4  four Mixtral-8x7B layers at 4 x 4096 (bf16, fast kernels): the dry run fits, 3 steps train,
#             the measured memory within 10% of the plan (tests/gpu/mem_check.sh, run from here); and at
#             16 x 4096 with `checkpoint blocks` (tests/gpu/mixtral4_ckpt.moe, decision 43), refused without
#   dryrun_mfu mixtral_tiny's --dry-run total = what the GPU run planned; that run's mfu in (0, 1)
#   mini500   protein_moe_mini, 500 steps on the GPU (loss curve for docs/results/)
# Build (here: make, flex/bison, cJSON, NVRTC; no GPU needed) writes OUTDIR (default build/gpu-train):
# moec, the training binaries (kernels embedded for sm_90a), libcjson.so.1, the FASTA data.
# Run (the GPU machine: a driver, nothing else) writes OUTDIR/logs and prints a table last.
# MOEC_CHECK_ONLY=ep (both steps): only the rank simulator's rows (ep*, sync_*, host_*, nograph_*) and their binaries.
# MOEC_CHECK_ONLY=batch (both steps): only the batch rows (decision 62): a binary compiled at batch B and run with
#   --batch B/2 loads its embedded kernels (no NVRTC) and trains 10 steps within 2% of the CPU backend running
#   the same binary at B/2: protein_moe_mini (mxfp8 and fp8-block) and mixtral_tiny (bf16), fast kernels.
set -uo pipefail
MODE=all
ONLY=${MOEC_CHECK_ONLY:-}
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-train}
BUILD=${BUILD:-build}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
DATA_SRC=${MOEC_DATA:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp "$BUILD/moec" "$OUT/bin/moec"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp "$DATA_SRC" "$OUT/data/proteins.fasta.gz"
  cp tests/train/compare_losses.sh "$OUT/bin/"
  c() { "$BUILD/moec" compile --kernels reference "$@" >/dev/null; }  # the oracle unless a call says fast
  if [ "$ONLY" = batch ]; then
    c models/protein_moe_mini.moe --kernels fast -o "$OUT/bin/pmm" --arch "$ARCH"
    c models/protein_moe_mini.moe --kernels fast --precision fp8-block -o "$OUT/bin/pmm_fp8b" --arch "$ARCH"
    c models/mixtral_tiny.moe --kernels fast --precision bf16 -o "$OUT/bin/mt_bf16" --arch "$ARCH"
    exit 0
  fi
  c models/mixtral_tiny.moe -o "$OUT/bin/mixtral_tiny" --arch "$ARCH"
  if [ "$ONLY" != ep ]; then
    c models/mixtral_tiny.moe --precision mxfp8 -o "$OUT/bin/mixtral_tiny_mxfp8" --arch "$ARCH"
    c models/protein_tiny.moe -o "$OUT/bin/protein_tiny" --arch "$ARCH"
  fi
  c models/mixtral_tiny.moe --ep 2 -o "$OUT/bin/mixtral_tiny_ep2" --arch "$ARCH"
  c models/mixtral_tiny.moe --ep 4 -o "$OUT/bin/mixtral_tiny_ep4" --arch "$ARCH"
  if [ "$ONLY" != ep ]; then
    c models/mixtral_tiny.moe -o "$OUT/bin/mixtral_tiny_nvrtc"
    c tests/gpu/nofit.moe -o "$OUT/bin/nofit"
    c tests/gpu/mixtral4.moe --kernels fast -o "$OUT/bin/mixtral4" --arch "$ARCH"
    c tests/gpu/mixtral4_ckpt.moe --kernels fast -o "$OUT/bin/mixtral4_ckpt" --arch "$ARCH"
    c models/protein_moe_mini.moe -o "$OUT/bin/protein_moe_mini" --arch "$ARCH"
  fi
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
L=$OUT/logs
rm -rf "$L" "$MOEC_CACHE_DIR"
mkdir -p "$L"
DATA=$OUT/data/proteins.fasta.gz
rows=()
status=0
row() { rows+=("$(printf '%-14s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }
tps() { grep -o '"tokens_per_s":[0-9.e+]*' "$1" | tail -n +3 | cut -d: -f2 | sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.0f", a[int((NR+1)/2)]; else print "?"}'; }
common=(--data "$DATA" --eval-every 0 --log-every 1)

if [ "$ONLY" = batch ]; then
  for n in pmm pmm_fp8b mt_bf16; do
    b=$(grep -o '^dry run: [^,]*, batch [0-9]*' <("$B/$n" --dry-run --device cuda 2>&1) | grep -o '[0-9]*$')
    h=$((b / 2))
    dry=$("$B/$n" --dry-run --device cuda --batch $h 2>&1 | grep '^kernels: ')
    "$B/$n" "${common[@]}" --steps 10 --device cuda --batch $h --log "$L/${n}_gpu.jsonl" >"$L/${n}_gpu.log" 2>&1
    rc1=$?
    "$B/$n" "${common[@]}" --steps 10 --device cpu --batch $h --log "$L/${n}_cpu.jsonl" >"$L/${n}_cpu.log" 2>&1
    rc2=$?
    "$B/compare_losses.sh" "$L/${n}_cpu.jsonl" "$L/${n}_gpu.jsonl" 2e-2 >"$L/${n}_cmp.log" 2>&1
    cmp=$?
    from=$(grep -o 'kernels from [^;]*' "$L/${n}_gpu.log" | head -1)
    row "batch_$n" "$([ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $cmp -eq 0 ] && echo "$from" | grep -q 'embedded in the binary' && echo ok || echo FAIL)" "compiled at batch $b, run at $h: $from ($dry); GPU against the CPU backend at $h: $(tail -1 "$L/${n}_cmp.log"); $(tps "$L/${n}_gpu.jsonl") tok/s"
  done
  printf '%-14s %-5s %s\n' check ok details
  printf '%s\n' "${rows[@]}"
  exit $status
fi

if [ "$ONLY" != ep ]; then
# one step, CPU vs GPU: loss, gradients, parameters
for m in mixtral_tiny mixtral_tiny_mxfp8 protein_tiny; do
  "$B/$m" "${common[@]}" --steps 1 --device cpu --dump "$L/cpu_$m" >"$L/step1_cpu_$m.log" 2>&1
  "$B/$m" "${common[@]}" --steps 1 --device cuda --dump "$L/gpu_$m" >"$L/step1_gpu_$m.log" 2>&1
  rc=$?
  {
    "$B/moec" ckpt-diff "$L/cpu_$m/step_1.safetensors" "$L/gpu_$m/step_1.safetensors" --prefix loss --rtol 1e-5
    "$B/moec" ckpt-diff "$L/cpu_$m/step_1.safetensors" "$L/gpu_$m/step_1.safetensors" --prefix grad. --rtol 1e-4
    "$B/moec" ckpt-diff "$L/cpu_$m/step_1.safetensors" "$L/gpu_$m/step_1.safetensors" --prefix param. --rtol 1e-5
  } >"$L/step1_diff_$m.log" 2>&1
  d=$?
  summ=$(grep -o 'largest relative difference [^ ]* ([^)]*)' "$L/step1_diff_$m.log" | sed 's/largest relative difference //' | paste -sd' ' -)
  row "step1_$m" "$([ $rc -eq 0 ] && [ $d -eq 0 ] && echo ok || echo FAIL)" "loss/grad/param: $summ"
done

# 30 steps, CPU vs GPU; the GPU with and without the CUDA graph
"$B/mixtral_tiny" "${common[@]}" --steps 30 --device cpu --log "$L/curve_cpu.jsonl" >"$L/curve_cpu.log" 2>&1
"$B/mixtral_tiny" "${common[@]}" --steps 30 --device cuda --log "$L/curve_gpu.jsonl" >"$L/curve_gpu.log" 2>&1
"$B/compare_losses.sh" "$L/curve_cpu.jsonl" "$L/curve_gpu.jsonl" 1e-3 >"$L/curve_cmp.log" 2>&1
row curve_30 "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/curve_cmp.log"); cpu $(tps "$L/curve_cpu.jsonl") tok/s, gpu $(tps "$L/curve_gpu.jsonl") tok/s"
"$B/mixtral_tiny" "${common[@]}" --steps 30 --device cuda --no-cuda-graph --log "$L/curve_nograph.jsonl" >"$L/curve_nograph.log" 2>&1
"$B/compare_losses.sh" "$L/curve_gpu.jsonl" "$L/curve_nograph.jsonl" 0 >"$L/graph_cmp.log" 2>&1
row graph "$([ $? -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/graph_cmp.log"); graph $(tps "$L/curve_gpu.jsonl") tok/s, no graph $(tps "$L/curve_nograph.jsonl") tok/s"
grep -h '^memory' "$L/curve_gpu.log" >"$L/memory.txt"
row memory "$(grep -q 'memory measured' "$L/curve_gpu.log" && echo ok || echo FAIL)" "$(grep -h 'memory measured' "$L/curve_gpu.log" | sed 's/of device memory in use by this run (cuMemGetInfo), //')"

# --dry-run (no GPU used) plans what the backend allocates: the same total as the run above; that run's JSONL
# has an mfu in (0, 1) against the H200's bf16 peak
"$B/mixtral_tiny" --dry-run --device cuda --log-every 1 >"$L/dryrun.log" 2>&1
drc=$?
dry=$(awk '$1 == "total" {print $2, $3; exit}' "$L/dryrun.log")
ran=$(grep '^memory planned: ' "$L/curve_gpu.log" | sed 's/.*: //')
mfu=$(grep -o '"mfu":[0-9.e+-]*' "$L/curve_gpu.jsonl" | tail -1 | cut -d: -f2)
row dryrun_mfu "$([ $drc -eq 0 ] && [ -n "$dry" ] && [ "$dry" = "$ran" ] && [ -n "$mfu" ] && awk -v m="$mfu" 'BEGIN { exit !(m > 0 && m < 1) }' && grep -q '| mfu [0-9.]*%' "$L/curve_gpu.log" && echo ok || echo FAIL)" "dry run total $dry, the run planned $ran; mfu $mfu"

fi
# the rank simulator on one GPU; its collectives on the device (no host round trip, the step one CUDA graph)
# against the host path (MOEC_HOST_COLLECTIVES=1)
"$B/mixtral_tiny" "${common[@]}" --steps 20 --device cuda --log "$L/ep1.jsonl" >"$L/ep1.log" 2>&1
# sync_row NAME LOG RANKS STEPS GRAPH(1/0): every rank's every step says 0 waits and 0 copies, and how it ran
sync_row() {
  local n bad cap rep kbk
  n=$(grep -c '^sync check: ' "$2")
  bad=$(grep '^sync check: ' "$2" | grep -vc ': 0 stream waits, 0 device-to-host copies in the step;')
  cap=$(grep -c '^sync check: .*captured as one CUDA graph' "$2")
  rep=$(grep -c '^sync check: .*one CUDA graph replayed' "$2")
  kbk=$(grep -c '^sync check: .*launched kernel by kernel' "$2")
  local ok=0
  if [ "$5" = 1 ]; then
    [ "$n" -eq $(($3 * $4)) ] && [ "$bad" -eq 0 ] && [ "$cap" -eq $((2 * $3)) ] && [ "$rep" -eq $(($3 * ($4 - 2))) ] && ok=1
  else
    [ "$n" -eq $(($3 * $4)) ] && [ "$bad" -eq 0 ] && [ "$kbk" -eq "$n" ] && ok=1
  fi
  row "$1" "$([ $ok = 1 ] && echo ok || echo FAIL)" "$n step lines ($3 ranks x $4 steps), $bad with a host wait or copy; graphs captured $cap, replayed $rep, kernel by kernel $kbk"
}
for ep in 2 4; do
  MOEC_SYNC_CHECK=1 "$B/mixtral_tiny_ep$ep" "${common[@]}" --steps 20 --device cuda --simulate-ranks "$ep" --log "$L/ep$ep.jsonl" --ckpt-dir "$L/ck_ep$ep" >"$L/ep$ep.log" 2>&1
  rc=$?
  "$B/compare_losses.sh" "$L/ep1.jsonl" "$L/ep$ep.jsonl" 1e-6 >"$L/ep${ep}_cmp.log" 2>&1
  row "ep$ep" "$([ $rc -eq 0 ] && [ $? -eq 0 ] && grep -q 'steps compared' "$L/ep${ep}_cmp.log" && ! grep -q 'relative .*)$' "$L/ep${ep}_cmp.log" && echo ok || echo FAIL)" "$(tail -1 "$L/ep${ep}_cmp.log") (vs ep 1 on the GPU)"
  grep -m1 -o 'the step, collectives included, is replayed as a CUDA graph' "$L/ep$ep.log" >"$L/ep$ep.step"
  MOEC_SYNC_CHECK=1 MOEC_HOST_COLLECTIVES=1 "$B/mixtral_tiny_ep$ep" "${common[@]}" --steps 20 --device cuda --simulate-ranks "$ep" --log "$L/ep${ep}_host.jsonl" --ckpt-dir "$L/ck_ep${ep}_host" >"$L/ep${ep}_host.log" 2>&1
  hrc=$?
  "$B/compare_losses.sh" "$L/ep${ep}_host.jsonl" "$L/ep$ep.jsonl" 0 >"$L/ep${ep}_host_cmp.log" 2>&1
  hc=$?
  cmp "$L/ck_ep${ep}_host/checkpoint.safetensors" "$L/ck_ep$ep/checkpoint.safetensors" >"$L/ep${ep}_host_ckpt.log" 2>&1
  hk=$?
  sync_row "sync_ep$ep" "$L/ep$ep.log" "$ep" 20 1
  # the host path's steps do wait: the counter sees waits where there are some
  hw=$(grep '^sync check: ' "$L/ep${ep}_host.log" | grep -c ': 0 stream waits')
  row "host_ep$ep" "$([ $rc -eq 0 ] && [ $hrc -eq 0 ] && [ $hc -eq 0 ] && [ $hk -eq 0 ] && [ -s "$L/ep$ep.step" ] && [ "$hw" -eq 0 ] && grep -q '^sync check: ' "$L/ep${ep}_host.log" && echo ok || echo FAIL)" "device vs host collectives: $(tail -1 "$L/ep${ep}_host_cmp.log"); checkpoints $([ $hk -eq 0 ] && echo byte-identical || cat "$L/ep${ep}_host_ckpt.log"); host path: $(grep -m1 -o '[0-9]* stream waits, [0-9]* device-to-host copies' "$L/ep${ep}_host.log") a step"
done
MOEC_SYNC_CHECK=1 "$B/mixtral_tiny_ep2" "${common[@]}" --steps 20 --device cuda --simulate-ranks 2 --no-cuda-graph --log "$L/ep2_nograph.jsonl" --ckpt-dir "$L/ck_ep2_nograph" >"$L/ep2_nograph.log" 2>&1
ngrc=$?
sync_row "nograph_ep2" "$L/ep2_nograph.log" 2 20 0
cmp "$L/ck_ep2/checkpoint.safetensors" "$L/ck_ep2_nograph/checkpoint.safetensors" >/dev/null 2>&1
ngk=$?
row "nograph_ck2" "$([ $ngrc -eq 0 ] && [ $ngk -eq 0 ] && echo ok || echo FAIL)" "ep 2 graph vs --no-cuda-graph: checkpoints $([ $ngk -eq 0 ] && echo byte-identical || echo DIFFER)"

if [ "$ONLY" != ep ]; then
# resume on the GPU: bit-identical
"$B/mixtral_tiny" "${common[@]}" --steps 20 --device cuda --ckpt-dir "$L/ck_straight" >"$L/resume_a.log" 2>&1
"$B/mixtral_tiny" "${common[@]}" --steps 10 --device cuda --ckpt-dir "$L/ck_resumed" >"$L/resume_b.log" 2>&1
"$B/mixtral_tiny" "${common[@]}" --steps 20 --device cuda --ckpt-dir "$L/ck_resumed" --resume >"$L/resume_c.log" 2>&1
cmp "$L/ck_straight/checkpoint.safetensors" "$L/ck_resumed/checkpoint.safetensors" >"$L/resume_cmp.log" 2>&1
row resume "$([ $? -eq 0 ] && echo ok || echo FAIL)" "20 steps vs 10 + resume 10: $(test -s "$L/resume_cmp.log" && cat "$L/resume_cmp.log" || echo 'checkpoints byte-identical')"

# kernels compiled at start-up, then cached
"$B/mixtral_tiny_nvrtc" "${common[@]}" --steps 2 --device cuda >"$L/cache1.log" 2>&1
"$B/mixtral_tiny_nvrtc" "${common[@]}" --steps 2 --device cuda >"$L/cache2.log" 2>&1
"$B/mixtral_tiny" "${common[@]}" --steps 2 --device cuda --batch 4 >"$L/cache3.log" 2>&1
c1=$(grep -o 'kernels from [^;]*' "$L/cache1.log"); c2=$(grep -o 'kernels from [^;]*' "$L/cache2.log"); c3=$(grep -o 'kernels from [^;]*' "$L/cache3.log")
row cache "$(grep -q 'NVRTC' <<<"$c1" && grep -q 'cache' <<<"$c2" && grep -q 'other shapes' <<<"$c3" && echo ok || echo FAIL)" "1st: ${c1:0:60}... | 2nd: ${c2:0:40}... | --batch 4: ${c3:0:50}"

# no embedded kernels and no NVRTC: --device auto trains on the CPU and says why; --device cuda is an error
MOEC_NVRTC_LIB=/nonexistent/libnvrtc.so MOEC_CACHE_DIR="$L/empty-cache" "$B/mixtral_tiny_nvrtc" "${common[@]}" --steps 2 >"$L/fallback.log" 2>&1
frc=$?
MOEC_NVRTC_LIB=/nonexistent/libnvrtc.so MOEC_CACHE_DIR="$L/empty-cache" "$B/mixtral_tiny_nvrtc" "${common[@]}" --steps 2 --device cuda >"$L/fallback_cuda.log" 2>&1
crc=$?
row fallback "$([ $frc -eq 0 ] && grep -q '^device: cpu (the GPU backend could not start: no kernels' "$L/fallback.log" && grep -q '^step      2/2' "$L/fallback.log" && [ $crc -eq 1 ] && grep -q 'NVRTC is not available' "$L/fallback_cuda.log" && echo ok || echo FAIL)" "auto rc=$frc: $(grep -o '^device: cpu (the GPU backend could not start: .\{0,60\}' "$L/fallback.log")...; cuda rc=$crc"

# a plan that does not fit
"$B/nofit" --data "$DATA" --steps 1 --device cuda >"$L/nofit.log" 2>&1
rc=$?
"$B/nofit" --data "$DATA" --steps 1 >"$L/nofit_auto.log" 2>&1   # auto: no CPU fallback for this
arc=$?
row nofit "$([ $rc -eq 1 ] && grep -q 'does not fit' "$L/nofit.log" && [ $arc -eq 1 ] && grep -q 'does not fit' "$L/nofit_auto.log" && echo ok || echo FAIL)" "rc=$rc (auto $arc): $(grep -m1 -o 'does not fit.\{0,150\}' "$L/nofit.log")"
# its --dry-run says so too, with the total the backend refused
"$B/nofit" --dry-run >"$L/nofit_dry.log" 2>&1
nrc=$?
ndry=$(awk '$1 == "total" {print $2, $3; exit}' "$L/nofit_dry.log")
nrun=$(grep -o 'it needs [0-9.]* [KMG]iB' "$L/nofit.log" | head -1 | sed 's/it needs //')
row nofit_dry "$([ $nrc -eq 1 ] && [ -n "$ndry" ] && [ "$ndry" = "$nrun" ] && grep -q '^peak: .*does not fit' "$L/nofit_dry.log" && echo ok || echo FAIL)" "rc=$nrc; dry run total $ndry, the backend's $nrun; $(grep -m1 'the batch:' "$L/nofit_dry.log")"

# four Mixtral-8x7B layers at 4 x 4096 on one GPU: planned (the dry run), trained, measured
bash "$HERE/mem_check.sh" --run-only "$OUT" >"$L/mem_check.log" 2>&1
mrc=$?
row mixtral4 "$([ $mrc -eq 0 ] && echo ok || echo FAIL)" "$(grep -h '^mixtral4_' "$L/mem_check.log" | cut -c22- | paste -sd'|' -)"

# protein_moe_mini, 500 steps
timeout 300 "$B/protein_moe_mini" --data "$DATA" --device cuda --eval-every 50 --log-every 10 --log "$L/mini500.jsonl" >"$L/mini500.log" 2>&1
rc=$?
row mini500 "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "rc=$rc, $(grep -c '"val_loss"' "$L/mini500.jsonl" 2>/dev/null) evals, last: $(grep '^step' "$L/mini500.log" | tail -1 | tr -s ' ')"

fi

tar -C "$OUT" -czf "$OUT/logs.tgz" logs
echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
printf '%-14s %-5s %s\n' check ok details
printf '%s\n' "${rows[@]}"
exit $status
