/* Internal: the persistent Hopper forward (sm_90a only), for the configurations with PERSISTENT
 * (heuristics.h; the launcher takes it when a grid has more query tiles than the device has SMs).
 *
 * The one-tile kernel (fwd_wgmma.cuh) gives every CTA its set-up, its Q load and first K/V
 * loads before any product, and its last P V and epilogue with nothing behind them (one CTA of
 * 384 threads fills an SM): a large share of short tiles (a window's few dozen key blocks, short
 * documents, short sequences). Here one CTA per SM walks tiles. The stage ring carries over from
 * tile to tile (position g), and the Q buffer is released (q_empty) once a tile's last S has
 * completed, so the producer loads the next tile's Q and first K/V blocks under this tile's last
 * products. The consumers overlap tiles too: a tile's last P V is issued with the next tile's
 * first S, and its o leaves after that S's softmax (dfa__fwd_consume_tile with PERSIST).
 *
 * Tile numbers come in the grid's order (dfa__fwd_tile_order) from a global counter that the
 * launcher zeroes on the stream: the producer takes the next number when it starts loading that
 * tile (FlashAttention-3's dynamic scheduler), so tiles start in the one-tile kernel's order as
 * CTAs free up and CTAs with light tiles take more of them. The producer hands each number to
 * the consumers through two slots in shared memory (tile_full / tile_empty). o leaves by TMA
 * from a staging tile of its own (the Q buffer holds the next tile's Q by then), each
 * warpgroup's 64 rows as in the one-tile kernel. 16-bit o only. */
#ifndef DFA_CUDA_FWD_WGMMA_PERSISTENT_CUH
#define DFA_CUDA_FWD_WGMMA_PERSISTENT_CUH

#include "fwd_wgmma.cuh"

/* The one-tile kernel's layout, then o's staging tile (BM x D, 16-bit), the barriers and the
   tile-number slots. */
template <int D, int BN, int NCW> struct dfa__fwd_persist_layout {
    typedef dfa__fwd_wgmma_layout<D, BN, NCW> C;
    static constexpr int O_OFF = C::QBYTES + 2 * C::STAGES * C::KVBYTES;
    static constexpr int BAR_OFF = O_OFF + C::QBYTES;
    static constexpr int SMEM = BAR_OFF + dfa__fwd_bars<C::STAGES>::END + 1024;
};

/* A query tile of the persistent kernel. */
typedef struct {
    int b, h, bh, m0, kb0, nblocks;
} dfa__fwd_tile;

/* The consumers' next tile with key blocks: numbers from the producer's slots (k counts them);
   tiles whose rows see no key get o = 0 and lse = -inf on the way (each warp its 16 rows).
   0 at the end of the grid. */
template <int D, int BM, int BN, int STAGES>
static __device__ __forceinline__ int dfa__fwd_next_tile(const dfa__fwd_params &p, const dfa__fwd_bars<STAGES> &B,
                                                         volatile uint32_t *slot, uint32_t *k, int nm, int heads,
                                                         int c, int warp, int lane, dfa__fwd_tile *T) {
    const uint32_t ntiles = (uint32_t)nm * (uint32_t)heads;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim;
    for (;; ++*k) {
        dfa__mbar_wait(B.tile_full(*k & 1u), (*k >> 1) & 1u);
        const uint32_t t = slot[*k & 1u];
        dfa__mbar_arrive(B.tile_empty(*k & 1u));
        if (t >= ntiles) return 0;
        int mb, kb1;
        dfa__fwd_tile_order(t, nm, heads, p.l2_heads, &mb, &T->bh);
        T->b = T->bh / p.sh.num_heads, T->h = T->bh % p.sh.num_heads, T->m0 = mb * BM;
        dfa__mask_key_blocks<BN>(p.sh, T->b, T->m0, BM, &T->kb0, &kb1);
        T->nblocks = kb1 - T->kb0;
        if (T->nblocks > 0) {
            ++*k;
            return 1;
        }
        uint16_t *og = (uint16_t *)p.o + (long long)T->b * p.sh.seqlen_q * qstride + (long long)T->h * p.sh.head_dim;
        float *lseg = p.lse ? p.lse + (long long)T->bh * p.sh.seqlen_q : (float *)0;
        const int row0 = T->m0 + c * 64 + warp * 16;
        for (int i = lane; i < 16 * (D / 8); i += 32) {
            const int r = row0 + i / (D / 8), col = (i % (D / 8)) * 8;
            if (r < p.sh.seqlen_q) dfa__store_zero8(og + (long long)r * qstride + col);
        }
        if (lseg && lane < 16 && row0 + lane < p.sh.seqlen_q) lseg[row0 + lane] = dfa__row_sink(p.sh, T->h);
    }
}

/* o and lse of a consumer warpgroup's rows of tile T, by TMA from the staging tile sO. */
template <int D, int BM, int BF16>
static __device__ __forceinline__ void dfa__fwd_persist_store(const dfa__fwd_params &p, const CUtensorMap *to,
                                                              uint32_t sO, const dfa__fwd_tile &T, float *o,
                                                              const float *m, const float *l, int c, int warp,
                                                              int lane) {
    dfa__store_o_tma<D, BM, BF16>((const float(*)[4])o, m, l, sO, to,
                                  p.lse ? p.lse + (long long)T.bh * p.sh.seqlen_q : (float *)0, c, warp, lane, T.h,
                                  T.m0, T.b, p.sh.seqlen_q, dfa__row_sink(p.sh, T.h));
}

template <class K, int BF16>
__global__ void __launch_bounds__(128 * (K::NCW + 1), 1)
    dfa__fwd_wgmma_persistent_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                                     const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                                     const dfa__fwd_params p, unsigned int *tile_counter) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int D = K::D, BN = K::BN, NCW = K::NCW;
    static_assert(K::DV == K::D, "the persistent forward takes value head dim = head dim");
    static_assert(K::TMA_O, "the persistent forward stores o by TMA from its staging tile");
    typedef dfa__fwd_wgmma_layout<D, BN, NCW> C;
    typedef dfa__fwd_persist_layout<D, BN, NCW> PC;
    constexpr int BM = C::BM, STAGES = C::STAGES, NCB = D / 64, OT8 = D / 8;
    constexpr int PRODUCER_REGS = NCW == 2 ? 40 : 32, CONSUMER_REGS = NCW == 2 ? 232 : 160;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + C::QBYTES, sV = sK + STAGES * C::KVBYTES, sO = base + PC::O_OFF;
    const dfa__fwd_bars<STAGES> B = {base + PC::BAR_OFF};
    volatile uint32_t *const tile_slot =
        (volatile uint32_t *)(dfa__smem + (base - dfa__smem_addr(dfa__smem)) + PC::BAR_OFF + B.SLOTS);

    const int tid = threadIdx.x;
    const int heads = p.sh.batch * p.sh.num_heads;
    const int nm = (p.sh.seqlen_q + BM - 1) / BM;
    const uint32_t ntiles = (uint32_t)nm * (uint32_t)heads;
    if (tid == 0) {
        dfa__mbar_init(B.q_full(), 1);
        dfa__mbar_init(B.q_empty(), 128 * NCW);
        for (int i = 0; i < 2; i++) {
            dfa__mbar_init(B.tile_full(i), 1);
            dfa__mbar_init(B.tile_empty(i), 128 * NCW);
        }
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(B.k_full(s), 1);
            dfa__mbar_init(B.v_full(s), 1);
            dfa__mbar_init(B.k_empty(s), 128 * NCW);
            dfa__mbar_init(B.v_empty(s), 128 * NCW);
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
            for (uint32_t t = blockIdx.x, k = 0;; t = atomicAdd(tile_counter, 1u) + gridDim.x, k++) {
                dfa__mbar_wait(B.tile_empty(k & 1u), ((k >> 1) & 1u) ^ 1u); /* tile k's number (>= ntiles: the end) */
                tile_slot[k & 1u] = t;
                dfa__mbar_arrive(B.tile_full(k & 1u));
                if (t >= ntiles) break;
                int mb, bh, kb0, kb1;
                dfa__fwd_tile_order(t, nm, heads, p.l2_heads, &mb, &bh);
                const int b = bh / p.sh.num_heads, h = bh % p.sh.num_heads;
                const int kvh = h / (p.sh.num_heads / p.sh.num_kv_heads);
                dfa__mask_key_blocks<BN>(p.sh, b, mb * BM, BM, &kb0, &kb1);
                if (kb1 <= kb0) continue; /* no row sees a key: nothing to load */
                dfa__mbar_wait(B.q_empty(), (qn & 1u) ^ 1u); /* every S of the last tile is done */
                dfa__mbar_expect_tx(B.q_full(), C::QBYTES);
#pragma unroll
                for (int cb = 0; cb < NCB; cb++)
                    dfa__tma_load_4d(sQ + cb * BM * 128, &tq, B.q_full(), cb * 64, h, mb * BM, b);
                dfa__fwd_load_tile_kv<NCB, BN, STAGES, C::KVBYTES>(B, sK, sV, &tk, &tv, kvh, b, kb0 * BN, kb1 - kb0, g);
                g += kb1 - kb0;
                qn++;
            }
        }
        return;
    }

    dfa__setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, wt = tid - 128 * wg, warp = wt >> 5, lane = wt & 31;
    int g = 0;
    uint32_t qn = 0, k = 0;
    dfa__fwd_tile T, done = {0, 0, 0, 0, 0, 0}; /* done: the tile whose last P V is owed */
    float o[OT8 * 4], done_m[2] = {0.0f, 0.0f}, done_l[2] = {0.0f, 0.0f};
    uint32_t pf[BN / 16][4];
    int owed = 0;
    const CUtensorMap *const tmo = &to;
    while (dfa__fwd_next_tile<D, BM, BN, STAGES>(p, B, tile_slot, &k, nm, heads, c, warp, lane, &T)) {
        int lim[2], mlo[2], mhi[2];
        dfa__fwd_row_state(p.sh, T.b, T.m0 + c * 64 + warp * 16 + (lane >> 2), lim, mlo, mhi);
        if (!owed) /* with one owed, o restarts at 0 once the owed P V has retired */
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        dfa__mbar_wait(B.q_full(), qn & 1u);
        dfa__fwd_consume_tile<K, BF16, true>(
            o, m, l, pf, B, sQ, sK, sV, g, T.nblocks, T.kb0 * BN, mlo, mhi, lim, T.m0, p, c, lane, owed,
            [=](float *oo) { dfa__fwd_persist_store<D, BM, BF16>(p, tmo, sO, done, oo, done_m, done_l, c, warp, lane); });
        done = T;
        done_m[0] = m[0], done_m[1] = m[1], done_l[0] = l[0], done_l[1] = l[1];
        owed = 1;
        g += T.nblocks;
        qn++;
    }
    if (owed) { /* the last tile's P V */
        dfa__fwd_last_pv<D, BN, BF16, false, C::KVBYTES>(o, pf, B, sV, g - 1, c, 0);
        dfa__fwd_persist_store<D, BM, BF16>(p, tmo, sO, done, o, done_m, done_l, c, warp, lane);
    }
#else
    (void)tq; (void)tk; (void)tv; (void)to; (void)p; (void)tile_counter;
    __trap();
#endif
}

#endif
