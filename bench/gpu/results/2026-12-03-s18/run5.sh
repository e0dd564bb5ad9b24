#!/usr/bin/env bash
# session 18, device call 5: the peers' table again with the faster backward (library at HEAD:
# TMA dK/dV for short walks, bits 15-17), distflash-bench and peers.py in one call, as session 15's run 2
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
stamp bench
timeout 120 $B/tools/distflash-bench bench --device cuda --json $OUT/ours.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
stamp peers
timeout 200 python3 bench/gpu/peers.py --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"
python3 bench/gpu/table.py $OUT/ours.json $OUT/peers.json > $OUT/table.txt 2>&1; cat $OUT/table.txt
stamp done
cd $OUT && tar czf all.tgz *.log *.json table.txt
