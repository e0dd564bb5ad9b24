#!/usr/bin/env bash
# next session's first device call: the ex2 backward candidate (build-cand: masked d = 128 1305,
# unmasked d = 128 1049) through every GPU test family and memcheck; d = 64 ex2 in the lab; the masks
# bench with --idle 5, candidate against the library (build-dev at f7ffcfe), alternated
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/cand.tar.xz; tar xJf .ab/bin/b.tar.xz
C=build-cand
stamp tests
{ timeout 200 $C/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
for t in gpu/test_dist_replay train_gpu/test_gpu_model train_gpu/test_gpu_train; do
  n=$(basename $t); { timeout 90 $C/tests/$t; echo "rc=$?"; } > $OUT/t_$n.log 2>&1
  grep -E "checks|^rc=|FAIL" $OUT/t_$n.log | tail -2 | cut -c1-200
done
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $C/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY" $OUT/memcheck.log | head -2
stamp lab d64
timeout 90 build-dev/bench/gpu/dfa_lab_cuda --dims 64 --rounds 5 --only "bwd wgmma atomic dq,bwd ws runs defer ex2" --seqlens 8k,32k --causal 1 > $OUT/lab_d64.log 2>&1
grep -v early $OUT/lab_d64.log | tail -5
M() { DISTFLASH_LIB=build-$1/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 200 \
        python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks_$1_$2.json $3 > $OUT/masks_$1_$2.log 2>&1; echo "masks $1 $2 rc=$?"; }
stamp masks
M dev 1 --no-flex; M cand 1 ""; M dev 2 --no-flex; M cand 2 --no-flex; stamp
for w in dev_1 cand_1 dev_2 cand_2; do echo "== $w"; grep -E "^(docs|window) " $OUT/masks_$w.log; done
stamp done
cd $OUT && tar czf all.tgz *.log *.json
