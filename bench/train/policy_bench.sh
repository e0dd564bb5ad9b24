#!/usr/bin/env bash
# Activation checkpointing policies of `distflash train` side by side: per-step time, attention
# forward calls and peak memory, at a context where attention dominates the step.
#   bench/train/policy_bench.sh [build-dir] [ranks] [context] [steps]
# Defaults: build, 2 ranks (one thread each), context 32768 (16384 positions per rank), 4 steps
# (the median step is reported; the first step warms up). A one-layer-of-work model: d_model 64,
# one head of 64, so attention (quadratic in the context) outweighs everything else.
set -euo pipefail
build=${1:-build}; ranks=${2:-2}; context=${3:-32768}; steps=${4:-4}
cli=$build/cli/distflash
[ -x "$cli" ] || { echo "no $cli: build first (cmake -S . -B $build && cmake --build $build -j)" >&2; exit 2; }
model=(--layers 2 --d-model 64 --heads 1 --kv-heads 1 --ffn 128 --context "$context" --batch 1)
run=(--steps "$steps" --warmup 1 --length-warmup 0 --eval-seqs 0 --quiet)
launch=(mpirun --oversubscribe --allow-run-as-root -np "$ranks" -x OMP_NUM_THREADS=1)
[ "$ranks" = 1 ] && launch=(env OMP_NUM_THREADS=1)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# ${launch[*]} $cli train ${model[*]} ${run[*]} --checkpoint POLICY"
declare -A step mem calls attn
for policy in layer attn-output none; do
  out=$("${launch[@]}" "$cli" train "${model[@]}" "${run[@]}" --checkpoint "$policy" 2>&1) || { echo "$out" >&2; exit 1; }
  step[$policy]=$(sed -n 's/.*median step \([0-9.]*\) s.*/\1/p' <<<"$out")
  calls[$policy]=$(sed -n 's/^attention: \([0-9.]*\) forward.*/\1/p' <<<"$out")
  attn[$policy]=$(sed -n 's/.*), \([0-9.]*\) s per step on rank 0/\1/p' <<<"$out")
  mem[$policy]=$(sed -n 's/.*peak resident \([0-9.]*\) MiB.*/\1/p' <<<"$out")
  echo "#   $policy done: ${step[$policy]} s per step" >&2
done
printf '| policy | median step (s) | attention fwd calls / step | attention (s / step) | peak RSS (MiB) | speed vs layer | memory vs layer |\n'
printf '|---|---|---|---|---|---|---|\n'
for policy in layer attn-output none; do
  awk -v p="$policy" -v s="${step[$policy]}" -v c="${calls[$policy]}" -v a="${attn[$policy]}" -v m="${mem[$policy]}" \
      -v sl="${step[layer]}" -v ml="${mem[layer]}" \
      'BEGIN { printf "| %s | %.3f | %s | %.3f | %.1f | %.2fx | %+.1f%% |\n", p, s, c, a, m, sl / s, 100 * (m - ml) / ml }'
done
