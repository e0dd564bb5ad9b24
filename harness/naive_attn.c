#include "naive_attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "cpu/kernels.h"

#define LOG2E 1.4426950408889634f

static float scale_of(const dfa_attn_desc *d) {
    return d->softmax_scale > 0 ? d->softmax_scale : 1.0f / sqrtf((float)d->head_dim);
}
static double score_bytes(const dfa_attn_desc *d) {
    return 4.0 * d->batch * d->num_heads * (double)d->seqlen_q * d->seqlen_k;
}
static double q_f32_bytes(const dfa_attn_desc *d) { return 4.0 * d->batch * d->seqlen_q * d->num_heads * d->head_dim; }
static double k_f32_bytes(const dfa_attn_desc *d) { return 4.0 * d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim; }

double naive_fwd_bytes(const dfa_attn_desc *d) {
    return score_bytes(d) + (d->dtype == DFA_F32 ? 0 : 2 * q_f32_bytes(d) + 2 * k_f32_bytes(d));
}
double naive_bwd_bytes(const dfa_attn_desc *d) {
    return 2 * score_bytes(d) + (d->dtype == DFA_F32 ? 0 : 4 * q_f32_bytes(d) + 4 * k_f32_bytes(d));
}

/* A float32 view of a tensor: the tensor itself, or a converted copy (*owned). */
static float *f32_view(dfa_dtype t, const void *p, size_t n, float **owned) {
    *owned = NULL;
    if (t == DFA_F32) return (float *)p;
    float *f = malloc(sizeof(float) * n);
    if (f) dfa__load_f32(t, p, f, (int64_t)n);
    *owned = f;
    return f;
}

/* P for head (b, h): scores, causal mask, softmax; lse per row if wanted. */
static void probs(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, const float *q, const float *k, int b, int h,
                  float *p, float *lse) {
    const int D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads, Sq = d->seqlen_q, Sk = d->seqlen_k;
    const int g = h / (H / Hkv);
    const float c = scale_of(d) * LOG2E;
    kr->gemm_nt(Sq, Sk, D, q + ((size_t)b * Sq * H + h) * D, H * D, k + ((size_t)b * Sk * Hkv + g) * D, Hkv * D, p,
                Sk);
    for (int i = 0; i < Sq; i++) {
        float *row = p + (size_t)i * Sk;
        int n = Sk;
        if (d->causal) {
            const int64_t vis = d->q_start + i - d->k_start + 1;
            n = vis < 0 ? 0 : vis > Sk ? Sk : (int)vis;
        }
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        const float sum = n ? kr->exp2_affine_sum(row, n, c, mx * c) : 0.0f;
        const float inv = sum > 0 ? 1.0f / sum : 0.0f;
        for (int j = 0; j < n; j++) row[j] *= inv;
        memset(row + n, 0, sizeof(float) * (size_t)(Sk - n));
        if (lse) lse[((size_t)b * H + h) * Sq + i] = n ? (mx * c + log2f(sum)) / LOG2E : -INFINITY;
    }
}

int naive_attn_fwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                   int threads) {
    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    const int D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads, Sq = d->seqlen_q, Sk = d->seqlen_k;
    const size_t nq = (size_t)d->batch * Sq * H * D, nk = (size_t)d->batch * Sk * Hkv * D;
    const size_t per_head = (size_t)Sq * Sk;
    float *s = malloc(sizeof(float) * per_head * (size_t)d->batch * H); /* the whole score matrix */
    float *oq, *ok, *ov, *oo = NULL;
    const float *fq = f32_view(d->dtype, q, nq, &oq), *fk = f32_view(d->dtype, k, nk, &ok),
                *fv = f32_view(d->dtype, v, nk, &ov);
    float *fo = d->dtype == DFA_F32 ? (float *)o : (oo = malloc(sizeof(float) * nq));
    int status = 0;
    if (!s || !fq || !fk || !fv || !fo) {
        status = -1;
        goto done;
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int bh = 0; bh < d->batch * H; bh++) {
        const int b = bh / H, h = bh % H, g = h / (H / Hkv);
        float *p = s + per_head * (size_t)bh;
        probs(d, kr, fq, fk, b, h, p, lse);
        kr->gemm_nn(Sq, D, Sk, p, Sk, fv + ((size_t)b * Sk * Hkv + g) * D, Hkv * D, fo + ((size_t)b * Sq * H + h) * D,
                    H * D);
    }
    if (fo != o) dfa__store_f32(d->dtype, fo, o, (int64_t)nq);
done:
    free(s), free(oq), free(ok), free(ov), free(oo);
    return status;
}

int naive_attn_bwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                   const float *lse, const void *dout, void *dq, void *dk, void *dv, int threads) {
    (void)lse; /* recomputed with the probabilities, as an unfused backward would have them stored */
    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    const int D = d->head_dim, H = d->num_heads, Hkv = d->num_kv_heads, Sq = d->seqlen_q, Sk = d->seqlen_k;
    const int group = H / Hkv;
    const float scale = scale_of(d);
    const size_t nq = (size_t)d->batch * Sq * H * D, nk = (size_t)d->batch * Sk * Hkv * D;
    const size_t per_head = (size_t)Sq * Sk, all = per_head * (size_t)d->batch * H;
    float *p = malloc(sizeof(float) * all), *dp = malloc(sizeof(float) * all); /* P and dP, all heads */
    float *oq, *ok, *ov, *oo, *odo;
    const float *fq = f32_view(d->dtype, q, nq, &oq), *fk = f32_view(d->dtype, k, nk, &ok),
                *fv = f32_view(d->dtype, v, nk, &ov), *fo = f32_view(d->dtype, o, nq, &oo),
                *fdo = f32_view(d->dtype, dout, nq, &odo);
    const int conv = d->dtype != DFA_F32;
    float *gq = conv ? malloc(sizeof(float) * nq) : dq, *gk = conv ? malloc(sizeof(float) * nk) : dk,
          *gv = conv ? malloc(sizeof(float) * nk) : dv;
    int status = 0;
    if (!p || !dp || !fq || !fk || !fv || !fo || !fdo || !gq || !gk || !gv) {
        status = -1;
        goto done;
    }
    memset(gk, 0, sizeof(float) * nk);
    memset(gv, 0, sizeof(float) * nk);
    /* one task per (batch, kv head): its query heads run in turn, so dk/dv have one writer */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int bg = 0; bg < d->batch * Hkv; bg++) {
        const int b = bg / Hkv, g = bg % Hkv;
        const size_t kofs = ((size_t)b * Sk * Hkv + g) * D;
        float *dsum = malloc(sizeof(float) * (size_t)Sq);
        for (int hh = 0; hh < group; hh++) {
            const int h = g * group + hh;
            const size_t qofs = ((size_t)b * Sq * H + h) * D;
            float *ph = p + per_head * (size_t)(b * H + h), *dph = dp + per_head * (size_t)(b * H + h);
            probs(d, kr, fq, fk, b, h, ph, NULL);
            kr->gemm_nt(Sq, Sk, D, fdo + qofs, H * D, fv + kofs, Hkv * D, dph, Sk); /* dP = dO V^T */
            kr->rowdot(Sq, D, fdo + qofs, H * D, fo + qofs, H * D, dsum);           /* D_i */
            kr->dsoftmax_rows(dph, ph, Sk, Sq, Sk, dsum);                           /* dS */
            kr->gemm_tn_acc(Sk, D, Sq, ph, Sk, fdo + qofs, H * D, gv + kofs, Hkv * D);
            kr->gemm_tn_acc(Sk, D, Sq, dph, Sk, fq + qofs, H * D, gk + kofs, Hkv * D);
            kr->gemm_nn(Sq, D, Sk, dph, Sk, fk + kofs, Hkv * D, gq + qofs, H * D);
            for (int i = 0; i < Sq; i++)
                for (int c = 0; c < D; c++) gq[qofs + (size_t)i * H * D + c] *= scale;
        }
        for (int j = 0; j < Sk; j++)
            for (int c = 0; c < D; c++) gk[kofs + (size_t)j * Hkv * D + c] *= scale;
        free(dsum);
    }
    if (conv) {
        dfa__store_f32(d->dtype, gq, dq, (int64_t)nq);
        dfa__store_f32(d->dtype, gk, dk, (int64_t)nk);
        dfa__store_f32(d->dtype, gv, dv, (int64_t)nk);
    }
done:
    free(p), free(dp), free(oq), free(ok), free(ov), free(oo), free(odo);
    if (conv) free(gq), free(gk), free(gv);
    return status;
}
