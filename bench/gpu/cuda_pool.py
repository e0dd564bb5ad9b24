"""The device's default memory pool kept between calls (--pool-keep in the GPU benches).

The library's backward takes its scratch (the float32 dq accumulator: 4 bytes per element of q)
with cudaMallocAsync from the device's default pool and gives it back with cudaFreeAsync
(distflash_cuda.h, "Scratch"). With the pool's default release threshold (0) the driver may
unmap that memory at every synchronisation and map it again at the next call; an application
that calls often raises the threshold. This sets it to "keep everything" through the driver
API, so that a bench can time the library both ways; add_args / apply_args give the GPU benches
the same two switches (--pool-keep, --library-scratch)."""
import ctypes

CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4


def keep_pool(device=0):
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(r, what):
        if r != 0:
            raise RuntimeError(f"{what} failed: CUresult {r}")

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    pool = ctypes.c_void_p()
    check(cuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev), "cuDeviceGetDefaultMemPool")
    value = ctypes.c_uint64(2**64 - 1)
    check(cuda.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ctypes.byref(value)),
          "cuMemPoolSetAttribute(RELEASE_THRESHOLD)")


def add_args(ap):
    """--pool-keep and --library-scratch on an argparse parser."""
    ap.add_argument("--pool-keep", action="store_true",
                    help="raise the default memory pool's release threshold (cuda_pool.py)")
    ap.add_argument("--library-scratch", action="store_true",
                    help="the binding calls the plain entry points (scratch from the CUDA pool), not _with_scratch")


def apply_args(a):
    """What add_args' switches ask for, on the current device."""
    if a.library_scratch:
        import distflash._ops
        distflash._ops._CALLER_SCRATCH = False
    if a.pool_keep:
        import torch
        keep_pool(torch.cuda.current_device())
