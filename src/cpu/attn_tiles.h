/* Internal: tile sizes and small helpers shared by the CPU attention passes. */
#ifndef DFA_CPU_ATTN_TILES_H
#define DFA_CPU_ATTN_TILES_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "distflash.h"
#include "kernels.h"

/* Forward: query rows per task (a multiple of 16: the transposed score tile's
   columns fill whole vectors) and keys per step. 96 x 96 is the fastest the
   CPU kernel lab (lab/) finds on AVX-512 at D = 64 and 128, S = 1k..16k. */
#define DFA__FWD_BR 96
#define DFA__FWD_BC 96
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

/* How a tile of keys [j0, j0 + cols) meets the visible key intervals [lo[r], hi[r]) of its
   `rows` query rows (src/common/mask.h): no row sees any of its keys, every row sees all
   of them, or some elements are masked. */
typedef enum { DFA__TILE_EMPTY, DFA__TILE_FULL, DFA__TILE_PARTIAL } dfa__tile_cover;

static inline dfa__tile_cover dfa__tile_classify(const int *lo, const int *hi, int rows, int j0, int cols) {
    int any = 0, all = 1;
    for (int r = 0; r < rows; r++) {
        any |= lo[r] < j0 + cols && hi[r] > j0 && lo[r] < hi[r];
        all &= lo[r] <= j0 && hi[r] >= j0 + cols;
    }
    return !any ? DFA__TILE_EMPTY : all ? DFA__TILE_FULL : DFA__TILE_PARTIAL;
}

/* Sets the masked elements of a score tile to -inf (the softmax kernels turn -inf into a
   probability of exactly 0): element (row r, key column c) is at s[r * rs + c * cs] and
   visible iff lo[r] <= j0 + c < hi[r]. rs, cs: strides of a row and a column (the forward's
   tile is transposed: rs = 1, cs = its leading dimension). */
static inline void dfa__tile_mask(float *s, int64_t rs, int64_t cs, const int *lo, const int *hi, int rows, int j0,
                                  int cols) {
    for (int r = 0; r < rows; r++) {
        int a = lo[r] - j0, z = hi[r] - j0; /* visible columns [a, z) */
        if (a < 0) a = 0;
        if (a > cols) a = cols;
        if (z > cols) z = cols;
        if (z < a) z = a;
        for (int c = 0; c < a; c++) s[r * rs + c * cs] = -INFINITY;
        for (int c = z; c < cols; c++) s[r * rs + c * cs] = -INFINITY;
    }
}

/* Asks for the n floats at p to be brought into L2, one request per cache line
   (a tile the next step will read, issued a step ahead). */
static inline void dfa__prefetch_l2(const float *p, size_t n) {
#if defined(__GNUC__)
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
#else
    (void)p, (void)n;
#endif
}

/* 64-byte aligned float scratch (free with free()); NULL on failure or n == 0 overflow. */
float *dfa__alloc_floats(size_t n);

/* Head-major float32 copy of a [batch, seqlen, heads, head_dim] tensor of storage
   type t: dst[b][h][s][:] = src[b][s][h][:], in parallel. Each head's rows are then
   contiguous, which the hardware prefetchers follow (rows of one head in the
   caller's layout are often exactly 4 KiB apart: one page per row). */
void dfa__gather_heads(const dfa__cpu_kernels *kr, dfa_dtype t, const void *src, int batch, int seqlen, int heads,
                       int head_dim, float *dst, int nthreads);

#endif
