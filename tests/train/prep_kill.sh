#!/usr/bin/env bash
# prep_kill.sh DIR: a moec prep killed by SIGKILL while it streams (its input, standard input, held open)
# leaves no DIR/out and loses nothing; the next prep of DIR/out removes the .partial and finishes.
set -u
d=$1
rm -rf "$d/out" "$d/out.partial" "$d/fifo"
mkfifo "$d/fifo"
moec prep - -o "$d/out" --alphabet protein --quiet < "$d/fifo" &
pid=$!
exec 3> "$d/fifo"                       # the writer stays open: prep waits for more input
zcat /usr/share/doc/mmseqs2/example-data/DB.fasta.gz | head -c 3000000 >&3
for _ in $(seq 100); do [ -e "$d/out.partial/unknown.tmp" ] && break; sleep 0.1; done
sleep 0.3                               # reading what was written
kill -KILL "$pid"
wait "$pid" 2>/dev/null
exec 3>&-
rm -f "$d/fifo"
[ ! -e "$d/out" ] || { echo "a killed prep left $d/out"; exit 1; }
[ -d "$d/out.partial" ] || { echo "no $d/out.partial: the prep did not get far enough"; exit 1; }
echo "killed: no out, out.partial left"
moec prep /usr/share/doc/t-coffee/examples/proteases1_small.fasta -o "$d/out" --alphabet protein || exit 1
moec prep --verify "$d/out" || exit 1
[ ! -e "$d/out.partial" ] || { echo "out.partial still there"; exit 1; }
