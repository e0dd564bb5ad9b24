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

static int dv_of(const dfa_attn_desc *d) { return d->head_dim_v > 0 ? d->head_dim_v : d->head_dim; }

/* Element offsets of row (b, i or j, head) in q/dq, o/dout, k/dk and v/dv. */
static int64_t qi(const dfa_attn_desc *d, int b, int i, int h) {
    return (((int64_t)b * d->seqlen_q + i) * d->num_heads + h) * d->head_dim;
}
static int64_t oi(const dfa_attn_desc *d, int b, int i, int h) {
    return (((int64_t)b * d->seqlen_q + i) * d->num_heads + h) * dv_of(d);
}
static int64_t ki(const dfa_attn_desc *d, int b, int j, int g) {
    return (((int64_t)b * d->seqlen_k + j) * d->num_kv_heads + g) * d->head_dim;
}
static int64_t vi(const dfa_attn_desc *d, int b, int j, int g) {
    return (((int64_t)b * d->seqlen_k + j) * d->num_kv_heads + g) * dv_of(d);
}

/* The logit of a score q.k as distflash.h writes it: scale, then the softcap. *dcap gets the
   softcap's derivative (1 without one). */
static double logit(const dfa_attn_desc *d, double dot, double *dcap) {
    const double s = scale_of(d) * dot, c = d->softcap;
    if (c <= 0) {
        *dcap = 1;
        return s;
    }
    const double t = tanh(s / c);
    *dcap = 1 - t * t;
    return c * t;
}

/* One row's logits over its visible keys (into s, -inf where masked) and its lse with the
   sink; returns the lse (-inf, or the sink, when the row sees no key). */
static double row_logits(const dfa_attn_desc *d, const double *q, const double *k, int b, int i, int h, double *s,
                         double *dcap) {
    const int D = d->head_dim, g = h / (d->num_heads / d->num_kv_heads);
    const double *qr = q + qi(d, b, i, h);
    double mx = -INFINITY;
    int seen = 0;
    for (int j = 0; j < d->seqlen_k; j++) {
        s[j] = -INFINITY;
        dcap[j] = 0;
        if (!visible(d, b, i, j)) continue;
        double dot = 0;
        for (int c = 0; c < D; c++) dot += qr[c] * k[ki(d, b, j, g) + c];
        s[j] = logit(d, dot, &dcap[j]);
        if (s[j] > mx) mx = s[j];
        seen = 1;
    }
    const double sink = d->sinks ? (double)d->sinks[h] : -INFINITY;
    if (!seen) return sink;
    if (sink > mx) mx = sink;
    double l = d->sinks ? exp(sink - mx) : 0;
    for (int j = 0; j < d->seqlen_k; j++)
        if (s[j] > -INFINITY) l += exp(s[j] - mx);
    return mx + log(l);
}

void oracle_fwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, double *o,
                double *lse) {
    const int Dv = dv_of(d), group = d->num_heads / d->num_kv_heads;
    double *s = malloc(sizeof(double) * (size_t)d->seqlen_k), *dcap = malloc(sizeof(double) * (size_t)d->seqlen_k);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const double L = row_logits(d, q, k, b, i, h, s, dcap);
                double *orow = o + oi(d, b, i, h);
                for (int c = 0; c < Dv; c++) orow[c] = 0;
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double p = exp(s[j] - L);
                    for (int c = 0; c < Dv; c++) orow[c] += p * v[vi(d, b, j, h / group) + c];
                }
                if (lse) lse[((int64_t)b * d->num_heads + h) * d->seqlen_q + i] = L;
            }
    free(s);
    free(dcap);
}

void oracle_bwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, const double *dout,
                double *dq, double *dk, double *dv) {
    oracle_bwd_all(d, q, k, v, dout, dq, dk, dv, NULL);
}

void oracle_bwd_all(const dfa_attn_desc *d, const double *q, const double *k, const double *v, const double *dout,
                    double *dq, double *dk, double *dv, double *dsinks) {
    const int D = d->head_dim, Dv = dv_of(d), group = d->num_heads / d->num_kv_heads;
    const double scale = scale_of(d);
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t no = (int64_t)d->batch * d->seqlen_q * d->num_heads * Dv;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    const int64_t nv = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * Dv;
    double *o = malloc(sizeof(double) * (size_t)no);
    double *lse = malloc(sizeof(double) * (size_t)d->batch * d->num_heads * d->seqlen_q);
    double *s = malloc(sizeof(double) * (size_t)d->seqlen_k), *dcap = malloc(sizeof(double) * (size_t)d->seqlen_k);
    oracle_fwd(d, q, k, v, o, lse);
    memset(dq, 0, sizeof(double) * (size_t)nq);
    memset(dk, 0, sizeof(double) * (size_t)nk);
    memset(dv, 0, sizeof(double) * (size_t)nv);
    if (dsinks)
        for (int h = 0; h < d->num_heads; h++) dsinks[h] = 0;
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const int g = h / group;
                const double L = lse[((int64_t)b * d->num_heads + h) * d->seqlen_q + i];
                if (L == -INFINITY) continue;
                row_logits(d, q, k, b, i, h, s, dcap);
                const double *qr = q + qi(d, b, i, h), *dor = dout + oi(d, b, i, h), *orow = o + oi(d, b, i, h);
                double Di = 0;
                for (int c = 0; c < Dv; c++) Di += dor[c] * orow[c];
                /* the sink's probability exp(sink - L) has dP = 0 (no value): dsink = -p D */
                if (dsinks && d->sinks) dsinks[h] -= exp((double)d->sinks[h] - L) * Di;
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (s[j] == -INFINITY) continue;
                    const double *kr = k + ki(d, b, j, g), *vr = v + vi(d, b, j, g);
                    double dp = 0;
                    for (int c = 0; c < Dv; c++) dp += dor[c] * vr[c];
                    const double p = exp(s[j] - L), ds = p * (dp - Di) * dcap[j]; /* d/d(scale q.k) */
                    for (int c = 0; c < D; c++) {
                        dq[qi(d, b, i, h) + c] += scale * ds * kr[c];
                        dk[ki(d, b, j, g) + c] += scale * ds * qr[c];
                    }
                    for (int c = 0; c < Dv; c++) dv[vi(d, b, j, g) + c] += p * dor[c];
                }
            }
    free(o);
    free(lse);
    free(s);
    free(dcap);
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

/* Float32 probabilities of one (b, h, i) row over all keys, rounded to the storage type, and
   with dcap the softcap's derivative per key (1 without one); returns the row's float32 lse
   (sink included). */
static float lowp_row(const dfa_attn_desc *d, const float *q, const float *k, int b, int i, int h, float *p,
                      float *dcap) {
    const int D = d->head_dim, g = h / (d->num_heads / d->num_kv_heads);
    const float scale = (float)scale_of(d), cap = d->softcap;
    const float *qr = q + qi(d, b, i, h);
    float mx = d->sinks ? d->sinks[h] : -INFINITY;
    for (int j = 0; j < d->seqlen_k; j++) {
        if (dcap) dcap[j] = 1.0f;
        if (!visible(d, b, i, j)) { p[j] = -INFINITY; continue; }
        const float *kr = k + ki(d, b, j, g);
        float dot = 0;
        for (int c = 0; c < D; c++) dot += qr[c] * kr[c];
        p[j] = scale * dot;
        if (cap > 0) {
            const float t = tanhf(p[j] / cap);
            p[j] = cap * t;
            if (dcap) dcap[j] = 1.0f - t * t;
        }
        if (p[j] > mx) mx = p[j];
    }
    float l = d->sinks && mx > -INFINITY ? expf(d->sinks[h] - mx) : 0.0f;
    for (int j = 0; j < d->seqlen_k; j++) {
        p[j] = mx == -INFINITY ? 0.0f : expf(p[j] - mx);
        l += p[j];
    }
    for (int j = 0; j < d->seqlen_k; j++) p[j] = l > 0 ? through(d->dtype, p[j] / l) : 0.0f;
    return l > 0 ? mx + logf(l) : -INFINITY;
}

void naive_fwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o) {
    const int D = d->head_dim, Dv = dv_of(d), group = d->num_heads / d->num_kv_heads;
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    const int64_t nv = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * Dv;
    float *fq = to_f32(d->dtype, q, nq), *fk = to_f32(d->dtype, k, nk), *fv = to_f32(d->dtype, v, nv);
    float *p = malloc(sizeof(float) * (size_t)d->seqlen_k), *acc = malloc(sizeof(float) * (size_t)Dv);
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                lowp_row(d, fq, fk, b, i, h, p, NULL);
                for (int c = 0; c < Dv; c++) acc[c] = 0;
                for (int j = 0; j < d->seqlen_k; j++) {
                    const float *vr = fv + vi(d, b, j, h / group);
                    for (int c = 0; c < Dv; c++) acc[c] += p[j] * vr[c];
                }
                for (int c = 0; c < Dv; c++) tl_set(d->dtype, o, oi(d, b, i, h) + c, acc[c]);
            }
    free(fq); free(fk); free(fv); free(p); free(acc);
}

void naive_bwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *dout,
                    void *dq, void *dk, void *dv) {
    naive_bwd_lowp_all(d, q, k, v, dout, dq, dk, dv, NULL);
}

void naive_bwd_lowp_all(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *dout,
                        void *dq, void *dk, void *dv, float *dsinks) {
    const int D = d->head_dim, Dv = dv_of(d), group = d->num_heads / d->num_kv_heads;
    const float scale = (float)scale_of(d);
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * D;
    const int64_t no = (int64_t)d->batch * d->seqlen_q * d->num_heads * Dv;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * D;
    const int64_t nv = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * Dv;
    float *fq = to_f32(d->dtype, q, nq), *fk = to_f32(d->dtype, k, nk), *fv = to_f32(d->dtype, v, nv);
    float *fdo = to_f32(d->dtype, dout, no);
    float *gq = calloc((size_t)nq, sizeof(float)), *gk = calloc((size_t)nk, sizeof(float)),
          *gv = calloc((size_t)nv, sizeof(float));
    float *p = malloc(sizeof(float) * (size_t)d->seqlen_k), *ds = malloc(sizeof(float) * (size_t)d->seqlen_k);
    float *dcap = malloc(sizeof(float) * (size_t)d->seqlen_k), *orow = malloc(sizeof(float) * (size_t)Dv);
    if (dsinks)
        for (int h = 0; h < d->num_heads; h++) dsinks[h] = 0;
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < d->num_heads; h++)
            for (int i = 0; i < d->seqlen_q; i++) {
                const int g = h / group;
                const float *qr = fq + qi(d, b, i, h), *dor = fdo + oi(d, b, i, h);
                const float L = lowp_row(d, fq, fk, b, i, h, p, dcap);
                for (int c = 0; c < Dv; c++) orow[c] = 0;
                for (int j = 0; j < d->seqlen_k; j++)
                    for (int c = 0; c < Dv; c++) orow[c] += p[j] * fv[vi(d, b, j, g) + c];
                float Di = 0; /* with o as the forward would have stored it */
                for (int c = 0; c < Dv; c++) Di += through(d->dtype, orow[c]) * dor[c];
                if (dsinks && d->sinks && L > -INFINITY) dsinks[h] -= expf(d->sinks[h] - L) * Di;
                for (int j = 0; j < d->seqlen_k; j++) {
                    const float *vr = fv + vi(d, b, j, g);
                    float s = 0;
                    for (int c = 0; c < Dv; c++) s += dor[c] * vr[c];
                    ds[j] = through(d->dtype, p[j] * (s - Di) * dcap[j]);
                }
                float *gqr = gq + qi(d, b, i, h);
                for (int j = 0; j < d->seqlen_k; j++) {
                    if (p[j] == 0 && ds[j] == 0) continue;
                    const float *kr = fk + ki(d, b, j, g);
                    float *gkr = gk + ki(d, b, j, g), *gvr = gv + vi(d, b, j, g);
                    for (int c = 0; c < D; c++) {
                        gqr[c] += scale * ds[j] * kr[c];
                        gkr[c] += scale * ds[j] * qr[c];
                    }
                    for (int c = 0; c < Dv; c++) gvr[c] += p[j] * dor[c];
                }
            }
    for (int64_t x = 0; x < nq; x++) tl_set(d->dtype, dq, x, gq[x]);
    for (int64_t x = 0; x < nk; x++) tl_set(d->dtype, dk, x, gk[x]);
    for (int64_t x = 0; x < nv; x++) tl_set(d->dtype, dv, x, gv[x]);
    free(fq); free(fk); free(fv); free(fdo); free(gq); free(gk); free(gv); free(p); free(ds); free(dcap); free(orow);
}
