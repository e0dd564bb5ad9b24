/* The CUDA lab's own rows (lab_variants.cu): the library's Hopper kernels with one named member
 * of their configuration changed (heuristics.h), grid orders the library does not choose, and
 * the lab's experimental kernels (lab_bwd_wgmma.cuh). Each runs through the library's launch
 * path with that one piece swapped. */
#ifndef DFA_LAB_VARIANTS_H
#define DFA_LAB_VARIANTS_H

#include <cuda_runtime_api.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;  /* "fwd ..." or "bwd ...": what it changes against the library */
    int bwd;           /* 1: a backward row (the forward is the library's) */
    int deterministic; /* a backward row for DFA_FLAG_DETERMINISTIC calls */
    int check_min;     /* the check's sequence length at least this (a persistent kernel needs more
                          query tiles than SMs for a CTA to take a second tile) */
} lab_variant;

/* The rows, 0 .. lab_variant_count() - 1. */
int lab_variant_count(void);
const lab_variant *lab_variant_at(int i);

/* As dfa_attn_fwd_cuda / dfa_attn_bwd_cuda (same arguments, already valid: the lab makes them)
   with row i's kernel; DFA_ERR_UNSUPPORTED where it cannot run (not sm_90, a head dim the row's
   kernel does not take, a dq path it does not have). */
dfa_status lab_fwd(int i, const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                   cudaStream_t stream);
dfa_status lab_bwd(int i, const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                   const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
