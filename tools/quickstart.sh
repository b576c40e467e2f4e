#!/bin/sh
# The main job on a fresh machine: install dependencies (when missing),
# build moec, check a shipped model and print its IR.
set -e
cd "$(dirname "$0")/.."
sh tools/check-deps.sh 2>/dev/null || sh tools/install-deps.sh
make -j"$(nproc)"
MODEL=${1:-models/mixtral_tiny.moe}
echo "== build/moec check $MODEL"
build/moec check "$MODEL"
echo "== build/moec dump $MODEL"
build/moec dump "$MODEL"
