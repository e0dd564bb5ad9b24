#!/usr/bin/env bash
# device call 6 (session 13): kept maxima on non-causal shapes (run 3's table had the d = 128
# non-causal forward at 8k 584 against session 12's 607): the lab's rows, then the bench's own
# timing with the build before (build-prev) alternated
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/prev.tar.xz
stamp lab
timeout 120 build-dev/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "fwd wgmma (library),fwd wgmma rescale always" --seqlens 2k,8k,32k --causal 0,1 > $OUT/lab.log 2>&1
tail -13 $OUT/lab.log
stamp bench A/B
for r in 1 2; do
  for w in prev dev; do
    echo "== $w round $r" >> $OUT/ab.log
    timeout 60 build-$w/tools/distflash-bench bench --device cuda --dims 128 --seqlens 2k,8k,32k --causal 0,1 >> $OUT/ab.log 2>&1
  done
done
awk '/^== /{w=$2} $1~/^(64|128)$/ && NF>10 {k=$1" "$2" c"$6; v[w" "k]=v[w" "k]" "$10"/"$(NF-2); keys[k]=1}
     END{for (k in keys) print k, "prev:" v["prev "k], " dev:" v["dev "k]}' $OUT/ab.log | sort -n | tee $OUT/ab_summary.txt
stamp done
