/* Internal: the Hopper forward kernel (FlashAttention-3 design): wgmma with
 * TMA loads and warp specialisation, for head dims 64 and 128 (sm_90a only).
 *
 * A CTA has NCW + 1 warpgroups. Warpgroup 0 is the producer: one thread issues the
 * bulk tensor copies of the CTA's Q tile and of every K and V tile into a
 * two-stage ring, each stage guarded by a "full" mbarrier (bytes landed) and an
 * "empty" one (every consumer done with it). Warpgroups 1 .. NCW each own 64
 * query rows (NCW = 2: a 128-row query tile; 3: 192 rows, FlashAttention-3's
 * head-dim-64 tile, which reads each K/V tile for 1.5x the rows): S = Q K^T with
 * both operands in shared memory, the online softmax in registers, then O += P V
 * with P straight from registers (RS form). The producer hands registers to the
 * consumers with setmaxnreg (40 / 232 with two consumers, 32 / 160 with three).
 * PP bit 0 (PINGPONG) makes the consumers issue their products in turn (named
 * barriers); bit 1 (PIPELINE) issues S of block j + 1 before the softmax of block
 * j, which then runs under P V of block j (FlashAttention-3's intra-warpgroup
 * overlap); bit 2 (with bit 1) rescales o under S of the next block instead of
 * after P V; bit 3 takes 2^x from ex2.approx.ftz alone (dfa__exp2_ftz) instead of exp2f's
 * denormal-preserving sequence; bit 4 stores o through shared memory and TMA (dfa__store_o_tma);
 * bit 5 runs the grid as the persistent kernel at the end of this file (one CTA per SM); bit 6
 * (with bit 1) keeps a row's reference maximum until a block raises it by more than 2^8
 * (dfa__softmax_tile's KEEP_MAX), so that most blocks skip o's rescale (FlashAttention-4's
 * conditional rescaling); bit 7 (with bit 1) holds each consumer's Q in registers (wgmma RS with
 * K-major B), so that S reads only K from shared memory; bit 8 (with bits 1 and 5) leaves each
 * tile's last P V owed, issued with the next tile's first S (dfa__fwd_consume_tile); bit 9 (with
 * bit 1) builds the wgmma descriptors as a base plus a constant (dfa__wgmma_desc_at).
 * Which combinations the library ships is in launch_fwd.cuh; the
 * others run in the kernel lab. OUT32 writes o as float32.
 *
 * Shared memory holds every tile as 64-column blocks of 128-byte rows in the
 * 128-byte swizzle that both TMA and wgmma speak; a D = 128 tile is two blocks. The kernel
 * lab also instantiates D = 256 (128 x 64 tiles, o in 128 registers per consumer thread). */
#ifndef DFA_CUDA_FWD_WGMMA_CUH
#define DFA_CUDA_FWD_WGMMA_CUH

#include <cuda.h>

#include "fwd_mma.cuh"
#include "wgmma_gen.cuh"

template <int D, int BN, int NCW = 2> struct dfa__fwd_wgmma_cfg {
    static constexpr int BM = 64 * NCW, STAGES = 2, NT = 128 * (NCW + 1);
    static constexpr int QBYTES = BM * D * 2, KVBYTES = BN * D * 2;
    static constexpr int BAR_OFF = QBYTES + 2 * STAGES * KVBYTES;
    static constexpr int SMEM = BAR_OFF + 128 + 1024; /* barriers + room to align to 1024 */
};

/* The output rows' rescale to a new running maximum (rows g and g + 8 of the warp's 16).
   SKIP_ONES: the warp skips it when every one of its rows kept its maximum (PP bit 6). */
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

/* PINGPONG: the NCW consumer warpgroups take turns issuing their Q K^T products (named
   barriers 1 .. NCW), so one's softmax runs under the others' matrix work. */
/* One K or V tile of BN rows into a stage (NCB column blocks of BN 128-byte rows). Alone the
   tensor map's box is the whole tile. In a pair (box of BN / 2 rows) a shared tile is fetched
   half by each CTA's producer, written to both CTAs; a tile only this CTA sees comes in two
   halves of its own. */
template <int CLUSTER, int NCB, int BN>
static __device__ __forceinline__ void dfa__fwd_load_kv(uint32_t dst, const CUtensorMap *map, uint32_t full, int kvh,
                                                        int n, int b, int shared, uint32_t rank) {
#pragma unroll
    for (int cb = 0; cb < NCB; cb++) {
        const uint32_t d = dst + cb * BN * 128;
        if (CLUSTER == 1) {
            dfa__tma_load_4d(d, map, full, cb * 64, kvh, n, b);
        } else if (shared) {
            dfa__tma_load_4d_multicast(d + rank * (BN / 2) * 128, map, full, cb * 64, kvh, n + (int)rank * (BN / 2), b,
                                       (uint16_t)3);
        } else {
            dfa__tma_load_4d(d, map, full, cb * 64, kvh, n, b);
            dfa__tma_load_4d(d + (BN / 2) * 128, map, full, cb * 64, kvh, n + BN / 2, b);
        }
    }
}

/* A consumer warpgroup is done with a K or V stage. Alone (CLUSTER = 1) every thread arrives
   on the CTA's empty barrier. In a pair of CTAs that share the stage's loads, one lane per
   warp arrives twice: on its own CTA's barrier and on the peer's when the iteration is shared
   (the peer's producer writes half of this CTA's stage), on its own twice otherwise. */
template <int CLUSTER>
static __device__ __forceinline__ void dfa__fwd_release(uint32_t empty, int shared, int lane, uint32_t peer) {
    if (CLUSTER == 1) {
        dfa__mbar_arrive(empty);
        return;
    }
    __syncwarp();
    if (lane == 0) {
        dfa__mbar_arrive(empty);
        if (shared) dfa__mbar_arrive_cluster(empty, peer);
        else dfa__mbar_arrive(empty);
    }
}

/* The kernels' mbarriers, 8 bytes each from `bar`: q_full, k_full[S], k_empty[S], v_full[S],
   v_empty[S]; the persistent kernel adds q_empty, tile_full[2] and tile_empty[2], then two
   4-byte slots for tile numbers (dfa__fwd_persist_cfg). */
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
   has one tile). The first nshared blocks are shared with the peer CTA of a pair. */
template <int CLUSTER, int NCB, int BN, int STAGES, int KVBYTES>
static __device__ __forceinline__ void dfa__fwd_load_tile_kv(const dfa__fwd_bars<STAGES> &B, uint32_t sK, uint32_t sV,
                                                             const CUtensorMap *tk, const CUtensorMap *tv, int kvh,
                                                             int b, int n_begin, int nblocks, int g, int nshared,
                                                             uint32_t rank) {
    for (int it = 0; it < nblocks; it++) {
        const int s = (g + it) % STAGES;
        const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u;
        const int n = n_begin + it * BN;
        dfa__mbar_wait(B.k_empty(s), ph ^ 1u);
        dfa__mbar_expect_tx(B.k_full(s), KVBYTES);
        dfa__fwd_load_kv<CLUSTER, NCB, BN>(sK + s * KVBYTES, tk, B.k_full(s), kvh, n, b, it < nshared, rank);
        dfa__mbar_wait(B.v_empty(s), ph ^ 1u);
        dfa__mbar_expect_tx(B.v_full(s), KVBYTES);
        dfa__fwd_load_kv<CLUSTER, NCB, BN>(sV + s * KVBYTES, tv, B.v_full(s), kvh, n, b, it < nshared, rank);
    }
}

/* A consumer warpgroup's pipelined walk over one query tile's key blocks (PP bit 1): S of
   block it is computed while P V of block it - 1 is still in flight; the softmax of block it
   runs under that product, and o is rescaled once it has landed. The first S and the last P V
   are peeled off the loop, so that every iteration commits the same two groups and ptxas can
   see which wait retires which product (with conditional commits it serialises the wgmmas).
   Stages from ring position g on, as the producer's. With PERSIST the warpgroup releases the
   Q tile (q_empty) as soon as its last S has completed (with Q_RS as soon as it has read Q into
   registers), so that the producer loads the next tile's Q under this one's work. o, m, l: the row state, started by the
   caller; Q must have landed. */
/* O += P V over a key block: P (16-bit, BN / 16 register fragments) from registers, V from the
   stage at sVs; committed as one wgmma group. */
template <int D, int BN, int BF16, int DESC_ADD = 0>
static __device__ __forceinline__ void dfa__fwd_issue_pv(float *o, uint32_t (*pf)[4], uint32_t sVs) {
    const uint32_t v_lo = dfa__wgmma_desc_lo(sVs, BN * 128);
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++)
        dfa__wgmma_rs<D, BF16>(o, pf[kk],
                               DESC_ADD ? dfa__wgmma_desc_at(v_lo, kk * 16 * 128)
                                        : dfa__wgmma_desc(sVs + kk * 16 * 128, BN * 128),
                               1);
    dfa__wgmma_commit();
}

/* The last P V of a tile (block gb of the stage ring, P in pf; LATE_RESCALE: o first rescaled by
   alpha); o is complete when it returns. */
template <int D, int BN, int BF16, int PINGPONG, int LATE_RESCALE, int KEEP_MAX, int CLUSTER, int KVBYTES>
static __device__ __forceinline__ void dfa__fwd_last_pv(float *o, uint32_t (*pf)[4], const float *alpha,
                                                        const dfa__fwd_bars<2> &B, uint32_t sV, int gb, int shared,
                                                        int c, int next_bar, int lane, uint32_t peer) {
    const int sp = gb % 2;
    dfa__mbar_wait(B.v_full(sp), (uint32_t)(gb / 2) & 1u);
    if (PINGPONG) dfa__named_sync(1 + c, 256);
    if (LATE_RESCALE) dfa__rescale_o<D / 8, KEEP_MAX>(o, alpha);
    dfa__wgmma_fence();
    dfa__fwd_issue_pv<D, BN, BF16>(o, pf, sV + sp * KVBYTES);
    if (PINGPONG) dfa__named_arrive(next_bar, 256);
    dfa__wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < D / 8 * 4; i++) dfa__reg_fence(o[i]);
    dfa__fwd_release<CLUSTER>(B.v_empty(sp), shared, lane, peer);
}

/* A consumer warpgroup's pass over one query tile: key blocks [n_begin, + nblocks * BN), stage ring
   position g. pf holds P of a block between its softmax and its P V.
   OWED (PP bit 8, persistent kernel only): the tile's last P V is not issued here but left owed
   (P in pf, o as it stands), and the next tile's first S goes in together with it, so that the
   first softmax runs under that P V instead of with nothing in flight; `owed` says whether the
   previous tile left one (block g - 1), and `finish(o)` is that tile's epilogue, called once its
   P V has retired (then o restarts at 0). Without OWED, `owed` must be 0. */
template <int D, int BN, int BF16, int PP, int NCW, int CLUSTER, int PERSIST, typename Finish>
static __device__ __forceinline__ void dfa__fwd_consume_tile(float *o, float *m, float *l, uint32_t (*pf)[4],
                                                             const dfa__fwd_bars<2> &B, uint32_t sQ, uint32_t sK,
                                                             uint32_t sV, int g, int nblocks, int n_begin, int nshared,
                                                             const int *mlo, const int *mhi, const int *lim, int m0,
                                                             const dfa__fwd_params &p, int c, int lane, uint32_t peer,
                                                             int owed, Finish finish) {
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    constexpr int BM = C::BM, STAGES = C::STAGES, NT8 = BN / 8, OT8 = D / 8;
    constexpr int PINGPONG = PP & 1, LATE_RESCALE = (PP & 4) != 0, FAST_EXP = (PP & 8) != 0, KEEP_MAX = (PP & 64) != 0;
    constexpr int Q_RS = (PP & 128) != 0, OWED = PERSIST && (PP & 256) != 0;
    /* DESC_ADD (PP bit 9): the wgmma descriptors as a base per stage plus a constant per k-step
       (dfa__wgmma_desc_at), not masked and shifted again for every k-step */
    constexpr int DESC_ADD = (PP & 512) != 0;
    static_assert(!OWED || (!PINGPONG && !LATE_RESCALE && CLUSTER == 1), "an owed P V: pipelined, persistent only");
    const int next_bar = 1 + (c + 1) % NCW;
    float sc[NT8 * 4];
    float(*s4)[4] = (float(*)[4])sc;
    /* Q_RS (PP bit 7): this warp's 16 rows of Q in registers, read once (ldmatrix, through the
       128-byte swizzle: 16-byte chunk j of row r sits at chunk j ^ (r % 8)), so that each S reads
       only K from shared memory; the tile's Q buffer is free from then on */
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
#define DFA__FWD_ISSUE_S(s_)                                                                                      \
    do {                                                                                                          \
        const uint32_t k_lo = dfa__wgmma_desc_lo(sK + (s_) * C::KVBYTES, 16);                                   \
        const uint32_t q_lo = dfa__wgmma_desc_lo(sQ + c * 64 * 128, 16);                                         \
        _Pragma("unroll") for (int kk = 0; kk < D / 16; kk++) {                                                  \
            const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, qc = (kk / 4) * BM * 128 + (kk % 4) * 32;    \
            const uint64_t db = DESC_ADD ? dfa__wgmma_desc_at(k_lo, kc) : dfa__wgmma_desc(sK + (s_) * C::KVBYTES + kc, 16); \
            if (Q_RS) {                                                                                           \
                dfa__wgmma_rs_kb<BN, BF16>(sc, qf[Q_RS ? kk : 0], db, kk > 0);                                    \
            } else {                                                                                              \
                const uint64_t da = DESC_ADD ? dfa__wgmma_desc_at(q_lo, qc)                                       \
                                             : dfa__wgmma_desc(sQ + c * 64 * 128 + qc, 16);                       \
                dfa__wgmma_ss<BN, BF16>(sc, da, db, kk > 0);                                                      \
            }                                                                                                     \
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
            dfa__fwd_issue_pv<D, BN, BF16, DESC_ADD>(o, pf, sV + so * C::KVBYTES);
            dfa__wgmma_wait<1>(); /* S has retired; the owed P V may still run */
        } else {
            dfa__wgmma_wait<0>();
        }
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
        dfa__fwd_release<CLUSTER>(B.k_empty(s), 0 < nshared, lane, peer);
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n_begin, lane);
        dfa__softmax_step<BN, 0, FAST_EXP, KEEP_MAX>(s4, (float(*)[4])o, m, l, lim, n_begin, m0, p.sh.seqlen_k,
                                                     p.sh.causal, p.sh.offset, p.scale_log2, lane, alpha);
        if (W) {
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
            dfa__fwd_release<CLUSTER>(B.v_empty(so), 0, lane, peer);
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
        if (W) {
            finish(o);
#pragma unroll
            for (int i = 0; i < OT8 * 4; i++) o[i] = 0.0f;
        }
    };
    if (OWED && owed) first_block(dfa__ctag<1>());
    else first_block(dfa__ctag<0>());
    for (int it = 1; it < nblocks; it++) {
        const int s = (g + it) % STAGES, sp = (g + it - 1) % STAGES;
        const uint32_t ph = (uint32_t)((g + it) / STAGES) & 1u, php = (uint32_t)((g + it - 1) / STAGES) & 1u;
        dfa__mbar_wait(B.k_full(s), ph);
        dfa__mbar_wait(B.v_full(sp), php);
        if (PINGPONG) dfa__named_sync(1 + c, 256);
        dfa__wgmma_fence();
        DFA__FWD_ISSUE_S(s);
        if (LATE_RESCALE) { /* o of block it - 2 to the maximum of it - 1, under S of block it */
            dfa__rescale_o<OT8, KEEP_MAX>(o, alpha);
            dfa__wgmma_fence();
        }
        dfa__fwd_issue_pv<D, BN, BF16, DESC_ADD>(o, pf, sV + sp * C::KVBYTES);
        if (PINGPONG) dfa__named_arrive(next_bar, 256);
        dfa__wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
        dfa__fwd_release<CLUSTER>(B.k_empty(s), it < nshared, lane, peer);
        const int n0 = n_begin + it * BN;
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n0, lane);
        dfa__softmax_step<BN, 0, FAST_EXP, KEEP_MAX>(s4, (float(*)[4])o, m, l, lim, n0, m0, p.sh.seqlen_k, p.sh.causal,
                                           p.sh.offset, p.scale_log2, lane, alpha);
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
        dfa__fwd_release<CLUSTER>(B.v_empty(sp), it - 1 < nshared, lane, peer);
        if (!LATE_RESCALE) dfa__rescale_o<OT8, KEEP_MAX>(o, alpha);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
    }
    if (PERSIST && !Q_RS) dfa__mbar_arrive(B.q_empty()); /* every S of this tile has completed */
    if (OWED) return; /* the last P V goes in with the next tile's first S, or dfa__fwd_last_pv's */
    dfa__fwd_last_pv<D, BN, BF16, PINGPONG, LATE_RESCALE, KEEP_MAX, CLUSTER, C::KVBYTES>(
        o, pf, alpha, B, sV, g + nblocks - 1, nblocks - 1 < nshared, c, next_bar, lane, peer);
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

/* TMA_O (PP bit 4, 16-bit o): a consumer warpgroup's 64 x D tile of o leaves through the copy
   engine. The warpgroup writes it, normalised and rounded, over its own 64 rows of the Q tile
   (no product reads them any more: its last S has retired, and each warpgroup's products read
   only its own rows), in the 128-byte swizzle that the tensor map `to` (boxes of 64 rows) reads;
   one thread then stores it, and rows past seqlen_q fall outside the tensor and are dropped.
   The consumers issue D / 4 conflict-free shared stores per thread instead of as many scattered
   4-byte global ones. */
template <int D, int BM, int BF16>
static __device__ __forceinline__ void dfa__store_o_tma(const float (*acc)[4], const float *m, const float *l_part,
                                                        uint32_t sQ, const CUtensorMap *to, float *lse, int c,
                                                        int warp, int lane, int h, int m0, int b, int seqlen_q) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float l = dfa__quad_sum(l_part[r]);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int row = warp * 16 + g + 8 * r; /* within the warpgroup's 64 */
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            dfa__st_swz128_pair<BF16>(sQ, BM, c * 64 + row, j, t, acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
        const int grow = m0 + c * 64 + row;
        if (lse && t == 0 && grow < seqlen_q) lse[grow] = dfa__row_lse(m[r], l);
    }
    dfa__fence_proxy_async();
    dfa__named_sync(4 + c, 128); /* ids 1 .. 3 are the ping-pong's */
    if (warp == 0 && lane == 0) {
        dfa__tma_store_rows64<D>(to, sQ, BM, c * 64, h, m0 + c * 64, b);
        dfa__bulk_commit();
        dfa__bulk_wait_read(); /* the shared memory stays until the copy engine has read it */
    }
}

template <int D, int BN, int BF16, int PP, int OUT32, int NCW = 2, int CLUSTER = 1>
__global__ void __launch_bounds__(128 * (NCW + 1), 1)
    dfa__fwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                          const dfa__fwd_params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    constexpr int BM = C::BM, STAGES = C::STAGES, NCB = D / 64, NT8 = BN / 8, OT8 = D / 8;
    constexpr int PINGPONG = PP & 1, PIPELINE = (PP & 2) != 0;
    constexpr int FAST_EXP = (PP & 8) != 0, TMA_O = (PP & 16) != 0 && !OUT32;
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
    /* dfa__fwd_tile_order; in pairs, query blocks 2i and 2i + 1 of one head (nm even) */
    const uint32_t rank = CLUSTER == 2 ? blockIdx.x & 1u : 0u, peer = rank ^ 1u;
    int mb, bh;
    dfa__fwd_tile_order(blockIdx.x / CLUSTER, nm / CLUSTER, heads, p.l2_heads, &mb, &bh);
    mb = CLUSTER * mb + (int)rank;
    const int b = bh / p.sh.num_heads, h = bh % p.sh.num_heads, kvh = h / (p.sh.num_heads / p.sh.num_kv_heads);
    const int m0 = mb * BM;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim;
    OutT *og = (OutT *)p.o + (long long)b * p.sh.seqlen_q * qstride + (long long)h * p.sh.head_dim;
    float *lseg = p.lse ? p.lse + (long long)bh * p.sh.seqlen_q : (float *)0;
    int kb0, kb1; /* the key blocks this query block sees (mask.cuh) */
    dfa__mask_key_blocks<BN>(p.sh, b, m0, BM, &kb0, &kb1);
    const int nblocks = kb1 - kb0, n_begin = kb0 * BN;
    /* A pair shares the K/V loads of the key blocks both see from the same first block on:
       each producer fetches half of every such tile for both CTAs (TMA multicast). */
    int nshared = 0;
    if (CLUSTER == 2) {
        int pk0, pk1;
        dfa__mask_key_blocks<BN>(p.sh, b, (mb ^ 1) * BM, BM, &pk0, &pk1);
        if (pk0 == kb0) nshared = (pk1 < kb1 ? pk1 : kb1) - kb0;
        if (nshared < 0) nshared = 0;
    }

    if (nblocks == 0) { /* no row of this tile sees a key: o = 0, lse = -inf */
        for (int i = tid; i < BM * (D / 8); i += C::NT) {
            const int r = m0 + i / (D / 8), c = (i % (D / 8)) * 8;
            if (r < p.sh.seqlen_q) dfa__store_zero8(og + (long long)r * qstride + c);
        }
        if (lseg)
            for (int i = tid; i < BM; i += C::NT)
                if (m0 + i < p.sh.seqlen_q) lseg[m0 + i] = -INFINITY;
        if (CLUSTER == 2) { /* the peer meets this CTA twice: after its barriers' set-up and at its end */
            __syncwarp();
            dfa__cluster_sync();
            dfa__cluster_sync();
        }
        return;
    }

    if (tid == 0) {
        dfa__mbar_init(q_full, 1);
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(B.k_full(s), 1);
            dfa__mbar_init(B.v_full(s), 1);
            dfa__mbar_init(B.k_empty(s), CLUSTER == 1 ? 128 * NCW : 8 * NCW);
            dfa__mbar_init(B.v_empty(s), CLUSTER == 1 ? 128 * NCW : 8 * NCW);
        }
        dfa__fence_barrier_init();
    }
    if (CLUSTER == 2) dfa__cluster_sync(); /* the peer's barriers exist before anything reaches them */
    else __syncthreads();

    const int wg = tid / 128;
    if (wg == 0) {
        dfa__setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            dfa__mbar_expect_tx(q_full, C::QBYTES);
#pragma unroll
            for (int cb = 0; cb < NCB; cb++) dfa__tma_load_4d(sQ + cb * BM * 128, &tq, q_full, cb * 64, h, m0, b);
            dfa__fwd_load_tile_kv<CLUSTER, NCB, BN, STAGES, C::KVBYTES>(B, sK, sV, &tk, &tv, kvh, b, n_begin, nblocks,
                                                                       0, nshared, rank);
        }
        if (CLUSTER == 2) {
            __syncwarp();
            dfa__cluster_sync();
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
    const int next_bar = 1 + (c + 1) % NCW;
    if (PINGPONG && c == NCW - 1) dfa__named_arrive(1, 256); /* consumer 0 goes first */
    dfa__mbar_wait(q_full, 0);
    if (PIPELINE) {
        uint32_t pf[BN / 16][4];
        dfa__fwd_consume_tile<D, BN, BF16, PP, NCW, CLUSTER, 0>(o, m, l, pf, B, sQ, sK, sV, 0, nblocks, n_begin, nshared,
                                                                mlo, mhi, lim, m0, p, c, lane, peer, 0, [](float *) {});
    } else
    for (int it = 0; it < nblocks; it++) {
        const int s = it % STAGES, n0 = n_begin + it * BN;
        const uint32_t ph = (uint32_t)(it / STAGES) & 1u;
        float sc[NT8 * 4];
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) sc[i] = 0.0f;
        dfa__mbar_wait(B.k_full(s), ph);
        if (PINGPONG) dfa__named_sync(1 + c, 256);
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint64_t da = dfa__wgmma_desc(sQ + (kk / 4) * BM * 128 + c * 64 * 128 + (kk % 4) * 32, 16);
            const uint64_t db = dfa__wgmma_desc(sK + s * C::KVBYTES + (kk / 4) * BN * 128 + (kk % 4) * 32, 16);
            dfa__wgmma_ss<BN, BF16>(sc, da, db, kk > 0);
        }
        dfa__wgmma_commit();
        if (PINGPONG) dfa__named_arrive(next_bar, 256);
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < NT8 * 4; i++) dfa__reg_fence(sc[i]);
        dfa__fwd_release<CLUSTER>(B.k_empty(s), it < nshared, lane, peer);

        float(*s4)[4] = (float(*)[4])sc;
        if (p.sh.masked) dfa__mask_scores<NT8>(s4, mlo, mhi, n0, lane);
        dfa__softmax_step<BN, OT8, FAST_EXP>(s4, (float(*)[4])o, m, l, lim, n0, m0, p.sh.seqlen_k, p.sh.causal, p.sh.offset,
                                   p.scale_log2, lane);
        uint32_t pf[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) dfa__pack_a<BF16>(pf[kk], s4[2 * kk], s4[2 * kk + 1]);
        dfa__mbar_wait(B.v_full(s), ph);
        dfa__wgmma_fence();
        dfa__fwd_issue_pv<D, BN, BF16>(o, pf, sV + s * C::KVBYTES);
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < OT8 * 4; i++) dfa__reg_fence(o[i]);
        dfa__fwd_release<CLUSTER>(B.v_empty(s), it < nshared, lane, peer);
    }
    if (TMA_O)
        dfa__store_o_tma<D, BM, BF16>((const float(*)[4])o, m, l, sQ, &to, lseg, c, warp, lane, h, m0, b, p.sh.seqlen_q);
    else
        dfa__store_o_lse<OT8, BF16, OutT>((float(*)[4])o, m, l, og, qstride, lseg, row0, p.sh.seqlen_q, p.sh.head_dim,
                                          lane);
    if (CLUSTER == 2) { /* the peer may still arrive on this CTA's barriers */
        __syncwarp();
        dfa__cluster_sync();
    }
#else
    (void)tq; (void)tk; (void)tv; (void)to; (void)p;
    __trap();
#endif
}

/* The persistent forward (PP bit 5; launch_fwd.cuh picks it when a grid has more query tiles
 * than the device has SMs). The one-tile kernel above gives every CTA its set-up, its Q load
 * and first K/V loads before any product, and its last P V and epilogue with nothing behind
 * them (one CTA of 384 threads fills an SM): a large share of short tiles (a 4k window's 33 key
 * blocks, short documents, short sequences). Here one CTA per SM walks tiles: the stage ring
 * carries over from tile to tile (position g), and the Q buffer is released (q_empty) once a
 * tile's last S has completed, so the producer loads the next tile's Q and first K/V blocks
 * under this tile's last P V and epilogue. Tile numbers come in the grid's order
 * (dfa__fwd_tile_order) from a global counter that the launcher zeroes on the stream: the
 * producer takes the next number when it starts loading that tile (FlashAttention-3's dynamic
 * scheduler), so tiles start in the one-tile kernel's order as CTAs free up (a fixed stride
 * measured 7-13% slower: unequal work per CTA, bench/gpu/NOTES.md). It hands each number to
 * the consumers through two slots in shared memory (tile_full / tile_empty). With PP bit 4 o
 * leaves by TMA from a shared buffer of its own (the Q buffer is the next tile's by then:
 * 32 KB more at d = 128), each warpgroup's 64 rows as in the one-tile kernel; without it, from
 * registers. 16-bit o only, no clusters. With PP bit 8 the consumers overlap tiles too: a tile's
 * last P V is issued with the next tile's first S, and its o leaves after that S's softmax. (A first
 * try, with a second Q buffer and one copy of the first block for both cases, lost 5-9%: ptxas
 * serialised the products where the two cases joined; bench/gpu/NOTES.md, 2026-12-01 seventh
 * session, item 4, and 2026-12-02 fourteenth session.) */
template <int D, int BN, int NCW, int TMA_O = 0> struct dfa__fwd_persist_cfg {
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    static constexpr int O_OFF = C::QBYTES + 2 * C::STAGES * C::KVBYTES; /* o's staging tile (TMA_O) */
    static constexpr int BAR_OFF = O_OFF + (TMA_O ? C::QBYTES : 0);
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
        if (lseg && lane < 16 && row0 + lane < p.sh.seqlen_q) lseg[row0 + lane] = -INFINITY;
    }
}

/* o and lse of a consumer warp's 16 rows of tile T. */
template <int D, int BF16>
static __device__ __forceinline__ void dfa__fwd_tile_store(const dfa__fwd_params &p, const dfa__fwd_tile &T, float *o,
                                                           const float *m, const float *l, int c, int warp,
                                                           int lane) {
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim;
    uint16_t *og = (uint16_t *)p.o + (long long)T.b * p.sh.seqlen_q * qstride + (long long)T.h * p.sh.head_dim;
    float *lseg = p.lse ? p.lse + (long long)T.bh * p.sh.seqlen_q : (float *)0;
    dfa__store_o_lse<D / 8, BF16, uint16_t>((float(*)[4])o, m, l, og, qstride, lseg, T.m0 + c * 64 + warp * 16,
                                            p.sh.seqlen_q, p.sh.head_dim, lane);
}

/* o and lse of a consumer warpgroup's rows of tile T: by TMA from the staging tile sO (the issuing
   thread waits until the copy engine has read it, before its next tile), else from registers. */
template <int D, int BM, int BF16, int TMA_O>
static __device__ __forceinline__ void dfa__fwd_persist_store(const dfa__fwd_params &p, const CUtensorMap *to,
                                                              uint32_t sO, const dfa__fwd_tile &T, float *o,
                                                              const float *m, const float *l, int c, int warp,
                                                              int lane) {
    if (TMA_O)
        dfa__store_o_tma<D, BM, BF16>((const float(*)[4])o, m, l, sO, to,
                                      p.lse ? p.lse + (long long)T.bh * p.sh.seqlen_q : (float *)0, c, warp, lane, T.h,
                                      T.m0, T.b, p.sh.seqlen_q);
    else
        dfa__fwd_tile_store<D, BF16>(p, T, o, m, l, c, warp, lane);
}

template <int D, int BN, int BF16, int PP, int NCW>
__global__ void __launch_bounds__(128 * (NCW + 1), 1)
    dfa__fwd_wgmma_persistent_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                                     const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap to,
                                     const dfa__fwd_params p, unsigned int *tile_counter) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int TMA_O = (PP & 16) != 0;
    typedef dfa__fwd_wgmma_cfg<D, BN, NCW> C;
    typedef dfa__fwd_persist_cfg<D, BN, NCW, TMA_O> PC;
    constexpr int BM = C::BM, STAGES = C::STAGES, NCB = D / 64, OT8 = D / 8;
    static_assert((PP & 2) != 0, "the persistent forward is the pipelined one");
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
                dfa__fwd_load_tile_kv<1, NCB, BN, STAGES, C::KVBYTES>(B, sK, sV, &tk, &tv, kvh, b, kb0 * BN, kb1 - kb0,
                                                                      g, 0, 0u);
                g += kb1 - kb0;
                qn++;
            }
        }
        return;
    }

    dfa__setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1, wt = tid - 128 * wg, warp = wt >> 5, lane = wt & 31;
    if ((PP & 1) && c == NCW - 1) dfa__named_arrive(1, 256); /* ping-pong: consumer 0 goes first */
    constexpr int OWED = (PP & 256) != 0;
    int g = 0;
    uint32_t qn = 0, k = 0;
    dfa__fwd_tile T, done = {0, 0, 0, 0, 0, 0}; /* done: the tile whose last P V is owed (OWED) */
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
        if constexpr (OWED) {
            dfa__fwd_consume_tile<D, BN, BF16, PP, NCW, 1, 1>(
                o, m, l, pf, B, sQ, sK, sV, g, T.nblocks, T.kb0 * BN, 0, mlo, mhi, lim, T.m0, p, c, lane, 0u, owed,
                [=](float *oo) { dfa__fwd_persist_store<D, BM, BF16, TMA_O>(p, tmo, sO, done, oo, done_m, done_l, c, warp, lane); });
            done = T;
            done_m[0] = m[0], done_m[1] = m[1], done_l[0] = l[0], done_l[1] = l[1];
            owed = 1;
        } else {
            dfa__fwd_consume_tile<D, BN, BF16, PP, NCW, 1, 1>(o, m, l, pf, B, sQ, sK, sV, g, T.nblocks, T.kb0 * BN, 0, mlo,
                                                              mhi, lim, T.m0, p, c, lane, 0u, 0, [](float *) {});
            dfa__fwd_persist_store<D, BM, BF16, TMA_O>(p, tmo, sO, T, o, m, l, c, warp, lane);
        }
        g += T.nblocks;
        qn++;
    }
    if (OWED && owed) { /* the last tile's P V */
        const float no_alpha[2] = {1.0f, 1.0f};
        dfa__fwd_last_pv<D, BN, BF16, 0, 0, 0, 1, C::KVBYTES>(o, pf, no_alpha, B, sV, g - 1, 0, c, 0, lane, 0u);
        dfa__fwd_persist_store<D, BM, BF16, TMA_O>(p, tmo, sO, done, o, done_m, done_l, c, warp, lane);
    }
#else
    (void)tq; (void)tk; (void)tv; (void)to; (void)p; (void)tile_counter;
    __trap();
#endif
}

#endif
