"""Checkpointing at the attention output (distflash.torch.checkpoint / checkpoint_context):
the same loss and gradients as without checkpointing, and the C library's attention forward and
backward run as often as without checkpointing (once per layer and step), where plain per-layer
checkpointing runs the forward twice. The calls are counted at _ops.fwd_into / _ops.bwd_into,
the two functions that call dfa_attn_fwd / dfa_attn_bwd. CPU, plus one 2-GPU test of
dist_attention (counted at dfa_dist_attn_fwd_cuda / _bwd_cuda), skipped without two GPUs.
"""
import argparse
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint

import distflash.torch as dft
from distflash import _capi, _ops
from conftest import assert_close, leaves, randn
from test_example import _load_example


@pytest.fixture
def calls(monkeypatch):
    """Counts of the C forward and backward calls of attention() from here on."""
    n = {"fwd": 0, "bwd": 0}
    fwd, bwd = _ops.fwd_into, _ops.bwd_into

    def fwd_into(*args):
        n["fwd"] += 1
        return fwd(*args)

    def bwd_into(*args):
        n["bwd"] += 1
        return bwd(*args)

    monkeypatch.setattr(_ops, "fwd_into", fwd_into)
    monkeypatch.setattr(_ops, "bwd_into", bwd_into)
    return n


def test_policy_saves_the_attention_forwards_only():
    for op in (torch.ops.distflash.attn_fwd.default, torch.ops.distflash.dist_attn_fwd.default):
        assert dft.checkpoint_policy(None, op) == CheckpointPolicy.MUST_SAVE
    for op in (torch.ops.distflash.attn_bwd.default, torch.ops.aten.mm.default, torch.ops.aten.add.Tensor):
        assert dft.checkpoint_policy(None, op) == CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("ckpt, fwd_per_layer", [("none", 1), ("layer", 2), ("attn-output", 1)])
def test_example_model(calls, ckpt, fwd_per_layer):
    """The example's model at a tiny size: per step, the attention forward runs once per layer
    with the policy (twice with plain layer checkpointing), the backward once; the loss and every
    weight gradient are the ones without checkpointing."""
    ex = _load_example()
    S, layers = 48, 3
    tokens = torch.randint(0, 256, (2, S + 1), generator=torch.Generator().manual_seed(1))
    inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    results = []
    for policy in ("none", ckpt):
        a = argparse.Namespace(layers=layers, d_model=64, heads=4, kv_heads=2, ffn=96, ckpt=policy)
        cos, sin = ex.rope_tables(S, a.d_model // a.heads, "cpu")
        torch.manual_seed(0)
        model = ex.Model(a, lambda q, k, v: dft.dist_attention(q, k, v))
        calls.update(fwd=0, bwd=0)
        loss = model(inp, lab, cos, sin)
        assert calls == {"fwd": layers, "bwd": 0}, f"ckpt {policy}: forward calls {calls}"
        loss.backward()
        want = {"fwd": fwd_per_layer * layers if policy == ckpt else layers, "bwd": layers}
        assert calls == want, f"ckpt {policy}: forward + backward calls {calls}, expected {want}"
        results.append((loss.detach(), [p.grad for p in model.parameters()]))
    (l0, g0), (l1, g1) = results
    assert torch.equal(l0, l1)
    for n, (a0, a1) in enumerate(zip(g0, g1)):
        assert torch.allclose(a0, a1, rtol=1e-5, atol=1e-7), f"ckpt {ckpt}: gradient {n}"


class _CountAttention(TorchDispatchMode):
    """Counts the attention ops that reach it. Entered outside a checkpoint, it sees the ops the
    selective-checkpointing modes inside let through: not those replayed from saved outputs."""

    def __init__(self):
        super().__init__()
        self.n = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if "scaled_dot_product" in name or name.startswith("distflash."):
            self.n[name] = self.n.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def test_example_sdpa_policy():
    """The example's policy for torch's attention (SDPA's aten ops) does the same for SDPA: its
    forward runs once per layer, and the loss and gradients are the ones without checkpointing."""
    ex = _load_example()
    S, layers = 32, 2
    tokens = torch.randint(0, 256, (1, S + 1), generator=torch.Generator().manual_seed(2))
    inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    results = []
    for policy in ("none", "layer", "attn-output"):
        a = argparse.Namespace(layers=layers, d_model=32, heads=4, kv_heads=2, ffn=48, ckpt=policy)
        cos, sin = ex.rope_tables(S, a.d_model // a.heads, "cpu")
        torch.manual_seed(0)
        model = ex.Model(a, ex.torch_attention, ex.sdpa_checkpoint_context)
        with _CountAttention() as count:
            loss = model(inp, lab, cos, sin)
            loss.backward()
        fwd = {k: v for k, v in count.n.items() if "backward" not in k}
        bwd = {k: v for k, v in count.n.items() if "backward" in k}
        assert len(fwd) == len(bwd) == 1, count.n
        want = 2 * layers if policy == "layer" else layers
        assert list(fwd.values()) == [want] and list(bwd.values()) == [layers], f"ckpt {policy}: {count.n}"
        results.append((loss.detach(), [p.grad for p in model.parameters()]))
    l0, g0 = results[0]
    for l1, g1 in results[1:]:
        assert torch.equal(l0, l1)
        for a0, a1 in zip(g0, g1):
            assert torch.allclose(a0, a1, rtol=1e-5, atol=1e-7)


def _block(x, w, doc):
    """Projections, attention with documents, a window and its lse used, element-wise work."""
    q, k, v = (x @ w).view(2, 24, 3, 4, 16).unbind(2)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, lse = dft.attention(q, k, v, causal=True, doc_ids=doc, window=(9, None), return_lse=True)
    return o.sin().square().mean() + 0.01 * lse.mean()


def _inputs():
    g = torch.Generator().manual_seed(3)
    x, w = leaves(randn((2, 24, 32), torch.float32, gen=g), randn((32, 192), torch.float32, gen=g, scale=0.2))
    doc = torch.tensor([0] * 10 + [1] * 14, dtype=torch.int32).expand(2, 24).contiguous()
    return x, w, doc


def _run(fn, calls):
    """Loss, gradients and C calls of one forward and backward of fn(x, w, doc)."""
    x, w, doc = _inputs()
    calls.update(fwd=0, bwd=0)
    loss = fn(x, w, doc)
    grads = torch.autograd.grad(loss, (x, w))
    return loss.detach(), grads, dict(calls)


@pytest.mark.parametrize("compiled", [False, True])
def test_function_with_masks_and_lse(calls, compiled):
    """A function using o and lse (lse's gradient costs one more backward call in the backward):
    with the policy, the C calls are exactly those without checkpointing, eager and
    under torch.compile; plain checkpointing adds one forward."""
    loss0, grads0, calls0 = _run(_block, calls)
    assert calls0 == {"fwd": 1, "bwd": 2}
    _, _, plain = _run(lambda x, w, doc: checkpoint(_block, x, w, doc, use_reentrant=False), calls)
    assert plain == {"fwd": 2, "bwd": 2}
    fn = lambda x, w, doc: dft.checkpoint(_block, x, w, doc)  # noqa: E731
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="aot_eager", fullgraph=True)
    loss1, grads1, calls1 = _run(fn, calls)
    assert calls1 == calls0
    assert torch.allclose(loss1, loss0, rtol=1e-6, atol=0)
    for a, b in zip(grads1, grads0):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_context_fn_form_and_argument_errors(calls):
    x, w, doc = _inputs()
    loss = checkpoint(_block, x, w, doc, use_reentrant=False, context_fn=dft.checkpoint_context)
    loss.backward()
    assert calls == {"fwd": 1, "bwd": 2}
    for key, value in (("use_reentrant", False), ("context_fn", dft.checkpoint_context)):
        with pytest.raises(TypeError, match=f"{key} is set by this function"):
            dft.checkpoint(_block, x, w, doc, **{key: value})


def test_attention_under_fake_tensor_mode():
    """An active dispatch mode gets the custom op (which it sees) rather than the eager path."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 8, 4, 16, requires_grad=True)
        kv = torch.empty(2, 8, 2, 16)
        o, lse = dft.attention(q, kv, kv, causal=True, return_lse=True)
    assert o.shape == (2, 8, 4, 16) and lse.shape == (2, 4, 8) and lse.dtype == torch.float32


# --- two GPUs: dist_attention --------------------------------------------------------------

def _dist_worker(rank, world, port):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    n = {}
    call = _capi.call

    def counting_call(name, *args):
        if name.startswith("dfa_dist_attn_"):
            n[name] = n.get(name, 0) + 1
        return call(name, *args)

    _capi.call = counting_call
    try:
        g = torch.Generator().manual_seed(5 + rank)
        x, w = leaves(randn((1, 256, 64), torch.bfloat16, dev, gen=g),
                      randn((64, 3 * 4 * 64), torch.bfloat16, dev, gen=g, scale=0.1), device=dev)

        def block(x, w):
            q, k, v = (x @ w).view(1, 256, 3, 4, 64).unbind(2)
            o = dft.dist_attention(q.contiguous(), k.contiguous(), v.contiguous())
            return (o.float().sin() * x.float().mean()).sum()

        results = []
        for fn in (block, lambda x, w: dft.checkpoint(block, x, w)):
            n.clear()
            grads = torch.autograd.grad(fn(x, w), (x, w))
            assert n == {"dfa_dist_attn_fwd_cuda": 1, "dfa_dist_attn_bwd_cuda": 1}, n
            results.append(grads)
        for name, a, b in zip(("dx", "dw"), *results):
            assert_close(a, b, 1.6e-2, f"rank {rank}: {name} with the policy vs without checkpointing")
        torch.cuda.synchronize()
        dft.destroy_comms()
    finally:
        _capi.call = call
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpus_dist_attention_forward_runs_once():
    import torch.multiprocessing as mp
    from test_dist import _free_port
    mp.spawn(_dist_worker, args=(2, _free_port()), nprocs=2, join=True)
