#!/usr/bin/env bash
# session 17, device call 1: the library at HEAD through every GPU test family and memcheck;
# the backward's per-CTA stamps (lab row "bwd ws stamps") on a 4k window and documents at 128k,
# causal 2k and 32k; bwd_profile.py (its refactor unrun); Nsight Compute on the masked backward
# (4k window) and on the 2k causal backward, ours and cuDNN's
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }  # stages that start late are skipped
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/smi.csv 2>&1 &
SMI=$!
stamp checks
OUT=$OUT bash bench/gpu/gpu_checks.sh $B
stamp stamps
L=$B/bench/gpu/dfa_lab_cuda
ST='bwd ws stamps,bwd ws early kv stamps'
timeout 60 $L --only "$ST" --seqlens 128k --window 4096 --check 600 --reps 3 --stamps $OUT > $OUT/lab_win.log 2>&1
timeout 90 $L --only "$ST" --seqlens 128k --docs 4096 --check 600 --reps 3 --stamps $OUT > $OUT/lab_docs.log 2>&1
timeout 60 $L --only "$ST" --seqlens 2k,32k --check 600 --reps 3 --stamps $OUT > $OUT/lab_causal.log 2>&1
AB='bwd wgmma atomic dq,bwd ws early kv'
timeout 60 $L --only "$AB" --seqlens 128k --window 4096 --check 600 --reps 5 --rounds 3 > $OUT/ab_win.log 2>&1
timeout 120 $L --only "$AB" --seqlens 128k --docs 4096 --check 600 --reps 5 --rounds 3 > $OUT/ab_docs.log 2>&1
timeout 90 $L --only "$AB" --seqlens 2k,32k --check 600 --reps 5 --rounds 3 > $OUT/ab_causal.log 2>&1
cat $OUT/lab_win.log $OUT/lab_docs.log $OUT/lab_causal.log $OUT/ab_*.log | grep -v "^variant"
python3 bench/gpu/bwd_stamps.py $OUT/stamps_*.bin 2>&1 | tee $OUT/stamps.txt
before 330 && {
stamp masks
timeout 120 python3 bench/gpu/masks_bench.py --no-flex --json $OUT/masks.json > $OUT/masks.log 2>&1; echo "masks rc=$?"
grep -E "^(docs|window) " $OUT/masks.log
}
before 300 && {
stamp profile
timeout 120 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1 --windows 4096 > $OUT/profile.log 2>&1; echo "profile rc=$?"
grep -E "^==" $OUT/profile.log
}
if [ -n "$NCU" ] && before 420; then
  stamp ncu
  P="python3 bench/gpu/bwd_profile.py --plain --iters 1"
  timeout 80 $NCU --set full -k regex:bwd_ws_kernel --launch-skip 3 --launch-count 1 -o $OUT/ncu_win $P --shapes '' --windows 4096 > $OUT/ncu_win.log 2>&1; echo "ncu win rc=$?"
  timeout 60 $NCU --set full -k regex:bwd_ws_kernel --launch-skip 3 --launch-count 1 -o $OUT/ncu_c2k $P --shapes 128:2048:16:32:1 --windows '' > $OUT/ncu_c2k.log 2>&1; echo "ncu ours 2k rc=$?"
  timeout 60 $NCU --set full -k regex:bprop --launch-skip 3 --launch-count 1 -o $OUT/ncu_cudnn2k $P --shapes 128:2048:16:32:1 --windows '' > $OUT/ncu_cudnn2k.log 2>&1; echo "ncu cudnn 2k rc=$?"
  for r in ncu_win ncu_c2k ncu_cudnn2k; do
    [ -f $OUT/$r.ncu-rep ] || continue
    $NCU -i $OUT/$r.ncu-rep --page details > $OUT/$r.details.txt 2>&1
    $NCU -i $OUT/$r.ncu-rep --page source --csv --print-source sass > $OUT/$r.sass.csv 2>&1
    $NCU -i $OUT/$r.ncu-rep --page raw --csv > $OUT/$r.raw.csv 2>&1
  done
  grep -E "Duration|Compute \(SM\) Throughput|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu_*.details.txt | head -40
fi
stamp done
kill $SMI
cd $OUT && tar czf all.tgz *.log *.txt *.csv *.bin *.json 2>/dev/null; ls -la all.tgz
