#!/usr/bin/env bash
# tests/gpu/convergence.sh [--build-only | --run-only] [OUTDIR]
# Convergence on biology at each precision (issue 14): a protein masked LM (models/protein_moe_mini.moe, the
# mmseqs2 example proteins) and a DNA causal LM (tests/gpu/dna_moe_mini.moe, the 16S rRNA genes of
# microbiomeutil-data) trained on the GPU with --precision bf16, mxfp8 and fp8-block from the same seed on the
# same data for the same steps; each run's final validation loss against its model's bf16 run:
#   ok     |final - bf16| / bf16 <= 2% (MOEC_CONV_TOL, in %); bf16's own row: it trained, its loss finite
#   FAIL   the run failed, timed out, ended non-finite, or missed the bound
#   info   bf16 from the next seed (MOEC_CONV_NOISE): its difference is the seed's, reported, not checked
#   n/a    the binary could not be built (fp8-block while codegen refuses it on the GPU): the reason given, the
#          other rows still run; once `moec compile --precision fp8-block --arch sm_90a` succeeds, the row runs
# Each binary is compiled with --kernels fast (the sm_90a tensor-core GEMMs and flash attention where the shapes
# and precision qualify; for mxfp8 and fp8-block the expert MLP on the FP8 tensor cores, decisions 38 and 53) and falls back to
# --kernels reference when codegen refuses fast for that precision; the table's kernels column says which.
# Defaults: 500 steps, a validation loss every 25 (20 points on each curve), a log line every 5, seed 1,
# 16 validation batches; about 4 k tokens a step for both models.
# Build (here: make, NVRTC; no GPU needed) writes OUTDIR (default build/gpu-convergence; 31 MiB): moec, the
# six training binaries (kernels embedded for sm_90a, or NAME.na with the reason), libcjson.so.1, the data.
# Run (the GPU machine: a driver, bash, coreutils, awk) writes OUTDIR/logs (the runs' JSONL and output),
# OUTDIR/plots (moec plot of each model's runs, bf16 first) and prints a table last; exit 0 when every row that
# ran is ok.
# Environment: MOEC_CONV_DEVICE=cpu runs everything on the CPU (a check of the script, with a few steps:
# MOEC_CONV_STEPS, MOEC_CONV_EVAL_EVERY, MOEC_CONV_LOG_EVERY, MOEC_CONV_VAL_BATCHES, and MOEC_CONV_ARGS for more
# flags, e.g. "--set seq=128 --batch 2"); MOEC_CONV_SEED; MOEC_CONV_TIMEOUT (seconds a run may take, 70:
# eight runs stay inside a 10-minute command even if each hangs);
# MOEC_CONV_MODELS ("protein dna", or one of them); MOEC_CONV_SEEDS ("1 2 3 4": every precision from each seed,
# each compared with bf16 from its own seed, the check on the mean of those paired differences); MOEC_CONV_NOISE=0 leaves out the bf16 run from seed + 1 (by default one per model: an info row and a curve,
# the spread that the seed alone makes); MOEC_GPU_ARCH (sm_90a; empty: no kernels embedded, NVRTC at start).
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-convergence}
BUILD=${BUILD:-build}
ARCH=${MOEC_GPU_ARCH-sm_90a}
MODELS=${MOEC_CONV_MODELS:-protein dna}
PRECISIONS="bf16 mxfp8 fp8-block"
model_file() { case $1 in protein) echo models/protein_moe_mini.moe;; dna) echo tests/gpu/dna_moe_mini.moe;; esac; }
model_data() { case $1 in protein) echo proteins.fasta.gz;; dna) echo dna.fasta.gz;; esac; }
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 >/dev/null
  rm -rf "$OUT"
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp "$BUILD/moec" "$OUT/bin/moec"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp /usr/share/doc/mmseqs2/example-data/DB.fasta.gz "$OUT/data/proteins.fasta.gz"
  gzip -c /usr/share/microbiomeutil-data/RESOURCES/rRNA16S.gold.fasta >"$OUT/data/dna.fasta.gz"
  set +e
  for m in $MODELS; do
    for p in $PRECISIONS; do
      name=${m}_$p
      arch=()
      [ -n "$ARCH" ] && arch=(--arch "$ARCH")
      # fast kernels where codegen takes them for this precision, else the reference kernels; else n/a
      for k in fast reference; do
        if "$BUILD/moec" compile "$(model_file "$m")" --precision "$p" --kernels "$k" "${arch[@]}" \
             -o "$OUT/bin/$name" >"$OUT/bin/$name.$k.txt" 2>&1; then
          echo "$k" >"$OUT/bin/$name.kernels"
          break
        fi
      done
      if [ ! -f "$OUT/bin/$name.kernels" ]; then
        # the compiler's reason, up to its first colon: "precision fp8-block runs on the CPU backend only for now"
        grep -m1 'error: ' "$OUT/bin/$name.fast.txt" | sed 's/.*error: //; s/:.*//' >"$OUT/bin/$name.na"
        [ -s "$OUT/bin/$name.na" ] || echo "moec compile failed (bin/$name.fast.txt)" >"$OUT/bin/$name.na"
        echo "$name: not built: $(cat "$OUT/bin/$name.na")"
      fi
    done
  done
  # the build itself must work for bf16 and mxfp8
  for m in $MODELS; do for p in bf16 mxfp8; do [ -x "$OUT/bin/${m}_$p" ] || { echo "build failed: ${m}_$p" >&2; exit 1; }; done; done
  du -sh "$OUT"
fi
[ "$MODE" = build ] && exit 0

DEV=${MOEC_CONV_DEVICE:-cuda}
STEPS=${MOEC_CONV_STEPS:-500}
EVAL=${MOEC_CONV_EVAL_EVERY:-$((STEPS / 20 > 0 ? STEPS / 20 : 1))}
LOGE=${MOEC_CONV_LOG_EVERY:-$((STEPS / 100 > 0 ? STEPS / 100 : 1))}
VALB=${MOEC_CONV_VAL_BATCHES:-16}
SEED=${MOEC_CONV_SEED:-1}
TOL=${MOEC_CONV_TOL:-2}
LIMIT=${MOEC_CONV_TIMEOUT:-70}
read -r -a EXTRA <<<"${MOEC_CONV_ARGS:-}"
export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache"
B=$OUT/bin
L=$OUT/logs
P=$OUT/plots
rm -rf "$L" "$P"
mkdir -p "$L" "$P"
rows=()
status=0
# row MODEL PRECISION OK FINAL DELTA TOKENS_PER_S DETAILS
row() { rows+=("$(printf '%-8s %-10s %-5s %-10s %-9s %-9s %s' "$@")"); [ "$3" = ok ] || [ "$3" = n/a ] || [ "$3" = info ] || status=1; }
# last(FILE, KEY): "STEP VALUE" of the last line of a JSONL log that has KEY, or nothing
last() { grep "\"$2\":" "$1" 2>/dev/null | tail -1 | awk -v k="\"$2\":" '{
  s = $0; sub(/.*"step":/, "", s); sub(/[,}].*/, "", s)
  v = $0; i = index(v, k); v = substr(v, i + length(k)); sub(/[,}].*/, "", v); print s, v }'; }
# median tokens/s of a log's lines after the first two (start-up, the CUDA graph's capture)
tps() { grep -o '"tokens_per_s":[0-9.e+]*' "$1" 2>/dev/null | tail -n +3 | cut -d: -f2 | sort -g |
  awk '{a[NR]=$1} END {if (NR) printf "%.0f", a[int((NR+1)/2)]; else print "?"}'; }
finite() { awk -v x="$1" 'BEGIN { exit !(x ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) }'; }

# also bf16 from the next seed (unless MOEC_CONV_NOISE=0), an info row: the spread that the seed alone makes,
# the yardstick for the precisions' differences (its curve is drawn too)
# MOEC_CONV_SEEDS="1 2 3 4": every precision from each seed (no seed+1 run: the seeds are the spread); each
# seed's rows compare with bf16 from the same seed (paired: same initial weights, data order and masks) and are
# info; the check is on the mean of the paired differences, in a summary table per model (mean, sample SD)
SEEDS=${MOEC_CONV_SEEDS:-$SEED}
MULTI=0
[ "$(wc -w <<<"$SEEDS")" -gt 1 ] && MULTI=1
declare -A FINAL=()
RUNS=$PRECISIONS
for m in $MODELS; do
 for SEED in $SEEDS; do
  NOISE_SEED=$((SEED + 1))
  RUNS=$PRECISIONS
  [ "${MOEC_CONV_NOISE:-1}" = 1 ] && [ $MULTI = 0 ] && RUNS="$RUNS bf16/seed$NOISE_SEED"
  sfx=
  [ $MULTI = 1 ] && sfx=_s$SEED
  ref=
  plotted=()
  labels=()
  for p in $RUNS; do
    name=${m}_$p$sfx
    seed=$SEED
    if [ "$p" = "bf16/seed$NOISE_SEED" ]; then
      name=${m}_bf16_seed$NOISE_SEED
      seed=$NOISE_SEED
    fi
    bin=$B/${m}_${p%%/*}
    if [ -f "$bin.na" ]; then
      row "$m" "$p" n/a - - - "($(cat "$bin.na"))"
      continue
    fi
    t0=$(date +%s)
    timeout "$LIMIT" "$bin" --device "$DEV" --data "$OUT/data/$(model_data "$m")" --steps "$STEPS" --seed "$seed" \
      --eval-every "$EVAL" --log-every "$LOGE" --val-batches "$VALB" "${EXTRA[@]}" --log "$L/$name.jsonl" \
      >"$L/$name.log" 2>&1
    rc=$?
    wall=$(($(date +%s) - t0))
    read -r vstep val <<<"$(last "$L/$name.jsonl" val_loss)"
    nval=$(grep -c '"val_loss":' "$L/$name.jsonl" 2>/dev/null)
    tok=$(tps "$L/$name.jsonl")
    info="kernels $(cat "$bin.kernels"); ${nval:-0} evaluations, the last at step ${vstep:-none}; ${wall} s"
    if [ $rc -ne 0 ] || [ "${vstep:-}" != "$STEPS" ] || ! finite "${val:-x}"; then
      why="rc $rc$([ $rc -eq 124 ] && echo " (timed out after $LIMIT s)")"
      finite "${val:-x}" && val=$(printf '%.4f' "$val")
      row "$m" "$p" "$([ "$seed" = "$SEED" ] && echo FAIL || echo info)" "${val:-none}" - "$tok" \
        "$why; $info; $(grep -m1 -i 'error' "$L/$name.log" | cut -c1-100)"
      [ "$p" = bf16 ] && ref=failed
      continue
    fi
    plotted+=("$L/$name.jsonl")
    labels+=(--label "$p")
    v4=$(printf '%.4f' "$val")
    FINAL[$m,$p,$seed]=$val
    if [ "$p" = bf16 ]; then
      ref=$val
      row "$m" "$p${sfx:+/s$seed}" ok "$v4" reference "$tok" "$info"
    elif [ -z "$ref" ] || [ "$ref" = failed ]; then
      row "$m" "$p" "$([ "$seed" = "$SEED" ] && echo FAIL || echo info)" "$v4" - "$tok" "no bf16 run to compare with; $info"
    elif [ "$seed" != "$SEED" ]; then
      d=$(awk -v a="$val" -v b="$ref" 'BEGIN { printf "%+.2f%%", (a - b) / b * 100 }')
      row "$m" "$p" info "$v4" "$d" "$tok" "the seed's spread, not checked; $info"
    else
      d=$(awk -v a="$val" -v b="$ref" 'BEGIN { printf "%+.2f%%", (a - b) / b * 100 }')
      okd=$(awk -v a="$val" -v b="$ref" -v t="$TOL" 'BEGIN { d = (a - b) / b * 100; print (d <= t && d >= -t) ? "ok" : "FAIL" }')
      if [ $MULTI = 1 ]; then
        row "$m" "$p/s$seed" info "$v4" "$d" "$tok" "paired with bf16 seed $seed; the check is on the mean below; $info"
      else
        row "$m" "$p" "$okd" "$v4" "$d" "$tok" "bound +-$TOL%; $info"
      fi
    fi
  done
  # the curves: every run of this model that finished, bf16 first (the reference of the plot's table)
  [ ${#plotted[@]} -ge 2 ] || labels=()
  if [ ${#plotted[@]} -ge 1 ]; then
    "$B/moec" plot "${plotted[@]}" "${labels[@]}" -o "$P/${m}_convergence$sfx.svg" \
      --title "$m: validation loss by precision ($STEPS steps, seed $SEED)" >"$L/plot_$m$sfx.log" 2>&1
    row "$m" plot "$([ $? -eq 0 ] && echo ok || echo FAIL)" - - - "plots/${m}_convergence$sfx.svg: $(tail -1 "$L/plot_$m$sfx.log")"
  fi
 done
done

# several seeds: per model and precision the mean and sample SD of the final validation loss over the seeds that
# finished, and the mean (SD) of the paired differences against bf16 from the same seed; ok when that mean is
# within the bound
summary=()
if [ $MULTI = 1 ]; then
  for m in $MODELS; do
    for p in $PRECISIONS; do
      vals= diffs=
      for s in $SEEDS; do
        v=${FINAL[$m,$p,$s]:-}
        [ -n "$v" ] || continue
        vals="$vals $v"
        r=${FINAL[$m,bf16,$s]:-}
        [ -n "$r" ] && diffs="$diffs $(awk -v a="$v" -v b="$r" 'BEGIN { printf "%.6f", (a - b) / b * 100 }')"
      done
      line=$(awk -v m="$m" -v p="$p" -v vals="$vals" -v diffs="$diffs" -v t="$TOL" -v want="$(wc -w <<<"$SEEDS")" 'BEGIN {
        n = split(vals, v, " "); nd = split(diffs, d, " ")
        s = 0; for (i = 1; i <= n; i++) s += v[i]; mean = n ? s / n : 0
        q = 0; for (i = 1; i <= n; i++) q += (v[i] - mean) ^ 2; sd = n > 1 ? sqrt(q / (n - 1)) : 0
        s = 0; for (i = 1; i <= nd; i++) s += d[i]; dm = nd ? s / nd : 0
        q = 0; for (i = 1; i <= nd; i++) q += (d[i] - dm) ^ 2; dsd = nd > 1 ? sqrt(q / (nd - 1)) : 0
        if (p == "bf16") { ok = (n == want) ? "ok" : "FAIL"; dd = "reference" }
        else { ok = (nd == want && dm <= t && dm >= -t) ? "ok" : "FAIL"; dd = sprintf("%+.2f%% (SD %.2f)", dm, dsd) }
        printf "%-8s %-10s %-5s %d/%d seeds  mean %.4f  SD %.4f (%.2f%% of the mean)  paired vs bf16 %s",
               m, p, ok, n, want, mean, sd, mean ? 100 * sd / mean : 0, dd }')
      summary+=("$line")
      case $line in *" FAIL "*) status=1;; esac
    done
  done
fi

tar -C "$OUT" -czf "$OUT/logs.tgz" logs plots
echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1
echo "device $DEV, $STEPS steps, eval every $EVAL, seed${MULTI:+s} $SEEDS${EXTRA[*]:+, ${EXTRA[*]}}"
printf '%-8s %-10s %-5s %-10s %-9s %-9s %s\n' model precision ok "final val" "vs bf16" "tokens/s" details
printf '%s\n' "${rows[@]}"
if [ ${#summary[@]} -gt 0 ]; then
  echo
  echo "over the seeds $SEEDS (the check: the mean paired difference within +-$TOL%)"
  printf '%s\n' "${summary[@]}"
fi
exit $status
