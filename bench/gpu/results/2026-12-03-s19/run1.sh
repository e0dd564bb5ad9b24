#!/usr/bin/env bash
# session 19, device call 1: where a masked forward+backward's time goes (kernel by kernel, and
# the calls' event time against the kernels' sum), with the default memory pool as it comes and
# kept (--pool-keep); the masks bench (ours alone) both ways
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
stamp profile
timeout 150 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1 --windows 4096 --docs 4096 --iters 5 > $OUT/profile.log 2>&1; echo "rc=$?"
timeout 150 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1 --windows 4096 --docs 4096 --iters 5 --pool-keep > $OUT/profile_keep.log 2>&1; echo "rc=$?"
grep "==" $OUT/profile.log $OUT/profile_keep.log
stamp masks
for i in 1 2; do
timeout 90 python3 bench/gpu/masks_bench.py --no-flex --idle 3 > $OUT/masks_plain$i.log 2>&1; echo "rc=$?"
timeout 90 python3 bench/gpu/masks_bench.py --no-flex --idle 3 --pool-keep > $OUT/masks_keep$i.log 2>&1; echo "rc=$?"
done
tail -5 $OUT/masks_plain*.log $OUT/masks_keep*.log
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
stamp done
cd $OUT && tar czf all.tgz *.log 2>/dev/null; ls -la all.tgz
