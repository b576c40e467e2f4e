#!/usr/bin/env bash
# tests/codegen/emu/mx_run.sh BUILD SCRATCH
# Builds mx_kernels.cu (the MXFP8 quantisers of codegen/fp8_block_fast.cuh, namespace moec::mx8) for the CPU with
# the emulator and runs mx_check.cc against runtime/cpu/mxfp8.c, bit for bit. Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
grep -o '^K[0-9]* [A-Za-z0-9_]*(' "$HERE/mx_kernels.cu" | sed 's/K[0-9]* \(.*\)(/EMU_K(\1)/' > "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -DEMU_NO_ADAMW -I"$HERE" -I"$ROOT/codegen" \
    -DKERNELS_CU="\"$HERE/mx_kernels.cu\"" -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" \
    -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -I"$ROOT/runtime/cpu" -I"$ROOT/codegen" \
    -c "$HERE/mx_check.cc" -o "$SCRATCH/mx_check.o"
gcc -std=c11 -O1 -ffp-contract=off -c "$ROOT/runtime/cpu/mxfp8.c" -o "$SCRATCH/mxfp8.o"
g++ -o "$SCRATCH/mx_check" "$SCRATCH/mx_check.o" "$SCRATCH/emu_runtime.o" "$SCRATCH/mxfp8.o" -lm
"$SCRATCH/mx_check"
