/* Internal: documents and sliding windows in the CUDA kernels: the one place
 * that says which (query, key) elements and which blocks a mask leaves visible. Every kernel
 * calls these helpers, so that a new kernel only has to call them too.
 *
 * Under every mask the keys a query row sees form one interval, and so do the query rows
 * that see one key (causal, window and "same document" each give an interval; document ids
 * are non-decreasing). A small kernel (dfa__mask_prepare_kernel) computes both once per call
 * into device arrays (dfa__cuda_shape.mask_rows / mask_keys, launch.h); the attention kernels
 * then read, per thread, the intervals of the two rows (or keys) it holds, and per CTA the
 * interval of its block: keys [lo(first row), hi(last row)) for a query block, query rows
 * [lo(first key), hi(last key)) for a key block (both ends are non-decreasing along the
 * sequence), so the cost follows the visible pairs: blocks outside the range are never
 * loaded or computed. Elements outside a row's interval become -inf (probability 0). */
#ifndef DFA_CUDA_MASK_CUH
#define DFA_CUDA_MASK_CUH

#include "launch.h"
#include "tile.cuh"

/* The keys [x, y) that query row `row` of batch row b sees (empty for rows past the end). */
static __device__ __forceinline__ int2 dfa__mask_row(const dfa__cuda_shape &sh, int b, int row) {
    if (row >= sh.seqlen_q) return make_int2(0, 0);
    return __ldg((const int2 *)sh.mask_rows + (long long)b * sh.seqlen_q + row);
}

/* The query rows [x, y) that see key `key` of batch row b (empty for keys past the end). */
static __device__ __forceinline__ int2 dfa__mask_key(const dfa__cuda_shape &sh, int b, int key) {
    if (key >= sh.seqlen_k) return make_int2(0, 0);
    return __ldg((const int2 *)sh.mask_keys + (long long)b * sh.seqlen_k + key);
}

/* Keys [x, y) that some row of the query block [m0, m0 + rows) may see (y <= x: none). */
static __device__ __forceinline__ int2 dfa__mask_block_keys(const dfa__cuda_shape &sh, int b, int m0, int rows) {
    const int last = (m0 + rows < sh.seqlen_q ? m0 + rows : sh.seqlen_q) - 1;
    if (last < m0) return make_int2(0, 0);
    return make_int2(dfa__mask_row(sh, b, m0).x, dfa__mask_row(sh, b, last).y);
}

/* Query rows [x, y) that may see some key of the key block [n0, n0 + keys) (y <= x: none). */
static __device__ __forceinline__ int2 dfa__mask_block_rows(const dfa__cuda_shape &sh, int b, int n0, int keys) {
    const int last = (n0 + keys < sh.seqlen_k ? n0 + keys : sh.seqlen_k) - 1;
    if (last < n0) return make_int2(0, 0);
    return make_int2(dfa__mask_key(sh, b, n0).x, dfa__mask_key(sh, b, last).y);
}

/* The key blocks [*first, *end) of BN keys a query block [m0, m0 + BM) walks: under a mask
   its interval, else (causal or none) the keys below dfa__key_end. */
template <int BN>
static __device__ __forceinline__ void dfa__mask_key_blocks(const dfa__cuda_shape &sh, int b, int m0, int BM,
                                                            int *first, int *end) {
    if (sh.masked) {
        const int2 r = dfa__mask_block_keys(sh, b, m0, BM);
        *first = r.x / BN;
        *end = r.y > r.x ? (r.y + BN - 1) / BN : *first;
    } else {
        *first = 0;
        *end = (dfa__key_end(m0, BM, sh.seqlen_k, sh.causal, sh.offset) + BN - 1) / BN;
    }
}

/* The query blocks [*first, *end) of BM rows a key block [n0, n0 + BN) walks. */
template <int BM>
static __device__ __forceinline__ void dfa__mask_query_blocks(const dfa__cuda_shape &sh, int b, int n0, int BN,
                                                              int *first, int *end) {
    const int nm = (sh.seqlen_q + BM - 1) / BM;
    if (sh.masked) {
        const int2 r = dfa__mask_block_rows(sh, b, n0, BN);
        *first = r.x / BM;
        *end = r.y > r.x ? (r.y + BM - 1) / BM : *first;
        return;
    }
    int mb = 0;
    if (sh.causal) {
        const long long q = (long long)n0 - sh.offset; /* first query that sees key n0 */
        mb = q <= 0 ? 0 : (q >= sh.seqlen_q ? nm : (int)(q / BM));
    }
    *first = mb;
    *end = nm;
}

/* The visible interval of query rows for a key held by a backward thread: [*lo, *hi).
   Without a mask the causal rule: from the first row that sees the key on (INT_MAX: the key
   is past the end or no row sees it). */
static __device__ __forceinline__ void dfa__mask_key_interval(const dfa__cuda_shape &sh, int b, int key, int *lo,
                                                              int *hi) {
    if (sh.masked) {
        const int2 r = dfa__mask_key(sh, b, key);
        *lo = r.x;
        *hi = r.y;
        return;
    }
    long long qm = sh.causal ? (long long)key - sh.offset : 0;
    qm = qm < 0 ? 0 : qm;
    *lo = key >= sh.seqlen_k || qm > sh.seqlen_q ? 0x7fffffff : (int)qm;
    *hi = 0x7fffffff;
}

/* The per-element predicate: query row q is visible to a key whose interval is [lo, hi). */
static __device__ __forceinline__ bool dfa__mask_query_visible(int q, int lo, int hi) { return q >= lo && q < hi; }

/* Forward / dq side: raw scores s (C-fragment layout, NT8 tiles of 8 key columns from n0,
   this lane's rows g and g + 8 with key intervals [lo[r], hi[r])) become -inf outside the
   intervals. Tiles inside both intervals are left alone. */
template <int NT8>
static __device__ __forceinline__ void dfa__mask_scores(float (*s)[4], const int *lo, const int *hi, int n0,
                                                        int lane) {
    if (n0 >= lo[0] && n0 >= lo[1] && n0 + NT8 * 8 <= hi[0] && n0 + NT8 * 8 <= hi[1]) return;
#pragma unroll
    for (int j = 0; j < NT8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int col = n0 + j * 8 + 2 * (lane & 3) + (e & 1), r = e >> 1;
            if (col < lo[r] || col >= hi[r]) s[j][e] = -INFINITY;
        }
}

/* ---- the intervals (dfa__cuda_mask_prepare) --------------------------------------------- */

/* First index in [0, n) with a[i] >= x (n if none); a non-decreasing. */
static __device__ __forceinline__ int dfa__lower_bound(const int32_t *a, int n, long long x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((long long)__ldg(a + mid) < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* One thread per query row (first batch * seqlen_q threads), then one per key. */
static __global__ void dfa__mask_prepare_kernel(const dfa__cuda_mask m, int2 *rows, int2 *keys) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nr = (long long)m.batch * m.seqlen_q, nk = (long long)m.batch * m.seqlen_k;
    if (t < nr) {
        const int b = (int)(t / m.seqlen_q), i = (int)(t % m.seqlen_q);
        const long long rel = i + m.offset; /* the row's position in key indices */
        long long a = 0, z = m.seqlen_k;
        if (m.causal && rel + 1 < z) z = rel + 1;
        if (m.window && m.left >= 0 && rel - m.left > a) a = rel - m.left;
        if (m.window && m.right >= 0 && rel + m.right + 1 < z) z = rel + m.right + 1;
        if (m.q_doc && a < z) {
            const long long x = __ldg(m.q_doc + t);
            const int32_t *kd = m.k_doc + (long long)b * m.seqlen_k;
            const long long f = dfa__lower_bound(kd, m.seqlen_k, x), e = dfa__lower_bound(kd, m.seqlen_k, x + 1);
            a = f > a ? f : a;
            z = e < z ? e : z;
        }
        a = a < 0 ? 0 : (a > m.seqlen_k ? m.seqlen_k : a);
        z = z < a ? a : z;
        rows[t] = make_int2((int)a, (int)z);
    } else if (t < nr + nk) {
        const long long u = t - nr;
        const int b = (int)(u / m.seqlen_k), j = (int)(u % m.seqlen_k);
        const long long rel = (long long)j - m.offset; /* the key's position in query indices */
        long long a = 0, z = m.seqlen_q;
        if (m.causal && rel > a) a = rel;
        if (m.window && m.left >= 0 && rel + m.left + 1 < z) z = rel + m.left + 1;
        if (m.window && m.right >= 0 && rel - m.right > a) a = rel - m.right;
        if (m.q_doc && a < z) {
            const long long y = __ldg(m.k_doc + u);
            const int32_t *qd = m.q_doc + (long long)b * m.seqlen_q;
            const long long f = dfa__lower_bound(qd, m.seqlen_q, y), e = dfa__lower_bound(qd, m.seqlen_q, y + 1);
            a = f > a ? f : a;
            z = e < z ? e : z;
        }
        a = a < 0 ? 0 : (a > m.seqlen_q ? m.seqlen_q : a);
        z = z < a ? a : z;
        keys[u] = make_int2((int)a, (int)z);
    }
}

#endif
