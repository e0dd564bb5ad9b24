"""distflash.torch.attention on CPU tensors against float64 references: PyTorch's math SDPA
(no offsets) and a hand-built masked softmax (q_start/k_start offsets, fully masked rows).
Forward o and lse, backward dq/dk/dv, GQA, odd lengths, length 1, float32/bfloat16/float16."""
import math

import pytest
import torch

import distflash.torch as dft
from conftest import TOL, assert_close, leaves, randn, ref_attention, sdpa_reference

# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim)
SHAPES = [
    (1, 1, 1, 1, 1, 8),        # length 1
    (2, 37, 37, 4, 4, 64),     # odd length
    (1, 64, 129, 4, 2, 32),    # GQA, more keys than queries
    (2, 100, 33, 6, 1, 16),    # MQA, fewer keys
    (1, 17, 1, 2, 2, 128),     # one key
    (3, 5, 7, 8, 4, 40),       # head_dim not a power of two
]


def _case(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    B, Sq, Sk, H, Hkv, D = shape
    q = randn((B, Sq, H, D), dtype, gen=g)
    k = randn((B, Sk, Hkv, D), dtype, gen=g)
    v = randn((B, Sk, Hkv, D), dtype, gen=g)
    dout = randn((B, Sq, H, D), dtype, gen=g)
    return q, k, v, dout


def _grads(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_against_sdpa_math(shape, causal, dtype):
    q, k, v, dout = _case(shape, dtype, seed=hash((shape, causal, str(dtype))) % 2**31)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, causal=causal, return_lse=True)
    assert o.dtype == dtype and o.shape == q.shape and lse.dtype == torch.float32
    assert lse.shape == (shape[0], shape[3], shape[1])
    dq, dk, dv = _grads(o, (q1, k1, v1), dout)

    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_ref = sdpa_reference(q2, k2, v2, causal=causal)
    dq_r, dk_r, dv_r = _grads(o_ref, (q2, k2, v2), dout.double())
    _, lse_ref = ref_attention(q.double(), k.double(), v.double(), causal=causal)

    tol = TOL[dtype]
    assert_close(o, o_ref, tol, "o")
    assert_close(lse, lse_ref, 2e-5 if dtype == torch.float32 else 1e-3, "lse")
    # gradients sum over keys / query heads: allow a little more than one rounding of the output
    assert_close(dq, dq_r, 2 * tol, "dq")
    assert_close(dk, dk_r, 2 * tol, "dk")
    assert_close(dv, dv_r, 2 * tol, "dv")


@pytest.mark.parametrize("q_start,k_start", [(0, 0), (10, 0), (0, 10), (100, 37), (-5, 3), (2**40, 2**40 - 20)])
@pytest.mark.parametrize("shape", [(2, 23, 31, 4, 2, 32), (1, 1, 9, 2, 1, 8), (1, 40, 1, 2, 2, 16)],
                         ids=lambda s: "x".join(map(str, s)))
def test_causal_offsets(q_start, k_start, shape):
    """Causal with global offsets (chunks of one sequence), reference mask built by hand;
    covers rows that see no key (o = 0, lse = -inf, zero gradient)."""
    q, k, v, dout = _case(shape, torch.float32, seed=q_start % 997 + k_start % 991)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, causal=True, q_start=q_start, k_start=k_start, return_lse=True)
    dq, dk, dv = _grads(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_ref, lse_ref = ref_attention(q2, k2, v2, causal=True, q_start=q_start, k_start=k_start)
    dq_r, dk_r, dv_r = _grads(o_ref, (q2, k2, v2), dout.double())
    assert_close(o, o_ref, 2e-5, "o")
    assert_close(lse, lse_ref, 2e-5, "lse")
    assert_close(dq, dq_r, 4e-5, "dq")
    assert_close(dk, dk_r, 4e-5, "dk")
    assert_close(dv, dv_r, 4e-5, "dv")


def test_offsets_ignored_without_causal():
    q, k, v, _ = _case((1, 9, 11, 2, 2, 16), torch.float32, seed=3)
    a = dft.attention(q, k, v, causal=False)
    b = dft.attention(q, k, v, causal=False, q_start=5, k_start=100)
    assert torch.equal(a, b)


def test_softmax_scale():
    q, k, v, dout = _case((2, 19, 21, 4, 2, 24), torch.float32, seed=5)
    q1, k1, v1 = leaves(q, k, v)
    o = dft.attention(q1, k1, v1, causal=True, softmax_scale=0.37)
    dq, dk, dv = _grads(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_ref = sdpa_reference(q2, k2, v2, causal=True, scale=0.37)
    refs = _grads(o_ref, (q2, k2, v2), dout.double())
    assert_close(o, o_ref, 2e-5, "o")
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert_close(g, r, 4e-5, name)


@pytest.mark.parametrize("causal,q_start", [(False, 0), (True, 0), (True, -8)])
def test_lse_gradient(causal, q_start):
    """With return_lse the lse is differentiable: a loss that uses both o and lse."""
    q, k, v, dout = _case((2, 13, 17, 4, 2, 16), torch.float32, seed=11)
    w = torch.randn(2, 4, 13, dtype=torch.float64)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, causal=causal, q_start=q_start, return_lse=True)
    fin = torch.isfinite(lse.detach())
    loss = (o.double() * dout.double()).sum() + (torch.where(fin, lse, 0.0).double() * w).sum()
    dq, dk, dv = torch.autograd.grad(loss, (q1, k1, v1))
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_r, lse_r = ref_attention(q2, k2, v2, causal=causal, q_start=q_start)
    loss_r = (o_r * dout.double()).sum() + (torch.where(fin, lse_r, 0.0) * w).sum()
    refs = torch.autograd.grad(loss_r, (q2, k2, v2))
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert_close(g, r, 5e-5, name)


def test_lse_only_gradient():
    """Only lse feeds the loss (o unused): the o gradient is taken as zero."""
    q, k, v, _ = _case((1, 8, 8, 2, 2, 8), torch.float32, seed=12)
    q1, k1, v1 = leaves(q, k, v)
    _, lse = dft.attention(q1, k1, v1, causal=True, return_lse=True)
    dq, dk, dv = torch.autograd.grad(lse.sum(), (q1, k1, v1))
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    _, lse_r = ref_attention(q2, k2, v2, causal=True)
    refs = torch.autograd.grad(lse_r.sum(), (q2, k2, v2), allow_unused=True)
    refs = [torch.zeros_like(t) if r is None else r for t, r in zip((q2, k2, v2), refs)]  # lse ignores v
    for name, g, r in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        assert_close(g, r, 5e-5, name)
    assert float(dv.abs().max()) == 0.0


def test_partial_requires_grad_and_no_grad():
    q, k, v, dout = _case((1, 12, 12, 2, 2, 16), torch.float32, seed=13)
    q1 = q.clone().requires_grad_(True)
    o = dft.attention(q1, k, v, causal=True)
    (dq,) = torch.autograd.grad(o, (q1,), dout)
    q2 = q.double().requires_grad_(True)
    (dq_r,) = torch.autograd.grad(sdpa_reference(q2, k.double(), v.double(), causal=True), (q2,), dout.double())
    assert_close(dq, dq_r, 4e-5, "dq")
    with torch.no_grad():
        o2 = dft.attention(q1, k, v, causal=True)
    assert not o2.requires_grad and torch.equal(o2, o.detach())


def test_grad_of_noncontiguous_dout():
    """The incoming gradient may be any layout (here a transposed view): it is made contiguous."""
    q, k, v, _ = _case((1, 10, 10, 2, 2, 16), torch.float32, seed=14)
    q1, k1, v1 = leaves(q, k, v)
    o = dft.attention(q1, k1, v1)
    dout_t = torch.randn(1, 2, 10, 16, dtype=torch.float32).transpose(1, 2)  # [1, 10, 2, 16], non-contiguous
    got = torch.autograd.grad(o, (q1, k1, v1), dout_t)
    q2, k2, v2 = leaves(q, k, v)
    want = torch.autograd.grad(dft.attention(q2, k2, v2), (q2, k2, v2), dout_t.contiguous())
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("shape", [(0, 4, 4, 2, 2, 8), (1, 0, 4, 2, 2, 8), (1, 4, 0, 2, 2, 8)])
def test_empty(shape):
    """Zero batch or zero length: no C call; a query with no keys gives o = 0, lse = -inf."""
    q, k, v, dout = _case(shape, torch.float32, seed=1)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, return_lse=True)
    assert o.shape == q.shape and lse.shape == (shape[0], shape[3], shape[1])
    assert (o == 0).all() and torch.isneginf(lse).all()
    dq, dk, dv = torch.autograd.grad(o, (q1, k1, v1), dout)
    assert dq.shape == q.shape and dk.shape == k.shape and (dq == 0).all() and (dk == 0).all()


def test_deterministic_across_calls():
    q, k, v, dout = _case((2, 50, 50, 4, 2, 32), torch.bfloat16, seed=15)
    outs = []
    for _ in range(2):
        q1, k1, v1 = leaves(q, k, v)
        o = dft.attention(q1, k1, v1, causal=True)
        outs.append((o, *torch.autograd.grad(o, (q1, k1, v1), dout)))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def test_gradcheck_float64_reference_matches_finite_differences():
    """The float64 reference itself (used for every comparison above) against finite
    differences, with offsets and fully masked rows."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 2, 8, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(1, 5, 1, 8, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(1, 5, 1, 8, dtype=torch.float64, generator=g, requires_grad=True)
    f = lambda q, k, v: ref_attention(q, k, v, causal=True, q_start=0, k_start=2)[0]  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v))
    assert math.isinf(ref_attention(q, k, v, causal=True, q_start=0, k_start=2)[1][0, 0, 0].item())
