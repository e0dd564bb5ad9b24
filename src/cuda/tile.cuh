/* Internal: shared-memory tiles for the mma.sync kernels, and the row-wise
 * pieces of the online softmax that every forward kernel shares.
 *
 * A tile is rows x DP 16-bit elements (DP = head dim padded to 64, 128 or 256),
 * each row split into 16-byte chunks stored at chunk ^ (row & 7): the 8 rows one
 * ldmatrix reads at a time then hit 8 different bank groups. */
#ifndef DFA_CUDA_TILE_CUH
#define DFA_CUDA_TILE_CUH

#include "ptx.cuh"

/* Byte offset of element (r, c) of a swizzled tile with DP columns (c a multiple of 8
   for whole chunks; any c inside a chunk works). */
template <int DP> static __device__ __forceinline__ uint32_t dfa__swz(int r, int c) {
    return (uint32_t)((r * DP + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7)) * 2);
}

/* Issues cp.async for rows [row0, row0 + ROWS) of a [rows_total][stride] matrix whose row 0
   is at g, columns [0, DP); rows >= rows_total and columns >= d become zeros. */
template <int DP, int ROWS, int NT>
static __device__ __forceinline__ void dfa__load_tile(uint32_t s, const uint16_t *g, long long stride, int row0,
                                                      int rows_total, int d, int tid) {
    constexpr int CH = DP / 8;
#pragma unroll 4
    for (int c = tid; c < ROWS * CH; c += NT) {
        const int r = c / CH, ch = c % CH, gr = row0 + r;
        const bool ok = gr < rows_total && ch * 8 < d;
        const uint16_t *src = ok ? g + (long long)gr * stride + ch * 8 : g;
        dfa__cp_async16(s + dfa__swz<DP>(r, ch * 8), src, ok ? 16 : 0);
    }
}

/* ldmatrix addresses for lane l (see ptx.cuh for the fragment layouts):
   A operand (16 rows x 16 columns at r0, c0) of a row-major tile. */
template <int DP> static __device__ __forceinline__ uint32_t dfa__addr_a(uint32_t s, int r0, int c0, int l) {
    return s + dfa__swz<DP>(r0 + (l & 15), c0 + ((l >> 4) << 3));
}
/* B operand of two n8 tiles, rows n0..n0+15 of a tile stored [n][k] (no transpose):
   regs 0,1 = tile n0, regs 2,3 = tile n0+8. */
template <int DP> static __device__ __forceinline__ uint32_t dfa__addr_b(uint32_t s, int n0, int k0, int l) {
    return s + dfa__swz<DP>(n0 + (l & 7) + ((l >> 4) << 3), k0 + (((l >> 3) & 1) << 3));
}
/* B operand of two n8 tiles from a tile stored [k][n] (ldmatrix .trans): rows k0..k0+15,
   columns n0..n0+15; regs 0,1 = columns n0..n0+7, regs 2,3 = n0+8.. */
template <int DP> static __device__ __forceinline__ uint32_t dfa__addr_bt(uint32_t s, int k0, int n0, int l) {
    return s + dfa__swz<DP>(k0 + (l & 7) + (((l >> 3) & 1) << 3), n0 + ((l >> 4) << 3));
}

/* Largest value across the 4 lanes that share a row. */
static __device__ __forceinline__ float dfa__quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
static __device__ __forceinline__ float dfa__quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* Visibility limit of one query row: keys j <= limit are visible (-1: none). */
static __device__ __forceinline__ int dfa__row_limit(int row, int seqlen_k, int causal, long long offset) {
    long long lim = seqlen_k - 1;
    if (causal) {
        const long long c = (long long)row + offset;
        lim = c < lim ? c : lim;
    }
    return lim < -1 ? -1 : (int)lim;
}

/* Key range [0, n_end) that any row of [m0, m0 + rows) can see. */
static __device__ __forceinline__ int dfa__key_end(int m0, int rows, int seqlen_k, int causal, long long offset) {
    if (!causal) return seqlen_k;
    const long long e = (long long)m0 + rows + offset; /* last row's limit + 1 */
    return e < 0 ? 0 : (e > seqlen_k ? seqlen_k : (int)e);
}

/* Online softmax over one tile of scores held in C-fragment layout: NT8 n8 tiles, rows
   (g) and (g+8) of this warp's 16. s[] holds raw q.k; on return it holds unnormalised
   probabilities exp2(s * scale_log2 - m). m (scaled, base-2 units) and l (this lane's
   partial sum) are updated; the returned factors rescale the output rows.
   Masked entries must already be -inf. */
template <int NT8>
static __device__ __forceinline__ void dfa__softmax_tile(float (*s)[4], float *m, float *l, float scale_log2,
                                                         float *alpha) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = dfa__quad_max(mx);
        const float m_new = fmaxf(m[r], mx * scale_log2);
        /* a row that has seen nothing keeps m = -inf; subtract 0 then so no inf - inf */
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = exp2f(m[r] - m_use);
        m[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NT8; j++) {
            s[j][2 * r] = exp2f(fmaf(s[j][2 * r], scale_log2, -m_use));
            s[j][2 * r + 1] = exp2f(fmaf(s[j][2 * r + 1], scale_log2, -m_use));
            sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
    }
}

/* Writes this warp's 16 rows of the normalised output (C layout, NT8 tiles of 8 columns)
   and their log-sum-exp. row0 = first of the 16 rows; o_row(r) addresses are base + r*stride. */
template <int NT8, int BF16>
static __device__ __forceinline__ void dfa__store_o_lse(float (*acc)[4], const float *m, const float *l_part,
                                                        uint16_t *o, long long stride, float *lse, int row0,
                                                        int seqlen_q, int d, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float l = dfa__quad_sum(l_part[r]);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int row = row0 + g + 8 * r;
        if (row < seqlen_q) {
            uint16_t *orow = o + (long long)row * stride;
#pragma unroll
            for (int j = 0; j < NT8; j++) {
                const int c = j * 8 + 2 * t;
                if (c < d)
                    *(uint32_t *)(orow + c) = dfa__pack2<BF16>(acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
            }
            if (lse && t == 0) lse[row] = l > 0.0f ? m[r] * DFA__LN2 + logf(l) : -INFINITY;
        }
    }
}

#endif
