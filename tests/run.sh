#!/usr/bin/env bash
# tests/run.sh BUILD - the CPU test suite.
#
# 1. unit tests (C programs in BUILD/, each printing its own checks);
# 2. lit-style tests: every tests/**/*.moe and *.test file with `RUN:` lines.
#    Each RUN line is a bash pipeline (pipefail) with these substitutions:
#      %s  this test file        %S  its directory
#      %t  a scratch path unique to the test
#      %B  the build directory (BUILD/plugins/ holds the pass plugins)
#    and with moec, filecheck and `not` on PATH. `not CMD` succeeds only
#    when CMD exits with status 1 (a reported user error): a crash, a
#    signal or exit 0 fails the test. `not --code=N CMD` expects status N.
# Prints "N passed, N failed" last; exits 1 if anything failed.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "$BUILD" && pwd)
BIN=$BUILD/testbin
SCRATCH=$BUILD/test-scratch
rm -rf "$BIN" "$SCRATCH"
mkdir -p "$BIN" "$SCRATCH"
ln -s "$BUILD/moec" "$BIN/moec"
ln -s "$BUILD/filecheck" "$BIN/filecheck"
cat > "$BIN/not" <<'NOT'
#!/usr/bin/env bash
want=1
case "${1:-}" in --code=*) want=${1#--code=}; shift;; esac
"$@"
rc=$?
if [ "$rc" -ne "$want" ]; then
    echo "not: '$*' exited with status $rc, expected $want" >&2
    exit 1
fi
exit 0
NOT
chmod +x "$BIN/not"

pass=0
fail=0
failed_names=()

# ---- unit tests
for t in "$BUILD"/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    if out=$(cd "$ROOT" && "$t" 2>&1); then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        failed_names+=("$name")
        echo "FAIL: $name"
        echo "$out" | tail -n 30 | sed 's/^/    /'
    fi
done

# ---- lit-style tests
cd "$ROOT"
while IFS= read -r f; do
    runs=$(grep -a -o 'RUN: .*' "$f" | sed 's/^RUN: //')
    [ -n "$runs" ] || continue
    dir=$(dirname "$f")
    tmp="$SCRATCH/$(echo "$f" | tr '/' '_')"
    ok=1
    log=""
    while IFS= read -r cmd; do
        cmd=${cmd//%s/$f}
        cmd=${cmd//%S/$dir}
        cmd=${cmd//%t/$tmp}
        cmd=${cmd//%B/$BUILD}
        if ! out=$(PATH="$BIN:$PATH" bash -o pipefail -c "$cmd" 2>&1); then
            ok=0
            log="    RUN: $cmd"$'\n'"$(echo "$out" | tail -n 40 | sed 's/^/    /')"
            break
        fi
    done <<< "$runs"
    if [ $ok = 1 ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        failed_names+=("$f")
        echo "FAIL: $f"
        echo "$log"
    fi
done < <(find tests -name '*.moe' -o -name '*.test' | LC_ALL=C sort)

if [ $fail -ne 0 ]; then
    echo "failed:"
    printf '  %s\n' "${failed_names[@]}"
fi
echo "tests ($BUILD): $pass passed, $fail failed"
[ $fail -eq 0 ]
