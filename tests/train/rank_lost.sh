#!/usr/bin/env bash
# rank_lost.sh TRAIN DIR: two ranks started by hand (MOEC_RANK, as on two
# hosts); rank 1 is killed with SIGKILL mid-run. Rank 0 must exit promptly
# with status 1 and a message (a lost peer is an expected failure, not
# abort() and "internal error"). Prints rank 0's errors and "status N".
set -u
train=$1 dir=$2
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
port=$((20000 + RANDOM % 30000))
export MOEC_WORLD_SIZE=2 MOEC_MASTER_ADDR=127.0.0.1 MOEC_MASTER_PORT=$port MOEC_COMM_TIMEOUT=30
MOEC_RANK=0 "$train" --data $data --steps 100000 --log-every 1 --eval-every 0 --threads 1 --device cpu \
    --log "$dir/r0.jsonl" > "$dir/r0.out" 2> "$dir/r0.err" &
r0=$!
MOEC_RANK=1 "$train" --data $data --steps 100000 --log-every 1 --eval-every 0 --threads 1 --device cpu \
    > "$dir/r1.out" 2>&1 &
r1=$!
for _ in $(seq 1 3000); do
    grep -q '"step":3' "$dir/r0.jsonl" 2>/dev/null && break
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
