"""Shared helpers of the distflash Python tests: the float64 references and the comparisons.

Run from the repository root:
    pytest python/tests                      # the installed package (pip install ./python)
    PYTHONPATH=python pytest python/tests    # the source tree, against build/src/libdistflash.so
                                             # (or DISTFLASH_LIB=/path/to/libdistflash.so)
CUDA tests run only where torch.cuda.is_available(); the 2-GPU test needs two GPUs and a
library built with NCCL.
"""
import math
import os

import pytest
import torch
import torch.nn.functional as F

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Output rounding of each storage type dominates the error against float64; accumulation is
# float32 everywhere. Tolerances are relative to the largest reference magnitude.
TOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def randn(shape, dtype, device="cpu", scale=1.0, gen=None):
    """Fresh random inputs in float64, rounded to dtype (the reference then sees the same values)."""
    return (torch.randn(shape, dtype=torch.float64, generator=gen) * scale).to(dtype).to(device)


def ref_attention(q, k, v, causal=False, scale=None, q_start=0, k_start=0):
    """float64 attention by hand, with the library's rules: causal visibility
    k_start + j <= q_start + i, GQA by head counts, a row that sees no key gives o = 0 and
    lse = -inf (and no gradient). Returns (o [B,Sq,H,D], lse [B,H,Sq]); differentiable."""
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kk = k.repeat_interleave(H // Hkv, dim=2)
    vv = v.repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    i = torch.arange(Sq, dtype=torch.int64).view(Sq, 1)
    j = torch.arange(Sk, dtype=torch.int64).view(1, Sk)
    visible = (k_start + j <= q_start + i) if causal else torch.ones(Sq, Sk, dtype=torch.bool)
    visible = visible.to(q.device).expand(B, H, Sq, Sk)
    any_vis = visible.any(-1)
    # Fully masked rows are replaced by zeros before logsumexp so that no NaN reaches a gradient.
    s_safe = torch.where(visible, s, torch.tensor(-math.inf, dtype=s.dtype, device=s.device))
    s_safe = torch.where(any_vis.unsqueeze(-1), s_safe, torch.zeros_like(s))
    lse_raw = torch.logsumexp(s_safe, dim=-1)
    p = torch.where(visible, torch.exp(s_safe - torch.where(any_vis, lse_raw, 0.0).unsqueeze(-1)), 0.0)
    o = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    lse = torch.where(any_vis, lse_raw, torch.tensor(-math.inf, dtype=s.dtype, device=s.device))
    return o, lse


def sdpa_reference(q, k, v, causal=False, scale=None):
    """PyTorch's math SDPA on float64 copies (layout [B, S, H, D] in and out; offsets 0).
    causal is top-left aligned there (key j visible iff j <= i), the library's rule with
    q_start = k_start = 0."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    H, Hkv = q.shape[2], k.shape[2]
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, scale=scale, enable_gqa=H != Hkv)
    return o.transpose(1, 2)


def assert_close(got, ref, tol, what):
    """max |got - ref| <= tol * max(1, max |ref|) elementwise over finite entries, same -inf
    pattern, and no NaN."""
    got = got.detach().to(torch.float64).cpu()
    ref = ref.detach().to(torch.float64).cpu()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert not torch.isnan(got).any(), f"{what}: NaN in the result"
    ninf_g, ninf_r = torch.isneginf(got), torch.isneginf(ref)
    assert torch.equal(ninf_g, ninf_r), f"{what}: -inf pattern differs ({int(ninf_g.sum())} vs {int(ninf_r.sum())})"
    fin = ~ninf_r
    assert torch.isfinite(got[fin]).all(), f"{what}: non-finite values"
    if fin.sum() == 0:
        return
    err = (got[fin] - ref[fin]).abs().max().item()
    mag = max(1.0, ref[fin].abs().max().item())
    assert err <= tol * mag, f"{what}: max error {err:.3g} > {tol:.3g} * {mag:.3g}"


def leaves(*ts, device="cpu"):
    return [t.detach().to(device).requires_grad_(True) for t in ts]


def needs_cuda():
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is false)")
