#!/usr/bin/env bash
# stop_signal.sh TRAIN DIR NAME SIGNALS [FLAGS...]: starts a long run with
# --ckpt-dir DIR/NAME and --log DIR/NAME.jsonl, sends SIGNALS (e.g. TERM, or
# INT,TERM: the second at once after the first) once step 3 is logged, and
# prints the run's exit status ("status N") after its output and errors.
set -u
train=$1 dir=$2 name=$3 sigs=$4
shift 4
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
"$train" --data $data --steps 100000 --eval-every 0 --log-every 1 --device cpu \
    --ckpt-dir "$dir/$name" --log "$dir/$name.jsonl" "$@" > "$dir/$name.out" 2> "$dir/$name.err" &
pid=$!
for _ in $(seq 1 3000); do
    if grep -q '"step":3' "$dir/$name.jsonl" 2>/dev/null; then break; fi
    sleep 0.01
done
for s in ${sigs//,/ }; do
    kill -s "$s" $pid
done
wait $pid
status=$?
cat "$dir/$name.out" "$dir/$name.err"
echo "status $status"
