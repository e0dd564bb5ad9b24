#!/usr/bin/env bash
# The GPU trainer on the lent H200 machine (1 GPU now, 2 later: np = the GPUs visible):
# build, the GPU tests, `distflash train --device cuda` on the 756M configuration against the
# PyTorch peer (bench/train/peer/train_peer.py). Logs under $OUT (or out/); a summary table last.
#   STAGES="build test memcheck smoke bench fit peer"   (default: build test smoke)
#   CONTEXTS   contexts of the bench and peer stages (default "65536 131072"; the bars need 262144
#              and 524288, about a minute a step per 256k tokens per GPU: budget accordingly)
#   POLICIES   checkpoint policies of the bench stage (default "attn-output layer")
#   STEPS      timed steps per run (default 3; the median is reported, the first step is one of them)
#   PROFILE=1  the per-phase GPU time breakdown (matmul, attention, communication, element-wise,
#              optimizer) in each bench log
#   FIT="1048576"  contexts to try with one step each (the longest trainable context);
#              FIT_POLICY its checkpoint policy (default attn-output; layer needs less memory)
# A device call is limited to 10 minutes, and build-gpu/ stays between calls: run the stages in
# separate calls, e.g. STAGES="build test", then STAGES="smoke bench" CONTEXTS=65536, then
# STAGES="bench peer" CONTEXTS=262144 POLICIES="attn-output layer" STEPS=2 (a 756M step at 256k
# tokens per GPU is about a minute).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}; mkdir -p "$OUT"
STAGES=${STAGES:-"build test smoke"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NP=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); NP=${NP:-1}; [ "$NP" -ge 1 ] || NP=1
B=build-gpu
run_np() { # run_np N cmd...: under mpirun when N > 1
  local n=$1; shift
  if [ "$n" -gt 1 ]; then mpirun --allow-run-as-root --oversubscribe -np "$n" -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH "$@"
  else "$@"; fi
}
summary=(); rows=()
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
MODEL=(--layers 16 --d-model 2048 --heads 16 --kv-heads 8 --ffn 5632)

if has build; then
  stamp build
  { date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; nvcc --version | tail -1; } > "$OUT/info.txt" 2>&1
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DDFA_WITH_CUDA=ON -DDFA_WITH_NCCL=ON -DDFA_WITH_MPI=ON \
        -DDFA_CUDA_GENCODE="-gencode=arch=compute_90a,code=sm_90a" > "$OUT/build.log" 2>&1 &&
  cmake --build $B -j "$(nproc)" >> "$OUT/build.log" 2>&1
  rc=$?; summary+=("build rc=$rc")
  [ $rc = 0 ] || { grep -E "error" "$OUT/build.log" | head -20; printf '%s\n' "${summary[@]}"; exit 1; }
fi
if has test; then
  stamp test
  (cd $B && DFA_TRAIN_STATS=1 timeout 560 ctest -R "^test_gpu_(kernels|model|train)" -E memcheck --output-on-failure -V) > "$OUT/test.log" 2>&1
  rc=$?; summary+=("ctest test_gpu_{kernels,model,train*} rc=$rc: $(grep -E 'tests passed' "$OUT/test.log")")
  grep -E "checks,|relative L2|bitwise|apart|Passed|Failed|\*\*\*|FAIL|skipped" "$OUT/test.log" | cut -c1-200 | head -60
fi
if has memcheck; then # the kernels and the model's passes under compute-sanitizer (slow)
  stamp memcheck
  (cd $B && timeout 560 ctest -R "^test_gpu_.*_memcheck" --output-on-failure) > "$OUT/memcheck.log" 2>&1
  rc=$?; summary+=("memcheck rc=$rc: $(grep -E 'tests passed' "$OUT/memcheck.log")")
  grep -E "ERROR SUMMARY|Invalid|Failed" "$OUT/memcheck.log" | head -20
fi
if has smoke; then # the small passkey model on the GPU(s): the loss must fall; a checkpoint round trip
  stamp smoke
  run_np "$NP" timeout 300 $B/cli/distflash train --device cuda --steps 300 --warmup 20 --length-warmup 0 \
      --context 2048 --eval-every 0 --eval-seqs 32 --save "$OUT/smoke.ckpt" --log "$OUT/smoke.csv" --quiet \
      > "$OUT/smoke.log" 2>&1
  rc=$?; summary+=("smoke rc=$rc: $(grep -E '^loss' "$OUT/smoke.log" | cut -c1-100)")
  tail -6 "$OUT/smoke.log"
fi
# one `distflash train` timing run: context, policy -> a row of the table
bench_one() {
  local ctx=$1 pol=$2 log="$OUT/bench_${1}_${2}.log"
  run_np "$NP" timeout 590 $B/cli/distflash train --device cuda "${MODEL[@]}" --context "$ctx" --batch 1 \
      --steps "${STEPS:-3}" --warmup 1 --length-warmup 0 --eval-seqs 0 --eval-every 0 --checkpoint "$pol" --quiet \
      --profile "${PROFILE:-0}" > "$log" 2>&1
  local rc=$?
  python3 - "$log" "$ctx" "$pol" "$NP" "$rc" <<'PY'
import re, sys
log, ctx, pol, np_, rc = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
t = open(log, errors="replace").read()
m = re.search(r"median step ([0-9.]+) s", t); p = re.search(r"train: (\d+) parameters", t)
mem = re.search(r"gpu memory: peak ([0-9.]+) MiB", t)
if rc != 0 or not m:
    low = t.lower()
    why = "OOM" if any(w in low for w in ("out of device memory", "out of memory", "out_of_memory")) else f"failed rc={rc}"
    print(f"distflash  {pol:12s} {ctx:>8d}  {why}"); sys.exit(0)
step, n = float(m.group(1)), int(p.group(1))
L, H, hd = 16, 16, 128
dense = 6 * n * ctx; attn = 3.5 * 4 * H * hd * ctx ** 2 * 0.5 * L
mfu = (dense + attn) / step / (989e12 * np_)
print(f"distflash  {pol:12s} {ctx:>8d}  step {step:8.3f} s  {ctx / step:10,.0f} tok/s  peak {float(mem.group(1)) / 1024:6.1f} GiB/GPU  MFU {mfu:.3f}")
PY
}
if has bench; then
  for ctx in ${CONTEXTS:-65536 131072}; do
    for pol in ${POLICIES:-attn-output layer}; do
      stamp "bench $ctx $pol"; rows+=("$(bench_one "$ctx" "$pol")"); echo "${rows[-1]}"
      grep -E "gpu time per step" "$OUT/bench_${ctx}_${pol}.log"
    done
  done
fi
if has fit; then
  for ctx in ${FIT:-}; do
    stamp "fit $ctx"; STEPS=1 rows+=("$(bench_one "$ctx" "${FIT_POLICY:-attn-output}" | sed 's/^distflash /fit       /')"); echo "${rows[-1]}"
  done
fi
if has peer; then
  for ctx in ${CONTEXTS:-65536 131072}; do
    stamp "peer $ctx"
    if [ "$NP" -gt 1 ]; then L=(python3 -m torch.distributed.run --nproc-per-node "$NP"); else L=(python3); fi
    PYTHONUNBUFFERED=1 timeout 590 "${L[@]}" bench/train/peer/train_peer.py --context "$ctx" --steps "${STEPS:-3}" \
        --warmup 1 --ckpt layer > "$OUT/peer_$ctx.log" 2>&1
    line=$(grep -E "^peer torch" "$OUT/peer_$ctx.log" | tail -1)
    rows+=("peer       layer        $(printf '%8d' "$ctx")  ${line#*: }"); echo "${rows[-1]}"
  done
fi
stamp done
echo "== summary ($NP GPU(s)) =="
printf '%s\n' "${summary[@]}"
[ ${#rows[@]} -gt 0 ] && { echo "who        policy        context  result"; printf '%s\n' "${rows[@]}"; }
exit 0
