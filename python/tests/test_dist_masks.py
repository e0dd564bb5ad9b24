"""distflash.torch.dist_attention with documents and windows (doc_ids=, window=) where no GPU is
needed: the fallback to attention() (no process group, and a one-rank gloo group) forward and
backward against attention() and a float64 masked softmax; the argument checks, which run before
anything collective; the custom ops' schema and fake implementations (what torch.compile uses).
The 2-GPU comparison is in test_dist.py."""
import pytest
import torch

import distflash.torch as dft
from distflash import _dist
from conftest import TOL, assert_close, leaves, randn
from test_masks import _docs, _reference, _visible

FN = "distflash.torch.dist_attention"

CASES = [  # (B, n, H, Hkv, D, causal, schedule, docs, window)
    (2, 96, 4, 2, 32, True, "balanced", True, None),
    (1, 120, 2, 2, 16, True, "ring", False, (20, None)),
    (2, 80, 4, 1, 16, True, "balanced", True, (9, 0)),
    (1, 70, 2, 2, 32, False, "ring", True, (6, 11)),
]


def _inputs(case, dtype, seed):
    B, n, H, Hkv, D, causal, schedule, docs, window = case
    g = torch.Generator().manual_seed(seed)
    q, k, v, dout = (randn(s, dtype, gen=g) for s in ((B, n, H, D), (B, n, Hkv, D), (B, n, Hkv, D), (B, n, H, D)))
    ids = _docs(B, n, g, max_len=30) if docs else None
    return q, k, v, dout, ids


def _check_against_attention_and_reference(case, dtype, seed, group=None):
    B, n, H, Hkv, D, causal, schedule, docs, window = case
    q, k, v, dout, ids = _inputs(case, dtype, seed)
    q1, k1, v1 = leaves(q, k, v)
    o = dft.dist_attention(q1, k1, v1, group=group, schedule=schedule, causal=causal, doc_ids=ids, window=window)
    got = [o, *torch.autograd.grad(o, (q1, k1, v1), dout)]

    q2, k2, v2 = leaves(q, k, v)
    o2 = dft.attention(q2, k2, v2, causal=causal, doc_ids=ids, window=window)
    single = [o2, *torch.autograd.grad(o2, (q2, k2, v2), dout)]
    for name, a, b in zip(("o", "dq", "dk", "dv"), got, single):
        assert torch.equal(a, b), f"{name}: the fallback differs from attention()"

    vis = _visible(B, n, n, causal, 0, 0, ids, ids, window)
    q3, k3, v3 = leaves(q.double(), k.double(), v.double())
    o_ref, _ = _reference(q3, k3, v3, vis)
    refs = [o_ref, *torch.autograd.grad(o_ref, (q3, k3, v3), dout.double())]
    tol = TOL[dtype]
    for name, a, r in zip(("o", "dq", "dk", "dv"), got, refs):
        assert_close(a, r, tol if name == "o" else 2 * tol, name + " vs float64")


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fallback_without_a_process_group(case, dtype):
    import torch.distributed as dist
    assert not (dist.is_available() and dist.is_initialized())
    _check_against_attention_and_reference(case, dtype, seed=hash((case, str(dtype))) % 2**31)


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_fallback_with_a_one_rank_group(one_rank_group):
    # the default group (the world) and the group given explicitly
    _check_against_attention_and_reference(CASES[2], torch.float32, seed=5)
    _check_against_attention_and_reference(CASES[3], torch.float32, seed=6, group=one_rank_group)


def test_doc_ids_forms():
    """[n] ids are every batch row's; int32 and int64 ids give the same result."""
    g = torch.Generator().manual_seed(3)
    B, n = 2, 64
    q, k, v = (randn((B, n, 2, 16), torch.float32, gen=g) for _ in range(3))
    ids = _docs(1, n, g, max_len=20)[0]  # int64 [n]
    ref = dft.attention(q, k, v, causal=True, doc_ids=ids.expand(B, n), window=(12, None))
    for form in (ids, ids.to(torch.int32), ids.expand(B, n), ids.expand(B, n).to(torch.int32).contiguous(),
                 ids.to(torch.int16)):
        o = dft.dist_attention(q, k, v, doc_ids=form, window=(12, None))
        assert torch.equal(o, ref), f"doc_ids {form.dtype} {tuple(form.shape)}"


def test_unmasked_calls_unchanged():
    g = torch.Generator().manual_seed(4)
    q, k, v = (randn((1, 40, 2, 16), torch.float32, gen=g) for _ in range(3))
    a = dft.dist_attention(q, k, v)
    assert torch.equal(a, dft.attention(q, k, v, causal=True))
    assert torch.equal(dft.dist_attention(q, k, v, doc_ids=torch.zeros(40, dtype=torch.int32), window=(None, None)), a)


def _qkv(B=2, n=8):
    return torch.randn(B, n, 2, 16), torch.randn(B, n, 2, 16), torch.randn(B, n, 2, 16)


@pytest.mark.parametrize("bad,exc,match", [
    ((torch.zeros(2, 8, dtype=torch.int32),) * 2, TypeError, "doc_ids must be one tensor"),
    ([torch.zeros(2, 8, dtype=torch.int32)], TypeError, "doc_ids must be one tensor"),
    (torch.zeros(2, 8).tolist(), TypeError, "doc_ids must be one tensor"),
    (3, TypeError, "doc_ids must be a torch.Tensor, not int"),
    (torch.zeros(2, 8), TypeError, "doc_ids must hold integers, not torch.float32"),
    (torch.zeros(2, 8, dtype=torch.bool), TypeError, "doc_ids must hold integers"),
    (torch.zeros(2, 7, dtype=torch.int32), ValueError, r"doc_ids must have shape \[batch, local_rows\] = \(2, 8\)"),
    (torch.zeros(1, 8, dtype=torch.int32), ValueError, r"or \[local_rows\] = \(8,\); it has \(1, 8\)"),
    (torch.zeros(2, 8, 1, dtype=torch.int32), ValueError, "doc_ids must have shape"),
    (torch.zeros(16, dtype=torch.int32), ValueError, "doc_ids must have shape"),
    (torch.zeros(2, 8, dtype=torch.int32, device="meta"), ValueError, "doc_ids must be on q's device cpu, not meta"),
])
def test_bad_doc_ids(bad, exc, match):
    q, k, v = _qkv()
    with pytest.raises(exc, match=match) as e:
        dft.dist_attention(q, k, v, doc_ids=bad)
    assert str(e.value).startswith(FN + ": ")


@pytest.mark.parametrize("bad,exc,match", [
    ((3,), ValueError, r"window must be None or \(left, right\)"),
    (5, ValueError, r"window must be None or \(left, right\)"),
    ((-5, 0), ValueError, "window left = -5"),
    ((0, 2**31), ValueError, "window right = 2147483648"),
    ((1, 2.5), TypeError, "window right must be an int or None, not float"),
    ((True, 0), TypeError, "window left must be an int or None, not bool"),
])
def test_bad_window(bad, exc, match):
    q, k, v = _qkv()
    with pytest.raises(exc, match=match) as e:
        dft.dist_attention(q, k, v, window=bad)
    assert str(e.value).startswith(FN + ": ")


def test_same_doc_ids():
    """same_doc_ids: None, True (a promise about doc_ids: it needs them) or False; where the call
    falls back to attention() (no process group) it changes nothing."""
    q, k, v = _qkv(B=1)
    ids = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
    ref = dft.dist_attention(q, k, v, doc_ids=ids)
    assert torch.equal(dft.dist_attention(q, k, v, doc_ids=ids, same_doc_ids=True), ref)
    with pytest.raises(ValueError, match="same_doc_ids=True promises that doc_ids did not change, but doc_ids is None"):
        dft.dist_attention(q, k, v, same_doc_ids=True)
    for flag in (None, False):
        assert torch.equal(dft.dist_attention(q, k, v, doc_ids=ids, same_doc_ids=flag), ref)
    with pytest.raises(TypeError, match="same_doc_ids must be None, True or False, not int"):
        dft.dist_attention(q, k, v, doc_ids=ids, same_doc_ids=1)


def test_docs_unchanged_rule():
    """The rule behind same_doc_ids=None (_dist.docs_unchanged): the last call's tensor, or a view
    of the same memory, shape and strides, unwritten since; not an equal tensor elsewhere, not
    after an in-place write, not after a masked call without ids."""
    c = _dist.Comm(None, None, 0, 2, None, None)
    ids = torch.tensor([[0, 0, 1, 1, 2, 2, 2, 2]], dtype=torch.int32)
    assert not _dist.docs_unchanged(c, ids)  # nothing yet
    _dist.remember_docs(c, ids, _dist.NO_WINDOW)
    assert _dist.docs_unchanged(c, ids)
    assert _dist.docs_unchanged(c, ids.view(1, 8))  # another tensor over the same memory
    assert not _dist.docs_unchanged(c, ids.clone())  # equal values elsewhere: not known to be equal
    assert not _dist.docs_unchanged(c, ids[:, :4])  # other shape
    assert _dist.same_docs_flag(c, ids, 0) and not _dist.same_docs_flag(c, ids, -1)
    assert _dist.same_docs_flag(c, ids.clone(), 1) and not _dist.same_docs_flag(c, None, 1)
    ids[0, 7] = 3  # an in-place write bumps the version counter
    assert not _dist.docs_unchanged(c, ids)
    _dist.remember_docs(c, ids, _dist.NO_WINDOW)
    assert _dist.docs_unchanged(c, ids)
    _dist.remember_docs(c, None, _dist.NO_WINDOW)  # an unmasked call leaves the kept ids
    assert _dist.docs_unchanged(c, ids)
    _dist.remember_docs(c, None, 16)  # a window without ids: the library keeps none
    assert not _dist.docs_unchanged(c, ids)


def test_decreasing_ids_are_the_librarys_error():
    q, k, v = _qkv(B=1)
    with pytest.raises(dft.DistflashInvalidArgument, match="q_doc decreases in batch row 0 at row 4"):
        dft.dist_attention(q, k, v, doc_ids=torch.tensor([0, 0, 1, 1, 0, 2, 2, 2]))


def test_mask_checks_run_before_the_group_is_used():
    """A bad mask raises on each rank before anything collective: here the group, which is not
    one, is never reached."""
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="integers"):
        dft.dist_attention(q, k, v, group=object(), doc_ids=torch.zeros(2, 8))
    with pytest.raises(ValueError, match="window"):
        dft.dist_attention(q, k, v, group=object(), window=(1, 2, 3))


def test_op_checks_its_doc():
    """The ops take int32 [batch, local_rows] ids on q's device (a caller of torch.ops.distflash
    directly gets an error, not a wrong read)."""
    q = torch.randn(2, 8, 2, 16)
    fn = "distflash::dist_attn_fwd"
    assert _dist.check_doc(None, q, fn) is None
    ok = torch.zeros(2, 8, dtype=torch.int32)
    assert torch.equal(_dist.check_doc(ok, q, fn), ok)
    with pytest.raises(TypeError, match="doc must be int32, not torch.int64"):
        _dist.check_doc(torch.zeros(2, 8, dtype=torch.int64), q, fn)
    with pytest.raises(ValueError, match=r"doc must have shape \[batch, local_rows\] = \(2, 8\)"):
        _dist.check_doc(torch.zeros(8, dtype=torch.int32), q, fn)


def test_op_schemas_take_the_mask():
    for op in (torch.ops.distflash.dist_attn_fwd.default, torch.ops.distflash.dist_attn_bwd.default):
        schema = str(op._schema)
        for arg in ("Tensor? doc=None", "SymInt window_left=-2", "SymInt window_right=-2", "SymInt same_docs=0"):
            assert arg in schema or arg.replace("SymInt", "int") in schema, schema


def test_fake_implementations_with_a_mask():
    """What torch.compile sees of the distributed ops: shapes and dtypes, no library call."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 8, 4, 16, dtype=torch.bfloat16)
        k = v = torch.empty(2, 8, 2, 16, dtype=torch.bfloat16)
        doc = torch.empty(2, 8, dtype=torch.int32)
        o, lse = torch.ops.distflash.dist_attn_fwd(q, k, v, "g", 0, True, 0.25, doc, 5, 0)
        assert o.shape == q.shape and o.dtype == q.dtype
        assert lse.shape == (2, 4, 8) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.distflash.dist_attn_bwd(o, q, k, v, o, lse, "g", 0, True, 0.25, False, doc, 5, 0)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
        o2, _ = torch.ops.distflash.dist_attn_fwd(q, k, v, "g", 1, False, 0.25)  # the unmasked call as before
        assert o2.shape == q.shape


def test_compiled_fallback_with_a_mask():
    """torch.compile(fullgraph=True) of a dist_attention call with a mask and no process group
    (the fallback: distflash::attn_fwd) gives the eager forward and backward."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(9)
    q, k, v = (randn((1, 48, 2, 16), torch.float32, gen=g) for _ in range(3))
    ids = _docs(1, 48, g, max_len=16)

    def f(q, k, v, ids):
        return dft.dist_attention(q, k, v, doc_ids=ids, window=(10, None)).square().sum()

    q1, k1, v1 = leaves(q, k, v)
    loss_c = torch.compile(f, fullgraph=True, backend="aot_eager")(q1, k1, v1, ids)
    grads_c = torch.autograd.grad(loss_c, (q1, k1, v1))
    q2, k2, v2 = leaves(q, k, v)
    loss_e = f(q2, k2, v2, ids)
    grads_e = torch.autograd.grad(loss_e, (q2, k2, v2))
    assert torch.allclose(loss_c, loss_e, rtol=1e-6, atol=0)
    for a, b in zip(grads_c, grads_e):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
