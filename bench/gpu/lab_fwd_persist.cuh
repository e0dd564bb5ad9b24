/* Kernel lab: the Hopper forward (src/cuda/fwd_wgmma.cuh) made persistent, not yet measured.
 *
 * The library's forward launches one CTA per query tile (62 waves at S = 32k, 16 heads x 128,
 * more and shorter CTAs at 8k batch 4, where it trails cuDNN most): each CTA pays its barrier
 * set-up, its Q load and the first K load before any product, and its last P V and epilogue
 * run with nothing behind them. Here gridDim.x CTAs (one per SM) take the tiles blockIdx.x,
 * blockIdx.x + gridDim.x, ... in the library's order (longest rows first); the K/V stage ring
 * and the Q buffer (guarded by a q_empty barrier) carry over from tile to tile, so the producer
 * fetches the next tile's Q and first K/V blocks while the consumers finish this one.
 *
 * Same block loop as the library's pipelined path (PP bit 1; bit 0 ping-pong), with the stage
 * ring's position g (key blocks of the CTA's earlier tiles) added to every stage index. A copy,
 * kept here until measured (bench/gpu/NOTES.md): promoting it means moving the tile loop into
 * the library's kernel.
 *
 * DYN = 0: CTA i takes tiles i, i + gridDim.x, ... (measured in run 13: +5% at 2k, -7 to -13%
 * at 8k and 32k: a fixed stride gives CTAs unequal work and pulls apart the ones that stream the
 * same K/V). DYN = 1 (not yet run): the next tile comes from a global counter when the producer
 * starts loading it (FlashAttention-3's dynamic scheduler for causal), so tiles start in the grid's
 * order as CTAs free up, the non-persistent kernel's order, with set-up and epilogue overlapped;
 * the producer hands each tile's number to the consumers through a two-slot mailbox in shared
 * memory (tile_full / tile_empty barriers). */
#ifndef DFA_LAB_FWD_PERSIST_CUH
#define DFA_LAB_FWD_PERSIST_CUH

#include "cuda/launch_fwd.cuh"

/* Query tile t, numbered as the library's grid (dfa__fwd_tile_order). */
typedef struct {
    int bh, b, h, kvh, m0, kb0, kb1;
} lab_fwd_tile;

template <int BM, int BN>
static __device__ __forceinline__ lab_fwd_tile lab_fwd_tile_of(const dfa__fwd_params &p, uint32_t t, int nm,
                                                              int heads) {
    const dfa__cuda_shape &sh = p.sh;
    lab_fwd_tile T;
    int mb;
    dfa__fwd_tile_order(t, nm, heads, p.l2_heads, &mb, &T.bh);
    T.b = T.bh / sh.num_heads;
    T.h = T.bh % sh.num_heads;
    T.kvh = T.h / (sh.num_heads / sh.num_kv_heads);
    T.m0 = mb * BM;
    dfa__mask_key_blocks<BN>(sh, T.b, T.m0, BM, &T.kb0, &T.kb1);
    return T;
}

/* DYN's tile counter: zeroed on the stream before each launch (lab_launch_fwd_persist). */
__device__ unsigned int lab_fwd_tile_counter;

template <int D, int BN, int BF16, int PP, int NCW, int DYN>
__global__ void __launch_bounds__(128 * (NCW + 1), 1)
    lab_fwd_persist_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                           const __grid_constant__ CUtensorMap tv, const dfa__fwd_params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    constexpr int BM = C::BM, STAGES = C::STAGES, NCB = D / 64, NT8 = BN / 8, OT8 = D / 8;
    constexpr int PINGPONG = PP & 1, FAST_EXP = (PP & 8) != 0;
    static_assert((PP & 2) != 0, "the persistent forward is the pipelined one");
    constexpr int PRODUCER_REGS = NCW == 2 ? 40 : 32, CONSUMER_REGS = NCW == 2 ? 232 : 160;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + C::QBYTES, sV = sK + STAGES * C::KVBYTES;
    /* q_full, k_full[S], k_empty[S], v_full[S], v_empty[S], q_empty, tile_full[2], tile_empty[2], then
       DYN's two tile-number slots */
    const uint32_t bar = base + C::BAR_OFF;
    const uint32_t q_full = bar, q_empty = bar + 8u * (1 + 4 * STAGES);
    volatile uint32_t *const tile_slot =
        (volatile uint32_t *)(dfa__smem + (base - dfa__smem_addr(dfa__smem)) + C::BAR_OFF + 8 * (6 + 4 * STAGES));
#define TILE_FULL(i) (bar + 8u * (2 + 4 * STAGES + (i)))
#define TILE_EMPTY(i) (bar + 8u * (4 + 4 * STAGES + (i)))
#define K_FULL(s) (bar + 8u * (1 + (s)))
#define K_EMPTY(s) (bar + 8u * (1 + STAGES + (s)))
#define V_FULL(s) (bar + 8u * (1 + 2 * STAGES + (s)))
#define V_EMPTY(s) (bar + 8u * (1 + 3 * STAGES + (s)))

    const int tid = threadIdx.x;
    const int heads = p.sh.batch * p.sh.num_heads;
    const int nm = (p.sh.seqlen_q + BM - 1) / BM;
    const uint32_t ntiles = (uint32_t)nm * (uint32_t)heads;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim;

    if (tid == 0) {
        dfa__mbar_init(q_full, 1);
        dfa__mbar_init(q_empty, 128 * NCW);
        for (int i = 0; i < 2; i++) {
            dfa__mbar_init(TILE_FULL(i), 1);
            dfa__mbar_init(TILE_EMPTY(i), 128 * NCW);
        }
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(K_FULL(s), 1);
            dfa__mbar_init(V_FULL(s), 1);
            dfa__mbar_init(K_EMPTY(s), 128 * NCW);
            dfa__mbar_init(V_EMPTY(s), 128 * NCW);
        }
        dfa__fence_barrier_init();
    }
    __syncthreads();

    const int wg = tid / 128;
    if (wg == 0) {
        dfa__setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            int g = 0;       /* key blocks of earlier tiles: where the stage ring stands */
            uint32_t qn = 0; /* Q tiles loaded before */
            for (uint32_t t = blockIdx.x, k = 0;; t = DYN ? atomicAdd(&lab_fwd_tile_counter, 1u) + gridDim.x
                                                        : t + gridDim.x, k++) {
                if (DYN) { /* tile k's number to the consumers (ntiles or more: the end) */
                    dfa__mbar_wait(TILE_EMPTY(k & 1u), ((k >> 1) & 1u) ^ 1u);
                    tile_slot[k & 1u] = t;
                    dfa__mbar_arrive(TILE_FULL(k & 1u));
                }
                if (t >= ntiles) break;
                const lab_fwd_tile T = lab_fwd_tile_of<BM, BN>(p, t, nm, heads);
                const int nblocks = T.kb1 - T.kb0;
                if (nblocks <= 0) continue;
                dfa__mbar_wait(q_empty, (qn & 1u) ^ 1u); /* the consumers are done with the last Q */
                dfa__mbar_expect_tx(q_full, C::QBYTES);
#pragma unroll
                for (int cb = 0; cb < NCB; cb++)
                    dfa__tma_load_4d(sQ + cb * BM * 128, &tq, q_full, cb * 64, T.h, T.m0, T.b);
                for (int it = 0; it < nblocks; it++) {
                    const int s = (g + it) % STAGES, n = (T.kb0 + it) * BN;
                    const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u;
                    dfa__mbar_wait(K_EMPTY(s), ph ^ 1u);
                    dfa__mbar_expect_tx(K_FULL(s), C::KVBYTES);
#pragma unroll
                    for (int cb = 0; cb < NCB; cb++)
                        dfa__tma_load_4d(sK + s * C::KVBYTES + cb * BN * 128, &tk, K_FULL(s), cb * 64, T.kvh, n, T.b);
                    dfa__mbar_wait(V_EMPTY(s), ph ^ 1u);
                    dfa__mbar_expect_tx(V_FULL(s), C::KVBYTES);
#pragma unroll
                    for (int cb = 0; cb < NCB; cb++)
                        dfa__tma_load_4d(sV + s * C::KVBYTES + cb * BN * 128, &tv, V_FULL(s), cb * 64, T.kvh, n, T.b);
                }
                g += nblocks;
                qn++;
            }
        }
        return;
    }

    dfa__setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, wt = tid - 128 * wg, warp = wt >> 5, lane = wt & 31;
    const int next_bar = 1 + (c + 1) % NCW;
    if (PINGPONG && c == NCW - 1) dfa__named_arrive(1, 256); /* consumer 0 goes first */
    int g = 0;
    uint32_t qn = 0;
    for (uint32_t k = 0;; k++) {
        uint32_t t = blockIdx.x + k * gridDim.x;
        if (DYN) {
            dfa__mbar_wait(TILE_FULL(k & 1u), (k >> 1) & 1u);
            t = tile_slot[k & 1u];
            dfa__mbar_arrive(TILE_EMPTY(k & 1u));
        }
        if (t >= ntiles) break;
        const lab_fwd_tile T = lab_fwd_tile_of<BM, BN>(p, t, nm, heads);
        const int b = T.b, m0 = T.m0, nblocks = T.kb1 - T.kb0, n_begin = T.kb0 * BN;
        uint16_t *og = (uint16_t *)p.o + (long long)b * p.sh.seqlen_q * qstride + (long long)T.h * p.sh.head_dim;
        float *lseg = p.lse ? p.lse + (long long)T.bh * p.sh.seqlen_q : (float *)0;
        const int row0 = m0 + c * 64 + warp * 16;
        if (nblocks <= 0) { /* this warp's 16 rows see no key: o = 0, lse = -inf */
            for (int i = lane; i < 16 * (D / 8); i += 32) {
                const int r = row0 + i / (D / 8), col = (i % (D / 8)) * 8;
                if (r < p.sh.seqlen_q) dfa__store_zero8(og + (long long)r * qstride + col);
            }
            if (lseg && lane < 16 && row0 + lane < p.sh.seqlen_q) lseg[row0 + lane] = -INFINITY;
            continue;
        }
        int lim[2] = {dfa__row_limit(row0 + (lane >> 2), p.sh.seqlen_k, p.sh.causal, p.sh.offset),
                      dfa__row_limit(row0 + (lane >> 2) + 8, p.sh.seqlen_k, p.sh.causal, p.sh.offset)};
        int mlo[2] = {0, 0}, mhi[2] = {0, 0};
        if (p.sh.masked)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int2 kr = dfa__mask_row(p.sh, b, row0 + (lane >> 2) + 8 * r);
                mlo[r] = kr.x;
                mhi[r] = kr.y;
                lim[r] = kr.y - 1;
            }
        float o[OT8 * 4];
#pragma unroll
        for (int i = 0; i < OT8 * 4; i++) o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
        float sc[NT8 * 4];
        uint32_t pf[BN / 16][4];
        float(*s4)[4] = (float(*)[4])sc;
        dfa__mbar_wait(q_full, qn & 1u);
#define LAB_ISSUE_S(s_)                                                                                           \
    _Pragma("unroll") for (int kk = 0; kk < D / 16; kk++) {                                                      \
        const uint64_t da = dfa__wgmma_desc(sQ + (kk / 4) * BM * 128 + c * 64 * 128 + (kk % 4) * 32, 16);         \
        const uint64_t db = dfa__wgmma_desc(sK + (s_) * C::KVBYTES + (kk / 4) * BN * 128 + (kk % 4) * 32, 16);    \
        dfa__wgmma_ss<BN, BF16>(sc, da, db, kk > 0);                                                              \
    }                                                                                                             \
    dfa__wgmma_commit()
#define LAB_ISSUE_PV(s_)                                                                                          \
    _Pragma("unroll") for (int kk = 0; kk < BN / 16; kk++) {                                                     \
        const uint64_t dv = dfa__wgmma_desc(sV + (s_) * C::KVBYTES + kk * 16 * 128, BN * 128);                   \
        dfa__wgmma_rs<D, BF16>(o, pf[kk], dv, 1);                                                                 \
    }                                                                                                             \
    dfa__wgmma_commit()
        {
            const int s = g % STAGES;
            dfa__mbar_wait(K_FULL(s), (uint32_t)(g / STAGES) & 1u);
            if (PINGPONG) dfa__named_sync(1 + c, 256);
            dfa__wgmma_fence();
            LAB_ISSUE_S(s);
            if (PINGPONG) dfa__named_arrive(next_bar, 256);
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
            dfa__mbar_arrive(K_EMPTY(s));
        }
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n_begin, lane);
        dfa__softmax_step<BN, 0, FAST_EXP>(s4, (float(*)[4])o, m, l, lim, n_begin, m0, p.sh.seqlen_k, p.sh.causal,
                                 p.sh.offset, p.scale_log2, lane, alpha);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
        for (int it = 1; it < nblocks; it++) {
            const int s = (g + it) % STAGES, sp = (g + it - 1) % STAGES;
            const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u, php = (uint32_t)((g + it - 1) / STAGES) & 1u;
            dfa__mbar_wait(K_FULL(s), ph);
            dfa__mbar_wait(V_FULL(sp), php);
            if (PINGPONG) dfa__named_sync(1 + c, 256);
            dfa__wgmma_fence();
            LAB_ISSUE_S(s);
            LAB_ISSUE_PV(sp);
            if (PINGPONG) dfa__named_arrive(next_bar, 256);
            dfa__wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
            dfa__mbar_arrive(K_EMPTY(s));
            const int n0 = n_begin + it * BN;
            if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n0, lane);
            dfa__softmax_step<BN, 0, FAST_EXP>(s4, (float(*)[4])o, m, l, lim, n0, m0, p.sh.seqlen_k, p.sh.causal,
                                     p.sh.offset, p.scale_log2, lane, alpha);
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
            dfa__mbar_arrive(V_EMPTY(sp));
            dfa__rescale_o<OT8>(o, alpha);
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
        }
        /* every product that reads this Q tile (the S of each block) has completed: the producer
           may load the next tile's Q under this one's last P V and its epilogue */
        dfa__mbar_arrive(q_empty);
        {
            const int sp = (g + nblocks - 1) % STAGES;
            dfa__mbar_wait(V_FULL(sp), (uint32_t)((g + nblocks - 1) / STAGES) & 1u);
            if (PINGPONG) dfa__named_sync(1 + c, 256);
            dfa__wgmma_fence();
            LAB_ISSUE_PV(sp);
            if (PINGPONG) dfa__named_arrive(next_bar, 256);
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
            dfa__mbar_arrive(V_EMPTY(sp));
        }
#undef LAB_ISSUE_S
#undef LAB_ISSUE_PV
        dfa__store_o_lse<OT8, BF16, uint16_t>((float(*)[4])o, m, l, og, qstride, lseg, row0, p.sh.seqlen_q,
                                              p.sh.head_dim, lane);
        g += nblocks;
        qn++;
    }
#undef K_FULL
#undef K_EMPTY
#undef V_FULL
#undef V_EMPTY
#undef TILE_FULL
#undef TILE_EMPTY
#else
    (void)tq; (void)tk; (void)tv; (void)p;
    __trap();
#endif
}

/* One CTA per SM (16-bit output only: the lab's). */
template <int D, int BN, int BF16, int PP, int NCW, int DYN>
static dfa_status lab_launch_fwd_persist(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    static_assert(C::BAR_OFF + 8 * (6 + 4 * C::STAGES) + 8 <= C::SMEM - 1024, "room for the extra barriers and slots");
    const long long tiles = (long long)p.sh.batch * p.sh.num_heads * ((p.sh.seqlen_q + C::BM - 1) / C::BM);
    if (tiles > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld)", tiles);
    dfa_status sms_st = DFA_OK;
    const int sms = dfa__cuda_device_attr(cudaDevAttrMultiProcessorCount, fn, &sms_st);
    if (sms < 0) return sms_st;
    if (DYN) {
        void *counter = NULL;
        cudaError_t e = cudaGetSymbolAddress(&counter, lab_fwd_tile_counter);
        if (e == cudaSuccess) e = cudaMemsetAsync(counter, 0, sizeof(unsigned int), st);
        if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "resetting the tile counter");
    }
    CUtensorMap tq, tk, tv;
    const dfa_status st_maps = dfa__fwd_tmaps(p, BF16, D, C::BM, BN, &tq, &tk, &tv, fn);
    if (st_maps) return st_maps;
    return dfa__launch(lab_fwd_persist_kernel<D, BN, BF16, PP, NCW, DYN>, tiles < sms ? tiles : sms, C::NT, C::SMEM, st,
                       fn, "query tiles", "persistent forward kernel launch", tq, tk, tv, p);
}

/* Head dims 64 (192-row tiles) and 128, with the library's PP choices (PP64, PP128). */
template <int BF16, int PP64, int PP128, int DYN = 0>
static dfa_status lab_fwd_persist(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.out_f32) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the persistent lab forward writes 16-bit o only");
    if (p.sh.head_dim == 64) return lab_launch_fwd_persist<64, 128, BF16, PP64, 3, DYN>(p, st, fn);
    return lab_launch_fwd_persist<128, 128, BF16, PP128, 2, DYN>(p, st, fn);
}

#endif
