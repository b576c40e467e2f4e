#!/usr/bin/env bash
# rendezvous_auth.sh TRAIN DIR: two ranks started by hand (MOEC_RANK) with a
# secret file, and strangers on rank 0's port before rank 1 arrives: 40 idle
# connections, one that sends 160 bytes of garbage, and a rank with another
# secret. The strangers must not stop the job nor make rank 0 spin: rank 0's
# CPU time over 2 s of the flood is printed ("cpu ticks N"), then the exit
# statuses of the impostor and the two ranks, and rank 0's errors; then the
# step of the job's checkpoint (written despite the strangers) when it loads.
set -u
train=$1 dir=$2
data=/usr/share/doc/t-coffee/examples/proteases1_small.fasta
port=$((20000 + RANDOM % 30000))
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/secret"
export MOEC_WORLD_SIZE=2 MOEC_MASTER_ADDR=127.0.0.1 MOEC_MASTER_PORT=$port MOEC_RENDEZVOUS_TIMEOUT=60
run() { "$train" --data $data --steps 3 --eval-every 0 --threads 1 --device cpu "$@"; }
MOEC_RANK=0 MOEC_SECRET_FILE="$dir/secret" run --log "$dir/r0.jsonl" --ckpt-dir "$dir/ck" > "$dir/r0.out" 2> "$dir/r0.err" &
r0=$!
for _ in $(seq 1 500); do
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
    sleep 0.02
done
fds=()
for _ in $(seq 1 40); do
    exec {fd}<>/dev/tcp/127.0.0.1/$port
    fds+=("$fd")
done
exec {g}<>/dev/tcp/127.0.0.1/$port
head -c 160 /dev/urandom >&$g
ticks() { awk '{print $14 + $15}' /proc/$r0/stat; }
t1=$(ticks)
sleep 2
t2=$(ticks)
echo "cpu ticks $((t2 - t1))"
MOEC_RANK=1 MOEC_SECRET=not-the-jobs-secret-0123456789 run > "$dir/impostor.out" 2>&1
echo "impostor status $?"
MOEC_RANK=1 MOEC_SECRET_FILE="$dir/secret" run --ckpt-dir "$dir/ck" > "$dir/r1.out" 2>&1
echo "rank 1 status $?"
wait $r0
echo "rank 0 status $?"
for fd in "${fds[@]}" "$g"; do exec {fd}>&-; done
cat "$dir/impostor.out" "$dir/r0.err"
tail -n 1 "$dir/r0.out"
"${MOEC:-moec}" ckpt-diff "$dir/ck/checkpoint.safetensors" "$dir/ck/checkpoint.safetensors" > /dev/null &&
    echo "checkpoint at step $(head -c 4096 "$dir/ck/checkpoint.safetensors" | grep -a -o '"step":"[0-9]*"' | tr -dc 0-9)"
