#!/usr/bin/env bash
# cluster_env.sh TRAIN DIR MODE: two ranks started as a cluster's launcher
# would (MODE torchrun: RANK/WORLD_SIZE/MASTER_*; slurm: SLURM_PROCID/
# SLURM_NTASKS/SLURM_LOCALID/SLURM_JOB_NODELIST/SLURM_JOB_ID), with no MOEC_
# variable set; waits for both and prints rank 0's output.
set -u
train=$1 dir=$2 mode=$3
port=$((20000 + RANDOM % 20000))
args=(--data /usr/share/doc/t-coffee/examples/proteases1_small.fasta --steps 6 --log-every 1 --eval-every 0 --threads 1)
pids=()
for r in 0 1; do
    if [ "$mode" = torchrun ]; then
        env -u MOEC_RANK -u MOEC_WORLD_SIZE RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$train" "${args[@]}" --log "$dir/$mode.$r.jsonl" > "$dir/$mode.$r.out" 2>&1 &
    else
        env -u MOEC_RANK -u MOEC_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_NTASKS_PER_NODE=2 \
            SLURM_JOB_NODELIST='localhost' SLURM_JOB_ID=$((port - 20000)) \
            "$train" "${args[@]}" --log "$dir/$mode.$r.jsonl" > "$dir/$mode.$r.out" 2>&1 &
    fi
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$dir/$mode.0.out"
[ $rc = 0 ] || { echo "a rank failed:"; cat "$dir/$mode.1.out"; }
exit $rc
