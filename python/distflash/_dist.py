"""Sequence-parallel attention over NCCL: communicators and the custom ops
distflash::dist_attn_fwd / distflash::dist_attn_bwd.

One NCCL communicator per (process group, CUDA device), made on first use and cached for the
life of the process: rank 0 of the group calls ncclGetUniqueId, the 128-byte id travels over
the torch group (broadcast_object_list), every rank calls ncclCommInitRank on its current
device, then dfa_comm_create_nccl wraps it. The ncclComm_t stays ours and lives until
dfa_comm_destroy (destroy_comms, also run at exit).

libnccl: the one already in the process (libdistflash links libnccl.so.2, and torch's CUDA build
loads its own copy first; dlopen by soname returns whichever is loaded, so the comm we create and
the one libdistflash uses come from one library), else torch's nvidia/nccl/lib, else the system's.
"""
import atexit
import ctypes
import os
import threading
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _capi
from ._ops import DTYPES, NO_WINDOW, as_dout, check_qkv, check_window, cuda_stream, lse_grad

SCHEDULES = {"balanced": _capi.DFA_SCHEDULE_BALANCED, "ring": _capi.DFA_SCHEDULE_RING}


def schedule_id(schedule, fn):
    if isinstance(schedule, str) and schedule.lower() in SCHEDULES:
        return SCHEDULES[schedule.lower()]
    if isinstance(schedule, int) and not isinstance(schedule, bool) and schedule in SCHEDULES.values():
        return schedule
    raise ValueError(f"{fn}: schedule = {schedule!r}; it must be one of {sorted(SCHEDULES)}")


# --- NCCL -----------------------------------------------------------------------------------

class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES


_nccl_lib = None


def nccl():
    """libnccl.so.2 with the prototypes we use."""
    global _nccl_lib
    if _nccl_lib is not None:
        return _nccl_lib
    _capi.lib()  # load libdistflash first: its libnccl.so.2 is then the one in the process
    names = ["libnccl.so.2"]
    try:
        import nvidia.nccl  # the nvidia-nccl-* wheel torch depends on
        names.append(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))
    except ImportError:
        pass
    names.append(os.path.join(os.path.dirname(torch.__file__), "lib", "libnccl.so.2"))
    names.append("libnccl.so")
    errors = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(f"{name} ({e})")
    else:
        raise _capi.DistflashLibraryError("libnccl not found: " + "; ".join(errors))
    lib.ncclGetUniqueId.restype = ctypes.c_int
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(NcclUniqueId)]
    lib.ncclCommInitRank.restype = ctypes.c_int
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    lib.ncclCommDestroy.restype = ctypes.c_int
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetErrorString.argtypes = [ctypes.c_int]
    _nccl_lib = lib
    return lib


def _nccl_check(result, what):
    if result != 0:  # ncclSuccess
        text = nccl().ncclGetErrorString(result).decode(errors="replace")
        raise _capi.DistflashError(_capi.DFA_ERR_BACKEND, "DFA_ERR_BACKEND", f"{what}: NCCL error {result}: {text}", what)


# --- communicators --------------------------------------------------------------------------

class Comm:
    """One rank's NCCL communicator for a process group and the dfa_comm over it."""

    def __init__(self, group, device, rank, size, nccl_comm, dfa_comm):
        self.group, self.device, self.rank, self.size = group, device, rank, size
        self.nccl_comm, self.dfa_comm = nccl_comm, dfa_comm
        # the ids of the last call with documents on this communicator, kept alive (so that no
        # other tensor can take their memory), and their version counter then (see docs_unchanged)
        self.last_doc, self.last_doc_version = None, None


def docs_unchanged(c, doc):
    """Whether doc holds the ids of the last call with documents on c without anyone saying so:
    the same memory (c keeps that tensor alive, so no other tensor can have taken it), shape and
    strides, and no write since (torch bumps the version counter that a tensor shares with its
    views on every in-place write)."""
    last = c.last_doc
    return (last is not None and doc.data_ptr() == last.data_ptr() and doc.shape == last.shape
            and doc.stride() == last.stride() and doc.dtype == last.dtype and doc._version == c.last_doc_version)


def remember_docs(c, doc, window_left):
    """After a call on c: the ids it used (None: a call without documents)."""
    if doc is not None:
        c.last_doc, c.last_doc_version = doc, doc._version
    elif window_left != NO_WINDOW:  # a masked call without ids: the library keeps no ids then
        c.last_doc, c.last_doc_version = None, None


def same_docs_flag(c, doc, same_docs):
    """same_docs: 1 the caller's promise, -1 never, 0 when docs_unchanged says so."""
    return doc is not None and (same_docs > 0 or (same_docs == 0 and docs_unchanged(c, doc)))


_comms = {}
_groups = {}  # group name -> group, for the ops (which take the name)
_comm_lock = threading.Lock()


def group_name(group):
    import torch.distributed as dist
    if group is None:
        group = dist.group.WORLD
    name = group.group_name
    _groups[name] = group
    return name


def resolve_group(name):
    group = _groups.get(name)
    if group is None:
        from torch.distributed import distributed_c10d
        group = distributed_c10d._resolve_process_group(name)
        _groups[name] = group
    return group


def get_comm(name, device):
    key = (name, device.index)
    c = _comms.get(key)
    if c is not None:
        return c
    with _comm_lock:
        c = _comms.get(key)
        if c is None:
            c = _make_comm(resolve_group(name), device)
            _comms[key] = c
    return c


def _make_comm(group, device):
    import torch.distributed as dist
    _capi.fn("dfa_comm_create_nccl")  # a clear error before anything collective if the build lacks NCCL
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    with torch.cuda.device(device):
        uid = NcclUniqueId()
        if rank == 0:
            _nccl_check(nccl().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        box = [ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)) if rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=group)
        ctypes.memmove(ctypes.addressof(uid), box[0], ctypes.sizeof(uid))
        comm = ctypes.c_void_p()
        _nccl_check(nccl().ncclCommInitRank(ctypes.byref(comm), size, uid, rank), "ncclCommInitRank")
        out = ctypes.c_void_p()
        try:
            _capi.call("dfa_comm_create_nccl", comm, ctypes.byref(out))
        except BaseException:
            nccl().ncclCommDestroy(comm)
            raise
    got_rank, got_size = _capi.fn("dfa_comm_rank")(out), _capi.fn("dfa_comm_size")(out)
    if (got_rank, got_size) != (rank, size):
        raise _capi.DistflashError(_capi.DFA_ERR_INTERNAL, "DFA_ERR_INTERNAL",
                                   f"dfa_comm_create_nccl gave rank {got_rank} of {got_size}; the torch group "
                                   f"has rank {rank} of {size}", "dfa_comm_create_nccl")
    return Comm(group, device, rank, size, comm, out)


def destroy_comms():
    """Frees every cached communicator (dfa_comm_destroy, then ncclCommDestroy). Call it before
    torch.distributed.destroy_process_group if you want them gone early; it also runs at exit.
    Make sure the streams that used them are done (torch.cuda.synchronize())."""
    with _comm_lock:
        comms = list(_comms.values())
        _comms.clear()
    for c in comms:
        _capi.fn("dfa_comm_destroy")(c.dfa_comm)
        nccl().ncclCommDestroy(c.nccl_comm)


atexit.register(destroy_comms)


# --- the ops --------------------------------------------------------------------------------

def dist_desc_for(q, k, schedule, causal, scale, deterministic=False, doc=None, window_left=NO_WINDOW,
                  window_right=NO_WINDOW, same_docs=False, softcap=0.0):
    B, S, H, D = q.shape
    flags = (_capi.DFA_FLAG_DETERMINISTIC if deterministic else 0) | (
        _capi.DFA_FLAG_SAME_DOCS if same_docs else 0)
    return _capi.dist_desc(B, S, H, k.shape[2], D, dtype=DTYPES[q.dtype], causal=causal, softmax_scale=scale,
                           schedule=schedule, overlap=1, flags=flags,
                           doc=None if doc is None else doc.data_ptr(),
                           window=None if window_left == NO_WINDOW else (window_left, window_right),
                           softcap=softcap)


def check_mask(q, doc_ids, window, fn):
    """dist_attention's mask arguments as the ops take them: (doc, window_left, window_right).
    doc_ids: None, or an integer tensor [batch, local_rows] or [local_rows] (the same ids for
    every batch row) on q's device: this rank's ids, its queries' and its keys' at once, so one
    tensor (no (q_doc, k_doc) pair). doc: int32, [batch, local_rows], contiguous. The library
    checks the values (non-decreasing along this rank's rows, on every rank)."""
    doc = None
    if doc_ids is not None:
        if isinstance(doc_ids, (tuple, list)):
            raise TypeError(f"{fn}: doc_ids must be one tensor (this rank's rows are its queries and its keys), "
                            f"not a {type(doc_ids).__name__}")
        if not isinstance(doc_ids, Tensor):
            raise TypeError(f"{fn}: doc_ids must be a torch.Tensor, not {type(doc_ids).__name__}")
        t = doc_ids
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"{fn}: doc_ids must hold integers, not {t.dtype}")
        B, n = q.shape[0], q.shape[1]
        if tuple(t.shape) not in ((B, n), (n,)):
            raise ValueError(f"{fn}: doc_ids must have shape [batch, local_rows] = {(B, n)} or [local_rows] = "
                             f"{(n,)}; it has {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{fn}: doc_ids must be on q's device {q.device}, not {t.device}")
        doc = t.to(torch.int32)
        doc = (doc.expand(B, n) if doc.dim() == 1 else doc).contiguous()
    wl, wr = check_window(window, fn)
    return doc, wl, wr


def check_doc(doc, q, fn):
    """The ops' own check of their doc tensor (a caller may use torch.ops.distflash directly)."""
    if doc is None:
        return None
    if doc.dtype != torch.int32:
        raise TypeError(f"{fn}: doc must be int32, not {doc.dtype}")
    if tuple(doc.shape) != (q.shape[0], q.shape[1]) or doc.device != q.device:
        raise ValueError(f"{fn}: doc must have shape [batch, local_rows] = {(q.shape[0], q.shape[1])} on "
                         f"{q.device}; it has {tuple(doc.shape)} on {doc.device}")
    return doc.contiguous()


def check_local(q, k, v, fn, contiguous=True):
    check_qkv(q, k, v, fn, contiguous)
    if q.device.type != "cuda":
        raise ValueError(f"{fn}: the distributed calls run on CUDA tensors (NCCL); q is on {q.device}")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"{fn}: q and k must hold the same local rows; q has {q.shape[1]}, k has {k.shape[1]}")
    if q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError(f"{fn}: batch and local rows must be >= 1; q has shape {tuple(q.shape)}")


def _p(t):
    return t.data_ptr()


# doc: this rank's int32 document ids [batch, local_rows] (the descriptor's q_doc and k_doc), or
# None; window_left/right: as in distflash::attn_fwd (NO_WINDOW: no window); same_docs:
# DFA_FLAG_SAME_DOCS (doc equals the ids of the communicator's last call with documents): 1 the
# caller's promise, -1 never, 0 when doc is that call's tensor, unwritten since (docs_unchanged);
# deterministic: the backward's choice, saved for it; softcap: 0.0 off. Defaults keep the calls
# of the older schemas valid.
@torch.library.custom_op("distflash::dist_attn_fwd", mutates_args=())
def dist_attn_fwd(q: Tensor, k: Tensor, v: Tensor, group: str, schedule: int, causal: bool,
                  softmax_scale: float, doc: Optional[Tensor] = None, window_left: int = NO_WINDOW,
                  window_right: int = NO_WINDOW, same_docs: int = 0, deterministic: bool = False,
                  softcap: float = 0.0) -> Tuple[Tensor, Tensor]:
    check_local(q, k, v, "distflash::dist_attn_fwd", contiguous=False)
    doc = check_doc(doc, q, "distflash::dist_attn_fwd")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    c = get_comm(group, q.device)
    d = dist_desc_for(q, k, schedule, causal, softmax_scale, False, doc, window_left, window_right,
                      same_docs_flag(c, doc, same_docs), softcap)
    c.last_doc = None  # until the call has gone through
    with torch.cuda.device(q.device):
        _capi.call("dfa_dist_attn_fwd_cuda", c.dfa_comm, ctypes.byref(d), _p(q), _p(k), _p(v), _p(o), _p(lse),
                   cuda_stream(q))
    remember_docs(c, doc, window_left)
    return o, lse


@dist_attn_fwd.register_fake
def _(q, k, v, group, schedule, causal, softmax_scale, doc=None, window_left=NO_WINDOW, window_right=NO_WINDOW,
      same_docs=0, deterministic=False, softcap=0.0):
    return q.new_empty(q.shape), q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("distflash::dist_attn_bwd", mutates_args=())
def dist_attn_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, group: str,
                  schedule: int, causal: bool, softmax_scale: float,
                  deterministic: bool, doc: Optional[Tensor] = None, window_left: int = NO_WINDOW,
                  window_right: int = NO_WINDOW, same_docs: int = 0,
                  softcap: float = 0.0) -> Tuple[Tensor, Tensor, Tensor]:
    check_local(q, k, v, "distflash::dist_attn_bwd", contiguous=False)
    doc = check_doc(doc, q, "distflash::dist_attn_bwd")
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    dout, o, lse = as_dout(dout, q), o.contiguous(), lse.contiguous()
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    c = get_comm(group, q.device)
    d = dist_desc_for(q, k, schedule, causal, softmax_scale, deterministic, doc, window_left, window_right,
                      same_docs_flag(c, doc, same_docs), softcap)
    c.last_doc = None  # until the call has gone through
    with torch.cuda.device(q.device):
        _capi.call("dfa_dist_attn_bwd_cuda", c.dfa_comm, ctypes.byref(d), _p(q), _p(k), _p(v), _p(o), _p(lse),
                   _p(dout), _p(dq), _p(dk), _p(dv), cuda_stream(q))
    remember_docs(c, doc, window_left)
    return dq, dk, dv


@dist_attn_bwd.register_fake
def _(dout, q, k, v, o, lse, group, schedule, causal, softmax_scale, deterministic, doc=None,
      window_left=NO_WINDOW, window_right=NO_WINDOW, same_docs=0, softcap=0.0):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, group, schedule, causal, softmax_scale, doc, window_left, window_right, same_docs, deterministic,
     softcap) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, doc)  # the backward needs the forward's mask
    ctx.args = (group, schedule, causal, softmax_scale)
    ctx.window = (window_left, window_right)
    ctx.same_docs, ctx.deterministic, ctx.softcap = same_docs, deterministic, softcap
    ctx.set_materialize_grads(False)  # an unused lse (the usual case) gives None: no extra call


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, doc = ctx.saved_tensors
    if grad_o is None:
        grad_o = torch.zeros_like(o)
    deterministic = ctx.deterministic or torch.are_deterministic_algorithms_enabled()
    # the forward's choice: a promise holds for its backward (a step that passes one packing to
    # every layer calls the backwards after the last forward, in reverse, with the same ids)
    tail = (deterministic, doc, *ctx.window, ctx.same_docs, ctx.softcap)
    dq, dk, dv = dist_attn_bwd(grad_o, q, k, v, o, lse, *ctx.args, *tail)
    if grad_lse is not None:  # lse's share: one more distributed backward (see _ops.lse_grad)
        def bwd(v_l, o_l, dout_l):
            return dist_attn_bwd(dout_l, q, k, v_l, o_l, lse, *ctx.args, *tail)[:2]
        dq, dk, _ = lse_grad(bwd, q, k, v, o, lse, grad_lse, dq, dk, None, None)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


dist_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


# --- positions ------------------------------------------------------------------------------

_tables = {}


def position_table(schedule, rank, nranks, local_rows):
    """Global positions of local rows 0..local_rows-1 (int64 CPU tensor), from dfa_dist_position,
    computed once per (schedule, rank, nranks, local_rows)."""
    key = (schedule, rank, nranks, local_rows)
    t = _tables.get(key)
    if t is None:
        f = _capi.fn("dfa_dist_position")
        t = torch.tensor([f(schedule, rank, nranks, local_rows, i) for i in range(local_rows)], dtype=torch.int64)
        _tables[key] = t
    return t


_device_tables = {}


def device_positions(schedule, rank, nranks, local_rows, device):
    """position_table on `device`, copied there once (a host-to-device copy per call would be
    one more transfer in front of every layer)."""
    key = (schedule, rank, nranks, local_rows, str(device))
    t = _device_tables.get(key)
    if t is None:
        t = position_table(schedule, rank, nranks, local_rows).to(device=device, dtype=torch.int32)
        _device_tables[key] = t
    return t


def as_process_group(group, fn):
    """group as a ProcessGroup (or None: the world): a 1-D DeviceMesh gives its group."""
    if group is None:
        return None
    try:
        from torch.distributed.device_mesh import DeviceMesh
    except ImportError:  # a torch built without distributed
        return group
    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError(f"{fn}: group is a {group.ndim}-D DeviceMesh; pass a 1-D one (e.g. mesh['cp']) "
                             "or its ProcessGroup")
        return group.get_group()
    return group


# The ids last built from a cu_seqlens tensor, so that every layer of a step gets the same ids
# tensor (which same_doc_ids=None recognises: no exchange after the first layer).
_cu_ids = {}


def docs_from_cu_seqlens(cu, schedule, rank, nranks, local_rows, q, fn):
    """This rank's int32 document ids [batch, local_rows] (contiguous, as check_mask keeps them)
    from cu_seqlens of the whole sequence (one packing for every batch row): the index of the
    document holding each local row's global position, by searchsorted on the device (no
    synchronisation)."""
    if not isinstance(cu, Tensor):
        raise TypeError(f"{fn}: cu_seqlens must be a torch.Tensor (int32 [ndocs + 1]), not {type(cu).__name__}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{fn}: cu_seqlens must hold int32 (or int64), not {cu.dtype}")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"{fn}: cu_seqlens must have shape [ndocs + 1]; it has {tuple(cu.shape)}")
    if cu.device != q.device:
        raise ValueError(f"{fn}: cu_seqlens must be on q's device {q.device}, not {cu.device}")
    compiling = torch.compiler.is_compiling()  # traced: no cache, no host check
    key = None if compiling else (cu.data_ptr(), cu._version, cu.shape[0], cu.dtype, schedule, rank, nranks,
                                  local_rows, q.shape[0], str(q.device))
    hit = _cu_ids.get("last")
    if key is not None and hit is not None and hit[0] == key and hit[1] is cu:
        return hit[2]
    if not cu.is_cuda and not compiling:
        c = cu.tolist()
        if c[0] != 0 or any(b < a for a, b in zip(c, c[1:])):
            raise ValueError(f"{fn}: cu_seqlens = {c[:8]}{'...' if len(c) > 8 else ''} must start at 0 and never "
                             "decrease")
    pos = device_positions(schedule, rank, nranks, local_rows, q.device)
    ids = torch.searchsorted(cu.to(torch.int32).contiguous(), pos, right=True, out_int32=True)
    ids = ids.expand(q.shape[0], local_rows).contiguous()
    if key is not None:
        _cu_ids["last"] = (key, cu, ids)
    return ids
