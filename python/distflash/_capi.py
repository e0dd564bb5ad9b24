"""ctypes view of the public C API (include/distflash.h, distflash_cuda.h, the NCCL calls).

Nothing here imports torch: the structs, the library loader and the error mapping are plain
ctypes, so `import distflash` works anywhere (no GPU, no torch). The library is loaded on first
use, not at import, so that a missing or broken build is reported where it matters, with the
paths that were tried.

Where the library comes from (first that exists wins):
  1. $DISTFLASH_LIB: a path to libdistflash.so (an error if it does not load);
  2. the copy inside the installed package (distflash/libdistflash.so, put there by pip);
  3. the source tree: <repo>/build/src/libdistflash.so, then <repo>/build-gpu/src/ (scripts/test
     --gpu's build); this file is <repo>/python/distflash/_capi.py;
  4. the system linker path (ctypes.util.find_library("distflash"), e.g. after cmake --install).
"""

import ctypes
import ctypes.util
import os
import threading

# --- constants of distflash.h -------------------------------------------------------------

DFA_OK = 0
DFA_ERR_INVALID_ARGUMENT = 1
DFA_ERR_UNSUPPORTED = 2
DFA_ERR_OUT_OF_MEMORY = 3
DFA_ERR_BACKEND = 4
DFA_ERR_INTERNAL = 5

DFA_F32, DFA_BF16, DFA_F16 = 0, 1, 2
DFA_FLAG_DETERMINISTIC = 1
DFA_FLAG_WINDOW = 2
DFA_FLAG_SAME_DOCS = 4
DFA_SCHEDULE_BALANCED, DFA_SCHEDULE_RING = 0, 1

DFA_DESC_MAGIC = 0x31414644
# The newest descriptor version this mirror knows (3: softcap, head_dim_v, sinks). A descriptor
# says min(this, the loaded library's version) (desc_version()), so an older library still takes
# it as long as no field it lacks is set; the callers check that first (needs_desc()).
DFA_DESC_VERSION = 3
DFA_ATTN_DESC_SIZE_V1 = 136
DFA_ATTN_DESC_SIZE_V2 = 136
DFA_ATTN_DESC_SIZE_V3 = 136
DFA_DIST_DESC_SIZE_V1 = 192

_STATUS_NAMES = {
    DFA_OK: "DFA_OK",
    DFA_ERR_INVALID_ARGUMENT: "DFA_ERR_INVALID_ARGUMENT",
    DFA_ERR_UNSUPPORTED: "DFA_ERR_UNSUPPORTED",
    DFA_ERR_OUT_OF_MEMORY: "DFA_ERR_OUT_OF_MEMORY",
    DFA_ERR_BACKEND: "DFA_ERR_BACKEND",
    DFA_ERR_INTERNAL: "DFA_ERR_INTERNAL",
}


# --- errors -------------------------------------------------------------------------------

class DistflashError(RuntimeError):
    """A distflash C call returned a status other than DFA_OK.

    status: the dfa_status value; status_name: its name ("DFA_ERR_INVALID_ARGUMENT", ...);
    message: dfa_last_error() right after the call (names the argument and says why)."""

    def __init__(self, status, status_name, message, function=None):
        self.status = int(status)
        self.status_name = status_name
        self.message = message
        self.function = function
        where = f"{function}: " if function and not message.startswith(function) else ""
        super().__init__(f"{status_name}: {where}{message}")


class DistflashInvalidArgument(DistflashError, ValueError):
    """DFA_ERR_INVALID_ARGUMENT: also a ValueError."""


class DistflashUnsupported(DistflashError, NotImplementedError):
    """DFA_ERR_UNSUPPORTED: a valid request this build or backend does not implement."""


class DistflashOutOfMemory(DistflashError, MemoryError):
    """DFA_ERR_OUT_OF_MEMORY: scratch allocation failed; outputs untouched."""


class DistflashLibraryError(ImportError):
    """libdistflash could not be found or loaded, or lacks a part (CUDA, NCCL) a call needs."""


_ERROR_CLASSES = {
    DFA_ERR_INVALID_ARGUMENT: DistflashInvalidArgument,
    DFA_ERR_UNSUPPORTED: DistflashUnsupported,
    DFA_ERR_OUT_OF_MEMORY: DistflashOutOfMemory,
}


# --- descriptors (mirror distflash.h exactly; tests/test_desc.py checks sizes and offsets) -

class AttnDesc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("reserved_header", ctypes.c_uint32),
        ("batch", ctypes.c_int),
        ("seqlen_q", ctypes.c_int),
        ("seqlen_k", ctypes.c_int),
        ("num_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("dtype", ctypes.c_int),  # dfa_dtype (a C enum: int)
        ("causal", ctypes.c_int),
        ("q_start", ctypes.c_int64),
        ("k_start", ctypes.c_int64),
        ("softmax_scale", ctypes.c_float),
        ("flags", ctypes.c_uint),
        ("q_doc", ctypes.c_void_p),  # const int32_t * (version 2: documents)
        ("k_doc", ctypes.c_void_p),
        ("window_left", ctypes.c_int32),  # with DFA_FLAG_WINDOW
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),  # version 3: 0 = off, else s = softcap * tanh(s / softcap)
        ("head_dim_v", ctypes.c_int32),  # 0 = head_dim; else v, o, dout, dv have this last dim
        ("sinks", ctypes.c_void_p),  # const float * [num_heads] on the tensors' device, or NULL
        ("dsinks", ctypes.c_void_p),  # float * [num_heads], the backward's sink gradient, or NULL
        ("reserved", ctypes.c_uint64 * 2),
    ]

# The fields of each descriptor version after the first (a library of an older version refuses
# them as reserved bytes; needs_desc() says so first, in words).
V3_FIELDS = ("softcap", "head_dim_v", "sinks", "dsinks")


class DistDesc(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("reserved_header", ctypes.c_uint32),
        ("attn", AttnDesc),
        ("schedule", ctypes.c_int),  # dfa_schedule
        ("overlap", ctypes.c_int),
        ("reserved", ctypes.c_uint64 * 4),
    ]


def _fill_header(desc):
    desc.struct_size = ctypes.sizeof(desc)
    desc.magic = DFA_DESC_MAGIC
    desc.version = desc_version()
    desc.reserved_header = 0


_lib_desc_version = None


def library_desc_version():
    """The descriptor version of the loaded library: the version field of the descriptor its
    dfa_attn_desc_init makes (its header's DFA_DESC_VERSION)."""
    global _lib_desc_version
    if _lib_desc_version is None:
        _lib_desc_version = int(fn("dfa_attn_desc_init")(1, 1, 1, 1, 1, 8).version)
    return _lib_desc_version


def desc_version():
    """The version our descriptors say: the newest that both this mirror and the library know."""
    return min(DFA_DESC_VERSION, library_desc_version())


def needs_desc(version, what, fn_name):
    """Raises NotImplementedError naming `what` when the loaded library's descriptors are older
    than `version` (it would refuse the field as reserved bytes)."""
    have = library_desc_version()
    if have < version:
        raise NotImplementedError(
            f"{fn_name}: {what} needs a libdistflash with descriptor version >= {version}; "
            f"{_lib_path} has version {have} ({version_string()})")


def attn_desc(batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim, dtype=DFA_F32,
              causal=False, q_start=0, k_start=0, softmax_scale=0.0, flags=0, q_doc=None, k_doc=None,
              window=None, softcap=0.0, head_dim_v=0, sinks=None, dsinks=None):
    """A dfa_attn_desc with its versioning header filled in and the reserved space zero (a
    ctypes.Structure starts zeroed), as dfa_attn_desc_init makes it. q_doc, k_doc: addresses of
    int32 document ids (or None); window: None or (left, right), -1 for unlimited (sets
    DFA_FLAG_WINDOW). Version 3: softcap (0 = off), head_dim_v (0 = head_dim), sinks / dsinks
    (addresses of float32 [num_heads], or None); left at their defaults they are zero bytes, which
    every library version takes."""
    d = AttnDesc()
    _fill_header(d)
    d.batch, d.seqlen_q, d.seqlen_k = batch, seqlen_q, seqlen_k
    d.num_heads, d.num_kv_heads, d.head_dim = num_heads, num_kv_heads, head_dim
    d.dtype, d.causal = dtype, int(bool(causal))
    d.q_start, d.k_start = q_start, k_start
    d.softmax_scale, d.flags = softmax_scale, flags
    d.q_doc, d.k_doc = q_doc, k_doc
    if window is not None:
        d.flags |= DFA_FLAG_WINDOW
        d.window_left, d.window_right = window
    d.softcap, d.head_dim_v = softcap, head_dim_v
    d.sinks, d.dsinks = sinks, dsinks
    return d


def dist_desc(batch, local_rows, num_heads, num_kv_heads, head_dim, dtype=DFA_F32, causal=True,
              softmax_scale=0.0, schedule=DFA_SCHEDULE_BALANCED, overlap=1, flags=0, doc=None, window=None,
              softcap=0.0, head_dim_v=0):
    """A dfa_dist_desc with both versioning headers filled in, as dfa_dist_desc_init makes it.
    doc: the address of this rank's int32 document ids [batch, local_rows] (attn.q_doc and
    attn.k_doc both point there), or None; window, softcap, head_dim_v: as in attn_desc."""
    d = DistDesc()
    _fill_header(d)
    d.attn = attn_desc(batch, local_rows, local_rows, num_heads, num_kv_heads, head_dim, dtype=dtype,
                       causal=causal, softmax_scale=softmax_scale, flags=flags, q_doc=doc, k_doc=doc,
                       window=window, softcap=softcap, head_dim_v=head_dim_v)
    d.schedule, d.overlap = schedule, overlap
    return d


# --- the library ----------------------------------------------------------------------------

# Every pointer argument (void *, float *, dfa_comm *, cudaStream_t) travels as a c_void_p: the same
# ABI, and a tensor's data_ptr() (a Python int) passes as it is.
_vp = ctypes.c_void_p
_ad = ctypes.POINTER(AttnDesc)
_dd = ctypes.POINTER(DistDesc)
_st = ctypes.c_int  # dfa_status

# name: (restype, argtypes, part). part None: always there; "cuda"/"nccl": only in builds with it.
_PROTOTYPES = {
    "dfa_status_string": (ctypes.c_char_p, [_st], None),
    "dfa_last_error": (ctypes.c_char_p, [], None),
    "dfa_version_string": (ctypes.c_char_p, [], None),
    "dfa_set_num_threads": (_st, [ctypes.c_int], None),
    "dfa_cpu_isa": (ctypes.c_char_p, [], None),
    "dfa_attn_desc_init": (AttnDesc, [ctypes.c_int] * 6, None),
    "dfa_dist_desc_init": (DistDesc, [ctypes.c_int] * 5, None),
    "dfa_attn_fwd": (_st, [_ad, _vp, _vp, _vp, _vp, _vp], None),
    "dfa_attn_bwd": (_st, [_ad, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp], None),
    "dfa_dist_position": (ctypes.c_int64, [ctypes.c_int] * 5, None),
    "dfa_comm_destroy": (None, [_vp], None),
    "dfa_comm_rank": (ctypes.c_int, [_vp], None),
    "dfa_comm_size": (ctypes.c_int, [_vp], None),
    "dfa_attn_fwd_cuda": (_st, [_ad, _vp, _vp, _vp, _vp, _vp, _vp], "cuda"),
    "dfa_attn_bwd_cuda": (_st, [_ad, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp], "cuda"),
    "dfa_attn_fwd_cuda_scratch_bytes": (ctypes.c_size_t, [_ad], "cuda"),
    "dfa_attn_bwd_cuda_scratch_bytes": (ctypes.c_size_t, [_ad], "cuda"),
    "dfa_attn_fwd_cuda_with_scratch": (_st, [_ad] + [_vp] * 6 + [ctypes.c_size_t, _vp], "cuda"),
    "dfa_attn_bwd_cuda_with_scratch": (_st, [_ad] + [_vp] * 10 + [ctypes.c_size_t, _vp], "cuda"),
    "dfa_comm_create_nccl": (_st, [_vp, ctypes.POINTER(_vp)], "nccl"),
    "dfa_dist_attn_fwd_cuda": (_st, [_vp, _dd, _vp, _vp, _vp, _vp, _vp, _vp], "nccl"),
    "dfa_dist_attn_bwd_cuda": (_st, [_vp, _dd, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp], "nccl"),
}

_lock = threading.Lock()
_lib = None
_lib_path = None
_funcs = {}


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdistflash.so")
    repo = os.path.dirname(os.path.dirname(here))
    yield os.path.join(repo, "build", "src", "libdistflash.so")
    yield os.path.join(repo, "build-gpu", "src", "libdistflash.so")  # scripts/test --gpu's build


def _load():
    env = os.environ.get("DISTFLASH_LIB")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise DistflashLibraryError(f"DISTFLASH_LIB={env} does not load: {e}") from e
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append(f"{path} ({e})")
        else:
            tried.append(f"{path} (missing)")
    found = ctypes.util.find_library("distflash")
    if found:
        try:
            return ctypes.CDLL(found), found
        except OSError as e:
            tried.append(f"{found} ({e})")
    else:
        tried.append("the system library path (ctypes.util.find_library('distflash'): none)")
    raise DistflashLibraryError(
        "libdistflash not found. Tried: " + "; ".join(tried) + ". Install the package "
        "(pip install ./python), build the library (cmake -S . -B build && cmake --build build), "
        "or set DISTFLASH_LIB=/path/to/libdistflash.so")


def lib():
    """The loaded libdistflash (ctypes.CDLL), loading it on first use."""
    global _lib, _lib_path
    if _lib is None:
        with _lock:
            if _lib is None:
                handle, path = _load()
                _lib_path = path
                _lib = handle
    return _lib


def library_path():
    """The path libdistflash was (or will be) loaded from."""
    lib()
    return _lib_path


def has(name):
    """Whether the loaded library exports `name` (the CUDA and NCCL calls exist only in builds
    with those parts)."""
    try:
        fn(name)
        return True
    except DistflashLibraryError:
        return False


def fn(name):
    """The C function `name` with its prototype set; DistflashLibraryError if the build lacks it."""
    f = _funcs.get(name)
    if f is not None:
        return f
    restype, argtypes, part = _PROTOTYPES[name]
    try:
        f = getattr(lib(), name)
    except AttributeError:
        how = {"cuda": "-DDFA_WITH_CUDA=ON (needs nvcc)",
               "nccl": "-DDFA_WITH_CUDA=ON -DDFA_WITH_NCCL=ON (needs nvcc and nccl.h)"}.get(part, "")
        raise DistflashLibraryError(
            f"{_lib_path} has no {name}: it was built without {part or 'this call'}"
            + (f"; rebuild with {how}" if how else "")) from None
    f.restype, f.argtypes = restype, argtypes
    _funcs[name] = f
    return f


def status_name(status):
    try:
        return fn("dfa_status_string")(status).decode()
    except DistflashLibraryError:
        return _STATUS_NAMES.get(status, f"dfa_status {status}")


def last_error():
    return fn("dfa_last_error")().decode(errors="replace")


def check(status, function):
    """Raises the DistflashError for a failed call (its message read right after the call, on
    the same thread: dfa_last_error is thread-local)."""
    if status == DFA_OK:
        return
    message = last_error()
    cls = _ERROR_CLASSES.get(status, DistflashError)
    raise cls(status, status_name(status), message, function)


def call(name, *args):
    """Calls a dfa_status-returning C function and raises on failure."""
    check(fn(name)(*args), name)


def version_string():
    return fn("dfa_version_string")().decode()
