"""The drop-in paths on a GPU, in bfloat16: flash_attn_func / flash_attn_varlen_func against the
float64 reference (varlen without any host synchronisation, both paths), the Hugging Face
registration against eager attention and packed rows against their documents, and one
torch.compile training step of a tiny model. Skipped without CUDA.

On the GPU machine (library built with CUDA):
    PYTHONPATH=python python3 -m pytest -q python/tests/test_gpu_dropin.py
"""
import copy

import pytest
import torch

import distflash
from conftest import assert_close, leaves, needs_cuda, randn
import flash_ref

pytestmark = needs_cuda()
DEV = "cuda"
BF16 = torch.bfloat16


def _cu(lengths):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=DEV)


@pytest.mark.parametrize("case", [
    (2, 1, 300, 8, 2, 128, True, (-1, -1), 0.0),
    (1, 300, 129, 4, 4, 64, True, (-1, -1), 0.0),
    (1, 257, 511, 4, 1, 96, False, (64, 16), 0.0),
    (2, 200, 200, 4, 2, 72, True, (31, 0), 0.0),    # head_dim padded to 80
    (2, 300, 300, 8, 2, 128, True, (-1, -1), 3.0),  # softcap with GQA
    (1, 257, 511, 4, 1, 64, False, (64, 16), 20.0),
], ids=str)
def test_flash_attn_func_bf16(case):
    B, Sq, Sk, H, Hkv, D, causal, window, cap = case
    g = torch.Generator().manual_seed(Sq * 7 + Sk)
    shapes = ((B, Sq, H, D), (B, Sk, Hkv, D), (B, Sk, Hkv, D), (B, Sq, H, D))
    q, k, v, dout = (randn(s, BF16, DEV, gen=g) for s in shapes)
    q1, k1, v1 = leaves(q, k, v, device=DEV)
    o, lse, _ = distflash.flash_attn_func(q1, k1, v1, causal=causal, window_size=window, softcap=cap,
                                          return_attn_probs=True)
    grads = torch.autograd.grad(o, (q1, k1, v1), dout)
    q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device=DEV)
    o_r, lse_r = flash_ref.dense(q2, k2, v2, causal=causal, window=window, softcap=cap)
    grads_r = torch.autograd.grad(o_r, (q2, k2, v2), dout.double())
    assert_close(o, o_r, 1.6e-2, "o")
    assert_close(lse, lse_r, 1e-2, "lse")
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
        assert_close(a, b, 4e-2, name)


@pytest.mark.parametrize("kind", ["same", "aligned"])
def test_flash_attn_varlen_func_bf16_without_host_sync(kind):
    lq = [100, 1, 333, 0, 64, 250]
    lk = lq if kind == "same" else [140, 9, 333, 5, 1, 250]
    cu_q = _cu(lq)
    cu_k = cu_q if kind == "same" else _cu(lk)
    tq, tk = sum(lq), sum(lk)
    g = torch.Generator().manual_seed(3)
    q, k, v, dout = (randn(s, BF16, DEV, gen=g) for s in ((tq, 8, 128), (tk, 2, 128), (tk, 2, 128), (tq, 8, 128)))
    q1, k1, v1 = leaves(q, k, v, device=DEV)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any synchronising torch call raises
    try:
        o, lse, _ = distflash.flash_attn_varlen_func(q1, k1, v1, cu_q, cu_k, max(lq), max(lk), causal=True,
                                                     window_size=(96, -1), return_attn_probs=True)
        grads = torch.autograd.grad(o, (q1, k1, v1), dout)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    q2, k2, v2 = leaves(q.double().cpu(), k.double().cpu(), v.double().cpu())
    o_r, lse_r = flash_ref.varlen(q2, k2, v2, cu_q.cpu(), cu_k.cpu(), causal=True, window=(96, -1))
    grads_r = torch.autograd.grad(o_r, (q2, k2, v2), dout.double().cpu())
    assert_close(o, o_r, 1.6e-2, "o")
    assert_close(lse, lse_r, 1e-2, "lse")
    for name, a, b in zip(("dq", "dk", "dv"), grads, grads_r):
        assert_close(a, b, 4e-2, name)


def _llama():
    import transformers
    return transformers.LlamaConfig(vocab_size=128, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2)


def _pair():
    import transformers
    import distflash.hf  # noqa: F401
    torch.manual_seed(0)
    cfg = _llama()
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="distflash",
                                                         dtype=BF16).to(DEV)
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager",
                                                          dtype=BF16).to(DEV)
    eager.load_state_dict(ours.state_dict())
    return ours, eager


def test_hf_bf16_against_eager_and_packed_against_alone():
    pytest.importorskip("transformers")
    ours, eager = _pair()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (2, 160), generator=g).to(DEV)
    a, b = ours(input_ids=ids).logits.float(), eager(input_ids=ids).logits.float()
    assert (a - b).abs().max().item() < 5e-2 * max(1.0, b.abs().max().item())
    lengths = [70, 1, 150, 35]
    docs = [torch.randint(0, 128, (n,), generator=g).to(DEV) for n in lengths]
    row = torch.cat(docs).unsqueeze(0)
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0).to(DEV)
    packed = ours(input_ids=row, position_ids=pos).logits[0].float()
    alone = torch.cat([ours(input_ids=d.unsqueeze(0)).logits[0] for d in docs]).float()
    assert (packed - alone).abs().max().item() < 5e-2 * max(1.0, alone.abs().max().item())


def test_hf_ids_from_position_ids_without_host_sync():
    pytest.importorskip("transformers")
    import distflash.hf
    pos = torch.cat([torch.arange(5), torch.arange(9)]).unsqueeze(0).to(DEV)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ids = distflash.hf.docs_from_position_ids(pos, 2)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert ids.tolist() == [[0] * 5 + [1] * 9] * 2


def test_compiled_training_step_of_a_tiny_model():
    """One torch.compile (inductor) training step on a packed row: the compiled loss and
    gradients are those of the eager step."""
    pytest.importorskip("transformers")
    ours, _ = _pair()
    lengths = [100, 1, 155]
    g = torch.Generator().manual_seed(2)
    row = torch.randint(0, 128, (1, sum(lengths)), generator=g).to(DEV)
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0).to(DEV)
    kw = dict(input_ids=row, position_ids=pos, labels=row, use_cache=False)
    loss = ours(**kw).loss
    loss.backward()
    want = {n: p.grad.float().clone() for n, p in ours.named_parameters()}
    ours.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True)
    opt = torch.optim.SGD(ours.parameters(), lr=1e-3)
    loss_c = compiled(**kw).loss
    loss_c.backward()
    assert abs(loss_c.item() - loss.item()) < 2e-2 * max(1.0, abs(loss.item()))
    for n, p in ours.named_parameters():
        ref = want[n]
        assert (p.grad.float() - ref).abs().max().item() <= 5e-2 * max(1e-2, ref.abs().max().item()), n
    opt.step()
    assert torch.isfinite(compiled(**kw).loss).item()
