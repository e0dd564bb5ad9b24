/* Internal: the tile-level building blocks of the CPU attention passes.
 *
 * Every pass (forward, backward, merge) is written once in plain C over these
 * few operations on small float32 tiles; each instruction set (AVX-512, AVX2,
 * portable C) supplies its own table, picked once at run time from what the
 * processor supports. All matrices are row-major with explicit row strides.
 * A given table produces the same bits for the same inputs (no thread- or
 * timing-dependent reductions), which keeps every pass deterministic.
 */
#ifndef DFA_CPU_KERNELS_H
#define DFA_CPU_KERNELS_H

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
} dfa__cpu_kernels;

/* The table for this processor (honours DFA_CPU_ISA). Never NULL. */
const dfa__cpu_kernels *dfa__cpu_kernels_get(void);

/* Tables compiled into this build; NULL where the compiler could not target the ISA. */
const dfa__cpu_kernels *dfa__cpu_kernels_scalar(void);
const dfa__cpu_kernels *dfa__cpu_kernels_avx2(void);
const dfa__cpu_kernels *dfa__cpu_kernels_avx512(void);

#endif
