"""distflash as a Hugging Face transformers attention implementation.

    import distflash.hf                     # registers "distflash"
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="distflash")

Importing this module registers attention_forward under "distflash" in transformers'
AttentionInterface, and the flash-attention mask function under the same name in
AttentionMaskInterface, so the model builds no 4-D mask: it passes None, or its 2-D padding
mask when a row has padding.

attention_forward takes what transformers' attention modules pass: q [B, H, Sq, D],
k/v [B, Hkv, Sk, D(v)], scaling, is_causal (else module.is_causal), sliding_window, softcap,
s_aux (attention sinks, as gpt-oss has them), and in kwargs position_ids, cu_seq_lens_q/k,
max_length_q/k. It returns (o [B, Sq, H, Dv], None), as the flash-attention implementations
do. Documents (packed sequences) come from, in this order:
  - a 2-D padding mask: each row's padding is kept apart (its queries see nothing, o = 0);
  - cu_seq_lens_q / cu_seq_lens_k (as transformers' DataCollatorWithFlattening gives them):
    the rows are flattened and run through distflash.flash_attn_varlen_func;
  - position_ids, when Sq == Sk: a new document starts wherever the position does not go up by
    exactly one (transformers' rule for packed sequences), for any batch size;
and turn into the library's document ids on the device, without host synchronisation (a
padding mask is checked for holes on the host once per forward).
Causal and sliding-window masks are aligned bottom-right when Sq < Sk (a KV cache), as in
flash-attn. A causal sliding window of w sees w - 1 keys back plus the diagonal; a
bidirectional one |i - j| <= w, as transformers' eager masks have it.

Context parallelism: after set_context_parallel(group) each rank holds its contiguous chunk of
every sequence (rank r: global positions [r n, (r + 1) n)) and attention runs as
distflash.dist_attention over the group. Pass position_ids with the GLOBAL positions of the
rank's tokens (RoPE needs them anyway): documents are then told apart by global index minus
position, which every rank computes alike; or pass cu_seq_lens of the whole sequence.

Not supported (they raise): attention dropout > 0, 4-D attention masks, padding masks or sinks
with context parallelism. output_attentions gives no weights (None), as with flash attention.

transformers treats every implementation whose name contains "flash" as a flash-attention
package: on loading a model it imports that package's functions (modeling_flash_attention_utils.
_lazy_imports), and a model that lists the flash kernels it works with swaps the name for its
first one (PreTrainedModel._check_and_adjust_attn_implementation). This module wraps both for
the one name "distflash" (the lookup returns distflash's flash_attn_func / flash_attn_varlen_func
and transformers' own pad/unpad helpers; the check keeps the name) and leaves every other name
to transformers. Models that ask is_flash_attention_requested() then hand this implementation
the cu_seq_lens they give flash attention, which it takes.
"""
import math
import warnings

import torch

from . import _capi, _flash, _ops
from . import torch as dft

NAME = "distflash"

_cp = {"group": None, "schedule": "balanced"}


def set_context_parallel(group, schedule="balanced"):
    """Run every "distflash" attention over `group` (a ProcessGroup or a 1-D DeviceMesh), each
    rank holding its contiguous chunk of the sequences; None turns it off. schedule: as in
    distflash.dist_attention."""
    from . import _dist
    if group is not None:
        group = _dist.as_process_group(group, "distflash.hf.set_context_parallel")
        _dist.schedule_id(schedule, "distflash.hf.set_context_parallel")
    _cp["group"], _cp["schedule"] = group, schedule


def context_parallel_group():
    """The group set by set_context_parallel (None: off)."""
    return _cp["group"]


# --- documents ----------------------------------------------------------------------------

_ids_cache = {}


def _cached(key_tensor, tag, make):
    """make() once per (tensor, its version, tag): every layer of a forward passes the same
    position_ids or mask, and gets the same ids tensor (which also lets dist_attention reuse its
    plan, same_doc_ids=None)."""
    if torch.compiler.is_compiling():  # traced once into the graph: nothing to cache (nor data_ptr to read)
        return make()
    key = (tag, key_tensor.data_ptr(), key_tensor._version, tuple(key_tensor.shape), key_tensor.device)
    hit = _ids_cache.get("last")
    if hit is not None and hit[0] == key and hit[1] is key_tensor:
        return hit[2]
    value = make()
    _ids_cache["last"] = (key, key_tensor, value)
    return value


def docs_from_position_ids(position_ids, batch):
    """int32 [batch, S]: a new document wherever the position does not go up by one."""
    def make():
        p = position_ids.expand(batch, -1) if position_ids.shape[0] != batch else position_ids
        step = torch.diff(p, dim=-1, prepend=p[:, :1] - 1)
        return (step != 1).to(torch.int32).cumsum(-1, dtype=torch.int32).contiguous()
    return _cached(position_ids, ("pos", batch), make)


def docs_for_context_parallel(position_ids, batch, rank, local_rows):
    """int32 [batch, n] ids that agree across ranks: global index minus position (constant over
    a document whose positions count up by one; larger for every later document)."""
    def make():
        p = position_ids.expand(batch, -1) if position_ids.shape[0] != batch else position_ids
        idx = torch.arange(rank * local_rows, (rank + 1) * local_rows, device=p.device, dtype=torch.int64)
        return (idx - p).to(torch.int32).contiguous()
    return _cached(position_ids, ("cp", batch, rank, local_rows), make)


def docs_from_padding_mask(mask, Sq, fn):
    """(q_doc [B, Sq], k_doc [B, Sk]) int32 from a 2-D mask (True/1: a token): padding before the
    tokens gets ids -2 (queries) / -1 (keys), after them 2 / 1, the tokens 0, so padded queries
    see nothing and padded keys are seen by no one. The queries are the mask's last Sq columns."""
    valid = mask.to(torch.bool)
    before = valid.cumsum(-1) == 0
    k_doc = torch.where(valid, 0, torch.where(before, -1, 1)).to(torch.int32)
    q_doc = torch.where(valid, 0, torch.where(before, -2, 2)).to(torch.int32)[:, -Sq:]
    if not torch.compiler.is_compiling() and bool((k_doc.diff(dim=-1) < 0).any()):
        raise NotImplementedError(
            f"{fn}: the attention mask has padding between tokens of a row; distflash takes padding before or "
            "after each row's tokens (or pack the rows and pass position_ids / cu_seq_lens)")
    return q_doc.contiguous(), k_doc.contiguous()


# --- the attention function ---------------------------------------------------------------

def _window(sliding_window, causal, Sk):
    if sliding_window is None or Sk <= sliding_window:
        return None
    w = int(sliding_window)
    return (w - 1, None) if causal else (w, w)


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
                      softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention-function signature (see the module's docstring)."""
    fn = "distflash.hf.attention_forward"
    if kwargs.get("output_attentions", False):
        warnings.warn(f"{fn}: output_attentions=True gives no attention weights (None), as with flash attention",
                      stacklevel=2)
    if dropout:
        raise NotImplementedError(f"{fn}: attention dropout = {dropout}: distflash has none; set the config's "
                                  "attention_dropout to 0 (or call model.eval())")
    if attention_mask is not None and (not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2):
        raise ValueError(f"{fn}: attention_mask must be None or a 2-D padding mask (the flash-attention mask "
                         f"registered for 'distflash'); got {type(attention_mask).__name__} of shape "
                         f"{tuple(getattr(attention_mask, 'shape', ()))}")
    causal = bool(module.is_causal if is_causal is None else is_causal)
    # [B, H, S, D] -> [B, S, H, D]
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if q.dtype == torch.float32 and q.is_cuda and torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")  # the CUDA kernels take half precision
        q, k, v = q.to(dt), k.to(dt), v.to(dt)
    D, Dv = q.shape[-1], v.shape[-1]
    scale = 1.0 / math.sqrt(D) if scaling is None else float(scaling)
    if Dv != D and _capi.library_desc_version() < 3:
        # one head_dim for all three: zero columns change no dot product, and the output's extra
        # columns are cut off below
        pad = torch.nn.functional.pad
        if Dv < D:
            v = pad(v, [0, D - Dv])
        else:
            q, k = pad(q, [0, Dv - D]), pad(k, [0, Dv - D])
    cap = 0.0 if not softcap else float(softcap)
    sinks = None if s_aux is None else s_aux
    B, Sq = q.shape[0], q.shape[1]
    group = _cp["group"]
    position_ids = kwargs.get("position_ids")
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")

    if group is not None:
        o = _context_parallel(q, k, v, group, causal, scale, cap, sinks, attention_mask, position_ids, cu_q,
                              sliding_window, fn)
    elif attention_mask is not None:
        mask = attention_mask
        if k.shape[1] > mask.shape[1]:  # a static cache longer than the mask: only its first columns are real
            k, v = k[:, :mask.shape[1]], v[:, :mask.shape[1]]
        q_doc, k_doc = _cached(mask, ("mask", Sq), lambda: docs_from_padding_mask(mask, Sq, fn))
        o = dft.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal, softmax_scale=scale,
                          q_start=k.shape[1] - Sq, doc_ids=(q_doc, k_doc),
                          window=_window(sliding_window, causal, k.shape[1]), softcap=cap or None, sinks=sinks)
    elif cu_q is not None and cu_k is not None:
        w = _window(sliding_window, causal, k.shape[1])
        wl, wr = (-1, -1) if w is None else (w[0], -1 if w[1] is None else w[1])
        o = _varlen(q, k, v, cu_q, cu_k, kwargs, causal, scale, (wl, wr), cap, sinks)
    else:
        doc = None
        if position_ids is not None and position_ids.dim() == 2 and Sq == k.shape[1] and \
                position_ids.shape[-1] == Sq:
            doc = docs_from_position_ids(position_ids, B)
        o = dft.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal, softmax_scale=scale,
                          q_start=k.shape[1] - Sq, doc_ids=doc, window=_window(sliding_window, causal, k.shape[1]),
                          softcap=cap or None, sinks=sinks)
    if o.shape[-1] != Dv:
        o = o[..., :Dv]
    return o, None


def _varlen(q, k, v, cu_q, cu_k, kwargs, causal, scale, window, cap, sinks):
    B, Sq = q.shape[0], q.shape[1]
    qf, kf, vf = (t.reshape(-1, t.shape[2], t.shape[3]) for t in (q, k, v))
    if sinks is None:
        o = _flash.flash_attn_varlen_func(qf, kf, vf, cu_q, cu_k, kwargs.get("max_length_q"),
                                          kwargs.get("max_length_k"), softmax_scale=scale, causal=causal,
                                          window_size=window, softcap=cap)
    else:  # flash-attn's function has no sinks: the same document mask by ids, with them
        if not _flash._same_layout(cu_q, cu_k):
            raise NotImplementedError("distflash.hf.attention_forward: sinks with cu_seq_lens_q != cu_seq_lens_k")
        ids_q = _flash._doc_index(cu_q.to(torch.int32), qf.shape[0], trailing_apart=True).unsqueeze(0)
        ids_k = _flash._doc_index(cu_k.to(torch.int32), kf.shape[0]).unsqueeze(0)
        o = dft.attention(qf.unsqueeze(0).contiguous(), kf.unsqueeze(0).contiguous(), vf.unsqueeze(0).contiguous(),
                          causal=causal, softmax_scale=scale, doc_ids=(ids_q, ids_k),
                          window=None if window == (-1, -1) else window, softcap=cap or None, sinks=sinks)[0]
    return o.view(B, Sq, o.shape[-2], o.shape[-1])


def _context_parallel(q, k, v, group, causal, scale, cap, sinks, attention_mask, position_ids, cu, sliding_window,
                      fn):
    import torch.distributed as dist
    if attention_mask is not None:
        raise NotImplementedError(f"{fn}: a padding mask with context parallelism; pack the sequences instead "
                                  "(position_ids or cu_seq_lens)")
    if sinks is not None:
        raise NotImplementedError(f"{fn}: attention sinks (s_aux) with context parallelism")
    if q.shape[1] != k.shape[1]:
        raise NotImplementedError(f"{fn}: context parallelism needs as many keys as queries on each rank (no KV "
                                  f"cache); q has {q.shape[1]} rows, k {k.shape[1]}")
    B, n = q.shape[0], q.shape[1]
    doc = None
    if cu is None and position_ids is not None and position_ids.dim() == 2 and position_ids.shape[-1] == n:
        doc = docs_for_context_parallel(position_ids, B, dist.get_rank(group), n)
    return dft.dist_attention(q.contiguous(), k.contiguous(), v.contiguous(), group=group, schedule=_cp["schedule"],
                              causal=causal, softmax_scale=scale, doc_ids=doc, cu_seqlens=cu,
                              window=_window(sliding_window, causal, n * dist.get_world_size(group)),
                              same_doc_ids=None, softcap=cap or None)


# --- registration -------------------------------------------------------------------------

def _teach_flash_lookup():
    """transformers' flash-attention import lookup, taught the name "distflash"."""
    try:
        from transformers import modeling_flash_attention_utils as fa
    except ImportError:
        return
    original = getattr(fa, "_lazy_imports", None)
    if original is None or getattr(original, "_distflash", False):
        return

    def lazy_imports(implementation, *args, **kwargs):
        if implementation == NAME:
            return (_flash.flash_attn_func, _flash.flash_attn_varlen_func, None,
                    getattr(fa, "_pad_input", None), getattr(fa, "_unpad_input", None))
        return original(implementation, *args, **kwargs)

    lazy_imports._distflash = True
    fa._lazy_imports = lazy_imports


def _keep_the_name():
    """A model that lists the flash kernels it works with (_compatible_flash_implementations, e.g.
    gpt-oss) would replace any "flash" name by its first one; "distflash" is kept as asked."""
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return
    original = getattr(PreTrainedModel, "_check_and_adjust_attn_implementation", None)
    if original is None or getattr(original, "_distflash", False):
        return

    def check_and_adjust(self, attn_implementation, *args, **kwargs):
        if attn_implementation == NAME:
            return NAME
        return original(self, attn_implementation, *args, **kwargs)

    check_and_adjust._distflash = True
    PreTrainedModel._check_and_adjust_attn_implementation = check_and_adjust


def register():
    """Registers "distflash" with transformers (done on import; call again after something
    replaced the entries)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    _teach_flash_lookup()
    _keep_the_name()


register()

__all__ = ["NAME", "attention_forward", "register", "set_context_parallel", "context_parallel_group"]
