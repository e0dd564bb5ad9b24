#!/usr/bin/env bash
# session 17, device call 2: dK, dV stored by TMA in the unmasked d = 128 backward too (lab row
# "bwd ws tma dkv all", VARIANT 1305 unmasked) against the library (1049), 3 interleaved rounds;
# run 1's stamps put the direct stores' epilogue at 10% of the SMs' time at causal 2k
set -uo pipefail
tar xJf .ab/bin/b.tar.xz
L=build-dev/bench/gpu/dfa_lab_cuda
AB='bwd wgmma atomic dq,bwd ws tma dkv all'
timeout 200 $L --only "$AB" --dims 128 --causal 1,0 --seqlens 2k,8k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_tma.log 2>&1
echo "rc=$?"; cat $OUT/ab_tma.log
