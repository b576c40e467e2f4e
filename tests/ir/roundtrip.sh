#!/usr/bin/env bash
# tests/ir/roundtrip.sh SCRATCH [PLUGIN.so] - the IR text format reads back.
#
# For every model in models/ and models/variants/ (new ones are covered
# without editing this file), and mixtral_tiny also under --precision mxfp8,
# --precision fp8-block (fused and, to show the quantize nodes, unfused)
# and --ep 2, and the GELU variant with the plugin that fuses it:
#  1. `moec dump X` read back with `moec dump X.mir` prints the same bytes,
#     and so does its JSON (which shows label, scope, layer, outputs: what
#     the text leaves to be derived);
#  2. every snapshot of `--print-ir-after all`, read back, prints the same
#     bytes; and resumed with `moec opt` (the passes after that stage run on
#     the graph read) it ends in the same final IR as the whole pipeline, in
#     text and in JSON.
# Prints one line per failure; exits 1 if there was one.
set -u
scratch=$1
plugin=${2:-}
mkdir -p "$scratch"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

check_model() {
    local model=$1; shift
    local tag
    tag=$(basename "$model" .moe)$(echo "$*" | tr -c 'a-zA-Z0-9\n' '_')
    local d="$scratch/$tag"
    rm -rf "$d" && mkdir -p "$d"
    moec dump "$model" "$@" > "$d/plain.mir" || { bad "$model $*: moec dump"; return; }
    moec dump "$d/plain.mir" "$@" > "$d/plain2.mir" || { bad "$model $*: reading its dump"; return; }
    cmp -s "$d/plain.mir" "$d/plain2.mir" || bad "$model $*: the dump read back differs (diff $d/plain.mir $d/plain2.mir)"
    moec dump "$model" "$@" --format json > "$d/plain.json"
    moec dump "$d/plain.mir" "$@" --format json > "$d/plain2.json"
    cmp -s "$d/plain.json" "$d/plain2.json" || bad "$model $*: the JSON of the dump read back differs (diff $d/plain.json $d/plain2.json)"
    # the snapshots, one file each
    moec dump "$model" "$@" --print-ir-after all > "$d/all.txt" || { bad "$model $*: --print-ir-after all"; return; }
    awk -v d="$d" '/^# \*\*\* IR after /{n++; f=sprintf("%s/stage%02d.mir", d, n)} {print > f}' "$d/all.txt"
    local final
    final=$(ls "$d"/stage*.mir | tail -n 1)
    local last_pass
    last_pass=$(head -n 1 "$final" | sed 's/^# \*\*\* IR after \(.*\) \*\*\*$/\1/')
    moec dump "$model" "$@" --print-ir-after "$last_pass" --format json > "$d/final.json"
    for s in "$d"/stage*.mir; do
        tail -n +2 "$s" > "$s.body"
        moec dump "$s" "$@" > "$s.read" || { bad "$s: reading it"; continue; }
        cmp -s "$s.body" "$s.read" || bad "$s: read back differs (diff $s.body $s.read)"
        moec opt "$s" "$@" > "$s.resumed" || { bad "$s: moec opt (resuming the pipeline)"; continue; }
        cmp -s "$final" "$s.resumed" || bad "$s: resumed, it does not end in the final IR (diff $final $s.resumed)"
        moec opt "$s" "$@" --format json > "$s.resumed.json"
        cmp -s "$d/final.json" "$s.resumed.json" || bad "$s: resumed, its JSON differs (diff $d/final.json $s.resumed.json)"
    done
}

for m in models/*.moe models/variants/*.moe; do
    check_model "$m"
done
check_model models/mixtral_tiny.moe --precision mxfp8
check_model models/mixtral_tiny.moe --precision fp8-block
check_model models/mixtral_tiny.moe --precision fp8-block --disable-pass fuse-grouped-mlp
check_model models/mixtral_tiny.moe --ep 2
check_model models/mixtral_tiny.moe --ep 2 --dp 2 --precision mxfp8
if [ -n "$plugin" ]; then
    check_model models/variants/mixtral_tiny_gelu.moe --load-pass "$plugin"
fi
[ $fail -eq 0 ] && echo "roundtrip: ok"
exit $fail
