#!/usr/bin/env bash
# compare_losses.sh A.jsonl B.jsonl RTOL: the per-step training losses of two
# runs agree within RTOL relative, step by step, and both have the same steps.
set -u
a=$(grep -o '"step":[0-9]*,"loss":[-0-9.e]*' "$1")
b=$(grep -o '"step":[0-9]*,"loss":[-0-9.e]*' "$2")
[ -n "$a" ] || { echo "no losses in $1" >&2; exit 1; }
paste <(echo "$a") <(echo "$b") | awk -v rtol="$3" -F'[:,\t]' '
    { if ($2 != $6) { print "step " $2 " vs " $6 ": the runs logged different steps"; bad = 1; exit }
      d = ($4 - $8) / $4; if (d < 0) d = -d; if (d > worst) worst = d
      if (d > rtol) { print "step " $2 ": loss " $4 " vs " $8 " (relative " d ")"; bad = 1 } n++ }
    END { printf "%d steps compared, largest relative difference %.3g\n", n, worst; exit bad }'
