"""float64 references for flash-attn's two functions, written out plainly from flash-attn's
documented rules: bottom-right alignment (query i at position i + Sk - Sq), window
[i + Sk - Sq - left, i + Sk - Sq + right] (-1: unlimited; causal: right = 0), softcap on the
scaled logits, sinks in the normaliser; a row that sees no key gives o = 0 and lse = -inf (or
the sink). Differentiable (no NaN reaches a gradient)."""
import math

import torch


def visible(Sq, Sk, causal, window):
    i = torch.arange(Sq).view(Sq, 1) + (Sk - Sq)
    j = torch.arange(Sk).view(1, Sk)
    vis = torch.ones(Sq, Sk, dtype=torch.bool)
    left, right = window
    if causal:
        vis &= j <= i
    if left >= 0:
        vis &= j >= i - left
    if right >= 0:
        vis &= j <= i + right
    return vis


def dense(q, k, v, causal=False, window=(-1, -1), scale=None, softcap=0.0, sinks=None, vis=None):
    """q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv] (float64) -> o [B, Sq, H, Dv],
    lse [B, H, Sq]. vis: a [Sq, Sk] or [B, Sq, Sk] mask replacing causal/window."""
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    kk, vv = k.repeat_interleave(H // Hkv, dim=2), v.repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if vis is None:
        vis = visible(Sq, Sk, causal, window)
    vis = (vis if vis.dim() == 3 else vis.unsqueeze(0)).unsqueeze(1).expand(B, H, Sq, Sk).to(q.device)
    ninf = torch.tensor(-math.inf, dtype=s.dtype, device=s.device)
    s = torch.where(vis, s, ninf)
    if sinks is not None:
        sink = sinks.to(s.dtype).view(1, H, 1, 1).expand(B, H, Sq, 1)
        full = torch.cat([s, sink], dim=-1)
        lse = torch.logsumexp(full, dim=-1)
        p = torch.exp(s - lse.unsqueeze(-1))
        return torch.einsum("bhqk,bkhd->bqhd", p, vv), lse
    any_vis = vis.any(-1)
    s_safe = torch.where(any_vis.unsqueeze(-1), s, torch.zeros_like(s))
    lse_raw = torch.logsumexp(s_safe, dim=-1)
    p = torch.where(vis, torch.exp(s_safe - torch.where(any_vis, lse_raw, 0.0).unsqueeze(-1)), 0.0)
    o = torch.einsum("bhqk,bkhd->bqhd", p, vv)
    return o, torch.where(any_vis, lse_raw, ninf)


def varlen(q, k, v, cu_q, cu_k, **kw):
    """Each document on its own (dense on [1, L, H, D] slices): o [total_q, H, Dv] (rows past
    cu_q[-1] stay 0), lse [H, total_q] (-inf there)."""
    cq, ck = cu_q.tolist(), cu_k.tolist()
    outs, lses = [], []
    for d in range(len(cq) - 1):
        qd, kd, vd = q[cq[d]:cq[d + 1]], k[ck[d]:ck[d + 1]], v[ck[d]:ck[d + 1]]
        o, lse = dense(qd.unsqueeze(0), kd.unsqueeze(0), vd.unsqueeze(0), **kw)
        outs.append(o[0])
        lses.append(lse[0])
    tail = q.shape[0] - cq[-1]
    outs.append(q.new_zeros((tail, q.shape[1], v.shape[2])))
    lses.append(torch.full((q.shape[1], tail), -math.inf, dtype=q.dtype))
    return torch.cat(outs, 0), torch.cat(lses, 1)
