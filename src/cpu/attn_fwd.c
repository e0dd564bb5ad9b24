/* FlashAttention forward on the CPU: one task per (query tile, batch, head),
 * keys streamed tile by tile with an online softmax in base 2. Memory beyond
 * the caller's buffers is a few tiles per thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/desc.h"
#include "../common/error.h"
#include "kernels.h"
#include "threads.h"
#include "tile_io.h"

#define BR DFA__CPU_BR
#define BC DFA__CPU_BC
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

typedef struct {
    float *q, *k, *v; /* converted inputs (unused for float32 storage) */
    float *s;         /* scores, then probabilities [BR][BC] */
    float *acc;       /* unnormalised output [BR][D] */
    float *m, *l;     /* running max (base-2 units) and sum per row */
} fwd_scratch;

static size_t fwd_scratch_floats(int D) { return (size_t)BR * D * 2 + (size_t)BC * D * 2 + BR * BC + 2 * BR; }

static fwd_scratch fwd_scratch_at(float *base, int D) {
    fwd_scratch w;
    w.q = base;
    w.k = w.q + (size_t)BR * D;
    w.v = w.k + (size_t)BC * D;
    w.acc = w.v + (size_t)BC * D;
    w.s = w.acc + (size_t)BR * D;
    w.m = w.s + BR * BC;
    w.l = w.m + BR;
    return w;
}

/* Online-softmax update of one row's running (max, sum, acc) with a tile of raw scores
   s[0, cols), of which the first nvis are visible. Leaves probabilities in s. */
static void softmax_row(const dfa__cpu_kernels *kr, float *s, int nvis, int cols, float scale_log2, float *m,
                        float *l, float *acc, int D) {
    if (nvis == 0) {
        memset(s, 0, sizeof(float) * (size_t)cols);
        return;
    }
    float mx = s[0];
    for (int j = 1; j < nvis; j++) mx = s[j] > mx ? s[j] : mx;
    const float m_new = fmaxf(*m, mx * scale_log2);
    const float alpha = exp2f(*m - m_new); /* 0 when the row saw nothing before */
    const float psum = kr->exp2_affine_sum(s, nvis, scale_log2, m_new);
    if (nvis < cols) memset(s + nvis, 0, sizeof(float) * (size_t)(cols - nvis));
    *l = *l * alpha + psum;
    *m = m_new;
    if (alpha != 1.0f)
        for (int c = 0; c < D; c++) acc[c] *= alpha;
}

static void fwd_tile(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, const void *q, const void *k,
                     const void *v, void *o, float *lse, int b, int h, int qb, fwd_scratch w) {
    const int D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads;
    const int g = h / (H / Hkv);
    const int i0 = qb * BR, rows = d->seqlen_q - i0 < BR ? d->seqlen_q - i0 : BR;
    const float scale_log2 = dfa__softmax_scale(d) * LOG2E;
    const int64_t q_first = ((int64_t)b * d->seqlen_q + i0) * H * D + (int64_t)h * D;
    const int64_t k_first = (int64_t)b * d->seqlen_k * Hkv * D + (int64_t)g * D;
    const int64_t q_stride = (int64_t)H * D, k_stride = (int64_t)Hkv * D;

    int ldq;
    const float *qt = dfa__tile_in(d->dtype, q, q_first, q_stride, rows, D, w.q, &ldq);
    for (int r = 0; r < rows; r++) {
        w.m[r] = -INFINITY;
        w.l[r] = 0.0f;
    }
    memset(w.acc, 0, sizeof(float) * (size_t)rows * D);

    const int kend = dfa__visible_keys(d, i0 + rows - 1); /* the last row sees the most keys */
    for (int j0 = 0; j0 < kend; j0 += BC) {
        const int cols = kend - j0 < BC ? kend - j0 : BC;
        int ldk, ldv;
        const float *kt = dfa__tile_in(d->dtype, k, k_first + j0 * k_stride, k_stride, cols, D, w.k, &ldk);
        const float *vt = dfa__tile_in(d->dtype, v, k_first + j0 * k_stride, k_stride, cols, D, w.v, &ldv);
        kr->gemm_nt(rows, cols, D, qt, ldq, kt, ldk, w.s, BC);
        for (int r = 0; r < rows; r++) {
            int nvis = dfa__visible_keys(d, i0 + r) - j0;
            nvis = nvis < 0 ? 0 : nvis > cols ? cols : nvis;
            softmax_row(kr, w.s + r * BC, nvis, cols, scale_log2, &w.m[r], &w.l[r], w.acc + (size_t)r * D, D);
        }
        kr->gemm_nn_acc(rows, D, cols, w.s, BC, vt, ldv, w.acc, D);
    }

    for (int r = 0; r < rows; r++) {
        float *acc = w.acc + (size_t)r * D;
        const float inv = w.l[r] > 0.0f ? 1.0f / w.l[r] : 0.0f; /* a row that saw no key: o = 0 */
        dfa__tile_out(d->dtype, o, q_first + r * q_stride, q_stride, 1, D, acc, D, inv);
        if (lse)
            lse[((int64_t)b * H + h) * d->seqlen_q + i0 + r] =
                w.l[r] > 0.0f ? (w.m[r] + log2f(w.l[r])) * LN2 : -INFINITY;
    }
}

dfa_status dfa_attn_fwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o,
                        float *lse) {
    static const char fn[] = "dfa_attn_fwd";
    dfa__clear_error();
    dfa_status st = dfa__check_desc(d, DFA__DESC_FULL, fn);
    if (st) return st;
    if ((st = dfa__check_ptr(q, "q", fn)) || (st = dfa__check_ptr(k, "k", fn)) ||
        (st = dfa__check_ptr(v, "v", fn)) || (st = dfa__check_ptr(o, "o", fn)))
        return st;
    const size_t es = dfa__dtype_size(d->dtype);
    const size_t qb = (size_t)dfa__q_elems(d) * es, kb = (size_t)dfa__kv_elems(d) * es;
    const dfa__buffer outs[] = {{o, qb, "o"}, {lse, (size_t)dfa__lse_elems(d) * 4, "lse"}};
    const dfa__buffer ins[] = {{q, qb, "q"}, {k, kb, "k"}, {v, kb, "v"}};
    if ((st = dfa__check_no_overlap(outs, 2, ins, 3, fn))) return st;

    const int nthreads = dfa__cpu_threads();
    const size_t per_thread = fwd_scratch_floats(d->head_dim);
    float *scratch = malloc(sizeof(float) * per_thread * (size_t)nthreads);
    if (!scratch)
        return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of scratch",
                         sizeof(float) * per_thread * (size_t)nthreads);

    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    const int nqb = (d->seqlen_q + BR - 1) / BR;
    const int64_t heads = (int64_t)d->batch * d->num_heads, ntasks = heads * nqb;
    /* Last query tiles first: under a causal mask they see the most keys. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t t = 0; t < ntasks; t++) {
        const int qtile = nqb - 1 - (int)(t / heads);
        const int bh = (int)(t % heads);
        fwd_tile(d, kr, q, k, v, o, lse, bh / d->num_heads, bh % d->num_heads, qtile,
                 fwd_scratch_at(scratch + per_thread * (size_t)dfa__cpu_thread_id(), d->head_dim));
    }
    free(scratch);
    return DFA_OK;
}
