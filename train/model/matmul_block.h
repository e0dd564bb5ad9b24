/* The matmul micro-kernel, included by each ISA's translation unit (matmul_avx2.c is built
 * with -mavx2 -mfma, matmul.c with the default flags) as the kernel object DFA_MM_KERNEL. */
#ifndef DFT_TRAIN_MODEL_MATMUL_BLOCK_H
#define DFT_TRAIN_MODEL_MATMUL_BLOCK_H

#include <string.h>

/* With AVX: a 6 x 16 block of C in twelve 8-float vectors, which with the two vectors of B
   and one broadcast of A fits the 16 vector registers (the classic 6 x 16 micro-kernel).
   Without: a 4 x 8 block in eight 4-float vectors, for the 16 SSE registers. */
#if defined(__AVX__)
enum { ROWS = 6, COLS = 16, LANES = 8 };
#else
enum { ROWS = 4, COLS = 8, LANES = 4 };
#endif
typedef float v8 __attribute__((vector_size(LANES * 4)));
typedef float v8u __attribute__((vector_size(LANES * 4), aligned(4))); /* unaligned loads and stores */

/* C[r0:r0+rows, c0:c0+cols] (+)= sum_k A(r, k) * B[k, c], where A(r, k) = A[r*ars + k*aks]:
   one block of outputs, accumulated over all of K in registers. */
static void block(float *C, int ldc, const float *A, long ars, long aks, const float *B, int ldb, int K, int rows,
                  int cols, int accumulate) {
    if (rows == ROWS && cols == COLS) {
        /* fully unrolled, so the compiler keeps acc in registers */
        v8 acc[ROWS][2];
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = (v8){0};
        for (int k = 0; k < K; k++) {
            const float *b = B + (long)k * ldb;
            v8 b0 = *(const v8u *)b, b1 = *(const v8u *)(b + LANES);
            const float *a = A + k * aks;
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) {
                v8 x = (v8){0} + a[r * ars];
                acc[r][0] += x * b0;
                acc[r][1] += x * b1;
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < ROWS; r++) {
            v8u *c = (v8u *)(C + (long)r * ldc);
            if (accumulate) c[0] += acc[r][0], c[1] += acc[r][1];
            else c[0] = acc[r][0], c[1] = acc[r][1];
        }
        return;
    }
    if (cols == COLS) { /* fewer rows: the same vectors, with the row loop left rolled */
        v8 acc[ROWS][2];
        for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = (v8){0};
        for (int k = 0; k < K; k++) {
            const float *b = B + (long)k * ldb;
            v8 b0 = *(const v8u *)b, b1 = *(const v8u *)(b + LANES);
            for (int r = 0; r < rows; r++) {
                v8 x = (v8){0} + A[r * ars + k * aks];
                acc[r][0] += x * b0;
                acc[r][1] += x * b1;
            }
        }
        for (int r = 0; r < rows; r++) {
            v8u *c = (v8u *)(C + (long)r * ldc);
            if (accumulate) c[0] += acc[r][0], c[1] += acc[r][1];
            else c[0] = acc[r][0], c[1] = acc[r][1];
        }
        return;
    }
    float acc[ROWS][COLS] = {{0}};
    for (int k = 0; k < K; k++) {
        const float *b = B + (long)k * ldb;
        for (int r = 0; r < rows; r++) {
            float a = A[r * ars + k * aks];
            for (int j = 0; j < cols; j++) acc[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < rows; r++) {
        float *c = C + (long)r * ldc;
        for (int j = 0; j < cols; j++) c[j] = accumulate ? c[j] + acc[r][j] : acc[r][j];
    }
}


const dft_mm_kernel DFA_MM_KERNEL = {block, ROWS, COLS};

#endif
