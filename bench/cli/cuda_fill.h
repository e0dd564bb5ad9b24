/* Random device inputs for the CUDA subcommands (bench, dist-bench, plan-blocks). */
#ifndef DFA_BENCH_CLI_CUDA_FILL_H
#define DFA_BENCH_CLI_CUDA_FILL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

/* Fills `bytes` of device memory at dst with 16-bit values of storage type t, roughly normal with
   unit variance: one host block of 4M values from measure_fill(t, ..., seed), copied over and over
   (timings do not depend on the values beyond that). Returns cudaSuccess, the first failed copy's
   error, or cudaErrorMemoryAllocation when the host block cannot be allocated. Synchronous. */
cudaError_t bench_cuda_fill_random(dfa_dtype t, void *dst, size_t bytes, uint64_t seed);

#endif
