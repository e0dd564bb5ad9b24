#!/usr/bin/env bash
# session 15, device call 2: the library at HEAD (ex2 promoted at d = 128); peers and masks benches
# with the gradients taken by autograd.grad (no accumulation into .grad); a window sweep (the
# backward's per-CTA fixed cost); kernel-by-kernel profile of forward+backward, ours and cuDNN
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/h.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
stamp profile
timeout 150 python3 bench/gpu/bwd_profile.py --windows 512,4096 > $OUT/profile.log 2>&1; echo "profile rc=$?"
grep -E "^==" $OUT/profile.log
stamp masks
timeout 200 python3 bench/gpu/masks_bench.py --idle 5 --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
grep -E "^(docs|window) " $OUT/masks.log
stamp sweep
for w in 128 512 1024 2048 4096 8192 16384; do
  timeout 60 python3 bench/gpu/masks_bench.py --masks window --window $w --no-flex --json $OUT/sweep_$w.json > $OUT/sweep_$w.log 2>&1
  echo "w=$w $(python3 -c "import json;r=json.load(open('$OUT/sweep_$w.json'))[0];print('fwd %.3f ms fb %.3f ms bwd %.3f ms' % (r['ours_fwd_ms'], r['ours_fb_ms'], r['ours_fb_ms']-r['ours_fwd_ms']))")"
done
stamp bench
timeout 120 $B/tools/distflash-bench bench --device cuda --json $OUT/ours.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
timeout 170 python3 bench/gpu/peers.py --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"
python3 bench/gpu/table.py $OUT/ours.json $OUT/peers.json > $OUT/table.txt 2>&1; cat $OUT/table.txt
stamp done
cd $OUT && tar czf all.tgz *.log *.json table.txt
