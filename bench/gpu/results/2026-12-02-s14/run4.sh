#!/usr/bin/env bash
# device call 4 (session 14): the persistent forward's tile slots carrying the key blocks (the
# consumers start a tile without the mask's global reads) against the library at bbad29a
# (build-prev), masks bench alternated, then the GPU tests of the wgmma kernels on it
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/prev.tar.xz
M() { DISTFLASH_LIB=build-$1/src/libdistflash.so PYTHONPATH=python PYTHONUNBUFFERED=1 timeout 200 \
        python3 bench/gpu/masks_bench.py --json $OUT/masks_$1_$2.json $3 > $OUT/masks_$1_$2.log 2>&1; echo "masks $1 $2 rc=$?"; }
stamp masks
M prev 1 --no-flex; M dev 1 ""; M prev 2 --no-flex; M dev 2 --no-flex; M prev 3 --no-flex; M dev 3 --no-flex; stamp
for w in prev_1 dev_1 prev_2 dev_2 prev_3 dev_3; do echo "== $w"; grep -E "^(docs|window) " $OUT/masks_$w.log; done
stamp tests
{ DFA_GPU_TEST_KERNEL=wgmma timeout 150 build-dev/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn.log 2>&1
grep -E "checks,|^rc=|FAIL" $OUT/t_attn.log | head -6 | cut -c1-300
stamp done
cd $OUT && tar czf all.tgz *.log *.json
