#ifdef DFA_HAVE_CUDA
#include "cuda_fill.h"

#include <stdlib.h>

#include "measure.h"

cudaError_t bench_cuda_fill_random(dfa_dtype t, void *dst, size_t bytes, uint64_t seed) {
    enum { BLOCK = 1 << 22 };
    uint16_t *block = malloc(sizeof(uint16_t) * BLOCK);
    if (!block) return cudaErrorMemoryAllocation;
    measure_fill(t, block, BLOCK, seed);
    cudaError_t e = cudaSuccess;
    for (size_t off = 0; off < bytes && e == cudaSuccess; off += sizeof(uint16_t) * BLOCK) {
        const size_t n = bytes - off < sizeof(uint16_t) * BLOCK ? bytes - off : sizeof(uint16_t) * BLOCK;
        e = cudaMemcpy((char *)dst + off, block, n, cudaMemcpyHostToDevice);
    }
    free(block);
    return e;
}
#else
typedef int dfa_bench_cuda_fill_unused; /* ISO C wants a translation unit to declare something */
#endif
