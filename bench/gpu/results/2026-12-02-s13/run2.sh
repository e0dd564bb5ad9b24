#!/usr/bin/env bash
# device call 2 (session 13): the masks bench with the candidate library (forward keeping its
# maxima at d = 128, DEFER on the masked d = 128 backward) and the library before it, alternated;
# FlexAttention once in the same call; DEFER on the masked d = 64 backward in the lab
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/prev.tar.xz
M() { DISTFLASH_LIB=build-$1/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 200 \
        python3 bench/gpu/masks_bench.py --json $OUT/masks_$1_$2.json $3 > $OUT/masks_$1_$2.log 2>&1; echo "masks $1 $2 rc=$?"; }
stamp masks
M prev 1 --no-flex; M dev 1 ""; stamp; M prev 2 --no-flex; M dev 2 --no-flex; stamp
for w in prev_1 dev_1 prev_2 dev_2; do echo "== $w"; grep -E "^(docs|window) " $OUT/masks_$w.log; done
tail -6 $OUT/masks_dev_1.log
stamp lab d64 masked defer
timeout 100 build-dev/bench/gpu/dfa_lab_cuda --dims 64 --rounds 5 --only "bwd wgmma atomic dq,bwd ws runs defer" --seqlens 32k,128k --causal 1 --window 4096 > $OUT/lab_d64_window.log 2>&1
grep -v early $OUT/lab_d64_window.log | tail -4
timeout 60 build-dev/bench/gpu/dfa_lab_cuda --dims 64 --rounds 5 --only "bwd wgmma atomic dq,bwd ws runs defer" --seqlens 128k --causal 1 --docs 4096 > $OUT/lab_d64_docs.log 2>&1
grep -v early $OUT/lab_d64_docs.log | tail -3
stamp done
cd $OUT && tar czf logs.tgz *.log *.json
