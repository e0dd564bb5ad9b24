#include "train/model/ops.h"

#include <math.h>

void dft_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *gain, int n, int d, float eps) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *xr = x + (long)r * d;
        float *o = out + (long)r * d;
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / d + eps));
        rstd[r] = s;
        for (int i = 0; i < d; i++) o[i] = xr[i] * s * gain[i];
    }
}

void dft_rmsnorm_bwd(float *dx, float *dgain, const float *dout, const float *x, const float *rstd,
                      const float *gain, int n, int d) {
    /* out_i = x_i s g_i with s = (mean(x^2) + eps)^(-1/2):
       dx_j = s g_j dout_j - x_j s^3 / d * sum_i dout_i g_i x_i. */
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; r++) {
        const float *xr = x + (long)r * d, *dr = dout + (long)r * d;
        float *dxr = dx + (long)r * d;
        float s = rstd[r];
        double dot = 0;
        for (int i = 0; i < d; i++) dot += (double)dr[i] * gain[i] * xr[i];
        float c = (float)(dot * s * s * s / d);
        for (int i = 0; i < d; i++) dxr[i] += s * gain[i] * dr[i] - xr[i] * c;
    }
    /* The gain gradient sums over rows: one pass per column, rows in order (deterministic). */
    for (int r = 0; r < n; r++) {
        const float *xr = x + (long)r * d, *dr = dout + (long)r * d;
        float s = rstd[r];
        for (int i = 0; i < d; i++) dgain[i] += dr[i] * xr[i] * s;
    }
}

void dft_rope_tables(float *cosv, float *sinv, const int64_t *pos, int rows, int head_dim, float base) {
    int half = head_dim / 2;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < half; i++) {
            /* angles in double: positions reach millions, where float32 angles lose the phase */
            double angle = (double)pos[r] * pow((double)base, -2.0 * i / head_dim);
            cosv[(long)r * half + i] = (float)cos(angle);
            sinv[(long)r * half + i] = (float)sin(angle);
        }
}

void dft_rope(float *x, const float *cosv, const float *sinv, int batch, int rows, int heads, int head_dim,
               int inverse) {
    int half = head_dim / 2;
    float sign = inverse ? -1.0f : 1.0f;
    long n = (long)batch * rows;
#pragma omp parallel for schedule(static)
    for (long br = 0; br < n; br++) {
        long r = br % rows;
        const float *c = cosv + r * half, *s = sinv + r * half;
        for (int h = 0; h < heads; h++) {
            float *v = x + (br * heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                float x1 = v[i], x2 = v[i + half], si = sign * s[i];
                v[i] = x1 * c[i] - x2 * si;
                v[i + half] = x2 * c[i] + x1 * si;
            }
        }
    }
}

static inline float sigmoidf(float a) { return 1.0f / (1.0f + expf(-a)); }

void dft_swiglu_fwd(float *g, const float *a, const float *b, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) g[i] = a[i] * sigmoidf(a[i]) * b[i];
}

void dft_swiglu_bwd(float *da, float *db, const float *dg, const float *a, const float *b, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float sg = sigmoidf(a[i]), silu = a[i] * sg, d = dg[i];
        db[i] = d * silu;
        da[i] = d * b[i] * (sg + silu * (1.0f - sg)); /* silu'(a) = s + a s (1 - s) */
    }
}

double dft_cross_entropy(float *logits, const uint8_t *targets, const float *weight, float scale, int n,
                          int vocab, uint8_t *argmax) {
    double total = 0; /* serial: the loss must not depend on the thread count */
    for (int r = 0; r < n; r++) {
        float *l = logits + (long)r * vocab;
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (l[i] > l[best]) best = i;
        if (argmax) argmax[r] = (uint8_t)best;
        double sum = 0;
        for (int i = 0; i < vocab; i++) sum += exp((double)l[i] - l[best]);
        double lse = l[best] + log(sum);
        total += (double)weight[r] * (lse - l[targets[r]]);
        float w = weight[r] * scale;
        for (int i = 0; i < vocab; i++) l[i] = w * (float)exp((double)l[i] - lse);
        l[targets[r]] -= w;
    }
    return total;
}
