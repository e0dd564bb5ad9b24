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
/* What every launch checks first: the grid fits one launch, the kernel may have smem bytes. */
template <typename... P>
static dfa_status dfa__launch_prepare(void (*kernel)(P...), long long grid, int smem, const char *fn,
                                      const char *unit) {
    if (grid > 0x7fffffffLL)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many %s for one launch (%lld blocks)", unit, grid);
    cudaError_t e;
    if (smem > 0 && (e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
        return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    return DFA_OK;
}

template <typename... P, typename... A>
static dfa_status dfa__launch(void (*kernel)(P...), long long grid, int threads, int smem, cudaStream_t st,
                              const char *fn, const char *unit, const char *what, const A &...args) {
    const dfa_status s = dfa__launch_prepare(kernel, grid, smem, fn, unit);
    if (s) return s;
    kernel<<<(unsigned)grid, threads, smem, st>>>(args...);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, what);
}

/* As dfa__launch, in clusters of `cluster` consecutive blocks (grid a multiple of it). */
template <typename... P, typename... A>
static dfa_status dfa__launch_cluster(void (*kernel)(P...), long long grid, int cluster, int threads, int smem,
                                      cudaStream_t st, const char *fn, const char *unit, const char *what,
                                      const A &...args) {
    const dfa_status s = dfa__launch_prepare(kernel, grid, smem, fn, unit);
    if (s) return s;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)grid, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, args...);
    if (e == cudaSuccess) e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, what);
}

#endif
