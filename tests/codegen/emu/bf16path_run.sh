#!/usr/bin/env bash
# tests/codegen/emu/bf16path_run.sh BUILD SCRATCH
# Builds bf16path_kernels.cu (RoPE's and RMSNorm's bf16-output paths of codegen/dense_fast.cuh, decision 58)
# for the CPU with the emulator and runs bf16path_check.cc: every result against the reference's double
# expression rounded to float, then to bf16, bit for bit. Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
grep -o '^K256 [A-Za-z0-9_]*(' "$HERE/bf16path_kernels.cu" | sed 's/K256 \(.*\)(/EMU_K(\1)/' > "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -DEMU_NO_ADAMW -I"$HERE" -I"$ROOT/codegen" -I"$ROOT/util" -include "$HERE/emu_fast.h" \
    -DKERNELS_CU="\"$HERE/bf16path_kernels.cu\"" -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" \
    -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -c "$HERE/bf16path_check.cc" -o "$SCRATCH/bf16path_check.o"
g++ -o "$SCRATCH/bf16path_check" "$SCRATCH/bf16path_check.o" "$SCRATCH/emu_runtime.o" -lm
"$SCRATCH/bf16path_check"
