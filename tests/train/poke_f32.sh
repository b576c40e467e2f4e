#!/usr/bin/env bash
# poke_f32.sh FILE TENSOR INDEX BYTES: overwrites element INDEX of the f32
# tensor TENSOR of a safetensors FILE with 4 little-endian bytes given as
# printf escapes: '\x00\x00\xc0\x7f' is NaN, '\x00\x00\x80\xbf' is -1,
# '\xff\xff\x7f\x7f' the largest float. For poisoning checkpoints in tests.
set -eu
f=$1 name=$2 idx=$3 bytes=$4
n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
begin=$(head -c $((8 + n)) "$f" | tail -c "$n" | grep -o "\"$name\":{[^}]*}" | grep -o 'data_offsets":\[[0-9]*' |
        grep -o '[0-9]*$')
[ -n "$begin" ] || { echo "poke_f32.sh: no tensor $name in $f" >&2; exit 1; }
printf "$bytes" | dd of="$f" bs=1 seek=$((8 + n + begin + 4 * idx)) conv=notrunc status=none
