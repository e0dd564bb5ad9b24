#!/usr/bin/env bash
# session 20, device call 4: where the documents' backward stands against plain causal
# at the same length: the library's backward and forward at 128k causal (unmasked kernel), with a
# window as long as the sequence (the masked kernel on causal work), and with documents; then the
# peers table with bit 18 in the library (distflash-bench against SDPA's flash and cuDNN backends)
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
finish() { cd $OUT && tar czf all.tgz *.log *.json *.csv table.txt 2>/dev/null; ls -la all.tgz; }
trap finish EXIT
tar xJf .ab/bin/b.tar.xz
B=build-dev
L=$B/bench/gpu/dfa_lab_cuda
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/smi.csv 2>&1 &
SMI=$!
{
stamp lab 128k
V='bwd wgmma atomic dq,fwd wgmma (library)'
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --causal 1 --check 600 --reps 3 --rounds 2 > $OUT/lab_causal.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --window 131072 --check 600 --reps 3 --rounds 2 > $OUT/lab_fullwin.log 2>&1; echo "rc=$?"
timeout 60 $L --only "$V" --dims 128 --seqlens 128k --docs 4096 --check 600 --reps 3 --rounds 2 > $OUT/lab_docs.log 2>&1; echo "rc=$?"
grep -h -v "^variant" $OUT/lab_*.log | grep -v "^\["
}
stamp bench
timeout 120 $B/tools/distflash-bench bench --device cuda --json $OUT/ours.json > $OUT/bench.log 2>&1; echo "bench rc=$?"
stamp peers
timeout $(( 350 - ($(date +%s) - t0) )) python3 bench/gpu/peers.py --json $OUT/peers.json > $OUT/peers.log 2>&1; echo "peers rc=$?"
python3 bench/gpu/table.py $OUT/ours.json $OUT/peers.json > $OUT/table.txt 2>&1; cat $OUT/table.txt
stamp done
kill $SMI
