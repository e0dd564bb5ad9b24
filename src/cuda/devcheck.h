/* Internal: the device rules every CUDA entry point applies after the common checks of its
 * call shape (src/common/args.h): the storage types the device supports, and pointers that
 * are device memory on the current device, suitably aligned. api.c and the distributed
 * calls on device memory (src/seqpar/dist_api_cuda.c) share them. */
#ifndef DFA_CUDA_DEVCHECK_H
#define DFA_CUDA_DEVCHECK_H

#include <stddef.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pointer to check, its name in messages and its required alignment in bytes. */
typedef struct {
    const void *ptr;
    const char *name;
    size_t align;
} dfa__dev_ptr;

/* f32 storage is not implemented on the device: DFA_ERR_UNSUPPORTED (a dfa__desc_rule). */
dfa_status dfa__cuda_check_dtype(const dfa_attn_desc *d, const char *fn);

/* Alignment and device residency of every pointer (NULL entries skipped). */
dfa_status dfa__cuda_check_device_ptrs(const dfa__dev_ptr *ps, int n, const char *fn);

#ifdef __cplusplus
}
#endif

#endif
