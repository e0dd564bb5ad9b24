#!/usr/bin/env bash
# session 18, device call 6: test_gpu_attn after the review (both dK/dV stores forced only where
# the kernel has both) and memcheck on it
set -uo pipefail
tar xJf .ab/bin/b.tar.xz
B=build-dev
{ timeout 200 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|FAIL|^rc=" $OUT/t_attn.log | head -8
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 \
  $B/tests/gpu/test_gpu_attn > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | head -1)"
