/* The model's three products through OpenBLAS's cblas_sgemm (built when DFA_WITH_CBLAS finds
 * OpenBLAS), single-threaded calls over fixed chunks spread over OpenMP's threads (why below).
 * Pinning OpenBLAS to one thread also keeps each MPI rank to its share of the cores (OpenBLAS
 * would otherwise start a thread per core in every rank). */
#include "train/model/matmul.h"

#ifdef DFT_HAVE_CBLAS
#include <cblas.h>
#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* OpenBLAS's own thread-count calls (declared by its cblas.h; not in the CBLAS standard). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);
char *openblas_get_corename(void);

/* OpenBLAS is not the same bits for every thread count: its threaded driver blocks the sum
   over K differently from the one-thread path (measured with 0.3.21: 1 thread against 2-4 on
   300x64x256 differs in the last bits), which would break the trainer's promise of results
   independent of --threads and of a bitwise resume on another count. So OpenBLAS runs on one
   thread per call, pinned once, and the parallelism is ours: the output is cut into chunks
   of a size that depends only on the shape, each chunk one single-threaded cblas_sgemm, the
   chunks spread over OpenMP's threads. Every output element is then summed by one call in an
   order that no thread count changes. */
enum { CHUNK_ROWS = 128 };

static void pin_one_thread(void) {
    static int pinned;
    if (!pinned) {
        openblas_set_num_threads(1);
        pinned = 1;
    }
}

void dft_mm_blas_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate) {
    if (M <= 0 || N <= 0) return;
    pin_one_thread();
    int chunks = (M + CHUNK_ROWS - 1) / CHUNK_ROWS;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; i++) {
        int r0 = i * CHUNK_ROWS, rows = M - r0 < CHUNK_ROWS ? M - r0 : CHUNK_ROWS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, N, K, 1.0f, A + (long)r0 * K, K > 0 ? K : 1, B, N,
                    accumulate ? 1.0f : 0.0f, C + (long)r0 * N, N);
    }
}

void dft_mm_blas_tn_acc(float *C, const float *A, const float *B, int M, int K, int N) {
    /* C[K,N] += A^T B sums over M: chunks of C's rows (columns of A) keep that sum in one call */
    if (K <= 0 || N <= 0 || M <= 0) return;
    pin_one_thread();
    enum { CHUNK_K = 32 };
    int chunks = (K + CHUNK_K - 1) / CHUNK_K;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; i++) {
        int k0 = i * CHUNK_K, kc = K - k0 < CHUNK_K ? K - k0 : CHUNK_K;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kc, N, M, 1.0f, A + k0, K, B, N, 1.0f, C + (long)k0 * N, N);
    }
}

void dft_mm_blas_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate) {
    if (M <= 0 || K <= 0) return;
    pin_one_thread();
    int chunks = (M + CHUNK_ROWS - 1) / CHUNK_ROWS;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; i++) {
        int r0 = i * CHUNK_ROWS, rows = M - r0 < CHUNK_ROWS ? M - r0 : CHUNK_ROWS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, K, N, 1.0f, A + (long)r0 * N, N > 0 ? N : 1, B,
                    N > 0 ? N : 1, accumulate ? 1.0f : 0.0f, C + (long)r0 * K, K);
    }
}

/* "OpenBLAS 0.3.21 ... Haswell MAX_THREADS=64", shortened to version and core. */
void dft_mm_blas_describe(char *out, size_t n) {
    pin_one_thread();
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    char version[32] = "";
    if (cfg) sscanf(cfg, "OpenBLAS %31s", version);
#ifdef _OPENMP
    int t = omp_get_max_threads();
#else
    int t = 1;
#endif
    snprintf(out, n, "OpenBLAS %s (%s), one thread per call, %d thread%s over chunks", version[0] ? version : "?",
             core ? core : "?", t, t == 1 ? "" : "s");
}
#else
typedef int dft_mm_no_cblas; /* ISO C wants a translation unit to declare something */
#endif
