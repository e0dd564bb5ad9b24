/* The model's token-local operations, forward and backward, on rows of float32.
 * Each works row by row (n rows of width d), so every rank applies them to its own rows. */
#ifndef DFT_TRAIN_MODEL_OPS_H
#define DFT_TRAIN_MODEL_OPS_H

#include <stdint.h>

/* out = x / sqrt(mean(x^2) + eps) * gain; rstd[r] keeps 1/sqrt(mean + eps) for the backward. */
void dft_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *gain, int n, int d, float eps);
/* dx += d(out)/dx . dout;  dgain += sum over rows of dout * x * rstd. */
void dft_rmsnorm_bwd(float *dx, float *dgain, const float *dout, const float *x, const float *rstd,
                      const float *gain, int n, int d);

/* Rotary tables for `rows` positions: cos/sin[r][i] of pos[r] * base^(-2i/head_dim), i < head_dim/2. */
void dft_rope_tables(float *cosv, float *sinv, const int64_t *pos, int rows, int head_dim, float base);
/* Rotates x[batch, rows, heads, head_dim] in place ("rotate half": pairs i and i + head_dim/2);
   inverse = 1 applies the transposed rotation (the backward). */
void dft_rope(float *x, const float *cosv, const float *sinv, int batch, int rows, int heads, int head_dim,
               int inverse);

/* g = silu(a) * b, elementwise over n values. */
void dft_swiglu_fwd(float *g, const float *a, const float *b, long n);
/* From dg: da = dg * b * silu'(a), db = dg * silu(a) (may overwrite dg: da == dg is allowed). */
void dft_swiglu_bwd(float *da, float *db, const float *dg, const float *a, const float *b, long n);

/* Softmax cross-entropy over `vocab` logits per row, weighted: for each row r,
   nll_r = logsumexp(logits_r) - logits_r[target_r]; returns sum_r weight[r] * nll_r (double).
   Replaces logits in place by their gradient weight[r] * scale * (softmax - onehot).
   argmax (may be NULL) receives each row's highest-scoring token. */
double dft_cross_entropy(float *logits, const uint8_t *targets, const float *weight, float scale, int n,
                          int vocab, uint8_t *argmax);

#endif
