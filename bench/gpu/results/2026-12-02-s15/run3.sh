#!/usr/bin/env bash
# session 15, device call 3: the persistent backward (VARIANT bit 11) and the D kernel that zeroes
# the dq accumulator. build-cand = the library with the persistent kernel at d = 128 (3097, masked
# 3353): every GPU test family and memcheck; the lab (build-dev) library against "bwd ws persist";
# the masks bench alternating build-dev (non-persistent) and build-cand; the kernel profile at 2k
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/cand.tar.xz
C=build-cand
stamp tests
{ timeout 150 $C/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
for t in gpu/test_gpu_errors gpu/test_dist_replay train_gpu/test_gpu_kernels train_gpu/test_gpu_model train_gpu/test_gpu_train; do
  n=$(basename $t); { timeout 60 $C/tests/$t; echo "rc=$?"; } > $OUT/t_$n.log 2>&1
  grep -E "checks|^rc=|FAIL" $OUT/t_$n.log | tail -2 | cut -c1-200
done
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 80 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $C/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY" $OUT/memcheck.log | head -2
L=build-dev/bench/gpu/dfa_lab_cuda; F="bwd wgmma atomic dq,bwd ws persist"
stamp lab
timeout 60 $L --dims 128 --rounds 3 --only "$F" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
timeout 90 $L --dims 128 --rounds 3 --only "$F" --seqlens 2k,8k,32k --causal 0,1 > $OUT/lab_causal.log 2>&1
for f in window causal; do grep -v early $OUT/lab_$f.log | grep -E "bwd|variant" | tail -12; done
export PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
M() { DISTFLASH_LIB=build-$1/src/libdistflash.so timeout 100 python3 bench/gpu/masks_bench.py --idle 3 --reps 6 --no-flex --json $OUT/masks_$1_$2.json > $OUT/masks_$1_$2.log 2>&1; echo "masks $1 $2 rc=$?"; }
stamp masks
M dev 1; M cand 1; M cand 2; M dev 2
for w in dev_1 cand_1 dev_2 cand_2; do echo "== $w"; grep -E "^(docs|window) " $OUT/masks_$w.log; done
stamp profile
DISTFLASH_LIB=build-cand/src/libdistflash.so timeout 60 python3 bench/gpu/bwd_profile.py --windows 4096 --shapes 128:2048:16:32:0,128:2048:16:32:1 > $OUT/profile.log 2>&1; echo "profile rc=$?"
grep -E "^==|bwd_ws|dsum|Memset" $OUT/profile.log | cut -c1-110
stamp done
cd $OUT && tar czf all.tgz *.log *.json
