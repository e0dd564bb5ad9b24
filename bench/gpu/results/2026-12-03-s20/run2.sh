#!/usr/bin/env bash
# session 20, device call 2: the library with bit 18 promoted for the unmasked d = 128 instances
# (295961; short walks 296217): the masked kernel's bit 18 forms against the library (rows m1-m3:
# without bits 16 / 17, with 16 alone, with 17 alone), then every GPU test family and memcheck
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
finish() { cd $OUT && tar czf all.tgz *.log *.csv 2>/dev/null; ls -la all.tgz; }
trap finish EXIT
tar xJf .ab/bin/b.tar.xz
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
BW='bwd wgmma atomic dq,bwd ws dq alt,bwd ws dq alt m1,bwd ws dq alt m2,bwd ws dq alt m3'
stamp masks
timeout 100 $L --only "$BW" --dims 128 --seqlens 128k --window 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_win.log 2>&1; echo "rc=$?"
timeout 120 $L --only "$BW" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 3 --rounds 3 > $OUT/ab_docs.log 2>&1; echo "rc=$?"
grep -v "^variant" $OUT/ab_win.log $OUT/ab_docs.log | grep -v "^\["
stamp checks
OUT=$OUT timeout $(( 560 - ($(date +%s) - t0) )) bash bench/gpu/gpu_checks.sh $B; echo "checks rc=$?"
stamp done
kill $SMI
