/* The device rules of the CUDA entry points (devcheck.h). */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/error.h"
#include "devcheck.h"
#include "launch.h"

/* f32 storage is a property of the descriptor: checked right after it, before the pointers
   (a dfa__desc_rule of the forward and backward). */
dfa_status dfa__cuda_check_dtype(const dfa_attn_desc *d, const char *fn) {
    if (d->dtype == DFA_F32)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                         "d->dtype = DFA_F32 is not supported on the device; use DFA_BF16 or DFA_F16 (or the CPU call)");
    return DFA_OK;
}

/* Alignment and device residency of every pointer (NULL entries skipped). */
dfa_status dfa__cuda_check_device_ptrs(const dfa__dev_ptr *ps, int n, const char *fn) {
    for (int i = 0; i < n; i++) {
        if (!ps[i].ptr) continue;
        if ((uintptr_t)ps[i].ptr % ps[i].align)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%s = %p is not %zu-byte aligned", ps[i].name, ps[i].ptr,
                             ps[i].align);
        struct cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        cudaError_t e = cudaPointerGetAttributes(&a, ps[i].ptr);
        if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaPointerGetAttributes");
        const int on_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
                              (a.type == cudaMemoryTypeHost && a.devicePointer == ps[i].ptr);
        if (!on_device)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%s = %p is not device memory (host pointer?)", ps[i].name,
                             ps[i].ptr);
    }
    return DFA_OK;
}

