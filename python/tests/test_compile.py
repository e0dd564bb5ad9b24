"""torch.compile(fullgraph=True) traces distflash.torch.attention (a custom op with a fake
implementation and an autograd formula) without graph breaks, and the compiled forward and
backward give the eager results. torch.library.opcheck checks the op registrations."""
import pytest
import torch

import distflash.torch as dft
from conftest import leaves, randn


def _inputs(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (randn((2, 24, 4, 16), dtype, gen=g), randn((2, 24, 2, 16), dtype, gen=g),
            randn((2, 24, 2, 16), dtype, gen=g))


def block(q, k, v, w):
    # some torch ops around the attention, as in a model
    q = q * w
    o, lse = dft.attention(q, k, v, causal=True, q_start=3, return_lse=True)
    return (o.float().square().sum() + lse.float().sum() * 0.1) / o.numel()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fullgraph_forward_backward_match_eager(backend):
    torch._dynamo.reset()
    q, k, v = _inputs()
    w = torch.tensor(0.9)
    compiled = torch.compile(block, fullgraph=True, backend=backend)
    q1, k1, v1 = leaves(q, k, v)
    loss_c = compiled(q1, k1, v1, w)
    grads_c = torch.autograd.grad(loss_c, (q1, k1, v1))
    q2, k2, v2 = leaves(q, k, v)
    loss_e = block(q2, k2, v2, w)
    grads_e = torch.autograd.grad(loss_e, (q2, k2, v2))
    assert torch.allclose(loss_c, loss_e, rtol=1e-6, atol=0)
    for a, b in zip(grads_c, grads_e):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_no_graph_breaks():
    torch._dynamo.reset()
    q, k, v = _inputs(1)
    explanation = torch._dynamo.explain(lambda q, k, v: dft.attention(q, k, v, causal=True) * 2)(q, k, v)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


def test_compiled_module_training_step():
    """A small module with distflash attention compiled with aot_eager: two optimizer steps run
    and the loss is finite (the compiled backward calls distflash::attn_bwd)."""
    torch._dynamo.reset()

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 3 * 32)

        def forward(self, x):
            B, S, _ = x.shape
            q, k, v = self.qkv(x).view(B, S, 3, 4, 8).unbind(2)
            return dft.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True).sum()

    m = Attn()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    step = torch.compile(m, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 10, 32)
    for _ in range(2):
        loss = step(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        assert torch.isfinite(loss)


def test_opcheck_attn_fwd():
    q, k, v = leaves(*_inputs(2))
    torch.library.opcheck(torch.ops.distflash.attn_fwd.default, (q, k, v, True, 0.25, 0, 0))
    torch.library.opcheck(torch.ops.distflash.attn_fwd.default, (q.detach(), k.detach(), v.detach(), False, 0.25, 5, 1))


def test_opcheck_attn_bwd():
    q, k, v = _inputs(3)
    o, lse = torch.ops.distflash.attn_fwd(q, k, v, True, 0.25, 0, 0)
    dout = torch.randn_like(o)
    torch.library.opcheck(torch.ops.distflash.attn_bwd.default,
                          (dout, q, k, v, o, lse, None, True, 0.25, 0, 0, False),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
