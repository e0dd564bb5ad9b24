/* The three products behind a linear layer, over our register-blocked micro-kernel
 * (matmul_block.h) built twice: for AVX2+FMA and portable; the processor picks.
 * dft_gemm_* (matmul.h) send them here or to OpenBLAS (matmul_cblas.c): see matmul_backend.c. */
#include "train/model/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "train/model/matmul_impl.h"

#define DFA_MM_KERNEL dft_mm_kernel_portable
#include "train/model/matmul_block.h"

/* The best kernel this processor runs (called by the caller's thread, before the parallel loop). */
static const dft_mm_kernel *pick(void) {
    static const dft_mm_kernel *chosen;
    if (chosen) return chosen;
    const dft_mm_kernel *f = &dft_mm_kernel_portable;
#if defined(DFA_MM_HAVE_AVX2)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !getenv("DFA_MM_PORTABLE"))
        f = &dft_mm_kernel_avx2;
#endif
    return chosen = f;
}

const char *dft_mm_own_isa(void) { return pick() == &dft_mm_kernel_portable ? "portable" : "AVX2+FMA"; }

/* All blocks of C[M,N] (+)= A B, where A(r, k) = A[r*ars + k*aks] and B is [K,N] row-major;
   one block per task. B is first packed into panels of the block width (K x bc, contiguous):
   rows of a wide B sit a power of two apart, and walking them down a column block would keep
   hitting the same few L1 sets (at N = 256 that alone cost 5x). */
static void blocked_product(float *C, const float *A, long ars, long aks, const float *B, int M, int K, int N,
                            int accumulate) {
    const dft_mm_kernel *kernel = pick();
    const int br = kernel->rows, bc = kernel->cols; /* block shape */
    int row_blocks = (M + br - 1) / br, col_blocks = (N + bc - 1) / bc;
    float *panels = malloc(sizeof(float) * (size_t)K * col_blocks * bc);
    if (panels) {
        for (int j = 0; j < col_blocks; j++) {
            int c0 = j * bc, cols = N - c0 < bc ? N - c0 : bc;
            float *p = panels + (size_t)j * K * bc;
            for (int k = 0; k < K; k++) {
                memcpy(p + (size_t)k * bc, B + (long)k * N + c0, sizeof(float) * cols);
                for (int c = cols; c < bc; c++) p[(size_t)k * bc + c] = 0.0f;
            }
        }
    }
    long tasks = (long)row_blocks * col_blocks;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < tasks; t++) {
        int j = (int)(t % col_blocks);
        int r0 = (int)(t / col_blocks) * br, c0 = j * bc;
        int rows = M - r0 < br ? M - r0 : br, cols = N - c0 < bc ? N - c0 : bc;
        if (panels)
            kernel->fn(C + (long)r0 * N + c0, N, A + r0 * ars, ars, aks, panels + (size_t)j * K * bc, bc, K, rows, cols,
                       accumulate);
        else /* no memory for the panels: the same product, reading B in place */
            kernel->fn(C + (long)r0 * N + c0, N, A + r0 * ars, ars, aks, B + c0, N, K, rows, cols, accumulate);
    }
    free(panels);
}

void dft_mm_own_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate) {
    blocked_product(C, A, K, 1, B, M, K, N, accumulate);
}

void dft_mm_own_tn_acc(float *C, const float *A, const float *B, int M, int K, int N) {
    /* C[K,N] += sum_m A[m,k] B[m,n], over slabs of SLAB rows m: each slab's A is packed
       transposed (K x SLAB, contiguous) so that a block of C streams short rows from L1/L2
       instead of sweeping all M rows of A and B for every block. Slabs are summed in order. */
    enum { SLAB = 256 };
    float *at = malloc(sizeof(float) * (size_t)K * SLAB);
    if (!at) { /* allocation-free fallback: the strided form */
        blocked_product(C, A, 1, K, B, K, M, N, 1);
        return;
    }
    for (int m0 = 0; m0 < M; m0 += SLAB) {
        int mc = M - m0 < SLAB ? M - m0 : SLAB;
        for (int i = 0; i < mc; i++)
            for (int k = 0; k < K; k++) at[(long)k * mc + i] = A[(long)(m0 + i) * K + k];
        blocked_product(C, at, mc, 1, B + (long)m0 * N, K, mc, N, 1);
    }
    free(at);
}

void dft_mm_own_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate) {
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
