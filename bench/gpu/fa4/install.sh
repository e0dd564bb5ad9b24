#!/usr/bin/env bash
# Second transfer: `source DIR/part2/install.sh` joins the split wheel, installs FlashAttention-4
# and its wheels into /tmp/fa4site (no registry needed) and puts them on PYTHONPATH.
# Afterwards `python3 -c "from flash_attn.cute import flash_attn_func"` works. FA4 compiles each
# kernel on its first call (seconds); the benchmark warms up before it times.
d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! ls /tmp/fa4/big.whl.part-00 >/dev/null 2>&1; then
  echo "fa4: /tmp/fa4 holds no first part: run part1/stage.sh on this machine first" >&2
  return 1 2>/dev/null || exit 1
fi
cp "$d"/big.whl.part-01 /tmp/fa4/
cat /tmp/fa4/big.whl.part-00 /tmp/fa4/big.whl.part-01 > "/tmp/fa4/$(cat "$d/big.name")"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fa4site \
  "$d"/*.whl "/tmp/fa4/$(cat "$d/big.name")" > /tmp/fa4/pip.log 2>&1 || tail -5 /tmp/fa4/pip.log
export PYTHONPATH=/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
python3 -c "from flash_attn.cute import flash_attn_func" && echo "fa4: ready"
