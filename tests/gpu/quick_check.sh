#!/usr/bin/env bash
# tests/gpu/quick_check.sh OUTDIR - the shortest GPU check of a tests/gpu/fast_mlp.sh bundle (built with
# `DSW_LAYERS= DSW_GEMMS= bash tests/gpu/fast_mlp.sh --build-only`), for a session with little device time: the
# node-by-node checks that exercise the planned layouts (run_plan, isolated and --chain) at bf16, fp8-block and
# mxfp8, 30 training steps of the fast kernels against the reference kernels through the training binary's own
# loader (the embedded image of NVRTC units, decision 67), 30 fp8-block training steps on the GPU against the CPU
# backend's fp8-block reference (the same binary), then the Mixtral and bio layers timed at the three precisions
# with their planned and measured memory (the MEMORY lines), and fp8-block's with its tile passes merged (the
# default, decision 69) and separate (_fp8_sep and _mx_sep, when the bundle has them), per launch too (the passes'
# LAUNCH lines printed), most important first, a table last. Everything it runs, fast_mlp.sh runs too. About 3
# minutes on an H100.
set -u
OUT=${1:?usage: quick_check.sh OUTDIR}
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
L=${LOGS:-$OUT/logs}
mkdir -p "$L"
rows=()
row() { rows+=("$(printf '%-22s %-5s %s' "$1" "$2" "$3")"); }
rp() { # name model cudadir [--chain] [extra grep for ok]
  local name=$1 model=$2 dir=$3 chain=${4:-} want=${5:-}
  timeout 120 "$B/run_plan" "$OUT/$model" "$OUT/cuda/$dir" $chain >"$L/$name.log" 2>&1
  local rc=$? ok=FAIL
  [ $rc -eq 0 ] && { [ -z "$want" ] || grep -q -- "$want" "$L/$name.log"; } && ok=ok
  row "$name" "$ok" "$(grep '^SUMMARY' "$L/$name.log" | tail -1 | cut -c1-200)"
}
rp run_plan_fp8 fast_mlp_fp8.moe fast_mlp_fp8 "" "fp8b_hcopy_diff=0"
rp run_plan_fp8_chain fast_mlp_fp8.moe fast_mlp_fp8 --chain
rp run_plan_mx fast_mlp_fp8.moe fast_mlp_mx "" "mx_quant_diff=0"
rp run_plan_mx_chain fast_mlp_fp8.moe fast_mlp_mx --chain
rp run_plan_fast fast_mlp.moe fast_mlp
rp run_plan_fast_chain fast_mlp.moe fast_mlp --chain
# the training binaries' own loader (runtime/gpu/gpu.c: the embedded image, one module per NVRTC unit, decision 67):
# 30 steps of the fast kernels against the reference kernels, every step's loss within 1%
losses() { grep -o '"loss":[-0-9.e+]*' "$1" | cut -d: -f2; }
common=(--data "$OUT/data/proteins.fasta.gz" --eval-every 0 --log-every 1 --steps 30 --device cuda)
timeout 180 "$B/train_ref" "${common[@]}" --log "$L/q.ref.jsonl" >"$L/q.ref.log" 2>&1; r1=$?
timeout 180 "$B/train_fast" "${common[@]}" --log "$L/q.fast.jsonl" >"$L/q.fast.log" 2>&1; r2=$?
read -r nsteps wrel <<<"$(paste <(losses "$L/q.ref.jsonl") <(losses "$L/q.fast.jsonl") | awk '
  {n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > w) w = d} END {printf "%d %.3e", n, w}')"
ok=$([ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ "${nsteps:-0}" -ge 30 ] && awk -v w="$wrel" 'BEGIN {exit !(w < 0.01)}' &&
     grep -q "embedded in the binary" "$L/q.fast.log" && echo ok || echo FAIL)
row train_30_steps "$ok" "steps $nsteps, worst loss rel diff $wrel; $(grep -o 'kernels from [^;]*' "$L/q.fast.log" | head -1 | cut -c1-90)"
# fp8-block: 30 steps on the GPU against the CPU backend (its fp8-block reference), the same binary, every step's
# loss within 2% (fast_mlp.sh's train_fp8_gpu_vs_cpu)
if [ -x "$B/train_fp8" ]; then
  timeout 300 "$B/train_fp8" --data "$OUT/data/proteins.fasta.gz" --eval-every 0 --log-every 1 --steps 30 --device cpu \
      --log "$L/q.fp8.cpu.jsonl" >"$L/q.fp8.cpu.log" 2>&1; r1=$?
  timeout 180 "$B/train_fp8" "${common[@]}" --log "$L/q.fp8.gpu.jsonl" >"$L/q.fp8.gpu.log" 2>&1; r2=$?
  read -r nsteps wrel <<<"$(paste <(losses "$L/q.fp8.cpu.jsonl") <(losses "$L/q.fp8.gpu.jsonl") | awk '
    {n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > w) w = d} END {printf "%d %.3e", n, w}')"
  ok=$([ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ "${nsteps:-0}" -ge 30 ] && awk -v w="$wrel" 'BEGIN {exit !(w < 0.02)}' &&
       echo ok || echo FAIL)
  row train_fp8_gpu_vs_cpu "$ok" "steps $nsteps, worst loss rel diff $wrel; last cpu $(losses "$L/q.fp8.cpu.jsonl" | tail -1) gpu $(losses "$L/q.fp8.gpu.jsonl" | tail -1)"
fi
for l in mixtral bio; do
  for v in _fast _fp8 _fp8_sep _mx _mx_sep; do
    [ -d "$OUT/cuda/layer_$l$v" ] || continue
    per=()
    case $v in _fp8*|_mx*) per=(--launches);; esac
    timeout 120 "$B/layer" "$OUT/cuda/layer_$l$v" --name "$l$v" --warmup 2 --reps 10 "${per[@]}" >"$L/layer_$l$v.log" 2>&1
    rc=$?
    [ ${#per[@]} -gt 0 ] && grep -E "^LAUNCH .*(swiglu|h_copy|dprobs|a_colwise|fast_da_|scatter)" "$L/layer_$l$v.log" | cut -c1-150
    r=$(grep '^RESULT' "$L/layer_$l$v.log" | tail -1)
    m=$(grep '^MEMORY' "$L/layer_$l$v.log" | tail -1 | cut -c1-150)
    row "layer_$l$v" "$([ $rc -eq 0 ] && [ -n "$r" ] && echo ok || echo FAIL)" "${r:-rc=$rc} | $m"
  done
done
printf '%s\n' "${rows[@]}"
