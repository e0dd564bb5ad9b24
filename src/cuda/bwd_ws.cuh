/* Internal: the warp-specialised Hopper backward key-block kernel (FlashAttention-3's
 * structure, sm_90a only) for head dims 64 and 128. What each head dim and mask takes is its
 * configuration struct K in heuristics.h.
 *
 * A CTA owns BN = 128 keys of one (kv head, batch) and walks every query block (BM rows) of
 * every query head of its group that sees them; each consumer warpgroup owns 64 of the keys
 * and keeps their dK and dV in registers:
 *
 *   S^T  = K Q^T,  dP^T = V dO^T                (SS: both operands in shared memory)
 *   P^T  = exp2(S^T scale log2e - lse log2e),  dS^T = P^T (dP^T - D)
 *          (SOFTCAP: S^T capped first, dS^T times the cap's derivative)
 *   dV  += P^T dO,  dK += dS^T Q                (RS: P^T / dS^T straight from registers)
 *   dQ   = dS K  over all 128 keys              (SS, dS^T written to shared memory)
 *
 * Each consumer computes a 64 x 64 part of the dQ tile, or with DQ_WHOLE_TILE the consumers take
 * turns, block J's whole 64 x 128 tile being consumer J & 1's. With DQ_MODE 0 there is no dQ
 * here (the dq pass of bwd_mma.cuh follows). The roles:
 *
 *  - a producer warpgroup (setmaxnreg 24; the consumers get 240): its warp 0 issues the TMA
 *    copies of K, V and of each query block's Q and dO into a two-stage ring, and copies the
 *    block's base-2 lse and D into shared memory beside them, so the consumers read those from
 *    shared memory instead of waiting on global loads;
 *  - its warp 1 adds each dQ tile into the float32 accumulator with TMA tensor reduce-adds
 *    (cp.reduce.async.bulk.tensor) from one of NDQ staged shared-memory tiles, so the consumers
 *    write 32 KB to shared memory instead of issuing 8192 float atomics; in the deterministic
 *    mode (DQ_MODE 2) it adds the tiles of each query block in key-block order (a counter per
 *    tile in global memory), so dq has the same bits on every run;
 *  - two consumer warpgroups: S^T and dP^T are committed as two wgmma groups and P is computed
 *    while dP^T is still in flight; each consumer publishes its half of dS^T with an mbarrier
 *    and waits for the other's only before the dQ product that reads both halves (per-buffer
 *    mbarriers, so neither can lap the other).
 *
 * Shared memory: K, V (BN x D), a two-stage ring of Q, dO (BM x D) and lse2/D (BM floats each),
 * two dS^T buffers (BN x BM), and the dQ staging tiles (BM x D float32 as D/32 boxes of 32
 * floats x BM rows, 128-byte swizzle, the layout the dq tensor map reads). The dq tensor map is
 * over the float32 accumulator ([batch, seqlen_q, heads, D]; with OUT32 the caller's dq, scale
 * applied by the consumers). Every wgmma descriptor is a base per tile plus a constant per
 * k-step (dfa__wgmma_desc_at), the consumer's index broadcast from lane 0 so that ptxas keeps it
 * and the bases in uniform registers. */
#ifndef DFA_CUDA_BWD_WS_CUH
#define DFA_CUDA_BWD_WS_CUH

#include "bwd_mma.cuh"
#include "fwd_wgmma.cuh"
#include "mask.cuh"

template <int D, int BM, int DV = D> struct dfa__bwd_ws_layout {
    static constexpr int BN = 128, STAGES = 2, NT = 384;
    static constexpr int KBYTES = BN * D * 2, VBYTES = BN * DV * 2, QBYTES = BM * D * 2, OBYTES = BM * DV * 2;
    static constexpr int DSBYTES = BN * BM * 2, DQBYTES = BM * D * 4;
    static constexpr int OFF_V = KBYTES, OFF_Q = KBYTES + VBYTES, OFF_DO = OFF_Q + STAGES * QBYTES;
    static constexpr int OFF_DS = OFF_DO + STAGES * OBYTES;
    /* two dQ staging tiles where they fit (D = 128); one at D = 64, whose 128-row tiles leave no room */
    static constexpr int NDQ = D == 128 ? 2 : 1;
    /* two dS^T buffers where they fit; one at 192 / 128 (the consumers then also wait for each
       other's dQ product to retire before writing the next block's) */
    static constexpr int REST = NDQ * DQBYTES + STAGES * 2 * BM * 4 + 128 + 1024;
    static constexpr int NDS = OFF_DS + 2 * DSBYTES + REST <= 232448 ? 2 : 1;
    static constexpr int OFF_DQ = OFF_DS + NDS * DSBYTES;
    static constexpr int OFF_LD = OFF_DQ + NDQ * DQBYTES; /* per stage: lse2[BM] then D[BM] */
    static constexpr int OFF_BAR = OFF_LD + STAGES * 2 * BM * 4;
    static constexpr int SMEM = OFF_BAR + 128 + 1024;
    static_assert(SMEM <= 232448, "over the 227 KB of shared memory a CTA may have");
};

/* In-order dQ (DQ_MODE 2): the writer of key block nb adds its tile of query block m after
   the writers of the key blocks above it (which reach m first: each CTA walks its query
   blocks upwards from its diagonal), so every element of dq_acc sums in the same order on
   every run. The count of tiles already added sits in sem[batch, head, m]. The order is
   derived from the causal/offset structure, so masked calls (documents, windows) take the
   dq pass instead (attn_bwd.cu). */
static __device__ __forceinline__ void dfa__sem_wait(const int *sem, int value) {
    int v;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(sem) : "memory");
    } while (v != value);
}
static __device__ __forceinline__ void dfa__sem_post(int *sem) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(sem) : "memory");
}

/* A query block's base-2 lse and D into shared memory beside its Q and dO (ld: lse2[BM] then
   D[BM]), by the loading warp's lanes: rows past the end get lse2 = +inf, so they see nothing. */
template <int BM>
static __device__ __forceinline__ void dfa__bwd_copy_lse_d(float *ld, const dfa__bwd_params &p, int b, int h, int m0,
                                                           int lane) {
    const long long lrow = ((long long)b * p.sh.num_heads + h) * p.sh.seqlen_q;
    for (int i = lane; i < BM; i += 32) {
        const int q = m0 + i;
        ld[i] = q < p.sh.seqlen_q ? __ldg(p.lse2 + lrow + q) : INFINITY;
        ld[BM + i] = q < p.sh.seqlen_q ? __ldg(p.dsum + lrow + q) : 0.0f;
    }
}

/* In-order dQ: how many tiles query block mi (BM rows) takes before key block nb (of nn, BN keys)
   adds its own: the key blocks that add into mi are 0 .. last, and the higher go first. */
template <int BM, int BN>
static __device__ __forceinline__ int dfa__inorder_dq_turn(const dfa__cuda_shape &sh, int mi, int nn, int nb) {
    int last = nn - 1;
    if (sh.causal) {
        const long long rows_end = (long long)(mi + 1) * BM < sh.seqlen_q ? (long long)(mi + 1) * BM : sh.seqlen_q;
        const long long kmax = (rows_end - 1 + sh.offset) / BN; /* >= nb: this block adds here */
        last = kmax < last ? (int)kmax : last;
    }
    return last - nb;
}

/* With a split dQ (K::DQ_COLS0 > 0): the columns [COL0, COL0 + N) of the dQ tile that part PART
   computes, 1 consumer 0's (the first DQ_COLS0), 2 consumer 1's (the rest). */
template <class K, int PART> struct dfa__bwd_dq_part {
    static constexpr int N = PART == 1 ? K::DQ_COLS0 : K::D - K::DQ_COLS0, COL0 = PART == 1 ? 0 : K::DQ_COLS0;
};

/* K: the configuration (heuristics.h). DQ_MODE: 0 no dQ here (the deterministic dq pass
   follows), 1 dQ tiles added as they come, 2 dQ tiles added in key-block order (deterministic).
   OUT32: dk, dv (and scale * dq, added into the caller's float32 dq) as float32. */
template <class K, int DQ_MODE, int BF16, int OUT32>
__global__ void __launch_bounds__(384, 1)
    dfa__bwd_ws_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo,
                       const __grid_constant__ CUtensorMap tdq, const __grid_constant__ CUtensorMap tdk,
                       const __grid_constant__ CUtensorMap tdv, const dfa__bwd_params p,
                       const __grid_constant__ dfa__cuda_dkv16 dkv16) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    constexpr int D = K::D, DV = K::DV, BM = K::BM;
    constexpr bool MASKED = K::MASKED, FAST_EXP = K::FAST_EXP;
    typedef dfa__bwd_ws_layout<D, BM, DV> C;
    constexpr int BN = C::BN, STAGES = C::STAGES, NCB = D / 64, NCBV = DV / 64, Q8 = BM / 8, D8 = D / 8, DV8 = DV / 8;
    static_assert(DV <= D && DV % 64 == 0, "the value head dim in 64-column blocks, at most the head dim");
    constexpr int DQ_ATOMIC = DQ_MODE != 0, NDQ = C::NDQ, NDS = C::NDS;
    /* DEFER: block it's dQ product goes in with block it + 1's S^T, so that its staging stores
       run under S^T and nothing is in flight across iterations (see the step) */
    constexpr bool DEFER = DQ_ATOMIC && K::DEFER_DQ;
    /* DQ_ALT: block J's whole dQ tile by consumer J & 1, staged into that consumer's own staging
       tile; the other consumer has no dQ work in that block and waits for nothing */
    constexpr bool DQ_ALT = DEFER && K::DQ_WHOLE_TILE;
    static_assert(!K::DQ_WHOLE_TILE || (D == 128 && BM == 64), "a whole dQ tile is one m64n128 product");
    constexpr int DQN = DQ_ALT ? D : 64; /* the dQ product's N: columns of the tile per consumer */
    /* DQ_SPLIT (K::DQ_COLS0 > 0, with DEFER): consumer 0 computes the dQ tile's first DQ_COLS0
       columns and consumer 1 the rest, a split on 64-column blocks that need not halve D */
    constexpr bool DQ_SPLIT = DEFER && K::DQ_COLS0 > 0;
    static_assert(K::DQ_COLS0 == 0 || (K::DEFER_DQ && BM == 64 && K::DQ_COLS0 % 64 == 0 && K::DQ_COLS0 < D),
                  "a dQ split on 64-column blocks of 64-row tiles, deferred");
    constexpr int DQN_MAX = DQ_SPLIT ? 64 : DQN;
    /* DQ_FIRST: block it - 1's dQ retires and is staged before block it's S^T goes in (its
       registers and S^T's would not fit beside dK and dV) */
    constexpr bool DQ_FIRST = DQ_ALT || DQ_SPLIT;
    /* DP_AFTER_P: S^T retires and P is computed and rounded before dP^T and dV go in, so that
       S^T's and dP^T's accumulators are never live at once (dS then takes the rounded P) */
    constexpr bool DP_AFTER_P = K::DP_AFTER_P;
    static_assert(!DP_AFTER_P || !K::SOFTCAP, "the cap's derivative is recovered from P in float32");
    /* TMA_DKV (16-bit dk, dv): dK and dV leave through the copy engine, staged over the K and V
       tiles once both consumers' products have retired (see the end); float32 instances: a key
       tile handed whole to 16-bit outputs (dkv16, launch.h) leaves the same way, through the
       tensor maps tdk, tdv over them */
    constexpr bool TMA_DKV = K::TMA_DKV && !OUT32, TMA_DKV16 = K::TMA_DKV && OUT32;
    /* QSPLIT (float32 dK, dV, dQ added as it comes): with p.qsplit > 1 the grid holds qsplit CTAs
       per key tile, each walking its share of the tile's query blocks and adding its partial dK, dV
       into outputs the launcher zeroed (launch_bwd.cuh, dfa__bwd_qsplit_for) */
    constexpr int QSPLIT = OUT32 && DQ_MODE == 1;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    unsigned char *const gbase = dfa__smem + (base - dfa__smem_addr(dfa__smem)); /* base, as a generic pointer */
    const uint32_t sK = base, sV = base + C::OFF_V, sQ = base + C::OFF_Q, sO = base + C::OFF_DO, sS = base + C::OFF_DS;
    const uint32_t sDQ = base + C::OFF_DQ;
    float *const sLD = (float *)(gbase + C::OFF_LD);
    /* barriers: kv_full, full[S], empty[S], dq_full[2], dq_empty[2], ds[warpgroup][buffer] */
    const uint32_t bar = base + C::OFF_BAR;
#define KV_FULL (bar)
#define FULL(s) (bar + 8u * (1 + (s)))
#define EMPTY(s) (bar + 8u * (1 + STAGES + (s)))
#define DQ_FULL(i) (bar + 8u * (1 + 2 * STAGES + (i)))
#define DQ_EMPTY(i) (bar + 8u * (3 + 2 * STAGES + (i)))
#define DS_READY(c, buf) (bar + 8u * (5 + 2 * STAGES + 2 * (c) + (buf)))
#define DS_FREE(c) (bar + 8u * (9 + 2 * STAGES + (c)))

    const int tid = threadIdx.x;
    const int nn = (p.sh.seqlen_k + BN - 1) / BN;
    const uint32_t tiles = (uint32_t)nn * (uint32_t)(p.sh.batch * p.sh.num_kv_heads);
    const uint32_t unit = QSPLIT ? blockIdx.x % tiles : blockIdx.x;
    const int split = QSPLIT ? (int)(blockIdx.x / tiles) : 0;
    /* in-order dQ: a CTA waits only on CTAs of higher key blocks, so those are launched first
       (a CTA never waits on one that may not be resident yet); otherwise the grid's order
       (dfa__bwd_tile_order) */
    int nb_, bg;
    dfa__bwd_tile_order(unit, nn, p.sh.batch * p.sh.num_kv_heads, DQ_MODE == 2 ? 0 : p.kv_sections, &nb_, &bg);
    if (DQ_MODE == 2) nb_ = nn - 1 - nb_;
    const int b = bg / p.sh.num_kv_heads, kvh = bg % p.sh.num_kv_heads;
    const int group = p.sh.num_heads / p.sh.num_kv_heads, n0 = nb_ * BN;
    const long long kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    auto init_barriers = [&] {
        dfa__mbar_init(KV_FULL, 1);
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(FULL(s), 32);   /* the loading warp's lanes (lane 0's arrival carries the bytes) */
            dfa__mbar_init(EMPTY(s), 256); /* every consumer thread */
        }
        for (int i = 0; i < 2; i++) {
            dfa__mbar_init(DQ_FULL(i), DQ_ALT ? 128 : 256); /* the consumers that stage a tile */
            dfa__mbar_init(DQ_EMPTY(i), 1);
        }
        for (int i = 0; i < 4; i++) dfa__mbar_init(DS_READY(i >> 1, i & 1), 128);
        if (NDS == 1)
            for (int i = 0; i < 2; i++) dfa__mbar_init(DS_FREE(i), 128);
        dfa__fence_barrier_init();
    };
    auto load_kv = [&] {
        dfa__mbar_expect_tx(KV_FULL, C::KBYTES + C::VBYTES);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            dfa__tma_load_4d(sK + cb * BN * 128, &tk, KV_FULL, cb * 64, kvh, n0, b);
            if (cb < NCBV) dfa__tma_load_4d(sV + cb * BN * 128, &tv, KV_FULL, cb * 64, kvh, n0, b);
        }
    };
    int mb_begin = 0, mb_end = (p.sh.seqlen_q + BM - 1) / BM; /* the query blocks that see this key block */
    if (MASKED) {
        dfa__mask_query_blocks<BM>(p.sh, b, n0, BN, &mb_begin, &mb_end);
    } else if (p.sh.causal) {
        const long long first = (long long)n0 - p.sh.offset;
        mb_begin = first <= 0 ? 0 : (first >= p.sh.seqlen_q ? mb_end : (int)(first / BM));
    }
    const int nmb = mb_end - mb_begin;
    int it0 = 0, total = nmb * group; /* this CTA's iterations: it0 .. it0 + total - 1 of the tile's */
    if (QSPLIT && p.qsplit > 1) {
        const int all = total;
        it0 = (int)((long long)all * split / p.qsplit);
        total = (int)((long long)all * (split + 1) / p.qsplit) - it0;
        if (total == 0) return; /* nothing to add (the whole CTA leaves before any barrier) */
    }

    if (tid == 0) init_barriers();
    __syncthreads();

    /* ---- the producer warpgroup: loads (warp 0) and dQ's reduce-adds (warp 1) ---- */
    if (tid < 128) {
        dfa__setmaxnreg_dec<24>();
        const int warp = tid >> 5, lane = tid & 31;
        if (warp == 0) {
            if (lane == 0) load_kv();
            for (int it = 0; it < total; it++) {
                const int s = it % STAGES, h = kvh * group + (it0 + it) / nmb, m0 = (mb_begin + (it0 + it) % nmb) * BM;
                dfa__mbar_wait(EMPTY(s), ((uint32_t)(it / STAGES) & 1u) ^ 1u);
                dfa__bwd_copy_lse_d<BM>(sLD + s * 2 * BM, p, b, h, m0, lane);
                if (lane == 0) { /* Q and dO; every other lane arrives without bytes */
                    dfa__mbar_expect_tx(FULL(s), C::QBYTES + C::OBYTES);
                    for (int cb = 0; cb < NCB; cb++) {
                        dfa__tma_load_4d(sQ + s * C::QBYTES + cb * BM * 128, &tq, FULL(s), cb * 64, h, m0, b);
                        if (cb < NCBV)
                            dfa__tma_load_4d(sO + s * C::OBYTES + cb * BM * 128, &tdo, FULL(s), cb * 64, h, m0, b);
                    }
                } else {
                    dfa__mbar_arrive(FULL(s));
                }
            }
        } else if (warp == 1 && DQ_ATOMIC && lane == 0) {
            const int nm = (p.sh.seqlen_q + BM - 1) / BM;
            for (int it = 0; it < total; it++) {
                const int i = it % NDQ, h = kvh * group + (it0 + it) / nmb, mi = mb_begin + (it0 + it) % nmb, m0 = mi * BM;
                int *sem = (int *)0;
                int order = 0;
                if (DQ_MODE == 2) {
                    order = dfa__inorder_dq_turn<BM, BN>(p.sh, mi, nn, nb_);
                    sem = p.dq_sem + ((long long)b * p.sh.num_heads + h) * nm + mi;
                }
                dfa__mbar_wait(DQ_FULL(i), (uint32_t)(it / NDQ) & 1u);
                if (DQ_MODE == 2) {
                    dfa__sem_wait(sem, order);
                    asm volatile("fence.proxy.async.global;" ::: "memory"); /* the reduce after the acquire */
                }
#pragma unroll
                for (int cb = 0; cb < D / 32; cb++)
                    dfa__tma_reduce_add_4d(&tdq, sDQ + i * C::DQBYTES + cb * BM * 128, cb * 32, h, m0, b);
                dfa__bulk_commit();
                if (DQ_MODE == 2) {
                    dfa__bulk_wait();
                    asm volatile("fence.proxy.async.global;" ::: "memory"); /* the sums before the release */
                    dfa__sem_post(sem);
                } else {
                    dfa__bulk_wait_read();
                }
                dfa__mbar_arrive(DQ_EMPTY(i));
            }
            dfa__bulk_wait();
        }
        return;
    }

    /* ---- the two consumer warpgroups ---- */
    dfa__setmaxnreg_inc<240>();
    const int c = __shfl_sync(0xffffffffu, tid / 128, 0) - 1;
    const int wt = tid & 127, warp = wt >> 5, lane = wt & 31, g = lane >> 2, t = lane & 3;
    /* this warpgroup's K and V rows (S^T, dP^T) as descriptor bases */
    const uint32_t k_lo = dfa__wgmma_desc_lo(sK + c * 64 * 128, 16), v_lo = dfa__wgmma_desc_lo(sV + c * 64 * 128, 16);
    const int key0 = c * 64 + warp * 16 + g; /* this lane's keys: key0 and key0 + 8 (within the block) */
    int qmin[2], qmax[2]; /* the query rows [qmin, qmax) that see this lane's two keys (qmax: MASKED only) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (MASKED) {
            dfa__mask_key_interval(p.sh, b, n0 + key0 + 8 * r, &qmin[r], &qmax[r]);
        } else {
            const int key = n0 + key0 + 8 * r;
            long long qm = p.sh.causal ? (long long)key - p.sh.offset : 0;
            qm = qm < 0 ? 0 : qm;
            qmin[r] = key >= p.sh.seqlen_k || qm > p.sh.seqlen_q ? 0x7fffffff : (int)qm;
            qmax[r] = 0x7fffffff;
        }
    }
    /* The query blocks [in_lo, in_hi) see every key of the CTA (FlashAttention-3's masking and
       non-masking steps). Masked: both ends of the keys' row intervals are non-decreasing
       (mask.cuh), so every key's interval holds [lo(last key), hi(first key)). Unmasked: the rows
       from the last key's diagonal on (rows past the end need no test: their lse is +inf). A block
       past the keys' end has none. */
    int in_lo = mb_end, in_hi = mb_end;
    if (n0 + BN <= p.sh.seqlen_k) {
        long long lo_all = 0, hi_all = p.sh.seqlen_q;
        if (MASKED) {
            lo_all = dfa__mask_key(p.sh, b, n0 + BN - 1).x;
            hi_all = dfa__mask_key(p.sh, b, n0).y;
        } else {
            lo_all = p.sh.causal ? (long long)n0 + BN - 1 - p.sh.offset : 0;
            lo_all = lo_all < 0 ? 0 : lo_all;
            hi_all = (long long)mb_end * BM;
        }
        const int a = (int)((lo_all + BM - 1) / BM), z = (int)(hi_all / BM);
        if (a < z) {
            in_lo = a > mb_begin ? a : mb_begin;
            in_hi = z < mb_end ? z : mb_end;
            if (in_hi < in_lo) in_lo = in_hi = mb_end;
        }
    }
    /* which part of the BM x D dQ tile this warpgroup computes (64 x 64 either way; DQ_ALT: all of it, every other block) */
    const int dq_row0 = BM == 64 ? 0 : 64 * c, dq_col0 = BM == 64 && !DQ_ALT ? 64 * c : 0;

    float dk[D8 * 4], dv[DV8 * 4];
#pragma unroll
    for (int i = 0; i < D8 * 4; i++) dk[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < DV8 * 4; i++) dv[i] = 0.0f;

    /* dQ of block J, columns [COL0, COL0 + N) of the tile: dS K over both warpgroups' halves of
       dS^T (buffer J & 1 of two), after the other warpgroup published its half (WAIT) */
#define DFA__BWD_ISSUE_DQ(J, WAIT, N, COL0)                                                                     \
    do {                                                                                                        \
        _Pragma("unroll") for (int i = 0; i < (N) / 2; i++) dq[i] = 0.0f;                                       \
        if (WAIT) dfa__mbar_wait(DS_READY(1 - c, (J) & 1), (uint32_t)((J) >> 1) & 1u);                          \
        dfa__wgmma_fence();                                                                                     \
        const uint32_t ds_j = sS + (NDS == 1 ? 0 : ((J) & 1)) * C::DSBYTES;                                     \
        const uint32_t ds_lo = dfa__wgmma_desc_lo(ds_j + (dq_row0 / 64) * BN * 128, 16);                        \
        /* K's two 64-column blocks lie BN * 128 bytes apart (the LBO of an N = 128 MN-major B) */             \
        const uint32_t kq_lo = dfa__wgmma_desc_lo(sK + ((COL0) / 64) * BN * 128, (N) > 64 ? BN * 128 : 16);   \
        _Pragma("unroll") for (int kk = 0; kk < BN / 16; kk++)                                                 \
            dfa__wgmma_ss_tt<(N), BF16>(dq, dfa__wgmma_desc_at(ds_lo, kk * 16 * 128),                           \
                                        dfa__wgmma_desc_at(kq_lo, kk * 16 * 128), kk > 0);                      \
        dfa__wgmma_commit();                                                                                    \
    } while (0)
    /* Columns [COL0, COL0 + N) of block J's dQ tile (its product retired) into staging tile
       J % NDQ for the writer warp, scaled; FIRST waits for the tile, LAST hands it to the writer.
       8-byte stores, a lane's pair of columns 8j + 2t of row g (+ 8) at 16-byte chunk
       (2j + t / 2) ^ g of the row in the tile's 128-byte swizzle. */
#define DFA__BWD_STAGE_DQ(J, N, COL0, FIRST, LAST)                                                              \
    do {                                                                                                        \
        _Pragma("unroll") for (int i = 0; i < (N) / 2; i++) dfa__reg_fence(dq[i]);                              \
        /* staging tile J % NDQ is free once the writer has read what it held NDQ tiles ago */                  \
        const int di = (J) % NDQ;                                                                               \
        if ((FIRST) && (J) >= NDQ) dfa__mbar_wait(DQ_EMPTY(di), (uint32_t)(((J) - NDQ) / NDQ) & 1u);            \
        _Pragma("unroll") for (int r = 0; r < 2; r++) {                                                        \
            const int row = dq_row0 + warp * 16 + g + 8 * r;                                                    \
            _Pragma("unroll") for (int i = 0; i < (N) / 8; i++) {                                              \
                const float x = dq[4 * i + 2 * r], y = dq[4 * i + 2 * r + 1];                                   \
                const int col = (COL0) + 8 * i + 2 * t, box = col >> 5, cc = col & 31;                          \
                const uint32_t a = sDQ + di * C::DQBYTES + box * BM * 128 + row * 128 +                         \
                                   ((((cc >> 2) ^ (row & 7))) << 4) + (cc & 3) * 4;                             \
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(x * p.sh.scale),                 \
                             "f"(y * p.sh.scale)                                                                \
                             : "memory");                                                                       \
            }                                                                                                   \
        }                                                                                                       \
        if (LAST) {                                                                                             \
            dfa__fence_proxy_async();                                                                           \
            dfa__mbar_arrive(DQ_FULL(di));                                                                      \
        }                                                                                                       \
    } while (0)

    /* SOFTCAP: S^T capped before P (tile.cuh): P = exp2(t scale_log2 c.out - lse2), t the score's
       tanh (dfa__softcap_tanh); cap_t turns log2 P + lse2 back into t */
    const dfa__softcap cap = dfa__softcap_of(p.sh);
    const float scale_log2 = dfa__softcap_scale_log2<K::SOFTCAP>(p.scale_log2, cap);
    const float cap_t = K::SOFTCAP ? 1.0f / scale_log2 : 0.0f;
    dfa__mbar_wait(KV_FULL, 0);
    float dq[DQN_MAX / 2];
    /* DQ_SPLIT: block J's dQ part PART (J = -1: a product on the unwritten buffer whose result is
       dropped, as DEFER's at it = 0), in 64-column pieces one after the other, each retired and
       staged before the next goes in (a piece's 32 registers fit beside dK and dV); with one dS^T
       buffer the other consumer may then overwrite it */
    auto split_dq = [&](const int J, auto part_tag) {
        constexpr int PART = decltype(part_tag)::value, NP = dfa__bwd_dq_part<K, PART>::N / 64;
        constexpr int COL0 = dfa__bwd_dq_part<K, PART>::COL0;
#pragma unroll
        for (int pc = 0; pc < NP; pc++) {
            DFA__BWD_ISSUE_DQ(J, J >= 0 && pc == 0, 64, COL0 + 64 * pc);
            dfa__wgmma_wait<0>();
            if (NDS == 1 && J >= 0 && pc == NP - 1) dfa__mbar_arrive(DS_FREE(c));
            if (J >= 0) DFA__BWD_STAGE_DQ(J, 64, COL0 + 64 * pc, pc == 0, pc == NP - 1);
        }
    };
    /* One query block of the walk. TEST (a compile-time tag): whether the block may need the
       element test (the mask's, or the causal one); the walk below gives the blocks every row of
       which sees every key of this CTA TEST 0, so their softmax carries no test at all. */
    auto step = [&](const int it, auto test_tag, auto dq_tag) {
        constexpr int TEST = decltype(test_tag)::value;
        /* DEFER: whether block it - 1's dQ is this consumer's; DQ_SPLIT: which part, 1 the first
           DQ_COLS0 columns (consumer 0), 2 the rest (consumer 1) */
        constexpr int ISSUE = decltype(dq_tag)::value;
        const int s = it % STAGES, m0 = (mb_begin + (it0 + it) % nmb) * BM;
        const uint32_t ph = (uint32_t)(it / STAGES) & 1u;
        float st[Q8 * 4], dp[Q8 * 4];
        dfa__mbar_wait(FULL(s), ph);
        const uint32_t q_s = sQ + s * C::QBYTES, o_s = sO + s * C::OBYTES;
        const uint32_t q_lo = dfa__wgmma_desc_lo(q_s, 16), o_lo = dfa__wgmma_desc_lo(o_s, 16);
        const float *ld = sLD + s * 2 * BM;
        /* DEFER: the previous block's dQ first (at it = 0 a product on an unwritten buffer whose
           result is dropped: a wgmma under a data-dependent branch makes ptxas serialise them),
           then S^T, under which the previous dQ tile is staged */
        if constexpr (DQ_SPLIT) {
            split_dq(it - 1, dq_tag);
        } else {
            if (DEFER && ISSUE) DFA__BWD_ISSUE_DQ(it - 1, it > 0, DQN, dq_col0);
            if (DQ_ALT && ISSUE) { /* the tile out before S^T: its 64 registers and S^T's 32 would not fit beside dK, dV */
                dfa__wgmma_wait<0>();
                if (it > 0) DFA__BWD_STAGE_DQ(it - 1, DQN, dq_col0, 1, 1);
            }
        }
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
            dfa__wgmma_ss<BM, BF16>(st, dfa__wgmma_desc_at(k_lo, kc), dfa__wgmma_desc_at(q_lo, qoff), kk > 0);
        }
        dfa__wgmma_commit();
        if (DEFER && ISSUE && !DQ_FIRST) {
            dfa__wgmma_wait<1>();
            if (it > 0) DFA__BWD_STAGE_DQ(it - 1, DQN, dq_col0, 1, 1);
            dfa__wgmma_fence();
        }
        /* dP^T = V dO^T (DP_AFTER_P: once P is computed, below) */
        auto issue_dp = [&] {
#pragma unroll
            for (int kk = 0; kk < DV / 16; kk++) {
                const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
                dfa__wgmma_ss<BM, BF16>(dp, dfa__wgmma_desc_at(v_lo, kc), dfa__wgmma_desc_at(o_lo, qoff), kk > 0);
            }
            dfa__wgmma_commit();
        };
        if constexpr (!DP_AFTER_P) issue_dp();
        const bool need_mask = !TEST ? false : n0 + BN > p.sh.seqlen_k || MASKED ||
                               (p.sh.causal && (long long)m0 + p.sh.offset < (long long)n0 + BN - 1);
        /* P^T while dP^T is still being computed */
        if constexpr (DP_AFTER_P)
            dfa__wgmma_wait<0>();
        else
            dfa__wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) dfa__reg_fence(st[i]);
        if constexpr (K::SOFTCAP) dfa__softcap_tanh<Q8 * 4>(st, cap);
#pragma unroll
        for (int j = 0; j < Q8; j++) {
            const float2 L = *(const float2 *)(ld + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = fmaf(st[4 * j + e], scale_log2, -((e & 1) ? L.y : L.x));
                float pv = FAST_EXP ? dfa__exp2_ftz(x) : exp2f(x);
                const int q = m0 + 8 * j + 2 * t + (e & 1);
                if (!TEST ? false : MASKED ? !dfa__mask_query_visible(q, qmin[e >> 1], qmax[e >> 1])
                                           : need_mask && q < qmin[e >> 1])
                    pv = 0.0f;
                st[4 * j + e] = pv;
            }
        }
        uint32_t pf[BM / 16][4], sf[BM / 16][4];
        /* DP_AFTER_P: P rounded to 16 bits, then dP^T and dV += P^T dO go in (P from registers) */
        constexpr uint32_t LBO = ((BM * 128 >> 4) - 1) << 16; /* the RS products' B: MN-major, 64-column blocks */
        if constexpr (DP_AFTER_P) {
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) dfa__pack_a<BF16>(pf[kk], st + 8 * kk, st + 8 * kk + 4);
            dfa__wgmma_fence();
            issue_dp();
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++)
                dfa__wgmma_rs<DV, BF16>(dv, pf[kk], dfa__wgmma_desc_at(o_lo + LBO, kk * 16 * 128), 1);
            dfa__wgmma_commit();
            dfa__wgmma_wait<1>(); /* dP^T, not dV */
        } else {
            dfa__wgmma_wait<0>();
        }
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) dfa__reg_fence(dp[i]);
#pragma unroll
        for (int j = 0; j < Q8; j++) {
            const float2 Dq = *(const float2 *)(ld + BM + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * j + e;
                float pe = st[i];
                if constexpr (DP_AFTER_P) {
                    const float2 pp = dfa__unpack2<BF16>(pf[i / 8][(i % 8) / 2]);
                    pe = (i & 1) ? pp.y : pp.x;
                }
                dp[i] = pe * (dp[i] - ((e & 1) ? Dq.y : Dq.x));
            }
            if constexpr (K::SOFTCAP) {
                /* dS^T times the cap's derivative 1 - t^2, t recovered from P itself: log2 P + lse2
                   = c t log2(e) (no register holds t from P to here). A P of 0 (masked, or under
                   2^-126) gives t = -inf, or NaN on a row whose lse2 is +inf: clamped to -1, its
                   factor is 0, as its P already made dS. */
                const float2 L = *(const float2 *)(ld + 8 * j + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float th = (dfa__lg2_approx(st[4 * j + e]) + ((e & 1) ? L.y : L.x)) * cap_t;
                    th = fminf(fmaxf(th, -1.0f), 1.0f);
                    dp[4 * j + e] *= 1.0f - th * th;
                }
            }
        }
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            if constexpr (!DP_AFTER_P) dfa__pack_a<BF16>(pf[kk], st + 8 * kk, st + 8 * kk + 4);
            dfa__pack_a<BF16>(sf[kk], dp + 8 * kk, dp + 8 * kk + 4);
        }
        const int buf = it & 1;
        const uint32_t ds_s = sS + (NDS == 1 ? 0 : buf) * C::DSBYTES;
        if (DQ_ATOMIC) {
            /* dS^T [key][query] into shared memory (64-query column blocks, 128-byte swizzle); the
               other warpgroup finished reading this buffer before it published its dS^T of the
               previous iteration, which this warpgroup waited for; with one buffer, once the other
               warpgroup's product of the previous block retired */
            if (NDS == 1 && it > 0) dfa__mbar_wait(DS_FREE(1 - c), (uint32_t)((it - 1) & 1));
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int qc = kk * 16 + half * 8 + 2 * t, blk = qc / 64, col = qc % 64;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int key = key0 + 8 * r;
                        const uint32_t a = ds_s + blk * BN * 128 + key * 128 + ((((col >> 3) ^ (key & 7))) << 4) + (col & 7) * 2;
                        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(sf[kk][2 * half + r]));
                    }
                }
            dfa__fence_proxy_async();
            dfa__mbar_arrive(DS_READY(c, buf));
        }
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) { /* the same bases with LBO BM * 128 (MN-major, D > 64 columns) */
            if constexpr (!DP_AFTER_P)
                dfa__wgmma_rs<DV, BF16>(dv, pf[kk], dfa__wgmma_desc_at(o_lo + LBO, kk * 16 * 128), 1);
            dfa__wgmma_rs<D, BF16>(dk, sf[kk], dfa__wgmma_desc_at(q_lo + LBO, kk * 16 * 128), 1);
        }
        dfa__wgmma_commit();
        if (DQ_ATOMIC && !DEFER) DFA__BWD_ISSUE_DQ(it, 1, DQN, dq_col0); /* behind dV/dK: the pipe does not drain in between */
        if (DQ_ATOMIC && !DEFER) dfa__wgmma_wait<1>();
        else dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D8 * 4; i++) {
            dfa__reg_fence(dk[i]);
            if (i < DV8 * 4) dfa__reg_fence(dv[i]);
        }
        dfa__mbar_arrive(EMPTY(s)); /* Q, dO, lse and D of this stage are no longer read */
        if (DQ_ATOMIC && !DEFER) {
            dfa__wgmma_wait<0>();
            DFA__BWD_STAGE_DQ(it, DQN, dq_col0, 1, 1);
        }
    };
    /* DQ_ALT: whether this consumer has block it - 1's dQ decides between two copies of the step
       (no wgmma under a data-dependent branch inside one: ptxas would serialise them); DQ_SPLIT:
       the consumer, its part's N */
    auto step_of = [&](const int it, auto test_tag) {
        if (DQ_SPLIT && c == 1)
            step(it, test_tag, dfa__ctag<2>());
        else if (DQ_ALT && ((it - 1) & 1) != c)
            step(it, test_tag, dfa__ctag<0>());
        else
            step(it, test_tag, dfa__ctag<1>());
    };
    /* The walk in runs of blocks alike: before in_lo and from in_hi on, blocks that may need the
       element test; in between, blocks that do not (a query block's position repeats per head of
       the group, so the runs do too) */
    for (int it = 0; it < total;) {
        const int mi = mb_begin + (it0 + it) % nmb;
        const int run_end = mi < in_lo ? in_lo : (mi < in_hi ? in_hi : mb_end);
        const int e = it + (run_end - mi) < total ? it + (run_end - mi) : total;
        if (mi >= in_lo && mi < in_hi)
            for (; it < e; it++) step_of(it, dfa__ctag<0>());
        else
            for (; it < e; it++) step_of(it, dfa__ctag<1>());
    }
    /* the last block's dQ (none: a dropped product, as at it = 0); DQ_ALT: its consumer's */
    if (DEFER && (!DQ_ALT || ((total - 1) & 1) == c)) {
        if constexpr (DQ_SPLIT) {
            if (c == 1)
                split_dq(total - 1, dfa__ctag<2>());
            else
                split_dq(total - 1, dfa__ctag<1>());
        } else {
            DFA__BWD_ISSUE_DQ(total - 1, total > 0, DQN, dq_col0);
            dfa__wgmma_wait<0>();
            if (total > 0) DFA__BWD_STAGE_DQ(total - 1, DQN, dq_col0, 1, 1);
        }
    }

    /* ---- the epilogue: dK (scaled) and dV ---- */
    const float dk_scale = p.sh.scale;
    if (TMA_DKV || (TMA_DKV16 && n0 >= dkv16.from && n0 + BN <= dkv16.to)) {
        /* Every product of both consumers has retired (barrier 3: the other's last dQ reads all
           of K), so each warpgroup writes its 64 keys' dK and dV, rounded, over its own rows of
           the K and V tiles in their 128-byte swizzle, and one thread stores them by TMA (boxes
           of 64 rows; keys past seqlen_k are dropped). */
        dfa__named_sync(3, 256);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = key0 + 8 * r;
#pragma unroll
            for (int j = 0; j < D8; j++) {
                dfa__st_swz128_pair<BF16>(sK, BN, key, j, t, dk[4 * j + 2 * r] * dk_scale,
                                          dk[4 * j + 2 * r + 1] * dk_scale);
                if (j < DV8) dfa__st_swz128_pair<BF16>(sV, BN, key, j, t, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
            }
        }
        dfa__fence_proxy_async();
        dfa__named_sync(4 + c, 128);
        if (wt == 0) {
            dfa__tma_store_rows64<D>(&tdk, sK, BN, c * 64, kvh, n0 + c * 64, b);
            dfa__tma_store_rows64<DV>(&tdv, sV, BN, c * 64, kvh, n0 + c * 64, b);
            dfa__bulk_commit();
            dfa__bulk_wait_read();
        }
        return;
    }
    OutT *dkg = (OutT *)p.dk + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    /* dv's rows are head_dim_v wide (the same as head_dim where the kernel's DV is D) */
    const long long vstride = DV == D ? kstride : (long long)p.sh.num_kv_heads * p.sh.head_dim_v;
    const long long vhead = DV == D ? (long long)kvh * p.sh.head_dim : (long long)kvh * p.sh.head_dim_v;
    OutT *dvg = (OutT *)p.dv + (long long)b * p.sh.seqlen_k * vstride + vhead;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = n0 + key0 + 8 * r;
        if (key >= p.sh.seqlen_k) continue;
        if constexpr (OUT32 != 0) /* keys handed to 16-bit outputs (launch.h, dfa__cuda_dkv16) */
            if ((unsigned)(key - dkv16.from) < (unsigned)(dkv16.to - dkv16.from)) {
                const long long at = ((long long)b * p.sh.seqlen_k + key) * kstride + (long long)kvh * p.sh.head_dim;
                const long long vat = DV == D ? at : ((long long)b * p.sh.seqlen_k + key) * vstride + vhead;
#pragma unroll
                for (int j = 0; j < D8; j++) {
                    const int col = 8 * j + 2 * t;
                    dfa__store2<BF16>((uint16_t *)dkv16.dk + at + col, dk[4 * j + 2 * r] * dk_scale,
                                      dk[4 * j + 2 * r + 1] * dk_scale);
                    if (j < DV8)
                        dfa__store2<BF16>((uint16_t *)dkv16.dv + vat + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
                }
                continue;
            }
        if (QSPLIT && p.qsplit > 1) { /* a share of the query blocks: added (float32 only) */
#pragma unroll
            for (int j = 0; j < D8; j++) {
                const int col = 8 * j + 2 * t;
                dfa__red_add2((float *)dkg + (long long)key * kstride + col, dk[4 * j + 2 * r] * dk_scale,
                              dk[4 * j + 2 * r + 1] * dk_scale);
                if (j < DV8)
                    dfa__red_add2((float *)dvg + (long long)key * vstride + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
            }
            continue;
        }
#pragma unroll
        for (int j = 0; j < D8; j++) {
            const int col = 8 * j + 2 * t;
            dfa__store2<BF16>(dkg + (long long)key * kstride + col, dk[4 * j + 2 * r] * dk_scale,
                              dk[4 * j + 2 * r + 1] * dk_scale);
            if (j < DV8) dfa__store2<BF16>(dvg + (long long)key * vstride + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
    }
#undef DFA__BWD_ISSUE_DQ
#undef DFA__BWD_STAGE_DQ
#undef KV_FULL
#undef FULL
#undef EMPTY
#undef DQ_FULL
#undef DQ_EMPTY
#undef DS_READY
#undef DS_FREE
#else
    (void)tq; (void)tk; (void)tv; (void)tdo; (void)tdq; (void)tdk; (void)tdv; (void)p; (void)dkv16;
    __trap();
#endif
}

#endif
