#!/usr/bin/env bash
# bench/memory_plans.sh [OUTDIR] - the GPU memory that whole training plans would allocate, on the CPU (no GPU, no
# NVRTC: `moec compile -o` without --arch, then each binary's `--dry-run --device cuda`), one row per plan: the
# total, the activations region at its fullest and the launch where that is, parameters and AdamW state. The figure
# to compare before and after a memory change (docs/decisions.md 66: a one-layer figure can move the other way from
# the whole plan's). Prints a table last; exit 1 when a plan could not be compiled or dry-run.
# The default list: four Mixtral-8x7B layers (tests/gpu/mixtral4.moe; nofit.moe is the same layers at 16 x 4096) at
# 4, 12 and 16 x 4096 tokens in bf16, fp8-block and MXFP8, the checkpointed example, bench_bio.
# Environment: BUILD (default build), MOEC_MEM_PLANS ("NAME=MODEL[:PRECISION[:BATCH]] ..." to replace the list).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/memory-plans}
mkdir -p "$OUT"
PLANS=${MOEC_MEM_PLANS:-"m4=tests/gpu/mixtral4.moe m4_fp8=tests/gpu/mixtral4.moe:fp8-block m4_mx=tests/gpu/mixtral4.moe:mxfp8
m4_b12=tests/gpu/mixtral4.moe::12 m4_b12_fp8=tests/gpu/mixtral4.moe:fp8-block:12 m4_b12_mx=tests/gpu/mixtral4.moe:mxfp8:12
m4_b16_bf16=tests/gpu/nofit.moe:bf16 m4_b16_fp8=tests/gpu/nofit.moe:fp8-block m4_b16_mx=tests/gpu/nofit.moe:mxfp8
m4_ckpt_b16=tests/gpu/mixtral4_ckpt.moe bench_bio=bench/models/bench_bio.moe bench_bio_fp8=bench/models/bench_bio.moe:fp8-block
bench_bio_mx=bench/models/bench_bio.moe:mxfp8"}
[ -x "$BUILD/moec" ] || make BUILD="$BUILD" -j2 >/dev/null || exit 1
status=0
rows=()
for spec in $PLANS; do
  name=${spec%%=*}
  rest=${spec#*=}
  IFS=: read -r model prec batch <<<"$rest"
  args=(--kernels fast)
  [ -n "$prec" ] && args+=(--precision "$prec")
  if ! "$BUILD/moec" compile "$model" "${args[@]}" -o "$OUT/$name" >"$OUT/$name.compile.txt" 2>&1; then
    rows+=("$(printf '%-16s compile failed: %s' "$name" "$(tail -1 "$OUT/$name.compile.txt")")")
    status=1
    continue
  fi
  dry=(--dry-run --device cuda)
  [ -n "$batch" ] && dry+=(--batch "$batch")
  "$OUT/$name" "${dry[@]}" >"$OUT/$name.dry.txt" 2>&1
  rc=$?
  total=$(awk '$1 == "total" {print $2; exit}' "$OUT/$name.dry.txt")
  if [ -z "$total" ]; then
    rows+=("$(printf '%-16s dry run failed (rc %d): %s' "$name" "$rc" "$(tail -1 "$OUT/$name.dry.txt")")")
    status=1
    continue
  fi
  params=$(awk '$1 == "parameters" {print $2; exit}' "$OUT/$name.dry.txt")
  adamw=$(awk '$1 == "AdamW" {print $3; exit}' "$OUT/$name.dry.txt")
  act=$(awk '$1 == "activations" && $2 == "region" {print $3; exit}' "$OUT/$name.dry.txt")
  at=$(sed -n 's/.*at its fullest, \(launch [0-9]* of [0-9]*\) (\(.*\)):.*/\1 \2/p' "$OUT/$name.dry.txt" | head -1)
  fits=$(sed -n 's/^peak: .*: \(fits\|does not fit\)$/\1/p' "$OUT/$name.dry.txt" | head -1)
  rows+=("$(printf '%-16s %9s %9s %9s %9s  %-12s %s' "$name" "$total" "$act" "$params" "$adamw" "${fits:-?}" "$at")")
done
printf '%-16s %9s %9s %9s %9s  %-12s %s\n' plan "total" "act.reg" "params" "AdamW" "H200" "the activations' fullest launch"
printf '%s\n' "${rows[@]}"
printf '(GiB; --kernels fast; %s)\n' "$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
exit $status
