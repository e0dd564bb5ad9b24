/* Internal: the Hopper forward kernel (FlashAttention-3's design): wgmma with TMA loads and
 * warp specialisation, sm_90a only, for head dims 64, 128 and 256, and DeepSeek's 192 / 128 (q and
 * k 192 wide, v and o 128: the configuration's DV). What each head dim takes
 * (tile shape, ping-pong, Q in registers, ...) is its configuration struct K in heuristics.h;
 * the persistent kernel built from the same pieces is fwd_wgmma_persistent.cuh.
 *
 * A CTA has NCW + 1 warpgroups. Warpgroup 0 is the producer: one thread issues the bulk tensor
 * copies of the CTA's Q tile and of every K and V tile into a two-stage ring, each stage
 * guarded by a "full" mbarrier (bytes landed) and an "empty" one (every consumer done with it).
 * Warpgroups 1 .. NCW each own 64 query rows: S = Q K^T (Q from shared memory, or with
 * Q_IN_REGS from registers), the online softmax in registers, then O += P V with P straight
 * from registers (RS form). The producer hands registers to the consumers with setmaxnreg
 * (40 / 232 with two consumers, 32 / 160 with three).
 *
 * A consumer's walk is pipelined: S of block j + 1 is issued before the softmax of block j,
 * which then runs under P V of block j (FlashAttention-3's intra-warpgroup overlap), and o is
 * rescaled once that product has landed. With PINGPONG the consumers also take turns issuing
 * (named barriers 1 .. NCW), so one's softmax runs under the others' products.
 *
 * Shared memory holds every tile as 64-column blocks of 128-byte rows in the 128-byte swizzle
 * that both TMA and wgmma speak; a D = 128 tile is two blocks. OUT32 writes o as float32. */
#ifndef DFA_CUDA_FWD_WGMMA_CUH
#define DFA_CUDA_FWD_WGMMA_CUH

#include <cuda.h>

#include "fwd_mma.cuh"
#include "wgmma_gen.cuh"

/* Tile sizes and the shared-memory layout: Q (BM x D), two K stages (BN x D) and two V stages
   (BN x DV, DV the value head dim), then the barriers. */
template <int D, int BN, int NCW, int DV = D> struct dfa__fwd_wgmma_layout {
    static constexpr int BM = 64 * NCW, STAGES = 2, NT = 128 * (NCW + 1);
    static constexpr int QBYTES = BM * D * 2, KVBYTES = BN * D * 2, VBYTES = BN * DV * 2;
    static constexpr int BAR_OFF = QBYTES + STAGES * (KVBYTES + VBYTES);
    static constexpr int SMEM = BAR_OFF + 128 + 1024; /* barriers + room to align to 1024 */
};

/* The output rows' rescale to a new running maximum (rows g and g + 8 of the warp's 16).
   SKIP_ONES: the warp skips it when every one of its rows kept its maximum (KEEP_MAX). */
template <int OT8, int SKIP_ONES = 0> static __device__ __forceinline__ void dfa__rescale_o(float *o, const float *alpha) {
    if (SKIP_ONES && __all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) return;
#pragma unroll
    for (int j = 0; j < OT8; j++) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

/* The kernels' mbarriers, 8 bytes each from `bar`: q_full, k_full[S], k_empty[S], v_full[S],
   v_empty[S]; the persistent kernel adds q_empty, tile_full[2] and tile_empty[2], then two
   4-byte slots for tile numbers (dfa__fwd_persist_layout). */
template <int STAGES> struct dfa__fwd_bars {
    uint32_t bar;
    __device__ __forceinline__ uint32_t q_full() const { return bar; }
    __device__ __forceinline__ uint32_t k_full(int s) const { return bar + 8u * (1 + s); }
    __device__ __forceinline__ uint32_t k_empty(int s) const { return bar + 8u * (1 + STAGES + s); }
    __device__ __forceinline__ uint32_t v_full(int s) const { return bar + 8u * (1 + 2 * STAGES + s); }
    __device__ __forceinline__ uint32_t v_empty(int s) const { return bar + 8u * (1 + 3 * STAGES + s); }
    __device__ __forceinline__ uint32_t q_empty() const { return bar + 8u * (1 + 4 * STAGES); }
    __device__ __forceinline__ uint32_t tile_full(int i) const { return bar + 8u * (2 + 4 * STAGES + i); }
    __device__ __forceinline__ uint32_t tile_empty(int i) const { return bar + 8u * (4 + 4 * STAGES + i); }
    static constexpr int SLOTS = 8 * (6 + 4 * STAGES), END = SLOTS + 8; /* bytes from bar */
};

/* The producer's K and V loads of a query tile's key blocks [n_begin / BN, + nblocks) into the
   stage ring, from ring position g on (the key blocks of the CTA's earlier tiles; 0 when a CTA
   has one tile). Each K tile is NCB column blocks of BN 128-byte rows (KVBYTES), each V tile NCBV
   of them (VBYTES), one box each. */
template <int NCB, int BN, int STAGES, int KVBYTES, int NCBV = NCB, int VBYTES = KVBYTES>
static __device__ __forceinline__ void dfa__fwd_load_tile_kv(const dfa__fwd_bars<STAGES> &B, uint32_t sK, uint32_t sV,
                                                             const CUtensorMap *tk, const CUtensorMap *tv, int kvh,
                                                             int b, int n_begin, int nblocks, int g) {
    for (int it = 0; it < nblocks; it++) {
        const int s = (g + it) % STAGES;
        const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u;
        const int n = n_begin + it * BN;
        dfa__mbar_wait(B.k_empty(s), ph ^ 1u);
        dfa__mbar_expect_tx(B.k_full(s), KVBYTES);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++)
            dfa__tma_load_4d(sK + s * KVBYTES + cb * BN * 128, tk, B.k_full(s), cb * 64, kvh, n, b);
        dfa__mbar_wait(B.v_empty(s), ph ^ 1u);
        dfa__mbar_expect_tx(B.v_full(s), VBYTES);
#pragma unroll
        for (int cb = 0; cb < NCBV; cb++)
            dfa__tma_load_4d(sV + s * VBYTES + cb * BN * 128, tv, B.v_full(s), cb * 64, kvh, n, b);
    }
}

/* O += P V over a key block: P (16-bit, BN / 16 register fragments) from registers, V (DV
   columns) from the stage at sVs; committed as one wgmma group. */
template <int DV, int BN, int BF16>
static __device__ __forceinline__ void dfa__fwd_issue_pv(float *o, uint32_t (*pf)[4], uint32_t sVs) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) dfa__wgmma_rs<DV, BF16>(o, pf[kk], dfa__wgmma_desc(sVs + kk * 16 * 128, BN * 128), 1);
    dfa__wgmma_commit();
}

/* The last P V of a tile (block gb of the stage ring, P in pf; V stages of VBYTES, DV columns); o
   is complete when it returns. */
template <int DV, int BN, int BF16, bool PINGPONG, int VBYTES>
static __device__ __forceinline__ void dfa__fwd_last_pv(float *o, uint32_t (*pf)[4], const dfa__fwd_bars<2> &B,
                                                        uint32_t sV, int gb, int c, int next_bar) {
    const int sp = gb % 2;
    dfa__mbar_wait(B.v_full(sp), (uint32_t)(gb / 2) & 1u);
    if (PINGPONG) dfa__named_sync(1 + c, 256);
    dfa__wgmma_fence();
    dfa__fwd_issue_pv<DV, BN, BF16>(o, pf, sV + sp * VBYTES);
    if (PINGPONG) dfa__named_arrive(next_bar, 256);
    dfa__wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < DV / 8 * 4; i++) dfa__reg_fence(o[i]);
    dfa__mbar_arrive(B.v_empty(sp));
}

/* A consumer warpgroup's pipelined walk over one query tile: key blocks [n_begin, + nblocks * BN),
   from stage ring position g on (as the producer's). S of block it is computed while P V of block
   it - 1 is still in flight; the softmax of block it runs under that product, and o is rescaled
   once it has landed. The first S and the last P V are peeled off the loop, so that every
   iteration commits the same two groups and ptxas can see which wait retires which product (with
   conditional commits it serialises the wgmmas). o, m, l: the row state, started by the caller;
   Q must have landed. pf holds P of a block between its softmax and its P V.
   PERSIST (the persistent kernel): the warpgroup releases the Q tile (q_empty) as soon as its
   last S has completed (with Q_IN_REGS as soon as it has read Q into registers), so that the
   producer loads the next tile's Q under this one's work; and the tile's last P V is not issued
   here but left owed (P in pf, o as it stands): the next tile's first S goes in together with
   it, so that the first softmax runs under that P V instead of with nothing in flight. `owed`
   says whether the previous tile left one (block g - 1), and `finish(o)` is that tile's
   epilogue, called once its P V has retired (then o restarts at 0). Without PERSIST, `owed`
   must be 0. */
template <class K, int BF16, bool PERSIST, typename Finish>
static __device__ __forceinline__ void dfa__fwd_consume_tile(float *o, float *m, float *l, uint32_t (*pf)[4],
                                                             const dfa__fwd_bars<2> &B, uint32_t sQ, uint32_t sK,
                                                             uint32_t sV, int g, int nblocks, int n_begin,
                                                             const int *mlo, const int *mhi, const int *lim, int m0,
                                                             const dfa__fwd_params &p, int c, int lane, int owed,
                                                             Finish finish) {
    constexpr int D = K::D, DV = K::DV, BN = K::BN, NCW = K::NCW;
    typedef dfa__fwd_wgmma_layout<D, BN, NCW, DV> C;
    constexpr int BM = C::BM, STAGES = C::STAGES, NT8 = BN / 8, OT8 = DV / 8;
    constexpr bool PINGPONG = K::PINGPONG, FAST_EXP = K::FAST_EXP, KEEP_MAX = K::KEEP_MAX, Q_RS = K::Q_IN_REGS;
    static_assert(!PERSIST || !PINGPONG, "an owed P V runs under the next tile's first S: no turns to take");
    const int next_bar = 1 + (c + 1) % NCW;
    /* SOFTCAP: the scores become tanh(x scale / c), the softmax's scale takes the factor c / scale */
    const dfa__softcap cap = dfa__softcap_of(p.sh);
    const float scale_log2 = dfa__softcap_scale_log2<K::SOFTCAP>(p.scale_log2, cap);
    float sc[NT8 * 4];
    float(*s4)[4] = (float(*)[4])sc;
    /* Q_IN_REGS: this warp's 16 rows of Q in registers, read once (ldmatrix, through the 128-byte
       swizzle: 16-byte chunk j of row r sits at chunk j ^ (r % 8)), so that each S reads only K
       from shared memory; the tile's Q buffer is free from then on */
    uint32_t qf[Q_RS ? D / 16 : 1][4];
    if (Q_RS) {
        const int row = c * 64 + ((threadIdx.x & 127) >> 5) * 16 + (lane & 15);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const int col = kk * 16 + (lane >> 4) * 8;
            dfa__ldmatrix_x4(qf[kk], sQ + (col / 64) * BM * 128 + row * 128 + ((((col % 64) >> 3) ^ (row & 7)) << 4));
        }
        if (PERSIST) dfa__mbar_arrive(B.q_empty());
    }
    /* S = Q K^T of the block in stage s_, committed as one group */
#define DFA__FWD_ISSUE_S(s_)                                                                                      \
    do {                                                                                                          \
        _Pragma("unroll") for (int kk = 0; kk < D / 16; kk++) {                                                  \
            const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, qc = (kk / 4) * BM * 128 + (kk % 4) * 32;    \
            const uint64_t db = dfa__wgmma_desc(sK + (s_) * C::KVBYTES + kc, 16);                                 \
            if (Q_RS)                                                                                             \
                dfa__wgmma_rs_kb<BN, BF16>(sc, qf[Q_RS ? kk : 0], db, kk > 0);                                    \
            else                                                                                                  \
                dfa__wgmma_ss<BN, BF16>(sc, dfa__wgmma_desc(sQ + c * 64 * 128 + qc, 16), db, kk > 0);             \
        }                                                                                                         \
        dfa__wgmma_commit();                                                                                      \
    } while (0)
    float alpha[2];
    /* The first block. With an owed P V (block g - 1) it goes in after S, and the softmax runs under
       it. Two copies (the tag), so that no product is in flight where the paths join: ptxas
       serialises every wgmma of the kernel otherwise (C7518). */
    auto first_block = [&](auto with_owed) {
        constexpr int W = decltype(with_owed)::value;
        const int s = g % STAGES, so = (g + STAGES - 1) % STAGES;
        dfa__mbar_wait(B.k_full(s), (uint32_t)(g / STAGES) & 1u);
        if (W) dfa__mbar_wait(B.v_full(so), (uint32_t)((g - 1) / STAGES) & 1u);
        if (PINGPONG) dfa__named_sync(1 + c, 256);
        dfa__wgmma_fence();
        DFA__FWD_ISSUE_S(s);
        if (PINGPONG) dfa__named_arrive(next_bar, 256);
        if (W) {
            dfa__fwd_issue_pv<DV, BN, BF16>(o, pf, sV + so * C::VBYTES);
            dfa__wgmma_wait<1>(); /* S has retired; the owed P V may still run */
        } else {
            dfa__wgmma_wait<0>();
        }
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
        dfa__mbar_arrive(B.k_empty(s));
        if constexpr (K::SOFTCAP) dfa__softcap_tanh<NT8 * 4>(sc, cap);
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n_begin, lane);
        dfa__softmax_step<BN, 0, FAST_EXP, KEEP_MAX>(s4, (float(*)[4])o, m, l, lim, n_begin, m0, p.sh.seqlen_k,
                                                     p.sh.causal, p.sh.offset, scale_log2, lane, alpha);
        if (W) {
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
            dfa__mbar_arrive(B.v_empty(so));
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
        if (W) {
            finish(o);
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) o[i] = 0.0f;
        }
    };
    if (PERSIST && owed) first_block(dfa__ctag<1>());
    else first_block(dfa__ctag<0>());
    for (int it = 1; it < nblocks; it++) {
        const int s = (g + it) % STAGES, sp = (g + it - 1) % STAGES;
        const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u, php = (uint32_t)((g + it - 1) / STAGES) & 1u;
        dfa__mbar_wait(B.k_full(s), ph);
        dfa__mbar_wait(B.v_full(sp), php);
        if (PINGPONG) dfa__named_sync(1 + c, 256);
        dfa__wgmma_fence();
        DFA__FWD_ISSUE_S(s);
        dfa__fwd_issue_pv<DV, BN, BF16>(o, pf, sV + sp * C::VBYTES);
        if (PINGPONG) dfa__named_arrive(next_bar, 256);
        dfa__wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
        dfa__mbar_arrive(B.k_empty(s));
        const int n0 = n_begin + it * BN;
        if constexpr (K::SOFTCAP) dfa__softcap_tanh<NT8 * 4>(sc, cap);
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n0, lane);
        dfa__softmax_step<BN, 0, FAST_EXP, KEEP_MAX>(s4, (float(*)[4])o, m, l, lim, n0, m0, p.sh.seqlen_k, p.sh.causal,
                                                     p.sh.offset, scale_log2, lane, alpha);
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
        dfa__mbar_arrive(B.v_empty(sp));
        dfa__rescale_o<OT8, KEEP_MAX>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
    }
    if (PERSIST && !Q_RS) dfa__mbar_arrive(B.q_empty()); /* every S of this tile has completed */
    if (PERSIST) return; /* the last P V goes in with the next tile's first S, or the kernel's last */
    dfa__fwd_last_pv<DV, BN, BF16, PINGPONG, C::VBYTES>(o, pf, B, sV, g + nblocks - 1, c, next_bar);
#undef DFA__FWD_ISSUE_S
}

/* A consumer thread's two rows (row and row + 8): the last key each may see (lim) and, under a
   mask, their visible key intervals [mlo, mhi). */
static __device__ __forceinline__ void dfa__fwd_row_state(const dfa__cuda_shape &sh, int b, int row, int *lim,
                                                          int *mlo, int *mhi) {
    lim[0] = dfa__row_limit(row, sh.seqlen_k, sh.causal, sh.offset);
    lim[1] = dfa__row_limit(row + 8, sh.seqlen_k, sh.causal, sh.offset);
    mlo[0] = mlo[1] = mhi[0] = mhi[1] = 0;
    if (sh.masked)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int2 kr = dfa__mask_row(sh, b, row + 8 * r);
            mlo[r] = kr.x;
            mhi[r] = kr.y;
            lim[r] = kr.y - 1;
        }
}

/* TMA_O (16-bit o): a consumer warpgroup's 64 x D tile of o leaves through the copy engine. The
   warpgroup writes it, normalised and rounded, into the shared tile sQ (the one-tile kernel's Q
   tile: no product reads its rows any more, as its last S has retired and each warpgroup's
   products read only its own rows; the persistent kernel's own staging tile), in the 128-byte
   swizzle that the tensor map `to` (boxes of 64 rows) reads; one thread then stores it, and rows
   past seqlen_q fall outside the tensor and are dropped; sink as dfa__store_o_lse's. The
   consumers issue D / 4 conflict-free shared stores per thread instead of as many scattered
   4-byte global ones. The issuing thread
   waits until the copy engine has read the tile, so that it may be written again. */
template <int D, int BM, int BF16>
static __device__ __forceinline__ void dfa__store_o_tma(const float (*acc)[4], const float *m, const float *l_part,
                                                        uint32_t sQ, const CUtensorMap *to, float *lse, int c,
                                                        int warp, int lane, int h, int m0, int b, int seqlen_q,
                                                        float sink) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float l = dfa__quad_sum(l_part[r]);
        float inv;
        const float row_lse = dfa__row_finish(m[r], l, sink, &inv);
        const int row = warp * 16 + g + 8 * r; /* within the warpgroup's 64 */
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            dfa__st_swz128_pair<BF16>(sQ, BM, c * 64 + row, j, t, acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
        const int grow = m0 + c * 64 + row;
        if (lse && t == 0 && grow < seqlen_q) lse[grow] = row_lse;
    }
    dfa__fence_proxy_async();
    dfa__named_sync(4 + c, 128); /* ids 1 .. 3 are the ping-pong's */
    if (warp == 0 && lane == 0) {
        dfa__tma_store_rows64<D>(to, sQ, BM, c * 64, h, m0 + c * 64, b);
        dfa__bulk_commit();
        dfa__bulk_wait_read(); /* the shared memory stays until the copy engine has read it */
    }
}

/* One query tile per CTA: tile blockIdx.x of the grid's order (dfa__fwd_tile_order). */
template <class K, int BF16, int OUT32>
__global__ void __launch_bounds__(128 * (K::NCW + 1), 1)
    dfa__fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                          const dfa__fwd_params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    constexpr int D = K::D, DV = K::DV, BN = K::BN, NCW = K::NCW;
    typedef dfa__fwd_wgmma_layout<D, BN, NCW, DV> C;
    constexpr int BM = C::BM, STAGES = C::STAGES, NCB = D / 64, OT8 = DV / 8;
    constexpr bool TMA_O = K::TMA_O && !OUT32;
    /* registers: the producer keeps what TMA issue needs, the consumers share the rest */
    constexpr int PRODUCER_REGS = NCW == 2 ? 40 : 32, CONSUMER_REGS = NCW == 2 ? 232 : 160;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sK = base + C::QBYTES, sV = sK + STAGES * C::KVBYTES;
    const dfa__fwd_bars<STAGES> B = {base + C::BAR_OFF};
    const uint32_t q_full = B.q_full();

    const int tid = threadIdx.x;
    const int heads = p.sh.batch * p.sh.num_heads;
    const int nm = (p.sh.seqlen_q + BM - 1) / BM;
    int mb, bh;
    dfa__fwd_tile_order(blockIdx.x, nm, heads, p.l2_heads, &mb, &bh);
    const int b = bh / p.sh.num_heads, h = bh % p.sh.num_heads, kvh = h / (p.sh.num_heads / p.sh.num_kv_heads);
    const int m0 = mb * BM;
    const long long ostride = (long long)p.sh.num_heads * DV; /* o's rows: [batch, seqlen_q, heads, DV] */
    OutT *og = (OutT *)p.o + (long long)b * p.sh.seqlen_q * ostride + (long long)h * DV;
    float *lseg = p.lse ? p.lse + (long long)bh * p.sh.seqlen_q : (float *)0;
    int kb0, kb1; /* the key blocks this query block sees (mask.cuh) */
    dfa__mask_key_blocks<BN>(p.sh, b, m0, BM, &kb0, &kb1);
    const int nblocks = kb1 - kb0, n_begin = kb0 * BN;

    if (nblocks == 0) { /* no row of this tile sees a key: o = 0, lse = -inf (the sink where there is one) */
        for (int i = tid; i < BM * (DV / 8); i += C::NT) {
            const int r = m0 + i / (DV / 8), c = (i % (DV / 8)) * 8;
            if (r < p.sh.seqlen_q) dfa__store_zero8(og + (long long)r * ostride + c);
        }
        if (lseg)
            for (int i = tid; i < BM; i += C::NT)
                if (m0 + i < p.sh.seqlen_q) lseg[m0 + i] = dfa__row_sink(p.sh, h);
        return;
    }

    if (tid == 0) {
        dfa__mbar_init(q_full, 1);
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
            dfa__mbar_expect_tx(q_full, C::QBYTES);
#pragma unroll
            for (int cb = 0; cb < NCB; cb++) dfa__tma_load_4d(sQ + cb * BM * 128, &tq, q_full, cb * 64, h, m0, b);
            dfa__fwd_load_tile_kv<NCB, BN, STAGES, C::KVBYTES, DV / 64, C::VBYTES>(B, sK, sV, &tk, &tv, kvh, b, n_begin,
                                                                                   nblocks, 0);
        }
        return;
    }

    dfa__setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, wt = tid - 128 * wg, warp = wt >> 5, lane = wt & 31;
    const int row0 = m0 + c * 64 + warp * 16;
    int lim[2], mlo[2], mhi[2];
    dfa__fwd_row_state(p.sh, b, row0 + (lane >> 2), lim, mlo, mhi);
    float o[OT8 * 4];
#pragma unroll
    for (int i = 0; i < OT8 * 4; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    /* ping-pong: the consumers issue in turn, c after c - 1 (named barrier 1 + c) */
    if (K::PINGPONG && c == NCW - 1) dfa__named_arrive(1, 256); /* consumer 0 goes first */
    dfa__mbar_wait(q_full, 0);
    uint32_t pf[BN / 16][4];
    dfa__fwd_consume_tile<K, BF16, false>(o, m, l, pf, B, sQ, sK, sV, 0, nblocks, n_begin, mlo, mhi, lim, m0, p, c,
                                          lane, 0, [](float *) {});
    const float sink = dfa__row_sink(p.sh, h);
    if (TMA_O)
        dfa__store_o_tma<DV, BM, BF16>((const float(*)[4])o, m, l, sQ, &to, lseg, c, warp, lane, h, m0, b, p.sh.seqlen_q,
                                       sink);
    else
        dfa__store_o_lse<OT8, BF16, OutT>((float(*)[4])o, m, l, og, ostride, lseg, row0, p.sh.seqlen_q, DV, lane, sink);
#else
    (void)tq; (void)tk; (void)tv; (void)to; (void)p;
    __trap();
#endif
}

#endif
