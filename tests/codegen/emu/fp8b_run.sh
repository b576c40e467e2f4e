#!/usr/bin/env bash
# tests/codegen/emu/fp8b_run.sh BUILD SCRATCH
# Builds fp8b_kernels.cu (the fp8-block quantisers of codegen/fp8_block_fast.cuh, and the optimizer's kernels
# moec generates for tests/gpu/fast_mlp_fp8.moe) for the CPU with the emulator and runs fp8b_check.cc against
# runtime/cpu/fp8_block.c and moec_adamw, bit for bit. Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
# the optimizer's kernels of an fp8-block fast plan (moec_adamw, moec_adamw_fp8b_*, moec_fp8b_copy_*): the
# generated kernels.cu from its optimizer section on (the rest is sm_90a code the emulator cannot run)
moec compile "$ROOT/tests/gpu/fast_mlp_fp8.moe" --kernels fast --emit-cuda "$SCRATCH/gen" >/dev/null 2>"$SCRATCH/compile.log" ||
    { cat "$SCRATCH/compile.log" >&2; exit 1; }
sed -n '/^\/\/ ======== the optimizer/,$p' "$SCRATCH/gen/kernels.cu" > "$SCRATCH/optimizer.cu"
grep -q 'moec_adamw_fp8b_4x256x256' "$SCRATCH/optimizer.cu" || { echo "no moec_adamw_fp8b_4x256x256 in the plan" >&2; exit 1; }
grep -o '^K[0-9]* [A-Za-z0-9_]*(' "$HERE/fp8b_kernels.cu" | sed 's/K[0-9]* \(.*\)(/EMU_K(\1)/' > "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -DEMU_NO_ADAMW -I"$HERE" -I"$ROOT/codegen" \
    -DFP8B_OPTIMIZER_CU="\"$SCRATCH/optimizer.cu\"" \
    -DKERNELS_CU="\"$HERE/fp8b_kernels.cu\"" -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" \
    -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -I"$ROOT/runtime/cpu" -I"$ROOT/codegen" \
    -c "$HERE/fp8b_check.cc" -o "$SCRATCH/fp8b_check.o"
for c in fp8_block mxfp8; do
    gcc -std=c11 -O1 -ffp-contract=off -c "$ROOT/runtime/cpu/$c.c" -o "$SCRATCH/$c.o"
done
g++ -o "$SCRATCH/fp8b_check" "$SCRATCH/fp8b_check.o" "$SCRATCH/emu_runtime.o" "$SCRATCH/fp8_block.o" \
    "$SCRATCH/mxfp8.o" -lm
"$SCRATCH/fp8b_check"
