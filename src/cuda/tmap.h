/* Internal (CUDA sources only): TMA tensor maps over attention tensors. */
#ifndef DFA_CUDA_TMAP_H
#define DFA_CUDA_TMAP_H

#include <cuda.h>

/* Tensor map over a [batch, seqlen, heads, D] bf16/f16 tensor at ptr, with boxes of 64
   columns x `rows` rows of one head, 128-byte swizzle. 1 on success. */
int dfa__tmap(CUtensorMap *m, const void *ptr, int bf16, int D, int heads, int seqlen, int batch, int rows);

/* Tensor map over a [batch, seqlen, heads, D] float32 tensor at ptr, with boxes of 32
   columns (128 bytes) x `rows` rows of one head, 128-byte swizzle (the backward's dq
   accumulator, written by tensor reduce-adds). 1 on success. */
int dfa__tmap_f32(CUtensorMap *m, float *ptr, int D, int heads, int seqlen, int batch, int rows);

#endif
