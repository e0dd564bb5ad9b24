#!/usr/bin/env bash
# session 18, device call 3: the library with bits 15-17 promoted (d = 128 unmasked 33817, short
# walks 34073, masked 230681; d = 64 33809 / 33793) through every GPU test family and memcheck;
# the lab's A/B of the library against the kernels of sessions 15-17; the masks bench against
# FlexAttention (--idle 5, as session 15's run 2)
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
L=$B/bench/gpu/dfa_lab_cuda
stamp checks
OUT=$OUT bash bench/gpu/gpu_checks.sh $B
stamp ab
AB='bwd wgmma atomic dq,bwd ws runs defer ex2,bwd ws tma dkv all'
timeout 100 $L --only "$AB" --dims 128 --causal 1,0 --seqlens 2k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_lib.log 2>&1; echo "rc=$?"
timeout 60 $L --only "bwd wgmma atomic dq,bwd ws runs defer" --dims 64 --causal 1 --seqlens 2k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_lib64.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_lib.log $OUT/ab_lib64.log
before 330 && {
stamp masks
timeout 240 python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -6 $OUT/masks.log
}
stamp done
cd $OUT && tar czf all.tgz *.log *.json 2>/dev/null; ls -la all.tgz
