/* Internal (CUDA sources only): the forward launchers, as templates. The library
 * (attn_fwd.cu) instantiates the kernels it ships; the kernel lab (bench/gpu)
 * instantiates the variants it measures them against. */
#ifndef DFA_CUDA_LAUNCH_FWD_CUH
#define DFA_CUDA_LAUNCH_FWD_CUH

#include "fwd_mma.cuh"
#include "fwd_wgmma.cuh"
#include "launch.cuh"
#include "tmap.h"

/* One forward kernel (of a family, every head dim it takes) on a stream. */
typedef dfa_status (*dfa__fwd_launcher)(const dfa__fwd_params &p, cudaStream_t st, const char *fn);

/* (batch, head) pairs per L2 section of the forward's grid (dfa__fwd_tile_order): as many kv
   heads as have K and V in a third of the L2, at least one, times the query heads that share
   each. Measured on the H200 (50 MB of L2; bench/gpu/NOTES.md, runs 13 and 16): one section
   of every head (the old order) 15-22% slower at d = 128; sections for two thirds of the L2
   (FlashAttention-3's choice, 32 MB of the H100's 50) equal or up to 8% slower than a third;
   four thirds slower again. l2_bytes: the device's L2 (cudaDevAttrL2CacheSize). */
static inline int dfa__fwd_l2_heads(const dfa__cuda_shape *s, long long l2_bytes) {
    const long long kv_head = (long long)s->seqlen_k * s->head_dim * 2 * 2, heads = (long long)s->batch * s->num_heads;
    long long n = l2_bytes / 3 / (kv_head > 0 ? kv_head : 1);
    n = (n < 1 ? 1 : n) * (s->num_heads / s->num_kv_heads);
    return (int)(n < heads ? n : heads);
}

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

template <int DP, int NW, int BN, int BF16, int OUT32>
static dfa_status dfa__launch_fwd_mma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_mma_cfg<DP, NW, BN> C;
    const long long tiles = (long long)p.sh.batch * p.sh.num_heads * ((p.sh.seqlen_q + C::BM - 1) / C::BM);
    return dfa__launch(dfa__fwd_mma_kernel<DP, NW, BN, BF16, OUT32>, tiles, C::NT, C::SMEM, st, fn, "query tiles",
                       "forward kernel launch", p);
}

/* The forward's tensor maps: q in boxes of bm rows, k and v in boxes of kv_rows. */
static inline dfa_status dfa__fwd_tmaps(const dfa__fwd_params &p, int bf16, int D, int bm, int kv_rows, CUtensorMap *tq,
                                        CUtensorMap *tk, CUtensorMap *tv, const char *fn) {
    if (!dfa__tmap(tq, p.q, bf16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, bm) ||
        !dfa__tmap(tk, p.k, bf16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, kv_rows) ||
        !dfa__tmap(tv, p.v, bf16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, kv_rows))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    return DFA_OK;
}

template <int D, int BN, int BF16, int PP, int NCW>
static dfa_status dfa__launch_fwd_wgmma_persistent(const dfa__fwd_params &p, long long tiles, int sms, cudaStream_t st,
                                                   const char *fn);

template <int D, int BN, int BF16, int PP, int OUT32, int NCW = 2, int CLUSTER = 1>
static dfa_status dfa__launch_fwd_wgmma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    const int nm = (p.sh.seqlen_q + C::BM - 1) / C::BM;
    /* PP bit 5: the persistent kernel, for 16-bit o without clusters, when there are more query
       tiles than SMs (with fewer, every CTA has one tile anyway); otherwise the one-tile kernel */
    if constexpr ((PP & 32) != 0) {
        if (OUT32 || CLUSTER != 1) return dfa__launch_fwd_wgmma<D, BN, BF16, PP & ~32, OUT32, NCW, CLUSTER>(p, st, fn);
        dfa_status sms_st = DFA_OK;
        const int sms = dfa__cuda_device_attr(cudaDevAttrMultiProcessorCount, fn, &sms_st);
        if (sms < 0) return sms_st;
        const long long tiles = (long long)p.sh.batch * p.sh.num_heads * nm;
        if (tiles <= sms) return dfa__launch_fwd_wgmma<D, BN, BF16, PP & ~32, OUT32, NCW, CLUSTER>(p, st, fn);
        return dfa__launch_fwd_wgmma_persistent<D, BN, BF16, PP, NCW>(p, tiles, sms, st, fn);
    }
    /* pairs of query blocks share their K/V loads when the blocks pair up and see the same keys
       (no mask); otherwise the CTAs run alone */
    if constexpr (CLUSTER == 2)
        if (nm % 2 != 0 || p.sh.masked) return dfa__launch_fwd_wgmma<D, BN, BF16, PP, OUT32, NCW, 1>(p, st, fn);
    const long long tiles = (long long)p.sh.batch * p.sh.num_heads * nm;
    CUtensorMap tq, tk, tv, to;
    const dfa_status st_maps = dfa__fwd_tmaps(p, BF16, D, C::BM, CLUSTER == 2 ? BN / 2 : BN, &tq, &tk, &tv, fn);
    if (st_maps) return st_maps;
    /* o by TMA (PP bit 4, 16-bit o): boxes of one consumer warpgroup's 64 rows; otherwise unused */
    if ((PP & 16) && !OUT32) {
        if (!dfa__tmap(&to, p.o, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, 64))
            return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for o");
    } else {
        to = tq;
    }
    if constexpr (CLUSTER == 2)
        return dfa__launch_cluster(dfa__fwd_wgmma_kernel<D, BN, BF16, PP, OUT32, NCW, CLUSTER>, tiles, 2, C::NT, C::SMEM,
                                   st, fn, "query tiles", "forward kernel launch", tq, tk, tv, to, p);
    else
        return dfa__launch(dfa__fwd_wgmma_kernel<D, BN, BF16, PP, OUT32, NCW, CLUSTER>, tiles, C::NT, C::SMEM, st, fn,
                           "query tiles", "forward kernel launch", tq, tk, tv, to, p);
}

/* The persistent forward (fwd_wgmma.cuh, PP bit 5) on `sms` CTAs. Its tile counter lives in the
   caller's scratch (p.sh.fwd_counter) or else in 256 bytes of stream-ordered scratch
   (cudaMallocAsync on st, given back with cudaFreeAsync after the launch), zeroed on st, so that
   calls on several streams at once never share one. */
template <int D, int BN, int BF16, int PP, int NCW>
static dfa_status dfa__launch_fwd_wgmma_persistent(const dfa__fwd_params &p, long long tiles, int sms, cudaStream_t st,
                                                   const char *fn) {
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    typedef dfa__fwd_persist_cfg<D, BN, NCW, (PP & 16) != 0> PC;
    if (tiles > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld)", tiles);
    CUtensorMap tq, tk, tv, to;
    dfa_status s = dfa__fwd_tmaps(p, BF16, D, C::BM, BN, &tq, &tk, &tv, fn);
    if (s) return s;
    /* o by TMA (PP bit 4): boxes of one consumer warpgroup's 64 rows; otherwise unused */
    if (!(PP & 16)) to = tq;
    else if (!dfa__tmap(&to, p.o, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, 64))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed for o");
    void *counter = p.sh.fwd_counter;
    cudaError_t e = cudaSuccess;
    if (!counter && (e = cudaMallocAsync(&counter, 256, st)) != cudaSuccess)
        return dfa__cuda_fail(e, fn, "cudaMallocAsync of the forward's tile counter");
    e = cudaMemsetAsync(counter, 0, sizeof(unsigned int), st);
    s = e != cudaSuccess ? dfa__cuda_fail(e, fn, "zeroing the forward's tile counter")
                         : dfa__launch(dfa__fwd_wgmma_persistent_kernel<D, BN, BF16, PP, NCW>, (long long)sms, C::NT,
                                       PC::SMEM, st, fn, "query tiles", "persistent forward kernel launch", tq, tk, tv, to, p,
                                       (unsigned int *)counter);
    if (counter != (void *)p.sh.fwd_counter) {
        e = cudaFreeAsync(counter, st);
        if (!s && e != cudaSuccess) s = dfa__cuda_fail(e, fn, "cudaFreeAsync of the forward's tile counter");
    }
    return s;
}

/* The mma.sync forward, any head dim (padded to 64, 128 or 256). */
template <int BF16, int OUT32>
static dfa_status dfa__fwd_mma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim <= 64) return dfa__launch_fwd_mma<64, 4, 128, BF16, OUT32>(p, st, fn);
    if (p.sh.head_dim <= 128) return dfa__launch_fwd_mma<128, 4, 64, BF16, OUT32>(p, st, fn);
    return dfa__launch_fwd_mma<256, 4, 32, BF16, OUT32>(p, st, fn);
}

/* The Hopper forward, head dims 64, 128 and 256. PP: bit 0 ping-pong consumers, bit 1 the
   softmax of each key block under the previous block's P V (intra-warpgroup pipelining),
   bit 2 the late o rescale; NCW64 consumer warpgroups (64 query rows each) at head dim 64;
   CLUSTER 2: pairs of CTAs share K/V loads. The library's kernels (bench/gpu/NOTES.md):
   ping-pong + pipelining with 192-row tiles at head dim 64, pipelining alone at 128 and at
   256 (128 x 64 tiles: 3.4x the mma.sync kernel, 2026-12-01 run 13); 2^x by ex2.approx.ftz
   alone (bit 3) at 64 and 128 (2026-12-01 run 18: the lab's "fwd wgmma exp2f" is the kernel
   before it); o stored by TMA (bit 4) at 128: +4% at 2k x 16 in two runs, +2.3% then -0.7% at
   32k, level at 8k x 4 and at d = 64 (runs 44, 45; "fwd wgmma direct o" is the kernel before
   it); persistent (bit 5) at 128, where a grid has more query tiles than SMs: +0.7 to +3% with
   a 4k window and with documents, +1 to +2% at 8k and 32k causal, +7% at 2k x 16 (run 49, the
   lab's copy of it; "fwd wgmma tma o" is the one-tile kernel before it, which small grids and
   float32 o keep); level to -2% at d = 64, which stays one tile per CTA. The persistent kernel
   stores o by TMA too since 2026-12-02 (run 75, 5 rounds against "fwd wgmma persist", o from
   registers: +3.7% at 2k x 16, level at 8k, 32k and with the masks at 32k and 128k); ping-pong
   on top of it ("fwd wgmma persist pp") lost 1-6% (runs 74, 75). Kept maxima (bit 6, o rescaled
   only when a row's maximum grows by more than 2^8) at 128: +0.3 to +1.0% at every shape of
   2026-12-02 session 13's run 1 (causal 2k-32k, 4k window and documents at 32k and 128k; 5
   rounds), -1.5 to -2% at 64, which keeps 11 (the lab's "fwd wgmma keep max" has it at both;
   "fwd wgmma rescale always" is the d = 128 kernel before it). Q in registers (bit 7: S = Q K^T
   as wgmma RS, each S reading only K from shared memory, and the persistent kernel's Q buffer
   free for the next tile as soon as it is read) at 128: session 13's run 7, 5 rounds against
   122: causal 2k / 8k / 32k +2.1 / +0.3 / +2.5%, non-causal +1.6 / -3.9 / +2.5% (8k: spreads
   6-9%), 4k window 32k / 128k +1.9 / +1.1%, documents +1.8 / +1.3%. At 64 (three consumers at
   160 registers) it spills. The lab's "fwd wgmma q regs" is it; "fwd wgmma keep max" the d = 128
   kernel before it. The owed P V (bit 8, persistent kernel only: a tile's last P V goes in with
   the next tile's first S, so that the first softmax runs under it) at 128: session 14's run 2, 5
   rounds against 250: non-causal 2k / 8k / 32k +1.4 / +9 / +1.5% (8k: the library's spread 9%),
   causal +1.5 / +1.8 / -0.1%, 4k window 32k / 128k +2.2 / +5.5%, documents +1.4 / +2.6%. The
   lab's "fwd wgmma owed pv" is it, "fwd wgmma q regs" the kernel before it. The other combinations
   run in the kernel lab. */
#ifndef DFA__FWD_LIBRARY_PP64 /* overridable from the compiler's command line, for A/B builds */
#define DFA__FWD_LIBRARY_PP64 11
#endif
#ifndef DFA__FWD_LIBRARY_PP128
#define DFA__FWD_LIBRARY_PP128 506
#endif
template <int BF16, int OUT32, int PP64 = DFA__FWD_LIBRARY_PP64, int PP128 = DFA__FWD_LIBRARY_PP128, int NCW64 = 3,
          int CLUSTER = 1>
static dfa_status dfa__fwd_wgmma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim == 64) return dfa__launch_fwd_wgmma<64, 128, BF16, PP64, OUT32, NCW64, CLUSTER>(p, st, fn);
    if (p.sh.head_dim == 256) return dfa__launch_fwd_wgmma<256, 64, BF16, 2, OUT32>(p, st, fn);
    return dfa__launch_fwd_wgmma<128, 128, BF16, PP128, OUT32, 2, CLUSTER>(p, st, fn);
}

#endif
