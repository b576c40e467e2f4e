#!/usr/bin/env bash
# tests/codegen/nvrtc_all.sh BUILD SCRATCH - generates (--emit-cuda) and compiles the CUDA of
# every shipped model (models/, models/variants/), of mixtral_tiny under
# mxfp8 and with ep 2, and of tests/codegen/ops.moe in its three forms, with
# NVRTC for sm_90a. Every compile must succeed with zero NVRTC warnings.
#
# Without libnvrtc (no CUDA toolkit) it prints SKIPPED and passes, except
# in CI (CI=true) or with MOEC_REQUIRE_NVRTC set: CI's machines have the
# toolkit, so there a missing library is a failure. Under the sanitizer
# build (BUILD *asan*) it compiles a representative subset: NVRTC's own
# time doubles there, and what ASan watches is moec, not the kernels.
set -uo pipefail
BUILD=$1 SCRATCH=$2
ARCH=sm_90a
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
if ! out=$(moec compile tests/codegen/ops.moe --arch $ARCH 2>&1); then
    if grep -q "cannot load NVRTC" <<< "$out" && [ "${CI:-}" != true ] && [ -z "${MOEC_REQUIRE_NVRTC:-}" ]; then
        echo "SKIPPED: $out"
        exit 0
    fi
    echo "$out"
    exit 1
fi
cases=()
case "$(basename "$BUILD")" in
*asan*)
    cases=("models/mixtral_tiny.moe" "models/mixtral_tiny.moe --precision mxfp8 --ep 2"
           "tests/codegen/ops.moe --precision mxfp8" "models/mixtral_8x7b.moe");;
*)
    for m in models/*.moe models/variants/*.moe; do cases+=("$m"); done
    cases+=("models/mixtral_tiny.moe --precision mxfp8" "models/mixtral_tiny.moe --ep 2"
            "models/mixtral_tiny.moe --precision mxfp8 --ep 2" "tests/codegen/ops.moe"
            "tests/codegen/ops.moe --precision mxfp8" "tests/codegen/ops.moe --disable-pass fuse-grouped-mlp"
            "tests/gpu/fast_mlp.moe --kernels fast" "tests/gpu/fast_attn.moe --kernels fast"
            "bench/models/bench_bio.moe --kernels fast" "tests/gpu/fast_mlp_fp8.moe --kernels fast"
            "tests/gpu/mixtral4_ckpt.moe" "tests/gpu/mixtral4_ckpt.moe --kernels fast"
            "tests/gpu/mixtral4_ckpt.moe --kernels fast --precision fp8-block");;
esac
fail=0 n=0 total=0
start=$(date +%s)
for c in "${cases[@]}"; do
    # shellcheck disable=SC2086 # the case is a model and its options
    if ! out=$(moec compile $c --emit-cuda "$SCRATCH/cuda" --arch $ARCH 2>&1) || [ ! -s "$SCRATCH/cuda/kernels.cubin" ]; then
        echo "FAIL: moec compile $c --emit-cuda $SCRATCH/cuda --arch $ARCH"
        echo "$out" | tail -n 40
        fail=$((fail + 1))
        continue
    fi
    line=$(grep 'NVRTC .* compiled' <<< "$out")
    echo "$line  [$c]"
    if ! grep -q ', 0 warnings$' <<< "$line"; then
        echo "FAIL: NVRTC warnings in the code generated for $c:"
        echo "$out" | tail -n 40
        fail=$((fail + 1))
    fi
    rm -f "$SCRATCH/cuda/kernels.cubin"
    n=$((n + 1))
    total=$((total + $(grep -o 'compiled [0-9]*' <<< "$line" | grep -o '[0-9]*')))
done
echo "nvrtc: $n compilations, $total kernels, $fail failed, $(( $(date +%s) - start )) s"
[ $fail -eq 0 ]
