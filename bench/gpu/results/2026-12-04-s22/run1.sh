#!/usr/bin/env bash
# session 22, device call 1: HEAD's library on one H200 (no kernel change since session 20's run 3;
# the lab's lab_bwd_pair refactor and test_matmul's fix since): every GPU test family and memcheck,
# the lab's current backward rows (lab_bwd_pair) against the library at 128k with the masks,
# the masks bench against FlexAttention twice (--idle 5), the binding's CUDA and mask tests.
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
finish() { cd $OUT && tar czf all.tgz *.log *.csv *.json 2>/dev/null; ls -la all.tgz; }
trap finish EXIT
tar xJf .ab/bin/b.tar.xz
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
export LD_LIBRARY_PATH=$PWD/$B/src:${LD_LIBRARY_PATH:-} DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/gpu.log 2>&1; cat $OUT/gpu.log
stamp masks 1
timeout 200 python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks1.json > $OUT/masks1.log 2>&1; echo "masks rc=$?"
tail -5 $OUT/masks1.log
stamp checks
OUT=$OUT timeout 330 bash bench/gpu/gpu_checks.sh $B; echo "checks rc=$?"
stamp lab
BW='bwd wgmma atomic dq,bwd ws dq alt m1,bwd ws dq alt stamps'
timeout 60 $L --only "$BW" --dims 128 --seqlens 128k --window 4096 --check 600 --reps 3 --rounds 1 > $OUT/lab_win.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$BW" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 3 --rounds 1 > $OUT/lab_docs.log 2>&1; echo "rc=$?"
grep -h -v "^variant" $OUT/lab_win.log $OUT/lab_docs.log | grep -v "^\["
before 480 && {
stamp pytest
timeout $(( 540 - ($(date +%s) - t0) )) python3 -m pytest -q -p no:cacheprovider -x python/tests/test_cuda.py python/tests/test_masks.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"
}
before 500 && { stamp masks 2; timeout $(( 585 - ($(date +%s) - t0) )) python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks2.json > $OUT/masks2.log 2>&1; echo "masks2 rc=$?"; tail -5 $OUT/masks2.log; }
stamp done
kill $SMI
