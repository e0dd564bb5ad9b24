#!/usr/bin/env bash
# session 18, device call 2: the instruction diet found by run 1's ncu source view. Backward lab
# rows against the library's kernels, 3 interleaved rounds: 1049 (direct dK, dV), "desc add"
# (wgmma descriptors as base + constant, bit 15), "desc scale stsm" (+ dS^T scaled, bit 16, and
# stored by stmatrix, bit 17), their TMA dK/dV forms; the forward's "desc add" (PP bit 9) against
# the library's; causal and not at 2k / 8k / 32k, the masks at 128k; then ncu's instruction count
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
BW='bwd ws runs defer ex2,bwd ws desc add,bwd ws desc scale stsm,bwd ws tma dkv all,bwd ws desc scale stsm tma'
FW='fwd wgmma (library),fwd wgmma desc add'
stamp bwd
timeout 200 $L --only "$BW" --dims 128 --causal 1,0 --seqlens 2k,8k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_bwd.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_bwd.log
stamp fwd
timeout 120 $L --only "$FW" --dims 128 --causal 1,0 --seqlens 2k,8k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_fwd.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_fwd.log
before 330 && {
stamp masks
timeout 90 $L --only "$BW,$FW" --dims 128 --seqlens 128k --window 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_win.log 2>&1; echo "rc=$?"
timeout 120 $L --only "$BW,$FW" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_docs.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_win.log $OUT/ab_docs.log
}
before 420 && {
stamp d64
timeout 80 $L --only "bwd ws runs defer ex2,bwd ws desc add,bwd ws desc scale stsm,fwd wgmma (library),fwd wgmma desc add" --dims 64 --causal 1 --seqlens 2k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_d64.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_d64.log
}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && before 480; then
  stamp ncu
  for v in "bwd ws tma dkv all" "bwd ws desc scale stsm tma"; do
    timeout 40 $NCU --metrics smsp__inst_executed.sum,gpu__time_duration.sum,sm__inst_executed_pipe_uniform.sum -k regex:bwd_ws_kernel --launch-skip 5 --launch-count 1 $L --only "$v" --dims 128 --causal 1 --seqlens 2k --check 64 --reps 5 --rounds 1 > "$OUT/ncu_${v// /_}.log" 2>&1
    echo "$v"; grep -E "inst_executed|duration" "$OUT/ncu_${v// /_}.log"
  done
fi
stamp done
kill $SMI
cd $OUT && tar czf all.tgz *.log *.csv 2>/dev/null; ls -la all.tgz
