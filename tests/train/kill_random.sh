#!/usr/bin/env bash
# kill_random.sh TRAIN MOEC DIR [KILLS]: the fault suite's kill -9 loop.
#
# A run that checkpoints every step (the checkpoint write, with its fsync, is
# most of a step) is started, SIGKILLed after a random delay, and started
# again with --resume, KILLS times (default 20); then it runs to the end.
# After every kill the checkpoint directory must hold a checkpoint that moec
# loads (`moec ckpt-diff` of it with itself: every tensor read and checked
# finite; the next --resume loads it with the training binary's own loader),
# never an older step than before, never none once there was one; the
# --keep-last copies must load too. A kill inside a write leaves a temporary
# file, which a later start must remove (the final one says so). At the end the
# checkpoint must be byte-identical to that of a run never killed, and no
# temporary file may remain. At least one kill must land inside a write:
# the loop goes on, up to 3 x KILLS kills, until one does, and those extra
# runs pause each save halfway for 300 ms (MOEC_FAULT_SAVE_PAUSE_MS, the
# writer's fault-injection hook) so that a kill lands in one on any machine. Prints one line per kill and a summary;
# KILL_SEED=N replays a sequence of delays.
set -u
train=$1 moec=$2 dir=$3 kills=${4:-20}
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
steps=500
seed=${KILL_SEED:-$(( $(date +%s%N) % 100000 ))}
RANDOM=$seed
echo "kill_random: seed $seed (KILL_SEED=$seed replays the delays)"
base=(--data $data --threads 1 --eval-every 0 --log-every 1 --ckpt-every 1 --keep-last 3)
args=("${base[@]}" --steps $steps)
fail() { echo "kill_random: FAIL (seed $seed): $*" >&2; exit 1; }

mkdir -p "$dir"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
t0=$(ms)
"$train" "${base[@]}" --steps 1 --ckpt-dir "$dir/start" > /dev/null || fail "a one-step run failed"
t1=$(ms)
"$train" "${args[@]}" --ckpt-dir "$dir/straight" > "$dir/straight.out" || fail "the straight run failed"
t2=$(ms)
# the delays: from 0 to past the start (S ms, measured) by a 32nd of the run, whatever the build's speed
start=$(( t1 - t0 )) window=$(( (t2 - t1 - (t1 - t0)) / 32 ))
[ $window -gt 20 ] || window=20
echo "kill_random: start ${start} ms, delays 10 to $(( start + window + 10 )) ms"

ck=$dir/killed
mkdir -p "$ck"
prev=-1      # the step of the checkpoint after the last kill (-1: none yet)
in_write=0   # kills that left a temporary file: they hit a checkpoint write
completed=0
ckpt_step() {
    head -c 4096 "$1" | grep -a -o '"step":"[0-9]*"' | head -n 1 | tr -dc 0-9
}
for i in $(seq 1 $(( kills * 3 ))); do
    # KILLS kills, and more (up to three times as many) until one lands inside a write
    [ "$i" -gt "$kills" ] && [ $in_write -gt 0 ] && break
    resume=()
    [ -e "$ck/checkpoint.safetensors" ] && resume=(--resume)
    delay=$(( RANDOM % (start + window) + 10 ))
    pause=0
    [ "$i" -gt "$kills" ] && pause=300
    MOEC_FAULT_SAVE_PAUSE_MS=$pause "$train" "${args[@]}" --ckpt-dir "$ck" "${resume[@]}" > "$dir/run$i.out" 2>&1 &
    pid=$!
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2> /dev/null
    status=$?
    if [ $status -eq 0 ]; then
        completed=1
        echo "kill $i: ${delay} ms: the run had already finished"
        break
    fi
    [ $status -eq 137 ] || { cat "$dir/run$i.out" >&2; fail "run $i exited with status $status, not 137 (SIGKILL)"; }
    tmp=0
    [ -e "$ck/checkpoint.safetensors.tmp.$pid" ] && tmp=1 && in_write=$((in_write + 1))
    if [ ! -e "$ck/checkpoint.safetensors" ]; then
        [ $prev -lt 0 ] || fail "kill $i: checkpoint.safetensors is gone (it held step $prev)"
        echo "kill $i: ${delay} ms: no checkpoint yet"
        continue
    fi
    "$moec" ckpt-diff "$ck/checkpoint.safetensors" "$ck/checkpoint.safetensors" > "$dir/diff$i.out" 2>&1 ||
        { cat "$dir/diff$i.out" >&2; fail "kill $i: the checkpoint does not load"; }
    for kept in "$ck"/checkpoint-*.safetensors; do
        [ -e "$kept" ] || continue
        "$moec" ckpt-diff "$kept" "$kept" > /dev/null 2>&1 || fail "kill $i: $kept does not load"
    done
    step=$(ckpt_step "$ck/checkpoint.safetensors")
    [ -n "$step" ] || fail "kill $i: no step in the checkpoint's metadata"
    [ "$step" -ge $prev ] || fail "kill $i: the checkpoint went back from step $prev to step $step"
    echo "kill $i: ${delay} ms: checkpoint at step $step$([ "$tmp" -gt 0 ] && echo ', killed inside a write')"
    prev=$step
done
# on to the end: the start removes (and names) every temporary file left
before=$(ls "$ck" | grep -c '^checkpoint\.safetensors\.tmp\.' || true)
resume=()
[ -e "$ck/checkpoint.safetensors" ] && resume=(--resume)
"$train" "${args[@]}" --ckpt-dir "$ck" "${resume[@]}" > "$dir/final.out" 2>&1 ||
    { cat "$dir/final.out" >&2; fail "the final run failed"; }
removed=$(grep -c "left by a run that stopped while saving" "$dir/final.out")
[ "$removed" -eq "$before" ] || fail "$before temporary files were left, the final run says it removed $removed"
cmp "$dir/straight/checkpoint.safetensors" "$ck/checkpoint.safetensors" ||
    fail "the final checkpoint differs from the straight run's"
left=$(ls -A "$ck" | grep -v '^checkpoint\(-[0-9]*\)\?\.safetensors$' || true)
[ -z "$left" ] || fail "files left in the checkpoint directory: $left"
echo "kill_random: $in_write kills inside a checkpoint write, every checkpoint loaded, final checkpoint identical"
[ $completed = 1 ] || [ $in_write -gt 0 ] ||
    fail "no kill of $(( kills * 3 )) landed inside a checkpoint write: the test did not test the write"
echo "kill_random: ok"
