#!/usr/bin/env python3
"""Kernel rates per block shape for the simulator's h200-nvlink preset.

Reads a 2-GPU `distflash dist-bench --device cuda` log (the per-step compute tables of the
ring and balanced schedules, one timed call each, and the single-GPU lines) and prints, per
(pass, block shape, chunk rows n), the attention kernel's rate in TFLOP/s after taking away
what the executor adds to a step's compute marks on top of the kernel (packing its own query
rows, folding its own partial results into the float32 accumulators; modelled as bytes over
the effective HBM bandwidth HBM plus LAUNCH per element-wise kernel, the same constants as the
C preset). The C table in cli/sim/sim_machine.c is this output.

    python3 bench/seqpar/calibrate.py DISTBENCH.log   (the log of bench/seqpar/two_gpu.sh's distbench stage)
"""
import re
import statistics
import sys

HBM = 3.0e12      # bytes/s of the element-wise passes (assumed; see sim_machine.c)
LAUNCH = 5e-6     # seconds per element-wise kernel
H, D, ES = 32, 128, 2
QROW = H * D      # elements per query row (32 kv heads too: MHA)


def fold_query_bytes(rows, bwd):
    # fwd merge_rows: read acc o + part o, write acc o (float32), lse small; bwd: dq add, same traffic
    return 3 * rows * QROW * 4 + (0 if bwd else 3 * rows * H * 4)


def fold_keys_bytes(n):
    return 2 * 3 * n * QROW * 4


def pack_bytes(rows, bwd):
    return 2 * (rows * QROW * ES * (3 if bwd else 1) + (rows * H * 4 if bwd else 0))


def tasks(sched, n):
    """(rank, step) -> (shape, rows, qmine, kmine) for P = 2."""
    h = (n + 1) // 2
    t = {(0, 0): ("diag", n, 1, 1), (1, 0): ("diag", n, 1, 1)}
    if sched == "ring":
        t[(1, 1)] = ("full", n, 1, 0)
    else:
        t[(1, 1)] = ("part", h, 1, 0)   # owner: first half of q1 against k0
        t[(0, 1)] = ("part", n - h, 0, 1)  # helper: second half of q1 against its own k0
    return t


def overhead(shape, rows, qmine, kmine, n, bwd):
    b, k = 0, 0
    if qmine and rows < n:
        b += pack_bytes(rows, bwd)
        k += 3 if bwd else 1
    if qmine:
        b += fold_query_bytes(rows, bwd)
        k += 1
    if bwd and kmine:
        b += fold_keys_bytes(n)
        k += 2
    return b / HBM + k * LAUNCH


def flops(shape, rows, n, bwd):
    pairs = n * (n + 1) / 2 if shape == "diag" else rows * n
    f = 4 * H * D * pairs
    return 2.5 * f if bwd else f


def main(path):
    rates = {}
    single = {}
    S = sched = None
    for line in open(path):
        m = re.match(r"\s+(\d+) 1 GPU\s+-\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            s = int(m.group(1))
            fwd, fb = float(m.group(2)) * 1e-3, float(m.group(3)) * 1e-3
            f = 4 * H * D * s * (s + 1) / 2
            single[s] = (f / fwd / 1e12, 2.5 * f / (fb - fwd) / 1e12)
            continue
        m = re.match(r"\s+S = (\d+), (\w+), overlap on", line)
        if m:
            S, sched = int(m.group(1)), m.group(2)
            continue
        m = re.match(r"\s+(fwd|bwd)\s+rank", line)
        if m:
            bwd = m.group(1) == "bwd"
            continue
        m = re.match(r"\s+R(\d)\s+\|\s+([\d.]+) / ([\d.]+)\s+\|\s+([\d.]+) / ([\d.]+)", line)
        if m and S:
            r = int(m.group(1))
            n = S // 2
            tk = tasks(sched, n)
            for step, c in ((0, float(m.group(2))), (1, float(m.group(4)))):
                if (r, step) not in tk:
                    continue
                shape, rows, qm, km = tk[(r, step)]
                kern = c * 1e-3 - overhead(shape, rows, qm, km, n, bwd)
                rate = flops(shape, rows, n, bwd) / kern / 1e12
                rates.setdefault(("bwd" if bwd else "fwd", shape, n), []).append((rate, sched, r))
    print("single GPU, whole sequence (causal, bf16 out): TFLOP/s fwd / bwd")
    for s in sorted(single):
        print(f"  S={s:7d}  {single[s][0]:6.1f} / {single[s][1]:6.1f}")
    print(f"\nblock kernels on 2 GPUs (float32 out), HBM {HBM:.2g} B/s, launch {LAUNCH:.0e} s: "
          "TFLOP/s mean [min, max] (cells)")
    for key in sorted(rates, key=lambda k: (k[0], k[1], k[2])):
        v = [x[0] for x in rates[key]]
        spread = (max(v) - min(v)) / 2 / statistics.mean(v) * 100
        cells = ", ".join(f"{s[0]}R{s[2]}:{s[1]:.0f}" for s in ((x[1], x[0], x[2]) for x in rates[key]))
        print(f"  {key[0]} {key[1]:4s} n={key[2]:6d}  {statistics.mean(v):6.1f} [{min(v):6.1f}, {max(v):6.1f}] "
              f"+-{spread:4.1f}%  ({cells})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: calibrate.py DISTBENCH.log")
    main(sys.argv[1])
