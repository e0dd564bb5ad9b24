#!/usr/bin/env bash
# device call 4 (session 13): rank-sim's 2-rank bound on the promoted kernels (issue 14's 2-GPU
# bar shape: 128k tokens, documents of mean 4096, 32 heads; the trainer's 16 / 8; a 4k window)
set -uo pipefail
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
tar xJf .ab/bin/b.tar.xz
R="build-dev/tools/distflash-bench rank-sim --ranks 2 --same-docs --reps 5"
stamp docs 32 heads
timeout 120 $R --docs 4096 > $OUT/rs_docs32.log 2>&1; echo rc=$?; tail -4 $OUT/rs_docs32.log
stamp docs 16/8 heads
timeout 100 $R --docs 4096 --heads 16 --kv-heads 8 > $OUT/rs_docs16.log 2>&1; echo rc=$?; tail -4 $OUT/rs_docs16.log
stamp window
timeout 100 $R --docs 0 --window 4096 > $OUT/rs_window.log 2>&1; echo rc=$?; tail -4 $OUT/rs_window.log
stamp done
