"""distflash.flash_attn_func / flash_attn_varlen_func against a float64 reference of flash-attn's
rules (flash_ref.py) on awkward shapes, forward, lse and gradients; the bad arguments."""
import ctypes
import math

import pytest
import torch

import distflash
from distflash import _capi, _flash, _ops
from conftest import TOL, assert_close, leaves, randn
import flash_ref

V3 = _capi.library_desc_version() >= 3
needs_v3 = pytest.mark.skipif(not V3, reason="the library has no descriptor version 3 (softcap, sinks, head_dim_v)")
GRAD_TOL = {torch.float32: 5e-5, torch.bfloat16: 3e-2}


def _check(got, ref, dtype, what, grad=False):
    assert_close(got, ref, (GRAD_TOL if grad else TOL)[dtype] * (4 if grad else 1), what)


DENSE = [  # (B, Sq, Sk, H, Hkv, D, causal, window)
    (1, 1, 1, 1, 1, 8, True, (-1, -1)),
    (2, 1, 37, 4, 2, 16, True, (-1, -1)),      # one query at the end of the keys
    (2, 37, 1, 4, 1, 16, True, (-1, -1)),      # all but the last query see nothing
    (1, 33, 17, 2, 2, 24, True, (-1, -1)),     # seqlen_q > seqlen_k: the top rows see nothing
    (1, 17, 33, 2, 2, 24, True, (5, -1)),
    (1, 33, 17, 2, 1, 40, False, (3, 2)),
    (2, 64, 64, 4, 4, 12, True, (-1, -1)),     # head_dim padded to 16 and cut again
    (1, 50, 70, 3, 3, 64, False, (-1, -1)),
    (1, 45, 45, 6, 2, 20, False, (0, 0)),      # each query sees its own position only
    (1, 20, 40, 2, 2, 8, True, (2, 3)),        # causal wins over the right side
    (1, 31, 29, 2, 2, 8, False, (-1, 0)),
    (1, 40, 9, 2, 2, 8, False, (0, -1)),       # rows whose window falls before key 0: no key
]


@pytest.mark.parametrize("case", DENSE, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flash_attn_func_against_the_reference(case, dtype):
    B, Sq, Sk, H, Hkv, D, causal, window = case
    g = torch.Generator().manual_seed(hash((case, str(dtype))) % 2**31)
    q, k, v, dout = (randn(s, dtype, gen=g) for s in ((B, Sq, H, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D), (B, Sq, H, D)))
    q1, k1, v1 = leaves(q, k, v)
    o, lse, probs = distflash.flash_attn_func(q1, k1, v1, causal=causal, window_size=window, return_attn_probs=True)
    assert probs is None and o.shape == (B, Sq, H, D) and lse.shape == (B, H, Sq) and lse.dtype == torch.float32
    grads = torch.autograd.grad(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_r, lse_r = flash_ref.dense(q2, k2, v2, causal=causal, window=window)
    grads_r = torch.autograd.grad(o_r, (q2, k2, v2), dout.double())
    _check(o, o_r, dtype, "o")
    _check(lse, lse_r, torch.float32 if dtype == torch.float32 else dtype, "lse")
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
        _check(a, b, dtype, name, grad=True)


def test_scale_and_plain_return():
    g = torch.Generator().manual_seed(5)
    q, k, v = (randn((1, 9, 2, 12), torch.float32, gen=g) for _ in range(3))
    o = distflash.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    assert isinstance(o, torch.Tensor)
    assert_close(o, flash_ref.dense(q.double(), k.double(), v.double(), causal=True, scale=0.3)[0], 1e-5, "o")
    # the default scale is 1/sqrt of the caller's head_dim (12), not the padded one (16)
    o = distflash.flash_attn_func(q, k, v)
    assert_close(o, flash_ref.dense(q.double(), k.double(), v.double(), scale=12 ** -0.5)[0], 1e-5, "o")


def test_strided_inputs_from_a_bhsd_layout():
    """Transformers hands [B, H, S, D] tensors transposed to [B, S, H, D]: not contiguous."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (randn((2, 3, 11, 16), torch.float32, gen=g).transpose(1, 2) for _ in range(3))
    o = distflash.flash_attn_func(q, k, v, causal=True)
    assert_close(o, flash_ref.dense(q.double(), k.double(), v.double(), causal=True)[0], 1e-5, "o")


def _cu(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0).tolist()), dtype=torch.int32)


VARLEN = [  # (q lengths, k lengths or None for the same tensor, H, Hkv, D, causal, window, tail)
    ([5, 1, 17, 0, 30, 1], None, 4, 2, 16, True, (-1, -1), 0),
    ([5, 1, 17, 0, 30, 1], None, 2, 2, 24, True, (4, -1), 3),         # rows past cu[-1]
    ([3, 40, 1], None, 2, 1, 8, False, (2, 5), 0),
    ([7, 9, 12], "equal", 2, 2, 16, True, (-1, -1), 0),             # equal values, two tensors
    ([1, 1, 1, 1], [9, 4, 1, 20], 4, 2, 16, True, (-1, -1), 0),     # decoding: one query per doc
    ([6, 10, 0, 3], [9, 4, 5, 3], 2, 2, 8, True, (-1, -1), 2),       # Lq > Lk in some documents
    ([6, 10, 2, 3], [9, 4, 0, 3], 2, 2, 8, False, (2, 1), 0),        # window by aligned positions
    ([6, 10, 2], [9, 4, 7], 2, 1, 12, False, (-1, -1), 0),           # no positional mask
]


@pytest.mark.parametrize("case", VARLEN, ids=lambda c: str(VARLEN.index(c)))
def test_flash_attn_varlen_func_against_each_document_alone(case):
    lq, lk, H, Hkv, D, causal, window, tail = case
    dtype = torch.float32
    g = torch.Generator().manual_seed(VARLEN.index(case) + 11)
    cu_q = _cu(lq)
    cu_k = cu_q if lk is None else cu_q.clone() if lk == "equal" else _cu(lk)
    tq, tk = int(cu_q[-1]) + tail, int(cu_k[-1]) + tail
    q, k, v, dout = (randn(s, dtype, gen=g) for s in ((tq, H, D), (tk, Hkv, D), (tk, Hkv, D), (tq, H, D)))
    q1, k1, v1 = leaves(q, k, v)
    o, lse, _ = distflash.flash_attn_varlen_func(q1, k1, v1, cu_q, cu_k, max(lq), max(lk or lq), causal=causal,
                                                 window_size=window, return_attn_probs=True)
    assert o.shape == (tq, H, D) and lse.shape == (H, tq)
    grads = torch.autograd.grad(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_r, lse_r = flash_ref.varlen(q2, k2, v2, cu_q, cu_k, causal=causal, window=window)
    grads_r = torch.autograd.grad(o_r, (q2, k2, v2), dout.double())
    _check(o, o_r, dtype, "o")
    _check(lse, lse_r, dtype, "lse")
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
        _check(a, b, dtype, name, grad=True)


def test_the_aligned_path_equals_the_direct_one():
    """The common-position path (taken on CUDA for two distinct cu_seqlens tensors) computes what
    the one-call path computes for equal layouts."""
    g = torch.Generator().manual_seed(2)
    cu = _cu([4, 1, 13, 0, 9])
    q, k, v = (randn((27, 2, 8), torch.float32, gen=g) for _ in range(3))
    for causal, window in ((True, (-1, -1)), (False, (3, 1)), (True, (2, 0))):
        wl, wr = _flash._window(window, "t") or (_ops.NO_WINDOW, _ops.NO_WINDOW)
        o, lse = _flash._aligned_varlen(q, k, v, cu, cu.clone(), causal, 8 ** -0.5, wl, wr, (0.0, None, False))
        o_d, lse_d, _ = distflash.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13, causal=causal, window_size=window,
                                                         return_attn_probs=True)
        assert_close(o, o_d, 1e-6, "o")
        assert_close(lse, lse_d, 1e-6, "lse")


def test_deterministic_reaches_the_backward(monkeypatch):
    flags = []
    real = _ops.bwd_into

    def spy(d, *args):
        flags.append((d._obj if isinstance(d, type(ctypes.byref(ctypes.c_int()))) else d).flags)
        return real(d, *args)

    monkeypatch.setattr(_ops, "bwd_into", spy)
    q, k, v = leaves(*(torch.randn(1, 8, 2, 8) for _ in range(3)))
    for det in (False, True):
        distflash.flash_attn_func(q, k, v, causal=True, deterministic=det).sum().backward()
    cu = _cu([3, 5])
    distflash.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 5, 5, deterministic=True).sum().backward()
    assert [bool(f & _capi.DFA_FLAG_DETERMINISTIC) for f in flags] == [False, True, True]


def test_unsupported_arguments_name_themselves():
    q = torch.randn(1, 4, 2, 8)
    cu = _cu([4])
    with pytest.raises(NotImplementedError, match="dropout_p"):
        distflash.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(NotImplementedError, match="alibi_slopes"):
        distflash.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2))
    with pytest.raises(NotImplementedError, match="dropout_p"):
        distflash.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, dropout_p=0.5)
    with pytest.raises(NotImplementedError, match="block_table"):
        distflash.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 4, 4, block_table=torch.zeros(1, 1))
    if not V3:
        with pytest.raises(NotImplementedError, match="softcap"):
            distflash.flash_attn_func(q, q, q, softcap=30.0)
        with pytest.raises(NotImplementedError, match="value head_dim"):
            distflash.flash_attn_func(q, q, torch.randn(1, 4, 2, 16))
    assert distflash.flash_attn_func(q, q, q, softcap=-1.0).shape == q.shape  # <= 0: off, as in flash-attn


def test_bad_arguments():
    q = torch.randn(1, 4, 2, 8)
    t = q[0]
    cu = _cu([4])
    with pytest.raises(ValueError, match="4 dimensions"):
        distflash.flash_attn_func(t, t, t)
    with pytest.raises(ValueError, match="3 dimensions"):
        distflash.flash_attn_varlen_func(q, q, q, cu, cu, 4, 4)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        distflash.flash_attn_func([1], q, q)
    with pytest.raises(ValueError, match="window_size must be a pair"):
        distflash.flash_attn_func(q, q, q, window_size=4)
    with pytest.raises(TypeError, match="window_size left"):
        distflash.flash_attn_func(q, q, q, window_size=(1.5, 0))
    with pytest.raises(ValueError, match="one head_dim"):
        distflash.flash_attn_func(q, torch.randn(1, 4, 2, 16), q)
    with pytest.raises(TypeError, match="cu_seqlens_q must hold int32"):
        distflash.flash_attn_varlen_func(t, t, t, cu.float(), cu, 4, 4)
    with pytest.raises(ValueError, match=r"cu_seqlens_k must have shape \[batch \+ 1\]"):
        distflash.flash_attn_varlen_func(t, t, t, cu, cu.view(1, 2), 4, 4)
    with pytest.raises(ValueError, match="cu_seqlens_q .* must start at 0"):
        distflash.flash_attn_varlen_func(t, t, t, torch.tensor([0, 5], dtype=torch.int32), cu, 4, 4)
    with pytest.raises(ValueError, match="cu_seqlens_k .* never decrease"):
        distflash.flash_attn_varlen_func(t, t, t, _cu([2, 2]), torch.tensor([0, 3, 2], dtype=torch.int32), 4, 4)
    with pytest.raises(ValueError, match="describe one batch"):
        distflash.flash_attn_varlen_func(t, t, t, _cu([2, 2]), cu, 4, 4)
    with pytest.raises(ValueError, match="softmax_scale"):
        distflash.flash_attn_func(q, q, q, softmax_scale=-1.0)


@needs_v3
def test_softcap_and_a_value_head_dim_of_its_own():
    g = torch.Generator().manual_seed(8)
    for (Sq, Sk, D, Dv, cap, causal) in ((13, 21, 16, 8, 5.0, True), (9, 9, 24, 40, 0.5, False)):
        q, k, v = randn((2, Sq, 4, D), torch.float32, gen=g), randn((2, Sk, 2, D), torch.float32, gen=g), \
            randn((2, Sk, 2, Dv), torch.float32, gen=g)
        dout = randn((2, Sq, 4, Dv), torch.float32, gen=g)
        q1, k1, v1 = leaves(q, k, v)
        o, lse, _ = distflash.flash_attn_func(q1, k1, v1, causal=causal, softcap=cap, return_attn_probs=True)
        grads = torch.autograd.grad(o, (q1, k1, v1), dout)
        q2, k2, v2 = leaves(q.double(), k.double(), v.double())
        o_r, lse_r = flash_ref.dense(q2, k2, v2, causal=causal, softcap=cap)
        grads_r = torch.autograd.grad(o_r, (q2, k2, v2), dout.double())
        _check(o, o_r, torch.float32, "o")
        _check(lse, lse_r, torch.float32, "lse")
        for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
            _check(a, b, torch.float32, name, grad=True)


@needs_v3
def test_sinks_with_lse_gradient():
    """attention(sinks=...) against the reference, its lse differentiable too (softcap on)."""
    import distflash.torch as dft
    g = torch.Generator().manual_seed(9)
    q, k, v = (randn((1, 19, 4, 16), torch.float32, gen=g) for _ in range(3))
    sinks = randn((4,), torch.float32, gen=g)
    q1, k1, v1, s1 = leaves(q, k, v, sinks)
    o, lse = dft.attention(q1, k1, v1, causal=True, window=(4, None), sinks=s1, softcap=3.0, return_lse=True)
    loss = (o * o).sum() + lse.sin().sum()
    grads = torch.autograd.grad(loss, (q1, k1, v1, s1))
    q2, k2, v2, s2 = leaves(q.double(), k.double(), v.double(), sinks.double())
    o_r, lse_r = flash_ref.dense(q2, k2, v2, causal=True, window=(4, -1), sinks=s2, softcap=3.0)
    grads_r = torch.autograd.grad((o_r * o_r).sum() + lse_r.sin().sum(), (q2, k2, v2, s2))
    _check(o, o_r, torch.float32, "o")
    _check(lse, lse_r, torch.float32, "lse")
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), grads, grads_r):
        _check(a, b, torch.float32, name, grad=True)


def test_lse_gradient_through_flash_attn_func():
    """flash-attn drops lse's gradient; here it is exact (one more backward call)."""
    g = torch.Generator().manual_seed(10)
    q, k, v = (randn((1, 15, 2, 8), torch.float32, gen=g) for _ in range(3))
    q1, k1, v1 = leaves(q, k, v)
    o, lse, _ = distflash.flash_attn_func(q1, k1, v1, causal=True, window_size=(3, 0), return_attn_probs=True)
    grads = torch.autograd.grad(o.sum() + (lse * lse).sum(), (q1, k1, v1))
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_r, lse_r = flash_ref.dense(q2, k2, v2, causal=True, window=(3, 0))
    grads_r = torch.autograd.grad(o_r.sum() + (lse_r * lse_r).sum(), (q2, k2, v2))
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
        _check(a, b, torch.float32, name, grad=True)


def test_sinks_need_version_3_and_a_head_per_entry():
    import distflash.torch as dft
    q = torch.randn(1, 4, 2, 8)
    if not V3:
        with pytest.raises(NotImplementedError, match="sinks"):
            dft.attention(q, q, q, sinks=torch.zeros(2))
    with pytest.raises(ValueError, match=r"sinks must have shape \[num_heads\]"):
        dft.attention(q, q, q, sinks=torch.zeros(3))
    with pytest.raises(TypeError, match="floating-point"):
        dft.attention(q, q, q, sinks=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="softcap = nan"):
        dft.attention(q, q, q, softcap=math.nan)
