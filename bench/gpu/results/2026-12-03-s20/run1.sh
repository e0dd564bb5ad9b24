#!/usr/bin/env bash
# session 20, device call 1: test_gpu_errors (the scratch-overlap cases added after session 19's
# last run); the backward with each block's whole dQ tile by one consumer (bit 18, "bwd ws dq
# alt": one m64n128 product, 48 KB of shared operands instead of 64) against the library's
# kernels, 3 interleaved rounds, causal / not at 2k-32k and the masks at 128k; host_profile.py
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
[ -f .ab/bin/alt.tar.xz ] && tar xJf .ab/bin/alt.tar.xz  # build-alt: the library with bit 18 (295961 / 492825)
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
stamp errors
{ timeout 60 $B/tests/gpu/test_gpu_errors; echo "rc=$?"; } > $OUT/t_errors.log 2>&1
echo "errors: $(grep -E 'checks,' $OUT/t_errors.log | tail -1) $(grep '^rc=' $OUT/t_errors.log)"; grep FAIL $OUT/t_errors.log | head -5
BW='bwd wgmma atomic dq,bwd ws dq alt,bwd ws dq alt tma'
stamp masks
timeout 100 $L --only "$BW" --dims 128 --seqlens 128k --window 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_win.log 2>&1; echo "rc=$?"
timeout 120 $L --only "$BW" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_docs.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_win.log $OUT/ab_docs.log | grep -v "^\["
stamp causal
timeout 200 $L --only "$BW" --dims 128 --causal 1,0 --seqlens 2k,8k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_bwd.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_bwd.log | grep -v "^\["
before 330 && [ -f build-alt/src/libdistflash.so ] && {
stamp masks bench, library against build-alt
for i in 1 2; do
timeout 70 python3 bench/gpu/masks_bench.py --no-flex --idle 3 > $OUT/masks_lib$i.log 2>&1
DISTFLASH_LIB=$PWD/build-alt/src/libdistflash.so timeout 70 python3 bench/gpu/masks_bench.py --no-flex --idle 3 > $OUT/masks_alt$i.log 2>&1
done
for f in $OUT/masks_*.log; do echo "$(basename $f) $(grep -E '^(docs|window)' $f | tr -s ' ' | tr '\n' ';')"; done
}
before 450 && {
stamp host_profile
timeout 90 python3 bench/gpu/host_profile.py > $OUT/host_profile.log 2>&1; echo "rc=$?"
tail -30 $OUT/host_profile.log
}
stamp done
kill $SMI
cd $OUT && tar czf all.tgz *.log *.csv 2>/dev/null; ls -la all.tgz
