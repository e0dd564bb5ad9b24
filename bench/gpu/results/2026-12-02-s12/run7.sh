#!/usr/bin/env bash
# device call 7 (session 12): the GPU tests on the promoted build (unmasked backward VARIANT 1041)
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/t.tar.xz
B=build-dev
{ timeout 150 $B/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -4 | cut -c1-250
stamp
{ timeout 60 $B/tests/gpu/test_dist_replay; echo "rc=$?"; } > $OUT/t_replay.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_replay.log | tail -3 | cut -c1-250
{ timeout 60 $B/tests/gpu/test_gpu_errors; echo "rc=$?"; } > $OUT/t_err.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_err.log | tail -2 | cut -c1-250
{ timeout 60 $B/tests/train_gpu/test_gpu_train; echo "rc=$?"; } > $OUT/t_train.log 2>&1
grep -E "checks|^rc=|FAIL" $OUT/t_train.log | tail -2 | cut -c1-250
stamp done
