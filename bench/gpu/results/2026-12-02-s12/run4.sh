#!/usr/bin/env bash
# device call 4 (session 12): A/B of the backward before and after bit 10 in the bench's own timing
# (build-old: -DDFA__BWD_WS_LIBRARY=1), alternated; the lab's A/B again; the GEMM test's new tolerance
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/old.tar.xz
stamp gemm test x6
for i in 1 2 3 4 5 6; do timeout 60 build-dev/tests/train_gpu/test_gpu_kernels 2>&1 | tail -1; done | tee $OUT/t_kernels.log
stamp bench A/B
for r in 1 2 3; do
  for w in new old; do
    Bn=build-dev; [ $w = old ] && Bn=build-old
    echo "== $w round $r" >> $OUT/ab.log
    timeout 100 $Bn/tools/distflash-bench bench --device cuda --dims 64,128 --seqlens 2k,8k,32k --causal 0,1 >> $OUT/ab.log 2>&1
  done
done
awk '/^== /{w=$2} $1~/^(64|128)$/ && NF>10 {k=$1" "$2" c"$6; v[w" "k]=v[w" "k]" "$(NF-2); keys[k]=1}
     END{for (k in keys) print k, "new:" v["new "k], " old:" v["old "k]}' $OUT/ab.log | sort -n | tee $OUT/ab_summary.txt
stamp lab A/B
timeout 120 build-dev/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "bwd wgmma atomic dq,bwd ws direct dkv" --seqlens 8k,32k --causal 1 > $OUT/lab_ab.log 2>&1
tail -5 $OUT/lab_ab.log
stamp done
cd $OUT && tar czf logs.tgz *.log *.txt
