#!/usr/bin/env bash
# tests/gpu/gemm_sm90.sh [--build-only | --run-only] [OUTDIR]
# Checks and times the sm_90a bf16 grouped GEMM (codegen/gemm_sm90.cuh) with tests/gpu/gemm_sm90.c,
# and times torch._grouped_mm at the same shapes in the same run (bench/gemm_anchor.py). Not part
# of `make test` (tests/unit/test_gemm_sm90.c is: NVRTC compile + scheduler, on the CPU).
#
# Build (needs make, a C compiler, libnvrtc; no GPU): builds the few objects it links from BUILD
# (default build; e.g. BUILD=build-gemm), links OUTDIR/gemm_sm90 and NVRTC-compiles every
# configuration into OUTDIR/NAME.cubin (+ NAME.cu). Run (needs a Hopper GPU and libcuda.so.1; python3
# with torch for the anchor): checks and times every configuration, then torch; logs in OUTDIR, a
# table last. On a GPU machine without the toolchain build elsewhere, carry OUTDIR, pass --run-only.
# OUTDIR defaults to BUILD/gpu-gemm-sm90. SEED (environment) fixes the inputs; default: the time.
# GEMM_SM90_ONLY="name name" runs only those configurations. The *_pp configurations are the ping-pong
# schedule with 128 x 128 tiles per consumer warpgroup, *_pp64 with 64 x 256 (decision 49), timed beside the
# cooperative ones in the "pingpong" and "pp64" columns.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${BUILD:-build}
OUT=${1:-$ROOT/$BUILD/gpu-gemm-sm90}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  nvrtc_dir=runtime/gpu; [ -f runtime/gpu/nvrtc.c ] || nvrtc_dir=codegen
  objs=("$BUILD/obj/plan/gemm_sm90.o" "$BUILD/obj/codegen/gemm_sm90.o" "$BUILD/obj/runtime/gpu/tma.o"
        "$BUILD/obj/$nvrtc_dir/nvrtc.o" "$BUILD/obj/runtime/gpu/cudrv.o" "$BUILD/gen/cuda_prelude.o")
  make -j2 BUILD="$BUILD" "${objs[@]}" >/dev/null
  mkdir -p "$OUT"
  cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra ${WERROR:+-Werror} -I"$nvrtc_dir" -c tests/gpu/gemm_sm90.c \
     -o "$OUT/gemm_sm90.o"
  cc -o "$OUT/gemm_sm90" "$OUT/gemm_sm90.o" "${objs[@]}" -lm -lpthread -ldl
  "$OUT/gemm_sm90" --emit "$OUT"
  set +e
fi
[ "$MODE" = build ] && exit 0
SEED=${SEED:-$(date +%s)}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader 2>/dev/null
timeout "${GEMM_SM90_TIMEOUT:-480}" "$OUT/gemm_sm90" --run "$OUT" "$SEED" >"$OUT/gemm.log" 2>&1
rc=$?
cat "$OUT/gemm.log" | grep -v '^MOEC_ANCHOR'
PYTHONUNBUFFERED=1 python3 bench/gemm_anchor.py "$SEED" >"$OUT/torch.log" 2>&1
cat "$OUT/torch.log"
echo
printf '%-16s %9s %9s %9s %9s %9s %9s %10s %8s %10s\n' anchor "moec" "pingpong" "pp64" "BN128" "st16" "torch" \
    "moec/torch" "pp/torch" "best/torch"
for a in mixtral_gate_up mixtral_down bio_up bio_down dense_8192; do
  get() { awk -v n="$1" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log"; }
  m256=$(get "$a"); mpp=$(get "${a}_pp"); m64=$(get "${a}_pp64"); m128=$(get "${a}_bn128"); m16=$(get "${a}_st16")
  tn=$a; [ "$a" = dense_8192 ] && tn=mm_8192
  t=$(awk -v n="$tn" '$1=="TORCH" && $2==n {print $3}' "$OUT/torch.log")
  r=$(awk -v x="${m256:-0}" -v t="${t:-0}" 'BEGIN{if (t>0) printf "%.3f", x/t; else print "-"}')
  rp=$(awk -v x="${mpp:-0}" -v t="${t:-0}" 'BEGIN{if (t>0 && x>0) printf "%.3f", x/t; else print "-"}')
  rb=$(awk -v x="${m256:-0}" -v y="${m128:-0}" -v z="${m16:-0}" -v p="${mpp:-0}" -v q="${m64:-0}" -v t="${t:-0}" \
      'BEGIN{b=x>y?x:y; b=b>z?b:z; b=b>p?b:p; b=b>q?b:q; if (t>0) printf "%.3f", b/t; else print "-"}')
  printf '%-16s %9s %9s %9s %9s %9s %9s %10s %8s %10s\n' "$a" "${m256:--}" "${mpp:--}" "${m64:--}" "${m128:--}" \
      "${m16:--}" "${t:--}" "$r" "$rp" "$rb"
done
printf '%-22s %11s %11s %11s %11s %9s\n' "weight gradient" "moec (fp32)" "TMA stores" "pingpong" "torch(bf16)" \
    "best/torch"
for a in mixtral_gate_up mixtral_down bio_up bio_down; do
  m=$(awk -v n="wgrad_$a" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  mt=$(awk -v n="wgrad_${a}_tma" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  mp=$(awk -v n="wgrad_${a}_pp" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  t=$(awk -v n="wgrad_$a" '$1=="TORCH" && $2==n {print $3}' "$OUT/torch.log")
  r=$(awk -v x="${m:-0}" -v y="${mt:-0}" -v p="${mp:-0}" -v t="${t:-0}" \
      'BEGIN{b=x>y?x:y; b=b>p?b:p; if (t>0 && b>0) printf "%.3f", b/t; else print "-"}')
  printf '%-22s %11s %11s %11s %11s %9s\n' "wgrad_$a" "${m:--}" "${mt:--}" "${mp:--}" "${t:--}" "$r"
done
printf '%-22s %11s %9s %9s\n' "data gradient (trans_b)" "moec TFLOP/s" "pingpong" "pp64"
for a in mixtral_da_tb mixtral_dxs_tb bio_da_tb bio_dxs_tb; do
  m=$(awk -v n="$a" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  mp=$(awk -v n="${a}_pp" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  m64=$(awk -v n="${a}_pp64" '$1=="MOEC_ANCHOR" && $2==n {print $3}' "$OUT/gemm.log")
  printf '%-22s %11s %9s %9s\n' "$a" "${m:--}" "${mp:--}" "${m64:--}"
done
echo "checks: $(grep -c 'PASS$' "$OUT/gemm.log" 2>/dev/null) passed, $(grep -c -- '-> FAIL' "$OUT/gemm.log") failed (rc $rc); seed $SEED"
exit $rc
