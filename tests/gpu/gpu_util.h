/* Device-memory helpers shared by the GPU tests (a test may abort on a CUDA failure). */
#ifndef DFA_TESTS_GPU_GPU_UTIL_H
#define DFA_TESTS_GPU_GPU_UTIL_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(call)                                                                                      \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(3);                                                                                       \
        }                                                                                                  \
    } while (0)

static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}
static inline void *dev_copy_of(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    CUDA_OK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
    return p;
}
static inline void dev_poison(void *p, size_t bytes) { CUDA_OK(cudaMemset(p, 0xff, bytes)); }
static inline void to_host(void *host, const void *dev, size_t bytes) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* 1 when a CUDA device is usable; prints why not otherwise. */
static inline int have_gpu(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: nothing to test\n");
        return 0;
    }
    return 1;
}

static inline int device_cc(void) {
    int dev = 0, ma = 0, mi = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_OK(cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev));
    return ma * 10 + mi;
}

#endif
