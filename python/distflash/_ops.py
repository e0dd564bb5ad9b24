"""Single-device attention as PyTorch custom ops (distflash::attn_fwd, distflash::attn_bwd).

The ops are opaque to torch.compile: a fake implementation gives output shapes, and
register_autograd gives the backward (itself an op, so a compiled backward graph calls it too).
Inside, each op fills a dfa_attn_desc and calls dfa_attn_fwd/bwd (CPU) or
dfa_attn_fwd_cuda/bwd_cuda on the caller's current stream (CUDA).

No `from __future__ import annotations` here: custom_op reads the annotations as types.
"""
import ctypes
import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _capi

DTYPES = {torch.float32: _capi.DFA_F32, torch.bfloat16: _capi.DFA_BF16, torch.float16: _capi.DFA_F16}
_INT_MAX = 2**31 - 1
_OFFSET_MAX = 2**62


# --- argument checks (plain Python on shapes/devices/dtypes, so torch.compile traces them) ---

def qkv_ok(q, k, v, contiguous=True):
    """Whether q, k, v pass every check of check_qkv: the usual case, decided in a few attribute
    reads and comparisons (about a microsecond; check_qkv's loops and messages cost several).
    False says nothing more: check_qkv then finds the argument and raises its message."""
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)):
        return False
    qs, ks = q.shape, k.shape
    dt, dev = q.dtype, q.device
    if not (len(qs) == 4 and len(ks) == 4 and v.shape == ks and k.dtype == dt and v.dtype == dt and dt in DTYPES
            and k.device == dev and v.device == dev and (q.is_cuda or q.is_cpu)  # dev.type: 0.7 us
            and qs[0] == ks[0] and qs[3] == ks[3] and qs[2] >= 1 and ks[2] >= 1 and qs[3] >= 1
            and qs[0] <= _INT_MAX and qs[1] <= _INT_MAX and ks[1] <= _INT_MAX and qs[2] <= _INT_MAX
            and ks[2] <= _INT_MAX):
        return False
    return not contiguous or (q.is_contiguous() and k.is_contiguous() and v.is_contiguous())


def check_qkv(q, k, v, fn, contiguous=True):
    """Raises TypeError/ValueError for inputs the C calls cannot take as they are. Head counts
    that do not divide and unsupported head_dim are left to the library (DistflashError).
    The public functions require contiguous inputs (contiguous=True: a clear error instead of a
    hidden copy); the ops themselves copy if needed, since a compiler may hand them any layout.
    The usual case costs one qkv_ok; the argument-by-argument checks run only when it fails."""
    if qkv_ok(q, k, v, contiguous):
        return
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{fn}: {name} must have 4 dimensions [batch, seqlen, heads, head_dim] "
                             f"(the flash-attn layout); it has shape {tuple(t.shape)}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{fn}: q, k, v must be on one device; they are on {q.device}, {k.device}, {v.device}")
    if q.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{fn}: tensors on {q.device} are not supported (CPU or CUDA tensors only)")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{fn}: q, k, v must have one dtype; they are {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in DTYPES:
        raise TypeError(f"{fn}: dtype {q.dtype} is not supported (float32, bfloat16 or float16 on CPU; "
                        "bfloat16 or float16 on CUDA)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{fn}: {name} must be contiguous (row-major [batch, seqlen, heads, head_dim]); "
                             f"it has shape {tuple(t.shape)} and strides {t.stride()}: call .contiguous()")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"{fn}: k and v must have one [batch, seqlen_k, kv_heads]; k is {tuple(k.shape)}, "
                         f"v is {tuple(v.shape)}")
    if v.shape[3] != k.shape[3]:
        if v.shape[3] < 1:
            raise ValueError(f"{fn}: v's head_dim (v.shape[3]) = {v.shape[3]}; it must be >= 1")
        _capi.needs_desc(3, f"a value head_dim different from q's and k's (v.shape[3] = {v.shape[3]}, "
                            f"k.shape[3] = {k.shape[3]})", fn)
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"{fn}: q and k must have one batch size; q has {q.shape[0]}, k has {k.shape[0]}")
    if q.shape[3] != k.shape[3]:
        raise ValueError(f"{fn}: q and k must have one head_dim; q has {q.shape[3]}, k has {k.shape[3]}")
    for name, n in (("num_heads (q.shape[2])", q.shape[2]), ("num_kv_heads (k.shape[2])", k.shape[2]),
                    ("head_dim", q.shape[3])):
        if n < 1:
            raise ValueError(f"{fn}: {name} = {n}; it must be >= 1")
    for name, n in (("batch", q.shape[0]), ("seqlen_q", q.shape[1]), ("seqlen_k", k.shape[1]),
                    ("num_heads", q.shape[2]), ("num_kv_heads", k.shape[2])):
        if n > _INT_MAX:
            raise ValueError(f"{fn}: {name} = {n} does not fit the C descriptor (int)")


def resolve_scale(softmax_scale, head_dim, fn):
    """The scale the library will use: softmax_scale, or 1/sqrt(head_dim) for None."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    s = float(softmax_scale)
    if not (math.isfinite(s) and s > 0.0):
        raise ValueError(f"{fn}: softmax_scale = {softmax_scale!r}; it must be finite and > 0 (or None)")
    return s


def check_offset(value, name, fn):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: {name} must be an int, not {type(value).__name__}")
    if not -_OFFSET_MAX < value < _OFFSET_MAX:
        raise ValueError(f"{fn}: {name} = {value} is out of range (|{name}| < 2^62)")


def check_softcap(softcap, fn):
    """softcap as the ops take it: 0.0 for off (None or 0), else a finite float > 0; a library
    without descriptor version 3 cannot apply it (NotImplementedError)."""
    if softcap is None:
        return 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"{fn}: softcap must be a float (0 or None: off), not {type(softcap).__name__}")
    c = float(softcap)
    if c == 0.0:
        return 0.0
    if not (math.isfinite(c) and c > 0.0):
        raise ValueError(f"{fn}: softcap = {softcap!r}; it must be finite and > 0 (or 0 / None: off)")
    _capi.needs_desc(3, "softcap", fn)
    return c


def check_sinks(sinks, q, fn):
    """sinks as the ops take them: None, or a float32 [num_heads] tensor on q's device (a float
    tensor of another dtype is converted; the conversion keeps its gradient). One learnable logit
    per query head joins every row's normaliser and carries no value."""
    if sinks is None:
        return None
    if not isinstance(sinks, Tensor):
        raise TypeError(f"{fn}: sinks must be a torch.Tensor [num_heads] or None, not {type(sinks).__name__}")
    if not sinks.dtype.is_floating_point:
        raise TypeError(f"{fn}: sinks must be a floating-point tensor, not {sinks.dtype}")
    if tuple(sinks.shape) != (q.shape[2],):
        raise ValueError(f"{fn}: sinks must have shape [num_heads] = {(q.shape[2],)}; it has {tuple(sinks.shape)}")
    if sinks.device != q.device:
        raise ValueError(f"{fn}: sinks must be on q's device {q.device}, not {sinks.device}")
    _capi.needs_desc(3, "sinks", fn)
    return sinks.to(torch.float32).contiguous()


# --- calls into the library ---------------------------------------------------------------

NO_WINDOW = -2  # window_left of the ops when there is no window (-1 is "unlimited")


def check_mask(q, k, doc_ids, window, fn):
    """The public mask arguments as the ops take them: (q_doc, k_doc, window_left, window_right).
    doc_ids: None, an integer tensor [batch, seqlen] for both q and k (seqlen_q == seqlen_k), or a
    pair (q_doc [batch, seqlen_q], k_doc [batch, seqlen_k]); non-decreasing along the sequence.
    window: None or (left, right), each an int >= 0 or None / -1 for unlimited."""
    q_doc = k_doc = None
    if doc_ids is not None:
        pair = doc_ids if isinstance(doc_ids, (tuple, list)) else (doc_ids, doc_ids)
        if len(pair) != 2:
            raise ValueError(f"{fn}: doc_ids must be a tensor or a pair (q_doc, k_doc)")
        out = []
        for name, t, n in (("q_doc", pair[0], q.shape[1]), ("k_doc", pair[1], k.shape[1])):
            if not isinstance(t, Tensor):
                raise TypeError(f"{fn}: doc_ids ({name}) must be a torch.Tensor, not {type(t).__name__}")
            if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise TypeError(f"{fn}: doc_ids ({name}) must hold integers, not {t.dtype}")
            if tuple(t.shape) != (q.shape[0], n):
                raise ValueError(f"{fn}: doc_ids ({name}) must have shape [batch, seqlen] = {(q.shape[0], n)}; "
                                 f"it has {tuple(t.shape)}")
            if t.device != q.device:
                raise ValueError(f"{fn}: doc_ids ({name}) must be on q's device {q.device}, not {t.device}")
            out.append(t.to(torch.int32).contiguous())
        q_doc, k_doc = out
    wl, wr = check_window(window, fn)
    return q_doc, k_doc, wl, wr


def check_window(window, fn):
    """The public window argument as the ops take it: (window_left, window_right), NO_WINDOW
    for both when window is None; each side an int >= 0, or -1 for unlimited (None given)."""
    if window is None:
        return NO_WINDOW, NO_WINDOW
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ValueError(f"{fn}: window must be None or (left, right)")
    sides = []
    for name, x in (("left", window[0]), ("right", window[1])):
        x = -1 if x is None else x
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"{fn}: window {name} must be an int or None, not {type(x).__name__}")
        if not -1 <= x <= _INT_MAX:
            raise ValueError(f"{fn}: window {name} = {x}; it must be >= 0 (or -1 / None: unlimited)")
        sides.append(x)
    return sides[0], sides[1]


def desc_for(q, k, causal, scale, q_start, k_start, deterministic=False, q_doc=None, k_doc=None,
             window_left=NO_WINDOW, window_right=NO_WINDOW, softcap=0.0, head_dim_v=None, sinks=None,
             dsinks=None):
    """A fresh dfa_attn_desc for these tensors and arguments. head_dim_v: v's last dim (None or
    q's: the descriptor's 0)."""
    B, Sq, H, D = q.shape
    return _capi.attn_desc(B, Sq, k.shape[1], H, k.shape[2], D, dtype=DTYPES[q.dtype], causal=causal,
                           q_start=q_start, k_start=k_start, softmax_scale=scale,
                           flags=_capi.DFA_FLAG_DETERMINISTIC if deterministic else 0,
                           q_doc=_p(q_doc), k_doc=_p(k_doc),
                           window=None if window_left == NO_WINDOW else (window_left, window_right),
                           softcap=softcap, head_dim_v=0 if head_dim_v in (None, D) else head_dim_v,
                           sinks=_p(sinks), dsinks=_p(dsinks))


# Descriptors by everything they hold (document ids by address): a training loop calls with the
# same few shapes over and over, and a ctypes Structure filled field by field costs microseconds.
# The C calls take the descriptor as const and keep no pointer to it, so one cached descriptor
# serves every call (and thread) with that key; the byref() is made once with it. Bounded: new
# document-id tensors every step would otherwise grow it without end.
_desc_cache = {}
_DESC_CACHE_MAX = 256


def desc_ref(q, k, causal, scale, q_start, k_start, deterministic=False, q_doc=None, k_doc=None,
             window_left=NO_WINDOW, window_right=NO_WINDOW, softcap=0.0, head_dim_v=None, sinks=None,
             dsinks=None):
    """desc_for's descriptor, by reference (what the C calls take), from the cache when it can
    (never with dsinks: a fresh output every backward)."""
    if dsinks is not None:
        return ctypes.byref(desc_for(q, k, causal, scale, q_start, k_start, deterministic, q_doc, k_doc,
                                     window_left, window_right, softcap, head_dim_v, sinks, dsinks))
    key = (q.shape, k.shape, q.dtype, causal, scale, q_start, k_start, deterministic,
           None if q_doc is None else q_doc.data_ptr(), None if k_doc is None else k_doc.data_ptr(),
           window_left, window_right, softcap, head_dim_v, None if sinks is None else sinks.data_ptr())
    r = _desc_cache.get(key)
    if r is None:
        r = ctypes.byref(desc_for(q, k, causal, scale, q_start, k_start, deterministic, q_doc, k_doc,
                                  window_left, window_right, softcap, head_dim_v, sinks))
        if len(_desc_cache) >= _DESC_CACHE_MAX:
            _desc_cache.clear()
        _desc_cache[key] = r
    return r


# torch.cuda.current_stream(dev).cuda_stream builds a Stream object per call (microseconds);
# torch's own raw query returns the cudaStream_t as an int. Older builds: the public way.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_get_device = getattr(torch._C, "_cuda_getDevice", None)


def cuda_stream(t):
    """The caller's current stream on t's device, as the cudaStream_t the C calls take."""
    if _raw_stream is not None:
        return _raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def _current_device():
    return _get_device() if _get_device is not None else torch.cuda.current_device()


def _cuda_call(name, t, *args):
    """The CUDA call `name`(*args, stream) with t's device current (the C calls work on the
    current device; switched only when it is not already: the usual case costs one query) on
    the caller's current stream of that device."""
    index = t.get_device()
    previous = _current_device()
    f = _capi.fn(name)
    if index == previous:
        s = f(*args, cuda_stream(t))
    else:
        torch.cuda.set_device(index)
        try:
            s = f(*args, cuda_stream(t))
        finally:
            torch.cuda.set_device(previous)
    if s:
        _capi.check(s, name)


def _p(t):
    return None if t is None else t.data_ptr()


# False: the plain calls, whose scratch the library takes from the CUDA memory pool (for the
# benches' A/B, bench/gpu/bwd_profile.py --library-scratch)
_CALLER_SCRATCH = True


def _scratch(kind, d, t):
    """The device scratch of one dfa_attn_{kind}_cuda_with_scratch call with descriptor d, from
    PyTorch's caching allocator on t's device (512-byte aligned; freed in the current stream's
    order, the stream the call runs on). The library's own scratch comes from the CUDA memory
    pool, which gives its memory back at every synchronisation unless told otherwise and then
    maps it again: host time in front of the kernels (distflash_cuda.h, "Scratch")."""
    n = _capi.fn(f"dfa_attn_{kind}_cuda_scratch_bytes")(d)
    return t.new_empty((n,), dtype=torch.uint8), n


def fwd_into(d, q, k, v, o, lse):
    """d: a dfa_attn_desc or a reference to one (desc_ref)."""
    if q.is_cuda and not _CALLER_SCRATCH:
        _cuda_call("dfa_attn_fwd_cuda", q, d, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), _p(lse))
    elif q.is_cuda:
        scratch, n = _scratch("fwd", d, q)
        _cuda_call("dfa_attn_fwd_cuda_with_scratch", q, d, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                   _p(lse), scratch.data_ptr(), n)
    else:
        s = _capi.fn("dfa_attn_fwd")(d, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), _p(lse))
        if s:
            _capi.check(s, "dfa_attn_fwd")


def bwd_into(d, q, k, v, o, lse, dout, dq, dk, dv):
    """d: a dfa_attn_desc or a reference to one (desc_ref)."""
    args = (d, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), dout.data_ptr(),
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
    if q.is_cuda and not _CALLER_SCRATCH:
        _cuda_call("dfa_attn_bwd_cuda", q, *args)
    elif q.is_cuda:
        scratch, n = _scratch("bwd", d, q)
        _cuda_call("dfa_attn_bwd_cuda_with_scratch", q, *args, scratch.data_ptr(), n)
    else:
        s = _capi.fn("dfa_attn_bwd")(*args)
        if s:
            _capi.check(s, "dfa_attn_bwd")


_CONTIGUOUS = torch.contiguous_format


def _empty(shape, like, dtype=None):
    return like.new_empty(shape, dtype=dtype or like.dtype)


def _empty_like(t):
    """A contiguous tensor of t's shape, dtype and device (empty_like: cheaper than torch.empty)."""
    return torch.empty_like(t, memory_format=_CONTIGUOUS)


def _lse_shape(q):
    return (q.shape[0], q.shape[2], q.shape[1])


def _o_shape(q, v):
    return (q.shape[0], q.shape[1], q.shape[2], v.shape[3])


def _degenerate(q, k):
    """Sizes the C descriptor refuses (a zero batch or sequence): handled here instead."""
    return q.shape[0] == 0 or q.shape[1] == 0 or k.shape[1] == 0


def as_dout(g, like):
    """An incoming gradient as the C calls want it: contiguous, of the output's dtype."""
    if g.dtype != like.dtype:
        g = g.to(like.dtype)
    return g.contiguous()


def _no_key_lse(lse, sinks):
    """lse of rows that see no key: -inf, or the head's sink (the normaliser holds only it)."""
    if sinks is None:
        return lse.fill_(-math.inf)
    return lse.copy_(sinks.view(1, -1, 1).expand(lse.shape))


# --- the ops --------------------------------------------------------------------------------

def fwd_impl(q, k, v, causal, softmax_scale, q_start, k_start, q_doc=None, k_doc=None, window_left=NO_WINDOW,
             window_right=NO_WINDOW, softcap=0.0, sinks=None):
    """o, lse of one forward, on checked inputs (the body of both paths below)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, Sq, H, D = q.shape  # each .shape makes a torch.Size: read it once
    Dv = v.shape[3]
    o = _empty_like(q) if Dv == D else q.new_empty((B, Sq, H, Dv))
    lse = q.new_empty((B, H, Sq), dtype=torch.float32)  # new_empty: half torch.empty(..., device=)'s cost
    if B == 0 or Sq == 0 or k.shape[1] == 0:  # _degenerate: no keys: o = 0 (fully masked rows)
        o.zero_()
        _no_key_lse(lse, sinks)
        return o, lse
    fwd_into(desc_ref(q, k, causal, softmax_scale, q_start, k_start, False, q_doc, k_doc, window_left, window_right,
                      softcap, Dv, sinks), q, k, v, o, lse)
    return o, lse


def _check_options(q, softcap, sinks, fn):
    """The ops' own check of softcap and sinks (a caller may use torch.ops.distflash directly)."""
    if softcap:
        check_softcap(softcap, fn)
    return None if sinks is None else check_sinks(sinks, q, fn)


# q_doc/k_doc: int32 document ids; window_left/right: NO_WINDOW for none; softcap 0.0: off;
# sinks: float32 [num_heads] or None; deterministic: the backward's choice (the forward is
# always deterministic), saved for it. Defaults keep the calls of the older schemas valid.
@torch.library.custom_op("distflash::attn_fwd", mutates_args=())
def attn_fwd(q: Tensor, k: Tensor, v: Tensor, causal: bool, softmax_scale: float, q_start: int,
             k_start: int, q_doc: Optional[Tensor] = None, k_doc: Optional[Tensor] = None,
             window_left: int = NO_WINDOW, window_right: int = NO_WINDOW, softcap: float = 0.0,
             sinks: Optional[Tensor] = None, deterministic: bool = False) -> Tuple[Tensor, Tensor]:
    check_qkv(q, k, v, "distflash::attn_fwd", contiguous=False)
    sinks = _check_options(q, softcap, sinks, "distflash::attn_fwd")
    return fwd_impl(q, k, v, causal, softmax_scale, q_start, k_start, q_doc, k_doc, window_left, window_right,
                    softcap, sinks)


@attn_fwd.register_fake
def _(q, k, v, causal, softmax_scale, q_start, k_start, q_doc=None, k_doc=None, window_left=NO_WINDOW,
      window_right=NO_WINDOW, softcap=0.0, sinks=None, deterministic=False):
    return q.new_empty(_o_shape(q, v)), q.new_empty(_lse_shape(q), dtype=torch.float32)


def bwd_impl(dout, q, k, v, o, lse, grad_lse, causal, softmax_scale, q_start, k_start, deterministic, q_doc=None,
             k_doc=None, window_left=NO_WINDOW, window_right=NO_WINDOW, softcap=0.0, sinks=None):
    """dq, dk, dv, dsinks (None without sinks) of one backward, on checked inputs (the body of
    both paths)."""
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    dout, o, lse = as_dout(dout, q), o.contiguous(), lse.contiguous()
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    dsinks = None if sinks is None else q.new_empty((q.shape[2],), dtype=torch.float32)
    mask = (q_doc, k_doc, window_left, window_right, softcap, v.shape[3], sinks)
    if _degenerate(q, k):
        dq.zero_(), dk.zero_(), dv.zero_()
        if dsinks is not None:
            dsinks.zero_()  # o = 0, so every D_i = dout_i . o_i is 0
    else:
        d = desc_ref(q, k, causal, softmax_scale, q_start, k_start, deterministic, *mask, dsinks)
        bwd_into(d, q, k, v, o, lse, dout, dq, dk, dv)
    if grad_lse is not None:
        def bwd(v_l, o_l, dout_l):
            tq, tk, tv = _empty_like(q), _empty_like(k), _empty_like(v)
            bwd_into(desc_ref(q, k, causal, softmax_scale, q_start, k_start, deterministic, *mask),
                     q, k, v_l, o_l, lse, dout_l, tq, tk, tv)
            return tq, tk
        dq, dk, dsinks = lse_grad(bwd, q, k, v, o, lse, grad_lse, dq, dk, dsinks, sinks)
    return dq, dk, dv, dsinks


def lse_grad(bwd, q, k, v, o, lse, grad_lse, dq, dk, dsinks, sinks):
    """dq, dk, dsinks with the gradient g of lse added, by one more backward call of the same
    attention (softcap, masks and sinks included): bwd(v, o, dout) -> (dq, dk) with q, k, lse
    those of the forward.
    d lse_i / d s_ij = P_ij, so lse's share of dS is g_i P_ij. The backward computes
    dS_ij = P_ij (dout_i . v_j - dout_i . o_i): with v_j = e_0 (1 in the first column), o = 0 and
    dout_i = g_i e_0 that is exactly g_i P_ij, and its dq and dk are lse's (its dv is dropped).
    A sink's own share: d lse_i / d sink_h = exp(sink_h - lse_i)."""
    g = grad_lse.to(torch.float32)
    if not _degenerate(q, k):
        dout_l = o.new_zeros(o.shape)
        dout_l[..., 0] = g.transpose(1, 2)
        v_l = v.new_zeros(v.shape)
        v_l[..., 0] = 1
        tq, tk = bwd(v_l, o.new_zeros(o.shape), dout_l)
        dq = (dq.float() + tq.float()).to(q.dtype)
        dk = (dk.float() + tk.float()).to(k.dtype)
    if sinks is not None:
        dsinks = dsinks + (g * torch.exp(sinks.view(1, -1, 1) - lse)).sum(dim=(0, 2))
    return dq, dk, dsinks


@torch.library.custom_op("distflash::attn_bwd", mutates_args=())
def attn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, grad_lse: Optional[Tensor],
             causal: bool, softmax_scale: float, q_start: int, k_start: int,
             deterministic: bool, q_doc: Optional[Tensor] = None, k_doc: Optional[Tensor] = None,
             window_left: int = NO_WINDOW, window_right: int = NO_WINDOW, softcap: float = 0.0,
             sinks: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv and dsinks (float32 [num_heads]; [0] without sinks)."""
    check_qkv(q, k, v, "distflash::attn_bwd", contiguous=False)
    sinks = _check_options(q, softcap, sinks, "distflash::attn_bwd")
    dq, dk, dv, dsinks = bwd_impl(dout, q, k, v, o, lse, grad_lse, causal, softmax_scale, q_start, k_start,
                                  deterministic, q_doc, k_doc, window_left, window_right, softcap, sinks)
    return dq, dk, dv, q.new_empty((0,), dtype=torch.float32) if dsinks is None else dsinks


@attn_bwd.register_fake
def _(dout, q, k, v, o, lse, grad_lse, causal, softmax_scale, q_start, k_start, deterministic, q_doc=None,
      k_doc=None, window_left=NO_WINDOW, window_right=NO_WINDOW, softcap=0.0, sinks=None):
    n = 0 if sinks is None else q.shape[2]
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), q.new_empty((n,), dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    (q, k, v, causal, softmax_scale, q_start, k_start, q_doc, k_doc, window_left, window_right, softcap, sinks,
     deterministic) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, q_doc, k_doc, sinks)
    ctx.args = (causal, softmax_scale, q_start, k_start)
    ctx.mask = (window_left, window_right, softcap)
    ctx.deterministic = deterministic
    # An unused lse (the usual case) then gives None instead of zeros: no extra calls.
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, q_doc, k_doc, sinks = ctx.saved_tensors
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    deterministic = ctx.deterministic or torch.are_deterministic_algorithms_enabled()
    dq, dk, dv, dsinks = attn_bwd(grad_o, q, k, v, o, lse, grad_lse, *ctx.args, deterministic, q_doc, k_doc,
                                  *ctx.mask, sinks)
    return (dq, dk, dv, None, None, None, None, None, None, None, None, None, None if sinks is None else dsinks,
            None)


attn_fwd.register_autograd(_backward, setup_context=_setup_context)


class AttnEager(torch.autograd.Function):
    """The same forward and backward as the ops above, for eager mode: the public function
    takes this path unless torch.compile is tracing or a TorchDispatchMode is active (then the
    ops, which the compiler and the mode see).
    The custom-op machinery (dispatch, schema checks, aliasing checks) costs tens to hundreds
    of microseconds per call on the host; a plain autograd.Function costs a few.
    apply(q, k, v, sinks, args): the non-tensor arguments and the document ids travel in one
    tuple, args = (causal, softmax_scale, q_start, k_start, q_doc, k_doc, window_left,
    window_right, softcap, deterministic): apply and the engine handle every argument (and
    backward's None for each) one by one."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, args):
        causal, softmax_scale, q_start, k_start, q_doc, k_doc, window_left, window_right, softcap, _ = args
        o, lse = fwd_impl(q, k, v, causal, softmax_scale, q_start, k_start, q_doc, k_doc, window_left, window_right,
                          softcap, sinks)
        if q_doc is None and sinks is None:
            ctx.save_for_backward(q, k, v, o, lse)
        else:  # check_mask gives both ids or neither
            ctx.save_for_backward(q, k, v, o, lse, q_doc, k_doc, sinks)
        ctx.args = args
        ctx.set_materialize_grads(False)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        saved = ctx.saved_tensors
        q, k, v, o, lse = saved[:5]
        q_doc, k_doc, sinks = saved[5:] if len(saved) == 8 else (None, None, None)
        causal, softmax_scale, q_start, k_start, _, _, window_left, window_right, softcap, deterministic = ctx.args
        if grad_o is None:
            grad_o = torch.zeros_like(o)
        dq, dk, dv, dsinks = bwd_impl(grad_o, q, k, v, o, lse, grad_lse, causal, softmax_scale, q_start, k_start,
                                      deterministic or torch.are_deterministic_algorithms_enabled(), q_doc, k_doc,
                                      window_left, window_right, softcap, sinks)
        return dq, dk, dv, dsinks, None


# How many TorchDispatchModes are active (a C call of a few tens of nanoseconds). Private in
# torch; a build without it gets 1: always the op, right but slower.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)


def attention_fwd(q, k, v, causal, softmax_scale, q_start, k_start, q_doc=None, k_doc=None,
                  window_left=NO_WINDOW, window_right=NO_WINDOW, softcap=0.0, sinks=None, deterministic=False):
    """o, lse for checked inputs, by the cheapest path that keeps autograd, torch.compile and
    dispatch modes right: the op when the compiler traces or a TorchDispatchMode is active
    (selective activation checkpointing, FakeTensorMode, ...), since a mode sees the op as one
    call it can save or replay, where AttnEager's body shows it only allocations around an
    opaque C call; else AttnEager, or plain fwd_impl when no gradient is wanted.
    deterministic: the backward's DFA_FLAG_DETERMINISTIC (also set by
    torch.use_deterministic_algorithms(True))."""
    mask = (q_doc, k_doc, window_left, window_right)
    if torch.compiler.is_compiling() or _dispatch_modes():
        return attn_fwd(q, k, v, causal, softmax_scale, q_start, k_start, *mask, softcap, sinks, deterministic)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (sinks is not None and sinks.requires_grad)):
        return AttnEager.apply(q, k, v, sinks, (causal, softmax_scale, q_start, k_start) + mask
                               + (softcap, deterministic))
    return fwd_impl(q, k, v, causal, softmax_scale, q_start, k_start, *mask, softcap, sinks)
