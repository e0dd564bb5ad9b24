"""One forward each of the masks in masks_bench.py (documents, a 4k window) and of plain causal
attention on the same shape, for Nsight Compute to profile side by side: per visible pair, the
forward with a window runs slower than the one with documents, and the profiles show why.

    DISTFLASH_LIB=build-gpu/src/libdistflash.so PYTHONPATH=python:bench/gpu \\
        ncu -k regex:fwd_wgmma --launch-skip 3 --launch-count 3 ... python3 bench/gpu/masks_profile.py

Runs three warm-up rounds first (the --launch-skip above), then one profiled round, in the order
causal, documents, window.
"""
import torch

import distflash.torch as dft
from masks_bench import lognormal_docs


def main(S=131072, H=16, D=128, window=4096):
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(1, S, H, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    ids, _ = lognormal_docs(S, 4096.0, 1.0, seed=1)
    cases = [("causal", dict(causal=True)), ("docs", dict(causal=True, doc_ids=ids.to(dev).view(1, S))),
             ("window", dict(causal=True, window=(window, None)))]
    with torch.no_grad():
        for _ in range(4):
            for _, kw in cases:
                dft.attention(q, k, v, **kw)
    torch.cuda.synchronize()
    print("done: causal, docs, window (the last round is the profiled one)")


if __name__ == "__main__":
    main()
