"""The binding's Python-side cost per call alone: dfa_attn_fwd/bwd replaced by libc's getuid
(same prototype through ctypes, returns 0 when run as root, does no work), so the C kernels' time
and their noise drop out. Compares attention() without grad, the autograd forward+backward, and
torch's floor (an identity autograd.Function + torch.autograd.grad). Min and median of 7 rounds.

    PYTHONPATH=python python3 python/bench/host_cost.py        # as root (getuid must return 0)
"""
import ctypes
import timeit

import torch

import distflash.torch as dft
from distflash import _capi


def main():
    libc = ctypes.CDLL(None)
    for name in ("dfa_attn_fwd", "dfa_attn_bwd"):
        restype, argtypes, _ = _capi._PROTOTYPES[name]
        f = ctypes.CFUNCTYPE(restype)(("getuid", libc))
        f.argtypes = argtypes
        if f(*([None] * len(argtypes))) != 0:
            raise SystemExit("host_cost.py: getuid() is not 0 here (run as root): the stub would fail")
        _capi.fn(name)  # load the library, then replace the cached function
        _capi._funcs[name] = f
    q, k, v = (torch.randn(1, 16, 1, 64, dtype=torch.bfloat16) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)

    def nograd():
        with torch.no_grad():
            dft.attention(q, k, v, causal=True)

    def autograd():
        o = dft.attention(qg, kg, vg, causal=True)
        torch.autograd.grad(o, (qg, kg, vg), dout)

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            return g

    def floor():
        o = Identity.apply(qg)
        torch.autograd.grad(o, (qg,), dout)

    print("| path (B,S,H,D = 1,16,1,64 bf16, C calls stubbed) | min us | median us |")
    print("|---|---|---|")
    for name, fn, n in (("attention() no grad", nograd, 20000), ("autograd fwd+bwd", autograd, 5000),
                        ("torch floor: identity Function + grad", floor, 5000)):
        t = sorted(timeit.repeat(fn, number=n, repeat=7))
        print(f"| {name} | {t[0] / n * 1e6:.1f} | {t[3] / n * 1e6:.1f} |")


if __name__ == "__main__":
    main()
