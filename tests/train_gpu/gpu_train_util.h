/* Helpers of the GPU model tests: bf16 on the host, device copies, relative errors. */
#ifndef DFT_TEST_GPU_TRAIN_UTIL_H
#define DFT_TEST_GPU_TRAIN_UTIL_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_OK(call)                                                                                      \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(3);                                                                                       \
        }                                                                                                  \
    } while (0)

static inline uint16_t bf16_of(float x) { /* nearest even, as __float2bfloat16_rn */
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float f32_of(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static inline float round_bf16(float x) { return f32_of(bf16_of(x)); }

static inline void *dmalloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    CUDA_OK(cudaMemset(p, 0xff, bytes ? bytes : 1)); /* poison: NaN in f32 and bf16 */
    return p;
}
static inline void *dcopy(const void *h, size_t bytes) {
    void *p = dmalloc(bytes);
    CUDA_OK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}
static inline void hcopy(void *h, const void *d, size_t bytes) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* ||a - b|| / ||b|| over n floats (NaN in a gives NaN, which fails every bound) */
static inline double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

#endif
