/* AdamW, gradient clipping and the learning-rate schedule. Every loop runs serially in
 * index order and the per-element arithmetic is done in double and rounded once, so the
 * result depends only on the inputs: every rank and every resumed run gets the same bits. */
#include "train/optim.h"

#include <math.h>

float dft_lr_at(const dft_lr_schedule *s, int step) {
    if (step < 0) step = 0; /* a negative step would give a negative warm-up rate */
    if (step < s->warmup_steps) return (float)((double)s->lr_max * (double)(step + 1) / (double)s->warmup_steps);
    double span = (double)s->total_steps - (double)s->warmup_steps;
    /* total <= warmup: there is no decay phase left, so the schedule sits at the floor */
    double progress = span > 0 ? ((double)step - (double)s->warmup_steps) / span : 1.0;
    if (progress < 0) progress = 0;
    if (progress > 1) progress = 1;
    const double pi = 3.14159265358979323846;
    return (float)((double)s->lr_min + ((double)s->lr_max - (double)s->lr_min) * (1.0 + cos(pi * progress)) / 2.0);
}

void dft_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const dft_adamw *h, float lr,
                       long t, int decay) {
    const double b1 = h->beta1, b2 = h->beta2, eps = h->eps;
    /* The corrections are computed once per call; t < 1 is a caller bug, treat it as 1 rather
       than divide by zero. */
    const double tt = t < 1 ? 1.0 : (double)t;
    const double c1 = 1.0 - pow(b1, tt), c2 = 1.0 - pow(b2, tt);
    const double wd = decay ? (double)h->weight_decay : 0.0;
    const double rate = lr;
    for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        double mi = b1 * (double)m[i] + (1.0 - b1) * gi;
        double vi = b2 * (double)v[i] + (1.0 - b2) * gi * gi;
        m[i] = (float)mi;
        v[i] = (float)vi;
        /* the update uses the rounded moments, so a run resumed from saved m and v
           continues exactly as an uninterrupted one */
        double mhat = (double)m[i] / c1, vhat = (double)v[i] / c2;
        double p_old = p[i];
        p[i] = (float)(p_old - rate * (mhat / (sqrt(vhat) + eps) + wd * p_old));
    }
}

double dft_sum_squares(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

float dft_clip_factor(double sumsq, float max_norm) {
    if (max_norm <= 0 || sumsq == 0) return 1.0f;
    /* A NaN norm passes through as NaN: clipping must not hide a poisoned gradient. */
    if (isnan(sumsq)) return (float)sumsq;
    double norm = sqrt(sumsq);
    if (norm <= (double)max_norm) return 1.0f;
    return (float)((double)max_norm / norm);
}

void dft_scale(float *g, size_t n, float s) {
    for (size_t i = 0; i < n; i++) g[i] *= s;
}
