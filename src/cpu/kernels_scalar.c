/* Portable C tile kernels: the fallback on any processor and the reference
   the SIMD tables are tested against. */
#include <math.h>

#include "kernels.h"

static void gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                    int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += A[(long)i * lda + k] * B[(long)j * ldb + k];
            C[(long)i * ldc + j] = s;
        }
}

static void gemm_nn_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc) {
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const float a = A[(long)i * lda + k];
            for (int j = 0; j < N; j++) C[(long)i * ldc + j] += a * B[(long)k * ldb + j];
        }
}

static void gemm_tn_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc) {
    for (int k = 0; k < K; k++)
        for (int i = 0; i < M; i++) {
            const float a = A[(long)k * lda + i];
            for (int j = 0; j < N; j++) C[(long)i * ldc + j] += a * B[(long)k * ldb + j];
        }
}

static float exp2_affine_sum(float *x, int n, float a, float b) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = exp2f(x[i] * a - b);
        s += x[i];
    }
    return s;
}

static const dfa__cpu_kernels table = {"scalar", gemm_nt, gemm_nn_acc, gemm_tn_acc, exp2_affine_sum};

const dfa__cpu_kernels *dfa__cpu_kernels_scalar(void) { return &table; }
