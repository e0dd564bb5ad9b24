/* Internal: tile sizes and small helpers shared by the CPU attention passes. */
#ifndef DFA_CPU_ATTN_TILES_H
#define DFA_CPU_ATTN_TILES_H

#include <stddef.h>
#include <stdint.h>

#include "distflash.h"
#include "kernels.h"

/* Forward: query rows per task (a multiple of 16: the transposed score tile's
   columns fill whole vectors) and keys per step. */
#define DFA__FWD_BR 48
#define DFA__FWD_BC 64
/* Backward: query rows and keys of one (query tile, key tile) pair. */
#define DFA__BWD_BR 48
#define DFA__BWD_BC 64

/* The causal `delta` of a tile whose first query sits at global position qpos
   and first key at kpos (see DFA__NO_MASK): key column j is visible to query
   row i iff j - i <= qpos - kpos. Clamped to int; DFA__NO_MASK when all of the
   tile's `cols` keys are visible to its first row. */
static inline int dfa__tile_delta(int64_t qpos, int64_t kpos, int cols) {
    const int64_t delta = qpos - kpos;
    if (delta >= cols - 1) return DFA__NO_MASK;
    if (delta < -((int64_t)1 << 30)) return -(1 << 30);
    return (int)delta;
}

/* 64-byte aligned float scratch (free with free()); NULL on failure or n == 0 overflow. */
float *dfa__alloc_floats(size_t n);

/* Head-major float32 copy of a [batch, seqlen, heads, head_dim] tensor of storage
   type t: dst[b][h][s][:] = src[b][s][h][:], in parallel. Each head's rows are then
   contiguous, which the hardware prefetchers follow (rows of one head in the
   caller's layout are often exactly 4 KiB apart: one page per row). */
void dfa__gather_heads(dfa_dtype t, const void *src, int batch, int seqlen, int heads, int head_dim, float *dst,
                       int nthreads);

#endif
