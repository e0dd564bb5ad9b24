#!/usr/bin/env bash
# Issue 14's 2-GPU bar: packed documents at 128k tokens, scaling efficiency >= 0.9 against one
# GPU (and the 4k sliding window beside it). For the lent 2-GPU machine (nvidia-h200-x2);
# builds nothing: B is a build with CUDA, MPI and NCCL. Roughly 5 minutes.
#   B=build-gpu OUT=out bench/seqpar/masks_2gpu.sh
# 1. test_dist_gpu under mpirun -np 2 (the mask tests only: DFA_GPU_TEST_MASKS=1);
# 2. dist-bench --device cuda at 128k, 32 heads x 128, bf16, causal: documents with log-normal
#    lengths of mean 4096 (--docs 4096), the same with DFA_FLAG_SAME_DOCS (--same-docs: a training
#    step's later layers), the trainer's GQA shape (16 / 8 heads) with it, then a 4096-token window
#    (--window 4096); on 1 GPU (np 1) and on 2 (np 2, whose single-GPU reference gives the
#    efficiency "eff f+b");
# 3. rank-sim's prediction for the same shapes on GPU 0 alone (each rank's pass without the waits
#    for messages: the bound the measured efficiency is to be compared with).
# Logs (and JSON) under $OUT; a short summary table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build-gpu}
OUT=${OUT:-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
D=$B/cli/distflash
[ -x "$D" ] || { echo "no $D: build with CUDA, MPI and NCCL first (B=build folder)"; exit 2; }
MPI=(mpirun --allow-run-as-root --oversubscribe -x NCCL_NVLS_ENABLE -x PATH -x LD_LIBRARY_PATH)
S=${S:-128k}
ARGS=${DB_ARGS:-"--heads 32 --kv-heads 32 --head-dim 128 --reps 3 --warmup 1"}
rows=()
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv; } > "$OUT/masks2_info.txt" 2>&1

timeout 90 "${MPI[@]}" -x DFA_GPU_TEST_MASKS=1 -np 2 $B/tests/gpu/test_dist_gpu > "$OUT/test_masks_np2.log" 2>&1
rows+=("test_dist_gpu masks np=2: rc=$? $(grep -hE 'checks|passed|failed' "$OUT/test_masks_np2.log" | tail -1 | cut -c1-80)")

GQA="--heads 16 --kv-heads 8 --head-dim 128 --reps 3 --warmup 1"
preds=()
# name: mask options [| other shape options]
for cfg in "docs:--docs 4096" "same:--docs 4096 --same-docs" "gqa:--docs 4096 --same-docs|$GQA" "window:--window 4096"; do
  name=${cfg%%:*}; opts=${cfg#*:}; mask=${opts%%|*}; shape=$ARGS
  [[ "$opts" == *"|"* ]] && shape=${opts#*|}
  for np in 1 2; do
    log="$OUT/distbench_${name}_np$np.log"
    timeout 200 "${MPI[@]}" -np $np "$D" dist-bench --device cuda --seqlens "$S" $mask $shape \
        $([ $np = 1 ] && echo --no-single) --json "$OUT/distbench_${name}_np$np.json" > "$log" 2>&1
    rc=$?
    # the single GPU, ours (balanced) and the ring, overlap on
    while read -r line; do rows+=("$(printf '%-7s np=%d  %s' "$name" "$np" "$line")"); done < <(
      grep -E "^ *[0-9]+ +(1 GPU|balanced|ring) +(-|on) " "$log")
    [ $rc = 0 ] || rows+=("$name np=$np: rc=$rc (see $log)")
  done
  rs_shape=$(echo "$shape" | sed -e 's/--head-dim [0-9]*//' -e 's/--warmup [0-9]*//' -e 's/--reps [0-9]*/--reps 5/')
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$D" rank-sim --ranks 2 --seqlen "$S" $mask $rs_shape > "$OUT/ranksim_$name.log" 2>&1
  preds+=("$(printf '%-7s %s' "$name" "$(grep -E 'busiest' "$OUT/ranksim_$name.log" | sed 's/^ *//')")")
done
echo
echo "== issue 14 on 2 GPUs: $S tokens, --docs 4096 / --window 4096 (eff f+b: T1 / (P * TP); bar >= 0.9 with docs) =="
printf '%-7s %-4s %8s %-9s %-7s %9s %10s %9s %9s %8s %8s\n' mask np S schedule overlap "fwd ms" "f+b ms" "fwd TF/s" "f+b TF/s" "eff f+b" "vs ring"
printf '%s\n' "${rows[@]}"
echo
echo "== rank-sim on GPU 0 (the bound each rank's own work allows; transfers not waited for) =="
printf '%s\n' "${preds[@]}"
