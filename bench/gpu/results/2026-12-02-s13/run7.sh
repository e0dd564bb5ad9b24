#!/usr/bin/env bash
# device call 7 (session 13): the d = 128 forward with Q in registers (PP bit 7, wgmma RS for S)
# against the library's, lab, 5 rounds
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/lab.tar.xz
F="fwd wgmma (library),fwd wgmma q regs"
L=build-dev/bench/gpu/dfa_lab_cuda
stamp causal
timeout 90 $L --dims 128 --rounds 5 --only "$F" --seqlens 2k,8k,32k --causal 0,1 > $OUT/lab_causal.log 2>&1
tail -13 $OUT/lab_causal.log
stamp window
timeout 80 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
tail -5 $OUT/lab_window.log
stamp docs
timeout 80 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --docs 4096 > $OUT/lab_docs.log 2>&1
tail -5 $OUT/lab_docs.log
stamp done
