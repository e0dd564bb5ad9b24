#!/usr/bin/env bash
# Everything two GPUs of one host measure, in one go: build, the GPU tests (one
# and two GPUs), DistFlashAttn's benchmark against PyTorch's context parallelism, the
# longest sequence that fits. Logs go to $OUT (default: build-gpu/bench-out/seqpar, inside the
# build tree); a short summary is printed last.
#   STAGES="build test distbench fit cppeer python"   (default: build test)
#   DB_ARGS  extra dist-bench options (default: --seqlens 32k,64k,128k,256k)
#   CP_ARGS  extra cp_peer.py options (default: the same lengths)
set -uo pipefail
cd "$(dirname "$0")/../.."
B=build-gpu
OUT=${OUT:-$B/bench-out/seqpar}; mkdir -p "$OUT"
STAGES=${STAGES:-"build test"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary=()
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
MPI=(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH)
SEQS=${SEQS:-32k,64k,128k,256k}

if has build; then
  stamp build
  { date -u; nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv; nvcc --version | tail -1;
    mpirun --version | head -1; } > "$OUT/info.txt" 2>&1
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DDFA_WITH_NCCL=ON -DDFA_WITH_MPI=ON \
        -DDFA_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > /tmp/build.log 2>&1 &&
  cmake --build $B -j "$(nproc)" >> /tmp/build.log 2>&1
  rc=$?; summary+=("build rc=$rc"); grep -E "NCCL|MPI|CUDA" /tmp/build.log | head -5 >> "$OUT/info.txt"
  [ $rc = 0 ] || { cp /tmp/build.log "$OUT/"; grep -E "error" /tmp/build.log | head -20; exit 1; }
fi
if has test; then
  stamp test
  (cd $B && timeout 580 ctest -L gpu --output-on-failure) > "$OUT/test.log" 2>&1
  rc=$?; summary+=("ctest -L gpu rc=$rc: $(grep -E 'tests passed' "$OUT/test.log")")
  grep -E "checks,|Passed|Failed|\*\*\*|FAIL" "$OUT/test.log" | cut -c1-300 | head -40
fi
if has distbench; then
  stamp distbench
  timeout 560 "${MPI[@]}" $B/cli/distflash dist-bench --device cuda --seqlens "$SEQS" ${DB_ARGS:-} \
      --json "$OUT/dist.json" > "$OUT/distbench.log" 2>&1
  rc=$?; summary+=("dist-bench rc=$rc")
  grep -vE "^\s+R[0-9]|compute/wait" "$OUT/distbench.log" | tail -30
fi
if has fit; then
  stamp fit
  timeout 560 "${MPI[@]}" $B/cli/distflash dist-bench --device cuda --fit ${FIT_ARGS:-} > "$OUT/fit.log" 2>&1
  rc=$?; summary+=("fit rc=$rc: $(tail -1 "$OUT/fit.log")")
fi
if has cppeer; then
  stamp cppeer
  PYTHONUNBUFFERED=1 timeout 560 python3 -m torch.distributed.run --nproc-per-node 2 bench/seqpar/cp_peer.py \
      --seqlens "$SEQS" ${CP_ARGS:-} --json "$OUT/cp.json" > "$OUT/cp.log" 2>&1
  rc=$?; summary+=("cp peer rc=$rc"); grep -vE "Warning|warn" "$OUT/cp.log" | tail -8
fi
if has python; then
  stamp python
  PYTHONPATH=python DISTFLASH_LIB=$PWD/$B/src/libdistflash.so timeout 500 python3 -m pytest -q python/tests \
      > "$OUT/python.log" 2>&1
  rc=$?; summary+=("pytest rc=$rc: $(tail -1 "$OUT/python.log")")
  grep -E "FAIL|Error" "$OUT/python.log" | head -20
fi
if has overhead; then
  PYTHONPATH=python DISTFLASH_LIB=$PWD/$B/src/libdistflash.so timeout 300 python3 python/bench/overhead.py \
      > "$OUT/overhead.log" 2>&1
  rc=$?; summary+=("overhead rc=$rc"); tail -15 "$OUT/overhead.log"
fi
if has example; then   # the binding's example against the PyTorch-only peer
  stamp example
  PYTHONUNBUFFERED=1 PYTHONPATH=python DISTFLASH_LIB=$PWD/$B/src/libdistflash.so timeout 400 \
      python3 -m torch.distributed.run --nproc-per-node 2 python/examples/train_cp.py ${EX_ARGS:---context 131072 --attention both --steps 4 --warmup 1} \
      > "$OUT/example.log" 2>&1
  rc=$?; summary+=("example rc=$rc"); grep -vE "Warning|warn|OMP_NUM" "$OUT/example.log" | tail -12
fi
stamp done
printf '%s\n' "${summary[@]}"
