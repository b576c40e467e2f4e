#!/usr/bin/env bash
# tests/codegen/emu/mx_run.sh BUILD SCRATCH
# Builds mx_kernels.cu (the MXFP8 quantisers of codegen/fp8_block_fast.cuh, namespace moec::mx8) for the CPU with
# the emulator, with the optimizer's kernels moec generates for tests/gpu/fast_mlp_fp8.moe at --precision mxfp8, and
# runs mx_check.cc against runtime/cpu/mxfp8.c and moec_adamw, bit for bit. Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
# the optimizer's kernels of an mxfp8 fast plan (moec_adamw, moec_adamw_mx8_*, moec_mx8_copy_*): the generated
# kernels.cu from its optimizer section on (the rest is sm_90a code the emulator cannot run)
moec compile "$ROOT/tests/gpu/fast_mlp_fp8.moe" --precision mxfp8 --kernels fast --emit-cuda "$SCRATCH/gen" \
    >/dev/null 2>"$SCRATCH/compile.log" || { cat "$SCRATCH/compile.log" >&2; exit 1; }
sed -n '/^\/\/ ======== the optimizer/,$p' "$SCRATCH/gen/kernels.cu" > "$SCRATCH/optimizer.cu"
grep -q 'moec_adamw_mx8_4x256x256' "$SCRATCH/optimizer.cu" || { echo "no moec_adamw_mx8_4x256x256 in the plan" >&2; exit 1; }
grep -o '^K[0-9]* [A-Za-z0-9_]*(' "$HERE/mx_kernels.cu" | sed 's/K[0-9]* \(.*\)(/EMU_K(\1)/' > "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -DEMU_NO_ADAMW -I"$HERE" -I"$ROOT/codegen" \
    -DMX_OPTIMIZER_CU="\"$SCRATCH/optimizer.cu\"" \
    -DKERNELS_CU="\"$HERE/mx_kernels.cu\"" -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" \
    -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -I"$ROOT/runtime/cpu" -I"$ROOT/codegen" \
    -c "$HERE/mx_check.cc" -o "$SCRATCH/mx_check.o"
gcc -std=c11 -O1 -ffp-contract=off -c "$ROOT/runtime/cpu/mxfp8.c" -o "$SCRATCH/mxfp8.o"
g++ -o "$SCRATCH/mx_check" "$SCRATCH/mx_check.o" "$SCRATCH/emu_runtime.o" "$SCRATCH/mxfp8.o" -lm
"$SCRATCH/mx_check"
