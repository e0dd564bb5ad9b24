"""The PyTorch API of distflash: attention on one device, dist_attention over a process group.

Layout (flash-attn's, and the C library's): q [batch, seqlen_q, heads, head_dim],
k/v [batch, seqlen_k, kv_heads, head_dim], lse [batch, heads, seqlen_q] float32 (natural log).
GQA/MQA by head counts: query head h reads kv head h // (heads // kv_heads).

CPU tensors take float32, bfloat16 and float16; CUDA tensors bfloat16 and float16 (on the
caller's current stream, no host synchronisation). Inputs must be contiguous. Both calls are
custom ops (distflash::attn_fwd, distflash::dist_attn_fwd) with a fake implementation and
an autograd formula, so torch.compile(fullgraph=True) traces them without graph breaks; in
eager mode attention() takes a plain autograd.Function with the same forward and backward,
which costs the host far less per call (but the op while a TorchDispatchMode is active, so
that the mode sees it: see checkpoint_context()).
Errors of the C library raise DistflashError (status name + dfa_last_error()); inputs it
cannot take raise TypeError/ValueError first.
"""
import torch as _torch
from torch.utils.checkpoint import CheckpointPolicy as _Policy
from torch.utils.checkpoint import checkpoint as _checkpoint
from torch.utils.checkpoint import create_selective_checkpoint_contexts as _selective_contexts

from . import _capi, _dist, _ops
from ._capi import DistflashError, DistflashInvalidArgument, DistflashLibraryError, DistflashUnsupported
from ._dist import destroy_comms

_OFFSET_MAX = _ops._OFFSET_MAX

__all__ = ["attention", "dist_attention", "dist_position", "checkpoint", "checkpoint_context", "checkpoint_policy",
           "destroy_comms", "DistflashError", "DistflashInvalidArgument", "DistflashUnsupported",
           "DistflashLibraryError"]


def attention(q, k, v, causal=False, softmax_scale=None, q_start=0, k_start=0, return_lse=False, doc_ids=None,
              window=None, softcap=None, sinks=None, deterministic=False):
    """Exact attention softmax(softmax_scale * q k^T + mask) v on one device.

    causal: key j is visible to query i iff k_start + j <= q_start + i (q_start, k_start: the
    global positions of row 0 of q and of k, so chunks of one sequence pair up; a query that
    sees no key gets o = 0 and lse = -inf). softmax_scale None means 1/sqrt(head_dim).
    doc_ids: packed documents, per-token document ids, non-decreasing along the sequence: an
    integer tensor [B, S] on q's device (q and k the same sequence) or a pair (q_doc [B, Sq],
    k_doc [B, Sk]); a query sees only keys with its own id. window: sliding window (left, right):
    key j is visible to query i only if pos_i - pos_j <= left and pos_j - pos_i <= right (None or
    -1: unlimited on that side; with causal=True, (w, None) is the usual w-token look-back).
    Masked blocks are skipped, so the cost follows the visible pairs.
    softcap: logit soft-capping (Gemma 2): s = softcap * tanh(s / softcap) on the scaled
    logits s = softmax_scale * q.k (None or 0: off). sinks: learnable attention sinks (gpt-oss's
    s_aux), a float tensor [H] on q's device: one logit per query head that joins every row's
    softmax normaliser and carries no value (lse includes it; a row that sees no key gets o = 0
    and lse = sink); differentiable. v may have a head_dim of its own (o then has it). These
    three need a library with descriptor version 3 (NotImplementedError otherwise).
    Returns o [B, Sq, H, Dv], or (o, lse) with lse [B, H, Sq] float32 if return_lse (lse is
    differentiable too: its gradient costs one more backward call).
    Backward: dfa_attn_bwd / dfa_attn_bwd_cuda (deterministic dq on CUDA when deterministic=True
    or torch.use_deterministic_algorithms(True) is set).
    """
    fn = "distflash.torch.attention"
    # The usual call (checked tensors, int offsets in range, no mask) in a few comparisons; the
    # checks with their messages run only for the rest.
    if not _ops.qkv_ok(q, k, v):
        _ops.check_qkv(q, k, v, fn)
    scale = _ops.resolve_scale(softmax_scale, q.shape[3], fn)
    if not (type(q_start) is int and type(k_start) is int and -_OFFSET_MAX < q_start < _OFFSET_MAX
            and -_OFFSET_MAX < k_start < _OFFSET_MAX):
        _ops.check_offset(q_start, "q_start", fn)
        _ops.check_offset(k_start, "k_start", fn)
    if doc_ids is None and window is None:
        q_doc = k_doc = None
        wl = wr = _ops.NO_WINDOW
    else:
        q_doc, k_doc, wl, wr = _ops.check_mask(q, k, doc_ids, window, fn)
    cap = 0.0 if softcap is None else _ops.check_softcap(softcap, fn)
    if sinks is not None:
        sinks = _ops.check_sinks(sinks, q, fn)
    o, lse = _ops.attention_fwd(q, k, v, bool(causal), scale, q_start, k_start, q_doc, k_doc, wl, wr, cap, sinks,
                                bool(deterministic))
    return (o, lse) if return_lse else o


def dist_attention(q, k, v, group=None, schedule="balanced", causal=True, softmax_scale=None, doc_ids=None,
                   window=None, same_doc_ids=False, return_lse=False, deterministic=False, cu_seqlens=None,
                   softcap=None):
    """DistFlashAttn over the ranks of a torch.distributed process group (NCCL, CUDA tensors).

    group: a ProcessGroup, a 1-D DeviceMesh (its group), or None for the world.
    Every rank of `group` calls it with its own local rows:
    q [B, n, H, D], k/v [B, n, Hkv, D], the same n on every rank. Local row i of rank r sits at
    global position dist_position(schedule, r, nranks, n, i) of the sequence (feed the model
    its tokens and RoPE angles in that order). Returns this rank's o [B, n, H, D]; backward
    gives this rank's dq, dk, dv. schedule: "balanced" (DistFlashAttn's load balancing, the
    default) or "ring". One NCCL communicator per group and device is made on the first call
    (collective) and cached; destroy_comms() frees them.

    Masks (as in attention(), by GLOBAL positions), on every rank alike:
    doc_ids: packed documents: THIS RANK's document ids, one per local row, an integer tensor
    [B, n] (or [n]: the same ids for every batch row) on q's device (int32; int64 and other
    integer types are converted, so the values must fit int32). With full_ids [B, S] the ids of
    the whole sequence (S = nranks * n), this rank passes
        doc_ids = full_ids[:, dist_position(schedule, rank, nranks, n)]
    i.e. row i carries the id of the token at global position dist_position(..., i). full_ids
    must be non-decreasing along each batch row of the global sequence (each document one
    contiguous run of global positions; a document may span ranks, the same id on two ranks
    being one document). On two or more ranks the library checks each rank's own rows (ids
    that decrease there fail the call on every rank: DistflashInvalidArgument naming
    d->q_doc); the order across ranks is the caller's promise. The ids are saved for the
    backward; each masked call (forward and backward) gathers every rank's ids and copies
    them to the host to plan itself, so it synchronises the caller's stream once and cannot
    be captured into a CUDA graph.
    A step that packs its batch once passes the same ids to every layer. When a call's ids are
    those of the last call with doc_ids on this group, it reuses what that call gathered and
    planned (DFA_FLAG_SAME_DOCS): no exchange, no synchronisation of the stream (the host still
    agrees with the other ranks and plans). same_doc_ids=False (the default) never reuses.
    True promises it whatever the tensor (the values are not checked: ids that changed are
    not seen). None decides by itself: the same int32 tensor (the same memory, shape and
    strides) as that call's, not written in place since, by torch's version counter; so pass
    one int32 [B, n] tensor to every layer (an [n] or int64 one is converted anew in each
    call, and then read each time). Writes that torch does not count (another library's
    kernel, a compiled graph reusing an intermediate's memory) are not seen by None either.
    A backward decides as its forward did. If the library kept nothing to reuse (first call,
    another shape or mask in between) it reads the ids.
    window: (left, right), key j visible to query i only if pos_i - pos_j <= left and
    pos_j - pos_i <= right over global positions (None or -1: unlimited on that side); with
    causal=True, (w, None) is the usual w-token look-back.
    Only the chunk pairs with a visible key are computed and moved, balanced by visible pairs.
    cu_seqlens: the documents as flash-attn's cumulative lengths instead of doc_ids: an int32
    [ndocs + 1] tensor on q's device over the WHOLE sequence (0 .. nranks * n, the same on
    every rank and for every batch row); each rank takes its rows' document indices from it on
    the device (searchsorted, no synchronisation). Ids built from one cu_seqlens tensor are
    reused while it is unchanged, so same_doc_ids=None recognises them in every layer.
    softcap: as in attention() (needs descriptor version 3; a library whose distributed path
    lacks it refuses with DistflashUnsupported).
    return_lse: (o, lse) with lse [B, H, n] float32, differentiable (its gradient costs one more
    distributed backward). deterministic: this call's backward is deterministic (also set by
    torch.use_deterministic_algorithms(True)).

    Without an initialised process group, or with a group of one rank, this is
    attention(q, k, v, causal=causal, softmax_scale=softmax_scale, doc_ids=doc_ids,
    window=window, ...) (doc_ids [n] expanded to [B, n]), which also runs on CPU tensors.
    """
    fn = "distflash.torch.dist_attention"
    _ops.check_qkv(q, k, v, fn)
    sched = _dist.schedule_id(schedule, fn)
    scale = _ops.resolve_scale(softmax_scale, q.shape[3], fn)
    cap = 0.0 if softcap is None else _ops.check_softcap(softcap, fn)
    group = _dist.as_process_group(group, fn)
    if same_doc_ids is not None and not isinstance(same_doc_ids, bool):
        raise TypeError(f"{fn}: same_doc_ids must be None, True or False, not {type(same_doc_ids).__name__}")
    if cu_seqlens is not None and doc_ids is not None:
        raise ValueError(f"{fn}: pass doc_ids or cu_seqlens, not both")
    if same_doc_ids and doc_ids is None and cu_seqlens is None:
        raise ValueError(f"{fn}: same_doc_ids=True promises that doc_ids did not change, but doc_ids is None")
    # the mask's checks come before the group is used, so a bad one raises on each rank before
    # anything collective
    doc, wl, wr = None, _ops.NO_WINDOW, _ops.NO_WINDOW
    if doc_ids is not None or window is not None:
        doc, wl, wr = _dist.check_mask(q, doc_ids, window, fn)
    import torch.distributed as dist
    alone = (group is None and not (dist.is_available() and dist.is_initialized())) or dist.get_world_size(group) == 1
    if cu_seqlens is not None:
        rank, nranks = (0, 1) if alone else (dist.get_rank(group), dist.get_world_size(group))
        ids = _dist.docs_from_cu_seqlens(cu_seqlens, sched, rank, nranks, q.shape[1], q, fn)
        doc, wl, wr = _dist.check_mask(q, ids, window, fn)
    if alone:
        return attention(q, k, v, causal=causal, softmax_scale=scale, doc_ids=doc, window=window, softcap=cap,
                         return_lse=return_lse, deterministic=deterministic)
    _dist.check_local(q, k, v, fn)
    o, lse = _dist.dist_attn_fwd(q, k, v, _dist.group_name(group), sched, bool(causal), scale, doc, wl, wr,
                                 0 if same_doc_ids is None else 1 if same_doc_ids else -1, bool(deterministic), cap)
    return (o, lse) if return_lse else o


def dist_position(schedule, rank, nranks, local_rows, i=None):
    """Global sequence position of local row i on `rank` under a schedule's layout
    (dfa_dist_position). i: an int (gives an int), a sequence or integer tensor of row indices
    (gives an int64 tensor on i's device), or None for all local rows (an int64 CPU tensor
    [local_rows]): index the full sequence's tokens and RoPE tables with it."""
    fn = "distflash.torch.dist_position"
    sched = _dist.schedule_id(schedule, fn)
    for name, x in (("rank", rank), ("nranks", nranks), ("local_rows", local_rows)):
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"{fn}: {name} must be an int, not {type(x).__name__}")
    if not (nranks >= 1 and 0 <= rank < nranks and local_rows >= 1) or max(nranks, local_rows) > 2**31 - 1:
        raise ValueError(f"{fn}: rank = {rank}, nranks = {nranks}, local_rows = {local_rows}: "
                         "need 0 <= rank < nranks and local_rows >= 1")
    if isinstance(i, int) and not isinstance(i, bool):
        if not 0 <= i < local_rows:
            raise ValueError(f"{fn}: i = {i} is out of range [0, {local_rows})")
        p = _capi.fn("dfa_dist_position")(sched, rank, nranks, local_rows, i)
        if p < 0:
            raise ValueError(f"{fn}: dfa_dist_position refused (schedule {schedule!r}, rank {rank}, "
                             f"nranks {nranks}, local_rows {local_rows}, i {i})")
        return p
    table = _dist.position_table(sched, rank, nranks, local_rows)
    if i is None:
        return table.clone()
    idx = i if isinstance(i, _torch.Tensor) else _torch.as_tensor(i)
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == _torch.bool:
        raise TypeError(f"{fn}: i must hold integers, not {idx.dtype}")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= local_rows):
        raise ValueError(f"{fn}: row indices must lie in [0, {local_rows}); got [{int(idx.min())}, {int(idx.max())}]")
    return table.to(idx.device)[idx.long()]


# --- rematerialization-aware checkpointing (DistFlashAttn's checkpoint at the attention output) ---

_ATTENTION_FORWARDS = (_torch.ops.distflash.attn_fwd.default, _torch.ops.distflash.dist_attn_fwd.default)


def checkpoint_policy(ctx, op, *args, **kwargs):
    """The selective-checkpointing policy of checkpoint_context(): CheckpointPolicy.MUST_SAVE
    for distflash's attention forwards (distflash::attn_fwd, distflash::dist_attn_fwd: their
    outputs o and lse are kept), PREFER_RECOMPUTE for every other op. Public so that a policy
    of your own can defer to it (`return distflash.torch.checkpoint_policy(ctx, op)`)."""
    return _Policy.MUST_SAVE if op in _ATTENTION_FORWARDS else _Policy.PREFER_RECOMPUTE


def checkpoint_context():
    """The context_fn of torch.utils.checkpoint.checkpoint that checkpoints at the attention
    output, DistFlashAttn's rematerialization-aware checkpointing:

        x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False,
                                              context_fn=distflash.torch.checkpoint_context)

    Plain per-layer checkpointing keeps each layer's input and re-runs the whole layer in the
    backward, attention forward included, before the layer's backward. With this policy
    (selective activation checkpointing, checkpoint_policy()) the checkpointed region also
    keeps the outputs of every attention()/dist_attention() call in it (o and lse: one more
    [B, S, H, D] tensor and a float32 [B, H, S] one per call), and the recompute before the
    backward replays them from there: it re-runs only the other ops (norms, projections, RoPE,
    the MLP), never the attention forward, nor its communication in dist_attention. The
    attention backward then runs once, as without checkpointing.

    Needs use_reentrant=False (the default of checkpoint() below). Works under torch.compile
    (checkpoint with a context_fn; the region must not hold in-place ops, torch's own rule for
    selective checkpointing there): the policy tags the ops and the partitioner saves the
    attention outputs. Returns the (forward, recompute) context pair of
    torch.utils.checkpoint.create_selective_checkpoint_contexts."""
    return _selective_contexts(checkpoint_policy)


def checkpoint(fn, *args, **kwargs):
    """fn(*args, **kwargs) under torch.utils.checkpoint.checkpoint with checkpoint_context():
    activation checkpointing that keeps the attention outputs, so the backward's recompute of
    fn skips every distflash attention forward in it. Typically per layer:

        for layer in self.layers:
            x = distflash.torch.checkpoint(layer, x, cos, sin)

    Keyword arguments are torch.utils.checkpoint.checkpoint's: its own (preserve_rng_state,
    determinism_check, debug) and the rest for fn; use_reentrant and context_fn are set here."""
    for key in ("use_reentrant", "context_fn"):
        if key in kwargs:
            raise TypeError(f"distflash.torch.checkpoint: {key} is set by this function "
                            "(use_reentrant=False, context_fn=checkpoint_context); do not pass it")
    return _checkpoint(fn, *args, use_reentrant=False, context_fn=checkpoint_context, **kwargs)
