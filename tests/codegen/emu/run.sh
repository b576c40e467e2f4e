#!/usr/bin/env bash
# tests/codegen/emu/run.sh BUILD SCRATCH MODEL [moec compile options] [-- check options]
# Generates MODEL's CUDA code, builds it for the CPU with the emulator
# (emu.h, emu_runtime.cc; g++) and runs check.c against the CPU reference
# backend of BUILD's libmoec.a. Plain builds only: under the sanitizer build
# it prints a note and passes (the emulator checks the kernels, not moec).
set -euo pipefail
BUILD=$1 SCRATCH=$2 MODEL=$3
shift 3
COMPILE_OPTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do COMPILE_OPTS+=("$1"); shift; done
[ $# -gt 0 ] && shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
# the reference kernels unless the options say otherwise (the default is fast, decision 48)
moec compile "$MODEL" --kernels reference "${COMPILE_OPTS[@]}" --emit-cuda "$SCRATCH" >/dev/null
# the emulator runs CUDA C on the CPU: it cannot run wgmma, TMA or mbarriers (the sm_90a fast kernels); a
# --kernels fast plan without them (only the plain-CUDA fast kernels of dense_fast.cuh: the skinny linears,
# RoPE, the routing sort; tests/codegen/membound_fast.moe) runs
if grep -Eq '"kernels":[[:space:]]*"fast"' "$SCRATCH/plan.json" && grep -q '^// ======== sm_90a' "$SCRATCH/kernels.cu"; then
  echo "emulation refused: $MODEL was compiled with --kernels fast, whose sm_90a kernels (wgmma, TMA) only a" \
       "Hopper GPU runs; check it with tests/gpu/fast_mlp.sh (the emulator checks reference plans)" >&2
  exit 3
fi
# every node kernel (the optimizer's take scalars; emu_runtime.cc calls moec_adamw itself)
grep -o '__launch_bounds__([0-9]*) k[0-9A-Za-z_]*' "$SCRATCH/kernels.cu" | awk '{print "EMU_K(" $2 ")"}' > "$SCRATCH/table.inc"
# a fast plan's kernels use a few more CUDA names (emu_fast.h)
FAST_INC=()
grep -Eq '"kernels":[[:space:]]*"fast"' "$SCRATCH/plan.json" && FAST_INC=(-include "$HERE/emu_fast.h")
g++ -std=c++17 -O1 -ffp-contract=off -w -I"$HERE" "${FAST_INC[@]}" -DKERNELS_CU="\"$SCRATCH/kernels.cu\"" \
    -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
cc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -I"$BUILD/gen" -I"$ROOT/compiler" -c "$HERE/check.c" -o "$SCRATCH/check.o"
g++ -o "$SCRATCH/check" "$SCRATCH/check.o" "$SCRATCH/emu_runtime.o" "$BUILD/libmoec.a" -lcjson -lz -lm -lpthread -ldl
"$SCRATCH/check" "$MODEL" "$SCRATCH/plan.json" "$@"
