#!/usr/bin/env bash
# session 19, device call 3: run 2's masks bench put the binding with PyTorch's memory as scratch
# 1.6% behind the plain calls on the 4k window (and ~0.3 ms more idle GPU time a call): the host
# side of a call (enqueue times, the caching allocator's trips to the driver, idle time) in each
# mode, alternated
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
for i in 1 2; do
  timeout 60 python3 bench/gpu/host_probe.py > $OUT/probe_caller$i.log 2>&1
  timeout 60 python3 bench/gpu/host_probe.py --library-scratch > $OUT/probe_library$i.log 2>&1
  timeout 60 python3 bench/gpu/host_probe.py --library-scratch --pool-keep > $OUT/probe_keep$i.log 2>&1
done
cat $OUT/probe_*.log | grep -v Warn
stamp done
cd $OUT && tar czf all.tgz *.log 2>/dev/null; ls -la all.tgz
