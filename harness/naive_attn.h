/* The naive attention that `distflash bench` and `distflash demo` compare against:
 * it materialises the full float32 score matrix [batch, heads, seqlen_q, seqlen_k]
 * (and, in the backward, a second one for dP), as a framework's unfused attention
 * does. It uses the library's fast tile GEMMs, so the comparison isolates the
 * algorithm (memory traffic and footprint), not the quality of the inner loops.
 * Not part of the library. */
#ifndef DFA_HARNESS_NAIVE_ATTN_H
#define DFA_HARNESS_NAIVE_ATTN_H

#include <stddef.h>

#include "distflash.h"

/* Bytes of scratch each pass allocates (score matrices, plus float32 copies of
   16-bit inputs and outputs). */
double naive_fwd_bytes(const dfa_attn_desc *d);
double naive_bwd_bytes(const dfa_attn_desc *d);

/* Same contract as dfa_attn_fwd / dfa_attn_bwd (lse may be NULL). Returns 0, or
   -1 when the scratch cannot be allocated. Uses `threads` OpenMP threads. */
int naive_attn_fwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                   int threads);
int naive_attn_bwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                   const float *lse, const void *dout, void *dq, void *dk, void *dv, int threads);

#endif
