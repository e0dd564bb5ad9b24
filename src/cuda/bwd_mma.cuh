/* Internal: the FlashAttention-2 backward kernels (mma.sync, ldmatrix, cp.async).
 *
 *   dfa__bwd_dsum_kernel  D_i = rowsum(dO_i * O_i), and lse in base 2 for the main pass
 *   dfa__bwd_kv_kernel    one CTA per (key block, kv head, batch): keeps K_j, V_j in shared
 *                         memory and dK_j, dV_j in registers while it walks every query
 *                         block of every query head of its group (GQA needs no reduction);
 *                         with DQ_ATOMIC it also adds dS K into an f32 dq accumulator
 *   dfa__bwd_dq_kernel    the deterministic dq: one CTA per (query block, head, batch)
 *                         recomputes P and dS over its keys and owns its dq rows
 *   dfa__bwd_dq_convert   f32 accumulator -> storage type
 *
 * Every dq contribution is scaled on its way into the float32 accumulator (scale * dS K),
 * so a 16-bit dq is the rounding of the float32 one bit for bit. OUT32 (the caller's
 * float32 partial results) writes dq, dk, dv as float32: the accumulator is then the
 * caller's dq (no conversion pass).
 *
 * In the key-block kernel each warp owns 16 keys and computes S^T = K Q^T and
 * dP^T = V dO^T directly, so P^T and dS^T come out in the A-fragment layout that
 * dV += P^T dO and dK += dS^T Q need. For DP = 256 two warps share 16 keys and
 * split dK/dV columns (DSPLIT = 2) to keep the accumulators in registers.
 *
 * A value head dim of its own (v, o, dout and dv: sh.head_dim_v) is padded to DV apart
 * from DP: the V and dO tiles and dV's accumulators are DV wide, the products over them
 * (dP^T = V dO^T, dV += P^T dO) take their own k or n extent. DV = DP: the value head
 * dim is head_dim itself, and sh.head_dim_v is never read. SOFTCAP (DV = DP only): the
 * scores are capped as the forward's (tile.cuh) and dS carries the cap's derivative. */
#ifndef DFA_CUDA_BWD_MMA_CUH
#define DFA_CUDA_BWD_MMA_CUH

#include "launch.h"
#include "mask.cuh"
#include "tile.cuh"

/* The kernels' parameters: the tensors and scratch, then the resolved shape (launch.h). A
   plain struct (ptxas allocated registers worse for a parameter block with a base class). */
typedef struct {
    const uint16_t *q, *k, *v, *o, *dout;
    const float *lse;
    float *dsum;        /* [batch, heads, seqlen_q] D_i */
    float *lse2;        /* [batch, heads, seqlen_q] lse * log2(e); +inf where the row sees nothing */
    float *dq_acc;      /* [batch, seqlen_q, heads, head_dim] f32, atomic path only (OUT32: dq itself) */
    int *dq_sem;        /* [batch, heads, query blocks] tiles added so far (the in-order dq of bwd_ws.cuh) */
    void *dq, *dk, *dv; /* the storage type, or float32 (OUT32) */
    dfa__cuda_shape sh;
    float scale_log2;
    int qsplit; /* CTAs per key tile of the Hopper kernel's float32 instances (bwd_ws.cuh QSPLIT); 1 elsewhere */
    int kv_sections; /* (batch, kv head) pairs per section of the key-block grid (dfa__bwd_tile_order); 0: none */
} dfa__bwd_params;

/* The key-block grid's order. With sections (sections > 0: pairs per section, heuristics.h
   dfa__bwd_sections_for) the tiles come in sections of that many (batch, kv head) pairs, and
   within a section the first key tiles of every pair come first, the pairs alternating
   fastest: under a causal mask tile 0 walks every query row and the last tile a few, so the
   longest walks start first and the short ones fill the section's end. Without (0), each pair's
   tiles one after another, tile 0 first. unit: the tile's number in the grid; nn: key tiles per
   pair; pairs: batch * kv heads. */
static __device__ __forceinline__ void dfa__bwd_tile_order(uint32_t unit, int nn, int pairs, int sections, int *nb,
                                                           int *bg) {
    if (sections <= 0) {
        *nb = (int)(unit % (uint32_t)nn), *bg = (int)(unit / (uint32_t)nn);
        return;
    }
    const uint32_t per = (uint32_t)sections * (uint32_t)nn, sec = unit / per, r = unit - sec * per;
    const int g0 = (int)sec * sections, gn = pairs - g0 < sections ? pairs - g0 : sections;
    *nb = (int)(r / (uint32_t)gn);
    *bg = g0 + (int)(r % (uint32_t)gn);
}

/* sum + the dot product of 8 packed 16-bit values of o and of dO. */
template <int BF16> static __device__ __forceinline__ float dfa__bwd_dot8(uint4 a, uint4 b, float sum) {
    const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = dfa__unpack2<BF16>(av[i]), y = dfa__unpack2<BF16>(bv[i]);
        sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
    }
    return sum;
}

/* D and lse2 of one row (lane 0 of the row's lanes writes them). */
static __device__ __forceinline__ void dfa__bwd_dsum_store(const dfa__bwd_params &p, long long r, float sum) {
    const long long h = r % p.sh.num_heads, bi = r / p.sh.num_heads, b = bi / p.sh.seqlen_q, i = bi % p.sh.seqlen_q;
    const long long li = (b * p.sh.num_heads + h) * p.sh.seqlen_q + i;
    const float L = p.lse[li];
    p.dsum[li] = sum;
    p.lse2[li] = L == -INFINITY ? INFINITY : L * DFA__LOG2E;
}

/* D_i and lse2 per (batch, row, head), in the memory order of o; with zero_dq it also zeroes
   the row of the float32 dq accumulator (the same [batch, seqlen_q, heads, head_dim] order), so
   that no separate memset pass writes it: the D kernel already streams every row, and a memset
   of the accumulator would be a launch and a pass over as many bytes of its own.
   LPR = head_dim / 8 lanes per row (8 elements each: every lane loads, rows of a warp reduce
   apart); LPR = 0: any head dim, one warp per row. */
template <int BF16, int LPR> __global__ void dfa__bwd_dsum_kernel(const dfa__bwd_params p, int zero_dq) {
    const long long rows = (long long)p.sh.batch * p.sh.seqlen_q * p.sh.num_heads;
    const int lane = threadIdx.x & 31;
    if constexpr (LPR > 0) {
        const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, r = t / LPR;
        const int c = (int)(t % LPR) * 8;
        float sum = 0.0f;
        if (r < rows) { /* rows past the end still take part in the shuffles below */
            const long long at = r * p.sh.head_dim + c;
            sum = dfa__bwd_dot8<BF16>(*(const uint4 *)(p.o + at), *(const uint4 *)(p.dout + at), sum);
            if (zero_dq) {
                float4 *acc = (float4 *)(p.dq_acc + at);
                acc[0] = acc[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
#pragma unroll
        for (int s = LPR / 2; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
        if (r < rows && c == 0) dfa__bwd_dsum_store(p, r, sum);
        return;
    }
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const uint16_t *o = p.o + r * p.sh.head_dim, *dO = p.dout + r * p.sh.head_dim;
    float sum = 0.0f;
    for (int c = lane * 8; c < p.sh.head_dim; c += 256)
        sum = dfa__bwd_dot8<BF16>(*(const uint4 *)(o + c), *(const uint4 *)(dO + c), sum);
    if (zero_dq)
        for (int c = lane; c < p.sh.head_dim; c += 32) p.dq_acc[r * p.sh.head_dim + c] = 0.0f;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
    if (lane == 0) dfa__bwd_dsum_store(p, r, sum);
}

/* Row r (of the two, g and g + 8) of N8 accumulator tiles of 8 columns from column c0 on, times
   mul, into dst (the row's first element); columns >= d are left out. */
template <int BF16, int N8, typename OutT>
static __device__ __forceinline__ void dfa__bwd_store_row(OutT *dst, const float (*acc)[4], int r, int c0, int d,
                                                          float mul, int t) {
#pragma unroll
    for (int j = 0; j < N8; j++) {
        const int c = c0 + j * 8 + 2 * t;
        if (c < d) dfa__store2<BF16>(dst + c, acc[j][2 * r] * mul, acc[j][2 * r + 1] * mul);
    }
}

template <int DP, int BN, int BM, int DSPLIT, int DQ_ATOMIC, int DV = DP> struct dfa__bwd_kv_cfg {
    static constexpr int NW = (BN / 16) * DSPLIT, NT = 32 * NW;
    static constexpr int DS_LD = BM + 8; /* padded row of the dS^T tile */
    /* the 16-bit tiles: K, V, Q x2, dO x2, dS^T */
    static constexpr int TILES = BN * DP + BN * DV + 2 * BM * DP + 2 * BM * DV + (DQ_ATOMIC ? BN * DS_LD : 0);
    static constexpr int SMEM = TILES * 2 + 4 * BM * 4;
};

template <int DP, int BN, int BM, int DSPLIT, int DQ_ATOMIC, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
__global__ void __launch_bounds__((BN / 16) * DSPLIT * 32) dfa__bwd_kv_kernel(const dfa__bwd_params p,
                                                                                     const dfa__cuda_dkv16 dkv16) {
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__bwd_kv_cfg<DP, BN, BM, DSPLIT, DQ_ATOMIC, DV> C;
    constexpr int NW = C::NW, NT = C::NT, Q8 = BM / 8, DW = DP / DSPLIT, DW8 = DW / 8;
    constexpr int DVW = DV / DSPLIT, DVW8 = DVW / 8; /* dV's columns per warp */
    constexpr int DS_LD = C::DS_LD;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t sK = dfa__smem_addr(dfa__smem), sV = sK + BN * DP * 2;
    const uint32_t sQ0 = sV + BN * DV * 2, sO0 = sQ0 + 2 * BM * DP * 2; /* dO tiles */
    const uint32_t sdS = sO0 + 2 * BM * DV * 2;
    float *sL = (float *)(dfa__smem + C::TILES * 2);
    float *sD = sL + 2 * BM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kw = warp % (BN / 16), dsp = warp / (BN / 16);
    const int nn = (p.sh.seqlen_k + BN - 1) / BN;
    int nb_, bg;
    dfa__bwd_tile_order(blockIdx.x, nn, p.sh.batch * p.sh.num_kv_heads, p.kv_sections, &nb_, &bg);
    const int b = bg / p.sh.num_kv_heads, kvh = bg % p.sh.num_kv_heads;
    const int group = p.sh.num_heads / p.sh.num_kv_heads;
    const int n0 = nb_ * BN;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim, kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    /* v's, dout's and dv's rows (DFA__VDIM) */
    const long long ostride = DV == DP ? qstride : (long long)p.sh.num_heads * p.sh.head_dim_v;
    const long long vstride = DV == DP ? kstride : (long long)p.sh.num_kv_heads * p.sh.head_dim_v;
    const uint16_t *kg = p.k + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    const uint16_t *vg = p.v + (long long)b * p.sh.seqlen_k * vstride + (long long)kvh * DFA__VDIM(p.sh);

    /* query blocks that see any key of this block (mask.cuh) */
    int mb_begin, mb_end;
    dfa__mask_query_blocks<BM>(p.sh, b, n0, BN, &mb_begin, &mb_end);
    const int nmb = mb_end - mb_begin, total = nmb * group;

    /* the query rows [qmin, qmax) that see each of this lane's two keys (qmin INT_MAX: none) */
    int qmin[2], qmax[2];
#pragma unroll
    for (int r = 0; r < 2; r++) dfa__mask_key_interval(p.sh, b, n0 + kw * 16 + g + 8 * r, &qmin[r], &qmax[r]);

    float dk[DW8][4], dv[DVW8][4];
#pragma unroll
    for (int j = 0; j < DW8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = 0.0f;
#pragma unroll
    for (int j = 0; j < DVW8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dv[j][e] = 0.0f;

    /* loads of iteration `it` into buffer `buf` */
#define DFA__BWD_LOAD(it_, buf_)                                                                                  \
    do {                                                                                                          \
        const int hh_ = (it_) / nmb, mq_ = (mb_begin + (it_) % nmb) * BM;                                         \
        const int h_ = kvh * group + hh_;                                                                         \
        const long long qoff_ = (long long)b * p.sh.seqlen_q * qstride + (long long)h_ * p.sh.head_dim;                \
        const long long ooff_ =                                                                                   \
            DV == DP ? qoff_ : (long long)b * p.sh.seqlen_q * ostride + (long long)h_ * p.sh.head_dim_v;          \
        dfa__load_tile<DP, BM, NT>(sQ0 + (buf_) * BM * DP * 2, p.q + qoff_, qstride, mq_, p.sh.seqlen_q, p.sh.head_dim, \
                                   tid);                                                                          \
        dfa__load_tile<DV, BM, NT>(sO0 + (buf_) * BM * DV * 2, p.dout + ooff_, ostride, mq_, p.sh.seqlen_q,         \
                                   DFA__VDIM(p.sh), tid);                                                         \
        for (int i_ = tid; i_ < BM; i_ += NT) {                                                                   \
            const int row_ = mq_ + i_;                                                                            \
            const long long li_ = ((long long)b * p.sh.num_heads + h_) * p.sh.seqlen_q + row_;                         \
            sL[(buf_) * BM + i_] = row_ < p.sh.seqlen_q ? p.lse2[li_] : INFINITY;                                    \
            sD[(buf_) * BM + i_] = row_ < p.sh.seqlen_q ? p.dsum[li_] : 0.0f;                                        \
        }                                                                                                         \
    } while (0)

    dfa__load_tile<DP, BN, NT>(sK, kg, kstride, n0, p.sh.seqlen_k, p.sh.head_dim, tid);
    dfa__load_tile<DV, BN, NT>(sV, vg, vstride, n0, p.sh.seqlen_k, DFA__VDIM(p.sh), tid);
    if (total > 0) DFA__BWD_LOAD(0, 0);
    dfa__cp_async_commit();

    for (int it = 0; it < total; it++) {
        const int buf = it & 1;
        const int hh = it / nmb, m0 = (mb_begin + it % nmb) * BM, h = kvh * group + hh;
        if (it + 1 < total) DFA__BWD_LOAD(it + 1, buf ^ 1);
        dfa__cp_async_commit();
        dfa__cp_async_wait<1>();
        __syncthreads();
        const uint32_t sQ = sQ0 + buf * BM * DP * 2, sO = sO0 + buf * BM * DV * 2;
        const float *L = sL + buf * BM, *Dv = sD + buf * BM;

        /* dP^T = V dO^T and S^T = K Q^T for this warp's 16 keys */
        float dp[Q8][4], st[Q8][4];
#pragma unroll
        for (int j = 0; j < Q8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[j][e] = st[j][e] = 0.0f;
        if constexpr (DV == DP) {
            dfa__mma_abt2<DP, BM, BF16>(dp, st, sV, sK, sO, sQ, kw * 16, lane);
        } else {
            dfa__mma_abt<DV, BM, BF16>(dp, sV, sO, kw * 16, lane);
            dfa__mma_abt<DP, BM, BF16>(st, sK, sQ, kw * 16, lane);
        }
        /* P^T = exp2(S^T scale_log2 - lse2), dS^T = P^T (dP^T - D); SOFTCAP: S^T capped first
           (tile.cuh), dS^T times the cap's derivative 1 - t^2 */
        const bool need_mask = n0 + BN > p.sh.seqlen_k || p.sh.masked ||
                               (p.sh.causal && (long long)m0 + p.sh.offset < (long long)n0 + BN - 1);
#pragma unroll
        for (int j = 0; j < Q8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qc = j * 8 + 2 * t + (e & 1);
                float dcap;
                const float x = dfa__softcap_score<SOFTCAP>(st[j][e], p.sh, &dcap);
                float pv = exp2f(fmaf(x, p.scale_log2, -L[qc]));
                if (need_mask && !dfa__mask_query_visible(m0 + qc, qmin[e >> 1], qmax[e >> 1])) pv = 0.0f;
                st[j][e] = pv;
                dp[j][e] = SOFTCAP ? pv * (dp[j][e] - Dv[qc]) * dcap : pv * (dp[j][e] - Dv[qc]);
            }
        /* dV += P^T dO, dK += dS^T Q (this warp's column slice) */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            uint32_t ap[4], as[4];
            dfa__pack_a<BF16>(ap, st[2 * kk], st[2 * kk + 1]);
            dfa__pack_a<BF16>(as, dp[2 * kk], dp[2 * kk + 1]);
            if (DQ_ATOMIC && dsp == 0) {
                /* dS^T rows (keys) of this warp, for the dQ product below */
                const uint32_t row0 = sdS + (uint32_t)((kw * 16 + g) * DS_LD + kk * 16 + 2 * t) * 2;
                const uint32_t row1 = row0 + 8 * DS_LD * 2;
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(row0), "r"(as[0]));
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(row1), "r"(as[1]));
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(row0 + 16), "r"(as[2]));
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(row1 + 16), "r"(as[3]));
            }
            /* dV's and dK's column blocks side by side while both have one (all of them at
               DV = DP), then the wider one's rest */
#pragma unroll
            for (int db = 0; db < (DW > DVW ? DW : DVW) / 16; db++) {
                uint32_t r[4];
                if (db < DVW / 16) {
                    dfa__ldmatrix_x4_trans(r, dfa__addr_bt<DV>(sO, kk * 16, dsp * DVW + db * 16, lane));
                    dfa__mma16816<BF16>(dv[2 * db], ap, r[0], r[1]);
                    dfa__mma16816<BF16>(dv[2 * db + 1], ap, r[2], r[3]);
                }
                if (db < DW / 16) {
                    dfa__ldmatrix_x4_trans(r, dfa__addr_bt<DP>(sQ, kk * 16, dsp * DW + db * 16, lane));
                    dfa__mma16816<BF16>(dk[2 * db], as, r[0], r[1]);
                    dfa__mma16816<BF16>(dk[2 * db + 1], as, r[2], r[3]);
                }
            }
        }
        if (DQ_ATOMIC) {
            /* dQ (BM x DP) += dS (BM x BN) K (BN x DP); warp -> 16 rows x CW columns */
            constexpr int RT = BM / 16, CG = NW / RT, CW = DP / CG;
            static_assert(NW % RT == 0 && CW % 16 == 0, "dQ warp tiling");
            __syncthreads();
            const int rt = warp % RT, cg = warp / RT;
            float dqa[CW / 8][4];
#pragma unroll
            for (int j = 0; j < CW / 8; j++) dqa[j][0] = dqa[j][1] = dqa[j][2] = dqa[j][3] = 0.0f;
            const int i4 = lane >> 3;
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[4];
                const int key = kk * 16 + (lane & 7) + ((i4 >> 1) << 3), qc = rt * 16 + ((i4 & 1) << 3);
                dfa__ldmatrix_x4_trans(a, sdS + (uint32_t)(key * DS_LD + qc) * 2);
#pragma unroll
                for (int db = 0; db < CW / 16; db++) {
                    uint32_t r[4];
                    dfa__ldmatrix_x4_trans(r, dfa__addr_bt<DP>(sK, kk * 16, cg * CW + db * 16, lane));
                    dfa__mma16816<BF16>(dqa[2 * db], a, r[0], r[1]);
                    dfa__mma16816<BF16>(dqa[2 * db + 1], a, r[2], r[3]);
                }
            }
            float *dqg = p.dq_acc + (long long)b * p.sh.seqlen_q * qstride + (long long)h * p.sh.head_dim;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int row = m0 + rt * 16 + g + 8 * r;
                if (row >= p.sh.seqlen_q) continue;
                float *dst = dqg + (long long)row * qstride;
#pragma unroll
                for (int j = 0; j < CW / 8; j++) {
                    const int c = cg * CW + j * 8 + 2 * t;
                    if (c >= p.sh.head_dim) continue;
                    const float x = dqa[j][2 * r] * p.sh.scale;
                    const float y = dqa[j][2 * r + 1] * p.sh.scale;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    atomicAdd((float2 *)(dst + c), make_float2(x, y));
#else
                    atomicAdd(dst + c, x);
                    atomicAdd(dst + c + 1, y);
#endif
                }
            }
        }
        __syncthreads(); /* buffers of this iteration are refilled two iterations on */
    }
#undef DFA__BWD_LOAD
    dfa__cp_async_wait<0>();

    /* dK = scale * dS^T Q, dV = P^T dO: rows n0 + kw*16 + g (+8), columns of this warp's slice */
    OutT *dkg = (OutT *)p.dk + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    OutT *dvg = (OutT *)p.dv + (long long)b * p.sh.seqlen_k * vstride + (long long)kvh * DFA__VDIM(p.sh);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = n0 + kw * 16 + g + 8 * r;
        if (key >= p.sh.seqlen_k) continue;
        if constexpr (OUT32 != 0) /* keys handed to 16-bit outputs (launch.h, dfa__cuda_dkv16) */
            if ((unsigned)(key - dkv16.from) < (unsigned)(dkv16.to - dkv16.from)) {
                const long long at = ((long long)b * p.sh.seqlen_k + key) * kstride + (long long)kvh * p.sh.head_dim;
                if constexpr (DV == DP) {
#pragma unroll
                    for (int j = 0; j < DW8; j++) {
                        const int c = dsp * DW + j * 8 + 2 * t;
                        if (c >= p.sh.head_dim) continue;
                        dfa__store2<BF16>((uint16_t *)dkv16.dk + at + c, dk[j][2 * r] * p.sh.scale,
                                          dk[j][2 * r + 1] * p.sh.scale);
                        dfa__store2<BF16>((uint16_t *)dkv16.dv + at + c, dv[j][2 * r], dv[j][2 * r + 1]);
                    }
                } else {
                    const long long atv =
                        ((long long)b * p.sh.seqlen_k + key) * vstride + (long long)kvh * p.sh.head_dim_v;
                    dfa__bwd_store_row<BF16, DW8>((uint16_t *)dkv16.dk + at, dk, r, dsp * DW, p.sh.head_dim,
                                                  p.sh.scale, t);
                    dfa__bwd_store_row<BF16, DVW8>((uint16_t *)dkv16.dv + atv, dv, r, dsp * DVW, p.sh.head_dim_v,
                                                   1.0f, t);
                }
                continue;
            }
        if constexpr (DV == DP) {
#pragma unroll
            for (int j = 0; j < DW8; j++) {
                const int c = dsp * DW + j * 8 + 2 * t;
                if (c >= p.sh.head_dim) continue;
                dfa__store2<BF16>(dkg + (long long)key * kstride + c, dk[j][2 * r] * p.sh.scale,
                                  dk[j][2 * r + 1] * p.sh.scale);
                dfa__store2<BF16>(dvg + (long long)key * kstride + c, dv[j][2 * r], dv[j][2 * r + 1]);
            }
        } else {
            dfa__bwd_store_row<BF16, DW8>(dkg + (long long)key * kstride, dk, r, dsp * DW, p.sh.head_dim, p.sh.scale, t);
            dfa__bwd_store_row<BF16, DVW8>(dvg + (long long)key * vstride, dv, r, dsp * DVW, p.sh.head_dim_v, 1.0f, t);
        }
    }
}

template <int DP, int NW, int BN, int DV = DP> struct dfa__bwd_dq_cfg {
    static constexpr int BM = 16 * NW, NT = 32 * NW;
    static constexpr int SMEM = (BM * DP + BM * DV + 2 * BN * DP + 2 * BN * DV) * 2; /* Q, dO, K x2, V x2 */
};

/* Deterministic dq: every dq row is summed by one warp in key order. */
template <int DP, int NW, int BN, int BF16, int OUT32, int DV = DP, bool SOFTCAP = false>
__global__ void __launch_bounds__(NW * 32) dfa__bwd_dq_kernel(const dfa__bwd_params p) {
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__bwd_dq_cfg<DP, NW, BN, DV> C;
    constexpr int BM = C::BM, NT = C::NT, NT8 = BN / 8, OT8 = DP / 8;
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t sQ = dfa__smem_addr(dfa__smem), sO = sQ + BM * DP * 2;
    const uint32_t sK = sO + BM * DV * 2, sV = sK + 2 * BN * DP * 2;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int heads = p.sh.batch * p.sh.num_heads;
    const int nm = (p.sh.seqlen_q + BM - 1) / BM;
    const int mb = nm - 1 - (int)(blockIdx.x / heads), bh = (int)(blockIdx.x % heads);
    const int b = bh / p.sh.num_heads, h = bh % p.sh.num_heads, kvh = h / (p.sh.num_heads / p.sh.num_kv_heads);
    const int m0 = mb * BM;
    const long long qstride = (long long)p.sh.num_heads * p.sh.head_dim, kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    const long long qoff = (long long)b * p.sh.seqlen_q * qstride + (long long)h * p.sh.head_dim;
    /* v's and dout's rows (DFA__VDIM) */
    const long long ostride = DV == DP ? qstride : (long long)p.sh.num_heads * p.sh.head_dim_v;
    const long long vstride = DV == DP ? kstride : (long long)p.sh.num_kv_heads * p.sh.head_dim_v;
    const long long ooff = DV == DP ? qoff : (long long)b * p.sh.seqlen_q * ostride + (long long)h * p.sh.head_dim_v;
    const uint16_t *kg = p.k + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    const uint16_t *vg = p.v + (long long)b * p.sh.seqlen_k * vstride + (long long)kvh * DFA__VDIM(p.sh);

    int kb0, kb1; /* the key blocks this query block sees (mask.cuh) */
    dfa__mask_key_blocks<BN>(p.sh, b, m0, BM, &kb0, &kb1);
    const int nblocks = kb1 - kb0, n_begin = kb0 * BN;

    const int row_a = m0 + warp * 16 + g;
    int lim[2] = {dfa__row_limit(row_a, p.sh.seqlen_k, p.sh.causal, p.sh.offset),
                  dfa__row_limit(row_a + 8, p.sh.seqlen_k, p.sh.causal, p.sh.offset)};
    int mlo[2] = {0, 0}; /* under a mask: the first key each row sees (lim: the last) */
    if (p.sh.masked)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int2 kr = dfa__mask_row(p.sh, b, row_a + 8 * r);
            mlo[r] = kr.x;
            lim[r] = kr.y - 1;
        }
    float L[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_a + 8 * r;
        const long long li = (long long)bh * p.sh.seqlen_q + row;
        L[r] = row < p.sh.seqlen_q ? p.lse2[li] : INFINITY;
        Dr[r] = row < p.sh.seqlen_q ? p.dsum[li] : 0.0f;
    }

    float acc[OT8][4];
#pragma unroll
    for (int j = 0; j < OT8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

    if (nblocks > 0) {
        dfa__load_tile<DP, BM, NT>(sQ, p.q + qoff, qstride, m0, p.sh.seqlen_q, p.sh.head_dim, tid);
        dfa__load_tile<DV, BM, NT>(sO, p.dout + ooff, ostride, m0, p.sh.seqlen_q, DFA__VDIM(p.sh), tid);
        dfa__load_tile<DP, BN, NT>(sK, kg, kstride, n_begin, p.sh.seqlen_k, p.sh.head_dim, tid);
        dfa__load_tile<DV, BN, NT>(sV, vg, vstride, n_begin, p.sh.seqlen_k, DFA__VDIM(p.sh), tid);
        dfa__cp_async_commit();
    }
    for (int it = 0; it < nblocks; it++) {
        const int buf = it & 1, n0 = n_begin + it * BN;
        if (it + 1 < nblocks) {
            dfa__load_tile<DP, BN, NT>(sK + (buf ^ 1) * BN * DP * 2, kg, kstride, n0 + BN, p.sh.seqlen_k, p.sh.head_dim,
                                       tid);
            dfa__load_tile<DV, BN, NT>(sV + (buf ^ 1) * BN * DV * 2, vg, vstride, n0 + BN, p.sh.seqlen_k,
                                       DFA__VDIM(p.sh), tid);
        }
        dfa__cp_async_commit();
        dfa__cp_async_wait<1>();
        __syncthreads();
        const uint32_t kb = sK + buf * BN * DP * 2, vb = sV + buf * BN * DV * 2;
        float s[NT8][4], dp[NT8][4];
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.0f;
        if constexpr (DV == DP) {
            dfa__mma_abt2<DP, BN, BF16>(s, dp, sQ, sO, kb, vb, warp * 16, lane);
        } else {
            dfa__mma_abt<DP, BN, BF16>(s, sQ, kb, warp * 16, lane);
            dfa__mma_abt<DV, BN, BF16>(dp, sO, vb, warp * 16, lane);
        }
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = n0 + j * 8 + 2 * t + (e & 1), r = e >> 1;
                float dcap;
                const float x = dfa__softcap_score<SOFTCAP>(s[j][e], p.sh, &dcap);
                float pv = exp2f(fmaf(x, p.scale_log2, -L[r]));
                if (col > lim[r] || col < mlo[r]) pv = 0.0f;
                dp[j][e] = SOFTCAP ? pv * (dp[j][e] - Dr[r]) * dcap : pv * (dp[j][e] - Dr[r]);
            }
        dfa__mma_pv<DP, BN, BF16>(acc, dp, kb, lane); /* dQ += dS K */
        __syncthreads(); /* this buffer is refilled by the next iteration's prefetch */
    }
    dfa__cp_async_wait<0>();
    OutT *dqg = (OutT *)p.dq + qoff;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_a + 8 * r;
        if (row >= p.sh.seqlen_q) continue;
#pragma unroll
        for (int j = 0; j < OT8; j++) {
            const int c = j * 8 + 2 * t;
            if (c < p.sh.head_dim)
                dfa__store2<BF16>(dqg + (long long)row * qstride + c, acc[j][2 * r] * p.sh.scale, acc[j][2 * r + 1] * p.sh.scale);
        }
    }
}

/* dq = scale * dq_acc, 8 elements per thread. */
template <int BF16> __global__ void dfa__bwd_dq_convert(const dfa__bwd_params p, long long n8) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float4 a = ((const float4 *)p.dq_acc)[2 * i], c = ((const float4 *)p.dq_acc)[2 * i + 1];
    uint4 r;
    r.x = dfa__pack2<BF16>(a.x, a.y);
    r.y = dfa__pack2<BF16>(a.z, a.w);
    r.z = dfa__pack2<BF16>(c.x, c.y);
    r.w = dfa__pack2<BF16>(c.z, c.w);
    ((uint4 *)p.dq)[i] = r;
}

#endif
