/* The optimiser: AdamW with decoupled weight decay, global-norm gradient clipping and a
 * linear warm-up + cosine learning-rate schedule. Plain serial loops in a fixed order,
 * so the same inputs give the same bits on every rank and every run. */
#ifndef DFT_TRAIN_OPTIM_H
#define DFT_TRAIN_OPTIM_H

#include <stddef.h>

typedef struct {
    float lr_max, lr_min;   /* peak rate and the floor the cosine decays to */
    int warmup_steps;       /* lr rises linearly to lr_max over these steps (0: none) */
    int total_steps;        /* the cosine reaches lr_min at this step */
} dft_lr_schedule;

/* Learning rate for optimiser step `step` (0-based): lr_max * (step + 1) / warmup_steps
   during warm-up, then lr_min + (lr_max - lr_min) * (1 + cos(pi * progress)) / 2 with
   progress = (step - warmup) / (total - warmup) clamped to [0, 1]. */
float dft_lr_at(const dft_lr_schedule *s, int step);

typedef struct {
    float beta1, beta2, eps, weight_decay;
} dft_adamw;

/* One AdamW update of n parameters; t is the 1-based update count (bias correction);
   decay = 0 skips weight decay (norm gains). p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p). */
void dft_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const dft_adamw *h, float lr,
                       long t, int decay);

/* Sum of squares in double, in index order. */
double dft_sum_squares(const float *g, size_t n);

/* The factor that clips a gradient of total squared norm sumsq to max_norm:
   min(1, max_norm / sqrt(sumsq)); 1 when max_norm <= 0 (no clipping) or sumsq == 0. */
float dft_clip_factor(double sumsq, float max_norm);

void dft_scale(float *g, size_t n, float s);

#endif
