/* Helpers of the GPU model tests: bf16 on the host, device copies, relative errors. */
#ifndef DFA_TESTS_TRAIN_GPU_GPU_TRAIN_UTIL_H
#define DFA_TESTS_TRAIN_GPU_GPU_TRAIN_UTIL_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/gpu_util.h" /* CUDA_OK and the device-memory helpers of every GPU test */
#include "common/dtype.h"     /* the one bf16 rounding */

static inline uint16_t bf16_of(float x) { return dfa__f32_to_bf16(x); } /* nearest even, as __float2bfloat16_rn */
static inline float f32_of(uint16_t b) { return dfa__bf16_to_f32(b); }
static inline float round_bf16(float x) { return f32_of(bf16_of(x)); }

/* device buffers poisoned with 0xff (NaN in f32 and bf16) until written */
static inline void *dmalloc(size_t bytes) {
    void *p = dev_alloc(bytes);
    dev_poison(p, bytes ? bytes : 1);
    return p;
}
static inline void *dcopy(const void *h, size_t bytes) { return dev_copy_of(h, bytes); }
static inline void hcopy(void *h, const void *d, size_t bytes) { to_host(h, d, bytes); }

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
