#!/usr/bin/env bash
# Masks on the NCCL device path: the distributed GPU test under mpirun on a GPU machine,
# built beforehand (nothing is built here). About 3 minutes at most.
#   B=build-gpu [OUT=dir] bench/seqpar/masks_gpu_check.sh
# 1. test_dist_gpu with DFA_GPU_TEST_MASKS=1 (the mask cases and the mask errors only), np 1,
#    and np 2 when two GPUs are visible;
# 2. the whole test_dist_gpu (every earlier case too), np 1; np 2 as well with FULL2=1.
# Logs under $OUT (default: $B/bench-out/masks_gpu_check); a short summary table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
OUT=${OUT:-$B/bench-out/masks_gpu_check}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
T=$B/tests/gpu/test_dist_gpu
[ -x "$T" ] || { echo "no $T: build with CUDA, MPI and NCCL first (B=build folder)"; exit 2; }
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH)
rows=()
run() { # name np seconds masks-only
  local name=$1 np=$2 secs=$3 t0 rc
  t0=$(date +%s)
  local only=()
  [ "$4" = 1 ] && only=(-x DFA_GPU_TEST_MASKS=1)
  timeout "$secs" "${MPI[@]}" "${only[@]}" -np "$np" "$T" > "$OUT/$name.log" 2>&1
  rc=$?
  local checks
  checks=$(grep -hE "checks|passed|failed" "$OUT/$name.log" | tail -1 | cut -c1-80)
  rows+=("$(printf '%-22s np=%d rc=%-3d %4ds  %s' "$name" "$np" "$rc" $(( $(date +%s) - t0 )) "$checks")")
  grep -E "FAIL|CHECK|failed:" "$OUT/$name.log" | head -15
}
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; } > "$OUT/masks_info.txt" 2>&1
run masks_np1 1 60 1
[ "$ngpu" -ge 2 ] && run masks_np2 2 60 1
run full_np1 1 100 0
[ "$ngpu" -ge 2 ] && [ "${FULL2:-0}" = 1 ] && run full_np2 2 150 0
echo
echo "== masks on the NCCL device path: test_dist_gpu ($ngpu GPU(s) visible) =="
printf '%s\n' "${rows[@]}"
