#!/usr/bin/env bash
# full_disk.sh TRAIN MOEC DIR: a checkpoint directory and a metrics log on a
# file system that fills up: a 320 KiB tmpfs, mounted in a private mount
# namespace (`unshare -rm`: a user namespace, no root needed; `unshare -m`
# as root where user namespaces are off). The tmpfs holds one checkpoint of
# micro_protein (189 KiB) but not a second one beside it, so the second save
# runs out of space in its temporary file.
#
# Asserts: the run stops with exit 1 and "checkpoint at step N not written:
# ... No space left on device"; the previous checkpoint is intact (loads,
# holds the earlier step); no temporary file is left; once the file system
# is larger (remounted), --resume continues from it and ends with the same
# checkpoint as a run on an ordinary disk. Then, the tmpfs full: a metrics
# log on it exits 1 with "cannot write the metrics", a checkpoint directory
# on it is refused before the first step. Prints what it saw; where no
# mount namespace can be made, says so and tests nothing (/dev/full and
# `ulimit -f` are tested by write_errors.test and stop_signal.test).
set -u
train=$1 moec=$2 dir=$3
if [ "${FULL_DISK_INSIDE:-}" != 1 ]; then
    for how in -rm -m; do
        if unshare $how true 2> /dev/null; then
            FULL_DISK_INSIDE=1 exec unshare $how bash "$0" "$@"
        fi
    done
    echo "full_disk: no mount namespace here (unshare -rm and -m refused): tmpfs not tested"
    exit 0
fi
data=/usr/share/doc/mmseqs2/example-data/DB.fasta.gz
args=(--data $data --threads 1 --eval-every 0 --device cpu)
fail() { echo "full_disk: FAIL: $*" >&2; exit 1; }
mkdir -p "$dir/mnt"
mount -t tmpfs -o size=320k tmpfs "$dir/mnt" || fail "cannot mount a tmpfs in the namespace"
echo "full_disk: tmpfs of $(df -k --output=size "$dir/mnt" | tail -n 1 | tr -d ' ') KiB"

# the reference, on the ordinary disk
"$train" "${args[@]}" --steps 6 --ckpt-every 3 --ckpt-dir "$dir/ref" > /dev/null || fail "the reference run failed"

# step 3's checkpoint fits, step 6's does not
ck=$dir/mnt/ck
"$train" "${args[@]}" --steps 6 --ckpt-every 3 --ckpt-dir "$ck" > "$dir/full.out" 2>&1
status=$?
cat "$dir/full.out"
echo "full_disk: status $status"
[ $status -eq 1 ] || fail "exit status $status, not 1"
"$moec" ckpt-diff "$ck/checkpoint.safetensors" "$ck/checkpoint.safetensors" > /dev/null ||
    fail "the previous checkpoint does not load"
step=$(head -c 4096 "$ck/checkpoint.safetensors" | grep -a -o '"step":"[0-9]*"' | tr -dc 0-9)
echo "full_disk: checkpoint.safetensors holds step $step"
left=$(ls -A "$ck" | grep -v '^checkpoint\.safetensors$' || true)
[ -z "$left" ] || fail "left in the checkpoint directory: $left"

# room again: resume to the end
mount -o remount,size=2m "$dir/mnt" || fail "cannot grow the tmpfs"
"$train" "${args[@]}" --steps 6 --ckpt-every 3 --ckpt-dir "$ck" --resume > "$dir/resume.out" 2>&1 ||
    { cat "$dir/resume.out"; fail "the resumed run failed"; }
grep -h "resumed from" "$dir/resume.out"
cmp "$dir/ref/checkpoint.safetensors" "$ck/checkpoint.safetensors" || fail "the resumed run's checkpoint differs"
echo "full_disk: resumed to step 6, checkpoint identical to the reference"

# a metrics log on a full file system
head -c 4m /dev/zero > "$dir/mnt/filler" 2> /dev/null
"$train" "${args[@]}" --steps 3 --log "$dir/mnt/m.jsonl" > /dev/null 2> "$dir/log.err"
status=$?
cat "$dir/log.err"
echo "full_disk: log status $status"
[ $status -eq 1 ] || fail "a log on a full disk: exit status $status, not 1"
# a checkpoint directory on a full file system: refused at the start, before any step
"$train" "${args[@]}" --steps 3 --ckpt-dir "$dir/mnt/ck2" > "$dir/ck2.out" 2>&1
status=$?
grep -h "error" "$dir/ck2.out"
echo "full_disk: full checkpoint directory status $status"
[ $status -eq 1 ] || fail "a checkpoint directory on a full disk: exit status $status, not 1"
grep -q "step " "$dir/ck2.out" && fail "a checkpoint directory on a full disk: the run trained before failing"
echo "full_disk: ok"
