/* Backward variants of the kernel lab (float32, public layouts). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/attn_tiles.h"
#include "lab.h"

#define LOG2E 1.4426950408889634f

/* ---- rows: row-major scores per (query tile, key tile) pair; tasks own key
   tiles (K^T, V^T packed once per key tile) and accumulate dK, dV; dQ goes to
   per-segment partials summed in order. q, dout, k, v copied head-major. ---- */
static void prefetch_l2(const float *p, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}

/* flags: 1 = tasks head by head (all segments of one kv head in a row), 2 = software
   prefetch of the next query tile's q and dout */
static void bwd_rows_f(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                       const float *k, const float *v, const float *o, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, int nthreads, int flags) {
    const int BR = t.br ? t.br : 48, BC = t.bc ? t.bc : 64, D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads;
    const int group = H / Hkv, Sq = d->seqlen_q, Sk = d->seqlen_k;
    const float scale = d->softmax_scale > 0 ? d->softmax_scale : 1.0f / sqrtf((float)D), c = scale * LOG2E;
    const size_t nq = (size_t)d->batch * Sq * H * D, nk = (size_t)d->batch * Sk * Hkv * D, nl = (size_t)d->batch * H * Sq;
    const int nkb = (Sk + BC - 1) / BC;
    int nseg = (int)((32 + d->batch * Hkv - 1) / (d->batch * Hkv));
    nseg = nseg > 8 ? 8 : nseg < 1 ? 1 : nseg;
    if (nseg > nkb) nseg = nkb;
    float *mem = dfa__alloc_floats(2 * nq + 2 * nk + nl + (size_t)nseg * nq);
    float *qf = mem, *dof = qf + nq, *kf = dof + nq, *vf = kf + nk, *dsum = vf + nk, *part = dsum + nl;
    dfa__gather_heads(kr, DFA_F32, q, d->batch, Sq, H, D, qf, nthreads);
    dfa__gather_heads(kr, DFA_F32, dout, d->batch, Sq, H, D, dof, nthreads);
    dfa__gather_heads(kr, DFA_F32, k, d->batch, Sk, Hkv, D, kf, nthreads);
    dfa__gather_heads(kr, DFA_F32, v, d->batch, Sk, Hkv, D, vf, nthreads);
    memset(part, 0, sizeof(float) * (size_t)nseg * nq);
    for (int64_t r = 0; r < (int64_t)d->batch * Sq * H; r++) { /* (b, i, h) */
        const int64_t h = r % H, bi = r / H, b = bi / Sq, i = bi % Sq;
        kr->rowdot(1, D, dout + r * D, D, o + r * D, D, &dsum[(b * H + h) * Sq + i]);
    }
    const int per_seg = (nkb + nseg - 1) / nseg;
    const int64_t ntasks = (int64_t)d->batch * Hkv * nseg;
#pragma omp parallel num_threads(nthreads)
    {
        float *w = dfa__alloc_floats((size_t)BC * D * 4 + 2 * (size_t)BR * BC + BR);
        float *kt = w, *vt = kt + (size_t)BC * D, *dkt = vt + (size_t)BC * D, *dvt = dkt + (size_t)BC * D;
        float *p = dvt + (size_t)BC * D, *ds = p + (size_t)BR * BC, *bias = ds + (size_t)BR * BC;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntasks; task++) {
            const int seg = (int)(flags & 1 ? task % nseg : task / ((int64_t)d->batch * Hkv));
            const int bg = (int)(flags & 1 ? task / nseg : task % ((int64_t)d->batch * Hkv));
            const int b = bg / Hkv, g = bg % Hkv;
            float *dqp = part + (size_t)seg * nq;
            const int kb_end = (seg + 1) * per_seg < nkb ? (seg + 1) * per_seg : nkb;
            for (int kb = seg * per_seg; kb < kb_end; kb++) {
                const int j0 = kb * BC, cols = Sk - j0 < BC ? Sk - j0 : BC;
                const float *kh = kf + (((int64_t)b * Hkv + g) * Sk + j0) * D, *vh = vf + (((int64_t)b * Hkv + g) * Sk + j0) * D;
                kr->transpose(cols, D, kh, D, kt, BC);
                kr->transpose(cols, D, vh, D, vt, BC);
                memset(dkt, 0, sizeof(float) * (size_t)cols * D);
                memset(dvt, 0, sizeof(float) * (size_t)cols * D);
                int64_t first = d->causal ? d->k_start + j0 - d->q_start : 0;
                if (first < 0) first = 0;
                for (int hh = 0; hh < group; hh++) {
                    const int h = g * group + hh;
                    for (int64_t i0 = first / BR * BR; i0 < Sq; i0 += BR) {
                        const int rows = Sq - i0 < BR ? Sq - (int)i0 : BR;
                        const int64_t row0 = ((int64_t)b * H + h) * Sq + i0;
                        const float *qt = qf + row0 * D, *dot = dof + row0 * D;
                        if (flags & 2 && i0 + BR < Sq) {
                            const size_t nxt = (size_t)(Sq - i0 - BR < BR ? Sq - i0 - BR : BR) * D;
                            prefetch_l2(qt + (size_t)BR * D, nxt);
                            prefetch_l2(dot + (size_t)BR * D, nxt);
                        }
                        for (int r = 0; r < rows; r++) bias[r] = lse[row0 + r] == -INFINITY ? INFINITY : lse[row0 + r] * LOG2E;
                        const int delta = d->causal ? dfa__tile_delta(d->q_start + i0, d->k_start + j0, cols) : DFA__NO_MASK;
                        kr->gemm_nn(rows, cols, D, qt, D, kt, BC, p, BC);
                        kr->exp2_rows(p, BC, rows, cols, c, bias, delta);
                        kr->gemm_nn(rows, cols, D, dot, D, vt, BC, ds, BC);
                        kr->gemm_tn_acc(cols, D, rows, p, BC, dot, D, dvt, D);
                        kr->dsoftmax_rows(ds, p, BC, rows, cols, dsum + row0);
                        kr->gemm_tn_acc(cols, D, rows, ds, BC, qt, D, dkt, D);
                        kr->gemm_nn_acc(rows, D, cols, ds, BC, kh, D, dqp + row0 * D, D);
                    }
                }
                for (int j = 0; j < cols; j++)
                    for (int cc = 0; cc < D; cc++) {
                        const int64_t at = (((int64_t)b * Sk + j0 + j) * Hkv + g) * D + cc;
                        dk[at] = dkt[(size_t)j * D + cc] * scale;
                        dv[at] = dvt[(size_t)j * D + cc];
                    }
            }
        }
        free(w);
    }
#pragma omp parallel for num_threads(nthreads)
    for (int64_t r = 0; r < (int64_t)d->batch * Sq * H; r++) {
        const int64_t h = r % H, bi = r / H, b = bi / Sq, i = bi % Sq, src = ((b * H + h) * Sq + i) * D;
        for (int cc = 0; cc < D; cc++) {
            float s = part[src + cc];
            for (int sg = 1; sg < nseg; sg++) s += part[(size_t)sg * nq + src + cc];
            dq[r * D + cc] = s * scale;
        }
    }
    free(mem);
}

static void bwd_rows(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                     const float *k, const float *v, const float *o, const float *lse, const float *dout,
                     float *dq, float *dk, float *dv, int nthreads) {
    bwd_rows_f(d, kr, t, q, k, v, o, lse, dout, dq, dk, dv, nthreads, 0);
}
static void bwd_rows_hm(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                        const float *k, const float *v, const float *o, const float *lse, const float *dout,
                        float *dq, float *dk, float *dv, int nthreads) {
    bwd_rows_f(d, kr, t, q, k, v, o, lse, dout, dq, dk, dv, nthreads, 1);
}
static void bwd_rows_hm_pf(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                           const float *k, const float *v, const float *o, const float *lse, const float *dout,
                           float *dq, float *dk, float *dv, int nthreads) {
    bwd_rows_f(d, kr, t, q, k, v, o, lse, dout, dq, dk, dv, nthreads, 3);
}

static void bwd_lib(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                    const float *k, const float *v, const float *o, const float *lse, const float *dout,
                    float *dq, float *dk, float *dv, int nthreads) {
    (void)kr, (void)t;
    dfa_set_num_threads(nthreads);
    dfa_attn_bwd(d, q, k, v, o, lse, dout, dq, dk, dv);
}

const lab_bwd_variant lab_bwd_variants[] = {
    {"lib", "dfa_attn_bwd as built", bwd_lib, {0, 0}},
    {"rows", "row-major pairs, K^T/V^T packed per key tile, dq partials per segment", bwd_rows, {48, 64}},
    {"rows-96x64", "rows with 96 x 64 tiles", bwd_rows, {96, 64}},
    {"rows-48x96", "rows with 48 x 96 tiles", bwd_rows, {48, 96}},
    {"rows-64x128", "rows with 64 x 128 tiles", bwd_rows, {64, 128}},
    {"rows-hm", "rows, tasks head by head", bwd_rows_hm, {48, 64}},
    {"rows-hm-64x128", "rows-hm with 64 x 128 tiles", bwd_rows_hm, {64, 128}},
    {"rows-hm-pf", "rows-hm with software prefetch of the next q, dout tiles", bwd_rows_hm_pf, {48, 64}},
    {"rows-hm-pf-64x128", "rows-hm-pf with 64 x 128 tiles", bwd_rows_hm_pf, {64, 128}},
    {"rows-hm-pf-96x128", "rows-hm-pf with 96 x 128 tiles", bwd_rows_hm_pf, {96, 128}},
};
const int lab_bwd_count = sizeof lab_bwd_variants / sizeof lab_bwd_variants[0];
