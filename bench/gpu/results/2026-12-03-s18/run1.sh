#!/usr/bin/env bash
# session 18, device call 1: the library with dK, dV by TMA in the unmasked d = 128 backward for
# short walks (launch_bwd.cuh DFA__BWD_TMA_DKV_MAX_ROWS) through every GPU test family and
# memcheck; the lab's A/B of the library against both fixed variants (1049 direct stores, 1305
# TMA) around the threshold (2k, 4k, 8k; causal and not); bwd_profile against cuDNN at 2k; Nsight
# Compute source view (SASS, per instruction) of the 2k causal backward, ours and cuDNN's, for the
# shared-store conflicts and the instruction mix
set -uo pipefail
t0=$(date +%s); before() { [ $(( $(date +%s) - t0 )) -lt $1 ]; }  # stages that start late are skipped
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 > $OUT/smi.csv 2>&1 &
SMI=$!
stamp checks
OUT=$OUT bash bench/gpu/gpu_checks.sh $B
stamp ab
L=$B/bench/gpu/dfa_lab_cuda
AB='bwd wgmma atomic dq,bwd ws runs defer ex2,bwd ws tma dkv all'
timeout 150 $L --only "$AB" --dims 128 --causal 1,0 --seqlens 2k,4k,8k --check 600 --reps 5 --rounds 3 > $OUT/ab_tma.log 2>&1
echo "ab rc=$?"; grep -v "^variant" $OUT/ab_tma.log
before 420 && {
stamp profile
timeout 100 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1,128:2048:16:32:0 --windows '' > $OUT/profile.log 2>&1; echo "profile rc=$?"
grep -E "^==" $OUT/profile.log
}
if [ -n "$NCU" ] && before 480; then
  stamp ncu
  P="python3 bench/gpu/bwd_profile.py --plain --iters 1 --shapes 128:2048:16:32:1 --windows ''"
  timeout 60 $NCU --set full --import-source yes -k regex:bwd_ws_kernel --launch-skip 3 --launch-count 1 -o $OUT/ncu_c2k $P > $OUT/ncu_c2k.log 2>&1; echo "ncu ours rc=$?"
  timeout 60 $NCU --set full -k regex:bprop --launch-skip 3 --launch-count 1 -o $OUT/ncu_cudnn2k $P > $OUT/ncu_cudnn2k.log 2>&1; echo "ncu cudnn rc=$?"
  for r in ncu_c2k ncu_cudnn2k; do
    [ -f $OUT/$r.ncu-rep ] || continue
    $NCU -i $OUT/$r.ncu-rep --page details > $OUT/$r.details.txt 2>&1
    $NCU -i $OUT/$r.ncu-rep --page source --csv --print-source sass > $OUT/$r.sass.csv 2>&1
  done
  grep -E "Duration|Executed Instructions  |Registers Per|Issue Slots Busy" $OUT/ncu_*.details.txt | head -20
fi
stamp done
kill $SMI
cd $OUT && tar czf all.tgz *.log *.txt *.csv 2>/dev/null; ls -la all.tgz
