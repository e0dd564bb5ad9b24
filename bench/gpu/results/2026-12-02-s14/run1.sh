#!/usr/bin/env bash
# device call 1 (session 14): the checks not yet run on the final build of session 13 (forward PP 250
# at d = 128, masked d = 128 backward 1297): every GPU test family, memcheck, the library against
# FA2 and cuDNN in the same call, and the masks against Flex
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
stamp tests
{ timeout 260 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
stamp
{ timeout 60 $B/tests/gpu/test_gpu_errors; echo "rc=$?"; } > $OUT/t_err.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_err.log | tail -3 | cut -c1-300
{ timeout 90 $B/tests/gpu/test_dist_replay; echo "rc=$?"; } > $OUT/t_replay.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_replay.log | tail -3 | cut -c1-300
for t in test_gpu_kernels test_gpu_model test_gpu_train; do
  { timeout 60 $B/tests/train_gpu/$t; echo "rc=$?"; } > $OUT/t_$t.log 2>&1
  grep -E "checks|^rc=|FAIL" $OUT/t_$t.log | tail -2 | cut -c1-200
done
stamp memcheck
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "checks,|ERROR SUMMARY" $OUT/memcheck.log | head -3
stamp bench
timeout 120 $B/tools/distflash-bench bench --device cuda --json $OUT/ours.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
stamp peers
PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/peers.py --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"
stamp masks
DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 100 \
    python3 bench/gpu/masks_bench.py --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -6 $OUT/masks.log
python3 bench/gpu/table.py $OUT/ours.json $OUT/peers.json > $OUT/table.txt 2>&1; cat $OUT/table.txt
stamp done
