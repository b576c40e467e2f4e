#!/usr/bin/env bash
# tests/gpu/profile.sh [--build-only | --run-only] [OUTDIR]
# --profile on the GPU (runtime/gpu/gpu.c: CUDA events around each launch; docs/gpu-runtime.md):
#   bench_bio    bench/models/bench_bio.moe, --profile 5 (after 1 warm-up step): the table
#   mini         models/protein_moe_mini.moe, --profile 5: the table
#   mini_same    the same 6 steps without --profile: the same losses (profiled steps are real steps)
#   ep2          mixtral_tiny compiled --ep 2 on 2 simulated ranks, --profile 3: collectives and the bucketed
#                gradient all-reduce get their rows
# Each run's rows are checked: the table ends with its (step) line, the JSONL rows parse (moec plot) and their
# shares plus the unattributed time add up to the step.
# Build (here: make, flex/bison, cJSON, NVRTC; no GPU needed) writes OUTDIR (default build/gpu-profile):
# moec, the training binaries (kernels embedded for sm_90a), libcjson.so.1, the FASTA data.
# Run (the GPU machine: a driver, nothing else) writes OUTDIR/logs, prints the tables, then a summary last.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-profile}
BUILD=${BUILD:-build}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
DATA_SRC=${MOEC_DATA:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 "$BUILD/moec" >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp "$BUILD/moec" "$OUT/bin/moec"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp "$DATA_SRC" "$OUT/data/proteins.fasta.gz"
  c() { "$BUILD/moec" compile --kernels reference "$@" >/dev/null; }  # as before decision 48
  c bench/models/bench_bio.moe -o "$OUT/bin/bench_bio" --arch "$ARCH"
  c models/protein_moe_mini.moe -o "$OUT/bin/protein_moe_mini" --arch "$ARCH"
  c models/mixtral_tiny.moe --ep 2 -o "$OUT/bin/mixtral_tiny_ep2" --arch "$ARCH"
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
L=$OUT/logs
rm -rf "$L"
mkdir -p "$L"
DATA=$OUT/data/proteins.fasta.gz
rows=()
status=0
row() { rows+=("$(printf '%-12s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }
common=(--data "$DATA" --eval-every 0 --device cuda)

# the rows of one run: the table's (step) line, JSONL that parses, shares + unattributed = 1
check() {
  local name=$1 rc=$2 log=$3 jsonl=$4
  local shares
  shares=$(awk 'match($0, /"share":[-0-9.e+]+/) { s += substr($0, RSTART + 8, RLENGTH - 8) }
                /"kind":"total"/ { match($0, /"step_ms":[-0-9.e+]+/); st = substr($0, RSTART + 10, RLENGTH - 10)
                                   match($0, /"unattributed_ms":[-0-9.e+]+/); u = substr($0, RSTART + 18, RLENGTH - 18) }
                END { if (st > 0) printf "%.4f", s + u / st; else print "none" }' "$jsonl" 2>/dev/null)
  local ok=ok
  [ "$rc" -eq 0 ] && grep -q '^ *(step) ' "$log" && "$B/moec" plot "$jsonl" -o "$L/$name.svg" >/dev/null 2>&1 &&
    awk -v s="$shares" 'BEGIN { exit !(s > 0.999 && s < 1.001) }' || ok=FAIL
  row "$name" "$ok" "rc=$rc, shares $shares; $(grep -o 'profile: step [0-9.]* ms measured = nodes [0-9.]* ms' "$log" | sed 's/profile: //')"
}

table() { echo "== $1"; sed -n '/^profile: steps/,/^ *(step) /p' "$2"; echo; }

timeout 300 "$B/bench_bio" "${common[@]}" --steps 6 --profile 5 --log "$L/bench_bio.jsonl" >"$L/bench_bio.log" 2>&1
check bench_bio $? "$L/bench_bio.log" "$L/bench_bio.jsonl"
table bench_bio "$L/bench_bio.log"

timeout 300 "$B/protein_moe_mini" "${common[@]}" --steps 6 --log-every 1 --profile 5 --log "$L/mini.jsonl" >"$L/mini.log" 2>&1
check mini $? "$L/mini.log" "$L/mini.jsonl"
table protein_moe_mini "$L/mini.log"

# the same 6 steps as a CUDA graph, without --profile: the same losses
timeout 300 "$B/protein_moe_mini" "${common[@]}" --steps 6 --log-every 1 --log "$L/mini_plain.jsonl" >"$L/mini_plain.log" 2>&1
rc=$?
losses() { grep -o '"step":[0-9]*,"loss":[-0-9.e+]*' "$1"; }
if [ $rc -eq 0 ] && [ "$(losses "$L/mini.jsonl")" = "$(losses "$L/mini_plain.jsonl")" ] && [ -n "$(losses "$L/mini.jsonl")" ]; then
  row mini_same ok "6 losses identical with and without --profile"
else
  row mini_same FAIL "rc=$rc; $(diff <(losses "$L/mini.jsonl") <(losses "$L/mini_plain.jsonl") | head -4 | tr '\n' ' ')"
fi

timeout 300 "$B/mixtral_tiny_ep2" "${common[@]}" --steps 4 --profile 3 --simulate-ranks 2 --log "$L/ep2.jsonl" >"$L/ep2.log" 2>&1
rc=$?
check ep2 $rc "$L/ep2.log" "$L/ep2.jsonl"
grep -q '"kind":"collective"' "$L/ep2.jsonl" || row ep2_coll FAIL "no collective rows"
table "mixtral_tiny ep 2 (2 simulated ranks)" "$L/ep2.log"

printf '%-12s %-5s %s\n' check ok details
printf '%s\n' "${rows[@]}"
exit $status
