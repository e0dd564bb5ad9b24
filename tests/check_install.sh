#!/usr/bin/env bash
# An installed distflash is complete (ctest test_install, label install).
#
#   check_install.sh BUILD_DIR SOURCE_DIR CC MPICC MPIEXEC PARTS
#
# Installs BUILD_DIR into a temporary prefix and, in a folder outside the source tree, builds
# the examples (SOURCE_DIR/examples, the files the README quotes) against that prefix with
# `pkg-config --cflags --libs distflash` and nothing else: attention.c with CC, run; with mpi
# in PARTS, seqpar_mpi.c with MPICC, run on 2 ranks (it is a CPU program); with cuda,
# cuda.c with CC and, with nccl and mpi, seqpar_nccl.c with MPICC, compiled and linked only
# (no GPU needed). PARTS is a comma-separated list of the parts built into the library.
# Before that, the installed headers are checked against the installed library: a public
# header (SOURCE_DIR/include) whose functions the library all exports must be installed, and
# one that declares a function the library lacks must not be.
set -euo pipefail
[ $# -eq 6 ] || { echo "usage: check_install.sh BUILD_DIR SOURCE_DIR CC MPICC MPIEXEC PARTS" >&2; exit 2; }
build=$1 src=$2 cc=$3 mpicc=$4 mpiexec=$5 parts=",$6,"
has() { [[ $parts == *",$1,"* ]]; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/distflash-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "check_install: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
pc=$(find "$prefix" -name distflash.pc -print -quit)
[ -n "$pc" ] || fail "no distflash.pc under $prefix"
export PKG_CONFIG_PATH=$(dirname "$pc")
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
libdir=$(pkg-config --variable=libdir distflash)
includedir=$(pkg-config --variable=includedir distflash)
[ -f "$libdir/libdistflash.so" ] || fail "libdistflash.so is not in the pkg-config libdir $libdir"

# The dfa_* functions a header declares (declarations start with DFA_API).
declared() { sed -n 's/^DFA_API[^(]*[ *]\(dfa_[A-Za-z0-9_]*\)(.*/\1/p' "$1" | sort -u; }
nm -D --defined-only "$libdir/libdistflash.so" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exported"
step "headers in $includedir against the functions libdistflash.so exports"
# A part built into the library exports every function of its header (test_exports checks
# that in the build tree); a header of a part not built declares some function nothing exports
# (a function may be declared in two headers, so some of its functions may be exported).
for h in "$src"/include/*.h; do
  name=$(basename "$h")
  declared "$h" >"$tmp/declared"
  [ -s "$tmp/declared" ] || fail "$name declares no DFA_API function (is the pattern above still right?)"
  missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
  if [ -z "$missing" ]; then
    [ -f "$includedir/$name" ] || fail "the library exports every function of $name but $name was not installed"
    cmp -s "$h" "$includedir/$name" || fail "installed $name differs from include/$name"
    echo "   $name: installed"
  else
    [ ! -f "$includedir/$name" ] || fail "$name is installed but the library does not export $missing"
    echo "   $name: part not built, not installed (no $missing)"
  fi
done

# The examples build in a folder of their own, copied byte for byte: nothing of the source
# tree is on the include path.
work=$tmp/work
mkdir -p "$work"
cd "$work"
flags=$(pkg-config --cflags --libs distflash)
echo "   pkg-config --cflags --libs distflash: $flags"
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
build_example() { # build_example COMPILER NAME
  cp "$src/examples/$2.c" .
  step "$1 $2.c \$(pkg-config --cflags --libs distflash)"
  # shellcheck disable=SC2086
  "$1" -Wall -Werror "$2.c" $flags -o "$2" || fail "examples/$2.c does not build against the installed distflash"
}

build_example "$cc" attention
step "./attention"
./attention || fail "examples/attention.c failed"

if has mpi; then
  [ -n "$mpicc" ] && [ -n "$mpiexec" ] || fail "the library has MPI but no mpicc/mpiexec was given"
  build_example "$mpicc" seqpar_mpi
  step "$mpiexec -np 2 ./seqpar_mpi"
  OMP_NUM_THREADS=1 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 ./seqpar_mpi || fail "examples/seqpar_mpi.c failed"
fi
if has cuda; then
  build_example "$cc" cuda
  if has nccl && has mpi; then build_example "$mpicc" seqpar_nccl; fi
fi
echo "check_install: the installed distflash builds and runs every example this build covers"
