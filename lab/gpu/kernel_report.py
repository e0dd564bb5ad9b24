#!/usr/bin/env python3
"""Per-kernel record of a CUDA build: ptxas resources and SASS instruction counts.

  kernel_report.py BUILD_LOG SASS_DUMP > report.tsv
  kernel_report.py --diff BEFORE.tsv AFTER.tsv [--map OLD=NEW ...]

BUILD_LOG is the output of a build with -DDFA_CUDA_VERBOSE_PTXAS=ON (ptxas -v lines);
SASS_DUMP is `cuobjdump --dump-sass libdistflash.a`. One row per (arch, kernel): registers,
stack frame, spill stores/loads, static shared memory (the kernels' tiles are dynamic shared
memory, sized by their *_cfg structs), then the counts of HGMMA, HMMA, UTMALDG (TMA), LDL,
STL, BAR and all SASS instructions but NOPs, and "ops": a hash of the sequence of opcodes with
their modifiers (operands left out, so a moved kernel parameter does not count; equal hashes
mean the same instructions in the same order). --diff joins two reports on (arch, kernel); a kernel name of the
second report can be rewritten first (--map 'fwd_mma<(.*)>=fwd_mma<\\1,0>', a regex), so
that kernels which gained a template parameter compare with their old selves.
"""
import hashlib
import re
import sys

COLS = ["regs", "stack", "spill_st", "spill_ld", "smem", "HGMMA", "HMMA", "UTMALDG", "LDL", "STL", "BAR", "insts",
        "ops"]
SASS_COLS = ("HGMMA", "HMMA", "UTMALDG", "LDL", "STL", "BAR", "insts", "ops")


def short_name(mangled):
    """_Z19dfa__fwd_mma_kernelILi64ELi4ELi128ELi0EEv... -> fwd_mma<64,4,128,0>"""
    m = re.match(r"_Z(\d+)", mangled)
    if not m:
        return mangled
    n = int(m.group(1))
    start = m.end()
    name = mangled[start:start + n]
    rest = mangled[start + n:]
    args = re.match(r"I((?:Li-?\d+E)+)E", rest)
    name = re.sub(r"^dfa__", "", name)
    name = re.sub(r"_kernel$", "", name)
    if args:
        name += "<" + ",".join(re.findall(r"Li(-?\d+)E", args.group(1))) + ">"
    return name


def parse_ptxas(path):
    rows = {}
    cur = None
    for line in open(path, errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\w+)'", line)
        if m:
            cur = (m.group(2), short_name(m.group(1)))
            rows[cur] = dict.fromkeys(COLS, 0)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            r = rows[cur]
            r["stack"], r["spill_st"], r["spill_ld"] = (int(x) for x in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m:
            rows[cur]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            rows[cur]["smem"] = int(s.group(1)) if s else 0
            cur = None
    return rows


def parse_sass(path, rows):
    arch = None
    cur = None
    seq = {}
    for line in open(path, errors="replace"):
        m = re.match(r"\s*code for (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = (arch, short_name(m.group(1)))
            rows.setdefault(cur, dict.fromkeys(COLS, 0))
            for c in SASS_COLS:
                rows[cur][c] = 0
            seq[cur] = hashlib.sha1()
            continue
        if cur is None:
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+((?:@!?U?P\w+\s+)?)([A-Z][A-Z0-9_.]*)", line)
        if m:
            full = m.group(2)
            op = full.split(".")[0]
            if op == "NOP":
                continue
            r = rows[cur]
            r["insts"] += 1
            seq[cur].update((m.group(1) + full + ";").encode())
            if op in SASS_COLS:
                r[op] += 1
    for key, h in seq.items():
        rows[key]["ops"] = h.hexdigest()[:10]


def write(rows, out):
    out.write("arch\tkernel\t" + "\t".join(COLS) + "\n")
    for key in sorted(rows):
        out.write("%s\t%s\t%s\n" % (key[0], key[1], "\t".join(str(rows[key][c]) for c in COLS)))


def read(path):
    rows = {}
    lines = open(path).read().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        f = line.split("\t")
        rows[(f[0], f[1])] = {c: (v if c == "ops" else int(v)) for c, v in zip(head[2:], f[2:])}
    return rows


def diff(before, after, maps):
    b, a = read(before), read(after)
    renamed = {}
    for (arch, name), r in a.items():
        for old, new in maps:
            name2 = re.sub("^" + old + "$", new, name)
            if name2 != name:
                name = name2
                break
        renamed[(arch, name)] = r
    keys = sorted(set(b) | set(renamed))
    print("arch\tkernel\t" + "\t".join(COLS) + "\tstatus")
    for k in keys:
        rb, ra = b.get(k), renamed.get(k)
        if rb is None:
            print("%s\t%s\t%s\tnew" % (k[0], k[1], "\t".join(str(ra[c]) for c in COLS)))
        elif ra is None:
            print("%s\t%s\t%s\tremoved" % (k[0], k[1], "\t".join(str(rb[c]) for c in COLS)))
        else:
            cells = [str(rb[c]) if rb[c] == ra[c] else "%s->%s" % (rb[c], ra[c]) for c in COLS]
            same = all(rb[c] == ra[c] for c in COLS)
            print("%s\t%s\t%s\t%s" % (k[0], k[1], "\t".join(cells), "same" if same else "CHANGED"))


def main(argv):
    if len(argv) >= 3 and argv[0] == "--diff":
        maps = []
        rest = argv[3:]
        while rest:
            if rest[0] != "--map" or len(rest) < 2:
                sys.exit(__doc__)
            old, new = rest[1].split("=", 1)
            maps.append((old, new))
            rest = rest[2:]
        diff(argv[1], argv[2], maps)
        return
    if len(argv) != 2:
        sys.exit(__doc__)
    rows = parse_ptxas(argv[0])
    parse_sass(argv[1], rows)
    write(rows, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
