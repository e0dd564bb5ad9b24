/* Internal (CUDA sources only): the forward launchers, as templates. The library
 * (attn_fwd.cu) instantiates the kernels it ships, chosen by heuristics.h; the kernel lab
 * (lab/gpu) instantiates the same launchers with configurations of its own. */
#ifndef DFA_CUDA_LAUNCH_FWD_CUH
#define DFA_CUDA_LAUNCH_FWD_CUH

#include "fwd_mma.cuh"
#include "fwd_wgmma.cuh"
#include "fwd_wgmma_persistent.cuh"
#include "heuristics.h"
#include "launch.cuh"
#include "tmap.h"

/* One forward kernel (of a family, every head dim it takes) on a stream. */
typedef dfa_status (*dfa__fwd_launcher)(const dfa__fwd_params &p, cudaStream_t st, const char *fn);

/* The kernels' parameters: the shape, copied whole, and the tensors. */
static inline dfa__fwd_params dfa__fwd_params_of(const dfa__cuda_shape *s, const void *q, const void *k,
                                                 const void *v, void *o, float *lse, long long l2_bytes) {
    dfa__fwd_params p;
    p.q = (const uint16_t *)q;
    p.k = (const uint16_t *)k;
    p.v = (const uint16_t *)v;
    p.o = o;
    p.lse = lse;
    p.sh = *s;
    p.scale_log2 = s->scale * DFA__LOG2E;
    const int forced = dfa__cuda_forced_l2_heads(), heads = s->batch * s->num_heads;
    p.l2_heads = forced > 0 ? (forced < heads ? forced : heads) : dfa__fwd_l2_heads(s, l2_bytes);
    return p;
}

template <int DP, int NW, int BN, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
static dfa_status dfa__launch_fwd_mma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_mma_cfg<DP, NW, BN, DV> C;
    const long long tiles = (long long)p.sh.batch * p.sh.num_heads * ((p.sh.seqlen_q + C::BM - 1) / C::BM);
    return dfa__launch(dfa__fwd_mma_kernel<DP, NW, BN, BF16, OUT32, DV, SOFTCAP>, tiles, C::NT, C::SMEM, st, fn, "query tiles",
                       "forward kernel launch", p);
}

/* The forward's tensor maps: q in boxes of bm rows, k and v in boxes of kv_rows; v's rows DV wide. */
static inline dfa_status dfa__fwd_tmaps(const dfa__fwd_params &p, int bf16, int D, int DV, int bm, int kv_rows,
                                        CUtensorMap *tq, CUtensorMap *tk, CUtensorMap *tv, const char *fn) {
    if (!dfa__tmap(tq, p.q, bf16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, bm) ||
        !dfa__tmap(tk, p.k, bf16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, kv_rows) ||
        !dfa__tmap(tv, p.v, bf16, DV, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, kv_rows))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    return DFA_OK;
}

template <class K, int BF16>
static dfa_status dfa__launch_fwd_wgmma_persistent(const dfa__fwd_params &p, long long tiles, int sms, cudaStream_t st,
                                                   const char *fn);

/* The Hopper forward of configuration K (heuristics.h): the persistent kernel where K has it,
   o is 16-bit and the grid has more query tiles than SMs (dfa__fwd_persistent_for), else the
   one-tile kernel. */
template <class K, int BF16, int OUT32>
static dfa_status dfa__launch_fwd_wgmma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    constexpr int D = K::D, DV = K::DV, BN = K::BN;
    typedef dfa__fwd_wgmma_layout<D, BN, K::NCW, DV> C;
    const int nm = (p.sh.seqlen_q + C::BM - 1) / C::BM;
    const long long tiles = (long long)p.sh.batch * p.sh.num_heads * nm;
    if constexpr (K::PERSISTENT && !OUT32) {
        dfa_status sms_st = DFA_OK;
        const int sms = dfa__cuda_device_attr(cudaDevAttrMultiProcessorCount, fn, &sms_st);
        if (sms < 0) return sms_st;
        if (dfa__fwd_persistent_for(tiles, sms)) return dfa__launch_fwd_wgmma_persistent<K, BF16>(p, tiles, sms, st, fn);
    }
    CUtensorMap tq, tk, tv, to;
    const dfa_status st_maps = dfa__fwd_tmaps(p, BF16, D, DV, C::BM, BN, &tq, &tk, &tv, fn);
    if (st_maps) return st_maps;
    /* o by TMA (16-bit o): boxes of one consumer warpgroup's 64 rows; otherwise unused */
    if (K::TMA_O && !OUT32) {
        if (!dfa__tmap(&to, p.o, BF16, DV, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, 64))
            return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for o");
    } else {
        to = tq;
    }
    return dfa__launch(dfa__fwd_wgmma_kernel<K, BF16, OUT32>, tiles, C::NT, C::SMEM, st, fn, "query tiles",
                       "forward kernel launch", tq, tk, tv, to, p);
}

/* The persistent forward (fwd_wgmma_persistent.cuh) on `sms` CTAs. Its tile counter lives in the
   caller's scratch (p.sh.fwd_counter) or else in 256 bytes of stream-ordered scratch
   (cudaMallocAsync on st, given back with cudaFreeAsync after the launch), zeroed on st, so that
   calls on several streams at once never share one. */
template <class K, int BF16>
static dfa_status dfa__launch_fwd_wgmma_persistent(const dfa__fwd_params &p, long long tiles, int sms, cudaStream_t st,
                                                   const char *fn) {
    constexpr int D = K::D, BN = K::BN;
    typedef dfa__fwd_wgmma_layout<D, BN, K::NCW> C;
    typedef dfa__fwd_persist_layout<D, BN, K::NCW> PC;
    if (tiles > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld)", tiles);
    CUtensorMap tq, tk, tv, to;
    dfa_status s = dfa__fwd_tmaps(p, BF16, D, D, C::BM, BN, &tq, &tk, &tv, fn);
    if (s) return s;
    /* o by TMA: boxes of one consumer warpgroup's 64 rows */
    if (!dfa__tmap(&to, p.o, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, 64))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for o");
    void *counter = p.sh.fwd_counter;
    cudaError_t e = cudaSuccess;
    if (!counter && (e = cudaMallocAsync(&counter, 256, st)) != cudaSuccess)
        return dfa__cuda_fail(e, fn, "cudaMallocAsync of the forward's tile counter");
    e = cudaMemsetAsync(counter, 0, sizeof(unsigned int), st);
    s = e != cudaSuccess ? dfa__cuda_fail(e, fn, "zeroing the forward's tile counter")
                         : dfa__launch(dfa__fwd_wgmma_persistent_kernel<K, BF16>, (long long)sms, C::NT, PC::SMEM, st,
                                       fn, "query tiles", "persistent forward kernel launch", tq, tk, tv, to, p,
                                       (unsigned int *)counter);
    if (counter != (void *)p.sh.fwd_counter) {
        e = cudaFreeAsync(counter, st);
        if (!s && e != cudaSuccess) s = dfa__cuda_fail(e, fn, "cudaFreeAsync of the forward's tile counter");
    }
    return s;
}

/* The mma.sync forward, any head dim (padded to 64, 128 or 256), and the value head dims of
   their own of dfa__mma_v_pair_for (padded to DV); a softcap with value head dim = head dim
   (dfa__cuda_check_softcap). */
template <int DP, int BF16, int OUT32, int DV = DP>
static dfa_status dfa__fwd_mma_of(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_mma_config<DP, DV> K;
    if constexpr (DV == DP)
        if (p.sh.softcap > 0.0f) return dfa__launch_fwd_mma<DP, K::NW, K::BN, BF16, OUT32, DV, true>(p, st, fn);
    return dfa__launch_fwd_mma<DP, K::NW, K::BN, BF16, OUT32, DV>(p, st, fn);
}
template <int BF16, int OUT32>
static dfa_status dfa__fwd_mma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.softcap > 0.0f && p.sh.head_dim_v != p.sh.head_dim) return dfa__cuda_check_softcap(p.sh.softcap, p.sh.head_dim, p.sh.head_dim_v, fn);
    if (p.sh.head_dim_v != p.sh.head_dim) switch (dfa__mma_v_pair_for(p.sh.head_dim, p.sh.head_dim_v)) {
        case 1: return dfa__fwd_mma_of<128, BF16, OUT32, 64>(p, st, fn);
        case 2: return dfa__fwd_mma_of<192, BF16, OUT32, 128>(p, st, fn);
        default: return dfa__cuda_fail_head_dim_v(p.sh.head_dim, p.sh.head_dim_v, fn);
        }
    if (p.sh.head_dim <= 64) return dfa__fwd_mma_of<64, BF16, OUT32>(p, st, fn);
    if (p.sh.head_dim <= 128) return dfa__fwd_mma_of<128, BF16, OUT32>(p, st, fn);
    return dfa__fwd_mma_of<256, BF16, OUT32>(p, st, fn);
}

/* The Hopper forward, head dims 64, 128 and 256 and 192 / 128 (value head dim 128), each in its
   configuration (heuristics.h; the kernel lab passes configurations of its own). */
template <int BF16, int OUT32, class K64 = dfa__fwd_wgmma_config<64>, class K128 = dfa__fwd_wgmma_config<128>,
          class K256 = dfa__fwd_wgmma_config<256>, class K192 = dfa__fwd_wgmma_config<192, 128>>
static dfa_status dfa__fwd_wgmma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim_v != p.sh.head_dim) { /* 192 / 128 only, without a softcap (dfa__cuda_pick_family) */
        if (p.sh.head_dim != K192::D || p.sh.head_dim_v != K192::DV || p.sh.softcap > 0.0f)
            return dfa__fail(DFA_ERR_INTERNAL, fn, "the Hopper forward for head dims %d / %d", p.sh.head_dim,
                             p.sh.head_dim_v);
        return dfa__launch_fwd_wgmma<K192, BF16, OUT32>(p, st, fn);
    }
    if (p.sh.softcap > 0.0f) {
        if (p.sh.head_dim == 64) return dfa__launch_fwd_wgmma<dfa__fwd_softcapped<K64>, BF16, OUT32>(p, st, fn);
        if (p.sh.head_dim == 256) return dfa__launch_fwd_wgmma<dfa__fwd_softcapped<K256>, BF16, OUT32>(p, st, fn);
        return dfa__launch_fwd_wgmma<dfa__fwd_softcapped<K128>, BF16, OUT32>(p, st, fn);
    }
    if (p.sh.head_dim == 64) return dfa__launch_fwd_wgmma<K64, BF16, OUT32>(p, st, fn);
    if (p.sh.head_dim == 256) return dfa__launch_fwd_wgmma<K256, BF16, OUT32>(p, st, fn);
    return dfa__launch_fwd_wgmma<K128, BF16, OUT32>(p, st, fn);
}

#endif
