#!/usr/bin/env bash
# device call 6 (session 12): the unmasked backward with dQ deferred (1041) or deferred with the
# consumers taking turns (1073), against the library's (1025): tests, lab, bench A/B
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz; tar xJf .ab/bin/lab.tar.xz; tar xJf .ab/bin/cand.tar.xz
for v in 1041 1073; do
  stamp test $v
  { DFA_GPU_TEST_KERNEL=wgmma timeout 120 build-c$v/tests/gpu/test_gpu_attn; echo "rc=$?"; } > $OUT/t_attn_$v.log 2>&1
  grep -E "checks,|^rc=|FAIL" $OUT/t_attn_$v.log | head -4 | cut -c1-250
done
stamp lab
timeout 150 build-dev/bench/gpu/dfa_lab_cuda --dims 128 --rounds 5 --only "bwd wgmma atomic dq,bwd ws runs defer" --seqlens 2k,8k,32k --causal 1 > $OUT/lab.log 2>&1
grep -v "early" $OUT/lab.log | tail -10
stamp bench A/B
for r in 1 2; do
  for w in dev c1041 c1073; do
    echo "== $w round $r" >> $OUT/ab.log
    timeout 60 build-$w/tools/distflash-bench bench --device cuda --dims 128 --seqlens 2k,8k,32k --causal 0,1 >> $OUT/ab.log 2>&1
  done
done
awk '/^== /{w=$2} $1~/^(64|128)$/ && NF>10 {k=$1" "$2" c"$6; v[w" "k]=v[w" "k]" "$(NF-2); keys[k]=1}
     END{for (k in keys) print k, "dev:" v["dev "k], " 1041:" v["c1041 "k], " 1073:" v["c1073 "k]}' $OUT/ab.log | sort -n | tee $OUT/ab_summary.txt
stamp done
cd $OUT && tar czf logs.tgz *.log *.txt
