#!/usr/bin/env bash
# bench/attn.sh [--build-only | --run-only] [OUTDIR]
# The attention benchmark: y = sdpa(q, k, v), forward + backward of loss = mean(y^2), at bio and Mixtral
# shapes (bench/models/attn/*.moe), moec's fast kernels (--kernels fast: codegen/attn_fast.cuh) and, at bio
# shapes, the reference kernels, beside PyTorch's scaled_dot_product_attention (bench/attn_anchor.py, bf16,
# the fastest of its backends) in the same run. moec's time is the sum of its attention launches (the bf16
# conversion of q/k/v, the forward, the backward's preparation, dq and dk/dv) from bench/layer.c
# --launches (each launch between CUDA events, median of the reps); the slices into the three gradients and
# the loss are left out, as PyTorch's q.grad/k.grad/v.grad come out separate. TFLOP/s: 3.5 x 4 B S^2 heads hd
# (half when causal) over that time, for both. The *_proj rows (bench/models/attn/attn_*_proj.moe) run the
# same attention between its projections, as in a model: there the plan stores q, k, v, o and dO in bf16
# (docs/decisions.md 40), so the conversion passes (to_bf16, and prep's dO copy) are gone from the sum;
# they are compared with the same PyTorch anchor as the row without _proj.
# First the correctness checks (tests/gpu/run_plan.c, each sdpa / sdpa_bwd node against the CPU reference within
# the fast tolerance, then --chain) on tests/gpu/fast_attn.moe (head dims 64 and 128, GQA, causal and not,
# segment ids, a ragged tile) and tests/gpu/fast_attn128.moe (the warp-specialised dk/dv: causal, head dim 128,
# three key blocks a row, the last ragged), each also compiled with MOEC_ATTN_GRID (a few blocks, each looping over
# several items: the barrier phases carried from item to item) and fast_attn128 under each forward / dq schedule
# (MOEC_ATTN, decision 59); their rows ("check") print before the timing table, and a failure makes the exit
# status 1. The Mixtral rows time the default schedule and, as rows marked (MOEC_ATTN=SCHED), MOEC_ATTN's other two.
# Build here (no GPU), carry OUTDIR (default $BUILD/bench-attn), run there with --run-only.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/bench-attn}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
PY=${PYTHON:-python3}
# name | kernels | warm-up | reps | MOEC_ATTN (empty: the default)
RUNS=("bio|fast|3|20|" "bio_proj|fast|3|20|" "bio_bidir|fast|3|20|" "mixtral|fast|2|10|" "mixtral_proj|fast|2|10|"
      "mixtral|fast|2|10|ws" "mixtral_proj|fast|2|10|ws" "mixtral_proj|fast|2|10|overlap" "bio|reference|1|3|")
# check name | model | MOEC_ATTN | MOEC_ATTN_GRID
CHECKS=("fast_attn|fast_attn||" "fast_attn128|fast_attn128||" "fast_attn-grid7|fast_attn||7"
        "fast_attn128-grid5|fast_attn128||5" "fast_attn128-overlap|fast_attn128|overlap|5"
        "fast_attn128-ws|fast_attn128|ws|5")
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make -j2 BUILD="$BUILD" "$BUILD/moec" "$BUILD/libmoec.a" >/dev/null
  mkdir -p "$OUT/lib" "$OUT/cuda"
  cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
     -c bench/layer.c -o "$OUT/layer.o"
  g++ -o "$OUT/layer" "$OUT/layer.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
  rm "$OUT/layer.o"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp bench/attn_anchor.py "$OUT/"
  cc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
     -c tests/gpu/run_plan.c -o "$OUT/run_plan.o"
  g++ -o "$OUT/run_plan" "$OUT/run_plan.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
  rm "$OUT/run_plan.o"
  for c in "${CHECKS[@]}"; do
    IFS='|' read -r cname model sched grid <<<"$c"
    rm -rf "${OUT:?}/cuda/check_$cname"
    MOEC_ATTN=$sched MOEC_ATTN_GRID=$grid "$BUILD/moec" compile "tests/gpu/$model.moe" --kernels fast \
        --emit-cuda "$OUT/cuda/check_$cname" --arch "$ARCH" >/dev/null
    cp "tests/gpu/$model.moe" "$OUT/$model.moe"
  done
  for r in "${RUNS[@]}"; do
    IFS='|' read -r name kern _ _ sched <<<"$r"
    dir=${name}_$kern${sched:+-$sched}
    rm -rf "${OUT:?}/cuda/$dir"
    MOEC_ATTN=$sched "$BUILD/moec" compile "bench/models/attn/attn_$name.moe" --kernels "$kern" --emit-cuda "$OUT/cuda/$dir" \
        --arch "$ARCH" >/dev/null
  done
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
checks=()
for c in "${CHECKS[@]}"; do
  IFS='|' read -r cname model _ _ <<<"$c"
  for mode in "" --chain; do
    log=$OUT/check_$cname${mode:+_chain}.log
    timeout 300 "$OUT/run_plan" "$OUT/$model.moe" "$OUT/cuda/check_$cname" $mode >"$log" 2>&1
    rc=$?
    grep -E "sdpa|FAIL" "$log" | head -12
    [ $rc -eq 0 ] || status=1
    checks+=("$(printf '%-26s %-5s %s' "$cname${mode:+ chain}" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
      "$(grep '^SUMMARY' "$log" | tail -1 | cut -c1-120)")")
  done
done
declare -A MS
for r in "${RUNS[@]}"; do
  IFS='|' read -r name kern warm reps sched <<<"$r"
  dir=${name}_$kern${sched:+-$sched}
  log=$OUT/$dir.log
  timeout 120 "$OUT/layer" "$OUT/cuda/$dir" --name "$dir" --warmup "$warm" --reps "$reps" --launches \
      >"$log" 2>&1 || { echo "moec $dir failed:"; tail -5 "$log"; status=1; continue; }
  MS[$dir]=$(awk '/^LAUNCH/ && $6 ~ /sdpa/ && $6 !~ /slice/ {s += $3} END {printf "%.4f", s}' "$log")
  grep '^LAUNCH' "$log" | grep sdpa
done
"$PY" "$OUT/attn_anchor.py" >"$OUT/anchor.log" 2>&1 || { echo "attn_anchor.py failed:"; tail -5 "$OUT/anchor.log"; status=1; }
grep -E '^(TORCH|#)' "$OUT/anchor.log"
printf '\n%-26s %-5s %s\n' check result summary
printf '%s\n' "${checks[@]}"
printf '\n%-12s %-25s %10s %8s %12s %8s %8s %s\n' shape kernels "moec ms" TFLOP/s "torch ms" TFLOP/s moec/torch "torch backend"
for r in "${RUNS[@]}"; do
  IFS='|' read -r name kern _ _ sched <<<"$r"
  read -r tname tms ttf < <(grep "^TORCH_BEST ${name%_proj} " "$OUT/anchor.log" | awk '{print $3, $4, $5}')
  m=${MS[${name}_$kern${sched:+-$sched}]:-}
  printf '%-12s %-25s %10s %8s %12s %8s %8s %s\n' "$name" "$kern${sched:+ (MOEC_ATTN=$sched)}" "${m:--}" \
    "$( [ -n "$m" ] && [ -n "${ttf:-}" ] && awk -v t="$ttf" -v a="$tms" -v m="$m" 'BEGIN {printf "%.1f", t*a/m}' || echo -)" \
    "${tms:--}" "${ttf:--}" "$( [ -n "$m" ] && [ -n "${tms:-}" ] && awk -v a="$tms" -v m="$m" 'BEGIN {printf "%.2fx", m/a}' || echo -)" "${tname:--}"
done
exit $status
