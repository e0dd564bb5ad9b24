/* Which backend dft_gemm_* run (matmul.h): the build's default (DFT_MM_DEFAULT_BLAS, set by
 * CMake from DFA_WITH_CBLAS), or DFA_MM_BACKEND=own|blas read once, or dft_gemm_use. */
#include "train/model/matmul.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DFT_HAVE_CBLAS
void dft_mm_blas_describe(char *out, size_t n); /* matmul_cblas.c */
#endif

static int chosen = -1; /* dft_mm_backend, or -1 before the first call */

int dft_gemm_have_blas(void) {
#ifdef DFT_HAVE_CBLAS
    return 1;
#else
    return 0;
#endif
}

dft_mm_backend dft_gemm_backend(void) {
    if (chosen < 0) {
#if defined(DFT_HAVE_CBLAS) && defined(DFT_MM_DEFAULT_BLAS)
        int b = DFT_MM_BLAS;
#else
        int b = DFT_MM_OWN;
#endif
        const char *env = getenv("DFA_MM_BACKEND");
        if (env && !strcmp(env, "own")) b = DFT_MM_OWN;
        if (env && !strcmp(env, "blas") && dft_gemm_have_blas()) b = DFT_MM_BLAS;
        chosen = b;
    }
    return (dft_mm_backend)chosen;
}

int dft_gemm_use(dft_mm_backend b) {
    if (b == DFT_MM_BLAS && !dft_gemm_have_blas()) return -1;
    if (b != DFT_MM_OWN && b != DFT_MM_BLAS) return -1;
    chosen = b;
    return 0;
}

const char *dft_gemm_describe(void) {
    static char text[160];
#ifdef DFT_HAVE_CBLAS
    if (dft_gemm_backend() == DFT_MM_BLAS) {
        dft_mm_blas_describe(text, sizeof text);
        return text;
    }
#endif
    snprintf(text, sizeof text, "own micro-kernel (%s)", dft_mm_own_isa());
    return text;
}

void dft_gemm_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate) {
#ifdef DFT_HAVE_CBLAS
    if (dft_gemm_backend() == DFT_MM_BLAS) {
        dft_mm_blas_nn(C, A, B, M, K, N, accumulate);
        return;
    }
#endif
    dft_mm_own_nn(C, A, B, M, K, N, accumulate);
}

void dft_gemm_tn_acc(float *C, const float *A, const float *B, int M, int K, int N) {
#ifdef DFT_HAVE_CBLAS
    if (dft_gemm_backend() == DFT_MM_BLAS) {
        dft_mm_blas_tn_acc(C, A, B, M, K, N);
        return;
    }
#endif
    dft_mm_own_tn_acc(C, A, B, M, K, N);
}

void dft_gemm_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate) {
#ifdef DFT_HAVE_CBLAS
    if (dft_gemm_backend() == DFT_MM_BLAS) {
        dft_mm_blas_nt(C, A, B, M, N, K, accumulate);
        return;
    }
#endif
    dft_mm_own_nt(C, A, B, M, N, K, accumulate);
}
