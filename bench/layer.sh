#!/usr/bin/env bash
# bench/layer.sh [--build-only | --run-only] [OUTDIR]
# The MoE layer benchmark: ONE MoE block (router, dispatch, expert MLP, combine), forward + backward of
# loss = mean(y^2), timed for moec (bench/layer.c on the layer models bench/models/layer/*.moe) and for
# the PyTorch anchors at the same shapes (bench/anchors.py --layer-models: HF MixtralSparseMoeBlock eager
# and grouped_mm, a plain torch._grouped_mm block; bf16), then one table: shape | moec ms | HF eager ms |
# HF grouped_mm ms | torch._grouped_mm block ms | moec / best. bench/README.md says what is measured.
#
# Build (needs make, flex/bison, cJSON, libnvrtc; no GPU): builds $BUILD/moec and $BUILD/libmoec.a
# (BUILD defaults to build), links OUTDIR/layer, copies libcjson.so.1 to OUTDIR/lib and compiles every
# layer model to OUTDIR/cuda/NAME (moec compile --emit-cuda --arch sm_90a: plan.json, kernels.cubin).
# Run (needs a GPU, libcuda.so.1, python3 with torch and transformers for the anchors; no toolchain):
# moec's side shape by shape (a timeout each, a time budget for all, shapes whose plan does not fit
# skipped), then the anchors, logs in OUTDIR/*.log, the table last. The whole run stays near 6 minutes:
# MOEC_LAYER_BUDGET (default 200 s) for moec's side, MOEC_ANCHORS_TIMEOUT (default 150 s) for the anchors.
# OUTDIR defaults to $BUILD/bench-layer. Exit 1 if a moec shape failed (not finite, CPU check, crash).
# MOEC_MGEMM / MOEC_KGEMM in the build's environment pick the fast plans' grouped-GEMM schedules (decision 49:
# ping-pong by default, "cooperative" for the kernels before it); tests/gpu/pingpong.sh times them side by side.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
# --kernels fast: also compile each layer model with moec compile --kernels fast (DIR/cuda/NAME_fast) and time
# both (the fast rows are named NAME_fast)
KERNELS_FAST=
if [ "${1:-}" = --kernels ]; then [ "${2:-}" = fast ] && KERNELS_FAST=1; shift 2; fi
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/bench-layer}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
BUDGET=${MOEC_LAYER_BUDGET:-200}
ANCHORS_TIMEOUT=${MOEC_ANCHORS_TIMEOUT:-150}
MAX_GIB=${MOEC_LAYER_MAX_GIB:-120}
# name | warm-up | timed reps | timeout (s) | extra options. The anchors' three first (small with the CPU
# check), then the sweep at bio shapes, Mixtral last: fp32 SIMT kernels take seconds per step there.
SHAPES=(
  "small|3|20|120|--cpu-check"
  "bio|2|10|60|"
  "bio_e4|2|10|60|"
  "bio_e8|2|10|60|"
  "bio_e32|2|10|60|"
  "bio_e64|2|10|60|"
  "bio_k1|2|10|60|"
  "bio_k4|2|10|60|"
  "mixtral|1|3|150|"
)
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make -j2 BUILD="$BUILD" "$BUILD/moec" "$BUILD/libmoec.a" >/dev/null
  mkdir -p "$OUT/lib" "$OUT/cuda"
  cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
     -c bench/layer.c -o "$OUT/layer.o"
  g++ -o "$OUT/layer" "$OUT/layer.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  for s in "${SHAPES[@]}"; do
    name=${s%%|*}
    rm -rf "${OUT:?}/cuda/$name"
    "$BUILD/moec" compile "bench/models/layer/layer_$name.moe" --kernels reference --emit-cuda "$OUT/cuda/$name" --arch "$ARCH" >/dev/null
    if [ -n "$KERNELS_FAST" ]; then
      rm -rf "${OUT:?}/cuda/${name}_fast"
      "$BUILD/moec" compile "bench/models/layer/layer_$name.moe" --kernels fast --emit-cuda "$OUT/cuda/${name}_fast" \
          --arch "$ARCH" >/dev/null
    fi
  done
  echo "bench/layer.sh: built $OUT (layer, lib/, cuda/: ${#SHAPES[@]} layer models for $ARCH)"
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
declare -A MOEC
start=$SECONDS
RUN_SHAPES=("${SHAPES[@]}")
if [ -n "$KERNELS_FAST" ]; then for s in "${SHAPES[@]}"; do RUN_SHAPES+=("${s%%|*}_fast|${s#*|}"); done; fi
for s in "${RUN_SHAPES[@]}"; do
  IFS='|' read -r name warm reps tmo extra <<<"$s"
  left=$((BUDGET - (SECONDS - start)))
  if [ "$left" -le 5 ]; then
    echo "layer $name: skipped, moec's time budget of ${BUDGET} s is spent (MOEC_LAYER_BUDGET)"
    MOEC[$name]="budget"
    continue
  fi
  [ "$tmo" -gt "$left" ] && tmo=$left
  # shellcheck disable=SC2086
  timeout "$tmo" "$OUT/layer" "$OUT/cuda/$name" --name "$name" --warmup "$warm" --reps "$reps" \
      --max-gib "$MAX_GIB" $extra >"$OUT/moec_$name.log" 2>&1
  rc=$?
  grep -v '^RESULT' "$OUT/moec_$name.log" | sed 's/^/  /'
  r=$(grep '^RESULT' "$OUT/moec_$name.log" | tail -1)
  if [ -n "$r" ]; then
    echo "  $r"
    MOEC[$name]=$(sed -n 's/.* ms=\([^ ]*\) .*/\1/p' <<<"$r")
    [ $rc -ne 0 ] && { status=1; MOEC[$name]="${MOEC[$name]}!"; }
  elif grep -q '^SKIP' "$OUT/moec_$name.log"; then
    MOEC[$name]="skip"
  elif [ $rc -eq 124 ]; then
    echo "layer $name: timed out after ${tmo} s"
    MOEC[$name]="timeout"
    status=1
  else
    echo "layer $name: failed (exit $rc)"
    MOEC[$name]="failed"
    status=1
  fi
done

models=()
for s in "${SHAPES[@]}"; do models+=("bench/models/layer/layer_${s%%|*}.moe"); done
echo
echo "anchors: python3 bench/anchors.py --layer-models ... (timeout ${ANCHORS_TIMEOUT} s)"
timeout "$ANCHORS_TIMEOUT" python3 bench/anchors.py --out "$OUT/anchors_layer.json" --warmup 3 --layer-reps 10 \
    --layer-models "${models[@]}" 2>&1 | tee "$OUT/anchors.log"
arc=${PIPESTATUS[0]}
[ "$arc" -eq 124 ] && echo "anchors: timed out after ${ANCHORS_TIMEOUT} s; the shapes above are those measured"

# one line per anchor run in anchors.log: "  layer SHAPE IMPL MS ms ..."
anchor_ms() { awk -v s="$1" -v i="$2" '$1 == "layer" && $2 == s && $3 == i && $5 == "ms" {print $4}' "$OUT/anchors.log" | tail -1; }
echo
printf '%-9s | %10s | %12s | %11s | %16s | %26s | %11s | %s\n' shape "moec ms" "moec fast ms" "HF eager ms" \
    "HF grouped_mm ms" "torch._grouped_mm block ms" "moec / best" "fast / best"
for s in "${SHAPES[@]}"; do
  name=${s%%|*}
  m=${MOEC[$name]:-"-"}; mf=${MOEC[${name}_fast]:-"-"}
  e=$(anchor_ms "$name" eager); g=$(anchor_ms "$name" grouped_mm); t=$(anchor_ms "$name" torch_grouped_mm)
  over_best() { awk -v m="$1" -v a="${e:-}" -v b="${g:-}" -v c="${t:-}" 'BEGIN {
      best = 0; n = split(a " " b " " c, v, " ");
      for (j = 1; j <= n; j++) if (v[j] + 0 > 0 && (best == 0 || v[j] + 0 < best)) best = v[j] + 0;
      if (m ~ /^[0-9.]+$/ && best > 0) printf "%.2f", m / best; else print "-" }'; }
  printf '%-9s | %10s | %12s | %11s | %16s | %26s | %11s | %s\n' "$name" "$m" "$mf" "${e:--}" "${g:--}" "${t:--}" \
      "$(over_best "$m")" "$(over_best "$mf")"
done
echo "(ms per forward + backward, median; moec: the fp32 SIMT reference kernels, moec fast: --kernels fast (the"
echo " expert MLP on the sm_90a bf16 GEMMs), the anchors bf16; X / best = X's time over the fastest anchor's."
echo " skip: the plan does not fit; budget/timeout: not measured in time.)"
exit $status
