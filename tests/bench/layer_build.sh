#!/usr/bin/env bash
# tests/bench/layer_build.sh BUILD SCRATCH - the CPU-side half of bench/layer.sh for tests/bench/layer.test:
# layer_small's CUDA and plan (moec compile --emit-cuda), its cubin for sm_90a through NVRTC (SKIPPED
# without libnvrtc, except in CI or with MOEC_REQUIRE_NVRTC, as tests/codegen/nvrtc_all.sh), and
# bench/layer.c compiled and linked with bench/layer.sh's flags against BUILD's libmoec.a (with the
# sanitizers of an *asan* build). Prints one line per step.
set -euo pipefail
BUILD=$1 SCRATCH=$2
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
moec compile bench/models/layer/layer_small.moe --emit-cuda "$SCRATCH/cuda" >/dev/null
[ -s "$SCRATCH/cuda/kernels.cu" ] && [ -s "$SCRATCH/cuda/plan.json" ]
echo "emit-cuda: kernels.cu and plan.json"
if out=$(moec compile bench/models/layer/layer_small.moe --emit-cuda "$SCRATCH/cubin" --arch sm_90a 2>&1); then
    grep -q ", 0 warnings" <<<"$out" || { echo "$out"; exit 1; }
    [ -s "$SCRATCH/cubin/kernels.cubin" ]
    echo "nvrtc: kernels.cubin for sm_90a, 0 warnings"
elif grep -q "cannot load NVRTC" <<<"$out" && [ "${CI:-}" != true ] && [ -z "${MOEC_REQUIRE_NVRTC:-}" ]; then
    echo "nvrtc: SKIPPED (no libnvrtc)"
else
    echo "$out"
    exit 1
fi
SAN=()
case "$(basename "$BUILD")" in *asan*) SAN=(-fsanitize=address,undefined);; esac
cc -std=c11 -D_GNU_SOURCE -O2 -ffp-contract=off -Wall -Wextra -Werror "${SAN[@]}" -I"$BUILD/gen" -Icompiler \
   -c bench/layer.c -o "$SCRATCH/layer.o"
g++ "${SAN[@]}" -o "$SCRATCH/layer" "$SCRATCH/layer.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
echo "bench/layer.c: built"
rc=0
"$SCRATCH/layer" >/dev/null 2>&1 || rc=$?
echo "layer without arguments: exit $rc"
