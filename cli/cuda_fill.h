/* Random device inputs for the CUDA subcommands (bench, dist-bench, plan-blocks, rank-sim), and the
   check the one-process ones put around their CUDA calls. */
#ifndef DFA_CLI_CUDA_FILL_H
#define DFA_CLI_CUDA_FILL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distflash.h"

/* Fills `bytes` of device memory at dst with 16-bit values of storage type t, roughly normal with
   unit variance: one host block of 4M values from measure_fill(t, ..., seed), copied over and over
   (timings do not depend on the values beyond that). Returns cudaSuccess, the first failed copy's
   error, or cudaErrorMemoryAllocation when the host block cannot be allocated. Synchronous. */
cudaError_t bench_cuda_fill_random(dfa_dtype t, void *dst, size_t bytes, uint64_t seed);

/* A CUDA call of the subcommand `cmd` ("plan-blocks"): on failure the call and CUDA's message, exit 1. */
#define BENCH_CUDA_OR_EXIT(cmd, call)                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "distflash %s: %s: %s\n", cmd, #call, cudaGetErrorString(e_));         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
