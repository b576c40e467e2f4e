#!/usr/bin/env bash
# tests/gpu/run_plan.sh [--build-only | --run-only] [OUTDIR]
# The GPU twin of tests/codegen/emu/run.sh: runs the generated kernels on a
# real GPU node by node (tests/gpu/run_plan.c) against the CPU reference
# backend, for ops.moe (bf16, mxfp8, unfused), mixtral_tiny (bf16, chained,
# ep 2 with made-up collectives, mxfp8 + ep 2). Not part of `make test`.
#
# Build (needs make, flex/bison, cJSON, libnvrtc; no GPU): `make -j2`, links
# OUTDIR/run_plan against build/libmoec.a, copies libcjson.so.1 to OUTDIR/lib
# and compiles each configuration's kernels to OUTDIR/<config>/kernels.cubin
# (moec compile --emit-cuda --arch sm_90a). Run (needs a GPU and libcuda.so.1,
# nothing else): runs each configuration, logs in OUTDIR/<config>.log, a table last.
# A machine with both does both; on a GPU machine without the toolchain, build
# elsewhere, carry OUTDIR and pass --run-only. OUTDIR defaults to build/gpu-run-plan.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-run-plan}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
# name | model | compile options (repeated for run_plan) | run_plan-only options
CONFIGS=(
  "ops_bf16|tests/codegen/ops.moe||"
  "ops_mxfp8|tests/codegen/ops.moe|--precision mxfp8|"
  "ops_unfused|tests/codegen/ops.moe|--disable-pass fuse-grouped-mlp|"
  "mixtral_bf16|models/mixtral_tiny.moe||"
  "mixtral_bf16_chain|models/mixtral_tiny.moe||--chain"
  "mixtral_mxfp8|models/mixtral_tiny.moe|--precision mxfp8|"
  "mixtral_ep2|models/mixtral_tiny.moe|--ep 2|"
  "mixtral_mxfp8_ep2|models/mixtral_tiny.moe|--precision mxfp8 --ep 2|"
)
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make -j2 >/dev/null
  mkdir -p "$OUT/lib"
  cc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -Wall -Wextra -Ibuild/gen -Icompiler \
     -c tests/gpu/run_plan.c -o "$OUT/run_plan.o"
  g++ -o "$OUT/run_plan" "$OUT/run_plan.o" build/libmoec.a -lcjson -lz -lm -lpthread -ldl
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  for c in "${CONFIGS[@]}"; do
    IFS='|' read -r name model copts ropts <<<"$c"
    rm -rf "${OUT:?}/$name"
    # shellcheck disable=SC2086
    build/moec compile "$model" --kernels reference $copts --emit-cuda "$OUT/$name" --arch "$ARCH"
  done
  set +e
fi
[ "$MODE" = build ] && exit 0
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
rows=()
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r name model copts ropts <<<"$c"
  # shellcheck disable=SC2086
  "$OUT/run_plan" "$model" "$OUT/$name" $copts $ropts >"$OUT/$name.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  s=$(grep '^SUMMARY' "$OUT/$name.log" | tail -1)
  if [ -z "$s" ]; then
    rows+=("$(printf '%-20s %-6s %s' "$name" "rc=$rc" "$(tail -1 "$OUT/$name.log")")")
    continue
  fi
  nodes=$(sed -n 's/.*nodes=\([0-9]*\).*/\1/p' <<<"$s")
  fails=$(grep -o '^  [0-9]* [^ ]* .* FAIL' "$OUT/$name.log" | awk '{print $2}' | head -8 | paste -sd, -)
  worst=$(sed -n 's/.*worst_fp32_normwise=\([^ ]*\) (\([^)]*\)).*/\1 \2/p' <<<"$s")
  adam=$(sed -n 's/.*adamw_diff=\([0-9]*\).*/\1/p' <<<"$s")
  rows+=("$(printf '%-20s %5s %-48s %5s %s' "$name" "$nodes" "$worst" "$adam" "${fails:--}")")
done
echo
printf '%-20s %5s %-48s %5s %s\n' config nodes "worst fp32 normwise (node)" adamw failed
printf '%s\n' "${rows[@]}"
exit $status
