#include "attn_tiles.h"

#include <stdlib.h>

#include "../common/dtype.h"

float *dfa__alloc_floats(size_t n) {
    if (n > (SIZE_MAX - 64) / sizeof(float)) return NULL;
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

void dfa__gather_heads(const dfa__cpu_kernels *kr, dfa_dtype t, const void *src, int batch, int seqlen, int heads,
                       int head_dim, float *dst, int nthreads) {
    const int64_t rows = (int64_t)batch * seqlen;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t b = r / seqlen, s = r % seqlen;
        for (int h = 0; h < heads; h++)
            kr->load_f32(t, dfa__elem_c(t, src, (r * heads + h) * head_dim),
                         dst + (((b * heads + h) * seqlen) + s) * head_dim, head_dim);
    }
}
