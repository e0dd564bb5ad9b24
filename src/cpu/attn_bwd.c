/* FlashAttention backward on the CPU.
 *
 * 1. D_i = rowsum(dO_i * O_i) per query row.
 * 2. One task per (batch, kv head, key segment): for each key tile of the
 *    segment (transposed once: K^T, V^T) it walks every query tile of every
 *    query head of its group, recomputes P = exp(scale q.k - lse) from the
 *    saved lse, and accumulates dV += P^T dO and dK += dS^T Q in per-task
 *    scratch, where dS = P * (dO V^T - D). The task owns its key tile, so
 *    dk/dv need no synchronisation.
 * 3. dQ += dS K goes to a float32 partial per key segment; the partials are
 *    summed in segment order at the end. The segment count depends only on
 *    the shapes, so the result has the same bits for any thread count.
 * q, dout, k and v are first copied head-major in float32 (each head's rows
 * contiguous, so the prefetchers stream them); the dq partials are head-major
 * too. All of it is linear in sequence length.
 *
 * Softcap recomputes the capped logits of each pair (and their derivative, which
 * multiplies dS before dK and dQ). Sinks need nothing in the pairs (lse holds them):
 * dsinks comes from lse and D alone.
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

#define BR DFA__BWD_BR
#define BC DFA__BWD_BC
#define LOG2E 1.4426950408889634f

/* Enough tasks to feed a many-core machine, few enough that the dq partials stay small. */
static int key_segments(const dfa_attn_desc *d) {
    const int nkb = (d->seqlen_k + BC - 1) / BC;
    const int64_t heads = (int64_t)d->batch * d->num_kv_heads;
    int g = heads >= 32 ? 1 : (int)((32 + heads - 1) / heads);
    if (g > 8) g = 8;
    return g < nkb ? g : nkb;
}

typedef struct {
    float *kt, *vt;   /* key tile transposed [D][BC], [Dv][BC] */
    float *p, *ds;    /* [BR][BC] */
    float *dcap;      /* softcap: derivative of the capped logits [BR][BC] */
    float *dk, *dv;   /* [BC][D], [BC][Dv] accumulators of the current key tile */
    float *bias;      /* lse in base 2 per query row of the pair [BR] */
} bwd_scratch;

static size_t bwd_scratch_floats(int D, int Dv) { return (size_t)BC * (D + Dv) * 2 + 3 * BR * BC + BR + 16; }

static bwd_scratch bwd_scratch_at(float *base, int D, int Dv) {
    bwd_scratch w;
    w.kt = base;
    w.vt = w.kt + (size_t)BC * D;
    w.dk = w.vt + (size_t)BC * Dv;
    w.dv = w.dk + (size_t)BC * D;
    w.p = w.dv + (size_t)BC * Dv;
    w.ds = w.p + BR * BC;
    w.dcap = w.ds + BR * BC;
    w.bias = w.dcap + BR * BC;
    return w;
}

typedef struct {
    const dfa_attn_desc *d;
    const dfa__cpu_kernels *kr;
    const float *q, *k, *v, *dout; /* head-major float32 copies [batch][heads][seqlen][head_dim or Dv] */
    const float *lse;
    const float *dsum;    /* D_i, [batch, num_heads, seqlen_q] */
    float *dq_part;       /* [segments][batch][num_heads][seqlen_q][head_dim] */
    void *dk, *dv;
    float scale;
    /* Masks (documents, window) only, else NULL: visible keys [lo, hi) of every query row
       ([batch][seqlen_q] each), and per query tile of BR rows the union of its rows'
       intervals [tile_lo, tile_hi) ([batch][query tiles]; empty when tile_hi <= tile_lo). */
    const int *lo, *hi, *tile_lo, *tile_hi;
} bwd_args;

/* Gradient contributions of query tile (b, h, i0..i0+rows) against the key tile at j0. */
static void bwd_pair(const bwd_args *a, bwd_scratch w, int b, int h, int i0, int rows, int j0, int cols,
                     const float *kh, float *dq_part) {
    const dfa_attn_desc *d = a->d;
    const dfa__cpu_kernels *kr = a->kr;
    const int D = d->head_dim, Dv = dfa__head_dim_v(d), H = d->num_heads;
    const float cap = d->softcap;
    const float scale_log2 = cap > 0.0f ? LOG2E : a->scale * LOG2E; /* capped logits carry the scale */
    const int64_t row0 = ((int64_t)b * H + h) * d->seqlen_q + i0, q_first = row0 * D;
    const float *qt = a->q + q_first, *dot = a->dout + row0 * Dv;

    for (int r = 0; r < rows; r++) { /* a row that saw no key at all gets no gradient: P = exp2(-inf) = 0 */
        const float lse = a->lse[row0 + r];
        w.bias[r] = lse == -INFINITY ? INFINITY : lse * LOG2E;
    }
    int delta = d->causal ? dfa__tile_delta(d->q_start + i0, d->k_start + j0, cols) : DFA__NO_MASK;
    kr->gemm_nn(rows, cols, D, qt, D, w.kt, BC, w.p, BC);
    if (cap > 0.0f) kr->softcap_rows(w.p, w.dcap, BC, rows, cols, a->scale / cap, cap);
    if (a->lo) { /* documents or a window: the rows' intervals decide (the caller skipped empty pairs) */
        const int64_t at = (int64_t)b * d->seqlen_q + i0;
        delta = DFA__NO_MASK;
        if (dfa__tile_classify(a->lo + at, a->hi + at, rows, j0, cols) != DFA__TILE_FULL)
            dfa__tile_mask(w.p, BC, 1, a->lo + at, a->hi + at, rows, j0, cols);
    }
    kr->exp2_rows(w.p, BC, rows, cols, scale_log2, w.bias, delta);
    kr->gemm_nn(rows, cols, Dv, dot, Dv, w.vt, BC, w.ds, BC);
    kr->gemm_tn_acc(cols, Dv, rows, w.p, BC, dot, Dv, w.dv, Dv);
    kr->dsoftmax_rows(w.ds, w.p, BC, rows, cols, a->dsum + row0);
    if (cap > 0.0f) kr->mul_rows(w.ds, w.dcap, BC, rows, cols); /* masked entries: ds = 0 already */
    kr->gemm_tn_acc(cols, D, rows, w.ds, BC, qt, D, w.dk, D);
    kr->gemm_nn_acc(rows, D, cols, w.ds, BC, kh, D, dq_part + q_first, D);
}

static void bwd_segment(const bwd_args *a, bwd_scratch w, int b, int g, int seg, int nseg) {
    const dfa_attn_desc *d = a->d;
    const int D = d->head_dim, Dv = dfa__head_dim_v(d), Hkv = d->num_kv_heads, group = d->num_heads / Hkv;
    const int nkb = (d->seqlen_k + BC - 1) / BC;
    const int per_seg = (nkb + nseg - 1) / nseg;
    const int kb_end = (seg + 1) * per_seg < nkb ? (seg + 1) * per_seg : nkb;
    const int64_t k_stride = (int64_t)Hkv * D, v_stride = (int64_t)Hkv * Dv;
    float *dq_part = a->dq_part + (size_t)seg * (size_t)dfa__q_elems(d);

    for (int kb = seg * per_seg; kb < kb_end; kb++) {
        const int j0 = kb * BC, cols = d->seqlen_k - j0 < BC ? d->seqlen_k - j0 : BC;
        const int64_t k_first = ((int64_t)b * d->seqlen_k + j0) * k_stride + (int64_t)g * D;
        const int64_t v_first = ((int64_t)b * d->seqlen_k + j0) * v_stride + (int64_t)g * Dv;
        const int64_t head_row = ((int64_t)b * Hkv + g) * d->seqlen_k + j0;
        const float *kh = a->k + head_row * D;
        a->kr->transpose(cols, D, kh, D, w.kt, BC);
        a->kr->transpose(cols, Dv, a->v + head_row * Dv, Dv, w.vt, BC);
        memset(w.dk, 0, sizeof(float) * (size_t)cols * D);
        memset(w.dv, 0, sizeof(float) * (size_t)cols * Dv);

        /* Under a causal mask the first query that sees key j0 is q_start + i = k_start + j0. */
        int64_t first_row = d->causal ? d->k_start + j0 - d->q_start : 0;
        if (first_row < 0) first_row = 0;
        const int nqb = (d->seqlen_q + BR - 1) / BR;
        for (int hh = 0; hh < group; hh++)
            for (int64_t i0 = first_row / BR * BR; i0 < d->seqlen_q; i0 += BR) {
                const int rows = d->seqlen_q - i0 < BR ? d->seqlen_q - (int)i0 : BR;
                if (a->lo) { /* masks: skip query tiles that see none of these keys */
                    const int64_t t = (int64_t)b * nqb + i0 / BR;
                    if (a->tile_lo[t] >= a->tile_hi[t] || a->tile_lo[t] >= j0 + cols || a->tile_hi[t] <= j0) continue;
                }
                bwd_pair(a, w, b, g * group + hh, (int)i0, rows, j0, cols, kh, dq_part);
            }
        dfa__tile_out(a->kr, d->dtype, a->dk, k_first, k_stride, cols, D, w.dk, D, a->scale);
        dfa__tile_out(a->kr, d->dtype, a->dv, v_first, v_stride, cols, Dv, w.dv, Dv, 1.0f);
    }
}

dfa_status dfa_attn_bwd(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, const void *o,
                        const float *lse, const void *dout, void *dq, void *dk, void *dv) {
    static const char fn[] = "dfa_attn_bwd";
    dfa__clear_error();
    dfa_attn_desc desc; /* the caller's descriptor, normalised: the only one used below */
    const dfa_attn_desc *d = &desc;
    dfa_status st = dfa__check_bwd_args(user_d, NULL, &desc, q, k, v, o, lse, dout, dq, dk, dv, fn);
    if (!st) st = dfa__check_docs_host(d, fn);
    if (!st) st = dfa__check_sinks_host(d, fn);
    if (st) return st;
    const int64_t nq = dfa__q_elems(d), no = dfa__o_elems(d), nlse = dfa__lse_elems(d);

    const int D = d->head_dim, Dv = dfa__head_dim_v(d), H = d->num_heads;
    const int nthreads = dfa__cpu_threads(), nseg = key_segments(d);
    /* Each thread's scratch also holds one query row of o and dout, all heads, for the D_i pass
       (and a row of dq, all heads, for the final sum). */
    size_t per_thread = bwd_scratch_floats(D, Dv);
    if (per_thread < (size_t)2 * H * Dv + H) per_thread = (size_t)2 * H * Dv + H;
    if (per_thread < (size_t)H * D) per_thread = (size_t)H * D;
    per_thread = (per_thread + 15) / 16 * 16;
    /* head-major float32 copies of q, dout, k, v */
    const size_t nk = (size_t)dfa__kv_elems(d), nv = (size_t)dfa__v_elems(d);
    const size_t conv = (size_t)nq + (size_t)no + nk + nv;
    const size_t floats = (size_t)nseg * (size_t)nq + per_thread * (size_t)nthreads + conv + (size_t)nlse;
    float *mem = dfa__alloc_floats(floats);
    if (!mem) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of scratch", sizeof(float) * floats);
    float *dq_part = mem, *scratch = dq_part + (size_t)nseg * (size_t)nq;
    float *conv_buf = scratch + per_thread * (size_t)nthreads, *dsum = conv_buf + conv;
    memset(dq_part, 0, sizeof(float) * (size_t)nseg * (size_t)nq);

    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    /* D_i = rowsum(dO_i * O_i), one (batch, row) of all heads per iteration. */
    const int64_t qrows = (int64_t)d->batch * d->seqlen_q;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t row = 0; row < qrows; row++) {
        float *buf = scratch + per_thread * (size_t)dfa__cpu_thread_id();
        const int64_t b = row / d->seqlen_q, i = row % d->seqlen_q;
        const int64_t n = (int64_t)H * Dv;
        kr->load_f32(d->dtype, dfa__elem_c(d->dtype, o, row * n), buf, n);
        kr->load_f32(d->dtype, dfa__elem_c(d->dtype, dout, row * n), buf + (size_t)n, n);
        float *dots = buf + (size_t)2 * n;
        kr->rowdot(H, Dv, buf + (size_t)n, Dv, buf, Dv, dots); /* rounded like dP = dO V^T */
        for (int h = 0; h < H; h++) dsum[(b * H + h) * d->seqlen_q + i] = dots[h];
    }

    float *qf = conv_buf, *dof = qf + nq, *kf = dof + no, *vf = kf + nk;
    dfa__gather_heads(kr, d->dtype, q, d->batch, d->seqlen_q, H, D, qf, nthreads);
    dfa__gather_heads(kr, d->dtype, dout, d->batch, d->seqlen_q, H, Dv, dof, nthreads);
    dfa__gather_heads(kr, d->dtype, k, d->batch, d->seqlen_k, d->num_kv_heads, D, kf, nthreads);
    dfa__gather_heads(kr, d->dtype, v, d->batch, d->seqlen_k, d->num_kv_heads, Dv, vf, nthreads);
    bwd_args args = {d, kr, qf, kf, vf, dof, lse, dsum, dq_part, dk, dv, dfa__softmax_scale(d), NULL, NULL, NULL, NULL};
    int *ranges = NULL;
    if (dfa__has_mask(d)) { /* the visible key interval of every query row and tile (linear in seqlen_q) */
        const int nqb = (d->seqlen_q + BR - 1) / BR;
        const size_t nrows = (size_t)qrows, ntiles = (size_t)d->batch * (size_t)nqb;
        ranges = malloc(sizeof(int) * (2 * nrows + 2 * ntiles));
        if (!ranges) {
            free(mem);
            return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of scratch",
                             sizeof(int) * (2 * nrows + 2 * ntiles));
        }
        int *lo = ranges, *hi = lo + nrows, *tlo = hi + nrows, *thi = tlo + ntiles;
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int64_t t = 0; t < (int64_t)ntiles; t++) {
            const int b = (int)(t / nqb), i0 = (int)(t % nqb) * BR;
            const int rows = d->seqlen_q - i0 < BR ? d->seqlen_q - i0 : BR;
            int a = d->seqlen_k, z = 0;
            for (int r = 0; r < rows; r++) {
                const int64_t at = (int64_t)b * d->seqlen_q + i0 + r;
                dfa__row_keys(d, b, i0 + r, &lo[at], &hi[at]);
                if (lo[at] < hi[at]) {
                    if (lo[at] < a) a = lo[at];
                    if (hi[at] > z) z = hi[at];
                }
            }
            tlo[t] = a;
            thi[t] = z;
        }
        args.lo = lo, args.hi = hi, args.tile_lo = tlo, args.tile_hi = thi;
    }
    const int64_t ntasks = (int64_t)d->batch * d->num_kv_heads * nseg;
    /* Segment 0 first: under a causal mask the earliest keys have the most queries. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t t = 0; t < ntasks; t++) {
        const int seg = (int)(t / ((int64_t)d->batch * d->num_kv_heads));
        const int bg = (int)(t % ((int64_t)d->batch * d->num_kv_heads));
        bwd_segment(&args, bwd_scratch_at(scratch + per_thread * (size_t)dfa__cpu_thread_id(), D, Dv),
                    bg / d->num_kv_heads, bg % d->num_kv_heads, seg, nseg);
    }

    /* dq = scale * sum over segments, in segment order. */
    const float scale = args.scale;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t row = 0; row < qrows; row++) {
        float *buf = scratch + per_thread * (size_t)dfa__cpu_thread_id();
        const int64_t n = (int64_t)H * D, b = row / d->seqlen_q, i = row % d->seqlen_q;
        for (int h = 0; h < H; h++) {
            const int64_t first = ((b * H + h) * d->seqlen_q + i) * D; /* head-major partials */
            float *out = buf + (size_t)h * D;
            memcpy(out, dq_part + first, sizeof(float) * (size_t)D);
            for (int s = 1; s < nseg; s++) {
                const float *part = dq_part + (size_t)s * (size_t)nq + first;
                for (int c = 0; c < D; c++) out[c] += part[c];
            }
            for (int c = 0; c < D; c++) out[c] *= scale;
        }
        kr->store_f32(d->dtype, buf, dfa__elem(d->dtype, dq, row * n), n);
    }
    /* dsinks from lse and D alone, after every allocation (like the other outputs, it is not
       written on failure); one head per iteration, summed in a fixed order within it. */
    if (d->dsinks) {
        float *dsinks = d->dsinks;
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int h = 0; h < H; h++) dfa__dsinks_host(d->batch, H, d->seqlen_q, d->sinks, lse, dsum, dsinks, h, h + 1);
    }
    free(ranges);
    free(mem);
    return DFA_OK;
}
