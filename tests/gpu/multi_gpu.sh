#!/usr/bin/env bash
# tests/gpu/multi_gpu.sh [--build-only | --run-only] [OUTDIR]
# Training over NCCL, one process per GPU (--nproc N --device cuda), on a machine with N >= 2 GPUs:
#   epN       mixtral_tiny compiled --ep N (2, 4 as the GPUs allow), N processes: per-step losses over 50 steps =
#             the single-GPU run's
#   dpN       mixtral_tiny (ep 1) on N processes (data parallel): the same
#   syncN     the epN run (MOEC_SYNC_CHECK=1): no host wait and no device-to-host copy inside any step of any
#             rank, each step one CUDA graph with the NCCL calls in it (captured at steps 1-2, replayed after)
#   hostN     the same with MOEC_HOST_COLLECTIVES=1 (NCCL called synchronously, split sizes read back, no graph):
#             its steps do wait (the counter works), losses equal the device path's (decision 46)
#   speed     protein_moe_mini --ep N on N GPUs vs one GPU with the same tokens per GPU: tokens/s per GPU, with
#             the collectives in the graph (fixed-capacity slots) and on the host path (exact sizes, synchronous)
#   comm      tests/gpu/test_comm_nccl.c on 2 GPUs: every NCCL collective, and the steps' asynchronous entries in a graph
#   kill      rank 1 killed with SIGKILL mid-run: the job stops with a message naming it; --resume continues
# N = the number of visible GPUs (MOEC_GPUS overrides). NCCL_NVLS_ENABLE=0 (NVLink multicast off).
# Build here (OUTDIR default build/gpu-multi), run on the GPU machine; a table is printed last.
set -uo pipefail
MODE=all
case "${1:-}" in --build-only) MODE=build; shift;; --run-only) MODE=run; shift;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${1:-$ROOT/build/gpu-multi}
BUILD=${BUILD:-build}
ARCH=${MOEC_GPU_ARCH:-sm_90a}
DATA_SRC=${MOEC_DATA:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
cd "$ROOT"
if [ "$MODE" != run ]; then
  set -e
  make BUILD="$BUILD" -j2 >/dev/null
  mkdir -p "$OUT/lib" "$OUT/bin" "$OUT/data"
  cp "$BUILD/moec" "$OUT/bin/moec"
  cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" "$OUT/lib/libcjson.so.1"
  cp "$DATA_SRC" "$OUT/data/proteins.fasta.gz"
  cp tests/train/compare_losses.sh "$OUT/bin/"
  for ep in 1 2 4 8; do
    # mixtral_tiny has 4 experts: ep 8 uses protein_moe_mini (8 experts) only
    [ $ep -le 4 ] && "$BUILD/moec" compile models/mixtral_tiny.moe --kernels reference --ep $ep -o "$OUT/bin/mixtral_tiny_ep$ep" --arch "$ARCH" >/dev/null
    "$BUILD/moec" compile models/protein_moe_mini.moe --kernels reference --ep $ep -o "$OUT/bin/mini_ep$ep" --arch "$ARCH" >/dev/null
  done
  # the NCCL transport's own test (cudart linked statically: nothing to find on the GPU machine)
  cc -std=c11 -D_GNU_SOURCE -O2 -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$OUT/bin/test_comm_nccl" \
     tests/gpu/test_comm_nccl.c runtime/comm/comm.c runtime/comm/comm_sim.c runtime/comm/comm_tcp.c \
     runtime/comm/comm_wire.c runtime/comm/comm_nccl.c train/launch.c util/*.c \
     -L"${CUDA_HOME:-/usr/local/cuda}/lib64" -lcudart_static -lrt -lpthread -ldl -lm
  set +e
fi
[ "$MODE" = build ] && exit 0

export LD_LIBRARY_PATH="$OUT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MOEC_CACHE_DIR="$OUT/cache" NCCL_NVLS_ENABLE=0
B=$OUT/bin
L=$OUT/logs
rm -rf "$L"
mkdir -p "$L"
DATA=$OUT/data/proteins.fasta.gz
N=${MOEC_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
rows=()
status=0
row() { rows+=("$(printf '%-8s %-5s %s' "$1" "$2" "$3")"); [ "$2" = ok ] || status=1; }
med() { grep -o '"tokens_per_s":[0-9.e+]*' "$1" | tail -n +4 | cut -d: -f2 | sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.0f", a[int((NR+1)/2)]; else print 0}'; }
common=(--data "$DATA" --eval-every 0 --log-every 1 --device cuda)
[ "$N" -ge 2 ] || { echo "needs 2 or more GPUs, found $N"; exit 1; }

# the transport alone: every collective on every group, and the asynchronous entries of the steps captured in
# a CUDA graph (enqueue_alltoall, enqueue_allreduce, wait_device)
"$B/test_comm_nccl" 2 2 >"$L/comm.log" 2>&1
crc=$?
row comm "$([ $crc -eq 0 ] && grep -q 'all ranks passed' "$L/comm.log" && echo ok || echo FAIL)" "$(grep -h '^rank [0-9]*: [0-9]* passed' "$L/comm.log" | paste -sd';' -)"

"$B/mixtral_tiny_ep1" "${common[@]}" --steps 50 --log "$L/single.jsonl" >"$L/single.log" 2>&1
for ep in 2 4; do
  [ "$ep" -le "$N" ] || continue
  MOEC_SYNC_CHECK=1 MOEC_DEVICE_COLLECTIVES=1 "$B/mixtral_tiny_ep$ep" "${common[@]}" --steps 50 --nproc "$ep" --log "$L/ep$ep.jsonl" >"$L/ep$ep.log" 2>&1
  rc=$?
  "$B/compare_losses.sh" "$L/single.jsonl" "$L/ep$ep.jsonl" 1e-5 >"$L/ep${ep}_cmp.log" 2>&1
  c=$?
  row "ep$ep" "$([ $rc -eq 0 ] && [ $c -eq 0 ] && echo ok || echo FAIL)" "rc=$rc, $(tail -1 "$L/ep${ep}_cmp.log") vs 1 GPU; $(grep -o 'collectives: .*' "$L/ep$ep.log")"
  # every rank prints a line per step: 0 waits, 0 copies; two captures per rank, then replays
  n=$(grep -c '^sync check: ' "$L/ep$ep.log")
  bad=$(grep '^sync check: ' "$L/ep$ep.log" | grep -vc ': 0 stream waits, 0 device-to-host copies in the step;')
  cap=$(grep -c '^sync check: .*captured as one CUDA graph' "$L/ep$ep.log")
  rep=$(grep -c '^sync check: .*one CUDA graph replayed' "$L/ep$ep.log")
  row "sync$ep" "$([ $rc -eq 0 ] && [ "$n" -eq $((ep * 50)) ] && [ "$bad" -eq 0 ] && [ "$cap" -eq $((2 * ep)) ] && [ "$rep" -eq $((ep * 48)) ] && echo ok || echo FAIL)" "$n step lines ($ep ranks x 50 steps), $bad with a host wait or copy; graphs captured $cap, replayed $rep"
  MOEC_SYNC_CHECK=1 MOEC_HOST_COLLECTIVES=1 "$B/mixtral_tiny_ep$ep" "${common[@]}" --steps 50 --nproc "$ep" --log "$L/ep${ep}_host.jsonl" >"$L/ep${ep}_host.log" 2>&1
  hrc=$?
  "$B/compare_losses.sh" "$L/ep${ep}_host.jsonl" "$L/ep$ep.jsonl" 1e-5 >"$L/ep${ep}_host_cmp.log" 2>&1
  hc=$?
  hw=$(grep '^sync check: ' "$L/ep${ep}_host.log" | grep -c ': 0 stream waits')
  row "host$ep" "$([ $hrc -eq 0 ] && [ $hc -eq 0 ] && [ "$hw" -eq 0 ] && grep -q '^sync check: ' "$L/ep${ep}_host.log" && echo ok || echo FAIL)" "host path vs device path: $(tail -1 "$L/ep${ep}_host_cmp.log"); host path steps without a wait: $hw; $(grep -m1 -o '[0-9]* stream waits, [0-9]* device-to-host copies' "$L/ep${ep}_host.log") per step"
done
"$B/mixtral_tiny_ep1" "${common[@]}" --steps 50 --nproc "$N" --log "$L/dp$N.jsonl" >"$L/dp$N.log" 2>&1
rc=$?
"$B/compare_losses.sh" "$L/single.jsonl" "$L/dp$N.jsonl" 1e-5 >"$L/dp_cmp.log" 2>&1
c=$?
row "dp$N" "$([ $rc -eq 0 ] && [ $c -eq 0 ] && echo ok || echo FAIL)" "rc=$rc, $(tail -1 "$L/dp_cmp.log") vs 1 GPU"

# throughput: the same tokens per GPU (the global batch of N GPUs is N x the single GPU's)
ep=$N
[ -x "$B/mini_ep$ep" ] || ep=2
"$B/mini_ep1" "${common[@]}" --steps 40 --batch 8 --log "$L/speed1.jsonl" >"$L/speed1.log" 2>&1
MOEC_DEVICE_COLLECTIVES=1 "$B/mini_ep$ep" "${common[@]}" --steps 40 --batch $((8 * ep)) --nproc "$ep" --log "$L/speedN.jsonl" >"$L/speedN.log" 2>&1
rc=$?
MOEC_HOST_COLLECTIVES=1 "$B/mini_ep$ep" "${common[@]}" --steps 40 --batch $((8 * ep)) --nproc "$ep" --log "$L/speedN_host.jsonl" >"$L/speedN_host.log" 2>&1
s1=$(med "$L/speed1.jsonl"); sN=$(med "$L/speedN.jsonl"); sH=$(med "$L/speedN_host.jsonl")
ratio=$(awk -v a="$s1" -v b="$sN" -v n="$ep" 'BEGIN { if (a > 0) printf "%.3f", b / n / a; else print 0 }')
hratio=$(awk -v a="$s1" -v b="$sH" -v n="$ep" 'BEGIN { if (a > 0) printf "%.3f", b / n / a; else print 0 }')
row speed "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "protein_moe_mini 8 seq/GPU: 1 GPU $s1 tok/s, ep $ep on $ep GPUs $sN tok/s = $(awk -v b="$sN" -v n="$ep" 'BEGIN{printf "%.0f", b/n}') per GPU (${ratio} of 1 GPU; host path $sH tok/s, ${hratio}); $(grep -o 'collectives: .*' "$L/speedN_host.log")"

# a rank killed mid-run, then --resume
"$B/mixtral_tiny_ep2" --data "$DATA" --device cuda --steps 400 --log-every 1 --eval-every 0 --nproc 2 \
    --ckpt-dir "$L/ck" --ckpt-every 5 --log "$L/kill.jsonl" >"$L/kill.out" 2>"$L/kill.err" &
launcher=$!
for _ in $(seq 1 6000); do grep -q '"step":3[0-9]' "$L/kill.jsonl" 2>/dev/null && break; sleep 0.01; done
victim=$(pgrep -P $launcher | sed -n 2p)
kill -9 "$victim"
for _ in $(seq 1 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
hung=0
if kill -0 $launcher 2>/dev/null; then hung=1; kill -9 $launcher; pkill -9 -f mixtral_tiny_ep2; fi
wait $launcher
krc=$?
"$B/mixtral_tiny_ep2" --data "$DATA" --device cuda --steps 60 --log-every 10 --eval-every 0 --nproc 2 \
    --ckpt-dir "$L/ck" --resume >"$L/resume.out" 2>&1
rrc=$?
msg=$(grep -o 'rank 1 ([^)]*) was killed by signal 9[^;]*' "$L/kill.err" | head -1)
row kill "$([ $hung -eq 0 ] && [ $krc -ne 0 ] && [ -n "$msg" ] && [ $rrc -eq 0 ] && grep -q 'resumed from' "$L/resume.out" && echo ok || echo FAIL)" "hung=$hung rc=$krc '$msg'; resume rc=$rrc: $(grep -o 'resumed from .*' "$L/resume.out" | sed 's|.*/||')"

tar -C "$OUT" -czf "$OUT/logs.tgz" logs
echo
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
printf '%-8s %-5s %s\n' check ok details
printf '%s\n' "${rows[@]}"
exit $status
