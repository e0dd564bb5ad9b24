/* Internal: the FlashAttention-2 forward kernel (mma.sync m16n8k16, ldmatrix,
 * cp.async double buffering). Runs on sm_80 and later, for every head dim: the
 * dim is padded to DP (64, 128 or 256) with zeros on the way into shared memory.
 *
 * One CTA owns BM = 16 * NW query rows of one (batch, head); each warp owns 16 of
 * them and keeps their Q fragments and output accumulators in registers while
 * the CTA streams key/value tiles of BN rows through two shared-memory buffers. */
#ifndef DFA_CUDA_FWD_MMA_CUH
#define DFA_CUDA_FWD_MMA_CUH

#include "tile.cuh"

typedef struct {
    const uint16_t *q, *k, *v;
    uint16_t *o;
    float *lse; /* may be NULL */
    int batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim;
    int causal;
    long long offset;
    float scale_log2;
} dfa__fwd_params;

template <int DP, int NW, int BN> struct dfa__fwd_mma_cfg {
    static constexpr int BM = 16 * NW, NT = 32 * NW;
    static constexpr int SMEM = (BM * DP + 4 * BN * DP) * 2; /* Q, K x2, V x2 */
};

template <int DP, int NW, int BN, int BF16>
__global__ void __launch_bounds__(NW * 32) dfa__fwd_mma_kernel(const dfa__fwd_params p) {
    typedef dfa__fwd_mma_cfg<DP, NW, BN> C;
    constexpr int BM = C::BM, NT = C::NT, KS = DP / 16, NT8 = BN / 8, OT8 = DP / 8;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t sQ = dfa__smem_addr(dfa__smem);
    const uint32_t sK = sQ + BM * DP * 2, sV = sK + 2 * BN * DP * 2;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int heads = p.batch * p.num_heads;
    const int nm = (p.seqlen_q + BM - 1) / BM;
    /* last query tiles first: under a causal mask they have the most work */
    const int mb = nm - 1 - (int)(blockIdx.x / heads), bh = (int)(blockIdx.x % heads);
    const int b = bh / p.num_heads, h = bh % p.num_heads, kvh = h / (p.num_heads / p.num_kv_heads);
    const int m0 = mb * BM;
    const long long qstride = (long long)p.num_heads * p.head_dim, kstride = (long long)p.num_kv_heads * p.head_dim;
    const uint16_t *qg = p.q + (long long)b * p.seqlen_q * qstride + (long long)h * p.head_dim;
    const uint16_t *kg = p.k + (long long)b * p.seqlen_k * kstride + (long long)kvh * p.head_dim;
    const uint16_t *vg = p.v + (long long)b * p.seqlen_k * kstride + (long long)kvh * p.head_dim;
    uint16_t *og = p.o + (long long)b * p.seqlen_q * qstride + (long long)h * p.head_dim;
    float *lseg = p.lse ? p.lse + (long long)bh * p.seqlen_q : (float *)0;

    const int n_end = dfa__key_end(m0, BM, p.seqlen_k, p.causal, p.offset);
    const int nblocks = (n_end + BN - 1) / BN;

    float acc[OT8][4];
#pragma unroll
    for (int j = 0; j < OT8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    if (nblocks > 0) {
        dfa__load_tile<DP, BM, NT>(sQ, qg, qstride, m0, p.seqlen_q, p.head_dim, tid);
        dfa__load_tile<DP, BN, NT>(sK, kg, kstride, 0, p.seqlen_k, p.head_dim, tid);
        dfa__cp_async_commit();
        dfa__load_tile<DP, BN, NT>(sV, vg, kstride, 0, p.seqlen_k, p.head_dim, tid);
        dfa__cp_async_commit();
    }
    /* rows g and g+8 of this warp: visibility limits */
    const int row_a = m0 + warp * 16 + (lane >> 2);
    const int lim[2] = {dfa__row_limit(row_a, p.seqlen_k, p.causal, p.offset),
                        dfa__row_limit(row_a + 8, p.seqlen_k, p.causal, p.offset)};
    uint32_t qf[KS][4];

    for (int it = 0; it < nblocks; it++) {
        const int buf = it & 1, n0 = it * BN;
        dfa__cp_async_wait<1>(); /* K[it] (and Q) have landed */
        __syncthreads();
        if (it == 0) {
#pragma unroll
            for (int kk = 0; kk < KS; kk++) dfa__ldmatrix_x4(qf[kk], dfa__addr_a<DP>(sQ, warp * 16, kk * 16, lane));
        }
        float s[NT8][4];
#pragma unroll
        for (int j = 0; j < NT8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        const uint32_t kb = sK + buf * BN * DP * 2;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
#pragma unroll
            for (int nb = 0; nb < BN / 16; nb++) {
                uint32_t r[4];
                dfa__ldmatrix_x4(r, dfa__addr_b<DP>(kb, nb * 16, kk * 16, lane));
                dfa__mma16816<BF16>(s[2 * nb], qf[kk], r[0], r[1]);
                dfa__mma16816<BF16>(s[2 * nb + 1], qf[kk], r[2], r[3]);
            }
        }
        /* prefetch the next key tile into the other buffer (its last reader finished
           before this iteration's barrier) */
        if (it + 1 < nblocks)
            dfa__load_tile<DP, BN, NT>(sK + (buf ^ 1) * BN * DP * 2, kg, kstride, n0 + BN, p.seqlen_k, p.head_dim,
                                       tid);
        dfa__cp_async_commit();

        const bool need_mask = n0 + BN > p.seqlen_k ||
                               (p.causal && (long long)n0 + BN - 1 > (long long)m0 + p.offset);
        if (need_mask) {
#pragma unroll
            for (int j = 0; j < NT8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int col = n0 + j * 8 + 2 * (lane & 3) + (e & 1);
                    if (col > lim[e >> 1]) s[j][e] = -INFINITY;
                }
        }
        float alpha[2];
        dfa__softmax_tile<NT8>(s, m, l, p.scale_log2, alpha);
#pragma unroll
        for (int j = 0; j < OT8; j++) {
            acc[j][0] *= alpha[0];
            acc[j][1] *= alpha[0];
            acc[j][2] *= alpha[1];
            acc[j][3] *= alpha[1];
        }

        dfa__cp_async_wait<1>(); /* V[it] has landed */
        __syncthreads();
        const uint32_t vb = sV + buf * BN * DP * 2;
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[4];
            a[0] = dfa__pack2<BF16>(s[2 * kk][0], s[2 * kk][1]);
            a[1] = dfa__pack2<BF16>(s[2 * kk][2], s[2 * kk][3]);
            a[2] = dfa__pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = dfa__pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int db = 0; db < DP / 16; db++) {
                uint32_t r[4];
                dfa__ldmatrix_x4_trans(r, dfa__addr_bt<DP>(vb, kk * 16, db * 16, lane));
                dfa__mma16816<BF16>(acc[2 * db], a, r[0], r[1]);
                dfa__mma16816<BF16>(acc[2 * db + 1], a, r[2], r[3]);
            }
        }
        if (it + 1 < nblocks)
            dfa__load_tile<DP, BN, NT>(sV + (buf ^ 1) * BN * DP * 2, vg, kstride, n0 + BN, p.seqlen_k, p.head_dim,
                                       tid);
        dfa__cp_async_commit();
    }
    dfa__cp_async_wait<0>();
    dfa__store_o_lse<OT8, BF16>(acc, m, l, og, qstride, lseg, m0 + warp * 16, p.seqlen_q, p.head_dim, lane);
}

#endif
