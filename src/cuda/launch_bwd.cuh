/* Internal (CUDA sources only): the backward launchers, as templates. The library
 * (attn_bwd.cu) instantiates the kernels it ships, chosen by heuristics.h; the kernel lab
 * (lab/gpu) instantiates the same launchers with configurations of its own and runs them
 * through dfa__cuda_bwd_with. */
#ifndef DFA_CUDA_LAUNCH_BWD_CUH
#define DFA_CUDA_LAUNCH_BWD_CUH

#include <string.h>

#include "bwd_mma.cuh"
#include "bwd_ws.cuh"
#include "bwd_ws_wide.cuh"
#include "heuristics.h"
#include "launch.cuh"
#include "tmap.h"

/* One backward kernel (of a family, every head dim it takes) on a stream. dkv16: the keys whose
   dk, dv go to 16-bit outputs (OUT32 kernels of the library; others ignore it; launch.h). */
typedef dfa_status (*dfa__bwd_launcher)(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                        const char *fn);

template <int DP, int BN, int BM, int DSPLIT, int ATOMIC, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
static dfa_status dfa__launch_bwd_kv(const dfa__bwd_params &p_in, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    typedef dfa__bwd_kv_cfg<DP, BN, BM, DSPLIT, ATOMIC, DV> C;
    const long long ctas = (long long)((p_in.sh.seqlen_k + BN - 1) / BN) * p_in.sh.batch * p_in.sh.num_kv_heads;
    dfa__bwd_params p = p_in;
    p.kv_sections = dfa__bwd_sections_for(&p.sh, ATOMIC); /* the grid's order (heuristics.h) */
    return dfa__launch(dfa__bwd_kv_kernel<DP, BN, BM, DSPLIT, ATOMIC, BF16, OUT32, DV, SOFTCAP>, ctas, C::NT, C::SMEM, st, fn,
                       "key tiles", "backward key-block kernel launch", p, dkv16);
}

template <int DP, int NW, int BN, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
static dfa_status dfa__launch_bwd_dq(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_dq_cfg<DP, NW, BN, DV> C;
    const long long ctas = (long long)p.sh.batch * p.sh.num_heads * ((p.sh.seqlen_q + C::BM - 1) / C::BM);
    return dfa__launch(dfa__bwd_dq_kernel<DP, NW, BN, BF16, OUT32, DV, SOFTCAP>, ctas, C::NT, C::SMEM, st, fn, "query tiles",
                       "backward dq kernel launch", p);
}

/* The Hopper key-block kernel of configuration K (bwd_ws.cuh, heuristics.h) with its tensor maps.
   The float32 instances that add dq as it comes may split each key tile's query blocks over
   several CTAs (dfa__bwd_qsplit_for), their dK, dV added into outputs zeroed here first. */
template <class K, int DQ_MODE, int BF16, int OUT32>
static dfa_status dfa__launch_bwd_ws(const dfa__bwd_params &p_in, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    constexpr int D = K::D, DV = K::DV, BM = K::BM;
    typedef dfa__bwd_ws_layout<D, BM, DV> C;
    long long ctas = (long long)((p_in.sh.seqlen_k + C::BN - 1) / C::BN) * p_in.sh.batch * p_in.sh.num_kv_heads;
    dfa__bwd_params p = p_in;
    p.kv_sections = dfa__bwd_sections_for(&p.sh, DQ_MODE); /* the grid's order (heuristics.h) */
    p.qsplit = 1;
    if (OUT32 && DQ_MODE == 1 && !(dkv16.to > dkv16.from && dkv16.dk)) {
        dfa_status sms_st = DFA_OK;
        const int sms = dfa__cuda_device_attr(cudaDevAttrMultiProcessorCount, fn, &sms_st);
        if (sms < 0) return sms_st;
        const long long iters = (long long)((p.sh.seqlen_q + BM - 1) / BM) * (p.sh.num_heads / p.sh.num_kv_heads);
        p.qsplit = dfa__bwd_qsplit_for(ctas, iters, sms);
        if (p.qsplit > 1) {
            const size_t rows = (size_t)p.sh.batch * p.sh.seqlen_k * p.sh.num_kv_heads;
            cudaError_t e = cudaMemsetAsync(p.dk, 0, rows * D * sizeof(float), st);
            if (e == cudaSuccess) e = cudaMemsetAsync(p.dv, 0, rows * DV * sizeof(float), st);
            if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaMemsetAsync of dk, dv before a split backward");
            ctas *= p.qsplit;
        }
    }
    CUtensorMap tq, tk, tv, tdo, tdq;
    memset(&tdq, 0, sizeof tdq); /* not read without dQ in the kernel */
    if (!dfa__tmap(&tq, p.q, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, DV, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, DV, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        (DQ_MODE && !dfa__tmap_f32(&tdq, p.dq_acc, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM)))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    /* dK and dV by TMA (16-bit outputs; float32 instances: the 16-bit outputs that whole key tiles
       go to, if any): boxes of one consumer's 64 keys; otherwise unused */
    CUtensorMap tdk = tk, tdv = tv;
    const void *dk16 = OUT32 ? dkv16.dk : p.dk, *dv16 = OUT32 ? dkv16.dv : p.dv;
    if (K::TMA_DKV && (!OUT32 || dkv16.to > dkv16.from) &&
        (!dfa__tmap(&tdk, dk16, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, 64) ||
         !dfa__tmap(&tdv, dv16, BF16, DV, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, 64)))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for dk or dv");
    return dfa__launch(dfa__bwd_ws_kernel<K, DQ_MODE, BF16, OUT32>, ctas, C::NT, C::SMEM, st, fn, "key tiles",
                       "backward key-block kernel launch", tq, tk, tv, tdo, tdq, tdk, tdv, p, dkv16);
}

/* The mma.sync key-block kernel, any head dim, and the value head dims of their own of
   dfa__mma_v_pair_for (padded to DV); ATOMIC: dq through float32 atomics too. A softcap runs
   with value head dim = head dim (dfa__cuda_check_softcap). */
template <int DP, int ATOMIC, int BF16, int OUT32, int DV = DP>
static dfa_status dfa__bwd_kv_mma_of(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    typedef dfa__bwd_kv_mma_config<DP, DV> K;
    if constexpr (DV == DP)
        if (p.sh.softcap > 0.0f)
            return dfa__launch_bwd_kv<DP, K::BN, K::BM, K::DSPLIT, ATOMIC, BF16, OUT32, DV, true>(p, dkv16, st, fn);
    return dfa__launch_bwd_kv<DP, K::BN, K::BM, K::DSPLIT, ATOMIC, BF16, OUT32, DV>(p, dkv16, st, fn);
}
template <int ATOMIC, int BF16, int OUT32>
static dfa_status dfa__bwd_kv_mma(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                  const char *fn) {
    if (p.sh.softcap > 0.0f && p.sh.head_dim_v != p.sh.head_dim)
        return dfa__cuda_check_softcap(p.sh.softcap, p.sh.head_dim, p.sh.head_dim_v, fn);
    if (p.sh.head_dim_v != p.sh.head_dim) switch (dfa__mma_v_pair_for(p.sh.head_dim, p.sh.head_dim_v)) {
        case 1: return dfa__bwd_kv_mma_of<128, ATOMIC, BF16, OUT32, 64>(p, dkv16, st, fn);
        case 2: return dfa__bwd_kv_mma_of<192, ATOMIC, BF16, OUT32, 128>(p, dkv16, st, fn);
        default: return dfa__cuda_fail_head_dim_v(p.sh.head_dim, p.sh.head_dim_v, fn);
        }
    if (p.sh.head_dim <= 64) return dfa__bwd_kv_mma_of<64, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
    if (p.sh.head_dim <= 128) return dfa__bwd_kv_mma_of<128, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
    return dfa__bwd_kv_mma_of<256, ATOMIC, BF16, OUT32>(p, dkv16, st, fn);
}

/* The warp-specialised Hopper key-block kernel (bwd_ws.cuh) of one head dim: the configuration
   Masked for masked calls, Plain otherwise, with dK, dV by TMA for short walks where Plain has
   that form (heuristics.h). DQ_MODE: 0 no dQ (a dq pass follows: masked deterministic calls
   only), 1 dQ added as it comes, 2 in key-block order (deterministic calls without a mask: the
   in-order dQ knows no masks). */
template <class Plain, class Masked, int DQ_MODE, int BF16, int OUT32>
static dfa_status dfa__bwd_ws_of(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                 const char *fn) {
    if ((p.sh.softcap > 0.0f) != Plain::SOFTCAP)
        return dfa__fail(DFA_ERR_INTERNAL, fn, "a Hopper backward %s softcap for a call %s one",
                         Plain::SOFTCAP ? "with" : "without", Plain::SOFTCAP ? "without" : "with");
    if constexpr (DQ_MODE != 2)
        if (p.sh.masked) return dfa__launch_bwd_ws<Masked, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
    if constexpr (DQ_MODE == 0) {
        return dfa__fail(DFA_ERR_INTERNAL, fn, "the Hopper backward without dq for a call without a mask");
    } else {
        if constexpr (Plain::TMA_DKV_SHORT_WALKS && DQ_MODE == 1 && !OUT32)
            if (dfa__bwd_tma_dkv_for((long long)p.sh.seqlen_q * (p.sh.num_heads / p.sh.num_kv_heads)))
                return dfa__launch_bwd_ws<dfa__bwd_ws_short_walk<Plain>, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
        return dfa__launch_bwd_ws<Plain, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
    }
}

/* The Hopper key-block kernel, head dims 64 and 128, in their configurations (heuristics.h; the
   kernel lab passes configurations of its own). */
template <int DQ_MODE, int BF16, int OUT32, class P64 = dfa__bwd_ws_config<64, false>,
          class M64 = dfa__bwd_ws_config<64, true>, class P128 = dfa__bwd_ws_config<128, false>,
          class M128 = dfa__bwd_ws_config<128, true>>
static dfa_status dfa__bwd_kv_ws(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                 const char *fn) {
    if (p.sh.head_dim_v != p.sh.head_dim || (p.sh.head_dim != 64 && p.sh.head_dim != 128))
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the 128-key Hopper backward at head dims %d / %d (it takes 64 and 128)",
                         p.sh.head_dim, p.sh.head_dim_v);
    if (p.sh.head_dim == 64) return dfa__bwd_ws_of<P64, M64, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
    return dfa__bwd_ws_of<P128, M128, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
}

/* The Hopper key-block kernel for softcapped calls: dfa__bwd_kv_ws with the library's
   configurations softcapped (dfa__bwd_softcapped), defined in attn_bwd_softcap.cu for every
   dq mode, element type and output type, a translation unit of its own so that it builds beside
   attn_bwd.cu. */
template <int DQ_MODE, int BF16, int OUT32>
dfa_status dfa__bwd_kv_ws_softcapped(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn);

/* The wide Hopper key-block kernel of configuration K (bwd_ws_wide.cuh, heuristics.h) with its
   tensor maps: Q and K head_dim wide, V and dO head_dim_v wide. */
template <class K, int DQ_MODE, int BF16, int OUT32>
static dfa_status dfa__launch_bwd_wide(const dfa__bwd_params &p_in, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                       const char *fn) {
    typedef dfa__bwd_wide_layout<K::D, K::DV, K::STAGES> C;
    const long long ctas = (long long)((p_in.sh.seqlen_k + C::BN - 1) / C::BN) * p_in.sh.batch * p_in.sh.num_kv_heads;
    dfa__bwd_params p = p_in;
    p.kv_sections = dfa__bwd_sections_for(&p.sh, DQ_MODE);
    p.qsplit = 1;
    CUtensorMap tq, tk, tv, tdo, tdq;
    memset(&tdq, 0, sizeof tdq); /* not read without dQ in the kernel */
    if (!dfa__tmap(&tq, p.q, BF16, K::D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, C::BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, K::DV, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, C::BM) ||
        !dfa__tmap(&tk, p.k, BF16, K::D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, K::DV, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        (DQ_MODE && !dfa__tmap_f32(&tdq, p.dq_acc, K::D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, C::BM)))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    return dfa__launch(dfa__bwd_wide_kernel<K, DQ_MODE, BF16, OUT32>, ctas, C::NT, C::SMEM, st, fn, "key tiles",
                       "backward key-block kernel launch", tq, tk, tv, tdo, tdq, p, dkv16);
}

/* The wide Hopper key-block kernel of configuration Masked for masked calls, Plain otherwise;
   DQ_MODE as in dfa__bwd_ws_of. */
template <class Plain, class Masked, int DQ_MODE, int BF16, int OUT32>
static dfa_status dfa__bwd_wide_masked_or_not(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                              const char *fn) {
    if constexpr (DQ_MODE != 2)
        if (p.sh.masked) return dfa__launch_bwd_wide<Masked, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
    if constexpr (DQ_MODE == 0)
        return dfa__fail(DFA_ERR_INTERNAL, fn, "the Hopper backward without dq for a call without a mask");
    else
        return dfa__launch_bwd_wide<Plain, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
}

/* The wide Hopper key-block kernel at head dim D, softcapped calls in the softcapped form of its
   configurations. */
template <int D, int DQ_MODE, int BF16, int OUT32>
static dfa_status dfa__bwd_wide_of(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                   const char *fn) {
    typedef dfa__bwd_wide_config<D, D, false> P;
    typedef dfa__bwd_wide_config<D, D, true> M;
    if (p.sh.softcap > 0.0f)
        return dfa__bwd_wide_masked_or_not<dfa__bwd_softcapped<P>, dfa__bwd_softcapped<M>, DQ_MODE, BF16, OUT32>(
            p, dkv16, st, fn);
    return dfa__bwd_wide_masked_or_not<P, M, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
}

/* The Hopper key-block kernels of attn_bwd_wide.cu (dfa__bwd_wide_for: the wide kernel at 256,
   the 128-key kernel at 192 / 128), defined there for every dq mode, element type and output
   type (a translation unit of its own, which builds beside attn_bwd.cu). */
template <int DQ_MODE, int BF16, int OUT32>
dfa_status dfa__bwd_kv_wide(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st, const char *fn);

/* The deterministic dq pass (mma.sync), any head dim, and the value head dims of their own of
   dfa__mma_v_pair_for. */
template <int DP, int BF16, int OUT32, int DV = DP>
static dfa_status dfa__bwd_dq_mma_of(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_dq_mma_config<DP, DV> K;
    if constexpr (DV == DP)
        if (p.sh.softcap > 0.0f) return dfa__launch_bwd_dq<DP, K::NW, K::BN, BF16, OUT32, DV, true>(p, st, fn);
    return dfa__launch_bwd_dq<DP, K::NW, K::BN, BF16, OUT32, DV>(p, st, fn);
}
template <int BF16, int OUT32>
static dfa_status dfa__bwd_dq_mma(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.softcap > 0.0f && p.sh.head_dim_v != p.sh.head_dim)
        return dfa__cuda_check_softcap(p.sh.softcap, p.sh.head_dim, p.sh.head_dim_v, fn);
    if (p.sh.head_dim_v != p.sh.head_dim) switch (dfa__mma_v_pair_for(p.sh.head_dim, p.sh.head_dim_v)) {
        case 1: return dfa__bwd_dq_mma_of<128, BF16, OUT32, 64>(p, st, fn);
        case 2: return dfa__bwd_dq_mma_of<192, BF16, OUT32, 128>(p, st, fn);
        default: return dfa__cuda_fail_head_dim_v(p.sh.head_dim, p.sh.head_dim_v, fn);
        }
    if (p.sh.head_dim <= 64) return dfa__bwd_dq_mma_of<64, BF16, OUT32>(p, st, fn);
    if (p.sh.head_dim <= 128) return dfa__bwd_dq_mma_of<128, BF16, OUT32>(p, st, fn);
    return dfa__bwd_dq_mma_of<256, BF16, OUT32>(p, st, fn);
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
