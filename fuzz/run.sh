#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*.c) with clang in build-fuzz/ and runs each of them:
# first over its seed corpus fuzz/corpus/<target>/ once (the regression run: every input
# that ever found a bug is there), then fuzzing for SECONDS (default 60), starting from the
# seeds and from what earlier runs found (build-fuzz/corpus/<target>/).
#   fuzz/run.sh [SECONDS]
# A crash, a sanitizer report or a failed property stops the run with status 1 and leaves the
# input in build-fuzz/artifacts/; once it is fixed, copy it into fuzz/corpus/<target>/ as
# regress_<what> so that every run replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
dfa_need_packages
dfa_need_fuzz_packages

secs=${1:-60}
case "$secs" in '' | *[!0-9]*) echo "usage: fuzz/run.sh [SECONDS]" >&2; exit 2 ;; esac
cc=$(dfa_fuzz_cc)
jobs=$(nproc 2>/dev/null || echo 2)
dir=build-fuzz
targets=(ckpt train_args)

# OpenBLAS off: no target calls a matmul, and its start-up allocations are not LeakSanitizer's business
cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DDFA_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDFA_WITH_CUDA=OFF -DDFA_WITH_MPI=OFF -DDFA_WITH_NCCL=OFF -DDFA_WITH_CBLAS=OFF -DDFA_BUILD_TESTS=OFF >/dev/null
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Nothing these targets read needs more than a few MiB: a larger allocation is a bug.
opts=(-malloc_limit_mb=64 -rss_limit_mb=2048 -timeout=10)
mkdir -p "$dir/artifacts" "$dir/logs"
status=0
for t in "${targets[@]}"; do
  bin=$dir/fuzz/fuzz_$t seeds=fuzz/corpus/$t log=$dir/logs/$t.log
  mkdir -p "$dir/corpus/$t"
  mapfile -t files < <(find "$seeds" -type f | sort)
  if ! "$bin" "${opts[@]}" "${files[@]}" >"$log" 2>&1; then
    echo "fuzz $t: the seed corpus fails (regression); log $log:" >&2
    tail -n 40 "$log" >&2
    status=1
    continue
  fi
  echo "fuzz $t: ${#files[@]} corpus inputs replayed, no failure"
  if ! "$bin" "${opts[@]}" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
      "$dir/corpus/$t" "$seeds" >"$log" 2>&1; then
    echo "fuzz $t: failure after fuzzing; log $log, input in $dir/artifacts/:" >&2
    tail -n 40 "$log" >&2
    status=1
    continue
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz $t: ${runs:-?} inputs in ${secs} s, no failure ($(find "$dir/corpus/$t" -type f | wc -l) in the grown corpus)"
done
exit $status
