#!/usr/bin/env bash
# session 20, device call 3: the library with bit 18 in every d = 128 backward instance (unmasked
# 295961 / short walks 296217, masked 296217): the masks bench against FlexAttention (--idle 5 as
# sessions 15, 18, 19), every GPU test family and memcheck, the binding's CUDA and mask tests,
# host_profile.py (SDPA's forward+backward beside ours)
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
finish() { cd $OUT && tar czf all.tgz *.log *.csv *.json 2>/dev/null; ls -la all.tgz; }
trap finish EXIT
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
stamp masks
timeout 280 python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -6 $OUT/masks.log
stamp checks
OUT=$OUT timeout $(( 500 - ($(date +%s) - t0) )) bash bench/gpu/gpu_checks.sh $B; echo "checks rc=$?"
before 470 && {
stamp pytest
timeout $(( 540 - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider -x python/tests/test_cuda.py python/tests/test_masks.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"
}
before 530 && { timeout $(( 575 - ($(date +%s) - t0) )) python3 bench/gpu/host_profile.py > $OUT/host_profile.log 2>&1; echo "host_profile rc=$?"; head -8 $OUT/host_profile.log; }
stamp done
kill $SMI
