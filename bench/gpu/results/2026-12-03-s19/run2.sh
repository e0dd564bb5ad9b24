#!/usr/bin/env bash
# session 19, device call 2: the _with_scratch entry points (the Python binding passes PyTorch's
# cached memory as the library's scratch): the GPU tests that call them, the binding's CUDA and
# mask tests, then the binding with caller scratch against the plain calls (--library-scratch),
# alternated: bwd_profile (2k causal, 4k window) and the masks bench (ours alone)
set -uo pipefail
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s, $(date +%T)] $*"; }
tar xJf .ab/bin/b.tar.xz
B=build-dev
export DISTFLASH_LIB=$PWD/$B/src/libdistflash.so PYTHONPATH=python:bench/gpu PYTHONUNBUFFERED=1
stamp tests
run() { { timeout "$2" "$3"; echo "rc=$?"; } > "$OUT/t_$1.log" 2>&1
  echo "$1: $(grep -E 'checks,' "$OUT/t_$1.log" | tail -1 | cut -c1-120) $(grep -E '^rc=' "$OUT/t_$1.log")"
  grep -E "FAIL" "$OUT/t_$1.log" | head -5 | cut -c1-300; }
run errors 60 $B/tests/gpu/test_gpu_errors
run attn 200 $B/tests/gpu/test_gpu_attn
timeout 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 $B/tests/gpu/test_gpu_errors > $OUT/memcheck_errors.log 2>&1
echo "memcheck errors rc=$? $(grep -E 'ERROR SUMMARY' $OUT/memcheck_errors.log | head -1)"
stamp pytest
timeout 200 python3 -m pytest -q -p no:cacheprovider -x python/tests/test_cuda.py python/tests/test_masks.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"
stamp profile
for i in 1 2; do
timeout 60 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1 --windows 4096 --iters 7 > $OUT/prof_caller$i.log 2>&1
timeout 60 python3 bench/gpu/bwd_profile.py --shapes 128:2048:16:32:1 --windows 4096 --iters 7 --library-scratch > $OUT/prof_library$i.log 2>&1
done
grep -h "== distflash" $OUT/prof_*.log | sed 's/ of kernels per forward+backward//'
stamp masks
for i in 1 2; do
timeout 80 python3 bench/gpu/masks_bench.py --no-flex --idle 3 > $OUT/masks_caller$i.log 2>&1
timeout 80 python3 bench/gpu/masks_bench.py --no-flex --idle 3 --library-scratch > $OUT/masks_library$i.log 2>&1
done
for f in $OUT/masks_*.log; do echo "$f $(grep -E '^(docs|window)' $f | tr -s ' ' | tr '\n' ';')"; done
stamp done
cd $OUT && tar czf all.tgz *.log 2>/dev/null; ls -la all.tgz
