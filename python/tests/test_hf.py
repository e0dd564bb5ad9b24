"""attn_implementation="distflash" (import distflash.hf) against transformers' eager attention on
tiny models built from configs (nothing downloaded), float32 on the CPU: logits and every
parameter's gradient; packed rows (position_ids, cu_seq_lens) against their documents run one
by one; padding masks and generation with a KV cache; context parallelism on one rank; errors."""
import copy
import os
import socket
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
import distflash.hf  # noqa: E402  (registers "distflash")
from distflash import _capi  # noqa: E402

V3 = _capi.library_desc_version() >= 3
VOCAB = 96


def _llama(**kw):
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, **kw)


def _qwen2(**kw):
    return transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True,
                                    sliding_window=5, max_window_layers=1, **kw)


def _mistral(**kw):
    return transformers.MistralConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=1, sliding_window=6, **kw)


def _gemma2(**kw):
    return transformers.Gemma2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=24, sliding_window=5,
                                     query_pre_attn_scalar=20, attn_logit_softcapping=20.0 if V3 else None,
                                     final_logit_softcapping=None, **kw)


CONFIGS = {"llama": _llama, "qwen2": _qwen2, "mistral": _mistral, "gemma2": _gemma2}


def _pair(make, seed=0):
    """The same weights under "distflash" and "eager"."""
    torch.manual_seed(seed)
    cfg = make()
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="distflash",
                                                         dtype=torch.float32)
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager",
                                                          dtype=torch.float32)
    eager.load_state_dict(ours.state_dict())
    assert ours.config._attn_implementation == "distflash" and eager.config._attn_implementation == "eager"
    return ours, eager


def _loss_and_grads(model, **inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same(a, b, what, rtol=2e-4, atol=2e-5):
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_gradients_equal_eager(name):
    ours, eager = _pair(CONFIGS[name])
    ids = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(1))
    la, ga = _loss_and_grads(ours, input_ids=ids, labels=ids)
    lb, gb = _loss_and_grads(eager, input_ids=ids, labels=ids)
    _assert_same(la, lb, f"{name} logits")
    assert ga.keys() == gb.keys()
    for n in ga:
        _assert_same(ga[n], gb[n], f"{name} grad {n}")


def _packed(lengths, seed=2):
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randint(0, VOCAB, (n,), generator=g) for n in lengths]
    ids = torch.cat(docs).unsqueeze(0)
    pos = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    return docs, ids, pos, cu


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_a_packed_row_equals_its_documents_one_by_one(name):
    ours, eager = _pair(CONFIGS[name])
    lengths = [7, 1, 12, 5]
    docs, ids, pos, cu = _packed(lengths)
    packed = ours(input_ids=ids, position_ids=pos).logits[0]
    alone = torch.cat([ours(input_ids=d.unsqueeze(0)).logits[0] for d in docs])
    _assert_same(packed, alone, f"{name} packed by position_ids vs alone")
    # transformers' eager mask reads the same packing from position_ids (without a cache)
    _assert_same(packed, eager(input_ids=ids, position_ids=pos, use_cache=False).logits[0],
                 f"{name} packed vs eager packed")
    # cu_seq_lens (DataCollatorWithFlattening's keys) give the same
    by_cu = ours(input_ids=ids, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lengths),
                 max_length_k=max(lengths)).logits[0]
    _assert_same(by_cu, alone, f"{name} packed by cu_seq_lens vs alone")
    # gradients: the packed row's loss against the sum of the documents' losses
    la, ga = _loss_and_grads(ours, input_ids=ids, position_ids=pos, labels=ids, use_cache=False)
    lb, gb = _loss_and_grads(eager, input_ids=ids, position_ids=pos, labels=ids, use_cache=False)
    for n in ga:
        _assert_same(ga[n], gb[n], f"{name} packed grad {n}")


def test_packed_rows_with_a_batch_of_two():
    ours, eager = _pair(_llama)
    _, ids_a, pos_a, _ = _packed([4, 9, 3], seed=3)
    _, ids_b, pos_b, _ = _packed([16], seed=4)
    ids, pos = torch.cat([ids_a, ids_b]), torch.cat([pos_a, pos_b])
    _assert_same(ours(input_ids=ids, position_ids=pos).logits,
                 eager(input_ids=ids, position_ids=pos, use_cache=False).logits, "batch of two packed rows")


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_masks_and_generation(side):
    ours, eager = _pair(_qwen2)
    ids = torch.randint(0, VOCAB, (3, 11), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(3, 11, dtype=torch.long)
    if side == "left":
        mask[0, :4], mask[2, :1] = 0, 0
    else:
        mask[0, 7:], mask[2, 10:] = 0, 0
    a = ours(input_ids=ids, attention_mask=mask).logits
    b = eager(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    _assert_same(a[real], b[real], f"{side} padding: the real tokens")
    if side == "left":
        ga = ours.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        gb = eager.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        assert torch.equal(ga, gb), "greedy generation with a KV cache differs from eager"


def test_a_mask_with_a_hole_is_refused():
    ours, _ = _pair(_llama)
    ids = torch.randint(0, VOCAB, (1, 8))
    mask = torch.tensor([[1, 1, 0, 1, 1, 1, 1, 1]])
    with pytest.raises(NotImplementedError, match="padding between tokens"):
        ours(input_ids=ids, attention_mask=mask)


def test_unsupported_arguments_raise():
    ours, _ = _pair(lambda: _llama(attention_dropout=0.1))
    ids = torch.randint(0, VOCAB, (1, 8))
    ours.train()
    with pytest.raises(NotImplementedError, match="attention dropout"):
        ours(input_ids=ids)
    ours.eval()
    ours(input_ids=ids)  # no dropout in eval mode
    layer = ours.model.layers[0].self_attn
    q = torch.randn(1, 4, 8, 16)
    with pytest.raises(ValueError, match="2-D padding mask"):
        distflash.hf.attention_forward(layer, q, q[:, :2], q[:, :2], torch.zeros(1, 1, 8, 8))
    with pytest.warns(UserWarning, match="output_attentions"):
        o, w = distflash.hf.attention_forward(layer, q, q[:, :2], q[:, :2], None, output_attentions=True)
    assert w is None and o.shape == (1, 8, 4, 16)


def test_value_head_dim_of_its_own():
    """MLA-style v with fewer columns than q/k (padded when the library lacks head_dim_v)."""
    layer = _pair(_llama)[0].model.layers[0].self_attn
    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(2, 4, 9, 16, generator=g), torch.randn(2, 2, 9, 16, generator=g)
    v = torch.randn(2, 2, 9, 8, generator=g)
    o, _ = distflash.hf.attention_forward(layer, q, k, v, None, scaling=0.2)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=True, scale=0.2).transpose(1, 2)
    _assert_same(o, ref, "head_dim_v")


def test_gpt_oss_sinks_equal_eager():
    """gpt-oss: sinks (s_aux), sliding layers, and a model that lists its flash kernels
    (_compatible_flash_implementations) yet keeps the name "distflash"."""
    def make():
        return transformers.GptOssConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         num_local_experts=4, num_experts_per_tok=2, sliding_window=5)
    ours, eager = _pair(make)
    if not V3:
        with pytest.raises(NotImplementedError, match="sinks needs a libdistflash with descriptor version >= 3"):
            ours(input_ids=torch.randint(0, VOCAB, (1, 5)))
        return
    for m in (ours, eager):
        for layer in m.model.layers:
            torch.nn.init.normal_(layer.self_attn.sinks)
    eager.load_state_dict(ours.state_dict())
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(8))
    la, ga = _loss_and_grads(ours, input_ids=ids, labels=ids)
    lb, gb = _loss_and_grads(eager, input_ids=ids, labels=ids)
    _assert_same(la, lb, "gpt-oss logits")
    for n in ga:
        _assert_same(ga[n], gb[n], f"gpt-oss grad {n}")


def test_flash_lookup_knows_distflash_and_leaves_the_rest():
    from transformers import modeling_flash_attention_utils as fa
    fns = fa._lazy_imports("distflash")
    assert fns[0] is distflash.flash_attn_func and fns[1] is distflash.flash_attn_varlen_func
    with pytest.raises(Exception):
        fa._lazy_imports("no-such-implementation")
    distflash.hf.register()  # again: idempotent
    assert fa._lazy_imports("distflash")[1] is distflash.flash_attn_varlen_func


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_context_parallel_on_one_rank():
    """The plumbing of set_context_parallel on a one-rank gloo group (dist_attention's single-device
    path): global positions give the documents, as on every rank of a real group."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        ours, _ = _pair(_mistral)
        docs, ids, pos, cu = _packed([6, 10, 3], seed=9)
        want = ours(input_ids=ids, position_ids=pos).logits
        distflash.hf.set_context_parallel(init_device_mesh("cpu", (1,)))
        assert distflash.hf.context_parallel_group() is not None
        try:
            got = ours(input_ids=ids, position_ids=pos).logits
            by_cu = ours(input_ids=ids, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=10,
                         max_length_k=10).logits
            with pytest.raises(NotImplementedError, match="padding mask with context parallelism"):
                ours(input_ids=ids, attention_mask=torch.tensor([[0] + [1] * 18]))
        finally:
            distflash.hf.set_context_parallel(None)
        _assert_same(got, want, "context parallel (one rank) by position_ids")
        _assert_same(by_cu, want, "context parallel (one rank) by cu_seq_lens")
    finally:
        dist.destroy_process_group()


def test_import_needs_no_torch_until_used():
    import subprocess
    import sys
    code = "import sys, distflash; assert 'torch' not in sys.modules; distflash.flash_attn_func; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert out.stdout.strip() == "ok", out.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert distflash.attention is distflash.torch.attention


def test_compiled_training_step_of_a_packed_row():
    """torch.compile(fullgraph=True) of the whole model with packed position_ids: no graph break
    (no host read of the ids), the eager loss and gradients."""
    torch._dynamo.reset()
    ours, _ = _pair(_llama)
    _, ids, pos, _ = _packed([10, 1, 13], seed=11)
    la, ga = _loss_and_grads(ours, input_ids=ids, position_ids=pos, labels=ids, use_cache=False)
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    lb, gb = _loss_and_grads(compiled, input_ids=ids, position_ids=pos, labels=ids, use_cache=False)
    _assert_same(lb, la, "compiled logits")
    for n in ga:
        _assert_same(gb[n.replace("_orig_mod.", "")] if n in gb else gb["_orig_mod." + n], ga[n], f"compiled grad {n}")
