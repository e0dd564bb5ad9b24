#include "attn_tiles.h"

#include <stdlib.h>

#include "../common/dtype.h"

float *dfa__alloc_floats(size_t n) {
    if (n > (SIZE_MAX - 64) / sizeof(float)) return NULL;
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

void dfa__to_f32_parallel(dfa_dtype t, const void *src, float *dst, int64_t n, int nthreads) {
    const int64_t chunk = 1 << 16, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t first = c * chunk, len = n - first < chunk ? n - first : chunk;
        dfa__load_f32(t, dfa__elem_c(t, src, first), dst + first, len);
    }
}
