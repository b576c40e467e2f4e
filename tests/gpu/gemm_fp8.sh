#!/usr/bin/env bash
# tests/gpu/gemm_fp8.sh [--build-only | --run-only] [OUTDIR]
# Checks and times the sm_90a FP8 grouped GEMMs (codegen/gemm_sm90.cuh GemmFp8MGrouped: fp8-block and
# MXFP8; GemmFp8KGrouped: fp8-block's weight gradient, the kblock_* configs, decision 45) with
# tests/gpu/gemm_fp8.c. Not part of `make test` (tests/unit/test_gemm_sm90.c is: NVRTC
# compile, scale layouts, on the CPU).
#
# Build (make, a C compiler, libnvrtc; no GPU): builds the objects it links from BUILD (default build),
# links OUTDIR/gemm_fp8, runs its CPU self-test (quantiser, scale layouts, checker) and NVRTC-compiles every
# configuration into OUTDIR/NAME.cubin (+ NAME.cu).
# Run (a Hopper GPU, libcuda.so.1): quantises, checks and times every configuration; log OUTDIR/gemm_fp8.log;
# then the bf16 kernel (tests/gpu/gemm_sm90.c, built into OUTDIR/bf16) at the same shapes, and a table of the
# three. On a GPU machine without the toolchain build elsewhere, carry OUTDIR, pass --run-only.
# OUTDIR defaults to BUILD/gpu-gemm-fp8. SEED fixes the inputs (default: the time);
# GEMM_FP8_ONLY="name name" builds and runs only those configurations; GEMM_FP8_TIMEOUT (default 900 s).
# Decision 51: the MXFP8 and K-grouped rows run the pipelined promotion (the kernels' default); the *_pairs rows the
# schedule of decisions 38 / 45, checked and timed in the same run; the two tables put them side by side.
# Decision 56: the kblock_*_pp rows run the K-grouped kernel's ping-pong schedule (64 x 128 tiles a consumer
# warpgroup, TMA stores), each checked against the definition and bit for bit against its cooperative twin on the
# same inputs; the weight-gradient table (printed last) puts the two side by side. Only those and their twins (a
# short run, no bf16 anchors): GEMM_FP8_ONLY=pingpong.
# Decision 70: the timed K-grouped rows run at a rows_cap that is a multiple of 128 (as the plans' now are; the checked
# ragged rows keep one that is not); kblock_mixtral_dw_gate_up_g4_tma is Mixtral's dW_gate_up in 4 groups of 4096
# tokens (the per-tile cost); block_mixtral_dxs the backward's longest FP8 GEMM (K = 2F).
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/gpu-gemm-fp8}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  objs=("$BUILD/obj/plan/gemm_sm90.o" "$BUILD/obj/codegen/gemm_sm90.o" "$BUILD/obj/runtime/gpu/tma.o"
        "$BUILD/obj/runtime/gpu/nvrtc.o" "$BUILD/obj/runtime/gpu/cudrv.o" "$BUILD/gen/cuda_prelude.o"
        "$BUILD/obj/runtime/cpu/fp8_block.o" "$BUILD/obj/runtime/cpu/mxfp8.o" "$BUILD/obj/util/util.o")
  make -j2 BUILD="$BUILD" "${objs[@]}" >/dev/null
  mkdir -p "$OUT"
  cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra ${WERROR:+-Werror} -Iruntime/gpu -c tests/gpu/gemm_fp8.c -o "$OUT/gemm_fp8.o"
  cc -o "$OUT/gemm_fp8" "$OUT/gemm_fp8.o" "${objs[@]}" -lm -lpthread -ldl
  "$OUT/gemm_fp8" --selftest
  "$OUT/gemm_fp8" --emit "$OUT"
  # the bf16 kernel at the same shapes, for the side-by-side table (its own harness and cubins)
  BUILD="$BUILD" bash tests/gpu/gemm_sm90.sh --build-only "$OUT/bf16" >"$OUT/bf16-build.log"
  set +e
fi
[ "$MODE" = build ] && exit 0
SEED=${SEED:-$(date +%s)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null
timeout "${GEMM_FP8_TIMEOUT:-900}" "$OUT/gemm_fp8" --run "$OUT" "$SEED" >"$OUT/gemm_fp8.log" 2>&1
rc=$?
cat "$OUT/gemm_fp8.log"
if [ -x "$OUT/bf16/gemm_sm90" ] && [ -z "${GEMM_FP8_ONLY:-}" ]; then
  # the bf16 kernel's anchors in the same run (default BLOCK_N 256 and 128), then one table
  GEMM_SM90_ONLY="mixtral_gate_up mixtral_down bio_up bio_down mixtral_gate_up_bn128 mixtral_down_bn128 bio_up_bn128 bio_down_bn128 wgrad_mixtral_gate_up_tma wgrad_mixtral_down_tma wgrad_bio_up_tma wgrad_bio_down_tma" \
    timeout 300 "$OUT/bf16/gemm_sm90" --run "$OUT/bf16" "$SEED" >"$OUT/bf16.log" 2>&1
  echo
  # MXFP8: the pipelined promotion (decision 51, what the kernel does by default) and decision 38's pairs
  printf '%-16s %11s %11s %11s %11s %11s %11s %11s\n' "TFLOP/s" "bf16 BN256" "bf16 BN128" "fp8-block" "MXFP8" \
    "MXFP8 pairs" "block/bf16" "MXFP8/bf16"
  for a in mixtral_gate_up mixtral_down bio_up bio_down; do
    b=$(awk -v n="$a" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/bf16.log")
    b128=$(awk -v n="${a}_bn128" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/bf16.log")
    f=$(awk -v n="block_$a" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    m=$(awk -v n="mx_$a" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    mp=$(awk -v n="mx_${a}_pairs" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    r=$(awk -v x="${f:-0}" -v y="${b:-0}" -v z="${b128:-0}" 'BEGIN{t=y>z?y:z; if (t>0 && x>0) printf "%.2f", x/t; else print "-"}')
    rm=$(awk -v x="${m:-0}" -v y="${b:-0}" -v z="${b128:-0}" 'BEGIN{t=y>z?y:z; if (t>0 && x>0) printf "%.2f", x/t; else print "-"}')
    printf '%-16s %11s %11s %11s %11s %11s %11s %11s\n' "$a" "${b:--}" "${b128:--}" "${f:--}" "${m:--}" "${mp:--}" "$r" "$rm"
  done
fi
# the weight gradients: the bf16 K-grouped kernel (TMA-store epilogue, what fast plans use; with GEMM_FP8_ONLY set it
# does not run: "-") against the FP8 K-grouped one (decision 45), the same shapes (dW [E, N, K], T = 2048 or 1024
# rows a group). The FP8 columns: registers / TMA stores x pipelined (decision 51) / pairs (decision 45), and the
# ping-pong schedule (decision 56, TMA stores, pipelined: what the plans emit by default) against the cooperative
# TMA-store kernel ("pp/coop": > 1 is faster); "ms" columns the two TMA-store kernels' medians
if grep -q '^kblock_' "$OUT/gemm_fp8.log"; then
  echo
  printf '%-18s %10s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n' "wgrad TFLOP/s" "bf16 K-grp" "fp8 K" "fp8 K prs" \
    "fp8 K TMA" "TMA pairs" "TMA pp" "ms coop" "ms pp" "ms bf16" "pp/coop"
  for a in mixtral_dw_gate_up:mixtral_gate_up mixtral_dw_down:mixtral_down bio_dw_up:bio_up bio_dw_down:bio_down; do
    f8=${a%%:*} b16=${a##*:}
    b=$(awk -v n="wgrad_${b16}_tma" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/bf16.log" 2>/dev/null)
    bms=$(awk -v n="wgrad_${b16}_tma" '$1==n && NF>=8 && $7 ~ /PASS|FAIL/ {print $8}' "$OUT/bf16.log" 2>/dev/null)
    f=$(awk -v n="kblock_$f8" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    fp=$(awk -v n="kblock_${f8}_pairs" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    ft=$(awk -v n="kblock_${f8}_tma" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    ftp=$(awk -v n="kblock_${f8}_tma_pairs" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    fpp=$(awk -v n="kblock_${f8}_tma_pp" '$1==n && $6 ~ /PASS|FAIL/ {print $8}' "$OUT/gemm_fp8.log")
    fms=$(awk -v n="kblock_${f8}_tma" '$1==n && $6 ~ /PASS|FAIL/ {print $7}' "$OUT/gemm_fp8.log")
    pms=$(awk -v n="kblock_${f8}_tma_pp" '$1==n && $6 ~ /PASS|FAIL/ {print $7}' "$OUT/gemm_fp8.log")
    r=$(awk -v x="${fpp:-0}" -v y="${ft:-0}" 'BEGIN{if (y>0 && x>0) printf "%.3f", x/y; else print "-"}')
    printf '%-18s %10s %9s %9s %9s %9s %9s %9s %9s %9s %8s\n' "$f8" "${b:--}" "${f:--}" "${fp:--}" "${ft:--}" "${ftp:--}" \
      "${fpp:--}" "${fms:--}" "${pms:--}" "${bms:--}" "$r"
  done
fi
echo "checks: $(grep -c -- '-> PASS' "$OUT/gemm_fp8.log") passed, $(grep -c -- '-> FAIL' "$OUT/gemm_fp8.log") failed (rc $rc); seed $SEED"
exit $rc
