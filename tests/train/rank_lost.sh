#!/usr/bin/env bash
# rank_lost.sh TRAIN DIR [MOEC]: two ranks started by hand (MOEC_RANK, as on two
# hosts); rank 1 is killed with SIGKILL mid-run. Rank 0 must exit promptly
# with status 1 and a message (a lost peer is an expected failure, not
# abort() and "internal error"). Rank 0 checkpoints every 2 steps: the
# checkpoint it leaves must load, and two new ranks must resume from it.
# Prints rank 0's errors, "status N", the checkpoint's step and the resumed
# ranks' statuses.
set -u
train=$1 dir=$2 moec=${3:-moec}
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
port=$((20000 + RANDOM % 30000))
export MOEC_WORLD_SIZE=2 MOEC_MASTER_ADDR=127.0.0.1 MOEC_MASTER_PORT=$port MOEC_COMM_TIMEOUT=30
MOEC_RANK=0 "$train" --data $data --steps 100000 --log-every 1 --eval-every 0 --threads 1 --device cpu \
    --ckpt-dir "$dir/ck" --ckpt-every 2 --log "$dir/r0.jsonl" > "$dir/r0.out" 2> "$dir/r0.err" &
r0=$!
MOEC_RANK=1 "$train" --data $data --steps 100000 --log-every 1 --eval-every 0 --threads 1 --device cpu \
    --ckpt-dir "$dir/ck" --ckpt-every 2 > "$dir/r1.out" 2>&1 &
r1=$!
for _ in $(seq 1 3000); do
    grep -q '"step":5' "$dir/r0.jsonl" 2>/dev/null && break
    sleep 0.01
done
kill -9 $r1
for _ in $(seq 1 300); do
    kill -0 $r0 2>/dev/null || break
    sleep 0.1
done
if kill -0 $r0 2>/dev/null; then
    echo "rank 0 hangs after rank 1 died" >&2
    kill -9 $r0
fi
wait $r0
status=$?
cat "$dir/r0.err"
echo "status $status"
# the checkpoint rank 0 left: it loads, and a new pair of ranks resumes from it
"$moec" ckpt-diff "$dir/ck/checkpoint.safetensors" "$dir/ck/checkpoint.safetensors" > /dev/null || echo "the checkpoint does not load"
step=$(head -c 4096 "$dir/ck/checkpoint.safetensors" | grep -a -o '"step":"[0-9]*"' | tr -dc 0-9)
echo "checkpoint at step $step"
export MOEC_MASTER_PORT=$((port + 1))
for r in 0 1; do
    MOEC_RANK=$r "$train" --data $data --steps $((step + 2)) --eval-every 0 --threads 1 --device cpu \
        --ckpt-dir "$dir/ck" --ckpt-every 2 --resume > "$dir/resume$r.out" 2>&1 &
    pids[$r]=$!
done
for r in 0 1; do
    wait ${pids[$r]}
    echo "resumed rank $r status $?"
done
grep -h "resumed from" "$dir/resume0.out"
