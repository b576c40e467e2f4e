#!/bin/sh
# The main job on a fresh machine: install the Debian packages (when
# missing), build moec, compile protein_tiny into a training binary and
# train it on the 20,000 UniProtKB proteins of mmseqs2-examples, then draw
# the loss curves. On a machine without a GPU it trains on the CPU.
#   sh tools/quickstart.sh [MODEL [FASTA]]
set -e
cd "$(dirname "$0")/.."
MODEL=${1:-models/protein_tiny.moe}
DATA=${2:-/usr/share/doc/mmseqs2/example-data/DB.fasta.gz}
if ! sh tools/check-deps.sh 2>/dev/null || [ ! -f "$DATA" ]; then
    sh tools/install-deps.sh
fi
make -j"$(nproc)"
name=$(basename "$MODEL" .moe)
echo "== build/moec check $MODEL"
build/moec check "$MODEL"
echo "== build/moec compile $MODEL -o build/train_$name"
build/moec compile "$MODEL" -o "build/train_$name"
# the kernels it got (the default, fast: the sm_90a tensor-core kernels where a node qualifies; decision 48)
build/moec explain "$MODEL" --kernels fast | tail -n 1
echo "== build/train_$name --data $DATA"
rm -f "build/$name.jsonl"
"build/train_$name" --data "$DATA" --log "build/$name.jsonl" --ckpt-dir "build/ckpt_$name" --overwrite-ckpt
build/moec plot "build/$name.jsonl" -o "build/$name.svg"
echo "== loss curves: build/$name.svg, checkpoint: build/ckpt_$name/checkpoint.safetensors"
