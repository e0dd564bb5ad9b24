"""Where the binding's host time goes on CUDA tensors: cProfile over many forward (no grad) and
forward+backward calls on a tiny shape (the GPU never the bottleneck), plus the C entry points
timed alone through ctypes (the library's own host work: checks, tensor maps, launches).

    DISTFLASH_LIB=... PYTHONPATH=python:bench/gpu python3 bench/gpu/host_profile.py
"""
import cProfile
import pstats
import time

import torch

import distflash._capi as capi
import distflash._ops as ops
import distflash.torch as dft


def per_call_us(fn, n=300):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def main():
    B, S, H, D = 1, 256, 4, 128
    q, k, v, do = (torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    ql, kl, vl = (t.clone().requires_grad_(True) for t in (q, k, v))

    def fwd():
        with torch.no_grad():
            dft.attention(q, k, v, causal=True)

    def fb():
        o = dft.attention(ql, kl, vl, causal=True)
        torch.autograd.grad(o, (ql, kl, vl), do)

    def sdpa():
        with torch.no_grad():
            torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             is_causal=True)

    def sdpa_fb():
        o = torch.nn.functional.scaled_dot_product_attention(ql.transpose(1, 2), kl.transpose(1, 2),
                                                             vl.transpose(1, 2), is_causal=True)
        torch.autograd.grad(o, (ql, kl, vl), do.transpose(1, 2))

    d = ops.desc_ref(q, k, True, D ** -0.5, 0, 0, False, None, None, ops.NO_WINDOW, ops.NO_WINDOW)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    n = capi.fn("dfa_attn_fwd_cuda_scratch_bytes")(d)
    scratch = torch.empty(n, device="cuda", dtype=torch.uint8)
    stream = torch.cuda.current_stream().cuda_stream
    c_fwd = capi.fn("dfa_attn_fwd_cuda_with_scratch")
    c_plain = capi.fn("dfa_attn_fwd_cuda")
    args = (d, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())

    print(f"per call, µs of host time (shape {B}x{S}x{H}x{D}, bf16, causal):")
    print(f"  C dfa_attn_fwd_cuda_with_scratch alone {per_call_us(lambda: c_fwd(*args, scratch.data_ptr(), n, stream)):8.1f}")
    print(f"  C dfa_attn_fwd_cuda alone (pool)       {per_call_us(lambda: c_plain(*args, stream)):8.1f}")
    print(f"  distflash.torch.attention, no grad     {per_call_us(fwd):8.1f}")
    print(f"  SDPA (cuDNN/flash), no grad            {per_call_us(sdpa):8.1f}")
    print(f"  distflash forward+backward (autograd)  {per_call_us(fb):8.1f}")
    print(f"  SDPA forward+backward (autograd)       {per_call_us(sdpa_fb):8.1f}", flush=True)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fb()
        torch.cuda.synchronize()
    print("== torch.profiler, 20 x distflash forward+backward (device and host time per op)")
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=60))
    for name, fn in (("forward, no grad", fwd), ("forward+backward", fb)):
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        print(f"== cProfile, 200 x {name}, by own time")
        pstats.Stats(pr).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
