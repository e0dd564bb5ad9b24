/* Internal: shared-memory tiles for the mma.sync kernels, and the row-wise
 * pieces of the online softmax that every forward kernel shares.
 *
 * A tile is rows x DP 16-bit elements (DP = head dim padded to 64, 128, 192 or 256),
 * each row split into 16-byte chunks stored at chunk ^ (row & 7): the 8 rows one
 * ldmatrix reads at a time then hit 8 different bank groups. Also the pieces the
 * kernels share: products over such tiles, fragment packing, output stores. */
#ifndef DFA_CUDA_TILE_CUH
#define DFA_CUDA_TILE_CUH

#include "launch.h"
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

/* The value head dim (v's, o's, dout's, dv's) of a kernel whose value tiles are padded to DV and
   its query/key tiles to DP (template parameters of the kernel that uses it): head_dim itself
   where DV = DP, read where it is used as head_dim is (a member read of the kernel's parameter
   block, not through a reference), so that those kernels keep their code. */
#define DFA__VDIM(sh) (DV == DP ? (sh).head_dim : (sh).head_dim_v)

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
   Masked entries must already be -inf. FAST_EXP: dfa__exp2_ftz instead of exp2f.
   KEEP_MAX: the row keeps its reference maximum while the new one exceeds it by at most
   DFA__KEEP_MAX_LOG2 (probabilities then reach 2^8 = 256: far inside float32, and 16-bit P keeps
   the same relative rounding error); o and l share the reference, so o / l and the log-sum-exp are
   the same, and alpha is exactly 1 on most blocks (the caller may skip the rescale). */
#define DFA__KEEP_MAX_LOG2 8.0f
template <int NT8, int FAST_EXP = 0, int KEEP_MAX = 0>
static __device__ __forceinline__ void dfa__softmax_tile(float (*s)[4], float *m, float *l, float scale_log2,
                                                         float *alpha) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NT8; j++) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = dfa__quad_max(mx);
        float m_new = fmaxf(m[r], mx * scale_log2);
        /* m = -inf (nothing seen): the difference is inf or NaN, and the row takes m_new */
        if (KEEP_MAX && m_new - m[r] <= DFA__KEEP_MAX_LOG2) m_new = m[r];
        /* a row that has seen nothing keeps m = -inf; subtract 0 then so no inf - inf */
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        alpha[r] = KEEP_MAX && m_new == m[r] ? 1.0f : FAST_EXP ? dfa__exp2_ftz(m[r] - m_use) : exp2f(m[r] - m_use);
        m[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NT8; j++) {
            const float x0 = fmaf(s[j][2 * r], scale_log2, -m_use), x1 = fmaf(s[j][2 * r + 1], scale_log2, -m_use);
            s[j][2 * r] = FAST_EXP ? dfa__exp2_ftz(x0) : exp2f(x0);
            s[j][2 * r + 1] = FAST_EXP ? dfa__exp2_ftz(x1) : exp2f(x1);
            sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        l[r] = l[r] * alpha[r] + sum;
    }
}

/* One key tile of a forward's online softmax: masks the raw scores s (C layout, BN/8 tiles,
   this warp's rows g and g+8 with visibility limits lim) where the tile [n0, n0 + BN) crosses
   the end of the keys or the causal diagonal of the query tile at m0, turns them into
   probabilities (dfa__softmax_tile) and rescales the OT8 output tiles acc to the new maximum.
   alpha_out (optional) receives the two rows' rescale factors, for a caller that rescales its
   output later (OT8 = 0: the pipelined forward, whose output is still being written). FAST_EXP,
   KEEP_MAX: as dfa__softmax_tile. */
template <int BN, int OT8, int FAST_EXP = 0, int KEEP_MAX = 0>
static __device__ __forceinline__ void dfa__softmax_step(float (*s)[4], float (*acc)[4], float *m, float *l,
                                                         const int *lim, int n0, int m0, int seqlen_k, int causal,
                                                         long long offset, float scale_log2, int lane,
                                                         float *alpha_out = 0) {
    constexpr int NT8 = BN / 8;
    const bool need_mask = n0 + BN > seqlen_k || (causal && (long long)n0 + BN - 1 > (long long)m0 + offset);
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
    dfa__softmax_tile<NT8, FAST_EXP, KEEP_MAX>(s, m, l, scale_log2, alpha);
    if (alpha_out) {
        alpha_out[0] = alpha[0];
        alpha_out[1] = alpha[1];
    }
#pragma unroll
    for (int j = 0; j < OT8; j++) {
        acc[j][0] *= alpha[0];
        acc[j][1] *= alpha[0];
        acc[j][2] *= alpha[1];
        acc[j][3] *= alpha[1];
    }
}

/* Logit softcapping (distflash.h, "Logits, softcap and sinks") on the kernels' raw scores x =
   q . k, before the softmax's scale: x becomes (c / scale) tanh(x scale / c), which the scale
   then turns into c tanh(scale q . k / c). It goes before any masking (tanh(-inf) would be a
   finite -c). The backward multiplies dS by 1 - t^2, t = tanh(x scale / c) of the same x. */
struct dfa__softcap {
    float in, out; /* scale / c and c / scale */
};
static __device__ __forceinline__ dfa__softcap dfa__softcap_of(const dfa__cuda_shape &sh) {
    return dfa__softcap{sh.scale / sh.softcap, sh.softcap / sh.scale};
}
/* One raw score of the backward, capped (SOFTCAP) or not, and the cap's derivative 1 - t^2 (1 without). */
template <bool SOFTCAP>
static __device__ __forceinline__ float dfa__softcap_score(float x, const dfa__cuda_shape &sh, float *dcap) {
    *dcap = 1.0f;
    if constexpr (SOFTCAP) {
        const dfa__softcap cap = dfa__softcap_of(sh);
        const float th = dfa__tanh_approx(x * cap.in);
        *dcap = 1.0f - th * th;
        return cap.out * th;
    }
    return x;
}
template <int N> static __device__ __forceinline__ void dfa__softcap_scores(float *s, dfa__softcap c) {
#pragma unroll
    for (int i = 0; i < N; i++) s[i] = c.out * dfa__tanh_approx(s[i] * c.in);
}
/* The same cap with its outer factor left to the softmax: s becomes t = tanh(s scale / c), and
   the caller's softmax runs at scale_log2 * c.out (the maximum commutes with a positive factor,
   so m and the log-sum-exp come out as from the capped scores, and each score saves a multiply). */
template <int N> static __device__ __forceinline__ void dfa__softcap_tanh(float *s, dfa__softcap c) {
#pragma unroll
    for (int i = 0; i < N; i++) s[i] = dfa__tanh_approx(s[i] * c.in);
}
/* The softmax's scale (base 2) for scores from dfa__softcap_tanh (SOFTCAP), else scale_log2 itself. */
template <bool SOFTCAP>
static __device__ __forceinline__ float dfa__softcap_scale_log2(float scale_log2, dfa__softcap c) {
    return SOFTCAP ? scale_log2 * c.out : scale_log2;
}

/* The A fragment of an m16n8k16 product from two adjacent C tiles (columns 0-7 and 8-15 of
   16), rounded to 16 bits: how P and dS feed the next product without leaving registers. */
template <int BF16>
static __device__ __forceinline__ void dfa__pack_a(uint32_t *a, const float *c0, const float *c1) {
    a[0] = dfa__pack2<BF16>(c0[0], c0[1]);
    a[1] = dfa__pack2<BF16>(c0[2], c0[3]);
    a[2] = dfa__pack2<BF16>(c1[0], c1[1]);
    a[3] = dfa__pack2<BF16>(c1[2], c1[3]);
}

/* Two products of this warp's 16 rows r0 that share their k loop over all DP columns:
   c1 += A1 B1^T and c2 += A2 B2^T, with A1, A2 row-major tiles at a1, a2 and B1, B2 tiles of
   N rows stored [n][k] at b1, b2 (N/8 C tiles each). */
template <int DP, int N, int BF16>
static __device__ __forceinline__ void dfa__mma_abt2(float (*c1)[4], float (*c2)[4], uint32_t a1, uint32_t a2,
                                                     uint32_t b1, uint32_t b2, int r0, int lane) {
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t f1[4], f2[4];
        dfa__ldmatrix_x4(f1, dfa__addr_a<DP>(a1, r0, kk * 16, lane));
        dfa__ldmatrix_x4(f2, dfa__addr_a<DP>(a2, r0, kk * 16, lane));
#pragma unroll
        for (int nb = 0; nb < N / 16; nb++) {
            uint32_t r[4];
            dfa__ldmatrix_x4(r, dfa__addr_b<DP>(b1, nb * 16, kk * 16, lane));
            dfa__mma16816<BF16>(c1[2 * nb], f1, r[0], r[1]);
            dfa__mma16816<BF16>(c1[2 * nb + 1], f1, r[2], r[3]);
            dfa__ldmatrix_x4(r, dfa__addr_b<DP>(b2, nb * 16, kk * 16, lane));
            dfa__mma16816<BF16>(c2[2 * nb], f2, r[0], r[1]);
            dfa__mma16816<BF16>(c2[2 * nb + 1], f2, r[2], r[3]);
        }
    }
}

/* One product of this warp's 16 rows r0 over all DP columns: c += A B^T, A a row-major tile at
   a, B a tile of N rows stored [n][k] at b (N/8 C tiles): dfa__mma_abt2 for two products whose
   k extents differ (a value head dim of its own). */
template <int DP, int N, int BF16>
static __device__ __forceinline__ void dfa__mma_abt(float (*c)[4], uint32_t a, uint32_t b, int r0, int lane) {
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        uint32_t f[4];
        dfa__ldmatrix_x4(f, dfa__addr_a<DP>(a, r0, kk * 16, lane));
#pragma unroll
        for (int nb = 0; nb < N / 16; nb++) {
            uint32_t r[4];
            dfa__ldmatrix_x4(r, dfa__addr_b<DP>(b, nb * 16, kk * 16, lane));
            dfa__mma16816<BF16>(c[2 * nb], f, r[0], r[1]);
            dfa__mma16816<BF16>(c[2 * nb + 1], f, r[2], r[3]);
        }
    }
}

/* acc (this warp's 16 rows x DP, C tiles) += P V: P is 16 x BN in C tiles (rounded to 16 bits
   here), V a BN x DP tile at vb stored [key][column] (read transposed). */
template <int DP, int BN, int BF16>
static __device__ __forceinline__ void dfa__mma_pv(float (*acc)[4], float (*p)[4], uint32_t vb, int lane) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        uint32_t a[4];
        dfa__pack_a<BF16>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
        for (int db = 0; db < DP / 16; db++) {
            uint32_t r[4];
            dfa__ldmatrix_x4_trans(r, dfa__addr_bt<DP>(vb, kk * 16, db * 16, lane));
            dfa__mma16816<BF16>(acc[2 * db], a, r[0], r[1]);
            dfa__mma16816<BF16>(acc[2 * db + 1], a, r[2], r[3]);
        }
    }
}

/* Output elements: the storage type's 16 bits, or float32 (OUT32, caller's partial results). */
template <int OUT32> struct dfa__out_type { typedef uint16_t type; };
template <> struct dfa__out_type<1> { typedef float type; };

/* Two adjacent output elements (p 4-byte aligned for 16 bits, 8-byte aligned for float32). */
template <int BF16> static __device__ __forceinline__ void dfa__store2(uint16_t *p, float x, float y) {
    *(uint32_t *)p = dfa__pack2<BF16>(x, y);
}
template <int BF16> static __device__ __forceinline__ void dfa__store2(float *p, float x, float y) {
    *(float2 *)p = make_float2(x, y);
}
/* Eight zero output elements (p 16-byte aligned). */
static __device__ __forceinline__ void dfa__store_zero8(uint16_t *p) { *(uint4 *)p = make_uint4(0, 0, 0, 0); }
static __device__ __forceinline__ void dfa__store_zero8(float *p) {
    ((uint4 *)p)[0] = make_uint4(0, 0, 0, 0);
    ((uint4 *)p)[1] = make_uint4(0, 0, 0, 0);
}

/* The natural-log log-sum-exp of a row from its base-2 running maximum m and its sum l of
   2^(s - m); -inf for a row that saw no key (l = 0). */
static __device__ __forceinline__ float dfa__row_lse(float m, float l) {
    return l > 0.0f ? m * DFA__LN2 + logf(l) : -INFINITY;
}

/* The sink logit of head h's rows where the forward's kernels add it (sh.fwd_sinks), else -inf. */
static __device__ __forceinline__ float dfa__row_sink(const dfa__cuda_shape &sh, int h) {
    return sh.fwd_sinks ? __ldg(sh.sinks + h) : -INFINITY;
}

/* A row's end: its lse, and in *inv the factor its o accumulator takes, from the running maximum
   m (base 2) and sum l, with the sink logit in the normaliser (distflash.h, "Logits, softcap and
   sinks"; -inf: none). Over the larger of the two maxima: l' = l 2^(m - M) + 2^(sink log2e - M),
   o = acc 2^(m - M) / l', lse = M ln 2 + ln l'. A row that saw no key: o = 0 and lse = sink. */
static __device__ __forceinline__ float dfa__row_finish(float m, float l, float sink, float *inv) {
    if (sink == -INFINITY) {
        *inv = l > 0.0f ? 1.0f / l : 0.0f;
        return dfa__row_lse(m, l);
    }
    if (!(l > 0.0f)) {
        *inv = 0.0f;
        return sink;
    }
    const float s2 = sink * DFA__LOG2E, M = fmaxf(m, s2), a = exp2f(m - M), L = fmaf(l, a, exp2f(s2 - M));
    *inv = a / L;
    return M * DFA__LN2 + logf(L);
}

/* Writes this warp's 16 rows of the normalised output (C layout, NT8 tiles of 8 columns)
   and their log-sum-exp, with the rows' sink logit (dfa__row_finish; -inf: none). row0 = first
   of the 16 rows; o_row(r) addresses are base + r*stride. */
template <int NT8, int BF16, typename OutT>
static __device__ __forceinline__ void dfa__store_o_lse(float (*acc)[4], const float *m, const float *l_part,
                                                        OutT *o, long long stride, float *lse, int row0,
                                                        int seqlen_q, int d, int lane, float sink) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const float l = dfa__quad_sum(l_part[r]);
        float inv;
        const float row_lse = dfa__row_finish(m[r], l, sink, &inv);
        const int row = row0 + g + 8 * r;
        if (row < seqlen_q) {
            OutT *orow = o + (long long)row * stride;
#pragma unroll
            for (int j = 0; j < NT8; j++) {
                const int c = j * 8 + 2 * t;
                if (c < d) dfa__store2<BF16>(orow + c, acc[j][2 * r] * inv, acc[j][2 * r + 1] * inv);
            }
            if (lse && t == 0) lse[row] = row_lse;
        }
    }
}

#endif
