#!/usr/bin/env bash
# device call 5 (session 12): the older backward bits again on the kernel in runs
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/lab.tar.xz
L=build-dev/bench/gpu/dfa_lab_cuda
O="bwd wgmma atomic dq,bwd ws runs"
stamp causal d128
timeout 200 $L --dims 128 --rounds 3 --only "$O" --seqlens 8k,32k --causal 1 > $OUT/lab_causal.log 2>&1
tail -13 $OUT/lab_causal.log
stamp window d128
timeout 150 $L --dims 128 --rounds 3 --only "$O" --seqlens 32k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
tail -7 $OUT/lab_window.log
stamp d64
timeout 120 $L --dims 64 --rounds 3 --only "$O" --seqlens 32k --causal 1 > $OUT/lab_d64.log 2>&1
tail -7 $OUT/lab_d64.log
stamp done
cd $OUT && tar czf logs.tgz *.log
