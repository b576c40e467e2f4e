#!/usr/bin/env bash
# kill_a_rank.sh TRAIN DIR: a 2-process run in which rank 1 is killed with
# SIGKILL mid-run must end promptly (no hang in a collective), with a
# non-zero status and a message naming the rank; then --resume continues
# from the last checkpoint.
set -u
train=$1 dir=$2
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
"$train" --data $data --steps 400 --log-every 1 --eval-every 0 --nproc 2 --ckpt-dir "$dir/ck" --ckpt-every 5 \
    --log "$dir/run.jsonl" > "$dir/run.out" 2> "$dir/run.err" &
launcher=$!
for _ in $(seq 1 3000); do
    grep -q '"step":1[0-9]' "$dir/run.jsonl" 2>/dev/null && break
    sleep 0.01
done
victim=$(pgrep -P $launcher | sed -n 2p)
[ -n "$victim" ] || { echo "no rank process found" >&2; exit 1; }
kill -9 "$victim"
# the launcher must give up within seconds, not hang
for _ in $(seq 1 300); do
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
done
if kill -0 $launcher 2>/dev/null; then
    echo "the run hangs after a rank died" >&2
    kill -9 $launcher
    exit 1
fi
wait $launcher
status=$?
[ $status -ne 0 ] || { echo "the run exited 0 although a rank was killed" >&2; exit 1; }
cat "$dir/run.err"
"$train" --data $data --steps 30 --eval-every 0 --nproc 2 --ckpt-dir "$dir/ck" --resume > "$dir/resume.out" || exit 1
grep "resumed from" "$dir/resume.out"
