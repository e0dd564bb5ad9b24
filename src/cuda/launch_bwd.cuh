/* Internal (CUDA sources only): the backward launchers, as templates. The library
 * (attn_bwd.cu) instantiates the kernels it ships; the kernel lab (bench/gpu)
 * instantiates the variants it measures them against and runs them through
 * dfa__cuda_bwd_with. */
#ifndef DFA_CUDA_LAUNCH_BWD_CUH
#define DFA_CUDA_LAUNCH_BWD_CUH

#include <string.h>

#include "bwd_mma.cuh"
#include "bwd_ws.cuh"
#include "launch.cuh"
#include "tmap.h"

/* One backward kernel (of a family, every head dim it takes) on a stream. dkv16: the keys whose
   dk, dv go to 16-bit outputs (OUT32 kernels of the library; others ignore it; launch.h). */
typedef dfa_status (*dfa__bwd_launcher)(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                        const char *fn);

template <int DP, int BN, int BM, int DSPLIT, int ATOMIC, int BF16, int OUT32>
static dfa_status dfa__launch_bwd_kv(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    typedef dfa__bwd_kv_cfg<DP, BN, BM, DSPLIT, ATOMIC> C;
    const long long ctas = (long long)((p.sh.seqlen_k + BN - 1) / BN) * p.sh.batch * p.sh.num_kv_heads;
    return dfa__launch(dfa__bwd_kv_kernel<DP, BN, BM, DSPLIT, ATOMIC, BF16, OUT32>, ctas, C::NT, C::SMEM, st, fn,
                       "key tiles", "backward key-block kernel launch", p, dkv16);
}

template <int DP, int NW, int BN, int BF16, int OUT32>
static dfa_status dfa__launch_bwd_dq(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_dq_cfg<DP, NW, BN> C;
    const long long ctas = (long long)p.sh.batch * p.sh.num_heads * ((p.sh.seqlen_q + C::BM - 1) / C::BM);
    return dfa__launch(dfa__bwd_dq_kernel<DP, NW, BN, BF16, OUT32>, ctas, C::NT, C::SMEM, st, fn, "query tiles",
                       "backward dq kernel launch", p);
}

/* Query blocks a CTA of the Hopper key-block kernel should walk at least: below that its K/V
   load and pipeline fill are not paid back (a key tile's split shares; bwd_ws.cuh QSPLIT). */
#define DFA__BWD_QSPLIT_MIN_ITERS 8

/* CTAs per key tile for the Hopper kernel's float32 instances (bwd_ws.cuh QSPLIT). A grid of
   fewer key tiles than SMs (the executor's narrow blocks: a document's tail against the next
   chunk's rows, 4 tiles x 8 kv heads in the trainer's shape, each CTA walking thousands of
   query rows) leaves most SMs idle; splitting each tile's query blocks over several CTAs, their
   dK, dV added into zeroed outputs, fills them. ctas: key tiles of the grid; iters: the most
   query blocks (times the group's heads) a tile may walk. Never with keys handed to 16-bit
   outputs (whole or not, they are written once) nor in the deterministic mode (DQ_MODE != 1):
   float32 additions in any order. A test may force the count (dfa__cuda_force_bwd_qsplit). */
static inline int dfa__bwd_qsplit_for(long long ctas, long long iters, int sms) {
    const int forced = dfa__cuda_forced_bwd_qsplit();
    if (forced > 0) return forced;
    if (ctas <= 0 || ctas * 2 > sms) return 1;
    long long n = sms / ctas, by_iters = iters / DFA__BWD_QSPLIT_MIN_ITERS;
    n = n < by_iters ? n : by_iters;
    return n < 1 ? 1 : (int)n;
}

/* Query rows (seqlen_q times the group's heads: what a key tile's CTA walks at most) up to which
   the unmasked d = 128 kernel stores dK and dV by TMA (VARIANT bit 8). The epilogue is a CTA's
   share in inverse proportion to the blocks it walks: with direct stores from registers (16 of
   each sector's 32 bytes used, ncu) it took 10% of the SMs' time at causal 2k. By TMA (1305
   against 1049, before bit 15 joined both): causal 2k +4.3 to +5.8%, 4k +3.0%, non-causal 2k
   +2.9 to +3.0%, 4k +5.5%; 8k and 32k level within the spread, where the direct stores' main loop
   (scheduled apart by ptxas) was once 1.9% faster at 32k (sessions 17 and 18, bench/gpu/NOTES.md). */
#define DFA__BWD_TMA_DKV_MAX_ROWS 4096

static inline bool dfa__bwd_tma_dkv_for(long long rows) {
    const int forced = dfa__cuda_forced_bwd_dkv_tma();
    return forced ? forced == 2 : rows <= DFA__BWD_TMA_DKV_MAX_ROWS;
}

template <int D, int BM, int DQ_MODE, int BF16, int OUT32, int VARIANT_ARG, int VARIANT_MASKED_ARG>
static dfa_status dfa__launch_bwd_ws(const dfa__bwd_params &p_in, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    typedef dfa__bwd_ws_cfg<D, BM> C;
    /* -1: the library's variants for this head dim */
    constexpr int VARIANT = VARIANT_ARG < 0 ? DFA__BWD_WS_LIBRARY_UNMASKED(D) : VARIANT_ARG;
    constexpr int VARIANT_MASKED = VARIANT_MASKED_ARG < 0 ? DFA__BWD_WS_LIBRARY_MASKED(D) : VARIANT_MASKED_ARG;
    long long ctas = (long long)((p_in.sh.seqlen_k + C::BN - 1) / C::BN) * p_in.sh.batch * p_in.sh.num_kv_heads;
    dfa__bwd_params p = p_in;
    p.qsplit = 1;
    if (OUT32 && DQ_MODE == 1 && !(dkv16.to > dkv16.from && dkv16.dk)) {
        dfa_status sms_st = DFA_OK;
        const int sms = dfa__cuda_device_attr(cudaDevAttrMultiProcessorCount, fn, &sms_st);
        if (sms < 0) return sms_st;
        const long long iters = (long long)((p.sh.seqlen_q + BM - 1) / BM) * (p.sh.num_heads / p.sh.num_kv_heads);
        p.qsplit = dfa__bwd_qsplit_for(ctas, iters, sms);
        if (p.qsplit > 1) {
            const size_t bytes = (size_t)p.sh.batch * p.sh.seqlen_k * p.sh.num_kv_heads * p.sh.head_dim * sizeof(float);
            cudaError_t e = cudaMemsetAsync(p.dk, 0, bytes, st);
            if (e == cudaSuccess) e = cudaMemsetAsync(p.dv, 0, bytes, st);
            if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaMemsetAsync of dk, dv before a split backward");
            ctas *= p.qsplit;
        }
    }
    CUtensorMap tq, tk, tv, tdo, tdq;
    memset(&tdq, 0, sizeof tdq); /* not read without dQ in the kernel */
    if (!dfa__tmap(&tq, p.q, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        (DQ_MODE && !dfa__tmap_f32(&tdq, p.dq_acc, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM)))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    const bool masked = DQ_MODE != 2 && p.sh.masked; /* the in-order dq is never masked (attn_bwd.cu) */
    /* the library's unmasked d = 128 instance with 16-bit outputs and dQ as it comes: dK, dV by TMA
       for short walks (DFA__BWD_TMA_DKV_MAX_ROWS); the other instances have one variant each */
    constexpr int VARIANT_SHORT = VARIANT_ARG < 0 && D == 128 && DQ_MODE == 1 && !OUT32 ? (VARIANT | 256) : VARIANT;
    const bool short_walk = VARIANT_SHORT != VARIANT && !masked &&
                            dfa__bwd_tma_dkv_for((long long)p.sh.seqlen_q * (p.sh.num_heads / p.sh.num_kv_heads));
    const int variant = masked ? VARIANT_MASKED : short_walk ? VARIANT_SHORT : VARIANT;
    /* dK and dV by TMA (VARIANT bit 8, 16-bit outputs): boxes of one consumer's 64 keys; otherwise unused */
    CUtensorMap tdk = tk, tdv = tv;
    /* (float32 dk, dv: over the 16-bit outputs that whole key tiles go to, if any; bwd_ws.cuh TMA_DKV16) */
    const void *dk16 = OUT32 ? dkv16.dk : p.dk, *dv16 = OUT32 ? dkv16.dv : p.dv;
    if ((variant & 256) && (!OUT32 || dkv16.to > dkv16.from) &&
        (!dfa__tmap(&tdk, dk16, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, 64) ||
         !dfa__tmap(&tdv, dv16, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, 64)))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for dk or dv");
    if (masked)
        return dfa__launch(dfa__bwd_ws_kernel<D, BM, DQ_MODE, BF16, OUT32, DQ_MODE != 2, VARIANT_MASKED>, ctas, C::NT, C::SMEM, st, fn,
                           "key tiles", "backward key-block kernel launch", tq, tk, tv, tdo, tdq, tdk, tdv, p, dkv16);
    if (short_walk)
        return dfa__launch(dfa__bwd_ws_kernel<D, BM, DQ_MODE, BF16, OUT32, 0, VARIANT_SHORT>, ctas, C::NT, C::SMEM, st, fn,
                           "key tiles", "backward key-block kernel launch", tq, tk, tv, tdo, tdq, tdk, tdv, p, dkv16);
    return dfa__launch(dfa__bwd_ws_kernel<D, BM, DQ_MODE, BF16, OUT32, 0, VARIANT>, ctas, C::NT, C::SMEM, st, fn, "key tiles",
                       "backward key-block kernel launch", tq, tk, tv, tdo, tdq, tdk, tdv, p, dkv16);
}

/* The mma.sync key-block kernel, any head dim; ATOMIC: dq through float32 atomics too. */
template <int ATOMIC, int BF16, int OUT32>
static dfa_status dfa__bwd_kv_mma(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                  const char *fn) {
    if (p.sh.head_dim <= 64) return dfa__launch_bwd_kv<64, 128, 64, 1, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
    if (p.sh.head_dim <= 128) return dfa__launch_bwd_kv<128, 128, 64, 1, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
    return dfa__launch_bwd_kv<256, 64, 32, 2, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
}

/* The warp-specialised Hopper key-block kernel (bwd_ws.cuh), head dims 64 (128-row query
   blocks) and 128 (64-row: 128 is over the register budget). DQ_MODE: 0 no dQ (a dq pass
   follows), 1 dQ added as it comes, 2 in key-block order (deterministic). VARIANT: the kernel
   lab's (bwd_ws.cuh); -1 (the default): the library's for the head dim. VARIANT_MASKED: the
   masked calls' (documents, windows); with the library's VARIANT the library's masked one (-1:
   per head dim), else VARIANT. */
template <int DQ_MODE, int BF16, int OUT32, int VARIANT = -1, int VARIANT_MASKED = VARIANT < 0 ? -1 : VARIANT>
static dfa_status dfa__bwd_kv_ws(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                 const char *fn) {
    if (p.sh.head_dim == 64)
        return dfa__launch_bwd_ws<64, 128, DQ_MODE, BF16, OUT32, VARIANT, VARIANT_MASKED>(p, dkv16, st, fn);
    return dfa__launch_bwd_ws<128, 64, DQ_MODE, BF16, OUT32, VARIANT, VARIANT_MASKED>(p, dkv16, st, fn);
}

/* The deterministic dq pass (mma.sync), any head dim. */
template <int BF16, int OUT32>
static dfa_status dfa__bwd_dq_mma(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim <= 64) return dfa__launch_bwd_dq<64, 4, 64, BF16, OUT32>(p, st, fn);
    if (p.sh.head_dim <= 128) return dfa__launch_bwd_dq<128, 4, 64, BF16, OUT32>(p, st, fn);
    return dfa__launch_bwd_dq<256, 4, 32, BF16, OUT32>(p, st, fn);
}

/* One backward around the key-block kernel `kv`: scratch (the caller's, or stream-ordered), the
   dq accumulator (and with kv_dq == 2 its tile counters) zeroed, D and base-2 lse, kv, then the
   dq pass (kv_dq == 0: kv computes no dq) or the dq conversion. kv_dq: 0 no dq in kv, 1 added
   in any order (not with DFA_FLAG_DETERMINISTIC), 2 in a fixed order. Defined by the library
   (attn_bwd.cu); dfa__cuda_bwd is this with the library's own kernel. dkv16 as in dfa__cuda_bwd. */
dfa_status dfa__cuda_bwd_with(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, const void *o,
                              const float *lse, const void *dout, void *dq, void *dk, void *dv, void *scratch,
                              const dfa__cuda_dkv16 *dkv16, dfa__bwd_launcher kv, int kv_dq, cudaStream_t stream,
                              const char *fn);

#endif
