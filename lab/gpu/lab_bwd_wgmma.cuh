/* Kernel lab, experimental: a two-warpgroup Hopper backward key-block kernel (wgmma, TMA) for
 * head dims 64 and 128 (sm_90a only), without the producer warpgroup of the library's
 * warp-specialised kernel (src/cuda/bwd_ws.cuh), for comparison with it.
 *
 * A CTA owns BN = 128 keys of one (kv head, batch) and walks every query block
 * (BM rows) of every query head of its group. One thread loads K and V once and
 * Q and dO of each query block into a two-stage ring (TMA, full/empty
 * mbarriers); no producer warpgroup, because the two warpgroups need all 255
 * registers (ptxas would not give the consumers more than an even share of the
 * register file under setmaxnreg here). Each warpgroup owns 64 of the keys and
 * keeps their dK and dV in registers:
 *
 *   S^T  = K Q^T,  dP^T = V dO^T                (SS: both operands in shared memory)
 *   P^T  = exp2(S^T scale log2e - lse log2e),  dS^T = P^T (dP^T - D)
 *   dV  += P^T dO,  dK += dS^T Q                (RS: P^T / dS^T straight from registers)
 *   dQ   = dS K  over all 128 keys              (SS, dS^T written to shared memory)
 *
 * Each consumer warpgroup computes half of the dQ tile and adds it into the f32
 * accumulator with atomics (DQ_ATOMIC); without it the deterministic dq pass of
 * bwd_mma.cuh follows. DQ_FUSED issues dQ behind dV/dK under one wait; DQ_BULK
 * adds dq with bulk reduce-adds from shared memory instead of atomics. OUT32 writes dk, dv (and, in
 * the atomic path, scale * dq straight into the caller's float32 dq) as float32.
 * Tiles are 64-column blocks of 128-byte rows in the 128-byte swizzle, as in the
 * forward; dS^T is stored [key][query] and read as an MN-major A operand. */
#ifndef DFA_CUDA_BWD_WGMMA_CUH
#define DFA_CUDA_BWD_WGMMA_CUH

#include "cuda/bwd_mma.cuh"
#include "cuda/fwd_wgmma.cuh"

template <int D, int BM> struct dfa__bwd_wgmma_cfg {
    static constexpr int BN = 128, STAGES = 2, NT = 256;
    static constexpr int KVBYTES = BN * D * 2, QBYTES = BM * D * 2, DSBYTES = BN * BM * 2;
    static constexpr int OFF_V = KVBYTES, OFF_Q = 2 * KVBYTES, OFF_DO = OFF_Q + STAGES * QBYTES;
    static constexpr int OFF_DS = OFF_DO + STAGES * QBYTES, OFF_DQ = OFF_DS + 2 * DSBYTES;
    static constexpr int DQ_LD = 68; /* floats per staged dq row: 64 + 4 of padding (banks) */
    static constexpr int OFF_BAR = OFF_DQ + 2 * 64 * DQ_LD * 4;
    static constexpr int SMEM = OFF_BAR + 64 + 1024;
};

template <int D, int BM, int DQ_ATOMIC, bool DQ_FUSED, bool DQ_BULK, int BF16, int OUT32>
__global__ void __launch_bounds__(256, 1)
    dfa__bwd_wgmma_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                          const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo,
                          const dfa__bwd_params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__bwd_wgmma_cfg<D, BM> C;
    constexpr int BN = C::BN, STAGES = C::STAGES, NCB = D / 64, Q8 = BM / 8, D8 = D / 8;
    constexpr int SPLIT = !DQ_FUSED, BULK = DQ_BULK;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    const uint32_t sK = base, sV = base + C::OFF_V, sQ = base + C::OFF_Q, sO = base + C::OFF_DO, sS = base + C::OFF_DS;
    const uint32_t bar = base + C::OFF_BAR; /* kv_full, full[S], empty[S] */
#define FULL(s) (bar + 8u * (1 + (s)))
#define EMPTY(s) (bar + 8u * (1 + STAGES + (s)))

    const int tid = threadIdx.x;
    const int nn = (p.sh.seqlen_k + BN - 1) / BN;
    const int nb_ = (int)(blockIdx.x % nn), bg = (int)(blockIdx.x / nn);
    const int b = bg / p.sh.num_kv_heads, kvh = bg % p.sh.num_kv_heads;
    const int group = p.sh.num_heads / p.sh.num_kv_heads, n0 = nb_ * BN;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim, kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    int mb_begin, mb_end; /* the query blocks that see this key block (mask.cuh) */
    dfa__mask_query_blocks<BM>(p.sh, b, n0, BN, &mb_begin, &mb_end);
    const int nmb = mb_end - mb_begin, total = nmb * group;

    if (tid == 0) {
        dfa__mbar_init(bar, 1);
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(FULL(s), 1);
            dfa__mbar_init(EMPTY(s), 256);
        }
        dfa__fence_barrier_init();
    }
    __syncthreads();

    /* one thread issues the copies: K and V once, Q and dO of the first STAGES iterations;
       later stages are refilled as soon as both warpgroups have released them */
#define ISSUE_QDO(it_)                                                                                            \
    do {                                                                                                          \
        const int s_ = (it_) % STAGES, h_ = kvh * group + (it_) / nmb, m_ = (mb_begin + (it_) % nmb) * BM;        \
        dfa__mbar_expect_tx(FULL(s_), 2 * C::QBYTES);                                                             \
        for (int cb = 0; cb < NCB; cb++) {                                                                        \
            dfa__tma_load_4d(sQ + s_ * C::QBYTES + cb * BM * 128, &tq, FULL(s_), cb * 64, h_, m_, b);              \
            dfa__tma_load_4d(sO + s_ * C::QBYTES + cb * BM * 128, &tdo, FULL(s_), cb * 64, h_, m_, b);             \
        }                                                                                                         \
    } while (0)
    /* once dV/dK of an iteration are complete: release its stage, and refill the stage once both
       warpgroups are done with it */
#define RELEASE_STAGE()                                                                                           \
    do {                                                                                                          \
        _Pragma("unroll") for (int i = 0; i < D8 * 4; i++) {                                                      \
            dfa__reg_fence(dk[i]);                                                                                \
            dfa__reg_fence(dv[i]);                                                                                \
        }                                                                                                         \
        dfa__mbar_arrive(EMPTY(s));                                                                               \
        if (tid == 0 && it + STAGES < total) {                                                                    \
            dfa__mbar_wait(EMPTY(s), ph);                                                                         \
            ISSUE_QDO(it + STAGES);                                                                               \
        }                                                                                                         \
    } while (0)

    if (tid == 0) {
        dfa__mbar_expect_tx(bar, 2 * C::KVBYTES);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            dfa__tma_load_4d(sK + cb * BN * 128, &tk, bar, cb * 64, kvh, n0, b);
            dfa__tma_load_4d(sV + cb * BN * 128, &tv, bar, cb * 64, kvh, n0, b);
        }
        for (int i = 0; i < STAGES && i < total; i++) ISSUE_QDO(i);
    }
    {
    const int wg = tid / 128;
    const int c = wg, wt = tid - 128 * wg, warp = wt >> 5, lane = wt & 31, g = lane >> 2, t = lane & 3;
    const int key0 = c * 64 + warp * 16 + g; /* this lane's keys: key0 and key0 + 8 (within the block) */
    int qmin[2], qmax[2]; /* the query rows [qmin, qmax) that see this lane's two keys (mask.cuh) */
#pragma unroll
    for (int r = 0; r < 2; r++) dfa__mask_key_interval(p.sh, b, n0 + key0 + 8 * r, &qmin[r], &qmax[r]);
    /* which part of the BM x D dQ tile this warpgroup computes (64 x 64 either way) */
    const int dq_row0 = BM == 64 ? 0 : 64 * c, dq_col0 = BM == 64 ? 64 * c : 0;

    float dk[D8 * 4], dv[D8 * 4];
#pragma unroll
    for (int i = 0; i < D8 * 4; i++) dk[i] = dv[i] = 0.0f;

    dfa__mbar_wait(bar, 0);
    for (int it = 0; it < total; it++) {
        const int s = it % STAGES, h = kvh * group + it / nmb, m0 = (mb_begin + it % nmb) * BM;
        const uint32_t ph = (uint32_t)(it / STAGES) & 1u;
        float st[Q8 * 4], dp[Q8 * 4];
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) st[i] = dp[i] = 0.0f;
        dfa__mbar_wait(FULL(s), ph);
        const uint32_t q_s = sQ + s * C::QBYTES, o_s = sO + s * C::QBYTES;
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t koff = (kk / 4) * BN * 128 + c * 64 * 128 + (kk % 4) * 32;
            const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
            dfa__wgmma_ss<BM, BF16>(st, dfa__wgmma_desc(sK + koff, 16), dfa__wgmma_desc(q_s + qoff, 16), kk > 0);
            dfa__wgmma_ss<BM, BF16>(dp, dfa__wgmma_desc(sV + koff, 16), dfa__wgmma_desc(o_s + qoff, 16), kk > 0);
        }
        dfa__wgmma_commit();
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) {
            dfa__reg_fence(st[i]);
            dfa__reg_fence(dp[i]);
        }
        const bool need_mask = n0 + BN > p.sh.seqlen_k || p.sh.masked ||
                               (p.sh.causal && (long long)m0 + p.sh.offset < (long long)n0 + BN - 1);
        const long long lrow = ((long long)b * p.sh.num_heads + h) * p.sh.seqlen_q;
#pragma unroll
        for (int j = 0; j < Q8; j++) {
            /* lse (base 2) and D of this lane's two query columns of tile j; rows past the end see nothing */
            float L[2], Dq[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int q = m0 + 8 * j + 2 * t + e;
                L[e] = q < p.sh.seqlen_q ? __ldg(p.lse2 + lrow + q) : INFINITY;
                Dq[e] = q < p.sh.seqlen_q ? __ldg(p.dsum + lrow + q) : 0.0f;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pv = exp2f(fmaf(st[4 * j + e], p.scale_log2, -L[e & 1]));
                if (need_mask && !dfa__mask_query_visible(m0 + 8 * j + 2 * t + (e & 1), qmin[e >> 1], qmax[e >> 1]))
                    pv = 0.0f;
                st[4 * j + e] = pv;
                dp[4 * j + e] = pv * (dp[4 * j + e] - Dq[e & 1]);
            }
        }
        uint32_t pf[BM / 16][4], sf[BM / 16][4];
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            dfa__pack_a<BF16>(pf[kk], st + 8 * kk, st + 8 * kk + 4);
            dfa__pack_a<BF16>(sf[kk], dp + 8 * kk, dp + 8 * kk + 4);
        }
        const uint32_t ds_s = sS + (it & 1) * C::DSBYTES;
        if (DQ_ATOMIC) {
            /* dS^T [key][query] into shared memory (64-query column blocks, 128-byte swizzle);
               the other warpgroup finished reading this buffer two iterations ago */
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
            dfa__named_sync(1, 256);
        }
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            dfa__wgmma_rs<D, BF16>(dv, pf[kk], dfa__wgmma_desc(o_s + kk * 16 * 128, BM * 128), 1);
            dfa__wgmma_rs<D, BF16>(dk, sf[kk], dfa__wgmma_desc(q_s + kk * 16 * 128, BM * 128), 1);
        }
        /* SPLIT: wait for dV/dK before issuing dQ, so their A fragments (pf, sf) and the dq
           accumulators are never live together (fewer registers, one more wait); otherwise
           dQ is issued behind dV/dK and one wait covers all three */
        float dq[32];
        if (SPLIT || !DQ_ATOMIC) {
            dfa__wgmma_commit();
            dfa__wgmma_wait<0>();
            RELEASE_STAGE();
        }
        if (DQ_ATOMIC) {
#pragma unroll
            for (int i = 0; i < 32; i++) dq[i] = 0.0f;
            if (SPLIT) dfa__wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                const uint64_t da = dfa__wgmma_desc(ds_s + (dq_row0 / 64) * BN * 128 + kk * 16 * 128, 16);
                const uint64_t db = dfa__wgmma_desc(sK + (dq_col0 / 64) * BN * 128 + kk * 16 * 128, 16);
                if (BF16) dfa__wgmma_ss_tt_bf16_n64(dq, da, db, kk > 0);
                else dfa__wgmma_ss_tt_f16_n64(dq, da, db, kk > 0);
            }
            dfa__wgmma_commit();
            dfa__wgmma_wait<0>();
            if (!SPLIT) RELEASE_STAGE();
#pragma unroll
            for (int i = 0; i < 32; i++) dfa__reg_fence(dq[i]);
            float *dqg = p.dq_acc + (long long)b * p.sh.seqlen_q * qstride + (long long)h * p.sh.head_dim;
            if (BULK) {
                /* stage the 64 x 64 tile in shared memory, then one bulk reduce-add per row
                   (256 bytes) from 64 threads; the previous tile's reads must be done first */
                float *sdq = (float *)(dfa__smem + (base - dfa__smem_addr(dfa__smem)) + C::OFF_DQ) + c * 64 * C::DQ_LD;
                if (wt < 64) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                dfa__named_sync(2 + c, 128);
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        *(float2 *)(sdq + (warp * 16 + g + 8 * r) * C::DQ_LD + 8 * j + 2 * t) =
                            make_float2(dq[4 * j + 2 * r] * p.sh.scale,
                                        dq[4 * j + 2 * r + 1] * p.sh.scale);
                dfa__fence_proxy_async();
                dfa__named_sync(2 + c, 128);
                if (wt < 64) {
                    const int row = m0 + dq_row0 + wt;
                    if (row < p.sh.seqlen_q)
                        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], 256;"
                                     ::"l"(dqg + (long long)row * qstride + dq_col0),
                                     "r"(dfa__smem_addr(sdq + wt * C::DQ_LD))
                                     : "memory");
                    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
                }
            } else {
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int row = m0 + dq_row0 + warp * 16 + g + 8 * r;
                    if (row >= p.sh.seqlen_q) continue;
                    float *dst = dqg + (long long)row * qstride + dq_col0 + 2 * t;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        atomicAdd((float2 *)(dst + 8 * j), make_float2(dq[4 * j + 2 * r] * p.sh.scale,
                                                                       dq[4 * j + 2 * r + 1] * p.sh.scale));
                }
            }
        }
    }

    if (BULK && DQ_ATOMIC && wt < 64) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");

    OutT *dkg = (OutT *)p.dk + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    OutT *dvg = (OutT *)p.dv + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = n0 + key0 + 8 * r;
        if (key >= p.sh.seqlen_k) continue;
#pragma unroll
        for (int j = 0; j < D8; j++) {
            const int col = 8 * j + 2 * t;
            dfa__store2<BF16>(dkg + (long long)key * kstride + col, dk[4 * j + 2 * r] * p.sh.scale,
                              dk[4 * j + 2 * r + 1] * p.sh.scale);
            dfa__store2<BF16>(dvg + (long long)key * kstride + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
    }
    }
#undef RELEASE_STAGE
#undef ISSUE_QDO
#undef FULL
#undef EMPTY
#else
    (void)tq; (void)tk; (void)tv; (void)tdo; (void)p;
    __trap();
#endif
}

#endif
