/* Forward variants of the kernel lab (float32, public layouts). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_tiles.h"
#include "lab.h"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static float scale_log2_of(const dfa_attn_desc *d) {
    return (d->softmax_scale > 0 ? d->softmax_scale : 1.0f / sqrtf((float)d->head_dim)) * LOG2E;
}

/* Keys visible to query row i (as dfa__visible_keys). */
static int visible(const dfa_attn_desc *d, int64_t i) {
    if (!d->causal) return d->seqlen_k;
    int64_t n = d->q_start + i - d->k_start + 1;
    return n < 0 ? 0 : n > d->seqlen_k ? d->seqlen_k : (int)n;
}

static void finish_rows(const dfa_attn_desc *d, int b, int h, int i0, int rows, const float *acc, int ld_acc,
                        int acc_transposed, const float *m, const float *l, float *o, float *lse) {
    const int D = d->head_dim, H = d->num_heads;
    for (int r = 0; r < rows; r++) {
        const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
        float *orow = o + (((int64_t)b * d->seqlen_q + i0 + r) * H + h) * D;
        for (int c = 0; c < D; c++) orow[c] = (acc_transposed ? acc[(int64_t)c * ld_acc + r] : acc[(int64_t)r * ld_acc + c]) * inv;
        lse[((int64_t)b * H + h) * d->seqlen_q + i0 + r] = l[r] > 0 ? (m[r] + log2f(l[r])) * LN2 : -INFINITY;
    }
}

/* ---- v0: row-major scores (the first tiled version): S = Q K^T with gemm_nt, a
   row-wise softmax, O += P V; k and v read in place. ---- */
static void fwd_rowmajor(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                         const float *k, const float *v, float *o, float *lse, int nthreads) {
    const int BR = t.br ? t.br : 64, BC = t.bc ? t.bc : 64, D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads;
    const int nqb = (d->seqlen_q + BR - 1) / BR;
    const int64_t heads = (int64_t)d->batch * H, ntasks = heads * nqb;
    const float c = scale_log2_of(d);
#pragma omp parallel num_threads(nthreads)
    {
        float *s = malloc(sizeof(float) * ((size_t)BR * BC + (size_t)BR * D + 2 * BR));
        float *acc = s + BR * BC, *m = acc + (size_t)BR * D, *l = m + BR;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntasks; task++) {
            const int qb = nqb - 1 - (int)(task / heads), bh = (int)(task % heads), b = bh / H, h = bh % H;
            const int g = h / (H / Hkv), i0 = qb * BR, rows = d->seqlen_q - i0 < BR ? d->seqlen_q - i0 : BR;
            const float *qt = q + (((int64_t)b * d->seqlen_q + i0) * H + h) * D;
            const float *kh = k + ((int64_t)b * d->seqlen_k * Hkv + g) * D, *vh = v + ((int64_t)b * d->seqlen_k * Hkv + g) * D;
            for (int r = 0; r < rows; r++) m[r] = -INFINITY, l[r] = 0;
            memset(acc, 0, sizeof(float) * (size_t)rows * D);
            const int kend = visible(d, i0 + rows - 1);
            for (int j0 = 0; j0 < kend; j0 += BC) {
                const int cols = kend - j0 < BC ? kend - j0 : BC;
                kr->gemm_nt(rows, cols, D, qt, H * D, kh + (int64_t)j0 * Hkv * D, Hkv * D, s, BC);
                for (int r = 0; r < rows; r++) {
                    float *sr = s + r * BC;
                    int nvis = visible(d, i0 + r) - j0;
                    nvis = nvis < 0 ? 0 : nvis > cols ? cols : nvis;
                    if (!nvis) { memset(sr, 0, sizeof(float) * cols); continue; }
                    float mx = sr[0];
                    for (int j = 1; j < nvis; j++) mx = sr[j] > mx ? sr[j] : mx;
                    const float mn = fmaxf(m[r], mx * c), alpha = exp2f(m[r] - mn);
                    l[r] = l[r] * alpha + kr->exp2_affine_sum(sr, nvis, c, mn);
                    if (nvis < cols) memset(sr + nvis, 0, sizeof(float) * (cols - nvis));
                    m[r] = mn;
                    if (alpha != 1.0f) kr->scale_rows(acc + (size_t)r * D, D, 1, D, &alpha);
                }
                kr->gemm_nn_acc(rows, D, cols, s, BC, vh + (int64_t)j0 * Hkv * D, Hkv * D, acc, D);
            }
            finish_rows(d, b, h, i0, rows, acc, D, 0, m, l, o, lse);
        }
        free(s);
    }
}

/* ---- v1/v2: transposed scores S^T = K Q^T (key rows, query columns) with k, v
   copied head-major; the softmax statistics are lane-wise. v1 accumulates O
   row-major (V as the streamed B operand); v2 accumulates O^T (V broadcast,
   P^T the B operand, which stays in L1) and transposes once at the end. ---- */
/* Asks for n floats at p to be brought into L2 (one request per cache line). */
static void prefetch_l2(const float *p, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}

static void fwd_transposed(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                           const float *k, const float *v, float *o, float *lse, int nthreads, int ot) {
    const int pf = (ot & 2) != 0, head_major = (ot & 4) != 0;
    ot &= 1;
    const int BR = t.br ? t.br : 48, BC = t.bc ? t.bc : 64, D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads;
    const int nqb = (d->seqlen_q + BR - 1) / BR;
    const int64_t heads = (int64_t)d->batch * H, ntasks = heads * nqb;
    const float c = scale_log2_of(d);
    const size_t nk = (size_t)d->batch * d->seqlen_k * Hkv * D;
    float *kf = malloc(sizeof(float) * nk * 2), *vf = kf + nk;
    dfa__gather_heads(kr, DFA_F32, k, d->batch, d->seqlen_k, Hkv, D, kf, nthreads);
    dfa__gather_heads(kr, DFA_F32, v, d->batch, d->seqlen_k, Hkv, D, vf, nthreads);
#pragma omp parallel num_threads(nthreads)
    {
        float *qt = dfa__alloc_floats((size_t)BR * D * 2 + (size_t)BC * BR + 3 * BR);
        float *acc = qt + (size_t)BR * D, *st = acc + (size_t)BR * D, *m = st + (size_t)BC * BR, *l = m + BR, *al = l + BR;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntasks; task++) {
            /* head-major: all query tiles of one head before the next, so that the head's K and V
               stay in the last-level cache; otherwise tile-major (all heads' K and V in flight) */
            const int qb = nqb - 1 - (int)(head_major ? task % nqb : task / heads);
            const int bh = (int)(head_major ? task / nqb : task % heads), b = bh / H, h = bh % H;
            const int g = h / (H / Hkv), i0 = qb * BR, rows = d->seqlen_q - i0 < BR ? d->seqlen_q - i0 : BR;
            const float *qrows = q + (((int64_t)b * d->seqlen_q + i0) * H + h) * D;
            const float *kh = kf + ((int64_t)b * Hkv + g) * d->seqlen_k * D, *vh = vf + ((int64_t)b * Hkv + g) * d->seqlen_k * D;
            kr->transpose(rows, D, qrows, H * D, qt, BR);
            if (rows < BR)
                for (int cc = 0; cc < D; cc++) memset(qt + (size_t)cc * BR + rows, 0, sizeof(float) * (BR - rows));
            for (int r = 0; r < BR; r++) m[r] = -INFINITY, l[r] = 0;
            memset(acc, 0, sizeof(float) * (size_t)BR * D);
            const int kend = visible(d, i0 + rows - 1);
            for (int j0 = 0; j0 < kend; j0 += BC) {
                const int cols = kend - j0 < BC ? kend - j0 : BC;
                if (pf) prefetch_l2(vh + (int64_t)j0 * D, (size_t)cols * D); /* needed after the S gemm */
                kr->gemm_nn(cols, BR, D, kh + (int64_t)j0 * D, D, qt, BR, st, BR);
                const int delta = d->causal ? dfa__tile_delta(d->q_start + i0, d->k_start + j0, cols) : DFA__NO_MASK;
                kr->softmax_cols(st, BR, cols, rows, c, delta, m, l, al);
                if (pf && j0 + BC < kend) /* the next K tile, during P V */
                    prefetch_l2(kh + (int64_t)(j0 + BC) * D, (size_t)(kend - j0 - BC < BC ? kend - j0 - BC : BC) * D);
                if (!ot) {
                    if (j0 > 0) kr->scale_rows(acc, D, rows, D, al);
                    kr->gemm_tn_acc(rows, D, cols, st, BR, vh + (int64_t)j0 * D, D, acc, D);
                } else {
                    if (j0 > 0)
                        for (int cc = 0; cc < D; cc++)
                            for (int r = 0; r < rows; r++) acc[(size_t)cc * BR + r] *= al[r];
                    kr->gemm_tn_acc(D, BR, cols, vh + (int64_t)j0 * D, D, st, BR, acc, BR);
                }
            }
            finish_rows(d, b, h, i0, rows, acc, ot ? BR : D, ot, m, l, o, lse);
        }
        free(qt);
    }
    free(kf);
}

static void fwd_t_rows(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                       const float *k, const float *v, float *o, float *lse, int nthreads) {
    fwd_transposed(d, kr, t, q, k, v, o, lse, nthreads, 0);
}
static void fwd_t_rows_pf(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                          const float *k, const float *v, float *o, float *lse, int nthreads) {
    fwd_transposed(d, kr, t, q, k, v, o, lse, nthreads, 2);
}
static void fwd_t_rows_pf_hm(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                             const float *k, const float *v, float *o, float *lse, int nthreads) {
    fwd_transposed(d, kr, t, q, k, v, o, lse, nthreads, 2 | 4);
}
static void fwd_t_ot(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                     const float *k, const float *v, float *o, float *lse, int nthreads) {
    fwd_transposed(d, kr, t, q, k, v, o, lse, nthreads, 1);
}

/* ---- lib: the library's dfa_attn_fwd (its own table and tiles) ---- */
static void fwd_lib(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                    const float *k, const float *v, float *o, float *lse, int nthreads) {
    (void)kr, (void)t;
    dfa_set_num_threads(nthreads);
    dfa_attn_fwd(d, q, k, v, o, lse);
}

const lab_fwd_variant lab_fwd_variants[] = {
    {"lib", "dfa_attn_fwd as built", fwd_lib, {0, 0}},
    {"rowmajor", "S = Q K^T (gemm_nt), row softmax, O += P V; k, v in place", fwd_rowmajor, {64, 64}},
    {"t-rows", "S^T = K Q^T, lane-wise softmax, O += (P^T)^T V; k, v head-major", fwd_t_rows, {48, 64}},
    {"t-rows-96", "t-rows with 96 x 64 tiles", fwd_t_rows, {96, 64}},
    {"t-rows-48x128", "t-rows with 48 x 128 tiles", fwd_t_rows, {48, 128}},
    {"t-rows-64", "t-rows with 64 x 64 tiles", fwd_t_rows, {64, 64}},
    {"t-rows-pf", "t-rows, software prefetch of the next K and V tiles into L2", fwd_t_rows_pf, {48, 64}},
    {"t-rows-96-pf", "t-rows-pf with 96 x 64 tiles", fwd_t_rows_pf, {96, 64}},
    {"t-rows-96x96-pf", "t-rows-pf with 96 x 96 tiles", fwd_t_rows_pf, {96, 96}},
    {"t-rows-pf-hm", "t-rows-pf, tasks head by head (one head's K, V in L3 at a time)", fwd_t_rows_pf_hm, {48, 64}},
    {"t-rows-96-pf-hm", "t-rows-pf-hm with 96 x 64 tiles", fwd_t_rows_pf_hm, {96, 64}},
    {"t-rows-96x96-pf-hm", "t-rows-pf-hm with 96 x 96 tiles", fwd_t_rows_pf_hm, {96, 96}},
    {"t-ot", "S^T = K Q^T, O^T += V^T P^T (P^T stays in L1)", fwd_t_ot, {48, 64}},
    {"t-ot-96", "t-ot with 96 x 64 tiles", fwd_t_ot, {96, 64}},
};
const int lab_fwd_count = sizeof lab_fwd_variants / sizeof lab_fwd_variants[0];
