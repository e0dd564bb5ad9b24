#!/usr/bin/env bash
# session 20, device call 5: per-CTA stamps of the library's d = 128 backward as it now stands
# ("bwd ws dq alt stamps": 295961 / 296217 + bit 13) at 128k x 32 heads: documents (mean 4096),
# causal, a 4k window; and causal 32k: where the documents' 8% against causal goes
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
finish() { cd $OUT && tar czf all.tgz *.log *.txt 2>/dev/null; ls -la all.tgz; }
trap finish EXIT
tar xJf .ab/bin/b.tar.xz
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
ST=$(mktemp -d)
V='bwd ws dq alt stamps'
stamp stamps
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --docs 4096 --check 64 --reps 3 --stamps $ST > $OUT/st_docs.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --causal 1 --check 64 --reps 3 --stamps $ST > $OUT/st_causal.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --window 4096 --check 64 --reps 3 --stamps $ST > $OUT/st_win.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$V" --dims 128 --seqlens 32k --causal 1 --check 64 --reps 3 --stamps $ST > $OUT/st_c32k.log 2>&1; echo "rc=$?"
grep -h -v "^variant" $OUT/st_*.log | grep -v "^\["
ls -la $ST
python3 bench/gpu/bwd_stamps.py $ST/*.bin > $OUT/stamps.txt 2>&1; echo "bwd_stamps rc=$?"
cat $OUT/stamps.txt | head -80
stamp done
