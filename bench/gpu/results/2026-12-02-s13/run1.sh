#!/usr/bin/env bash
# device call 1 (session 13): tests on HEAD's build; the forward keeping its maxima (PP bit 6)
# against the library in the lab; DEFER on the masked backward, 5 rounds
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/km.tar.xz
B=build-dev
stamp tests km
{ timeout 200 build-km/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn_km.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn_km.log | head -6 | cut -c1-300
stamp tests dev
{ timeout 60 $B/tests/train_gpu/test_gpu_kernels; echo "rc=$?"; } > $OUT/t_kernels.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_kernels.log | tail -3 | cut -c1-300
{ timeout 90 $B/tests/gpu/test_dist_replay; echo "rc=$?"; } > $OUT/t_replay.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_replay.log | tail -3 | cut -c1-300
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"
grep -E "checks,|ERROR SUMMARY" $OUT/memcheck.log | head -3
F="fwd wgmma (library),fwd wgmma keep max"
stamp lab fwd causal
timeout 100 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$F" --seqlens 2k,8k,32k --causal 1 > $OUT/lab_fwd_causal.log 2>&1
tail -7 $OUT/lab_fwd_causal.log
stamp lab fwd window
timeout 100 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_fwd_window.log 2>&1
tail -5 $OUT/lab_fwd_window.log
stamp lab fwd docs
timeout 100 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --docs 4096 > $OUT/lab_fwd_docs.log 2>&1
tail -5 $OUT/lab_fwd_docs.log
stamp lab fwd d64
timeout 80 $B/bench/gpu/dfa_lab_cuda --dims 64 --rounds 3 --only "$F" --seqlens 8k,32k --causal 1 > $OUT/lab_fwd_d64.log 2>&1
tail -5 $OUT/lab_fwd_d64.log
G="bwd wgmma atomic dq,bwd ws runs defer"
stamp lab masked defer window
timeout 120 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$G" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_defer_window.log 2>&1
tail -5 $OUT/lab_defer_window.log
stamp lab masked defer docs
timeout 80 $B/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "$G" --seqlens 128k --causal 1 --docs 4096 > $OUT/lab_defer_docs.log 2>&1
tail -4 $OUT/lab_defer_docs.log
stamp done
cd $OUT && tar czf logs.tgz *.log
