#!/usr/bin/env bash
# device call 5 (session 14): ex2 (bit 3) on the library's d = 128 backward kernels (unmasked 1041
# -> 1049, masked 1297 -> 1305), lab, 5 interleaved rounds
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/lab.tar.xz
F="bwd wgmma atomic dq,bwd ws runs defer ex2"
L=build-dev/bench/gpu/dfa_lab_cuda
stamp window
timeout 100 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
grep -v early $OUT/lab_window.log | tail -5
stamp docs
timeout 100 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --docs 4096 > $OUT/lab_docs.log 2>&1
grep -v early $OUT/lab_docs.log | tail -5
stamp causal
timeout 80 $L --dims 128 --rounds 5 --only "$F" --seqlens 8k,32k --causal 1 > $OUT/lab_causal.log 2>&1
grep -v early $OUT/lab_causal.log | tail -5
stamp done
cd $OUT && tar czf all.tgz *.log
