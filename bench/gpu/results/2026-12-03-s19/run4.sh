#!/usr/bin/env bash
# session 19, device call 4: the masks bench against FlexAttention with the binding as it now
# stands (scratch from PyTorch's memory), --idle 5 as sessions 15 and 18
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
timeout 280 python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -6 $OUT/masks.log
stamp done
