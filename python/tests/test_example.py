"""The model of python/examples/train_cp.py on CPU at a tiny size: distflash's attention and the
SDPA path give the same loss and weight gradients, and distflash.torch.dist_attention without a
process group is single-device attention."""
import argparse
import importlib.util
import os

import torch

import distflash.torch as dft
from conftest import REPO


def _load_example():
    path = os.path.join(REPO, "python", "examples", "train_cp.py")
    spec = importlib.util.spec_from_file_location("train_cp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_distflash_and_sdpa_train_the_same_model():
    ex = _load_example()
    a = argparse.Namespace(layers=2, d_model=64, heads=4, kv_heads=2, ffn=96, ckpt="layer")
    S = 48
    tokens = torch.randint(0, 256, (2, S + 1), generator=torch.Generator().manual_seed(1))
    inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    cos, sin = ex.rope_tables(S, a.d_model // a.heads, "cpu")
    results = []
    for attend in (lambda q, k, v: dft.dist_attention(q, k, v), ex.torch_attention):
        torch.manual_seed(0)
        model = ex.Model(a, attend)
        loss = model(inp, lab, cos, sin)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (l1, g1), (l2, g2) = results
    assert torch.allclose(l1, l2, rtol=1e-5, atol=1e-6)
    for a1, a2 in zip(g1, g2):
        assert torch.allclose(a1, a2, rtol=1e-3, atol=1e-5)


def test_positions_are_a_permutation_of_the_sequence():
    world, rows = 4, 6
    allpos = torch.cat([dft.dist_position("balanced", r, world, rows) for r in range(world)])
    assert torch.equal(allpos.sort().values, torch.arange(world * rows))
    for r in range(world):
        t = dft.dist_position("ring", r, world, rows)
        assert [dft.dist_position("ring", r, world, rows, i) for i in range(rows)] == t.tolist()
        assert torch.equal(dft.dist_position("ring", r, world, rows, torch.tensor([[5, 0]])), t[torch.tensor([[5, 0]])])
        assert dft.dist_position("ring", r, world, rows, [1, 2]).tolist() == t[1:3].tolist()
