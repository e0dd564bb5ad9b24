#!/usr/bin/env bash
# session 18, device call 4: the forward's "desc add" (PP bit 9) against the library's, 5
# interleaved rounds (run 2's 3 rounds were within the power cap's noise): causal 8k / 32k and
# the masks at 128k (d = 128), and d = 64 causal 2k / 32k
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
L=build-dev/bench/gpu/dfa_lab_cuda
FW='fwd wgmma (library),fwd wgmma desc add'
stamp fwd
timeout 90 $L --only "$FW" --dims 128 --causal 1,0 --seqlens 8k,32k --check 600 --reps 5 --rounds 5 > $OUT/fwd_causal.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$FW" --dims 128 --seqlens 128k --window 4096 --check 600 --reps 5 --rounds 5 > $OUT/fwd_win.log 2>&1; echo "rc=$?"
timeout 90 $L --only "$FW" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 5 --rounds 5 > $OUT/fwd_docs.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$FW" --dims 64 --causal 1 --seqlens 2k,32k --check 600 --reps 5 --rounds 5 > $OUT/fwd_d64.log 2>&1; echo "rc=$?"
grep -hv "^variant" $OUT/fwd_*.log
stamp done
cd $OUT && tar czf all.tgz *.log; ls -la all.tgz
