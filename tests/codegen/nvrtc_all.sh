#!/usr/bin/env bash
# tests/codegen/nvrtc_all.sh BUILD SCRATCH - generates (--emit-cuda) and compiles the CUDA of
# every shipped model (models/, models/variants/) with the default kernels
# (fast, decision 48) and the largest two with the reference kernels, of
# mixtral_tiny under mxfp8 and with ep 2, and of tests/codegen/ops.moe in its
# three forms (reference), with NVRTC for sm_90a. Every compile must succeed
# with zero NVRTC warnings. Then --arch for another GPU: the default becomes
# the reference kernels (said on stdout), --kernels fast with sm_90a code is
# refused (exit 1, naming --kernels reference).
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
    cases=("models/mixtral_tiny.moe --kernels reference" "models/mixtral_tiny.moe --precision mxfp8 --ep 2"
           "tests/codegen/ops.moe --precision mxfp8 --kernels reference" "models/mixtral_8x7b.moe");;
*)
    for m in models/*.moe models/variants/*.moe; do cases+=("$m"); done
    cases+=("models/mixtral_8x7b.moe --kernels reference" "models/protein_moe.moe --kernels reference"
            "models/mixtral_tiny.moe --kernels reference"
            "models/mixtral_tiny.moe --precision mxfp8 --kernels reference" "models/mixtral_tiny.moe --ep 2 --kernels reference"
            "models/mixtral_tiny.moe --precision mxfp8 --ep 2 --kernels reference" "tests/codegen/ops.moe --kernels reference"
            "tests/codegen/ops.moe --precision mxfp8 --kernels reference"
            "tests/codegen/ops.moe --disable-pass fuse-grouped-mlp --kernels reference"
            "tests/gpu/fast_mlp.moe --kernels fast" "tests/gpu/fast_attn.moe --kernels fast"
            "bench/models/bench_bio.moe --kernels fast" "tests/gpu/fast_mlp_fp8.moe --kernels fast"
            "tests/gpu/fast_mlp_fp8.moe --kernels fast --precision mxfp8"
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
# --arch for a GPU other than sm_90: the default is the reference kernels; --kernels fast is refused when
# the plan has sm_90a code, and compiles when it has none (mixtral_tiny: no node qualifies)
if ! out=$(moec compile tests/gpu/fast_mlp.moe --emit-cuda "$SCRATCH/cuda" --arch sm_80 2>&1) ||
   ! grep -q "the reference kernels for --arch sm_80" <<< "$out" || grep -q ": fast:" <<< "$out" ||
   ! grep -q "compiled .* for sm_80" <<< "$out"; then
    echo "FAIL: moec compile tests/gpu/fast_mlp.moe --arch sm_80 (the default for another GPU: reference)"
    echo "$out" | tail -n 20
    fail=$((fail + 1))
fi
out=$(moec compile tests/gpu/fast_mlp.moe --kernels fast --emit-cuda "$SCRATCH/cuda" --arch sm_80 2>&1); rc=$?
if [ $rc -ne 1 ] || ! grep -q "error: --arch sm_80: .* sm_90a code, .* --kernels reference" <<< "$out"; then
    echo "FAIL: moec compile tests/gpu/fast_mlp.moe --kernels fast --arch sm_80 (exit $rc, want 1 and a message)"
    echo "$out" | tail -n 20
    fail=$((fail + 1))
fi
if ! out=$(moec compile models/mixtral_tiny.moe --kernels fast --emit-cuda "$SCRATCH/cuda" --arch sm_80 2>&1); then
    echo "FAIL: moec compile models/mixtral_tiny.moe --kernels fast --arch sm_80 (no sm_90a code: compiles)"
    echo "$out" | tail -n 20
    fail=$((fail + 1))
fi
echo "nvrtc: $n compilations, $total kernels, $fail failed, $(( $(date +%s) - start )) s"
[ $fail -eq 0 ]
