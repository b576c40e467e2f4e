#!/usr/bin/env bash
# tests/gpu/step_ab.sh [--build-only | --run-only] [OUTDIR]
# Whole training steps timed side by side where the four-layer Mixtral config (tests/gpu/mixtral4.moe, issue 13's
# target, ~108 GiB) does not fit: tests/gpu/mixtral2.moe, two of its layers at the same 4 x 4096 tokens a step
# (54.45 GiB planned: an 80 GB H100), bf16 and fp8-block, each run with a runtime switch's two values alternating
# (AB_SWITCH, default MOEC_GRAD_NORM=gemm|separate, decision 73), then transformers' grouped_mm bf16 on the same
# two-layer config (bench/anchors.py; AB_HF=0 skips it). tokens/s are the median of steps 4-10 of each run. AB_BINS
# names the binaries to run (default "mixtral2 mixtral2_fp8").
# Build (here: make, flex/bison, cJSON, NVRTC) writes OUTDIR (default build/gpu-step-ab): the two training binaries,
# libcjson.so.1, the FASTA data, anchors.py and the model. Run (the GPU machine) prints one row per run, a table last.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-step-ab}
BUILD=${BUILD:-build}
DATA_SRC=${MOEC_DATA:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp "$DATA_SRC" "$OUT/data/proteins.fasta.gz"
  cp bench/anchors.py tests/gpu/mixtral2.moe "$OUT/"
  "$BUILD/moec" compile tests/gpu/mixtral2.moe --kernels fast -o "$OUT/bin/mixtral2" --arch sm_90a >/dev/null
  "$BUILD/moec" compile tests/gpu/mixtral2.moe --kernels fast --precision fp8-block -o "$OUT/bin/mixtral2_fp8" \
      --arch sm_90a >/dev/null
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
SW=${AB_SWITCH:-MOEC_GRAD_NORM=gemm|separate}
VAR=${SW%%=*}
IFS='|' read -r VA VB <<<"${SW#*=}"
L=$OUT/logs
mkdir -p "$L"
rows=()
status=0
median_tps() {
  grep -o '"tokens_per_s":[0-9.e+]*' "$1" | cut -d: -f2 | tail -n +4 | sort -g |
    awk '{a[NR] = $1} END {if (NR) printf "%.0f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
for bin in ${AB_BINS:-mixtral2 mixtral2_fp8}; do
  for round in 1 2; do
    for v in "$VA" "$VB"; do
      name=${bin}_${v}_$round
      env "$VAR=$v" timeout 240 "$OUT/bin/$bin" --data "$OUT/data/proteins.fasta.gz" --device cuda --steps 10 \
        --eval-every 0 --log-every 1 --log "$L/$name.jsonl" >"$L/$name.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || status=1
      rows+=("$(printf '%-28s rc=%d %8s tok/s  %s' "$name" $rc "$(median_tps "$L/$name.jsonl")" \
        "$(grep '^step' "$L/$name.log" | tail -1 | tr -s ' ' | cut -c1-110)")")
      echo "${rows[-1]}"
    done
  done
done
if [ "${AB_HF:-1}" = 1 ]; then
  timeout 400 "${PYTHON:-python3}" "$OUT/anchors.py" "$OUT/mixtral2.moe" --out "$L/hf.json" --dtypes bf16 \
    --impls grouped_mm --no-layers --steps 5 --warmup 2 >"$L/hf.log" 2>&1
  hrc=$?
  hf=$("${PYTHON:-python3}" -c 'import json,sys; m=json.load(open(sys.argv[1]))["models"][0]; r=(m.get("runs") or [m])[0]; print("%.0f tok/s, peak %.1f GiB" % (r["tokens_per_s"], r["peak_mem_gib"]) if r.get("status") == "ok" else "- " + str(r.get("error", "?"))[:80])' "$L/hf.json" 2>/dev/null)
  rows+=("$(printf '%-28s rc=%d %s' transformers_grouped_mm $hrc "${hf:-?}")")
fi
echo
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader 2>/dev/null | head -1
echo "$VAR: $VA against $VB"
printf '%s\n' "${rows[@]}"
exit $status
