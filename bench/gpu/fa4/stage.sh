#!/usr/bin/env bash
# First of two transfers: copies the first part of the split wheel to /tmp/fa4 on the GPU machine.
# install.sh, in the next command on the same machine, adds the second part and installs.
set -eu
mkdir -p /tmp/fa4
cp "$(dirname "$0")"/big.whl.part-* /tmp/fa4/
ls -la /tmp/fa4
