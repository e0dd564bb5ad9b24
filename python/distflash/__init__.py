"""distflash: exact, memory-efficient attention (FlashAttention, DistFlashAttn) from Python.

A thin ctypes binding over libdistflash (the C library of this repository). The PyTorch API
lives in distflash.torch; its functions and flash-attn's two entry points are also here at the
top level, imported on first use (so `import distflash` needs no torch):

    import distflash
    o = distflash.attention(q, k, v, causal=True)       # q [B, S, H, D], k/v [B, S, Hkv, D]
    o = distflash.dist_attention(q, k, v, group=None)    # each rank's local rows, NCCL
    from distflash import flash_attn_func, flash_attn_varlen_func   # flash-attn's semantics
    import distflash.hf   # registers attn_implementation="distflash" with transformers

Library: $DISTFLASH_LIB, else the copy installed with the package, else
<repo>/build/src/libdistflash.so, else the system path (see distflash._capi).
"""

from ._capi import (
    DistflashError,
    DistflashInvalidArgument,
    DistflashLibraryError,
    DistflashOutOfMemory,
    DistflashUnsupported,
    library_path,
)

from ._version import __version__  # CMakeLists.txt's (_version.py)

__all__ = [
    "DistflashError", "DistflashInvalidArgument", "DistflashUnsupported", "DistflashOutOfMemory",
    "DistflashLibraryError", "library_path", "version", "set_num_threads", "cpu_isa",
    "has_cuda", "has_nccl", "__version__",
]


def version():
    """dfa_version_string(): "major.minor.patch (parts)" of the loaded library."""
    from . import _capi
    return _capi.version_string()


def set_num_threads(n):
    """Threads of each CPU call (dfa_set_num_threads): n >= 1, or 0 for the OpenMP default."""
    from . import _capi
    _capi.call("dfa_set_num_threads", int(n))


def cpu_isa():
    """The SIMD path of the CPU kernels: "avx512", "avx2" or "scalar"."""
    from . import _capi
    return _capi.fn("dfa_cpu_isa")().decode()


def has_cuda():
    """Whether the loaded library was built with the CUDA kernels."""
    from . import _capi
    return _capi.has("dfa_attn_fwd_cuda")


def has_nccl():
    """Whether the loaded library was built with the NCCL communicator (dist_attention)."""
    from . import _capi
    return _capi.has("dfa_comm_create_nccl") and _capi.has("dfa_dist_attn_fwd_cuda")


# Names served by __getattr__ on first use: (module, attribute or None for the module itself).
_LAZY = {
    "torch": (".torch", None),
    "attention": (".torch", "attention"),
    "dist_attention": (".torch", "dist_attention"),
    "flash_attn_func": ("._flash", "flash_attn_func"),
    "flash_attn_varlen_func": ("._flash", "flash_attn_varlen_func"),
}


def __getattr__(name):
    # `import distflash; distflash.attention(...)` works without importing torch up front.
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'distflash' has no attribute {name!r}")
    import importlib
    mod = importlib.import_module(where[0], __name__)
    value = mod if where[1] is None else getattr(mod, where[1])
    if where[1] is not None:
        globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
