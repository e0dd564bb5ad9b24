"""Host side of one forward+backward through the Python binding: how long the calls take to
enqueue, whether PyTorch's caching allocator goes to the driver (cudaMalloc / cudaFree, which
synchronise) and the GPU's idle time between the events, with the library's scratch from the
CUDA pool (--library-scratch) or from PyTorch's cache (the default).

    DISTFLASH_LIB=... PYTHONPATH=python:bench/gpu python3 bench/gpu/host_probe.py [--library-scratch] [--pool-keep]
"""
import argparse
import time

import torch

import cuda_pool
import distflash.torch as dft


def probe(title, shape, kw, iters):
    q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    ql, kl, vl = (t.requires_grad_(True) for t in (q, k, v))
    for _ in range(3):
        o = dft.attention(ql, kl, vl, **kw)
        torch.autograd.grad(o, (ql, kl, vl), do)
    torch.cuda.synchronize()
    s0 = torch.cuda.memory_stats()
    t_f, t_b, wall = [], [], []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        c0 = time.perf_counter()
        o = dft.attention(ql, kl, vl, **kw)
        c1 = time.perf_counter()
        torch.autograd.grad(o, (ql, kl, vl), do)
        c2 = time.perf_counter()
        b.record()
        torch.cuda.synchronize()
        t_f.append(1e6 * (c1 - c0))
        t_b.append(1e6 * (c2 - c1))
        wall.append(1e3 * a.elapsed_time(b))
    s1 = torch.cuda.memory_stats()
    med = lambda x: sorted(x)[len(x) // 2]
    keys = ("segment.all.allocated", "segment.all.freed", "num_alloc_retries", "num_device_alloc", "num_device_free")
    d = {key: s1.get(key, 0) - s0.get(key, 0) for key in keys}
    print(f"{title}: enqueue fwd {med(t_f):7.1f} µs, bwd {med(t_b):7.1f} µs (max {max(t_b):7.1f}); "
          f"wall {med(wall):9.1f} µs; allocator over {iters} calls: {d}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    cuda_pool.add_args(ap)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    cuda_pool.apply_args(a)
    mode = ("library scratch" if a.library_scratch else "caller scratch") + (", pool kept" if a.pool_keep else "")
    probe(f"{mode}: causal 2k x 16 x 32", (16, 2048, 32, 128), dict(causal=True), a.iters)
    torch.cuda.empty_cache()
    probe(f"{mode}: window 4k, 128k x 16", (1, 131072, 16, 128), dict(causal=True, window=(4096, None)), a.iters)


if __name__ == "__main__":
    main()
