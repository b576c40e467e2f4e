#!/bin/sh
# tools/sass.sh CUBIN... - disassembles each cubin (cuobjdump -sass) and prints, per kernel, the facts
# that matter for a tensor-core kernel: registers, stack/local memory, shared memory, and counts of
# the instructions to look for (HGMMA: bf16 wgmma; QGMMA: FP8 wgmma; UBLKCP: bulk copies; UTMALDG: TMA loads; LDL/STL: local-memory traffic, want 0;
# USETMAXREG: setmaxnreg; STG: global stores). Full SASS in CUBIN.sass.
# The CUDA binary tools come from pip (nvidia-cuda-cuobjdump) into a venv outside the repository,
# $SASS_VENV (default /tmp/sassvenv), made on first use; a cuobjdump on PATH is used if there is one.
set -eu
[ $# -ge 1 ] || { echo "usage: tools/sass.sh CUBIN..." >&2; exit 2; }
if command -v cuobjdump >/dev/null 2>&1; then
    CUOBJDUMP=$(command -v cuobjdump)
else
    VENV=${SASS_VENV:-/tmp/sassvenv}
    CUOBJDUMP=$(find "$VENV" -type f -name cuobjdump 2>/dev/null | head -n 1)
    if [ -z "$CUOBJDUMP" ]; then
        python3 -m venv "$VENV" >&2
        "$VENV/bin/pip" install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
        CUOBJDUMP=$(find "$VENV" -type f -name cuobjdump | head -n 1)
    fi
fi
for f in "$@"; do
    "$CUOBJDUMP" -sass "$f" > "$f.sass"
    echo "== $f"
    "$CUOBJDUMP" -res-usage "$f" 2>/dev/null | grep -E 'Function|REG' | sed 's/^ */  /'
    for op in HGMMA QGMMA UTMALDG UBLKCP UTMASTG LDL STL USETMAXREG SYNCS STG LDG BAR WARPGROUP; do
        printf '  %-10s %d\n' "$op" "$(grep -c "[^A-Z_]$op[. ]" "$f.sass" || true)"
    done
    grep -oE '[HQ]GMMA\.[0-9x]*\.[A-Z0-9.]*' "$f.sass" | sort | uniq -c | sed 's/^/  /'
done
