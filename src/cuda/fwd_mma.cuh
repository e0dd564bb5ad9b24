/* Internal: the FlashAttention-2 forward kernel (mma.sync m16n8k16, ldmatrix,
 * cp.async double buffering). Runs on sm_80 and later, for every head dim: the
 * dim is padded to DP (64, 128 or 256) with zeros on the way into shared memory.
 * A value head dim of its own (v and o, sh.head_dim_v) is padded to DV apart: q and
 * k tiles are DP wide, v tiles and the output accumulators DV wide. DV = DP: the
 * value head dim is head_dim itself (the kernels read sh.head_dim_v only where
 * DV != DP).
 *
 * One CTA owns BM = 16 * NW query rows of one (batch, head); each warp owns 16 of
 * them and keeps their Q fragments and output accumulators in registers while
 * the CTA streams key/value tiles of BN rows through two shared-memory buffers.
 * OUT32 writes o as float32 instead of the storage type (nothing else changes);
 * SOFTCAP caps each block's scores (tile.cuh, dfa__softcap_scores) before its mask. */
#ifndef DFA_CUDA_FWD_MMA_CUH
#define DFA_CUDA_FWD_MMA_CUH

#include "launch.h"
#include "mask.cuh"
#include "tile.cuh"

/* The kernels' parameters: the tensors, then the resolved shape (launch.h). A plain struct
   (ptxas allocated registers worse for a parameter block with a base class). */
typedef struct {
    const uint16_t *q, *k, *v;
    void *o;    /* [batch, seqlen_q, heads, head_dim_v] of the storage type, or float32 (OUT32) */
    float *lse; /* may be NULL */
    dfa__cuda_shape sh;
    float scale_log2;
    int l2_heads; /* (batch, head) pairs per L2 section of the grid (dfa__fwd_tile_order) */
} dfa__fwd_params;

/* The grid's order of query tiles. Tiles come in sections of l2_heads (batch, head) pairs,
   chosen on the host so that their K and V fit in L2 together (dfa__fwd_l2_heads); within a
   section the last query blocks come first (under a causal mask they have the most work) and
   the heads alternate fastest. Every CTA resident at one time then streams the K/V of a few
   heads, from the same first block on, instead of one head each (with one head per resident
   CTA they would stream as many heads' K/V as there are SMs, more than the L2 holds, from
   DRAM). unit: the tile's number in the grid; nmb: query blocks per head. */
static __device__ __forceinline__ void dfa__fwd_tile_order(uint32_t unit, int nmb, int heads, int l2_heads,
                                                           int *mb, int *bh) {
    const uint32_t per = (uint32_t)l2_heads * (uint32_t)nmb, sec = unit / per, r = unit - sec * per;
    const int h0 = (int)sec * l2_heads, hn = heads - h0 < l2_heads ? heads - h0 : l2_heads;
    *mb = nmb - 1 - (int)(r / (uint32_t)hn);
    *bh = h0 + (int)(r % (uint32_t)hn);
}

template <int DP, int NW, int BN, int DV = DP> struct dfa__fwd_mma_cfg {
    static constexpr int BM = 16 * NW, NT = 32 * NW;
    static constexpr int SMEM = (BM * DP + 2 * BN * DP + 2 * BN * DV) * 2; /* Q, K x2, V x2 */
};

template <int DP, int NW, int BN, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
__global__ void __launch_bounds__(NW * 32) dfa__fwd_mma_kernel(const dfa__fwd_params p) {
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__fwd_mma_cfg<DP, NW, BN, DV> C;
    constexpr int BM = C::BM, NT = C::NT, KS = DP / 16, NT8 = BN / 8, OT8 = DV / 8;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t sQ = dfa__smem_addr(dfa__smem);
    const uint32_t sK = sQ + BM * DP * 2, sV = sK + 2 * BN * DP * 2;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int heads = p.sh.batch * p.sh.num_heads;
    const int nm = (p.sh.seqlen_q + BM - 1) / BM;
    int mb, bh;
    dfa__fwd_tile_order(blockIdx.x, nm, heads, p.l2_heads, &mb, &bh);
    const int b = bh / p.sh.num_heads, h = bh % p.sh.num_heads, kvh = h / (p.sh.num_heads / p.sh.num_kv_heads);
    const int m0 = mb * BM;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim, kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    /* v's and o's rows (DFA__VDIM) */
    const long long ostride = DV == DP ? qstride : (long long)p.sh.num_heads * p.sh.head_dim_v;
    const long long vstride = DV == DP ? kstride : (long long)p.sh.num_kv_heads * p.sh.head_dim_v;
    const uint16_t *qg = p.q + (long long)b * p.sh.seqlen_q * qstride + (long long)h * p.sh.head_dim;
    const uint16_t *kg = p.k + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    const uint16_t *vg = p.v + (long long)b * p.sh.seqlen_k * vstride + (long long)kvh * DFA__VDIM(p.sh);
    OutT *og = (OutT *)p.o + (long long)b * p.sh.seqlen_q * ostride + (long long)h * DFA__VDIM(p.sh);
    float *lseg = p.lse ? p.lse + (long long)bh * p.sh.seqlen_q : (float *)0;

    int kb0, kb1; /* the key blocks this query block sees (mask.cuh) */
    dfa__mask_key_blocks<BN>(p.sh, b, m0, BM, &kb0, &kb1);
    const int nblocks = kb1 - kb0, n_begin = kb0 * BN;

    float acc[OT8][4];
#pragma unroll
    for (int j = 0; j < OT8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    if (nblocks > 0) {
        dfa__load_tile<DP, BM, NT>(sQ, qg, qstride, m0, p.sh.seqlen_q, p.sh.head_dim, tid);
        dfa__load_tile<DP, BN, NT>(sK, kg, kstride, n_begin, p.sh.seqlen_k, p.sh.head_dim, tid);
        dfa__cp_async_commit();
        dfa__load_tile<DV, BN, NT>(sV, vg, vstride, n_begin, p.sh.seqlen_k, DFA__VDIM(p.sh), tid);
        dfa__cp_async_commit();
    }
    /* rows g and g+8 of this warp: visibility limits */
    const int row_a = m0 + warp * 16 + (lane >> 2);
    int lim[2] = {dfa__row_limit(row_a, p.sh.seqlen_k, p.sh.causal, p.sh.offset),
                  dfa__row_limit(row_a + 8, p.sh.seqlen_k, p.sh.causal, p.sh.offset)};
    int mlo[2] = {0, 0}, mhi[2] = {0, 0}; /* under a mask: the rows' key intervals */
    if (p.sh.masked)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int2 kr = dfa__mask_row(p.sh, b, row_a + 8 * r);
            mlo[r] = kr.x;
            mhi[r] = kr.y;
            lim[r] = kr.y - 1;
        }
    uint32_t qf[KS][4];

    for (int it = 0; it < nblocks; it++) {
        const int buf = it & 1, n0 = n_begin + it * BN;
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
            dfa__load_tile<DP, BN, NT>(sK + (buf ^ 1) * BN * DP * 2, kg, kstride, n0 + BN, p.sh.seqlen_k, p.sh.head_dim,
                                       tid);
        dfa__cp_async_commit();

        if constexpr (SOFTCAP) dfa__softcap_scores<NT8 * 4>(&s[0][0], dfa__softcap_of(p.sh));
        if (p.sh.masked) dfa__mask_scores<NT8>(s, mlo, mhi, n0, lane);
        dfa__softmax_step<BN, OT8>(s, acc, m, l, lim, n0, m0, p.sh.seqlen_k, p.sh.causal, p.sh.offset, p.scale_log2, lane);

        dfa__cp_async_wait<1>(); /* V[it] has landed */
        __syncthreads();
        dfa__mma_pv<DV, BN, BF16>(acc, s, sV + buf * BN * DV * 2, lane);
        if (it + 1 < nblocks)
            dfa__load_tile<DV, BN, NT>(sV + (buf ^ 1) * BN * DV * 2, vg, vstride, n0 + BN, p.sh.seqlen_k,
                                       DFA__VDIM(p.sh), tid);
        dfa__cp_async_commit();
    }
    dfa__cp_async_wait<0>();
    dfa__store_o_lse<OT8, BF16, OutT>(acc, m, l, og, ostride, lseg, m0 + warp * 16, p.sh.seqlen_q,
                                      DFA__VDIM(p.sh), lane, dfa__row_sink(p.sh, h));
}

#endif
