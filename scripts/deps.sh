#!/usr/bin/env bash
# Sourced by the other scripts: makes sure the Debian packages distflash needs are
# installed. As root it installs what is missing; otherwise it prints the exact
# command and stops.
dfa_need_packages() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v cc >/dev/null 2>&1 || missing+=(gcc)
  command -v make >/dev/null 2>&1 || missing+=(make)
  command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
  command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
  dfa_install_packages "${missing[@]}" || return 1
  # OpenBLAS: the trainer's CPU matmuls. Wanted, not needed (CMake's DFA_WITH_CBLAS=AUTO builds the
  # own kernel without it), so a machine without network access (the GPU machines) still builds.
  dfa_have_openblas || dfa_want_package libopenblas-dev "OpenBLAS for the trainer's CPU matmuls"
}

# OpenBLAS's development files: the unversioned library and an openblas_config.h beside a cblas.h.
dfa_have_openblas() {
  local f lib=0 inc=0
  ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so ' && lib=1
  for f in /usr/lib/*/libopenblas.so /usr/lib/libopenblas.so /usr/local/lib/libopenblas.so; do [ -e "$f" ] && lib=1; done
  for f in /usr/include/openblas_config.h /usr/include/*/openblas_config.h /usr/include/*/openblas*/openblas_config.h \
           /usr/include/openblas/openblas_config.h /usr/local/include/openblas_config.h; do [ -e "$f" ] && inc=1; done
  [ $lib = 1 ] && [ $inc = 1 ]
}

# The fuzz targets (fuzz/run.sh): clang with libFuzzer and the sanitizer runtimes. Debian 12
# ships libFuzzer's runtime in libclang-rt-14-dev, which clang-14 only recommends.
dfa_fuzz_cc() { command -v clang-14 2>/dev/null || command -v clang 2>/dev/null; }
dfa_have_libfuzzer() { # dfa_have_libfuzzer <clang>: links a trivial fuzz target
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' |
    "$1" -x c - -fsanitize=fuzzer,address,undefined -o /dev/null >/dev/null 2>&1
}
dfa_need_fuzz_packages() {
  local cc missing=()
  cc=$(dfa_fuzz_cc) || missing+=(clang-14)
  if [ -z "$cc" ] || ! dfa_have_libfuzzer "$cc"; then missing+=(libclang-rt-14-dev); fi
  dfa_install_packages "${missing[@]}"
}

# Installs the named packages as root; otherwise prints the exact command and fails.
dfa_install_packages() {
  [ $# -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "distflash: installing $*" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq "$@" >/dev/null || {
      echo "distflash: apt-get install $* failed" >&2; return 1; }
    return 0
  fi
  echo "distflash: missing packages. Install them with:" >&2
  echo "  sudo apt-get install -y $*" >&2
  return 1
}

# A wanted package found by no command: installed as root when apt-get can, else named; never fatal.
dfa_want_package() { # dfa_want_package <package> <what it is for>
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "distflash: installing $1 ($2)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1; } ||
      echo "distflash: could not install $1; going on without $2" >&2
    return 0
  fi
  echo "distflash: optional: sudo apt-get install -y $1 ($2); going on without it" >&2
}

# Optional packages (e.g. gnuplot-nox for the training plot): installed as root, otherwise
# named with the command that installs them; never a reason to stop.
dfa_want_optional() { # dfa_want_optional <command> <package> <what it is for>
  command -v "$1" >/dev/null 2>&1 && return 0
  dfa_want_package "$2" "$3"
}
