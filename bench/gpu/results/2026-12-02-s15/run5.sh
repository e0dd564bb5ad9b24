#!/usr/bin/env bash
# session 15, device call 5 (short: the session's last device time): the backward's producer issuing
# Q and dO copies before its lse and D reads ("bwd ws q first", VARIANT bit 12) against the library
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/lab5.tar.xz
L=build-dev/bench/gpu/dfa_lab_cuda; F="bwd wgmma atomic dq,bwd ws q first"
stamp causal
timeout 60 $L --dims 128 --rounds 3 --only "$F" --seqlens 2k,32k --causal 0,1 > $OUT/lab_causal.log 2>&1
grep -v early $OUT/lab_causal.log | grep -E "bwd|variant" | tail -8
stamp window
timeout 40 $L --dims 128 --rounds 3 --only "$F" --seqlens 128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
grep -v early $OUT/lab_window.log | grep -E "bwd|variant" | tail -3
stamp done
