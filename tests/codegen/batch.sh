#!/usr/bin/env bash
# tests/codegen/batch.sh SCRATCH MODEL [moec compile options...]
# Whether MODEL's kernels are the same code at its batch B and at 2B (docs/decisions.md 62): the model is
# compiled at both (--emit-cuda, the given options), the comment lines (those plan_code_hash leaves out)
# dropped, and the two kernels.cu compared. Prints one line, "MODEL: N kernels, the same code at batch B
# and 2B", or the kernels whose code differs, one per line, and exits 1. The batch is the model's train
# section's `batch N` (the only change made to the copy).
set -euo pipefail
SCRATCH=$1 MODEL=$2
shift 2
name=$(basename "$MODEL" .moe)
b=$(grep -o '^[^#]*\bbatch [0-9][0-9]*' "$MODEL" | head -n 1 | grep -o '[0-9][0-9]*$' || true)
[ -n "$b" ] || { echo "$MODEL: no 'batch N' in its train section" >&2; exit 2; }
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
cp "$MODEL" "$SCRATCH/$name.moe"
sed "s/\bbatch $b\b/batch $((2 * b))/" "$MODEL" > "$SCRATCH/${name}_2b.moe"
moec compile "$SCRATCH/$name.moe" --emit-cuda "$SCRATCH/b1" "$@" > /dev/null
moec compile "$SCRATCH/${name}_2b.moe" --emit-cuda "$SCRATCH/b2" "$@" > /dev/null
# each kernel's code in a file of its own (from its `extern "C" __global__` line to the next blank line),
# comment lines dropped, to name the kernels that differ
split() {
    mkdir -p "$2"
    grep -v '^[[:space:]]*//' "$1" | awk -v dir="$2" '
        /^extern "C" __global__/ && match($0, /k[0-9]+_[A-Za-z0-9_]*\(/) { out = dir "/" substr($0, RSTART, RLENGTH - 1) }
        out != "" { print > out }
        out != "" && /^$/ { close(out); out = "" }'
}
strip() { grep -v '^[[:space:]]*//' "$1"; }
n=$(grep -c '^extern "C" __global__' "$SCRATCH/b1/kernels.cu" || true)
if cmp -s <(strip "$SCRATCH/b1/kernels.cu") <(strip "$SCRATCH/b2/kernels.cu"); then
    echo "$name: $n kernels, the same code at batch $b and $((2 * b))"
    exit 0
fi
split "$SCRATCH/b1/kernels.cu" "$SCRATCH/k1"
split "$SCRATCH/b2/kernels.cu" "$SCRATCH/k2"
echo "$name: the code differs between batch $b and $((2 * b)) in these kernels:"
diff -rq "$SCRATCH/k1" "$SCRATCH/k2" | sed -e 's/^Files .*\/k1\/\([^ ]*\) and .*/  \1/' -e 's/^Only in .*\/\(k[12]\): /  (at one batch only, \1) /' || true
exit 1
