#!/usr/bin/env bash
# Downloads FlashAttention-4 (PyPI flash-attn-4, CuTe DSL kernels) and the wheels it needs, for a
# GPU machine that has PyTorch but no package registry. Run from the repository root, where pip
# reaches PyPI:
#   bash bench/gpu/fa4/fetch.sh [DIR]        # DIR defaults to .fa4 (kept out of git)
# One of the wheels (the CuTe DSL's CUDA 13 libraries, about 92 MB) is cut into two parts, so that
# DIR/part1 and DIR/part2 each stay under 64 MB for machines that take the files in two transfers;
# stage.sh and install.sh join them again (README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dst=${1:-.fa4}
if [ -d .git ] && ! grep -qx "/$dst/" .git/info/exclude 2>/dev/null; then echo "/$dst/" >> .git/info/exclude; fi
rm -rf "$dst"
mkdir -p "$dst/part1" "$dst/part2" "$dst/wheels"
python3 -m pip download --no-deps -q -d "$dst/wheels" --python-version 3.12 --only-binary=:all: \
  --platform manylinux_2_28_x86_64 \
  flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 einops \
  apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 quack-kernels==0.6.5
big=$(ls "$dst"/wheels/nvidia_cutlass_dsl_libs_cu13-*.whl)
split -b 46M -d "$big" "$dst/part1/big.whl.part-"
mv "$dst/part1/big.whl.part-01" "$dst/part2/"
basename "$big" > "$dst/part2/big.name"
rm "$big"
mv "$dst"/wheels/*.whl "$dst/part2/"
rmdir "$dst/wheels"
cp "$here/stage.sh" "$dst/part1/"
cp "$here/install.sh" "$dst/part2/"
du -sh "$dst/part1" "$dst/part2"
