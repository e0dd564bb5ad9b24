"""flash-attn's two entry points, flash_attn_func and flash_attn_varlen_func, over distflash.

Same signatures, layouts and masks as flash-attn 2 (a drop-in: change the import):
  - q [B, Sq, H, D], k/v [B, Sk, Hkv, D]; varlen: q [total_q, H, D], k/v [total_k, Hkv, D]
    with cu_seqlens_q/k int32 [ndocs + 1] on q's device;
  - causal and window_size aligned to the bottom right of each (document's) attention matrix
    when the query and key lengths differ: query i sees key j iff
    i + Sk - Sq - left <= j <= i + Sk - Sq + right (causal: right = 0; -1: unlimited);
  - softmax_scale None: 1/sqrt(D) of the caller's D; a D that is not a multiple of 8 is padded
    with zeros for the library and cut off again, as flash-attn does;
  - return_attn_probs=True returns (out, softmax_lse, None): lse [B, H, Sq], varlen [H, total_q];
  - deterministic selects the deterministic backward for this call;
  - dropout_p > 0, alibi_slopes and block_table raise NotImplementedError naming the argument.
One difference, by design: a query row that sees no key has lse = -inf here (the log of an
empty sum, which merges exactly) where flash-attn's kernels write +inf; its output is 0 in both.

varlen is the library's document mask: each token gets the index of its document, computed
on the device from cu_seqlens (searchsorted), so no padding and no host synchronisation. When
causal or a window needs per-document alignment and cu_seqlens_q and cu_seqlens_k may differ
(two different tensors on CUDA, or different values), the rows are first placed into a common
position space in which every document's queries and keys end at the same position (see
_aligned_varlen): still device-only, at the price of buffers of total_q + total_k rows.
"""
import math

import torch
from torch import Tensor

from . import _ops

_PAD = 8  # the library's head_dim granule


def _no_dropout(dropout_p, alibi_slopes, fn):
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"{fn}: dropout_p must be a float, not {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise NotImplementedError(f"{fn}: dropout_p = {dropout_p}: distflash has no attention dropout; "
                                  "pass dropout_p=0.0")
    if alibi_slopes is not None:
        raise NotImplementedError(f"{fn}: alibi_slopes: distflash has no ALiBi bias; pass alibi_slopes=None")


def _window(window_size, fn):
    """flash-attn's window_size as (left, right) for the library, or None for (-1, -1)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"{fn}: window_size must be a pair (left, right), -1 for unlimited; got {window_size!r}")
    sides = []
    for name, x in (("left", window_size[0]), ("right", window_size[1])):
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"{fn}: window_size {name} must be an int (-1: unlimited), not {type(x).__name__}")
        sides.append(-1 if x < 0 else x)
    if sides == [-1, -1]:
        return None
    return _ops.check_window(tuple(sides), fn)


def _softcap(softcap, fn):
    # flash-attn: anything > 0 turns it on
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"{fn}: softcap must be a float (0.0: off), not {type(softcap).__name__}")
    return _ops.check_softcap(softcap, fn) if softcap > 0 else 0.0


def _pad_dim(t):
    d = t.shape[-1]
    return t if d % _PAD == 0 else torch.nn.functional.pad(t, [0, _PAD - d % _PAD])


def _prepare(q, k, v, dims, fn):
    """Type and rank checks, then the tensors as the library takes them: contiguous, head dims
    padded to a multiple of 8 (zeros change no dot product)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != dims:
            what = "[batch, seqlen, heads, head_dim]" if dims == 4 else "[total_tokens, heads, head_dim]"
            raise ValueError(f"{fn}: {name} must have {dims} dimensions {what}; it has shape {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{fn}: q and k must have one head_dim; q has {q.shape[-1]}, k has {k.shape[-1]}")
    return _pad_dim(q).contiguous(), _pad_dim(k).contiguous(), _pad_dim(v).contiguous()


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn.flash_attn_func on distflash (see the module's docstring).
    q [B, Sq, H, D], k/v [B, Sk, Hkv, D] (Dv of v may differ where the library has descriptor
    version 3). Returns out [B, Sq, H, Dv], or (out, softmax_lse [B, H, Sq], None)."""
    fn = "distflash.flash_attn_func"
    _no_dropout(dropout_p, alibi_slopes, fn)
    window = _window(window_size, fn)
    cap = _softcap(softcap, fn)
    D, Dv = q.shape[-1] if isinstance(q, Tensor) else 0, v.shape[-1] if isinstance(v, Tensor) else 0
    qp, kp, vp = _prepare(q, k, v, 4, fn)
    _ops.check_qkv(qp, kp, vp, fn)
    scale = _ops.resolve_scale(softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D), D, fn)
    Sq, Sk = qp.shape[1], kp.shape[1]
    wl, wr = window if window is not None else (_ops.NO_WINDOW, _ops.NO_WINDOW)
    # bottom-right alignment: query i sits at position Sk - Sq + i, key j at j
    o, lse = _ops.attention_fwd(qp, kp, vp, bool(causal), scale, Sk - Sq, 0, None, None, wl, wr, cap, None,
                                bool(deterministic))
    if o.shape[-1] != Dv:
        o = o[..., :Dv]
    return (o, lse, None) if return_attn_probs else o


def _check_cu(cu, name, total, q, fn):
    if not isinstance(cu, Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor (int32 [batch + 1]), not {type(cu).__name__}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: {name} must hold int32 (or int64), not {cu.dtype}")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"{fn}: {name} must have shape [batch + 1]; it has {tuple(cu.shape)}")
    if cu.device != q.device:
        raise ValueError(f"{fn}: {name} must be on q's device {q.device}, not {cu.device}")
    cu = cu.to(torch.int32).contiguous()
    # host values cost nothing to check here (on CUDA reading them would synchronise)
    if not cu.is_cuda and not torch.compiler.is_compiling():
        c = cu.tolist()
        if c[0] != 0 or any(b < a for a, b in zip(c, c[1:])) or c[-1] > total:
            raise ValueError(f"{fn}: {name} = {c[:8]}{'...' if len(c) > 8 else ''} must start at 0, never "
                             f"decrease and end at most at the token count {total}")
    return cu


def _doc_index(cu, total, trailing_apart=False):
    """int32 [total]: the index of each token's document (1 .. ndocs), by searchsorted on the
    device; tokens past cu[-1] get ndocs + 1, or ndocs + 2 with trailing_apart (so that trailing
    queries match no trailing key and see nothing)."""
    pos = torch.arange(total, device=cu.device, dtype=torch.int32)
    ids = torch.searchsorted(cu, pos, right=True, out_int32=True)
    if trailing_apart:
        ids = ids + (ids >= cu.shape[0]).to(torch.int32)
    return ids


def _same_layout(cu_q, cu_k):
    """Whether the two cu_seqlens are known equal without reading device memory: one tensor, or
    (host tensors) equal values."""
    if cu_q is cu_k:
        return True
    if torch.compiler.is_compiling():  # no memory to compare while tracing: the general path
        return False
    if cu_q.data_ptr() == cu_k.data_ptr() and cu_q.shape == cu_k.shape and cu_q.stride() == cu_k.stride():
        return True
    return not cu_q.is_cuda and torch.equal(cu_q, cu_k)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """flash_attn.flash_attn_varlen_func on distflash (see the module's docstring).
    q [total_q, H, D], k/v [total_k, Hkv, D], cu_seqlens_q/k int32 [batch + 1] on q's device
    (cumulative lengths from 0). max_seqlen_q/k size flash-attn's launch grid; distflash does
    not need them (they are accepted and not read, so a tensor costs no synchronisation).
    Rows past cu_seqlens[-1] get out = 0. Returns out [total_q, H, Dv], or (out,
    softmax_lse [H, total_q], None)."""
    fn = "distflash.flash_attn_varlen_func"
    _no_dropout(dropout_p, alibi_slopes, fn)
    if block_table is not None:
        raise NotImplementedError(f"{fn}: block_table: distflash has no paged KV cache; pass block_table=None")
    window = _window(window_size, fn)
    cap = _softcap(softcap, fn)
    D, Dv = q.shape[-1] if isinstance(q, Tensor) else 0, v.shape[-1] if isinstance(v, Tensor) else 0
    qp, kp, vp = _prepare(q, k, v, 3, fn)
    _ops.check_qkv(qp.unsqueeze(0), kp.unsqueeze(0), vp.unsqueeze(0), fn)
    total_q, total_k = qp.shape[0], kp.shape[0]
    cu_q = _check_cu(cu_seqlens_q, "cu_seqlens_q", total_q, qp, fn)
    cu_k = _check_cu(cu_seqlens_k, "cu_seqlens_k", total_k, qp, fn)
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"{fn}: cu_seqlens_q and cu_seqlens_k must describe one batch; they have "
                         f"{cu_q.shape[0]} and {cu_k.shape[0]} entries")
    scale = _ops.resolve_scale(softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D), D, fn)
    wl, wr = window if window is not None else (_ops.NO_WINDOW, _ops.NO_WINDOW)
    opts = (cap, None, bool(deterministic))
    if not (causal or window is not None) or _same_layout(cu_seqlens_q, cu_seqlens_k):
        # one call over the packed rows: documents by index, positions aligned (the same layout,
        # or a mask that reads no positions)
        q_doc = _doc_index(cu_q, total_q, trailing_apart=True).unsqueeze(0)
        k_doc = _doc_index(cu_k, total_k).unsqueeze(0)
        o, lse = _ops.attention_fwd(qp.unsqueeze(0), kp.unsqueeze(0), vp.unsqueeze(0), bool(causal), scale, 0, 0,
                                    q_doc, k_doc, wl, wr, *opts)
        o, lse = o[0], lse[0]
    else:
        o, lse = _aligned_varlen(qp, kp, vp, cu_q, cu_k, bool(causal), scale, wl, wr, opts)
    if o.shape[-1] != Dv:
        o = o[..., :Dv]
    return (o, lse, None) if return_attn_probs else o


def _aligned_varlen(q, k, v, cu_q, cu_k, causal, scale, wl, wr, opts):
    """Varlen attention whose documents have their own query/key offsets, in one library call
    without any host synchronisation.
    Document d takes the span [off_d, off_d + M_d) of a common position space, M_d = max(Lq_d,
    Lk_d); its queries fill the span's last Lq_d positions and its keys the last Lk_d, so both
    end together: bottom-right alignment by plain positions (q_start = k_start = 0). The spans
    take at most total_q + total_k positions (the buffers' fixed size). Ids keep the rest apart:
    in span d a real row has id 4d + 2, a query pad 4d and a key pad 4d + 1 (non-decreasing in
    both buffers; pads match nothing, so pad queries see no key and pad keys get no gradient);
    the tail past the spans takes 4 ndocs (queries) and 4 ndocs + 1 (keys)."""
    n = cu_q.shape[0] - 1
    N = q.shape[0] + k.shape[0]
    dev = q.device
    cq, ck = cu_q.to(torch.int64), cu_k.to(torch.int64)
    Lq, Lk = cq.diff(), ck.diff()
    M = torch.maximum(Lq, Lk)
    end = M.cumsum(0)  # span d ends at end[d]
    used = end[-1] if n > 0 else torch.zeros((), dtype=torch.int64, device=dev)

    def rows(cu, total):
        """Buffer position of each of the total rows: its document's span end minus its
        distance to the document's end; rows past cu[-1] go to the tail after the spans."""
        t = torch.arange(total, device=dev, dtype=torch.int64)
        d = torch.searchsorted(cu, t, right=True) - 1  # document of row t (n: past the end)
        inside = d < n
        dd = d.clamp(max=max(n - 1, 0))
        if n > 0:
            pos = end[dd] - (cu[dd + 1] - t)
        else:
            pos = t
        return torch.where(inside, pos, used + (t - cu[-1]))

    def ids(L, pad_id):
        p = torch.arange(N, device=dev, dtype=torch.int64)
        d = torch.searchsorted(end, p, right=True)  # span of position p (n: the tail)
        dd = d.clamp(max=max(n - 1, 0))
        real = (d < n) & (p >= end[dd] - L[dd]) if n > 0 else torch.zeros_like(p, dtype=torch.bool)
        return torch.where(real, 4 * d + 2, 4 * d + pad_id).to(torch.int32).unsqueeze(0)

    qi, ki = rows(cq, q.shape[0]), rows(ck, k.shape[0])
    qb = q.new_zeros((N,) + tuple(q.shape[1:])).index_copy(0, qi, q)
    kb = k.new_zeros((N,) + tuple(k.shape[1:])).index_copy(0, ki, k)
    vb = v.new_zeros((N,) + tuple(v.shape[1:])).index_copy(0, ki, v)
    o, lse = _ops.attention_fwd(qb.unsqueeze(0), kb.unsqueeze(0), vb.unsqueeze(0), causal, scale, 0, 0,
                                ids(Lq, 0), ids(Lk, 1), wl, wr, *opts)
    return o[0].index_select(0, qi), lse[0].index_select(1, qi)
