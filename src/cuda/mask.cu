/* The visible intervals of a mask (see mask.cuh), computed once per call on the stream. */
#include "launch.cuh"
#include "mask.cuh"

extern "C" {
#include "../common/desc.h"
}

extern "C" dfa__cuda_mask dfa__cuda_mask_of(const dfa_attn_desc *d) {
    dfa__cuda_mask m;
    m.batch = d->batch;
    m.seqlen_q = d->seqlen_q;
    m.seqlen_k = d->seqlen_k;
    m.q_doc = d->q_doc;
    m.k_doc = d->k_doc;
    m.offset = (long long)(d->q_start - d->k_start); /* both < 2^62 in magnitude */
    m.causal = d->causal;
    m.window = (d->flags & DFA_FLAG_WINDOW) != 0;
    m.left = m.window ? d->window_left : -1;
    m.right = m.window ? d->window_right : -1;
    return m;
}

static size_t dfa__align256(size_t x) { return (x + 255) & ~(size_t)255; }

extern "C" size_t dfa__cuda_mask_bytes(const dfa__cuda_mask *m) {
    return dfa__align256((size_t)m->batch * m->seqlen_q * sizeof(int2)) +
           dfa__align256((size_t)m->batch * m->seqlen_k * sizeof(int2));
}

extern "C" dfa_status dfa__cuda_mask_prepare(const dfa__cuda_mask *m, void *buf, dfa__cuda_shape *s,
                                             cudaStream_t stream, const char *fn) {
    int2 *rows = (int2 *)buf;
    int2 *keys = (int2 *)((char *)buf + dfa__align256((size_t)m->batch * m->seqlen_q * sizeof(int2)));
    const long long n = (long long)m->batch * m->seqlen_q + (long long)m->batch * m->seqlen_k;
    const dfa_status st = dfa__launch(dfa__mask_prepare_kernel, (n + 255) / 256, 256, 0, stream, fn, "rows",
                                      "mask interval kernel launch", *m, rows, keys);
    if (st) return st;
    s->masked = 1;
    s->causal = 0; /* the intervals carry it */
    s->offset = 0;
    s->mask_rows = (const int *)rows;
    s->mask_keys = (const int *)keys;
    return DFA_OK;
}

extern "C" dfa_status dfa__cuda_mask_begin(const dfa_attn_desc *d, dfa__cuda_shape *s, void **buf, cudaStream_t stream,
                                           const char *fn) {
    const dfa__cuda_mask m = dfa__cuda_mask_of(d);
    cudaError_t e = cudaMallocAsync(buf, dfa__cuda_mask_bytes(&m), stream);
    if (e != cudaSuccess) {
        *buf = NULL;
        return dfa__cuda_fail(e, fn, "cudaMallocAsync of the mask intervals");
    }
    const dfa_status st = dfa__cuda_mask_prepare(&m, *buf, s, stream, fn);
    if (st) {
        (void)cudaFreeAsync(*buf, stream); /* the launch failed, nothing uses it; its status is the one to report */
        *buf = NULL;
    }
    return st;
}

extern "C" dfa_status dfa__cuda_mask_end(void *buf, dfa_status st, cudaStream_t stream, const char *fn) {
    if (!buf) return st;
    const cudaError_t e = cudaFreeAsync(buf, stream);
    if (!st && e != cudaSuccess) st = dfa__cuda_fail(e, fn, "cudaFreeAsync of the mask intervals");
    return st;
}
