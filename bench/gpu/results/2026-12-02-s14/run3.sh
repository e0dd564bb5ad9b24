#!/usr/bin/env bash
# device call 3 (session 14): the library with the owed P V promoted (forward PP 506 at d = 128):
# every GPU test family and memcheck; the masks bench against the library before it (PP 250,
# build-prev), alternated, FlexAttention in the same call; the library against FA2 and cuDNN
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/prev.tar.xz
B=build-dev
stamp tests
{ timeout 200 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
for t in gpu/test_gpu_errors gpu/test_dist_replay train_gpu/test_gpu_kernels train_gpu/test_gpu_model train_gpu/test_gpu_train; do
  n=$(basename $t); { timeout 90 $B/tests/$t; echo "rc=$?"; } > $OUT/t_$n.log 2>&1
  grep -E "checks|^rc=|FAIL" $OUT/t_$n.log | tail -2 | cut -c1-200
done
stamp memcheck
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "checks,|ERROR SUMMARY" $OUT/memcheck.log | head -3
M() { DISTFLASH_LIB=build-$1/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 200 \
        python3 bench/gpu/masks_bench.py --json $OUT/masks_$1_$2.json $3 > $OUT/masks_$1_$2.log 2>&1; echo "masks $1 $2 rc=$?"; }
stamp masks
M prev 1 --no-flex; M dev 1 ""; stamp; M prev 2 --no-flex; M dev 2 --no-flex; stamp
for w in prev_1 dev_1 prev_2 dev_2; do echo "== $w"; grep -E "^(docs|window) " $OUT/masks_$w.log; done
stamp bench
timeout 120 $B/tools/distflash-bench bench --device cuda --json $OUT/ours.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/peers.py --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"
python3 bench/gpu/table.py $OUT/ours.json $OUT/peers.json > $OUT/table.txt 2>&1; cat $OUT/table.txt
stamp done
cd $OUT && tar czf all.tgz *.log *.json table.txt
