/* The GPU lab's error checks: a lab program stops at the first failed CUDA or library call,
 * naming the call (the library itself never exits; its tools may). */
#ifndef DFA_LAB_CUDA_H
#define DFA_LAB_CUDA_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "distflash.h"

#define LAB_CUDA(call)                                                                                     \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "lab: %s failed: %s\n", #call, cudaGetErrorString(e_));                        \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)
#define LAB_OK(call)                                                                                       \
    do {                                                                                                   \
        if ((call) != DFA_OK) {                                                                            \
            fprintf(stderr, "lab: %s failed: %s\n", #call, dfa_last_error());                              \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

#endif
