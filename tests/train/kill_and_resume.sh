#!/usr/bin/env bash
# kill_and_resume.sh TRAIN DIR: starts a 100-step run that checkpoints every
# 10 steps, kills it with SIGKILL once it has logged step 50 or later, checks
# that it died mid-run, then resumes it to step 100.
set -u
train=$1 dir=$2
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
"$train" --data $data --steps 100 --threads 1 --eval-every 0 --log-every 1 \
    --ckpt-dir "$dir/killed" --ckpt-every 10 --log "$dir/killed.jsonl" > "$dir/killed1.out" &
pid=$!
for _ in $(seq 1 3000); do
    if grep -q '"step":5[0-9]' "$dir/killed.jsonl" 2>/dev/null; then break; fi
    sleep 0.01
done
kill -9 $pid
wait $pid 2>/dev/null
status=$?
if [ $status -ne 137 ]; then
    echo "the first run was not killed mid-run (exit status $status)" >&2
    exit 1
fi
last=$(grep -o '"step":[0-9]*' "$dir/killed.jsonl" | tail -n 1)
echo "killed after $last" >&2
"$train" --data $data --steps 100 --threads 1 --eval-every 0 --log-every 1 \
    --ckpt-dir "$dir/killed" --ckpt-every 10 --log "$dir/killed.jsonl" --resume > "$dir/killed2.out" || exit 1
grep -q "resumed from" "$dir/killed2.out"
