#!/usr/bin/env bash
# bench/run.sh [--build-only | --run-only] [options] [OUTDIR]
# The benchmark harness (bench/README.md): moec's training binaries on the GPU
# beside PyTorch/transformers anchors (bench/anchors.py), measured in the same run.
#
# Build (needs make, flex/bison, cJSON, libnvrtc; no GPU): `make -j2`, compiles
# each bench model (bench/models/NAME.moe) into a training binary OUTDIR/bin/NAME
# (and its CUDA kernels, NVRTC-compiled, into OUTDIR/cuda/NAME), copies
# libcjson.so.1 to OUTDIR/lib and the FASTA training data to OUTDIR/data, and
# records the commit in OUTDIR/build-info.json.
# Run (needs a GPU, libcuda.so.1 and python3 with torch + transformers, no
# toolchain): each binary trains --steps N with --device cuda (log in
# OUTDIR/moec_NAME.{log,jsonl}); then bench/anchors.py times transformers'
# MixtralForCausalLM with the same sizes and the MoE-layer anchors of
# the 2026-11-29 H200 anchors (OUTDIR/anchors.{json,log}); bench/report.py writes
# OUTDIR/results.json and OUTDIR/summary.md and prints the summary last.
# A moec binary that fails (or times out) is recorded and the anchors still run.
# A machine with both does both; else build here, carry OUTDIR, --run-only there.
#
# Options:
#   --data FASTA      training data (build: copied into OUTDIR/data; run: used
#                     instead of OUTDIR/data/*). Default: $MOEC_BENCH_DATA, else
#                     /usr/share/doc/mmseqs2/example-data/DB.fasta.gz
#   --configs "A B"   bench models to build/run (default: every bench/models/*.moe)
#   --steps N         optimizer steps per moec run (default 15)
#   --warmup N        logged steps left out of the median (default 5)
#   --no-anchors      skip bench/anchors.py
#   --quick-anchors   fewer anchor steps (a smoke test of the harness)
#   --kernels K       build: moec compile --kernels K (reference, the default, or fast); recorded in
#                     OUTDIR/build-info.json
#   --copy-to DIR     copy results.json, summary.md and a .tar.gz of all logs to DIR
#                     (e.g. the device machine's $OUT, so they come back)
# Environment: MOEC_BUILD (the build directory, default build), MOEC_GPU_ARCH
# (default sm_90a), MOEC_BENCH_TIMEOUT (seconds per moec run, default 110),
# MOEC_BENCH_ANCHORS_TIMEOUT (default 300), PYTHON (default python3),
# MOEC_BENCH_DEVICE (default cuda; cpu checks the harness itself on a machine without a GPU).
# OUTDIR defaults to build/bench.
set -uo pipefail
MODE=all
DATA=${MOEC_BENCH_DATA:-}
CONFIGS=""
STEPS=15
WARMUP=5
ANCHORS=1
QUICK=0
COPY_TO=""
KERNELS=reference
OUTDIR=""
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) MODE=build ;;
    --run-only) MODE=run ;;
    --data) DATA=${2:?--data needs a file}; shift ;;
    --configs) CONFIGS=${2:?--configs needs names}; shift ;;
    --steps) STEPS=${2:?--steps needs a number}; shift ;;
    --warmup) WARMUP=${2:?--warmup needs a number}; shift ;;
    --no-anchors) ANCHORS=0 ;;
    --quick-anchors) QUICK=1 ;;
    --kernels) KERNELS=${2:?--kernels needs reference or fast}; shift ;;
    --copy-to) COPY_TO=${2:?--copy-to needs a directory}; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "bench/run.sh: unknown option '$1'" >&2; usage 2 ;;
    *) [ -n "$OUTDIR" ] && { echo "bench/run.sh: one OUTDIR only" >&2; exit 2; }; OUTDIR=$1 ;;
  esac
  shift
done
case "$STEPS$WARMUP" in *[!0-9]*) echo "bench/run.sh: --steps/--warmup take numbers" >&2; exit 2;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${MOEC_BUILD:-build}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
PY=${PYTHON:-python3}
OUTDIR=${OUTDIR:-$ROOT/build/bench}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$ROOT"
if [ -z "$CONFIGS" ]; then
  CONFIGS=$(for m in bench/models/*.moe; do basename "$m" .moe; done | paste -sd' ' -)
fi
# shellcheck disable=SC2206
CFG=($CONFIGS)

if [ "$MODE" != run ]; then
  set -e
  DATA=${DATA:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
  [ -r "$DATA" ] || { echo "bench/run.sh: cannot read the training data '$DATA' (--data FASTA)" >&2; exit 1; }
  echo "bench/run.sh: make -j2 (BUILD=$BUILD)"
  make BUILD="$BUILD" -j2 >/dev/null
  rm -rf "${OUTDIR:?}/bin" "${OUTDIR:?}/cuda" "${OUTDIR:?}/data" "${OUTDIR:?}/lib"
  mkdir -p "$OUTDIR/bin" "$OUTDIR/cuda" "$OUTDIR/data" "$OUTDIR/lib"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUTDIR/lib/libcjson.so.1"
  cp -L "$DATA" "$OUTDIR/data/"
  for c in "${CFG[@]}"; do
    [ -f "bench/models/$c.moe" ] || { echo "bench/run.sh: no bench/models/$c.moe" >&2; exit 1; }
    "$BUILD/moec" check "bench/models/$c.moe"
    "$BUILD/moec" compile "bench/models/$c.moe" --kernels "$KERNELS" -o "$OUTDIR/bin/$c" --arch "$ARCH"  # kernels embedded
    "$BUILD/moec" compile "bench/models/$c.moe" --kernels "$KERNELS" --emit-cuda "$OUTDIR/cuda/$c" --arch "$ARCH"
  done
  commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
  printf '{"commit": "%s", "built": "%s", "host": "%s", "configs": "%s", "data": "%s", "arch": "%s", "kernels": "%s", "moec": "%s"}\n' \
    "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" "${CFG[*]}" "$(basename "$DATA")" "$ARCH" "$KERNELS" \
    "$("$BUILD/moec" --version 2>/dev/null | head -1 | tr -cd '[:alnum:] ._()+-')" >"$OUTDIR/build-info.json"
  echo "bench/run.sh: built ${CFG[*]} into $OUTDIR ($(du -sh "$OUTDIR" | cut -f1)); commit $commit"
  set +e
fi
[ "$MODE" = build ] && exit 0

# ---------------------------------------------------------------- run
export LD_LIBRARY_PATH="$OUTDIR/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} PYTHONUNBUFFERED=1
if [ -z "$DATA" ]; then
  DATA=$(find "$OUTDIR/data" -maxdepth 1 -type f 2>/dev/null | sort | head -1)
fi
TMO=${MOEC_BENCH_TIMEOUT:-110}
ATMO=${MOEC_BENCH_ANCHORS_TIMEOUT:-300}
DEVICE=${MOEC_BENCH_DEVICE:-cuda}
rm -f "$OUTDIR"/moec_*.jsonl "$OUTDIR"/moec_*.log "$OUTDIR"/moec_*.rc "$OUTDIR"/anchors.json \
      "$OUTDIR"/anchors.log "$OUTDIR"/results.json "$OUTDIR"/summary.md
if nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
     --format=csv >"$OUTDIR/gpu.txt" 2>&1; then
  echo "bench/run.sh: GPU $(sed -n 2p "$OUTDIR/gpu.txt")"
else
  echo "bench/run.sh: nvidia-smi failed: $(head -1 "$OUTDIR/gpu.txt")"
fi
for c in "${CFG[@]}"; do
  log="$OUTDIR/moec_$c.log"
  if [ ! -x "$OUTDIR/bin/$c" ]; then
    echo "bench/run.sh: no training binary $OUTDIR/bin/$c (run --build-only first)" | tee "$log"
    echo 127 >"$OUTDIR/moec_$c.rc"
    continue
  fi
  if [ -z "$DATA" ] || [ ! -r "$DATA" ]; then
    echo "bench/run.sh: no training data (OUTDIR/data is empty; --data FASTA)" | tee "$log"
    echo 66 >"$OUTDIR/moec_$c.rc"
    continue
  fi
  echo "bench/run.sh: moec $c: $STEPS steps, --device $DEVICE (timeout ${TMO}s)"
  t0=$(date +%s.%N)
  timeout -k 10 "$TMO" "$OUTDIR/bin/$c" --data "$DATA" --steps "$STEPS" --log "$OUTDIR/moec_$c.jsonl" \
    --device "$DEVICE" --eval-every 0 --log-every 1 >"$log" 2>&1 </dev/null
  rc=$?
  t1=$(date +%s.%N)
  echo "$rc" >"$OUTDIR/moec_$c.rc"
  echo "wall_s $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')" >>"$OUTDIR/moec_$c.rc"
  [ $rc -eq 124 ] && echo "bench/run.sh: timed out after ${TMO}s" >>"$log"
  echo "bench/run.sh: moec $c: exit $rc; $(tail -1 "$log")"
done

if [ "$ANCHORS" = 1 ]; then
  models=()
  for c in "${CFG[@]}"; do models+=("bench/models/$c.moe"); done
  qa=()
  [ "$QUICK" = 1 ] && qa=(--quick)
  echo "bench/run.sh: anchors (timeout ${ATMO}s)"
  timeout -k 10 "$ATMO" "$PY" bench/anchors.py --out "$OUTDIR/anchors.json" "${qa[@]}" "${models[@]}" \
    >"$OUTDIR/anchors.log" 2>&1 </dev/null
  arc=$?
  [ $arc -ne 0 ] && echo "bench/run.sh: anchors exit $arc; $(tail -1 "$OUTDIR/anchors.log")"
fi

ra=()
[ "$ANCHORS" = 0 ] && ra=(--no-anchors)
"$PY" bench/report.py "$OUTDIR" --warmup "$WARMUP" --configs "${CFG[*]}" "${ra[@]}"
status=$?
if [ -n "$COPY_TO" ]; then
  mkdir -p "$COPY_TO"
  cp "$OUTDIR/results.json" "$OUTDIR/summary.md" "$COPY_TO/" 2>/dev/null
  (cd "$OUTDIR" && tar czf "$COPY_TO/bench-logs.tar.gz" --ignore-failed-read build-info.json gpu.txt \
     moec_*.log moec_*.jsonl moec_*.rc anchors.json anchors.log 2>/dev/null)
fi
exit $status
