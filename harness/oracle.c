#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

/* The mask, written out as distflash.h states it (causal, documents, window). */
static int visible(const dfa_attn_desc *d, int b, int i, int j) {
    const int64_t pi = d->q_start + i, pj = d->k_start + j;
    if (d->causal && pj > pi) return 0;
    if (d->q_doc && d->q_doc[(int64_t)b * d->seqlen_q + i] != d->k_doc[(int64_t)b * d->seqlen_k + j]) return 0;
    if (d->flags & DFA_FLAG_WINDOW) {
        if (d->window_left >= 0 && pi - pj > d->window_left) return 0;
        if (d->window_right >= 0 && pj - pi > d->window_right) return 0;
    }
    return 1;
}

static double scale_of(const dfa_attn_desc *d) {
    return d->softmax_scale > 0 ? (double)d->softmax_scale : 1.0 / sqrt((double)d->head_dim);
}

static int64_t qi(const dfa_attn_desc *d, int b, int i, int h) {
    return (((int64_t)b * d->seqlen_q + i) * d->num_heads + h) * d->head_dim;
}
static int64_t ki(const dfa_attn_desc *d, int b, int j, int g) {
    return (((int64_t)b * d->seqlen_k + j) * d->num_kv_heads + g) * d->head_dim;
}

void oracle_fwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, double *o,
                double *lse) {
    const int D = d->head_dim, group = d->num_heads / d->num_kv_heads;
    const double scale = scale_of(d);
    double *s = malloc(sizeof(double) * (size_t)d->seqlen_k);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const int g = h / group;
                const double *qr = q + qi(d, b, i, h);
                double *orow = o + qi(d, b, i, h);
                double mx = -INFINITY;
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (!visible(d, b, i, j)) continue;
                    double dot = 0;
                    for (int c = 0; c < D; c++) dot += qr[c] * k[ki(d, b, j, g) + c];
                    s[j] = scale * dot;
                    if (s[j] > mx) mx = s[j];
                }
                for (int c = 0; c < D; c++) orow[c] = 0;
                double l = 0;
                if (mx > -INFINITY)
                    for (int j = 0; j < d->seqlen_k; j++) {
                        if (!visible(d, b, i, j)) continue;
                        double p = exp(s[j] - mx);
                        l += p;
                        for (int c = 0; c < D; c++) orow[c] += p * v[ki(d, b, j, g) + c];
                    }
                if (l > 0)
                    for (int c = 0; c < D; c++) orow[c] /= l;
                if (lse) lse[((int64_t)b * d->num_heads + h) * d->seqlen_q + i] = l > 0 ? mx + log(l) : -INFINITY;
            }
    free(s);
}

void oracle_bwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, const double *dout,
                double *dq, double *dk, double *dv) {
    const int D = d->head_dim, group = d->num_heads / d->num_kv_heads;
    const double scale = scale_of(d);
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    double *o = malloc(sizeof(double) * (size_t)nq);
    double *lse = malloc(sizeof(double) * (size_t)d->batch * d->num_heads * d->seqlen_q);
    oracle_fwd(d, q, k, v, o, lse);
    memset(dq, 0, sizeof(double) * (size_t)nq);
    memset(dk, 0, sizeof(double) * (size_t)nk);
    memset(dv, 0, sizeof(double) * (size_t)nk);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const int g = h / group;
                const double L = lse[((int64_t)b * d->num_heads + h) * d->seqlen_q + i];
                if (L == -INFINITY) continue;
                const double *qr = q + qi(d, b, i, h), *dor = dout + qi(d, b, i, h), *orow = o + qi(d, b, i, h);
                double Di = 0;
                for (int c = 0; c < D; c++) Di += dor[c] * orow[c];
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (!visible(d, b, i, j)) continue;
                    const double *kr = k + ki(d, b, j, g), *vr = v + ki(d, b, j, g);
                    double dot = 0, dp = 0;
                    for (int c = 0; c < D; c++) {
                        dot += qr[c] * kr[c];
                        dp += dor[c] * vr[c];
                    }
                    const double p = exp(scale * dot - L), ds = p * (dp - Di);
                    for (int c = 0; c < D; c++) {
                        dq[qi(d, b, i, h) + c] += scale * ds * kr[c];
                        dk[ki(d, b, j, g) + c] += scale * ds * qr[c];
                        dv[ki(d, b, j, g) + c] += p * dor[c];
                    }
                }
            }
    free(o);
    free(lse);
}

/* Value of x after a round trip through the storage type. */
static float through(dfa_dtype t, float x) {
    if (t == DFA_F32) return x;
    uint16_t h;
    tl_set(t, &h, 0, x);
    return (float)tl_get(t, &h, 0);
}

static float *to_f32(dfa_dtype t, const void *p, int64_t n) {
    float *r = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) r[i] = (float)tl_get(t, p, i);
    return r;
}

/* Float32 probabilities of one (b, h, i) row over all keys, rounded to the storage type. */
static void lowp_row(const dfa_attn_desc *d, const float *q, const float *k, int b, int h, int i, float *p) {
    const int D = d->head_dim, g = h / (d->num_heads / d->num_kv_heads);
    const float scale = (float)scale_of(d);
    const float *qr = q + qi(d, b, i, h);
    float mx = -INFINITY;
    for (int j = 0; j < d->seqlen_k; j++) {
        if (!visible(d, b, i, j)) { p[j] = -INFINITY; continue; }
        const float *kr = k + ki(d, b, j, g);
        float dot = 0;
        for (int c = 0; c < D; c++) dot += qr[c] * kr[c];
        p[j] = scale * dot;
        if (p[j] > mx) mx = p[j];
    }
    float l = 0;
    for (int j = 0; j < d->seqlen_k; j++) {
        p[j] = mx == -INFINITY ? 0.0f : expf(p[j] - mx);
        l += p[j];
    }
    for (int j = 0; j < d->seqlen_k; j++) p[j] = l > 0 ? through(d->dtype, p[j] / l) : 0.0f;
}

void naive_fwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o) {
    const int D = d->head_dim, group = d->num_heads / d->num_kv_heads;
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    float *fq = to_f32(d->dtype, q, nq), *fk = to_f32(d->dtype, k, nk), *fv = to_f32(d->dtype, v, nk);
    float *p = malloc(sizeof(float) * (size_t)d->seqlen_k), *acc = malloc(sizeof(float) * (size_t)D);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                lowp_row(d, fq, fk, b, h, i, p);
                for (int c = 0; c < D; c++) acc[c] = 0;
                for (int j = 0; j < d->seqlen_k; j++) {
                    const float *vr = fv + ki(d, b, j, h / group);
                    for (int c = 0; c < D; c++) acc[c] += p[j] * vr[c];
                }
                for (int c = 0; c < D; c++) tl_set(d->dtype, o, qi(d, b, i, h) + c, acc[c]);
            }
    free(fq); free(fk); free(fv); free(p); free(acc);
}

void naive_bwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *dout,
                    void *dq, void *dk, void *dv) {
    const int D = d->head_dim, group = d->num_heads / d->num_kv_heads;
    const float scale = (float)scale_of(d);
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    float *fq = to_f32(d->dtype, q, nq), *fk = to_f32(d->dtype, k, nk), *fv = to_f32(d->dtype, v, nk);
    float *fdo = to_f32(d->dtype, dout, nq);
    float *gq = calloc((size_t)nq, sizeof(float)), *gk = calloc((size_t)nk, sizeof(float)),
          *gv = calloc((size_t)nk, sizeof(float));
    float *p = malloc(sizeof(float) * (size_t)d->seqlen_k), *ds = malloc(sizeof(float) * (size_t)d->seqlen_k);
    float *orow = malloc(sizeof(float) * (size_t)D);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const int g = h / group;
                const float *qr = fq + qi(d, b, i, h), *dor = fdo + qi(d, b, i, h);
                lowp_row(d, fq, fk, b, h, i, p);
                for (int c = 0; c < D; c++) orow[c] = 0;
                for (int j = 0; j < d->seqlen_k; j++)
                    for (int c = 0; c < D; c++) orow[c] += p[j] * fv[ki(d, b, j, g) + c];
                float Di = 0; /* with o as the forward would have stored it */
                for (int c = 0; c < D; c++) Di += through(d->dtype, orow[c]) * dor[c];
                for (int j = 0; j < d->seqlen_k; j++) {
                    const float *vr = fv + ki(d, b, j, g);
                    float s = 0;
                    for (int c = 0; c < D; c++) s += dor[c] * vr[c];
                    ds[j] = through(d->dtype, p[j] * (s - Di));
                }
                float *gqr = gq + qi(d, b, i, h);
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (p[j] == 0 && ds[j] == 0) continue;
                    const float *kr = fk + ki(d, b, j, g);
                    float *gkr = gk + ki(d, b, j, g), *gvr = gv + ki(d, b, j, g);
                    for (int c = 0; c < D; c++) {
                        gqr[c] += scale * ds[j] * kr[c];
                        gkr[c] += scale * ds[j] * qr[c];
                        gvr[c] += p[j] * dor[c];
                    }
                }
            }
    for (int64_t x = 0; x < nq; x++) tl_set(d->dtype, dq, x, gq[x]);
    for (int64_t x = 0; x < nk; x++) {
        tl_set(d->dtype, dk, x, gk[x]);
        tl_set(d->dtype, dv, x, gv[x]);
    }
    free(fq); free(fk); free(fv); free(fdo); free(gq); free(gk); free(gv); free(p); free(ds); free(orow);
}
