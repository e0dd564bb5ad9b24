#!/usr/bin/env bash
# The Python binding's masks on GPUs, for a GPU machine: a few minutes.
#   OUT=out python/tests/gpu_masks.sh          (B=build folder; default build-gpu)
# 1. builds libdistflash with CUDA and NCCL in $B if $B/src/libdistflash.so is missing (the
#    shared library only: no tests, no MPI);
# 2. pytest python/tests/test_dist.py (2 GPUs: dist_attention with and without documents and
#    windows against attention() on the gathered sequence; skipped with one GPU);
# 3. pytest of the mask and CUDA tests on one GPU (test_dist_masks.py, test_masks.py, test_cuda.py).
# Logs under $OUT; a short summary table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
OUT=${OUT:-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
rows=()
t0=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print('torch', torch.__version__)"; } \
  > "$OUT/gpu_masks_info.txt" 2>&1
if [ ! -e "$B/src/libdistflash.so" ]; then
  { cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DDFA_WITH_CUDA=ON -DDFA_WITH_NCCL=ON -DDFA_WITH_MPI=OFF \
          -DDFA_BUILD_TESTS=OFF -DDFA_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" &&
    cmake --build "$B" -j "$(nproc)" --target distflash_shared; } > "$OUT/gpu_masks_build.log" 2>&1
  rc=$?
  rows+=("$(printf '%-28s rc=%-3d %4ds' build "$rc" $(( $(date +%s) - t0 )))")
  if [ $rc != 0 ]; then grep -E "error" "$OUT/gpu_masks_build.log" | head -20; printf '%s\n' "${rows[@]}"; exit 1; fi
fi
lib=$PWD/$B/src/libdistflash.so
run() { # name seconds pytest-args...
  local name=$1 secs=$2 t rc; shift 2
  t=$(date +%s)
  PYTHONPATH=python DISTFLASH_LIB=$lib timeout "$secs" python3 -m pytest -q -p no:cacheprovider -rs "$@" \
    > "$OUT/$name.log" 2>&1
  rc=$?
  rows+=("$(printf '%-28s rc=%-3d %4ds  %s' "$name" "$rc" $(( $(date +%s) - t )) "$(tail -1 "$OUT/$name.log" | cut -c1-70)")")
  grep -E "^(FAILED|ERROR)|Error:|assert" "$OUT/$name.log" | head -15
}
run dist_2gpu 300 python/tests/test_dist.py
run masks_1gpu 200 python/tests/test_dist_masks.py python/tests/test_masks.py python/tests/test_cuda.py
echo
echo "== Python masks on GPUs ($ngpu GPU(s) visible; test_dist.py needs 2) =="
printf '%s\n' "${rows[@]}"
