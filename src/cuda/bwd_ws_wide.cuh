/* Internal: the warp-specialised Hopper backward key-block kernel for the wide head dims (sm_90a
 * only): 256. What it takes is its configuration struct K in heuristics.h
 * (dfa__bwd_wide_config).
 *
 * bwd_ws.cuh keeps a consumer's dK and dV rows whole in its registers; at d = 256 they would not
 * fit (256 + 256 columns). Here a CTA owns BN = 64 keys of one (kv head,
 * batch) and the two consumer warpgroups split dK's, dV's and dQ's columns instead, in 64-column
 * blocks (K::KN0, VN0, QN0 are consumer 0's; the rest consumer 1's), which leaves each at most
 * 128 + 128 accumulator columns. Per query block of BM = 64 rows:
 *
 *   S^T  = K Q^T,  dP^T = V dO^T        each consumer: all 64 keys x its 32 of the block's rows
 *   P^T  = exp2(S^T scale log2e - lse log2e),  dS^T = P^T (dP^T - D)
 *          (SOFTCAP: S^T capped first, dS^T times the cap's derivative 1 - t^2, t kept from P)
 *          both into shared memory; then the consumers meet (named barrier 1)
 *   dV  += P^T dO,  dK += dS^T Q        each consumer: its columns, over all 64 rows
 *   dQ   = dS K                         each consumer: its columns of the 64 x D tile
 *
 * so every product reads its operands from shared memory (P^T and dS^T double-buffered: a
 * consumer writes block j + 1's while the other may still read block j's; block j - 1's are free
 * once both met at block j). The roles, as in bwd_ws.cuh: a producer warpgroup (setmaxnreg 24)
 * whose warp 0 loads K and V once and Q, dO (and the block's lse2 and D) into a ring of STAGES,
 * and whose warp 1 adds each dQ tile into the float32 accumulator by TMA reduce-adds from one
 * staging tile both consumers fill (in key-block order with DQ_MODE 2); two consumer warpgroups
 * (setmaxnreg 240) running the products above. DQ_MODE 0 computes no dQ (a dq pass follows).
 *
 * Shared memory: K (BN x D), V (BN x DV), the ring of Q (BM x D) and dO (BM x DV), two P^T and
 * two dS^T buffers (BN x BM), the dQ staging tile (BM x D float32 as D / 32 boxes of 32 floats x
 * BM rows), lse2 and D (BM floats each per stage); every 16-bit tile in 64-column blocks in the
 * 128-byte swizzle TMA and wgmma share. */
#ifndef DFA_CUDA_BWD_WS_WIDE_CUH
#define DFA_CUDA_BWD_WS_WIDE_CUH

#include "bwd_ws.cuh"

template <int D, int DV, int STAGES> struct dfa__bwd_wide_layout {
    static constexpr int BN = 64, BM = 64, NT = 384;
    static constexpr int KBYTES = BN * D * 2, VBYTES = BN * DV * 2, QBYTES = BM * D * 2, OBYTES = BM * DV * 2;
    static constexpr int PBYTES = BN * BM * 2, DQBYTES = BM * D * 4;
    static constexpr int OFF_V = KBYTES, OFF_Q = OFF_V + VBYTES, OFF_DO = OFF_Q + STAGES * QBYTES;
    static constexpr int OFF_P = OFF_DO + STAGES * OBYTES, OFF_DS = OFF_P + 2 * PBYTES, OFF_DQ = OFF_DS + 2 * PBYTES;
    static constexpr int OFF_LD = OFF_DQ + DQBYTES; /* per stage: lse2[BM] then D[BM] */
    static constexpr int OFF_BAR = OFF_LD + STAGES * 2 * BM * 4;
    static constexpr int SMEM = OFF_BAR + 128 + 1024;
    static_assert(SMEM <= 232448, "over the 227 KB of shared memory a CTA may have");
};

/* K: the configuration (heuristics.h). DQ_MODE: 0 no dQ here, 1 dQ tiles added as they come, 2 in
   key-block order (deterministic). OUT32: dk, dv (and scale * dq, added into the caller's float32
   dq) as float32. */
template <class K, int DQ_MODE, int BF16, int OUT32>
__global__ void __launch_bounds__(384, 1)
    dfa__bwd_wide_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                         const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo,
                         const __grid_constant__ CUtensorMap tdq, const dfa__bwd_params p,
                         const __grid_constant__ dfa__cuda_dkv16 dkv16) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    constexpr int D = K::D, DV = K::DV, STAGES = K::STAGES;
    constexpr bool MASKED = K::MASKED, FAST_EXP = K::FAST_EXP;
    typedef dfa__bwd_wide_layout<D, DV, STAGES> C;
    constexpr int BN = C::BN, BM = C::BM, DQ_ATOMIC = DQ_MODE != 0;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    unsigned char *const gbase = dfa__smem + (base - dfa__smem_addr(dfa__smem));
    const uint32_t sK = base, sV = base + C::OFF_V, sQ = base + C::OFF_Q, sO = base + C::OFF_DO;
    const uint32_t sP = base + C::OFF_P, sS = base + C::OFF_DS, sDQ = base + C::OFF_DQ;
    float *const sLD = (float *)(gbase + C::OFF_LD);
    /* barriers: kv_full, full[S], empty[S], dq_full, dq_empty */
    const uint32_t bar = base + C::OFF_BAR;
#define KV_FULL (bar)
#define FULL(s) (bar + 8u * (1 + (s)))
#define EMPTY(s) (bar + 8u * (1 + STAGES + (s)))
#define DQ_FULL (bar + 8u * (1 + 2 * STAGES))
#define DQ_EMPTY (bar + 8u * (2 + 2 * STAGES))

    const int tid = threadIdx.x;
    const int nn = (p.sh.seqlen_k + BN - 1) / BN;
    int nb_, bg; /* the grid's order; in-order dQ: higher key blocks first (bwd_ws.cuh) */
    dfa__bwd_tile_order(blockIdx.x, nn, p.sh.batch * p.sh.num_kv_heads, DQ_MODE == 2 ? 0 : p.kv_sections, &nb_, &bg);
    if (DQ_MODE == 2) nb_ = nn - 1 - nb_;
    const int b = bg / p.sh.num_kv_heads, kvh = bg % p.sh.num_kv_heads;
    const int group = p.sh.num_heads / p.sh.num_kv_heads, n0 = nb_ * BN;
    int mb_begin = 0, mb_end = 0; /* the query blocks that see this key block */
    dfa__mask_query_blocks<BM>(p.sh, b, n0, BN, &mb_begin, &mb_end);
    const int nmb = mb_end - mb_begin, total = nmb * group;

    if (tid == 0) {
        dfa__mbar_init(KV_FULL, 1);
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(FULL(s), 32);   /* the loading warp's lanes (lane 0's arrival carries the bytes) */
            dfa__mbar_init(EMPTY(s), 256); /* every consumer thread */
        }
        dfa__mbar_init(DQ_FULL, 256);
        dfa__mbar_init(DQ_EMPTY, 1);
        dfa__fence_barrier_init();
    }
    __syncthreads();

    /* ---- the producer warpgroup: loads (warp 0) and dQ's reduce-adds (warp 1) ---- */
    if (tid < 128) {
        dfa__setmaxnreg_dec<24>();
        const int warp = tid >> 5, lane = tid & 31;
        if (warp == 0) {
            if (lane == 0) {
                dfa__mbar_expect_tx(KV_FULL, C::KBYTES + C::VBYTES);
                for (int cb = 0; cb < D / 64; cb++) dfa__tma_load_4d(sK + cb * BN * 128, &tk, KV_FULL, cb * 64, kvh, n0, b);
                for (int cb = 0; cb < DV / 64; cb++) dfa__tma_load_4d(sV + cb * BN * 128, &tv, KV_FULL, cb * 64, kvh, n0, b);
            }
            for (int it = 0; it < total; it++) {
                const int s = it % STAGES, h = kvh * group + it / nmb, m0 = (mb_begin + it % nmb) * BM;
                dfa__mbar_wait(EMPTY(s), ((uint32_t)(it / STAGES) & 1u) ^ 1u);
                dfa__bwd_copy_lse_d<BM>(sLD + s * 2 * BM, p, b, h, m0, lane);
                if (lane == 0) {
                    dfa__mbar_expect_tx(FULL(s), C::QBYTES + C::OBYTES);
                    for (int cb = 0; cb < D / 64; cb++)
                        dfa__tma_load_4d(sQ + s * C::QBYTES + cb * BM * 128, &tq, FULL(s), cb * 64, h, m0, b);
                    for (int cb = 0; cb < DV / 64; cb++)
                        dfa__tma_load_4d(sO + s * C::OBYTES + cb * BM * 128, &tdo, FULL(s), cb * 64, h, m0, b);
                } else {
                    dfa__mbar_arrive(FULL(s));
                }
            }
        } else if (warp == 1 && DQ_ATOMIC && lane == 0) {
            const int nm = (p.sh.seqlen_q + BM - 1) / BM;
            for (int it = 0; it < total; it++) {
                const int h = kvh * group + it / nmb, mi = mb_begin + it % nmb, m0 = mi * BM;
                int *sem = (int *)0;
                int order = 0;
                if (DQ_MODE == 2) {
                    order = dfa__inorder_dq_turn<BM, BN>(p.sh, mi, nn, nb_);
                    sem = p.dq_sem + ((long long)b * p.sh.num_heads + h) * nm + mi;
                }
                dfa__mbar_wait(DQ_FULL, (uint32_t)it & 1u);
                if (DQ_MODE == 2) {
                    dfa__sem_wait(sem, order);
                    asm volatile("fence.proxy.async.global;" ::: "memory");
                }
#pragma unroll
                for (int cb = 0; cb < D / 32; cb++) dfa__tma_reduce_add_4d(&tdq, sDQ + cb * BM * 128, cb * 32, h, m0, b);
                dfa__bulk_commit();
                if (DQ_MODE == 2) {
                    dfa__bulk_wait();
                    asm volatile("fence.proxy.async.global;" ::: "memory");
                    dfa__sem_post(sem);
                } else {
                    dfa__bulk_wait_read();
                }
                dfa__mbar_arrive(DQ_EMPTY);
            }
            dfa__bulk_wait();
        }
        return;
    }

    /* ---- the two consumer warpgroups ---- */
    dfa__setmaxnreg_inc<240>();
    const int c = __shfl_sync(0xffffffffu, tid / 128, 0) - 1;
    const int wt = tid & 127, warp = wt >> 5, lane = wt & 31, g = lane >> 2, t = lane & 3;
    const int key0 = warp * 16 + g; /* this lane's keys: key0 and key0 + 8 (within the block) */
    int qmin[2], qmax[2];           /* the query rows [qmin, qmax) that see them */
#pragma unroll
    for (int r = 0; r < 2; r++) dfa__mask_key_interval(p.sh, b, n0 + key0 + 8 * r, &qmin[r], &qmax[r]);
    const uint32_t k_lo = dfa__wgmma_desc_lo(sK, 16), v_lo = dfa__wgmma_desc_lo(sV, 16);
    /* SOFTCAP: S^T capped before P (tile.cuh): P = exp2(t scale_log2 c.out - lse2), t the score's tanh */
    const dfa__softcap cap = dfa__softcap_of(p.sh);
    const float scale_log2 = dfa__softcap_scale_log2<K::SOFTCAP>(p.scale_log2, cap);
    dfa__mbar_wait(KV_FULL, 0);

    /* Consumer CI's whole walk and epilogue: its columns of dK ([KC0, KC0 + KN)), dV and dQ are
       compile-time, so each consumer runs a copy of its own. */
    auto consumer = [&](auto ci_tag) {
        constexpr int CI = decltype(ci_tag)::value;
        constexpr int KN = CI ? D - K::KN0 : K::KN0, KC0 = CI ? K::KN0 : 0;
        constexpr int VN = CI ? DV - K::VN0 : K::VN0, VC0 = CI ? K::VN0 : 0;
        constexpr int R0 = 32 * CI; /* this consumer's rows of each block in S^T and dP^T */
        float dk[KN / 2], dv[VN / 2];
#pragma unroll
        for (int i = 0; i < KN / 2; i++) dk[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < VN / 2; i++) dv[i] = 0.0f;
        constexpr int QN = CI ? D - K::QN0 : K::QN0, QC0 = CI ? K::QN0 : 0; /* dQ's columns */
        float dq[DQ_ATOMIC ? QN / 2 : 1];
        (void)dq;
        /* dQ of block J = dS K, this consumer's columns: block J's dS^T read MN-major as dS, K's
           64-column blocks BN * 128 bytes apart (one wgmma group) */
        auto issue_dq = [&](const int J) {
            const uint32_t ds_lo = dfa__wgmma_desc_lo(sS + (J & 1) * C::PBYTES, 16);
            const uint32_t kq_lo = dfa__wgmma_desc_lo(sK + (QC0 / 64) * BN * 128, QN > 64 ? BN * 128 : 16);
            dfa__wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++)
                dfa__wgmma_ss_tt<QN, BF16>(dq, dfa__wgmma_desc_at(ds_lo, kk * 16 * 128),
                                           dfa__wgmma_desc_at(kq_lo, kk * 16 * 128), kk > 0);
            dfa__wgmma_commit();
        };
        /* block J's dQ tile (its product retired), scaled, into the staging tile for the writer */
        auto stage_dq = [&](const int J) {
#pragma unroll
            for (int i = 0; i < QN / 2; i++) dfa__reg_fence(dq[i]);
            /* the staging tile is free once the writer has read the previous block's */
            if (J > 0) dfa__mbar_wait(DQ_EMPTY, (uint32_t)(J - 1) & 1u);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = key0 + 8 * r; /* the accumulator's rows: warp * 16 + g (+ 8) */
#pragma unroll
                for (int i = 0; i < QN / 8; i++) {
                    const int col = QC0 + 8 * i + 2 * t, box = col >> 5, cc = col & 31;
                    const uint32_t a = sDQ + box * BM * 128 + row * 128 + ((((cc >> 2) ^ (row & 7))) << 4) + (cc & 3) * 4;
                    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(dq[4 * i + 2 * r] * p.sh.scale),
                                 "f"(dq[4 * i + 2 * r + 1] * p.sh.scale)
                                 : "memory");
                }
            }
            dfa__fence_proxy_async();
            dfa__mbar_arrive(DQ_FULL);
        };
        /* One block; dQ goes in right behind dV and dK and is staged after them. */
        for (int it = 0; it < total; it++) {
            const int s = it % STAGES, m0 = (mb_begin + it % nmb) * BM, buf = it & 1;
            const uint32_t q_s = sQ + s * C::QBYTES, o_s = sO + s * C::OBYTES;
            const float *ld = sLD + s * 2 * BM;
            float st[16], dp[16];
            dfa__mbar_wait(FULL(s), (uint32_t)(it / STAGES) & 1u);
            {
                const uint32_t q_lo = dfa__wgmma_desc_lo(q_s + R0 * 128, 16), o_lo = dfa__wgmma_desc_lo(o_s + R0 * 128, 16);
                dfa__wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
                    dfa__wgmma_ss<32, BF16>(st, dfa__wgmma_desc_at(k_lo, (kk / 4) * BN * 128 + (kk % 4) * 32),
                                            dfa__wgmma_desc_at(q_lo, (kk / 4) * BM * 128 + (kk % 4) * 32), kk > 0);
                dfa__wgmma_commit();
#pragma unroll
                for (int kk = 0; kk < DV / 16; kk++)
                    dfa__wgmma_ss<32, BF16>(dp, dfa__wgmma_desc_at(v_lo, (kk / 4) * BN * 128 + (kk % 4) * 32),
                                            dfa__wgmma_desc_at(o_lo, (kk / 4) * BM * 128 + (kk % 4) * 32), kk > 0);
                dfa__wgmma_commit();
            }
            float th[K::SOFTCAP ? 16 : 1]; /* SOFTCAP: each score's tanh, for dS's factor */
            (void)th;
            const bool need_mask = n0 + BN > p.sh.seqlen_k || MASKED ||
                                   (p.sh.causal && (long long)m0 + p.sh.offset < (long long)n0 + BN - 1);
            /* P^T while dP^T is still being computed */
            dfa__wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < 16; i++) dfa__reg_fence(st[i]);
            if constexpr (K::SOFTCAP) {
                dfa__softcap_tanh<16>(st, cap);
#pragma unroll
                for (int i = 0; i < 16; i++) th[i] = st[i];
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 L = *(const float2 *)(ld + R0 + 8 * j + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x = fmaf(st[4 * j + e], scale_log2, -((e & 1) ? L.y : L.x));
                    float pv = FAST_EXP ? dfa__exp2_ftz(x) : exp2f(x);
                    const int q = m0 + R0 + 8 * j + 2 * t + (e & 1);
                    if (need_mask && !dfa__mask_query_visible(q, qmin[e >> 1], qmax[e >> 1])) pv = 0.0f;
                    st[4 * j + e] = pv;
                }
            }
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < 16; i++) dfa__reg_fence(dp[i]);
            /* P^T and dS^T [key][row] into this block's buffers, this consumer's 32 rows: a lane's
               pair of rows 8 j + 2 t of key key0 (+ 8) at 16-byte chunk (row / 8) ^ (key % 8) */
            const uint32_t p_s = sP + buf * C::PBYTES, ds_s = sS + buf * C::PBYTES;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 Dq = *(const float2 *)(ld + BM + R0 + 8 * j + 2 * t);
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int key = key0 + 8 * r, row = R0 + 8 * j + 2 * t;
                    const uint32_t a = key * 128 + ((((row >> 3) ^ (key & 7))) << 4) + (row & 7) * 2;
                    const float p0 = st[4 * j + 2 * r], p1 = st[4 * j + 2 * r + 1];
                    float s0 = p0 * (dp[4 * j + 2 * r] - Dq.x), s1 = p1 * (dp[4 * j + 2 * r + 1] - Dq.y);
                    if constexpr (K::SOFTCAP) { /* the cap's derivative */
                        const float t0 = th[4 * j + 2 * r], t1 = th[4 * j + 2 * r + 1];
                        s0 *= 1.0f - t0 * t0;
                        s1 *= 1.0f - t1 * t1;
                    }
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(p_s + a), "r"(dfa__pack2<BF16>(p0, p1)) : "memory");
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(ds_s + a), "r"(dfa__pack2<BF16>(s0, s1)) : "memory");
                }
            }
            dfa__fence_proxy_async();
            dfa__named_sync(1, 256); /* both halves of P^T and dS^T written */
            /* dV += P^T dO and dK += dS^T Q over the block's 64 rows, this consumer's columns (dO's
               and Q's 64-column blocks lie BM * 128 bytes apart: the LBO of an MN-major B) */
            const uint32_t p_lo = dfa__wgmma_desc_lo(p_s, 16), ds_lo = dfa__wgmma_desc_lo(ds_s, 16);
            const uint32_t ov_lo = dfa__wgmma_desc_lo(o_s + (VC0 / 64) * BM * 128, BM * 128);
            const uint32_t qk_lo = dfa__wgmma_desc_lo(q_s + (KC0 / 64) * BM * 128, BM * 128);
            dfa__wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++)
                dfa__wgmma_ss_tb<VN, BF16>(dv, dfa__wgmma_desc_at(p_lo, kk * 32), dfa__wgmma_desc_at(ov_lo, kk * 16 * 128), 1);
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++)
                dfa__wgmma_ss_tb<KN, BF16>(dk, dfa__wgmma_desc_at(ds_lo, kk * 32), dfa__wgmma_desc_at(qk_lo, kk * 16 * 128), 1);
            dfa__wgmma_commit();
            if constexpr (DQ_ATOMIC != 0) issue_dq(it);
            dfa__wgmma_wait<0>();
#pragma unroll
            for (int i = 0; i < KN / 2; i++) dfa__reg_fence(dk[i]);
#pragma unroll
            for (int i = 0; i < VN / 2; i++) dfa__reg_fence(dv[i]);
            dfa__mbar_arrive(EMPTY(s)); /* Q, dO, lse2 and D of this stage are no longer read */
            if constexpr (DQ_ATOMIC != 0) stage_dq(it);
        }

        /* ---- the epilogue: this consumer's columns of dK (scaled) and dV ---- */
        const long long kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
        const long long vstride = (long long)p.sh.num_kv_heads * p.sh.head_dim_v;
        const float dk_scale = p.sh.scale;
        /* row r's columns into dk + kat, dv + vat (the caller's outputs, or the 16-bit ones) */
        auto store_row = [&](auto *dkp, auto *dvp, long long kat, long long vat, int r) {
#pragma unroll
            for (int j = 0; j < KN / 8; j++)
                dfa__store2<BF16>(dkp + kat + KC0 + 8 * j + 2 * t, dk[4 * j + 2 * r] * dk_scale,
                                  dk[4 * j + 2 * r + 1] * dk_scale);
#pragma unroll
            for (int j = 0; j < VN / 8; j++)
                dfa__store2<BF16>(dvp + vat + VC0 + 8 * j + 2 * t, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        };
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = n0 + key0 + 8 * r;
            if (key >= p.sh.seqlen_k) continue;
            const long long kat = ((long long)b * p.sh.seqlen_k + key) * kstride + (long long)kvh * p.sh.head_dim;
            const long long vat = ((long long)b * p.sh.seqlen_k + key) * vstride + (long long)kvh * p.sh.head_dim_v;
            /* keys handed to 16-bit outputs (launch.h, dfa__cuda_dkv16) */
            if (OUT32 != 0 && (unsigned)(key - dkv16.from) < (unsigned)(dkv16.to - dkv16.from))
                store_row((uint16_t *)dkv16.dk, (uint16_t *)dkv16.dv, kat, vat, r);
            else
                store_row((OutT *)p.dk, (OutT *)p.dv, kat, vat, r);
        }
    };
    if (c == 0)
        consumer(dfa__ctag<0>());
    else
        consumer(dfa__ctag<1>());
#undef KV_FULL
#undef FULL
#undef EMPTY
#undef DQ_FULL
#undef DQ_EMPTY
#else
    (void)tq; (void)tk; (void)tv; (void)tdo; (void)tdq; (void)p; (void)dkv16;
    __trap();
#endif
}

#endif
