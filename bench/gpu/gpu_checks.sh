#!/usr/bin/env bash
# Every GPU test family and a memcheck pass, on a CUDA build of this tree. One log per family in
# $OUT (default out/gpu-checks), the checks and exit status of each printed.
#   bench/gpu/gpu_checks.sh BUILD_DIR        e.g. build-gpu (cmake ... -DDFA_WITH_MPI=OFF)
set -uo pipefail
B=${1:?usage: gpu_checks.sh BUILD_DIR}
OUT=${OUT:-out/gpu-checks}; mkdir -p "$OUT"
run() {  # run NAME TIMEOUT BINARY: its log is $OUT/t_NAME.log
  { timeout "$2" "$3"; echo "rc=$?"; } > "$OUT/t_$1.log" 2>&1
  echo "$1: $(grep -E 'checks,' "$OUT/t_$1.log" | tail -1 | cut -c1-120) $(grep -E '^rc=' "$OUT/t_$1.log")"
  grep -E "FAIL" "$OUT/t_$1.log" | head -5 | cut -c1-300
}
run attn 200 "$B/tests/gpu/test_gpu_attn"
run errors 60 "$B/tests/gpu/test_gpu_errors"
run replay 90 "$B/tests/gpu/test_dist_replay"
run kernels 60 "$B/tests/train_gpu/test_gpu_kernels"
run model 90 "$B/tests/train_gpu/test_gpu_model"
run train 90 "$B/tests/train_gpu/test_gpu_train"
SAN=${SAN:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
DFA_GPU_TEST_SMALL=1 DFA_GPU_TEST_KERNEL=wgmma timeout 100 "$SAN" --tool memcheck --error-exitcode 1 \
  "$B/tests/gpu/test_gpu_attn" > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)"
