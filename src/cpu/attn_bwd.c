/* FlashAttention backward on the CPU.
 *
 * 1. D_i = rowsum(dO_i * O_i) per query row.
 * 2. One task per (batch, kv head, key segment): for each key tile of the
 *    segment it walks every query tile of every query head of its group,
 *    recomputes P = exp(scale q.k - lse) from the saved lse, and accumulates
 *    dV += P^T dO and dK += dS^T Q in registers-sized scratch, where
 *    dS = P * (dO V^T - D). The task owns its key tile, so dk/dv need no
 *    synchronisation.
 * 3. dQ += dS K goes to a float32 partial per key segment; the partials are
 *    summed in segment order at the end. The segment count depends only on
 *    the shapes, so the result has the same bits for any thread count.
 */
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

/* Enough tasks to feed a many-core machine, few enough that the dq partials stay small. */
static int key_segments(const dfa_attn_desc *d) {
    const int nkb = (d->seqlen_k + BC - 1) / BC;
    const int64_t heads = (int64_t)d->batch * d->num_kv_heads;
    int g = heads >= 32 ? 1 : (int)((32 + heads - 1) / heads);
    if (g > 8) g = 8;
    return g < nkb ? g : nkb;
}

typedef struct {
    float *q, *k, *v, *dout; /* converted inputs (unused for float32 storage) */
    float *p, *ds;           /* [BR][BC] */
    float *dk, *dv;          /* [BC][D] accumulators of the current key tile */
} bwd_scratch;

static size_t bwd_scratch_floats(int D) { return (size_t)BR * D * 2 + (size_t)BC * D * 4 + 2 * BR * BC; }

static bwd_scratch bwd_scratch_at(float *base, int D) {
    bwd_scratch w;
    w.q = base;
    w.dout = w.q + (size_t)BR * D;
    w.k = w.dout + (size_t)BR * D;
    w.v = w.k + (size_t)BC * D;
    w.dk = w.v + (size_t)BC * D;
    w.dv = w.dk + (size_t)BC * D;
    w.p = w.dv + (size_t)BC * D;
    w.ds = w.p + BR * BC;
    return w;
}

typedef struct {
    const dfa_attn_desc *d;
    const dfa__cpu_kernels *kr;
    const void *q, *k, *v, *dout;
    const float *lse;
    const float *dsum;    /* D_i, [batch, num_heads, seqlen_q] */
    float *dq_part;       /* [segments][batch, seqlen_q, num_heads, head_dim] */
    void *dk, *dv;
    float scale;
} bwd_args;

/* Gradient contributions of query tile (b, h, i0..i0+rows) against the key tile at j0. */
static void bwd_pair(const bwd_args *a, bwd_scratch w, int b, int h, int i0, int rows, int j0, int cols,
                     const float *kt, int ldk, const float *vt, int ldv, float *dq_part) {
    const dfa_attn_desc *d = a->d;
    const int D = d->head_dim, H = d->num_heads;
    const float scale_log2 = a->scale * LOG2E;
    const int64_t q_stride = (int64_t)H * D;
    const int64_t q_first = ((int64_t)b * d->seqlen_q + i0) * q_stride + (int64_t)h * D;
    const int64_t row0 = ((int64_t)b * H + h) * d->seqlen_q + i0;
    int ldq, ldo;
    const float *qt = dfa__tile_in(d->dtype, a->q, q_first, q_stride, rows, D, w.q, &ldq);
    const float *dot = dfa__tile_in(d->dtype, a->dout, q_first, q_stride, rows, D, w.dout, &ldo);

    a->kr->gemm_nt(rows, cols, D, qt, ldq, kt, ldk, w.p, BC);
    for (int r = 0; r < rows; r++) {
        float *p = w.p + r * BC;
        int nvis = dfa__visible_keys(d, i0 + r) - j0;
        nvis = nvis < 0 ? 0 : nvis > cols ? cols : nvis;
        const float lse = a->lse[row0 + r];
        if (lse == -INFINITY) nvis = 0; /* the row saw no key at all: no gradient */
        if (nvis > 0) a->kr->exp2_affine_sum(p, nvis, scale_log2, lse * LOG2E);
        if (nvis < cols) memset(p + nvis, 0, sizeof(float) * (size_t)(cols - nvis));
    }
    a->kr->gemm_tn_acc(cols, D, rows, w.p, BC, dot, ldo, w.dv, D);
    a->kr->gemm_nt(rows, cols, D, dot, ldo, vt, ldv, w.ds, BC);
    for (int r = 0; r < rows; r++) {
        const float di = a->dsum[row0 + r];
        float *ds = w.ds + r * BC;
        const float *p = w.p + r * BC;
        for (int c = 0; c < cols; c++) ds[c] = p[c] * (ds[c] - di);
    }
    a->kr->gemm_tn_acc(cols, D, rows, w.ds, BC, qt, ldq, w.dk, D);
    a->kr->gemm_nn_acc(rows, D, cols, w.ds, BC, kt, ldk, dq_part + q_first, (int)q_stride);
}

static void bwd_segment(const bwd_args *a, bwd_scratch w, int b, int g, int seg, int nseg) {
    const dfa_attn_desc *d = a->d;
    const int D = d->head_dim, Hkv = d->num_kv_heads, group = d->num_heads / Hkv;
    const int nkb = (d->seqlen_k + BC - 1) / BC;
    const int per_seg = (nkb + nseg - 1) / nseg;
    const int kb_end = (seg + 1) * per_seg < nkb ? (seg + 1) * per_seg : nkb;
    const int64_t k_stride = (int64_t)Hkv * D;
    float *dq_part = a->dq_part + (size_t)seg * (size_t)dfa__q_elems(d);

    for (int kb = seg * per_seg; kb < kb_end; kb++) {
        const int j0 = kb * BC, cols = d->seqlen_k - j0 < BC ? d->seqlen_k - j0 : BC;
        const int64_t k_first = ((int64_t)b * d->seqlen_k + j0) * k_stride + (int64_t)g * D;
        int ldk, ldv;
        const float *kt = dfa__tile_in(d->dtype, a->k, k_first, k_stride, cols, D, w.k, &ldk);
        const float *vt = dfa__tile_in(d->dtype, a->v, k_first, k_stride, cols, D, w.v, &ldv);
        memset(w.dk, 0, sizeof(float) * (size_t)cols * D);
        memset(w.dv, 0, sizeof(float) * (size_t)cols * D);

        /* Under a causal mask the first query that sees key j0 is q_start + i = k_start + j0. */
        int64_t first_row = d->causal ? d->k_start + j0 - d->q_start : 0;
        if (first_row < 0) first_row = 0;
        for (int hh = 0; hh < group; hh++)
            for (int64_t i0 = first_row / BR * BR; i0 < d->seqlen_q; i0 += BR) {
                const int rows = d->seqlen_q - i0 < BR ? d->seqlen_q - (int)i0 : BR;
                bwd_pair(a, w, b, g * group + hh, (int)i0, rows, j0, cols, kt, ldk, vt, ldv, dq_part);
            }
        dfa__tile_out(d->dtype, a->dk, k_first, k_stride, cols, D, w.dk, D, a->scale);
        dfa__tile_out(d->dtype, a->dv, k_first, k_stride, cols, D, w.dv, D, 1.0f);
    }
}

dfa_status dfa_attn_bwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                        const float *lse, const void *dout, void *dq, void *dk, void *dv) {
    static const char fn[] = "dfa_attn_bwd";
    dfa__clear_error();
    dfa_status st = dfa__check_desc(d, DFA__DESC_FULL, fn);
    if (st) return st;
    if ((st = dfa__check_ptr(q, "q", fn)) || (st = dfa__check_ptr(k, "k", fn)) ||
        (st = dfa__check_ptr(v, "v", fn)) || (st = dfa__check_ptr(o, "o", fn)) ||
        (st = dfa__check_ptr(lse, "lse", fn)) || (st = dfa__check_ptr(dout, "dout", fn)) ||
        (st = dfa__check_ptr(dq, "dq", fn)) || (st = dfa__check_ptr(dk, "dk", fn)) ||
        (st = dfa__check_ptr(dv, "dv", fn)))
        return st;
    const size_t es = dfa__dtype_size(d->dtype);
    const int64_t nq = dfa__q_elems(d), nlse = dfa__lse_elems(d);
    const size_t qbytes = (size_t)nq * es, kbytes = (size_t)dfa__kv_elems(d) * es;
    const dfa__buffer outs[] = {{dq, qbytes, "dq"}, {dk, kbytes, "dk"}, {dv, kbytes, "dv"}};
    const dfa__buffer ins[] = {{q, qbytes, "q"},       {k, kbytes, "k"},
                               {v, kbytes, "v"},       {o, qbytes, "o"},
                               {dout, qbytes, "dout"}, {lse, (size_t)nlse * 4, "lse"}};
    if ((st = dfa__check_no_overlap(outs, 3, ins, 6, fn))) return st;

    const int D = d->head_dim, H = d->num_heads;
    const int nthreads = dfa__cpu_threads(), nseg = key_segments(d);
    /* Each thread's scratch also holds one query row of o and dout, all heads, for the D_i pass. */
    size_t per_thread = bwd_scratch_floats(D);
    if (per_thread < (size_t)2 * H * D) per_thread = (size_t)2 * H * D;
    const size_t floats = (size_t)nlse + (size_t)nseg * (size_t)nq + per_thread * (size_t)nthreads;
    float *mem = malloc(sizeof(float) * floats);
    if (!mem) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate %zu bytes of scratch", sizeof(float) * floats);
    float *dsum = mem, *dq_part = dsum + nlse, *scratch = dq_part + (size_t)nseg * (size_t)nq;
    memset(dq_part, 0, sizeof(float) * (size_t)nseg * (size_t)nq);

    /* D_i = rowsum(dO_i * O_i), one (batch, row) of all heads per iteration. */
    const int64_t qrows = (int64_t)d->batch * d->seqlen_q;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t row = 0; row < qrows; row++) {
        float *buf = scratch + per_thread * (size_t)dfa__cpu_thread_id();
        const int64_t b = row / d->seqlen_q, i = row % d->seqlen_q;
        dfa__load_f32(d->dtype, dfa__elem_c(d->dtype, o, row * H * D), buf, (int64_t)H * D);
        dfa__load_f32(d->dtype, dfa__elem_c(d->dtype, dout, row * H * D), buf + (size_t)H * D, (int64_t)H * D);
        for (int h = 0; h < H; h++) {
            float s = 0.0f;
            for (int c = 0; c < D; c++) s += buf[h * D + c] * buf[(size_t)H * D + h * D + c];
            dsum[(b * H + h) * d->seqlen_q + i] = s;
        }
    }

    const bwd_args args = {d, dfa__cpu_kernels_get(), q, k, v, dout, lse, dsum, dq_part, dk, dv,
                           dfa__softmax_scale(d)};
    const int64_t ntasks = (int64_t)d->batch * d->num_kv_heads * nseg;
    /* Segment 0 first: under a causal mask the earliest keys have the most queries. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t t = 0; t < ntasks; t++) {
        const int seg = (int)(t / ((int64_t)d->batch * d->num_kv_heads));
        const int bg = (int)(t % ((int64_t)d->batch * d->num_kv_heads));
        bwd_segment(&args, bwd_scratch_at(scratch + per_thread * (size_t)dfa__cpu_thread_id(), D),
                    bg / d->num_kv_heads, bg % d->num_kv_heads, seg, nseg);
    }

    /* dq = scale * sum over segments, in segment order. */
    const float scale = args.scale;
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t row = 0; row < qrows; row++) {
        float *buf = scratch + per_thread * (size_t)dfa__cpu_thread_id();
        const int64_t n = (int64_t)H * D, first = row * n;
        memcpy(buf, dq_part + first, sizeof(float) * (size_t)n);
        for (int s = 1; s < nseg; s++) {
            const float *part = dq_part + (size_t)s * (size_t)nq + first;
            for (int64_t c = 0; c < n; c++) buf[c] += part[c];
        }
        for (int64_t c = 0; c < n; c++) buf[c] *= scale;
        dfa__store_f32(d->dtype, buf, dfa__elem(d->dtype, dq, first), n);
    }
    free(mem);
    return DFA_OK;
}
