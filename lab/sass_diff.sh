#!/usr/bin/env bash
# Compares the machine code of two builds of the CUDA kernels, kernel by kernel, without a GPU.
#
#   lab/sass_diff.sh [--map FILE] OLD NEW
#
# OLD and NEW are shared libraries (libdistflash.so) or objects with embedded cubins. Each is
# dumped with `cuobjdump -sass` and `cuobjdump -res-usage`; every kernel's body (its SASS with
# the name line left out) and its resources (registers, stack, shared, local, parameter bytes)
# make its fingerprint, per architecture. A refactor that renames template parameters changes
# the kernels' names but not their code, so kernels are paired by fingerprint, not by name:
#   - every NEW kernel must have an OLD kernel with the same fingerprint (else: DIFFERS, exit 1);
#   - OLD kernels without a NEW twin are listed (instantiations the new build no longer has);
#   - the pairs are printed, old name <- new name (demangled), so the reader can check that each
#     new kernel stands where its twin stood.
# --map FILE: lines `REGEX<TAB>REPLACEMENT` (Python re.sub) that rewrite NEW demangled names into
# OLD ones; then a pair whose rewritten name differs from its twin's is reported as MISPLACED
# (exit 1), and each NEW kernel is matched first against the OLD kernel of its rewritten name.
#
# cuobjdump and nvdisasm come with the CUDA toolkit (or PyPI's nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm); set CUOBJDUMP to its path when it is not on PATH.
set -euo pipefail
map=""
if [ "${1:-}" = "--map" ]; then map=$2; shift 2; fi
if [ $# -ne 2 ]; then
  echo "usage: lab/sass_diff.sh [--map FILE] OLD.so NEW.so" >&2
  exit 2
fi
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for side in old new; do
  f=$1; [ $side = new ] && f=$2
  "$CUOBJDUMP" -sass "$f" > "$tmp/$side.sass"
  "$CUOBJDUMP" -res-usage "$f" > "$tmp/$side.res"
done
python3 - "$tmp" "$map" <<'EOF'
import hashlib, re, subprocess, sys
from collections import defaultdict

tmp, mapfile = sys.argv[1], sys.argv[2]

def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, out))

def parse(side):
    """(arch, mangled) -> fingerprint"""
    # a kernel may sit in several cubins (one per source file that instantiates it): the n-th
    # occurrence of a name is told apart by n, in the dump's order (the same in both dumps)
    res, seen, arch, fn = {}, defaultdict(int), None, None
    for line in open(f"{tmp}/{side}.res"):
        m = re.match(r"arch = (\S+)", line)
        if m: arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m: fn = m.group(1)
        elif fn and "REG:" in line:
            seen[(arch, fn)] += 1
            res[(arch, fn + "#" + str(seen[(arch, fn)]))] = line.strip()
            fn = None
    seen = defaultdict(int)
    bodies, arch, fn, body = {}, None, None, []
    def flush():
        if fn is not None:
            text = "\n".join(body)
            bodies[(arch, fn)] = hashlib.sha256((res.get((arch, fn), "") + "\n" + text).encode()).hexdigest()
    for line in open(f"{tmp}/{side}.sass"):
        m = re.match(r"arch = (\S+)", line)
        if m:
            flush(); fn, body = None, []
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            flush()
            seen[(arch, m.group(1))] += 1
            fn, body = m.group(1) + "#" + str(seen[(arch, m.group(1))]), []
            continue
        if fn is not None and line.strip() and not line.startswith("Fatbin") and "=====" not in line:
            body.append(" ".join(line.split()))  # cuobjdump pads columns by name length
    flush()
    return bodies

old, new = parse("old"), parse("new")
names = sorted({f for _, f in old} | {f for _, f in new})
plain = demangle([f.rsplit("#", 1)[0] for f in names])
dm = {f: plain[f.rsplit("#", 1)[0]] + ("" if f.endswith("#1") else " [" + f.rsplit("#", 1)[1] + "]") for f in names}
rules = []
if mapfile:
    for line in open(mapfile):
        line = line.rstrip("\n")
        if line and not line.startswith("#"):
            pat, rep = line.split("\t", 1)
            rules.append((re.compile(pat), rep))

def rewrite(name):
    for pat, rep in rules:
        name = pat.sub(rep, name)
    return name

by_fp = defaultdict(list)  # (arch, fingerprint) -> old names not yet paired
for (arch, f), fp in old.items():
    by_fp[(arch, fp)].append(f)
differs, misplaced, pairs = [], [], []
for (arch, f), fp in sorted(new.items(), key=lambda kv: (kv[0][0], dm[kv[0][1]])):
    cands = by_fp[(arch, fp)]
    want = rewrite(dm[f]) if rules else None
    if not cands:
        differs.append((arch, dm[f]))
        continue
    pick = next((c for c in cands if want is not None and dm[c] == want), cands[0])
    cands.remove(pick)
    pairs.append((arch, dm[pick], dm[f]))
    if rules and dm[pick] != want:
        misplaced.append((arch, dm[pick], dm[f], want))

left = sorted((arch, dm[f]) for (arch, fp), fs in by_fp.items() for f in fs)
print(f"old: {len(old)} kernels, new: {len(new)} kernels (all architectures)")
print(f"identical code: {len(pairs)} new kernels")
for arch, o, n in pairs:
    print(f"  {arch}  {o}\n           <- {n}" if o != n else f"  {arch}  {o}  (same name)")
print(f"old kernels without a new twin: {len(left)}")
for arch, o in left:
    print(f"  {arch}  {o}")
for arch, o, n, w in misplaced:
    print(f"MISPLACED {arch}: {n} has the code of {o}, its name maps to {w}")
for arch, n in differs:
    print(f"DIFFERS {arch}: {n} has no twin in the old build")
print("result:", "identical" if not differs and not misplaced else "DIFFERENT")
sys.exit(1 if differs or misplaced else 0)
EOF
