/* Internal (CUDA sources only): the one way a launcher starts a kernel. */
#ifndef DFA_CUDA_LAUNCH_CUH
#define DFA_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include "launch.h"

extern "C" {
#include "../common/error.h"
}

/* Launches kernel on `grid` blocks of `threads` threads with `smem` bytes of dynamic shared
   memory (raising the kernel's limit first when smem > 0) on stream st. A grid over the
   one-dimensional limit is DFA_ERR_UNSUPPORTED ("too many <unit> for one launch"), a CUDA
   error DFA_ERR_BACKEND (see dfa__cuda_fail) naming `what`. */
template <typename... P, typename... A>
static dfa_status dfa__launch(void (*kernel)(P...), long long grid, int threads, int smem, cudaStream_t st,
                              const char *fn, const char *unit, const char *what, const A &...args) {
    if (grid > 0x7fffffffLL)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many %s for one launch (%lld blocks)", unit, grid);
    cudaError_t e;
    if (smem > 0 && (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
        return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    kernel<<<(unsigned)grid, threads, smem, st>>>(args...);
    e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, what);
}

#endif
