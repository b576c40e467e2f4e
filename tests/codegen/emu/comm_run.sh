#!/usr/bin/env bash
# tests/codegen/emu/comm_run.sh BUILD SCRATCH
# Builds mixtral_tiny's kernels.cu (for the runtime's collective kernels, codegen/cuda_comm.c) for the CPU with the
# emulator and runs comm_check.cc against the exchanges' definitions, bit for bit. Plain builds only, as run.sh.
set -euo pipefail
BUILD=$1 SCRATCH=$2
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
case "$(basename "$BUILD")" in *asan*) printf "emulation skipped under the sanitizer build\n(the plain build runs it)\n"; exit 0;; esac
command -v g++ >/dev/null || { echo "emulation needs g++" >&2; exit 1; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
moec compile "$ROOT/models/mixtral_tiny.moe" --emit-cuda "$SCRATCH" >/dev/null
grep -o '__launch_bounds__([0-9]*) k[0-9A-Za-z_]*' "$SCRATCH/kernels.cu" | awk '{print "EMU_K(" $2 ")"}' > "$SCRATCH/table.inc"
g++ -std=c++17 -O1 -ffp-contract=off -w -I"$HERE" -DKERNELS_CU="\"$SCRATCH/kernels.cu\"" \
    -DKERNEL_TABLE="\"$SCRATCH/table.inc\"" -c "$HERE/emu_runtime.cc" -o "$SCRATCH/emu_runtime.o"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Werror -c "$HERE/comm_check.cc" -o "$SCRATCH/comm_check.o"
g++ -o "$SCRATCH/comm_check" "$SCRATCH/comm_check.o" "$SCRATCH/emu_runtime.o" -lm
"$SCRATCH/comm_check"
