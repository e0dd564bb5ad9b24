#!/usr/bin/env bash
# device call 5 (session 13): rank-sim again (spread), and the 4k window alone
set -uo pipefail
tar xJf .ab/bin/b.tar.xz
R="build-dev/tools/distflash-bench rank-sim --ranks 2 --reps 5"
for i in 1 2; do
  timeout 60 $R --same-docs --docs 4096 > $OUT/rs_docs32_$i.log 2>&1; echo rc=$?; grep "bound on" $OUT/rs_docs32_$i.log
  timeout 60 $R --same-docs --docs 4096 --heads 16 --kv-heads 8 > $OUT/rs_docs16_$i.log 2>&1; echo rc=$?; grep "bound on" $OUT/rs_docs16_$i.log
done
timeout 60 $R --docs 0 --window 4096 > $OUT/rs_window.log 2>&1; echo rc=$?; tail -6 $OUT/rs_window.log
