/* Internal: between the C entry points (api.c) and the CUDA launchers (*.cu).
 * api.c validates arguments; the launchers pick a kernel, launch it on the
 * caller's stream and map CUDA failures to DFA_ERR_BACKEND. */
#ifndef DFA_CUDA_LAUNCH_H
#define DFA_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which forward kernel to use (DFA_CUDA_FWD_KERNEL=auto|mma|wgmma in the environment). */
typedef enum { DFA__FWD_AUTO = 0, DFA__FWD_MMA = 1, DFA__FWD_WGMMA = 2 } dfa__fwd_kernel;
/* The same choice for the backward key-block kernel (DFA_CUDA_BWD_KERNEL). */
typedef dfa__fwd_kernel dfa__kernel_choice;

/* One attention call, resolved: sizes, element type, causal offset, scale. */
typedef struct {
    int batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim;
    int bf16;         /* 1: bf16 storage, 0: f16 */
    int causal;       /* 0 also when every key is visible to every row */
    long long offset; /* q_start - k_start, clamped to [-seqlen_q - 1, seqlen_k] */
    float scale;      /* resolved softmax scale */
    unsigned flags;   /* DFA_FLAG_* */
} dfa__cuda_shape;

/* Resolves a validated descriptor (f16/bf16) into a shape. */
dfa__cuda_shape dfa__cuda_shape_of(const dfa_attn_desc *d);

dfa_status dfa__cuda_fwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, void *o,
                         float *lse, dfa__fwd_kernel which, cudaStream_t stream, const char *fn);

dfa_status dfa__cuda_bwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, const void *o,
                         const float *lse, const void *dout, void *dq, void *dk, void *dv,
                         dfa__kernel_choice which, cudaStream_t stream, const char *fn);

/* Bytes of device scratch one backward call takes (stream-ordered, freed before it returns). */
size_t dfa__cuda_bwd_scratch(const dfa__cuda_shape *s);

/* dtype: 0 f32, 1 bf16, 2 f16 (as dfa_dtype). rows = batch * seqlen_q * num_heads. */
dfa_status dfa__cuda_merge(int dtype, int batch, int seqlen_q, int num_heads, int head_dim, void *o_acc,
                           float *lse_acc, const void *o_part, const float *lse_part, cudaStream_t stream,
                           const char *fn);

/* Maps a CUDA error to DFA_ERR_BACKEND (or DFA_ERR_OUT_OF_MEMORY) with CUDA's own message. */
dfa_status dfa__cuda_fail(cudaError_t e, const char *fn, const char *what);

/* Compute capability major*10+minor of the current device, or a negative value on failure
   (then the message is recorded). */
int dfa__cuda_device_cc(const char *fn, dfa_status *st);

#ifdef __cplusplus
}
#endif

#endif
