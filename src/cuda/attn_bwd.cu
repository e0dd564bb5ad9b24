/* The backward as the library ships it, as up to three launches on the caller's stream:
 *   1. D = rowsum(dO * O) and lse2 = lse * log2(e) per (batch, head, query row), the float32 dq
 *      accumulator zeroed on the way (bwd_mma.cuh, dfa__bwd_dsum_kernel; a memset before it
 *      where the accumulator is not 16-byte aligned);
 *   2. the key-block kernel: dK, dV and, in dq modes 1 and 2, dQ added into the accumulator
 *      (bwd_ws.cuh where the Hopper kernels run, bwd_ws_wide.cuh there at head dim 256,
 *      bwd_mma.cuh's dfa__bwd_kv_kernel otherwise);
 *   3. in dq mode 0 the dq pass (bwd_mma.cuh, dfa__bwd_dq_kernel), else the conversion of the
 *      accumulator to dq's storage type (none when dq is float32: it was its own accumulator).
 * The dq mode (dfa__bwd_dq_mode, heuristics.h) follows DFA_FLAG_DETERMINISTIC:
 *   - without it, mode 1: dQ tiles are added in whatever order the CTAs reach them (TMA
 *     reduce-adds on the Hopper path, float32 atomics with mma.sync), so dq may differ in its
 *     last bits from run to run; o, lse, dk and dv of the public calls never do.
 *   - with it, on the Hopper path without a mask, mode 2: the same single key-block pass, whose
 *     dQ writer warp adds the tiles of each query block in key-block order (a counter per
 *     (batch, head, 64 query rows) in the scratch, waited on with acquire loads). No work is
 *     added: the cost is the writers' waits for their turn, which stall a CTA's consumers only
 *     once its dQ staging tiles are all waiting.
 *   - with it under a mask, or where the mma.sync kernels run, mode 0: the key-block kernel
 *     computes no dQ, and a second pass walks the keys again per query block and writes each dq
 *     row once (S, dP and dQ: seven matrix products per pair of query and key blocks where the
 *     other modes take five).
 * Scratch (dfa__cuda_bwd_scratch; the caller's, or taken with cudaMallocAsync and given back
 * with cudaFreeAsync on the stream): D and lse2, 8 bytes per (batch, head, query row), rounded
 * up to 256 bytes; in modes 1 and 2 the float32 dq accumulator, 4 * head_dim bytes per (batch,
 * head, query row), unless dq is float32 (the sequence-parallel executor's calls); in mode 2
 * then, from the next multiple of 256 bytes, the counters: 4 bytes per (batch, head, 64 query
 * rows). A masked call's intervals come on top (api.c, launch.h).
 * With sinks (s->dsinks set) one more launch reduces dsinks from D and lse (sinks.cu); the
 * kernels themselves do not see the sinks: lse already holds them. */
#include <stdint.h>

#include "launch_bwd.cuh"

static size_t dfa__align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Scratch layout: D and lse2 [2 rows], the f32 dq accumulator (unless dq is float32 or a dq
   pass computes it), the tile counters of the in-order dq ([batch, heads, seqlen_q / 64]). */
static size_t dfa__bwd_scratch_for(const dfa__cuda_shape *s, int dq_mode, size_t *acc_off, size_t *sem_off) {
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    size_t bytes = dfa__align256(2 * rows * sizeof(float));
    *acc_off = bytes;
    if (dq_mode && !s->out_f32) bytes += rows * (size_t)s->head_dim * sizeof(float);
    if (dq_mode != 2) return *sem_off = bytes;
    *sem_off = dfa__align256(bytes);
    return *sem_off + (size_t)s->batch * s->num_heads * (size_t)((s->seqlen_q + 63) / 64) * sizeof(int);
}

/* On the current device; a failed device query counts as the Hopper kernel (the largest
   scratch): the call itself then reports the error. */
extern "C" size_t dfa__cuda_bwd_scratch(const dfa__cuda_shape *s) {
    int wgmma = 0;
    if (dfa__cuda_pick_family(s, dfa__cuda_forced_family(), &wgmma, "dfa__cuda_bwd_scratch") != DFA_OK)
        wgmma = 1;
    size_t a, b;
    return dfa__bwd_scratch_for(s, dfa__bwd_dq_mode(s, wgmma), &a, &b);
}

/* D and lse2; with zero_dq the D kernel zeroes the dq accumulator too (bwd_mma.cuh). D sums over
   o's and dO's rows, head_dim_v wide: with a value head dim of its own the D kernel takes a shape
   whose head_dim is head_dim_v (and never zeroes dq, whose rows are head_dim wide). */
template <int BF16>
static dfa_status dfa__bwd_dsum(const dfa__bwd_params &p_in, int zero_dq, cudaStream_t st, const char *fn) {
    dfa__bwd_params p = p_in;
    p.sh.head_dim = p.sh.head_dim_v;
    if (p_in.sh.head_dim_v != p_in.sh.head_dim && zero_dq)
        return dfa__fail(DFA_ERR_INTERNAL, fn, "the D kernel zeroing dq with a value head dim of its own");
    const long long rows = (long long)p.sh.batch * p.sh.seqlen_q * p.sh.num_heads;
    const char *what = "backward D kernel launch";
    /* head_dim / 8 lanes per row where that divides a warp's 32, else one warp per row */
    const int lanes = p.sh.head_dim == 64 ? 8 : p.sh.head_dim == 128 ? 16 : p.sh.head_dim == 256 ? 32 : 0;
    const long long ctas = lanes ? (rows * lanes + 255) / 256 : (rows + 7) / 8;
    switch (lanes) {
    case 8: return dfa__launch(dfa__bwd_dsum_kernel<BF16, 8>, ctas, 256, 0, st, fn, "rows", what, p, zero_dq);
    case 16: return dfa__launch(dfa__bwd_dsum_kernel<BF16, 16>, ctas, 256, 0, st, fn, "rows", what, p, zero_dq);
    case 32: return dfa__launch(dfa__bwd_dsum_kernel<BF16, 32>, ctas, 256, 0, st, fn, "rows", what, p, zero_dq);
    default: return dfa__launch(dfa__bwd_dsum_kernel<BF16, 0>, ctas, 256, 0, st, fn, "rows", what, p, zero_dq);
    }
}

/* Everything but the key-block kernel, per element type and output type. */
template <int BF16, int OUT32>
static dfa_status dfa__bwd_passes(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, dfa__bwd_launcher kv,
                                  int kv_dq, int zero_dq, cudaStream_t st, const char *fn) {
    const long long rows = (long long)p.sh.batch * p.sh.seqlen_q * p.sh.num_heads;
    dfa_status s = dfa__bwd_dsum<BF16>(p, zero_dq, st, fn);
    if (s || (s = kv(p, dkv16, st, fn))) return s;
    if (!kv_dq) return dfa__bwd_dq_mma<BF16, OUT32>(p, st, fn);
    if (OUT32) return DFA_OK; /* the key-block kernel added scale * dq into the caller's float32 dq */
    const long long n8 = rows * p.sh.head_dim / 8;
    return dfa__launch(dfa__bwd_dq_convert<BF16>, (n8 + 255) / 256, 256, 0, st, fn, "elements",
                       "dq conversion kernel launch", p, n8);
}

typedef dfa_status (*dfa__bwd_passes_fn)(const dfa__bwd_params &, const dfa__cuda_dkv16 &, dfa__bwd_launcher, int, int,
                                         cudaStream_t, const char *);
static const dfa__bwd_passes_fn dfa__bwd_passes_of[2][2] = {/* [bf16][out_f32] */
                                                            {dfa__bwd_passes<0, 0>, dfa__bwd_passes<0, 1>},
                                                            {dfa__bwd_passes<1, 0>, dfa__bwd_passes<1, 1>}};

dfa_status dfa__cuda_bwd_with(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, const void *o,
                              const float *lse, const void *dout, void *dq, void *dk, void *dv, void *scratch,
                              const dfa__cuda_dkv16 *dkv16, dfa__bwd_launcher kv, int kv_dq, cudaStream_t stream,
                              const char *fn) {
    dfa__cuda_dkv16 direct = {NULL, NULL, 0, 0};
    if (dkv16 && dkv16->dk && dkv16->dv && dkv16->to > dkv16->from) direct = *dkv16;
    if (direct.dk && !s->out_f32)
        return dfa__fail(DFA_ERR_INTERNAL, fn, "16-bit keys of dk, dv in a call without float32 outputs");
    if ((uintptr_t)scratch % 256)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "scratch = %p is not 256-byte aligned", scratch);
    if (kv_dq == 1 && (s->flags & DFA_FLAG_DETERMINISTIC))
        return dfa__fail(DFA_ERR_INTERNAL, fn, "an unordered dq kernel for a deterministic call");
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    size_t acc_off, sem_off;
    const size_t bytes = dfa__bwd_scratch_for(s, kv_dq, &acc_off, &sem_off);
    void *buf = scratch;
    cudaError_t e;
    if (!scratch && (e = cudaMallocAsync(&buf, bytes, stream)) != cudaSuccess)
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
    p.dq_acc = !kv_dq ? (float *)0 : s->out_f32 ? (float *)dq : (float *)((char *)buf + acc_off);
    p.dq_sem = kv_dq == 2 ? (int *)((char *)buf + sem_off) : (int *)0;
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    p.sh = *s;
    p.scale_log2 = s->scale * DFA__LOG2E;
    p.qsplit = 1;      /* the key-block launcher may split (launch_bwd.cuh, heuristics.h) */
    p.kv_sections = 0; /* and chooses the grid's sections */

    dfa_status st = DFA_OK;
    /* the D kernel zeroes the accumulator where it can store 16 bytes at a time (bwd_mma.cuh) and
       walks rows of dq's width (not with a value head dim of its own) */
    const int zero_dq = kv_dq && (uintptr_t)p.dq_acc % 16 == 0 && s->head_dim_v == s->head_dim;
    if (kv_dq && !zero_dq &&
        (e = cudaMemsetAsync(p.dq_acc, 0, rows * (size_t)s->head_dim * sizeof(float), stream)) != cudaSuccess)
        st = dfa__cuda_fail(e, fn, "cudaMemsetAsync of the dq accumulator");
    if (!st && kv_dq == 2 && (e = cudaMemsetAsync(p.dq_sem, 0, bytes - sem_off, stream)) != cudaSuccess)
        st = dfa__cuda_fail(e, fn, "cudaMemsetAsync of the dq tile counters");
    if (!st) st = dfa__bwd_passes_of[s->bf16 != 0][s->out_f32 != 0](p, direct, kv, kv_dq, zero_dq, stream, fn);
    /* dsinks from the D pass's sums, while the scratch still holds them (sinks.cu) */
    if (!st && s->dsinks)
        st = dfa__cuda_dsinks(s->bf16, s->batch, s->seqlen_q, s->num_heads, s->head_dim_v, NULL, NULL, p.dsum, lse,
                              s->sinks, s->dsinks, NULL, stream, fn);
    if (!scratch) {
        e = cudaFreeAsync(buf, stream);
        if (!st && e != cudaSuccess) st = dfa__cuda_fail(e, fn, "cudaFreeAsync of the backward scratch");
    }
    return st;
}

/* The key-block kernels: [wgmma][dq mode][bf16][out_f32] (mma.sync has no in-order mode). */
#define DFA__KV_KERNELS(F, M2)                                                                                    \
    {{{F<0, 0, 0>, F<0, 0, 1>}, {F<0, 1, 0>, F<0, 1, 1>}},                                                      \
     {{F<1, 0, 0>, F<1, 0, 1>}, {F<1, 1, 0>, F<1, 1, 1>}},                                                      \
     {{F<M2, 0, 0>, F<M2, 0, 1>}, {F<M2, 1, 0>, F<M2, 1, 1>}}}
static const dfa__bwd_launcher dfa__bwd_kv_kernels[2][3][2][2] = {DFA__KV_KERNELS(dfa__bwd_kv_mma, 0),
                                                                   DFA__KV_KERNELS(dfa__bwd_kv_ws, 2)};
/* softcapped calls on the Hopper kernel (attn_bwd_softcap.cu); the mma.sync launchers take the
   softcap themselves */
static const dfa__bwd_launcher dfa__bwd_kv_kernels_softcapped[3][2][2] = DFA__KV_KERNELS(dfa__bwd_kv_ws_softcapped, 2);
/* head dims 256 and 192 / 128 on the Hopper kernels, softcapped or not (attn_bwd_wide.cu) */
static const dfa__bwd_launcher dfa__bwd_kv_kernels_wide[3][2][2] = DFA__KV_KERNELS(dfa__bwd_kv_wide, 2);
#undef DFA__KV_KERNELS

extern "C" dfa_status dfa__cuda_bwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v,
                                    const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                    void *scratch, const dfa__cuda_dkv16 *dkv16, cudaStream_t stream,
                                    const char *fn) {
    int wgmma = 0;
    const dfa_status st = dfa__cuda_pick_family(s, dfa__cuda_forced_family(), &wgmma, fn);
    if (st) return st;
    const int dq_mode = dfa__bwd_dq_mode(s, wgmma);
    /* every key handed to 16-bit outputs: the 16-bit kernel itself (heuristics.h) */
    const int all16 = dfa__bwd_all_keys_16bit(s, dq_mode, dkv16);
    return dfa__cuda_bwd_with(s, q, k, v, o, lse, dout, dq, all16 ? dkv16->dk : dk, all16 ? dkv16->dv : dv, scratch,
                              all16 ? NULL : dkv16,
                              wgmma && dfa__bwd_wide_for(s->head_dim, s->head_dim_v)
                                  ? dfa__bwd_kv_kernels_wide[dq_mode][s->bf16 != 0][s->out_f32 && !all16]
                              : wgmma && s->softcap > 0.0f
                                  ? dfa__bwd_kv_kernels_softcapped[dq_mode][s->bf16 != 0][s->out_f32 && !all16]
                                  : dfa__bwd_kv_kernels[wgmma][dq_mode][s->bf16 != 0][s->out_f32 && !all16],
                              dq_mode, stream, fn);
}
