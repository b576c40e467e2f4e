#!/usr/bin/env bash
# bench/membound.sh [--build-only | --run-only] [OUTDIR]
# The memory-bound nodes' achieved bandwidth on large tensors: bench/models/membound/*.moe (one decoder layer
# at Mixtral shapes, 16,384 tokens of hidden 4096, and at bench_bio's shapes, 16,384 tokens of hidden 1024,
# each with the final norm, lm_head and cross entropy) compiled with --kernels fast, run forward + backward by
# bench/layer.c --membound: every launch between its own CUDA events (median of the reps), summed per IR node,
# beside the bytes plan/cost.c counts for the node (its sources read and its result written once, at their
# storage sizes: the compulsory traffic, so GB/s is a lower bound of what the memory served). Prints one table
# per shape, slowest first: node, op, kernel, bytes, ms, GB/s, % of the H200's measured 4.24 TB/s
# (train/metrics.c's known_peaks), share of the summed launches, and whether it reaches the 75% target.
# Rows: every node without a GEMM, the router's skinny linear (under 32 FLOP per byte), and the memory-bound
# launches inside the expert MLP's GEMM nodes (the permute into the pad-to-tile layout, dSwiGLU, the scatter;
# "part" rows, their bytes from bench/layer.c's part_bytes). The optimizer (AdamW, the gradient norm) is not
# run by layer.c: the training binary's --profile row "(optimizer: ...)" measures it.
# Before the timings, tests/gpu/run_plan.c checks every fast kernel of tests/codegen/membound_fast.moe against
# the CPU reference (each node on the CPU's inputs, exact nodes bit for bit; then chained), and on
# tests/gpu/fast_attn.moe, whose RoPE and RMSNorm write bf16 (decision 58's fp32 paths): rows
# run_plan_membound (isolated, chain, bf16), ok or FAIL, repeated in the summary printed last with the rows
# decisions 52 and 58 rewrote. Build here (no GPU), carry OUTDIR (default $BUILD/bench-membound, ~7 MB), run there with --run-only.
# --table LOG prints the table of one log of bench/layer.c --membound (tests/bench/membound.test).
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; --table) MODE=table; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/bench-membound}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
# name | warm-up | reps
RUNS=(${MOEC_MEMBOUND_RUNS:-"bio|3|10" "mixtral|2|5"})
cd "$ROOT"
if [ "$MODE" != run ] && [ "$MODE" != table ]; then
  set -e
  make -j2 BUILD="$BUILD" "$BUILD/moec" "$BUILD/libmoec.a" >/dev/null
  mkdir -p "$OUT/lib" "$OUT/cuda"
  cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
     -c bench/layer.c -o "$OUT/layer.o"
  g++ -o "$OUT/layer" "$OUT/layer.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
  rm "$OUT/layer.o"
  # the correctness half (decision 52): tests/gpu/run_plan.c on tests/codegen/membound_fast.moe, every fast
  # memory-bound kernel against the CPU reference at ragged sizes (exact nodes bit for bit), then chained
  cc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
     -c tests/gpu/run_plan.c -o "$OUT/run_plan.o"
  g++ -o "$OUT/run_plan" "$OUT/run_plan.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
  rm "$OUT/run_plan.o"
  rm -rf "$OUT/cuda/membound_fast"
  "$BUILD/moec" compile tests/codegen/membound_fast.moe --kernels fast --emit-cuda "$OUT/cuda/membound_fast" \
      --arch "$ARCH" >/dev/null
  cp tests/codegen/membound_fast.moe "$OUT/membound_fast.moe"
  # decision 58: RoPE's and RMSNorm's bf16-output paths, which only a plan with tensor-core neighbours has
  # (bf16 storage, decision 40): tests/gpu/fast_attn.moe (RoPE and rope_dx bit for bit, RMSNorm into bf16)
  rm -rf "$OUT/cuda/fast_attn"
  "$BUILD/moec" compile tests/gpu/fast_attn.moe --kernels fast --emit-cuda "$OUT/cuda/fast_attn" --arch "$ARCH" >/dev/null
  cp tests/gpu/fast_attn.moe "$OUT/fast_attn.moe"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  for r in "${RUNS[@]}"; do
    IFS='|' read -r name _ _ <<<"$r"
    rm -rf "${OUT:?}/cuda/$name"
    "$BUILD/moec" compile "bench/models/membound/membound_$name.moe" --kernels fast --emit-cuda "$OUT/cuda/$name" \
        --arch "$ARCH" >/dev/null
  done
  set +e
fi
[ "$MODE" = build ] && exit 0

# the table of one log (NODE and PART lines of bench/layer.c --membound)
table() {
  awk '
    /^# per launch: .* ms in all/ { total = $4 }
    /^(NODE|PART)/ && $7 != "gemm" {
      n++; ms[n] = $2; by[n] = $3; gb[n] = $4; pc[n] = $5; op[n] = $8; node[n] = $9; kern[n] = $10
      if ($1 == "PART") op[n] = op[n] " (part)"
      memms += $2
    }
    /^NODE/ && $7 == "gemm" { gemmms += $2 }
    END {
      printf "%-34s %-22s %-44s %12s %9s %8s %6s %6s %s\n", "node", "op", "kernel", "MB moved", "ms", "GB/s",
             "%4.24", "share", "75%?"
      # slowest first
      for (i = 1; i <= n; i++) idx[i] = i
      for (i = 2; i <= n; i++) { j = i; while (j > 1 && ms[idx[j-1]] + 0 < ms[idx[j]] + 0) { t = idx[j]; idx[j] = idx[j-1]; idx[j-1] = t; j-- } }
      for (k = 1; k <= n; k++) {
        i = idx[k]
        printf "%-34s %-22s %-44s %12.1f %9.4f %8.1f %5.1f%% %5.1f%% %s\n", substr(node[i], 1, 34), op[i],
               substr(kern[i], 1, 44), by[i] / 1e6, ms[i], gb[i], pc[i], (total > 0 ? 100 * ms[i] / total : 0),
               (pc[i] + 0 >= 75 ? "yes" : "NO")
      }
      printf "memory-bound rows %.3f ms (%.1f%% of the %.3f ms of launches; GEMM nodes %.3f ms, their parts included)\n",
             memms, (total > 0 ? 100 * memms / total : 0), total, gemmms
    }' "$1"
}

if [ "$MODE" = table ]; then
  [ -r "${1:-}" ] || { echo "usage: bench/membound.sh --table LOG" >&2; exit 2; }
  table "$1"
  exit 0
fi

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
checks=()
if [ -x "$OUT/run_plan" ]; then
  for c in "isolated|membound_fast|" "chain|membound_fast|--chain" "bf16|fast_attn|"; do
    IFS='|' read -r what model opt <<<"$c"
    [ -d "$OUT/cuda/$model" ] || continue
    clog=$OUT/run_plan_membound_$what.log
    timeout 300 "$OUT/run_plan" "$OUT/$model.moe" "$OUT/cuda/$model" $opt >"$clog" 2>&1
    rc=$?
    grep -E "rmsnorm|rope|cross_entropy|masked|linear|SUMMARY|FAIL" "$clog" | head -24
    v=$([ $rc -eq 0 ] && echo ok || echo FAIL)
    [ "$v" = ok ] || status=1
    checks+=("run_plan_membound ($what) $v: $(grep '^SUMMARY' "$clog" | tail -1 | cut -c1-140)")
  done
fi
for r in "${RUNS[@]}"; do
  IFS='|' read -r name warm reps <<<"$r"
  log=$OUT/$name.log
  timeout 240 "$OUT/layer" "$OUT/cuda/$name" --name "membound_$name" --warmup "$warm" --reps "$reps" --membound \
      >"$log" 2>&1 || { echo "moec membound_$name failed:"; tail -5 "$log"; status=1; continue; }
  echo
  grep -E '^# membound|^RESULT' "$log"
  table "$log" | tee "$log.table"
done
# last, the short table: the correctness rows, then the rows decision 52 rewrote, per shape
echo
echo "== summary"
for c in "${checks[@]}"; do echo "$c"; done
for r in "${RUNS[@]}"; do
  IFS='|' read -r name _ _ <<<"$r"
  [ -r "$OUT/$name.log.table" ] || continue
  grep -E '^(node|memory-bound rows)|cross_entropy|rmsnorm|rope|linear' "$OUT/$name.log.table" | sed "s/^/$name: /"
done
exit $status
