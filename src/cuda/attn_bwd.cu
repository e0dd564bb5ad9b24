/* The backward as the library ships it: D and base-2 lse, the key-block kernel
 * (dK, dV and, by default, dQ added into a float32 accumulator: the warp-specialised
 * Hopper kernel of bwd_ws.cuh (TMA reduce-adds) for head dims 64 and 128 on sm_90,
 * mma.sync with float32 atomics otherwise), then either the dq
 * conversion or, under DFA_FLAG_DETERMINISTIC, the separate query-block dq
 * kernel. Scratch memory is the caller's or is taken and given back in stream
 * order (cudaMallocAsync / cudaFreeAsync). */
#include <stdint.h>

#include "launch_bwd.cuh"

extern "C" size_t dfa__cuda_bwd_scratch(const dfa__cuda_shape *s) {
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    size_t bytes = 2 * rows * sizeof(float); /* D and lse * log2(e) */
    bytes = (bytes + 255) & ~(size_t)255;
    if (!(s->flags & DFA_FLAG_DETERMINISTIC) && !s->out_f32)
        bytes += rows * (size_t)s->head_dim * sizeof(float); /* dq_acc (with out_f32: dq itself) */
    return bytes;
}

/* Everything but the key-block kernel, per element type and output type. */
template <int BF16, int OUT32>
static dfa_status dfa__bwd_passes(const dfa__bwd_params &p, dfa__bwd_launcher kv, int deterministic, cudaStream_t st,
                                  const char *fn) {
    const long long rows = (long long)p.sh.batch * p.sh.seqlen_q * p.sh.num_heads;
    dfa_status s = dfa__launch(dfa__bwd_dsum_kernel<BF16>, (rows + 7) / 8, 256, 0, st, fn, "rows",
                               "backward D kernel launch", p);
    if (s || (s = kv(p, st, fn))) return s;
    if (deterministic) return dfa__bwd_dq_mma<BF16, OUT32>(p, st, fn);
    if (OUT32) return DFA_OK; /* the key-block kernel added scale * dq into the caller's float32 dq */
    const long long n8 = rows * p.sh.head_dim / 8;
    return dfa__launch(dfa__bwd_dq_convert<BF16>, (n8 + 255) / 256, 256, 0, st, fn, "elements",
                       "dq conversion kernel launch", p, n8);
}

typedef dfa_status (*dfa__bwd_passes_fn)(const dfa__bwd_params &, dfa__bwd_launcher, int, cudaStream_t, const char *);
static const dfa__bwd_passes_fn dfa__bwd_passes_of[2][2] = {/* [bf16][out_f32] */
                                                            {dfa__bwd_passes<0, 0>, dfa__bwd_passes<0, 1>},
                                                            {dfa__bwd_passes<1, 0>, dfa__bwd_passes<1, 1>}};

dfa_status dfa__cuda_bwd_with(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, const void *o,
                              const float *lse, const void *dout, void *dq, void *dk, void *dv, void *scratch,
                              dfa__bwd_launcher kv, cudaStream_t stream, const char *fn) {
    if ((uintptr_t)scratch % 256)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "scratch = %p is not 256-byte aligned", scratch);
    const int deterministic = (s->flags & DFA_FLAG_DETERMINISTIC) != 0;
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    void *buf = scratch;
    cudaError_t e;
    if (!scratch && (e = cudaMallocAsync(&buf, dfa__cuda_bwd_scratch(s), stream)) != cudaSuccess)
        return dfa__cuda_fail(e, fn, "cudaMallocAsync of the backward scratch");

    dfa__bwd_params p;
    p.q = (const uint16_t *)q;
    p.k = (const uint16_t *)k;
    p.v = (const uint16_t *)v;
    p.o = (const uint16_t *)o;
    p.dout = (const uint16_t *)dout;
    p.lse = lse;
    p.dsum = (float *)buf;
    p.lse2 = p.dsum + rows;
    p.dq_acc = deterministic ? (float *)0
               : s->out_f32  ? (float *)dq
                             : (float *)((char *)buf + ((2 * rows * sizeof(float) + 255) & ~(size_t)255));
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    p.sh = *s;
    p.scale_log2 = s->scale * DFA__LOG2E;

    dfa_status st = DFA_OK;
    if (!deterministic && (e = cudaMemsetAsync(p.dq_acc, 0, rows * (size_t)s->head_dim * sizeof(float), stream)) !=
                              cudaSuccess)
        st = dfa__cuda_fail(e, fn, "cudaMemsetAsync of the dq accumulator");
    if (!st) st = dfa__bwd_passes_of[s->bf16 != 0][s->out_f32 != 0](p, kv, deterministic, stream, fn);
    if (!scratch) {
        e = cudaFreeAsync(buf, stream);
        if (!st && e != cudaSuccess) st = dfa__cuda_fail(e, fn, "cudaFreeAsync of the backward scratch");
    }
    return st;
}

/* The key-block kernels: [wgmma][atomic dq][bf16][out_f32]. */
#define DFA__KV_KERNELS(F)                                                                                        \
    {{{F<0, 0, 0>, F<0, 0, 1>}, {F<0, 1, 0>, F<0, 1, 1>}}, {{F<1, 0, 0>, F<1, 0, 1>}, {F<1, 1, 0>, F<1, 1, 1>}}}
static const dfa__bwd_launcher dfa__bwd_kv_kernels[2][2][2][2] = {DFA__KV_KERNELS(dfa__bwd_kv_mma),
                                                                   DFA__KV_KERNELS(dfa__bwd_kv_ws)};
#undef DFA__KV_KERNELS

extern "C" dfa_status dfa__cuda_bwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v,
                                    const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                    void *scratch, cudaStream_t stream, const char *fn) {
    int wgmma = 0;
    const dfa_status st = dfa__cuda_pick_family(s, dfa__cuda_forced_family(), "backward", &wgmma, fn);
    if (st) return st;
    const int atomic = !(s->flags & DFA_FLAG_DETERMINISTIC);
    return dfa__cuda_bwd_with(s, q, k, v, o, lse, dout, dq, dk, dv, scratch,
                              dfa__bwd_kv_kernels[wgmma][atomic][s->bf16 != 0][s->out_f32 != 0], stream, fn);
}
