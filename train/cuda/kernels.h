/* The GPU model's own CUDA kernels: everything but the matmuls (cuBLASLt, gemm.h) and the
 * attention (libdistflash). Each function only enqueues work on `s` and returns the launch's
 * status (cudaGetLastError); none synchronises. bf16 tensors are dft_bf16 (the raw 16 bits);
 * the math is float32 (double where a sum must not depend on the launch shape). Sums over
 * rows never use atomics: per-block partials and a second pass in a fixed order, so every
 * call gives the same bits (bitwise resume, every rank the same parameters). */
#ifndef DFT_TRAIN_CUDA_KERNELS_H
#define DFT_TRAIN_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t dft_bf16;

/* x[r] = bf16(wte[tokens[r]]), rows of width d. */
cudaError_t dftk_embed_fwd(dft_bf16 *x, const float *wte, const uint8_t *tokens, long n, int d, cudaStream_t s);
/* dwte[v] += sum over the rows r with token v of dres[r], rows in the order of `rows`: rows[offsets[v]
   .. offsets[v+1]) are the rows holding token v, ascending (a counting sort the host made). */
cudaError_t dftk_embed_bwd(float *dwte, const float *dres, const int *rows, const int *offsets, int d, cudaStream_t s);

/* out = bf16(x * rstd * gain), rstd[r] = 1/sqrt(mean(x_r^2) + eps). d <= 16384. */
cudaError_t dftk_rmsnorm_fwd(dft_bf16 *out, float *rstd, const dft_bf16 *x, const float *gain, long n, int d,
                             float eps, cudaStream_t s);
/* Rows per block of the backward and the partial buffer it needs: dftk_rmsnorm_bwd_blocks(n)
   blocks of d floats. */
int dftk_rmsnorm_bwd_blocks(long n);
/* dx += s g dout - x s^3/d sum(dout g x); dx_bf16 (may be NULL) = bf16 of the new dx;
   dgain += sum over rows of dout x s (through `partial`, dftk_rmsnorm_bwd_blocks(n) x d floats). */
cudaError_t dftk_rmsnorm_bwd(float *dx, dft_bf16 *dx_bf16, float *dgain, float *partial, const float *dout,
                             const dft_bf16 *x, const float *rstd, const float *gain, long n, int d, cudaStream_t s);

/* Rotates x[n = batch*rows, heads, hd] in place ("rotate half") with the tables cos/sin[rows][hd/2]
   (row r of the batch uses table row r % rows); inverse = 1 applies the transposed rotation. */
cudaError_t dftk_rope(dft_bf16 *x, const float *cosv, const float *sinv, long n, int rows, int heads, int hd,
                      int inverse, cudaStream_t s);

/* g = silu(a) * b. */
cudaError_t dftk_swiglu_fwd(dft_bf16 *g, const dft_bf16 *a, const dft_bf16 *b, long n, cudaStream_t s);
/* da = dg b silu'(a), db = dg silu(a); da may be dg or a, db may be b (each element is read before it is written). */
cudaError_t dftk_swiglu_bwd(dft_bf16 *da, dft_bf16 *db, const dft_bf16 *dg, const dft_bf16 *a, const dft_bf16 *b,
                            long n, cudaStream_t s);

/* Cross-entropy over 256 float32 logits per row for `rows` rows: wnll[r] = weight[r] * (lse - l[target]),
   dlogits[r] = bf16(weight[r] * scale * (softmax - onehot)), argmax[r] (may be NULL) = the first highest. */
cudaError_t dftk_cross_entropy(dft_bf16 *dlogits, double *wnll, uint8_t *argmax, const float *logits,
                               const uint8_t *targets, const float *weights, float scale, long rows, cudaStream_t s);

/* *out = sum of x[0..n) (square = 0) or of x^2 (square = 1) in double, in a fixed order
   (through `partial`, DFTK_SUM_BLOCKS doubles). xd: the same over doubles. */
#define DFTK_SUM_BLOCKS 1024
cudaError_t dftk_sum_f32(double *out, const float *x, size_t n, int square, double *partial, cudaStream_t s);
cudaError_t dftk_sum_f64(double *out, const double *x, size_t n, double *partial, cudaStream_t s);

/* *factor = dft_clip_factor(*sumsq, max_norm) (optim.h), on the device. */
cudaError_t dftk_clip_factor(float *factor, const double *sumsq, float max_norm, cudaStream_t s);

/* AdamW as dft_adamw_update (optim.h) on n values, the gradient first scaled by *factor when it is
   not 1 (as dft_scale), and pb = bf16(p) written in the same pass. c1, c2: the bias corrections. */
cudaError_t dftk_adamw(float *p, dft_bf16 *pb, const float *g, float *m, float *v, size_t n, const float *factor,
                       double b1, double b2, double eps, double wd, double lr, double c1, double c2, cudaStream_t s);

/* out = bf16(in). */
cudaError_t dftk_to_bf16(dft_bf16 *out, const float *in, size_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
