"""Where the backward's time goes per CTA: reads the per-CTA stamps that the kernel lab's row
"bwd ws stamps" leaves (src/cuda/bwd_ws.cuh, VARIANT bit 13) and splits every SM's time over the
kernel into the CTAs' phases and the gaps between them.

    dfa_lab_cuda --only 'bwd ws stamps' --seqlens 128k --window 4096 --stamps out/
    python3 bench/gpu/bwd_stamps.py out/stamps_d128_s131072_c1_w4096_docs0.bin [...]

A record is 8 uint64: the global timer (ns) at the CTA's entry, when K and V have landed, after
its first query block, at the end of its walk and at its exit (consumer 0's first thread), then
its SM, its query blocks and those of them with the element test. Printed per file: the kernel's
span; the mean CTA's phases; a least-squares fit of a CTA's time to its blocks (the intercept is
the fixed cost per CTA); and the SMs' time summed over the span, split into the walks' blocks
after the first, the first blocks, K/V's arrival, the epilogues, the gaps between one CTA's exit
and the next one's entry on the same SM, and the idle ends.
"""
import sys

import numpy as np


def analyse(path):
    r = np.fromfile(path, dtype="<u8").reshape(-1, 8)
    r = r[(r[:, 0] != 0) & (r[:, 4] != 0)]
    if len(r) == 0:
        print(f"{path}: no stamps")
        return
    t = r[:, :5].astype(np.int64)
    t -= t[:, 0].min()
    sm, steps, tested = r[:, 5].astype(np.int64), r[:, 6].astype(np.int64), r[:, 7].astype(np.int64)
    entry, kv, first, end, exit_ = (t[:, i] for i in range(5))
    span = exit_.max()
    nsm = len(np.unique(sm))
    grain = np.gcd.reduce(np.diff(np.unique(t[:, 1:].ravel()))[:2000]) if len(r) > 1 else 0
    print(f"== {path}: {len(r)} CTAs on {nsm} SMs, span {span / 1e3:.1f} µs, timer grain {grain} ns")
    dur = exit_ - entry
    print(f"  mean CTA {dur.mean() / 1e3:.2f} µs over {steps.mean():.1f} blocks ({tested.mean():.1f} tested):"
          f" K/V {np.mean(kv - entry) / 1e3:.2f}, first block {np.mean(first - kv) / 1e3:.2f},"
          f" rest {np.mean(end - first) / 1e3:.2f}, epilogue {np.mean(exit_ - end) / 1e3:.2f} µs")
    a = np.stack([np.ones(len(r)), steps - tested, tested], axis=1).astype(float)
    coef, *_ = np.linalg.lstsq(a, dur.astype(float), rcond=None)
    print(f"  fit: CTA µs = {coef[0] / 1e3:.2f} + {coef[1] / 1e3:.3f} x untested + {coef[2] / 1e3:.3f} x tested blocks")
    long_ = steps >= np.percentile(steps, 75)
    per = (end - first)[long_] / np.maximum(steps[long_] - 1, 1)
    print(f"  a block after the first, CTAs in the top quarter by blocks: {np.median(per) / 1e3:.3f} µs (median)")
    gaps, heads, tails = [], [], []
    for s in np.unique(sm):
        i = np.argsort(entry[sm == s])
        e, x = entry[sm == s][i], exit_[sm == s][i]
        gaps.append((e[1:] - x[:-1]).clip(min=0))
        heads.append(e[0])
        tails.append(span - x.max())
    gaps = np.concatenate(gaps)
    total = span * nsm
    parts = [("blocks after the first", np.sum(end - first)), ("first blocks", np.sum(first - kv)),
             ("K/V arrival", np.sum(kv - entry)), ("epilogues", np.sum(exit_ - end)),
             ("gaps between CTAs", gaps.sum()), ("idle ends", np.sum(heads) + np.sum(tails))]
    print(f"  SM time over the span ({nsm} x {span / 1e3:.1f} µs):"
          f" gap median {np.median(gaps):.0f} ns, mean {gaps.mean():.0f} ns")
    for name, v in parts:
        print(f"    {name:24s} {100.0 * v / total:5.1f}%")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        analyse(p)
