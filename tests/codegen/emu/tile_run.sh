#!/usr/bin/env bash
# tests/codegen/emu/tile_run.sh BUILD SCRATCH
# Builds tile_kernels.cu (the GEMM tiles of codegen/prelude.cuh and test
# kernels around them) for the CPU with the emulator and runs tile_check.cc:
# the register-blocked tiles against the reference 16 x 16 tile, bit for bit.
# Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
# the kernels (K256 ...) and those the GEMM_CASES / GROUPED_CASES macros make (each tile and the reference)
grep -o '^K256 [A-Za-z0-9_]*(' "$HERE/tile_kernels.cu" | sed 's/K256 \(.*\)(/EMU_K(\1)/' > "$SCRATCH/table.inc"
sed -n 's/^GEMM_CASES(\([a-z0-9]*\),.*/\1/p' "$HERE/tile_kernels.cu" | while read -r s; do
    for f in fwd dx dw; do for p in new n32 n16 ref; do echo "EMU_K(${p}_${s}_$f)"; done; done; done >> "$SCRATCH/table.inc"
sed -n 's/^GROUPED_CASES(\([a-z0-9]*\),.*/\1/p' "$HERE/tile_kernels.cu" | while read -r s; do
    for f in fwd dx dw; do for p in new n32 n16 ref; do echo "EMU_K(${p}_${s}_$f)"; done; done; done >> "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -DEMU_NO_ADAMW -I"$HERE" -I"$ROOT/codegen" \
    -DKERNELS_CU="\"$HERE/tile_kernels.cu\"" -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" \
    -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -c "$HERE/tile_check.cc" -o "$SCRATCH/tile_check.o"
g++ -o "$SCRATCH/tile_check" "$SCRATCH/tile_check.o" "$SCRATCH/emu_runtime.o" -lm
"$SCRATCH/tile_check"
