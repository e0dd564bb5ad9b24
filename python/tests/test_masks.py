"""Documents and sliding windows (doc_ids=, window=) on CPU tensors against PyTorch's math SDPA
with the same mask given explicitly as a boolean tensor (float64), forward and backward; rows
that see no key (chunk offsets) against a hand-built masked softmax; bad mask arguments."""
import math

import pytest
import torch
import torch.nn.functional as F

import distflash.torch as dft
from conftest import TOL, assert_close, leaves, randn


def _docs(B, S, gen, max_len=40):
    """Random packed documents: lengths 1 .. max_len (some 1), ids non-decreasing."""
    rows = []
    for _ in range(B):
        ids, d = [], int(torch.randint(-3, 3, (1,), generator=gen))
        while len(ids) < S:
            n = 1 if torch.rand(1, generator=gen) < 0.2 else int(torch.randint(2, max_len, (1,), generator=gen))
            ids += [d] * n
            d += int(torch.randint(1, 3, (1,), generator=gen))
        rows.append(ids[:S])
    return torch.tensor(rows, dtype=torch.int64)


def _visible(B, Sq, Sk, causal, q_start, k_start, q_doc, k_doc, window):
    """[B, Sq, Sk] boolean: distflash.h's rule written out."""
    pi = (q_start + torch.arange(Sq)).view(1, Sq, 1)
    pj = (k_start + torch.arange(Sk)).view(1, 1, Sk)
    vis = torch.ones(B, Sq, Sk, dtype=torch.bool)
    if causal:
        vis &= pj <= pi
    if q_doc is not None:
        vis &= q_doc.view(B, Sq, 1) == k_doc.view(B, 1, Sk)
    if window is not None:
        left, right = (-1 if x is None else x for x in window)
        if left >= 0:
            vis &= pi - pj <= left
        if right >= 0:
            vis &= pj - pi <= right
    return vis


def _reference(q, k, v, vis, scale=None):
    """float64 masked softmax by hand: rows that see nothing give o = 0, lse = -inf, no gradient."""
    B, Sq, H, D = q.shape
    Hkv = k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kk, vv = k.repeat_interleave(H // Hkv, dim=2), v.repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    s = s.masked_fill(~vis.unsqueeze(1), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    return torch.einsum("bhqk,bkhd->bqhd", p, vv), lse


CASES = [  # (B, Sq, Sk, H, Hkv, D, causal, docs, window)
    (2, 150, 150, 4, 2, 32, True, True, None),
    (1, 200, 200, 2, 2, 64, True, False, (16, None)),
    (1, 130, 130, 4, 1, 16, True, True, (7, 0)),
    (2, 97, 97, 2, 2, 40, False, True, (5, 9)),
    (1, 120, 120, 3, 3, 8, True, False, (0, None)),   # each query sees only itself
    (1, 100, 100, 2, 2, 32, False, False, (1000, 1000)),  # wider than the sequence
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_against_sdpa_with_a_boolean_mask(case, dtype):
    B, Sq, Sk, H, Hkv, D, causal, docs, window = case
    g = torch.Generator().manual_seed(hash((case, str(dtype))) % 2**31)
    q, k, v, dout = (randn(s, dtype, gen=g) for s in ((B, Sq, H, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D), (B, Sq, H, D)))
    ids = _docs(B, Sq, g) if docs else None
    vis = _visible(B, Sq, Sk, causal, 0, 0, ids, ids, window)
    assert vis.any(-1).all()  # self-attention: every row sees itself, so SDPA has no NaN row
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, causal=causal, doc_ids=ids, window=window, return_lse=True)
    dq, dk, dv = torch.autograd.grad(o, (q1, k1, v1), dout)

    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_ref = F.scaled_dot_product_attention(q2.transpose(1, 2), k2.transpose(1, 2), v2.transpose(1, 2),
                                           attn_mask=vis.unsqueeze(1), enable_gqa=H != Hkv).transpose(1, 2)
    dq_r, dk_r, dv_r = torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())
    _, lse_ref = _reference(q.double(), k.double(), v.double(), vis)
    tol = TOL[dtype]
    assert_close(o, o_ref, tol, "o")
    assert_close(lse, lse_ref, 2e-5 if dtype == torch.float32 else 1e-3, "lse")
    assert_close(dq, dq_r, 2 * tol, "dq")
    assert_close(dk, dk_r, 2 * tol, "dk")
    assert_close(dv, dv_r, 2 * tol, "dv")


@pytest.mark.parametrize("q_start,k_start", [(0, 40), (30, 0), (100, 60)])
def test_chunks_with_rows_that_see_nothing(q_start, k_start):
    """A query chunk against a key chunk of one packed sequence: documents and a window by
    global positions; rows that see nothing give o = 0, lse = -inf and no gradient (no NaN)."""
    g = torch.Generator().manual_seed(q_start * 1000 + k_start)
    B, Sq, Sk, H, D = 2, 70, 90, 2, 16
    ids = _docs(B, 300, g, max_len=25)
    q_doc, k_doc = ids[:, q_start:q_start + Sq], ids[:, k_start:k_start + Sk]
    q, k, v, dout = (randn(s, torch.float32, gen=g) for s in ((B, Sq, H, D), (B, Sk, H, D), (B, Sk, H, D), (B, Sq, H, D)))
    window = (20, None)
    vis = _visible(B, Sq, Sk, True, q_start, k_start, q_doc, k_doc, window)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.attention(q1, k1, v1, causal=True, q_start=q_start, k_start=k_start, doc_ids=(q_doc, k_doc),
                           window=window, return_lse=True)
    dq, dk, dv = torch.autograd.grad(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    o_ref, lse_ref = _reference(q2, k2, v2, vis)
    dq_r, dk_r, dv_r = torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())
    assert_close(o, o_ref, 1e-5, "o")
    assert_close(lse, lse_ref, 2e-5, "lse")
    for got, ref, what in ((dq, dq_r, "dq"), (dk, dk_r, "dk"), (dv, dv_r, "dv")):
        assert_close(got, torch.nan_to_num(ref), 2e-5, what)
    empty = ~vis.any(-1)  # [B, Sq]
    if empty.any():
        assert (o.detach()[empty] == 0).all()


def test_a_window_over_everything_is_plain_causal():
    g = torch.Generator().manual_seed(7)
    q, k, v = (randn((1, 64, 2, 32), torch.float32, gen=g) for _ in range(3))
    a = dft.attention(q, k, v, causal=True)
    b = dft.attention(q, k, v, causal=True, window=(None, None))
    c = dft.attention(q, k, v, causal=True, window=(64, 0), doc_ids=torch.zeros(1, 64, dtype=torch.int32))
    assert_close(b, a, 1e-6, "unlimited window")
    assert_close(c, a, 1e-6, "window wider than the sequence, one document")


def test_bad_mask_arguments():
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match="window"):
        dft.attention(q, q, q, window=(3,))
    with pytest.raises(ValueError, match="window left"):
        dft.attention(q, q, q, window=(-5, 0))
    with pytest.raises(TypeError, match="window right"):
        dft.attention(q, q, q, window=(1, 2.5))
    with pytest.raises(ValueError, match="shape"):
        dft.attention(q, q, q, doc_ids=torch.zeros(1, 7, dtype=torch.int32))
    with pytest.raises(TypeError, match="integers"):
        dft.attention(q, q, q, doc_ids=torch.zeros(1, 8))
    with pytest.raises(ValueError, match="pair"):
        dft.attention(q, q, q, doc_ids=(torch.zeros(1, 8, dtype=torch.int32),))
    decreasing = torch.tensor([[0, 0, 1, 1, 0, 2, 2, 2]])
    with pytest.raises(dft.DistflashInvalidArgument, match="q_doc decreases"):
        dft.attention(q, q, q, doc_ids=decreasing)
