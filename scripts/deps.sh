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
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "distflash: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null || {
      echo "distflash: apt-get install ${missing[*]} failed" >&2; return 1; }
    return 0
  fi
  echo "distflash: missing packages. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  return 1
}

# Optional packages (e.g. gnuplot-nox for the training plot): installed as root, otherwise
# named with the command that installs them; never a reason to stop.
dfa_want_optional() { # dfa_want_optional <command> <package> <what it is for>
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "distflash: installing $2 ($3)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1; } ||
      echo "distflash: could not install $2; going on without $3" >&2
    return 0
  fi
  echo "distflash: optional: sudo apt-get install -y $2 ($3); going on without it" >&2
}
