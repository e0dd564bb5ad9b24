#!/usr/bin/env bash
# For the lead, on the lent GPU machine (minutes): does scripts/demo take the GPU path (one rank
# per GPU, --device cuda) and, where the trainer refuses the device, fall back to the CPU with a
# one-line note? Also: the safetensors export and `distflash export` on that machine.
#   OUT=/some/dir bench/train/gpu_demo_check.sh
# Logs under $OUT; a summary table last. A short run: 200 steps, 8 held-out sequences.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/gpu_demo_check}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
timeout 540 scripts/demo -- --steps 200 --eval-seqs 8 --eval-every 0 > "$OUT/demo.log" 2>&1
demo_rc=$?
path=cpu
grep -q -- 'train --device cuda' "$OUT/demo.log" && path="gpu attempted"
grep -q 'refused --device cuda' "$OUT/demo.log" && path="gpu refused -> cpu"
grep -q '^done:' "$OUT/demo.log" && ! grep -q 'refused --device cuda' "$OUT/demo.log" &&
  grep -q -- 'train --device cuda' "$OUT/demo.log" && path="gpu"
./build/cli/distflash export out/demo/model.ckpt "$OUT/model-bf16.safetensors" --dtype bf16 > "$OUT/export.log" 2>&1
export_rc=$?
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
echo
echo "| check | result |"
echo "|---|---|"
echo "| GPUs (nvidia-smi -L) | $(grep -c '^GPU ' "$OUT/gpus.txt") |"
echo "| build | $(./build/cli/distflash --version 2>&1) |"
echo "| scripts/demo exit status | $demo_rc |"
echo "| path taken | $path |"
echo "| final line | $(grep -E '^loss ' "$OUT/demo.log" | cut -c1-90) |"
echo "| distflash export (bf16) | rc $export_rc: $(tail -1 "$OUT/export.log" | cut -c1-80) |"
echo "| wall time | $(( $(date +%s) - t0 )) s |"
