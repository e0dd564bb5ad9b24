/* The three products behind a linear layer, written as register-blocked loops that the
 * compiler vectorises; target_clones builds AVX-512, AVX2 and portable copies and the
 * loader picks the best one for this processor. */
#include "model/matmul.h"

#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define DFA_CLONES __attribute__((target_clones("avx512f", "avx2,fma", "default")))
#else
#define DFA_CLONES
#endif

enum { ROWS = 4, COLS = 64 }; /* a 4 x 64 float accumulator block: 16 AVX-512 registers */

/* C[r0:r0+rows, c0:c0+cols] (+)= sum_k A(r, k) * B[k, c], where A(r, k) = A[r*ars + k*aks]:
   one block of rows x cols outputs, accumulated over all of K in registers. */
DFA_CLONES
static void block(float *C, int ldc, const float *A, long ars, long aks, const float *B, int ldb, int K, int rows,
                  int cols, int accumulate) {
    float acc[ROWS][COLS];
    memset(acc, 0, sizeof acc);
    if (rows == ROWS && cols == COLS) {
        for (int k = 0; k < K; k++) {
            const float *b = B + (long)k * ldb;
            float a0 = A[0 * ars + k * aks], a1 = A[1 * ars + k * aks];
            float a2 = A[2 * ars + k * aks], a3 = A[3 * ars + k * aks];
            for (int j = 0; j < COLS; j++) {
                acc[0][j] += a0 * b[j];
                acc[1][j] += a1 * b[j];
                acc[2][j] += a2 * b[j];
                acc[3][j] += a3 * b[j];
            }
        }
    } else {
        for (int k = 0; k < K; k++) {
            const float *b = B + (long)k * ldb;
            for (int r = 0; r < rows; r++) {
                float a = A[r * ars + k * aks];
                for (int j = 0; j < cols; j++) acc[r][j] += a * b[j];
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float *c = C + (long)r * ldc;
        if (accumulate)
            for (int j = 0; j < cols; j++) c[j] += acc[r][j];
        else
            for (int j = 0; j < cols; j++) c[j] = acc[r][j];
    }
}

/* All blocks of C[M,N], where A(r, k) = A[r*ars + k*aks]; one block per task. */
static void blocked_product(float *C, const float *A, long ars, long aks, const float *B, int M, int K, int N,
                            int accumulate) {
    int row_blocks = (M + ROWS - 1) / ROWS, col_blocks = (N + COLS - 1) / COLS;
    long tasks = (long)row_blocks * col_blocks;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        int r0 = (int)(t / col_blocks) * ROWS, c0 = (int)(t % col_blocks) * COLS;
        int rows = M - r0 < ROWS ? M - r0 : ROWS, cols = N - c0 < COLS ? N - c0 : COLS;
        block(C + (long)r0 * N + c0, N, A + r0 * ars, ars, aks, B + c0, N, K, rows, cols, accumulate);
    }
}

void dfa__gemm_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate) {
    blocked_product(C, A, K, 1, B, M, K, N, accumulate);
}

void dfa__gemm_tn_acc(float *C, const float *A, const float *B, int M, int K, int N) {
    /* C[K,N] += sum_m A[m,k] B[m,n]: rows of C are columns of A (row stride 1, k stride K). */
    blocked_product(C, A, 1, K, B, K, M, N, 1);
}

void dfa__gemm_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate) {
    /* C = A B^T: transpose B[K,N] once (weights are small), then a plain product. */
    float *bt = malloc(sizeof(float) * (size_t)K * N);
    if (!bt) { /* fall back to the strided form, slower but allocation-free */
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                float s = 0;
                for (int n = 0; n < N; n++) s += A[(long)m * N + n] * B[(long)k * N + n];
                C[(long)m * K + k] = accumulate ? C[(long)m * K + k] + s : s;
            }
        return;
    }
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) bt[(long)n * K + k] = B[(long)k * N + n];
    blocked_product(C, A, N, 1, bt, M, N, K, accumulate);
    free(bt);
}
