#!/usr/bin/env bash
# device call 2 (session 14): the persistent d = 128 forward with the owed P V (PP bit 8: a tile's
# last P V issued with the next tile's first S, the epilogue after the first softmax) against the
# library's (250), lab, 5 interleaved rounds
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/lab.tar.xz
F="fwd wgmma (library),fwd wgmma owed pv"
L=build-dev/bench/gpu/dfa_lab_cuda
stamp causal
timeout 100 $L --dims 128 --rounds 5 --only "$F" --seqlens 2k,8k,32k --causal 0,1 > $OUT/lab_causal.log 2>&1
tail -13 $OUT/lab_causal.log
stamp window
timeout 90 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_window.log 2>&1
tail -5 $OUT/lab_window.log
stamp docs
timeout 90 $L --dims 128 --rounds 5 --only "$F" --seqlens 32k,128k --causal 1 --docs 4096 > $OUT/lab_docs.log 2>&1
tail -5 $OUT/lab_docs.log
stamp done
