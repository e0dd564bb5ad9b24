/* Internal: the tile-level building blocks of the CPU attention passes.
 *
 * Every pass (forward, backward, merge) is written once in plain C over these
 * few operations on small float32 tiles; each instruction set (AVX-512, AVX2,
 * portable C) supplies its own table, picked once at run time from what the
 * processor supports. All matrices are row-major with explicit row strides
 * (in elements). Sizes may be any value >= 0 (odd sizes are handled by
 * masked tails); K = 0 gives C = 0 (or leaves C for the _acc forms).
 * A given table produces the same bits for the same inputs (no thread- or
 * timing-dependent reductions), which keeps every pass deterministic.
 * Tables differ from each other by rounding only (summation order, FMA,
 * a polynomial exp2 accurate to a few ulp).
 */
#ifndef DFA_CPU_KERNELS_H
#define DFA_CPU_KERNELS_H

#include <stdint.h>

#include "distflash.h"

/* Causal mask of a score tile: element (query row i, key column j) of the tile
   is visible iff j - i <= delta. DFA__NO_MASK means every element is visible. */
#define DFA__NO_MASK 0x3fffffff

typedef struct {
    const char *name; /* "avx512", "avx2", "scalar" */

    /* C[M][N] = A[M][K] . B[N][K]^T */
    void (*gemm_nt)(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                    int ldc);
    /* C[M][N] += A[M][K] . B[K][N] */
    void (*gemm_nn_acc)(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc);
    /* C[M][N] += A[K][M]^T . B[K][N] */
    void (*gemm_tn_acc)(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc);
    /* x[i] = exp2(x[i] * a - b) for i < n; returns the sum of the results.
       exp2 of -inf is 0; callers never pass NaN. */
    float (*exp2_affine_sum)(float *x, int n, float a, float b);

    /* C[M][N] = A[M][K] . B[K][N] */
    void (*gemm_nn)(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                    int ldc);

    /* One online-softmax step of the forward pass on a transposed score tile:
       st[j][i] (row j = key, column i = query; `keys` rows, `n` columns, row
       stride ld) holds raw scores q_i . k_j. For every column i, with the
       running max m[i] (base-2 units, -inf before any key) and sum l[i]:
         m' = max(m, max_j visible scale_log2 * st[j][i]),
         st[j][i] = visible ? exp2(scale_log2 * st[j][i] - m') : 0,
         alpha[i] = exp2(m - m'),  l' = alpha * l + sum_j st[j][i].
       Visibility: j - i <= delta. A column with nothing visible so far keeps
       m = -inf, l = 0, alpha = 0. */
    void (*softmax_cols)(float *st, int ld, int keys, int n, float scale_log2, int delta, float *m,
                         float *l, float *alpha);

    /* Backward probabilities, row-major: s[i][j] (rows x cols, stride ld) becomes
       visible ? exp2(scale_log2 * s[i][j] - bias[i]) : 0 (visibility j - i <= delta).
       bias[i] = +inf gives a row of zeros. */
    void (*exp2_rows)(float *s, int ld, int rows, int cols, float scale_log2, const float *bias, int delta);

    /* dS = P * (dP - dsum[i]), in place over dp: dp[i][j] = p[i][j] * (dp[i][j] - dsum[i]). */
    void (*dsoftmax_rows)(float *dp, const float *p, int ld, int rows, int cols, const float *dsum);

    /* Logit softcapping of a tile (row stride ld): s[i][j] = c * tanh(a * s[i][j]) for
       i < rows, j < cols, and with dt != NULL (same stride) dt[i][j] = 1 - tanh^2(a * s[i][j]),
       the derivative of the capped logit by the uncapped one. NaN stays NaN. */
    void (*softcap_rows)(float *s, float *dt, int ld, int rows, int cols, float a, float c);

    /* x[i][j] *= y[i][j] for i < rows, j < cols (both with row stride ld). */
    void (*mul_rows)(float *x, const float *y, int ld, int rows, int cols);

    /* x[i][j] *= s[i] for i < rows, j < cols. */
    void (*scale_rows)(float *x, int ld, int rows, int cols, const float *s);

    /* out[i] = sum_k a[i][k] * b[i][k] for i < rows, k < n, accumulated in k order exactly
       as one element of this table's GEMMs is (so that D_i = dO_i . O_i and dP_ij = dO_i . V_j
       agree to the bit when O_i equals V_j, as it does for a row that sees one key). */
    void (*rowdot)(int rows, int n, const float *a, int lda, const float *b, int ldb, float *out);

    /* dst[j][i] = src[i][j] for i < rows, j < cols (dst row stride ldd). */
    void (*transpose)(int rows, int cols, const float *src, int lds, float *dst, int ldd);

    /* n values of storage type t to float32 and back, with exactly the bits of
       dfa__load_f32 / dfa__store_f32 (src/common/dtype.h: round to nearest even,
       NaN stays NaN). */
    void (*load_f32)(dfa_dtype t, const void *src, float *dst, int64_t n);
    void (*store_f32)(dfa_dtype t, const float *src, void *dst, int64_t n);
} dfa__cpu_kernels;

/* The table for this processor (honours DFA_CPU_ISA). Never NULL. */
const dfa__cpu_kernels *dfa__cpu_kernels_get(void);

/* Tables compiled into this build; NULL where the compiler could not target the ISA
   (a non-NULL table may still need a processor feature: see dfa__cpu_kernels_usable). */
const dfa__cpu_kernels *dfa__cpu_kernels_scalar(void);
const dfa__cpu_kernels *dfa__cpu_kernels_avx2(void);
const dfa__cpu_kernels *dfa__cpu_kernels_avx512(void);

/* True when this processor can run table t (compiled in and its features present). */
int dfa__cpu_kernels_usable(const dfa__cpu_kernels *t);

#endif
