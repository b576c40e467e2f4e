#!/usr/bin/env bash
# tests/gpu/pingpong.sh [--build-only | --run-only] [OUTDIR]
# Decision 49's A/B on one GPU: the bf16 grouped GEMMs' schedules, in one run: "pp", the fast plans' default
# (ping-pong with 128 x 128 tiles per consumer warpgroup for the M-grouped and the K-grouped GEMMs), "pp64"
# (MOEC_MGEMM=pingpong64 MOEC_KGEMM=cooperative: the M-grouped ping-pong with 64 x 256 tiles, cooperative weight
# gradients) and "coop" (MOEC_MGEMM=cooperative MOEC_KGEMM=cooperative, the kernels before decision 49):
#  1. tests/gpu/gemm_sm90.sh: every configuration checked against the CPU (ragged groups, empty experts,
#     1 row, non-multiples of the tile; *_pp and *_pp64 are the ping-pong ones) and the anchors timed beside
#     torch._grouped_mm (its table: "moec" cooperative, "pingpong", "pp64");
#  2. tests/gpu/run_plan.c on tests/gpu/fast_mlp.moe compiled the three ways: every node against the CPU (the
#     fast grouped_mlp / grouped_mlp_bwd within 1e-2 normwise: gate_up's SwiGLU x prob epilogue, down, da, dxs
#     on the routed, ragged groups), then --chain;
#  3. bench/layer.c on the layer models (PINGPONG_LAYERS, default "bio mixtral"), --kernels fast the three ways:
#     ms per forward + backward (one CUDA graph), then each GEMM launch on its own (plain launches);
# the table last: per layer, the three ms and pp / coop, and the GEMM launches side by side.
# Build here (make, flex/bison, cJSON, NVRTC; no GPU): BUILD=build by default; carry OUTDIR (default
# BUILD/gpu-pingpong); run there with --run-only (a Hopper GPU, libcuda, python3 with torch for step 1's
# anchor). PINGPONG_STEPS (default "1 2 3") runs only those steps, to split the run across calls; the tables
# of the steps run are printed. Exit 1 if a check failed or a layer did not run.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/gpu-pingpong}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
LAYERS=${PINGPONG_LAYERS:-bio mixtral}
STEPS=" ${PINGPONG_STEPS:-1 2 3} "
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  mkdir -p "$OUT"
  BUILD="$BUILD" bash tests/gpu/gemm_sm90.sh --build-only "$OUT/gemm" >"$OUT/gemm_build.log" 2>&1 ||
    { tail -20 "$OUT/gemm_build.log"; exit 1; }
  make -j2 BUILD="$BUILD" "$BUILD/moec" "$BUILD/libmoec.a" >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/cuda"
  for t in run_plan:tests/gpu/run_plan.c layer:bench/layer.c; do
    cc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -Wall -Wextra -Werror -I"$BUILD/gen" -Icompiler \
       -c "${t#*:}" -o "$OUT/${t%%:*}.o"
    g++ -o "$OUT/bin/${t%%:*}" "$OUT/${t%%:*}.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
    rm "$OUT/${t%%:*}.o"
  done
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp tests/gpu/fast_mlp.moe "$OUT/fast_mlp.moe"
  for v in pp pp64 coop; do
    sched=pingpong; ksched=pingpong
    [ $v = coop ] && sched=cooperative && ksched=cooperative
    [ $v = pp64 ] && sched=pingpong64 && ksched=cooperative
    rm -rf "$OUT/cuda/fast_mlp_$v"
    MOEC_MGEMM=$sched MOEC_KGEMM=$ksched "$BUILD/moec" compile tests/gpu/fast_mlp.moe --kernels fast --emit-cuda "$OUT/cuda/fast_mlp_$v" \
        --arch "$ARCH" >/dev/null
    for l in $LAYERS; do
      rm -rf "$OUT/cuda/layer_${l}_$v"
      MOEC_MGEMM=$sched MOEC_KGEMM=$ksched "$BUILD/moec" compile "bench/models/layer/layer_$l.moe" --kernels fast \
          --emit-cuda "$OUT/cuda/layer_${l}_$v" --arch "$ARCH" >/dev/null
    done
  done
  set +e
  echo "built $OUT ($(du -sh "$OUT" | cut -f1))"
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
L=$OUT/logs
mkdir -p "$L"
status=0
rows=()
row() { rows+=("$(printf '%-28s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }

# 1. the kernels alone, checked and timed beside torch
[[ $STEPS == *" 1 "* ]] && {
GEMM_SM90_TIMEOUT=${GEMM_SM90_TIMEOUT:-480} bash tests/gpu/gemm_sm90.sh --run-only "$OUT/gemm" >"$L/gemm_sm90.out" 2>&1
rc=$?
grep -E -- '-> FAIL' "$OUT/gemm/gemm.log" | head -20
sed -n '/^anchor /,$p' "$L/gemm_sm90.out"
row gemm_sm90 "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(tail -1 "$L/gemm_sm90.out")"
}

# 2. the fast expert MLP in a plan, the three schedules, against the CPU
[[ $STEPS == *" 2 "* ]] && for v in pp pp64 coop; do
  for c in "" --chain; do
    tag=run_plan_$v${c:+_chain}
    "$B/run_plan" "$OUT/fast_mlp.moe" "$OUT/cuda/fast_mlp_$v" $c >"$L/$tag.log" 2>&1
    rc=$?
    grep -E "grouped_mlp.*FAIL" "$L/$tag.log" | head -5
    row "$tag" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(grep '^SUMMARY' "$L/$tag.log" | tail -1 | cut -c1-120)"
  done
done

# 3. the layer, the three schedules: the graph's ms, then every launch alone
[[ $STEPS == *" 3 "* ]] || LAYERS=
for l in $LAYERS; do
  for v in coop pp pp64; do
    timeout 300 "$B/layer" "$OUT/cuda/layer_${l}_$v" --name "${l}_$v" --warmup 2 --reps 10 --launches \
        >"$L/layer_${l}_$v.log" 2>&1
    rc=$?
    r=$(grep '^RESULT' "$L/layer_${l}_$v.log" | tail -1)
    [ -z "$r" ] && tail -3 "$L/layer_${l}_$v.log"
    row "layer_${l}_$v" "$([ $rc -eq 0 ] && [ -n "$r" ] && echo ok || echo FAIL)" "${r:-rc=$rc}"
  done
done

echo
printf '%-28s %-5s %s\n' check ok detail
printf '%s\n' "${rows[@]}"
echo
printf '%-10s %14s %9s %9s %9s %9s\n' layer "cooperative ms" "pp ms" "pp64 ms" "pp/coop" "pp64/coop"
lms() { grep '^RESULT' "$L/layer_$1.log" 2>/dev/null | tail -1 | grep -o ' ms=[0-9.]*' | cut -d= -f2; }
ratio() { awk -v c="${1:-0}" -v p="${2:-0}" 'BEGIN{if (c>0 && p>0) printf "%.3f", p/c; else print "-"}'; }
for l in $LAYERS; do
  c=$(lms "${l}_coop"); p=$(lms "${l}_pp"); q=$(lms "${l}_pp64")
  printf '%-10s %14s %9s %9s %9s %9s\n' "$l" "${c:--}" "${p:--}" "${q:--}" "$(ratio "$c" "$p")" "$(ratio "$c" "$q")"
done
# the GEMM launches (kernels named _bnN_sS...), the same launch index in both plans
for l in $LAYERS; do
  echo
  printf '%-7s %-4s %-40s %9s %9s %9s %8s %9s\n' "$l" "#" "GEMM launch (cooperative kernel)" "coop ms" "pp ms" \
      "pp64 ms" "pp/coop" "pp64/coop"
  awk '$1=="LAUNCH" && $6 ~ /_bn[0-9]+_s[0-9]+/ {sub(/:$/, "", $6); print $2, $3, $6}' "$L/layer_${l}_coop.log" 2>/dev/null |
    sort -k1,1 >"$L/gemm_${l}_coop.txt"
  for v in pp pp64; do
    awk '$1=="LAUNCH" && $6 ~ /_bn[0-9]+_s[0-9]+/ {print $2, $3}' "$L/layer_${l}_$v.log" 2>/dev/null |
      sort -k1,1 >"$L/gemm_${l}_$v.txt"
  done
  # (the same launch index in the three plans: the schedule changes no launch, only the kernels' tiles)
  join "$L/gemm_${l}_coop.txt" "$L/gemm_${l}_pp.txt" | join - "$L/gemm_${l}_pp64.txt" | sort -n |
    awk -v l="$l" '{k=$3; sub(/^.*_fast_/, "", k); if (length(k) > 40) k = substr(k, length(k) - 39);
                    rp = ($2 > 0) ? $4 / $2 : 0; rq = ($2 > 0) ? $5 / $2 : 0;
                    printf "%-7s %-4s %-40s %9.4f %9.4f %9.4f %8.3f %9.3f\n", l, $1, k, $2, $4, $5, rp, rq}'
done
exit $status
