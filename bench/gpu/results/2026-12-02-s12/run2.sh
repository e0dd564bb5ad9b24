#!/usr/bin/env bash
# device call 2 (session 12): the unmasked backward in runs (VARIANT 1025) against the library's (1);
# the masks against FlexAttention with the masked backward in runs
set -uo pipefail
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
stamp tests
{ DFA_GPU_TEST_KERNEL=wgmma timeout 200 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -10 | cut -c1-300
{ timeout 120 $B/tests/gpu/test_dist_replay; echo "rc=$?"; } > $OUT/t_replay.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_replay.log | tail -4 | cut -c1-300
O="bwd wgmma atomic dq,bwd ws split causal"
stamp lab causal d128
timeout 150 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$O" --seqlens 2k,8k,32k --causal 1 > $OUT/lab_causal128.log 2>&1
tail -7 $OUT/lab_causal128.log
stamp lab causal d64
timeout 120 $B/bench/gpu/dfa_lab_cuda --dims 64 --rounds 5 --only "$O" --seqlens 8k,32k --causal 1 > $OUT/lab_causal64.log 2>&1
tail -5 $OUT/lab_causal64.log
stamp masks
DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 300 \
    python3 bench/gpu/masks_bench.py --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
tail -7 $OUT/masks.log
stamp done
cd $OUT && tar czf logs.tgz *.log
