"""Where a forward+backward's time goes, kernel by kernel: distflash against SDPA's cuDNN backend
on the same shapes (torch.profiler's CUDA activity; every kernel the process launches shows,
the library's through the C ABI too).

    DISTFLASH_LIB=build-gpu/src/libdistflash.so PYTHONPATH=python:bench/gpu \\
        python3 bench/gpu/bwd_profile.py [--shapes 128:2048:16:32:0,...] [--windows 4096] [--iters 5]

A shape is d:S:b:h:causal (b x h heads of S tokens, bf16); --windows W,... adds the masks
bench's causal sliding windows and --docs MEAN,... its packed documents (log-normal lengths of
that mean), both at S = 131072 with 16 heads of 128 (cuDNN has no such masks here: ours alone). Prints per case and library the kernels' mean time per forward+backward (µs) and
their sum: the attention kernels against the passes around them (D, dq conversion, memsets), and
the calls' median CUDA-event time (what lies outside the kernels: launch gaps, allocations).
--pool-keep keeps the default memory pool's memory between calls (cuda_pool.py).

--plain: no torch.profiler, each case just runs (3 warm-up calls, then --iters), for an outside
profiler whose CUPTI use would clash with torch's, e.g. Nsight Compute on the 2k causal backward,
ours (K=bwd_ws_kernel) and cuDNN's (K=bprop), each kernel's fourth launch (after the warm-up):

    ncu --set full -k regex:$K --launch-skip 3 --launch-count 1 -o bwd2k_$K \\
        python3 bench/gpu/bwd_profile.py --plain --iters 1 --shapes 128:2048:16:32:1 --windows ''
"""
import argparse
import re
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import cuda_pool
import distflash.torch as dft
from masks_bench import bench as event_median_ms  # CUDA-event median of calls each alone on the stream
from masks_bench import lognormal_docs


def short(name, width=72):
    name = re.sub(r"\(.*", "", name)  # drop the argument list
    return name if len(name) <= width else name[: width - 3] + "..."


def kernel_times(fn, iters, plain):
    """Each kernel's µs per call of fn, after 3 warm-up calls; plain: just the calls, no profiler.
    The key "wall" holds the calls' median event time (before the profiled calls)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    wall = None if plain else 1e3 * event_median_ms(fn, warm=0, rep=iters)
    if plain:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[short(e.name)] += e.device_time / iters  # µs per forward+backward
    return per, wall


def report(title, res):
    if res is None:
        print(f"== {title}: ran", flush=True)
        return
    per, wall = res
    total = sum(per.values())
    print(f"== {title}: {total:9.1f} µs of kernels per forward+backward; {wall:9.1f} µs between events "
          f"({wall - total:+.1f} outside kernels)")
    for name, us in sorted(per.items(), key=lambda x: -x[1]):
        print(f"   {us:9.1f} µs {100 * us / total:5.1f}%  {name}")


def distflash_case(title, shape, a, **kw):
    """Our forward+backward on fresh [b, s, h, d] inputs with the attention keywords kw; returns
    q, k, v, dout for a peer to run on the same values."""
    q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    ql, kl, vl = (t.requires_grad_(True) for t in (q, k, v))

    def fb():
        o = dft.attention(ql, kl, vl, **kw)
        torch.autograd.grad(o, (ql, kl, vl), do)

    report(title, kernel_times(fb, a.iters, a.plain))
    return q, k, v, do


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128:2048:16:32:0,128:2048:16:32:1,128:32768:1:32:1")
    ap.add_argument("--windows", default="4096")
    ap.add_argument("--docs", default="", help="mean lengths of the masks bench's packed documents, e.g. 4096")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--plain", action="store_true", help="no torch.profiler (for ncu or nsys)")
    cuda_pool.add_args(ap)
    a = ap.parse_args()
    cuda_pool.apply_args(a)
    for spec in filter(None, a.shapes.split(",")):
        d, s, b, h, causal = (int(x) for x in spec.split(":"))
        q, k, v, do = distflash_case(f"distflash d={d} S={s} b={b} h={h} causal={causal}", (b, s, h, d), a,
                                     causal=bool(causal))
        qt, kt, vt, dot = (t.detach().transpose(1, 2).contiguous().requires_grad_(t is not do) for t in (q, k, v, do))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(causal))
                torch.autograd.grad(o, (qt, kt, vt), dot)

        report(f"cuDNN     d={d} S={s} b={b} h={h} causal={causal}", kernel_times(cudnn, a.iters, a.plain))
        del q, k, v, do, qt, kt, vt, dot
        torch.cuda.empty_cache()
    S, H, D = 131072, 16, 128
    for w in (int(x) for x in a.windows.split(",") if x):
        distflash_case(f"distflash window {w} S={S} h={H} d={D}", (1, S, H, D), a, causal=True, window=(w, None))
        torch.cuda.empty_cache()
    for mean in (float(x) for x in a.docs.split(",") if x):
        ids, lens = lognormal_docs(S, mean, 1.0, seed=1)
        distflash_case(f"distflash docs mean {mean:.0f} ({len(lens)}) S={S} h={H} d={D}", (1, S, H, D), a,
                       causal=True, doc_ids=ids.to("cuda").view(1, S))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
