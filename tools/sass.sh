#!/bin/sh
# tools/sass.sh CUBIN... - disassembles each cubin (cuobjdump -sass) and prints, per kernel, the facts
# that matter for a tensor-core kernel: registers, stack/local memory, shared memory, and counts of
# the instructions to look for (HGMMA: bf16 wgmma; QGMMA: FP8 wgmma; UBLKCP: bulk copies; UTMALDG: TMA loads; LDL/STL: local-memory traffic, want 0;
# USETMAXREG: setmaxnreg; STG: global stores). Full SASS in CUBIN.sass.
# The CUDA binary tools come from pip (nvidia-cuda-cuobjdump) into a venv outside the repository,
# $SASS_VENV (default /tmp/sassvenv), made on first use; a cuobjdump on PATH is used if there is one.
# A kernels.cubin of several NVRTC units (runtime/gpu/kimage.h, docs/decisions.md 67) is cut into its cubins
# first (CUBIN.unitN.cubin), and each is disassembled.
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
# the cubins of a packed image (MOECKIM1 header: count, then offset and size of each), else the file itself
units() {
    python3 - "$1" <<'PY'
import struct, sys
f = sys.argv[1]
b = open(f, 'rb').read()
if b[:8] != b'MOECKIM1':
    print(f)
    sys.exit(0)
n = struct.unpack_from('<I', b, 8)[0]
for i in range(n):
    o, s = struct.unpack_from('<QQ', b, 16 + 16 * i)
    out = '%s.unit%d.cubin' % (f, i)
    open(out, 'wb').write(b[o:o + s])
    print(out)
PY
}
for f in $(for a in "$@"; do units "$a"; done); do
    "$CUOBJDUMP" -sass "$f" > "$f.sass"
    echo "== $f"
    "$CUOBJDUMP" -res-usage "$f" 2>/dev/null | grep -E 'Function|REG' | sed 's/^ */  /'
    for op in HGMMA QGMMA UTMALDG UBLKCP UTMASTG LDL STL USETMAXREG SYNCS STG LDG BAR WARPGROUP; do
        printf '  %-10s %d\n' "$op" "$(grep -c "[^A-Z_]$op[. ]" "$f.sass" || true)"
    done
    grep -oE '[HQ]GMMA\.[0-9x]*\.[A-Z0-9.]*' "$f.sass" | sort | uniq -c | sed 's/^/  /'
done
