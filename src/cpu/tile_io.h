/* Internal: moving tiles of one head between the caller's tensors and float32 scratch. */
#ifndef DFA_CPU_TILE_IO_H
#define DFA_CPU_TILE_IO_H

#include <stdint.h>

#include "../common/dtype.h"
#include "kernels.h"

/* Rows [0, n) of one head starting at element `first` of a tensor whose rows are
   `stride` elements apart, as float32 with row stride *ld. float32 storage is
   read in place (no copy); other types are converted into buf (stride D). */
static inline const float *dfa__tile_in(const dfa__cpu_kernels *kr, dfa_dtype t, const void *base, int64_t first,
                                        int64_t stride, int n, int D, float *buf, int *ld) {
    if (t == DFA_F32) {
        *ld = (int)stride;
        return (const float *)base + first;
    }
    for (int r = 0; r < n; r++)
        kr->load_f32(t, dfa__elem_c(t, base, first + (int64_t)r * stride), buf + (int64_t)r * D, D);
    *ld = D;
    return buf;
}

/* Writes n rows of float32 (row stride ld) times `mul` into one head of a tensor. */
static inline void dfa__tile_out(const dfa__cpu_kernels *kr, dfa_dtype t, void *base, int64_t first, int64_t stride,
                                 int n, int D, float *tile, int ld, float mul) {
    for (int r = 0; r < n; r++) {
        float *row = tile + (int64_t)r * ld;
        if (mul != 1.0f) kr->scale_rows(row, ld, 1, D, &mul);
        kr->store_f32(t, row, dfa__elem(t, base, first + (int64_t)r * stride), D);
    }
}

#endif
