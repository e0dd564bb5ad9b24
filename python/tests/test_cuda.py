"""distflash.torch.attention on CUDA tensors (bfloat16, float16) against float64 references,
on the caller's current stream; errors; torch.compile. Skipped without a CUDA device.

On a GPU machine, against a CMake build of the library (with CUDA):
    PYTHONPATH=python python3 -m pytest -q python/tests/test_cuda.py
"""
import pytest
import torch

import distflash
import distflash.torch as dft
from conftest import TOL, assert_close, leaves, randn, ref_attention, sdpa_reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is false)")

SHAPES = [
    (1, 1, 1, 2, 2, 64),          # length 1
    (2, 257, 257, 4, 4, 128),     # odd length, the Hopper kernels' head_dim
    (1, 300, 1000, 8, 2, 64),     # GQA, more keys
    (2, 1000, 77, 4, 1, 128),     # MQA, fewer keys
    (1, 129, 129, 2, 2, 96),      # head_dim for the mma.sync kernels
    (1, 64, 64, 2, 2, 256),       # the largest head_dim
]


def _case(shape, dtype, seed, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    B, Sq, Sk, H, Hkv, D = shape
    return (randn((B, Sq, H, D), dtype, device, gen=g), randn((B, Sk, Hkv, D), dtype, device, gen=g),
            randn((B, Sk, Hkv, D), dtype, device, gen=g), randn((B, Sq, H, D), dtype, device, gen=g))


def _run(q, k, v, dout, **kw):
    q1, k1, v1 = leaves(q, k, v, device=q.device)
    o, lse = dft.attention(q1, k1, v1, return_lse=True, **kw)
    return (o, lse, *torch.autograd.grad(o, (q1, k1, v1), dout))


def test_library_has_cuda():
    assert distflash.has_cuda(), f"{distflash.library_path()} was built without CUDA (-DDFA_WITH_CUDA=ON)"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_against_sdpa_math(shape, causal, dtype):
    q, k, v, dout = _case(shape, dtype, seed=sum(shape) + causal)
    o, lse, dq, dk, dv = _run(q, k, v, dout, causal=causal)
    assert o.device == q.device and o.dtype == dtype
    q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device="cuda")
    o_ref = sdpa_reference(q2, k2, v2, causal=causal)
    refs = torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())
    _, lse_ref = ref_attention(q.double(), k.double(), v.double(), causal=causal)
    tol = TOL[dtype]
    assert_close(o, o_ref, tol, "o")
    assert_close(lse, lse_ref, 1e-3, "lse")
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert_close(g, r, 2 * tol, name)


@pytest.mark.parametrize("q_start,k_start", [(0, 0), (100, 0), (0, 100), (-7, 50), (2**40, 2**40 - 300)])
def test_causal_offsets(q_start, k_start):
    q, k, v, dout = _case((2, 200, 333, 4, 2, 128), torch.bfloat16, seed=q_start % 1000 + k_start % 999)
    o, lse, dq, dk, dv = _run(q, k, v, dout, causal=True, q_start=q_start, k_start=k_start)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device="cuda")
    o_ref, lse_ref = ref_attention(q2, k2, v2, causal=True, q_start=q_start, k_start=k_start)
    refs = torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())
    assert_close(o, o_ref, TOL[torch.bfloat16], "o")
    assert_close(lse, lse_ref, 1e-3, "lse")
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert_close(g, r, 2 * TOL[torch.bfloat16], name)


def test_lse_gradient():
    q, k, v, dout = _case((1, 100, 120, 4, 2, 64), torch.float16, seed=21)
    w = torch.randn(1, 4, 100, device="cuda", dtype=torch.float64)
    q1, k1, v1 = leaves(q, k, v, device="cuda")
    o, lse = dft.attention(q1, k1, v1, causal=True, return_lse=True)
    grads = torch.autograd.grad((o.double() * dout.double()).sum() + (lse.double() * w).sum(), (q1, k1, v1))
    q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device="cuda")
    o_r, lse_r = ref_attention(q2, k2, v2, causal=True)
    refs = torch.autograd.grad((o_r * dout.double()).sum() + (lse_r * w).sum(), (q2, k2, v2))
    for name, g, r in zip(("dq", "dk", "dv"), grads, refs):
        assert_close(g, r, 2 * TOL[torch.float16], name)


def test_current_stream_is_used():
    """Inputs written on a side stream and the call made there: correct without any host
    synchronisation in between (the C calls enqueue on torch's current stream)."""
    side = torch.cuda.Stream()
    q0, k0, v0, dout = _case((1, 2048, 2048, 8, 8, 128), torch.bfloat16, seed=22)
    side.wait_stream(torch.cuda.current_stream())  # the inputs were made on the default stream
    with torch.cuda.stream(side):
        q, k, v = (t * 1.0 for t in (q0, k0, v0))  # produced on the side stream
        o = dft.attention(q, k, v, causal=True)
        o2 = o * 1.0  # consumed on the side stream
    side.synchronize()
    ref = dft.attention(q0, k0, v0, causal=True)
    torch.cuda.synchronize()
    assert torch.equal(o2, ref)


def test_deterministic_backward():
    q, k, v, dout = _case((1, 1024, 1024, 4, 2, 128), torch.bfloat16, seed=23)
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        a = _run(q, k, v, dout, causal=True)
        b = _run(q, k, v, dout, causal=True)
    finally:
        torch.use_deterministic_algorithms(prev)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensor_on_another_device():
    """Tensors on cuda:1 while cuda:0 is current: the call runs on the tensors' device."""
    q, k, v, dout = _case((1, 100, 100, 2, 2, 64), torch.bfloat16, seed=24, device="cuda:1")
    with torch.cuda.device(0):
        o, lse, dq, dk, dv = _run(q, k, v, dout, causal=True)
    assert o.device == q.device
    q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device="cuda:1")
    assert_close(o, sdpa_reference(q2, k2, v2, causal=True), TOL[torch.bfloat16], "o")


def test_float32_is_unsupported_on_cuda():
    q, k, v, _ = _case((1, 8, 8, 2, 2, 64), torch.float32, seed=25)
    with pytest.raises(distflash.DistflashUnsupported) as e:
        dft.attention(q, k, v)
    assert e.value.status_name == "DFA_ERR_UNSUPPORTED"


def test_mixed_cpu_cuda():
    q, k, v, _ = _case((1, 8, 8, 2, 2, 64), torch.bfloat16, seed=26)
    with pytest.raises(ValueError, match="one device"):
        dft.attention(q, k.cpu(), v)


def test_misaligned_pointer_is_refused():
    """A contiguous view whose data pointer is not 16-byte aligned: the library refuses it."""
    n = 1 * 8 * 2 * 64
    buf = torch.randn(n + 1, device="cuda", dtype=torch.bfloat16)
    q = buf[1:].view(1, 8, 2, 64)
    assert q.is_contiguous() and q.data_ptr() % 16 != 0
    k = torch.randn(1, 8, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(distflash.DistflashInvalidArgument, match="q"):
        dft.attention(q, k, k)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(backend):
    if backend == "inductor":
        pytest.importorskip("triton")
    torch._dynamo.reset()
    q, k, v, dout = _case((2, 256, 256, 4, 2, 128), torch.bfloat16, seed=27)

    def f(q, k, v):
        return dft.attention(q * 0.5, k, v, causal=True) + 1.0

    q1, k1, v1 = leaves(q, k, v, device="cuda")
    out = torch.compile(f, fullgraph=True, backend=backend)(q1, k1, v1)
    grads = torch.autograd.grad(out, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q, k, v, device="cuda")
    ref = f(q2, k2, v2)
    refs = torch.autograd.grad(ref, (q2, k2, v2), dout)
    assert torch.equal(out, ref)
    for a, b in zip(grads, refs):
        assert_close(a, b, 1e-2, "grad")
