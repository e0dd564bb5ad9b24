#!/usr/bin/env bash
# device call 8 (session 13): the library with Q in registers at d = 128 (PP 250): the GPU tests
# of the wgmma kernels, the executor's replay, memcheck, and the masks against Flex
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/q.tar.xz
B=build-dev
stamp tests
{ DFA_GPU_TEST_KERNEL=wgmma timeout 150 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
stamp
{ timeout 80 $B/tests/gpu/test_dist_replay; echo "rc=$?"; } > $OUT/t_replay.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_replay.log | tail -3 | cut -c1-300
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "checks,|ERROR SUMMARY" $OUT/memcheck.log | head -3
stamp masks
DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 100 \
    python3 bench/gpu/masks_bench.py --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -5 $OUT/masks.log
stamp done
