/* FlashAttention forward on the CPU: one task per (query tile, batch, head),
 * keys streamed tile by tile with an online softmax in base 2.
 *
 * The scores are computed transposed, S^T = K . Q^T (key rows, query
 * columns): the query tile is transposed once per task, K and V are read in
 * place by broadcasts, and the softmax statistics of each query become
 * vertical (lane-wise) operations with no horizontal reductions. Then
 * acc += P V. K and V are first copied head-major in float32 (each head's
 * rows contiguous; linear in sequence length), which keeps the hardware
 * prefetchers streaming; beyond that, memory is a few tiles per thread.
 *
 * Softcap turns each tile's raw scores into capped logits before the mask and the
 * softmax (which then scale by log2(e) alone). A sink is each row's starting state:
 * running max = sink, sum = 1 and nothing in the accumulator, as a key with a zero value
 * would be, so the sink joins the normaliser exactly once and o, lse follow unchanged.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/args.h"
#include "../common/desc.h"
#include "../common/error.h"
#include "../common/mask.h"
#include "../common/sinks.h"
#include "attn_tiles.h"
#include "kernels.h"
#include "threads.h"
#include "tile_io.h"

#define BR DFA__FWD_BR
#define BC DFA__FWD_BC
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

typedef struct {
    float *qbuf;         /* converted query rows [BR][D] (16-bit storage only) */
    float *qt;           /* query tile transposed [D][BR], zero-padded columns */
    float *st;           /* scores, then probabilities, transposed [BC][BR] */
    float *acc;          /* unnormalised output [BR][Dv] */
    float *m, *l, *alpha; /* running max (base-2 units), sum, rescale factor per query [BR] */
    int *lo, *hi;        /* visible keys [lo, hi) per query of the tile [BR] (masks only) */
} fwd_scratch;

static size_t fwd_scratch_floats(int D, int Dv) {
    return ((size_t)BR * D * 2 + (size_t)BR * Dv + (size_t)BC * BR + 5 * BR + 15) / 16 * 16;
}

static fwd_scratch fwd_scratch_at(float *base, int D, int Dv) {
    fwd_scratch w;
    w.qt = base;
    w.acc = w.qt + (size_t)BR * D;
    w.qbuf = w.acc + (size_t)BR * Dv;
    w.st = w.qbuf + (size_t)BR * D;
    w.m = w.st + (size_t)BC * BR;
    w.l = w.m + BR;
    w.alpha = w.l + BR;
    w.lo = (int *)(w.alpha + BR); /* int and float have the same size: the scratch is untyped memory */
    w.hi = w.lo + BR;
    return w;
}

typedef struct {
    const dfa_attn_desc *d;
    const dfa__cpu_kernels *kr;
    const void *q;
    const float *k, *v; /* head-major float32 copies [batch][num_kv_heads][seqlen_k][head_dim or Dv] */
    void *o;
    float *lse;
} fwd_args;

/* True when row i0 + r of the tile sees no key (w.lo, w.hi hold the rows' intervals under a
   mask, as fwd_tile fills them). */
static bool row_sees_no_key(const dfa_attn_desc *d, const fwd_scratch *w, int i0, int r) {
    if (dfa__has_mask(d)) return w->lo[r] >= w->hi[r];
    return dfa__visible_keys(d, i0 + r) == 0;
}

static void fwd_tile(const fwd_args *a, int b, int h, int qb, fwd_scratch w) {
    const dfa_attn_desc *d = a->d;
    const dfa__cpu_kernels *kr = a->kr;
    const int D = d->head_dim, Dv = dfa__head_dim_v(d), H = d->num_heads, Hkv = d->num_kv_heads;
    const int g = h / (H / Hkv);
    const int i0 = qb * BR, rows = d->seqlen_q - i0 < BR ? d->seqlen_q - i0 : BR;
    const float scale = dfa__softmax_scale(d), cap = d->softcap;
    const float scale_log2 = cap > 0.0f ? LOG2E : scale * LOG2E; /* capped logits carry the scale */
    const int64_t q_stride = (int64_t)H * D, o_stride = (int64_t)H * Dv;
    const int64_t q_first = ((int64_t)b * d->seqlen_q + i0) * q_stride + (int64_t)h * D;
    const int64_t o_first = ((int64_t)b * d->seqlen_q + i0) * o_stride + (int64_t)h * Dv;
    const int64_t head_row0 = ((int64_t)b * Hkv + g) * d->seqlen_k;
    const float *kh = a->k + head_row0 * D, *vh = a->v + head_row0 * Dv;

    int ldq;
    const float *qrows = dfa__tile_in(kr, d->dtype, a->q, q_first, q_stride, rows, D, w.qbuf, &ldq);
    kr->transpose(rows, D, qrows, ldq, w.qt, BR);
    if (rows < BR)
        for (int c = 0; c < D; c++) memset(w.qt + (size_t)c * BR + rows, 0, sizeof(float) * (size_t)(BR - rows));
    const float sink2 = d->sinks ? d->sinks[h] * LOG2E : 0.0f; /* base 2, as m */
    for (int r = 0; r < rows; r++) {
        w.m[r] = d->sinks ? sink2 : -INFINITY;
        w.l[r] = d->sinks ? 1.0f : 0.0f;
    }
    memset(w.acc, 0, sizeof(float) * (size_t)rows * Dv);

    /* Keys [kbeg, kend) hold every visible one. Causal only: the last row sees the most. With
       documents or a window: the union of the rows' intervals, and tiles inside it that no row
       sees are skipped (cost follows the visible pairs). */
    const bool masked = dfa__has_mask(d);
    int kbeg = 0, kend = dfa__visible_keys(d, i0 + rows - 1);
    if (masked) {
        kbeg = d->seqlen_k, kend = 0;
        for (int r = 0; r < rows; r++) {
            dfa__row_keys(d, b, i0 + r, &w.lo[r], &w.hi[r]);
            if (w.lo[r] < w.hi[r]) {
                if (w.lo[r] < kbeg) kbeg = w.lo[r];
                if (w.hi[r] > kend) kend = w.hi[r];
            }
        }
    }
    bool started = false;
    for (int j0 = kbeg; j0 < kend; j0 += BC) {
        const int cols = kend - j0 < BC ? kend - j0 : BC;
        const dfa__tile_cover cover = masked ? dfa__tile_classify(w.lo, w.hi, rows, j0, cols) : DFA__TILE_FULL;
        if (cover == DFA__TILE_EMPTY) continue;
        dfa__prefetch_l2(vh + (int64_t)j0 * Dv, (size_t)cols * Dv); /* read after the scores */
        kr->gemm_nn(cols, BR, D, kh + (int64_t)j0 * D, D, w.qt, BR, w.st, BR);
        if (cap > 0.0f) kr->softcap_rows(w.st, NULL, BR, cols, BR, scale / cap, cap);
        if (cover == DFA__TILE_PARTIAL) dfa__tile_mask(w.st, 1, BR, w.lo, w.hi, rows, j0, cols);
        const int delta = d->causal && !masked ? dfa__tile_delta(d->q_start + i0, d->k_start + j0, cols)
                                               : DFA__NO_MASK;
        kr->softmax_cols(w.st, BR, cols, rows, scale_log2, delta, w.m, w.l, w.alpha);
        if (j0 + BC < kend) /* the next K tile, while P V runs */
            dfa__prefetch_l2(kh + (int64_t)(j0 + BC) * D, (size_t)(kend - j0 - BC < BC ? kend - j0 - BC : BC) * D);
        if (started) kr->scale_rows(w.acc, Dv, rows, Dv, w.alpha);
        started = true;
        kr->gemm_tn_acc(rows, Dv, cols, w.st, BR, vh + (int64_t)j0 * Dv, Dv, w.acc, Dv);
    }

    for (int r = 0; r < rows; r++) {
        /* A row that saw no key: o = 0 (acc is 0) and lse = -inf, or exactly the sink. */
        const float inv = w.l[r] > 0.0f ? 1.0f / w.l[r] : 0.0f;
        dfa__tile_out(kr, d->dtype, a->o, o_first + r * o_stride, o_stride, 1, Dv, w.acc + (size_t)r * Dv, Dv, inv);
        if (!a->lse) continue;
        float lse = w.l[r] > 0.0f ? (w.m[r] + log2f(w.l[r])) * LN2 : -INFINITY;
        if (d->sinks && row_sees_no_key(d, &w, i0, r)) lse = d->sinks[h];
        a->lse[((int64_t)b * H + h) * d->seqlen_q + i0 + r] = lse;
    }
}

dfa_status dfa_attn_fwd(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, void *o,
                        float *lse) {
    static const char fn[] = "dfa_attn_fwd";
    dfa__clear_error();
    dfa_attn_desc desc; /* the caller's descriptor, normalised: the only one used below */
    const dfa_attn_desc *d = &desc;
    dfa_status st = dfa__check_fwd_args(user_d, NULL, &desc, q, k, v, o, lse, fn);
    if (!st) st = dfa__check_docs_host(d, fn);
    if (!st) st = dfa__check_sinks_host(d, fn);
    if (st) return st;

    const int nthreads = dfa__cpu_threads(), Dv = dfa__head_dim_v(d);
    const size_t per_thread = fwd_scratch_floats(d->head_dim, Dv);
    const size_t k_f32 = (size_t)dfa__kv_elems(d), v_f32 = (size_t)dfa__v_elems(d); /* head-major copies */
    const size_t floats = per_thread * (size_t)nthreads + k_f32 + v_f32;
    float *mem = dfa__alloc_floats(floats);
    if (!mem) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of scratch", sizeof(float) * floats);
    float *scratch = mem;

    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    float *kf = mem + per_thread * (size_t)nthreads, *vf = kf + k_f32;
    dfa__gather_heads(kr, d->dtype, k, d->batch, d->seqlen_k, d->num_kv_heads, d->head_dim, kf, nthreads);
    dfa__gather_heads(kr, d->dtype, v, d->batch, d->seqlen_k, d->num_kv_heads, Dv, vf, nthreads);
    const fwd_args args = {d, kr, q, kf, vf, o, lse};

    const int nqb = (d->seqlen_q + BR - 1) / BR;
    const int64_t heads = (int64_t)d->batch * d->num_heads, ntasks = heads * nqb;
    /* Head by head, so that the threads share one head's K and V in the last-level
       cache; within a head the last query tiles first, as under a causal mask they
       see the most keys (dynamic scheduling then evens out the tail). */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t t = 0; t < ntasks; t++) {
        const int qtile = nqb - 1 - (int)(t % nqb);
        const int bh = (int)(t / nqb);
        fwd_tile(&args, bh / d->num_heads, bh % d->num_heads, qtile,
                 fwd_scratch_at(scratch + per_thread * (size_t)dfa__cpu_thread_id(), d->head_dim, Dv));
    }
    free(mem);
    return DFA_OK;
}
