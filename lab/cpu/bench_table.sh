#!/usr/bin/env bash
# A table of CPU timings, one `distflash bench` row at a time: before each
# row it waits (up to WAIT seconds, outside the lock) for the shared machine to go
# idle, then measures under flock /tmp/dfa-bench.lock (one benchmark at a time).
#   lab/cpu/bench_table.sh [build dir] > table.md
# Env: WAIT (seconds, 900), DTYPE (f32), PEAK (skip measuring it), ROWS (';'-separated
# bench arguments replacing the default grid, e.g. "-s 16k -d 64 --causal 0;-s 1k -d 128 --causal 1").
set -euo pipefail
build=${1:-build}
wait_s=${WAIT:-900}
bin="$build/cli/distflash"
idle() { # CPUs busy over one second, from /proc/stat
    read -r _ a b c d e f g h _ < /proc/stat; sleep 1
    read -r _ A B C D E F G H _ < /proc/stat
    awk -v busy=$(( (A+B+C+F+G+H) - (a+b+c+f+g+h) )) -v hz="$(getconf CLK_TCK)" 'BEGIN{print busy/hz}'
}
wait_idle() {
    local start=$SECONDS
    while (( SECONDS - start < wait_s )); do
        awk -v x="$(idle)" 'BEGIN{exit !(x < 0.15)}' && return 0
        sleep 5
    done
}
peak=${PEAK:-}
if [[ -z $peak ]]; then
    wait_idle
    peak=$(flock /tmp/dfa-bench.lock "$bin" bench --peak | tee /dev/stderr |
           awk '/FMA peak, avx512|FMA peak, avx2/ {if ($(NF-1) > p) p = $(NF-1)} END {print p}')
fi
echo "peak: $peak GFLOP/s"
rows=()
if [[ -n ${ROWS:-} ]]; then
    IFS=';' read -r -a rows <<< "$ROWS"
else
    for r in "-s 1k -d 64" "-s 4k -d 64" "-s 16k -d 64" "-s 1k -d 128" "-s 4k -d 128" "-s 16k -d 128"; do
        rows+=("$r --causal 1" "$r --causal 0")
    done
fi
for r in "${rows[@]}"; do
    wait_idle
    # shellcheck disable=SC2086
    flock /tmp/dfa-bench.lock "$bin" bench $r -r 3 --peak-gflops "$peak" --dtype "${DTYPE:-f32}" \
        | grep -E '^\| [0-9]' || true
done
echo "loadavg at the end: $(cat /proc/loadavg)"
