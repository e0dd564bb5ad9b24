#!/usr/bin/env bash
# device call 1 (session 12): the masked backward with its query blocks in runs (VARIANT +1024)
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
O="bwd wgmma atomic dq,bwd ws tma dkv,bwd ws mask split"
stamp lab window
timeout 150 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 3 --only "$O" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
tail -9 $OUT/lab_window.log
stamp lab docs
timeout 150 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 3 --only "$O" --seqlens 32k,128k --causal 1 --docs 4096 > $OUT/lab_docs.log 2>&1
tail -9 $OUT/lab_docs.log
stamp lab full window
timeout 80 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 3 --only "$O" --seqlens 32k --causal 1 --window 32768 > $OUT/lab_full.log 2>&1
tail -6 $OUT/lab_full.log
stamp lab d64
timeout 100 $B/bench/gpu/dfa_lab_cuda --dims 64 --rounds 3 --only "bwd wgmma atomic dq,bwd ws direct dkv,bwd ws mask split" --seqlens 32k --causal 1 --window 4096 > $OUT/lab_d64.log 2>&1
tail -6 $OUT/lab_d64.log
stamp memcheck
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "checks,|ERROR SUMMARY" $OUT/memcheck.log | head -3
stamp done
cd $OUT && tar czf logs.tgz *.log
