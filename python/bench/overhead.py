"""What the Python binding costs over the C API.

1. Per-call overhead at small sizes: the C function called through ctypes directly (descriptor
   and pointers made once) against distflash.torch.attention (no grad), the custom op called
   directly, and the autograd path (forward + backward) against the C forward + backward.
   Host time per call (the loop's wall time / calls, synchronised once at the end), so on CUDA it
   is the enqueue cost the binding adds; the small kernels run in the shadow of it. "torch floor":
   an autograd.Function with the same inputs, outputs and saved tensors that allocates what the
   binding allocates and calls nothing: what torch's autograd costs on its own, the part of the
   fwd+bwd overhead no binding can remove.
2. Large size (CUDA; the anchors' shape: d=128, S=32k, 32 heads, batch 1, causal, bf16): the C
   API's forward/backward (dfa_attn_fwd_cuda/bwd_cuda through ctypes on the same tensors) against
   the autograd path, timed with CUDA events (median of --reps), in ms and TFLOP/s
   (4·B·H·S²·D, halved when causal; backward 2.5x forward, as in the anchors).

On the GPU machine, from the repository root (library built with CMake in build/):
    PYTHONPATH=python python3 python/bench/overhead.py
Here (CPU): PYTHONPATH=python python3 python/bench/overhead.py --device cpu
"""
import argparse
import ctypes
import statistics
import time

import torch

import distflash
import distflash.torch as dft
from distflash import _capi, _ops


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def host_us(fn, dev, calls, rounds=5):
    """Median over rounds of (wall time of `calls` calls) / calls, in microseconds."""
    for _ in range(max(3, calls // 10)):
        fn()
    sync(dev)
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(dev)
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def device_ms(fn, dev, reps, warm=2):
    for _ in range(warm):
        fn()
    sync(dev)
    ts = []
    for _ in range(reps):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize(dev)
            ts.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


class CApi:
    """dfa_attn_fwd(_cuda) / dfa_attn_bwd(_cuda) called through ctypes with everything prepared:
    the floor the binding is measured against."""

    def __init__(self, q, k, v, causal):
        self.dev = q.device
        self.t = dict(q=q, k=k, v=v, o=torch.empty_like(q), dout=torch.randn_like(q), dq=torch.empty_like(q),
                      dk=torch.empty_like(k), dv=torch.empty_like(v),
                      lse=torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device))
        self.d = _ops.desc_for(q, k, causal, 1.0 / q.shape[3] ** 0.5, 0, 0)
        self.dref = ctypes.byref(self.d)
        p = {n: t.data_ptr() for n, t in self.t.items()}
        cuda = self.dev.type == "cuda"
        self.fwd_fn = _capi.fn("dfa_attn_fwd_cuda" if cuda else "dfa_attn_fwd")
        self.bwd_fn = _capi.fn("dfa_attn_bwd_cuda" if cuda else "dfa_attn_bwd")
        stream = (torch.cuda.current_stream(self.dev).cuda_stream,) if cuda else ()
        self.fwd_args = (self.dref, p["q"], p["k"], p["v"], p["o"], p["lse"]) + stream
        self.bwd_args = (self.dref, p["q"], p["k"], p["v"], p["o"], p["lse"], p["dout"], p["dq"], p["dk"],
                         p["dv"]) + stream
        self.fwd()  # o and lse for the backward

    def fwd(self):
        s = self.fwd_fn(*self.fwd_args)
        if s:
            _capi.check(s, "fwd")

    def bwd(self):
        s = self.bwd_fn(*self.bwd_args)
        if s:
            _capi.check(s, "bwd")


class Floor(torch.autograd.Function):
    """The binding's autograd shape without the C calls (see the docstring)."""

    @staticmethod
    def forward(ctx, q, k, v, args):
        o = torch.empty_like(q)
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), None


def inputs(B, S, H, Hkv, D, dtype, dev, grad=False):
    q = torch.randn(B, S, H, D, device=dev, dtype=dtype, requires_grad=grad)
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=grad)
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=grad)
    return q, k, v


def small(dev, dtype, sizes, calls):
    print(f"\n## per-call host time, {dev.type}, {str(dtype).replace('torch.', '')}, causal "
          f"(microseconds per call; overhead = path - C API)\n")
    print("| B,S,H,D | C fwd | attention() | op direct | overhead fwd | C fwd+bwd | autograd fwd+bwd | "
          "overhead fwd+bwd | torch floor fwd+bwd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (B, S, H, D) in sizes:
        q, k, v = inputs(B, S, H, H, D, dtype, dev)
        c = CApi(q, k, v, True)
        t_c = host_us(c.fwd, dev, calls)
        with torch.no_grad():
            t_api = host_us(lambda: dft.attention(q, k, v, causal=True), dev, calls)
            scale = 1.0 / D ** 0.5
            t_op = host_us(lambda: torch.ops.distflash.attn_fwd(q, k, v, True, scale, 0, 0), dev, calls)

        def c_fb():
            c.fwd()
            c.bwd()

        t_cfb = host_us(c_fb, dev, calls)
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        dout = torch.randn_like(q)

        def ag():
            o = dft.attention(qg, kg, vg, causal=True)
            torch.autograd.grad(o, (qg, kg, vg), dout)

        t_ag = host_us(ag, dev, calls)

        def floor():
            o, _ = Floor.apply(qg, kg, vg, (True, 1.0, 0, 0, None, None, -2, -2))
            torch.autograd.grad(o, (qg, kg, vg), dout)

        t_fl = host_us(floor, dev, calls)
        print(f"| {B},{S},{H},{D} | {t_c:.1f} | {t_api:.1f} | {t_op:.1f} | {t_api - t_c:+.1f} | {t_cfb:.1f} | "
              f"{t_ag:.1f} | {t_ag - t_cfb:+.1f} | {t_fl:.1f} |")


def flops(B, H, S, D, causal):
    return 4 * B * H * S * S * D * (0.5 if causal else 1.0)


def large(dev, dtype, B, S, H, D, reps):
    print(f"\n## large: {dev.type}, B={B} S={S} H={H} D={D} causal {str(dtype).replace('torch.', '')} "
          f"(median of {reps}; {'CUDA events' if dev.type == 'cuda' else 'wall time'})\n")
    q, k, v = inputs(B, S, H, H, D, dtype, dev)
    c = CApi(q, k, v, True)
    f = flops(B, H, S, D, True)
    ms_cf = device_ms(c.fwd, dev, reps)
    ms_cb = device_ms(c.bwd, dev, reps)
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    dout = torch.randn_like(q)
    with torch.no_grad():
        ms_af = device_ms(lambda: dft.attention(q, k, v, causal=True), dev, reps)

    def ag():
        o = dft.attention(qg, kg, vg, causal=True)
        torch.autograd.grad(o, (qg, kg, vg), dout)

    ms_afb = device_ms(ag, dev, reps)
    ms_cfb = ms_cf + ms_cb
    unit = "TFLOP/s" if dev.type == "cuda" else "GFLOP/s"
    scale = 1e9 if dev.type == "cuda" else 1e6  # flops / ms -> unit

    def rate(fl, ms):
        return fl / ms / scale

    print(f"| path | fwd ms | fwd {unit} | fwd+bwd ms | fwd+bwd {unit} |")
    print("|---|---|---|---|---|")
    print(f"| C API (ctypes) | {ms_cf:.3f} | {rate(f, ms_cf):.1f} | {ms_cfb:.3f} | {rate(3.5 * f, ms_cfb):.1f} |")
    print(f"| distflash.torch (autograd) | {ms_af:.3f} | {rate(f, ms_af):.1f} | {ms_afb:.3f} | {rate(3.5 * f, ms_afb):.1f} |")
    print(f"| ratio binding / C | {ms_af / ms_cf:.3f} | | {ms_afb / ms_cfb:.3f} | |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=200, help="calls per timing round (small sizes)")
    p.add_argument("--reps", type=int, default=10, help="timed repetitions (large size)")
    p.add_argument("--seqlen", type=int, default=None, help="large size S (default 32768 on CUDA, 2048 on CPU)")
    p.add_argument("--heads", type=int, default=None, help="large size heads (default 4096 // head_dim on CUDA, 8 on CPU)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--skip-large", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16
    print(f"distflash {distflash.version()} from {distflash.library_path()}; torch {torch.__version__}; "
          + (torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU ({distflash.cpu_isa()})"))
    sizes = [(1, 16, 1, 64), (1, 128, 8, 64), (1, 512, 8, 128)] if dev.type == "cuda" else [(1, 16, 1, 64), (1, 128, 4, 64)]
    small(dev, dtype, sizes, a.calls if dev.type == "cuda" else max(20, a.calls // 4))
    if not a.skip_large:
        S = a.seqlen or (32768 if dev.type == "cuda" else 2048)
        H = a.heads or (4096 // a.head_dim if dev.type == "cuda" else 8)
        large(dev, dtype, 1, S, H, a.head_dim, a.reps if dev.type == "cuda" else max(3, a.reps // 3))


if __name__ == "__main__":
    main()
