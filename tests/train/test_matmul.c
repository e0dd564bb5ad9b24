/* The model's matmul backends (train/model/matmul.h): each of the three products against a
 * float64 product on fresh random inputs, over shapes that hit the micro-kernel's full and
 * partial blocks; an overwriting product never reads C (a NaN poison stays out); the same bits
 * for 1, 2, 3 and 4 threads (the trainer promises results independent of the thread count and
 * a bitwise resume); dft_gemm_* follow dft_gemm_use. OpenBLAS's backend is checked when this
 * build has it (DFA_WITH_CBLAS). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "testlib.h"
#include "train/model/matmul.h"

typedef void (*nn_fn)(float *, const float *, const float *, int, int, int, int);
typedef void (*tn_fn)(float *, const float *, const float *, int, int, int);
typedef struct {
    const char *name;
    nn_fn nn;
    tn_fn tn_acc;
    nn_fn nt;
} backend;

static float *randn(long n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) p[i] = (float)tl_rand_normal();
    return p;
}

/* max |C - ref| / max (|C0| + sum_k |A(r,k) B(k,s)|) for C[R,S] = C0 (if acc) + sum_k A(r,k) B(k,s).
 * The scale is the terms' magnitude, not the result's: a float32 sum's rounding error is bounded
 * by a few ulps of its terms, and a result that cancels to near zero (1x1x1: c0 + a b with
 * c0 ~ -a b) would otherwise turn one ulp of a term into an arbitrarily large relative error. */
static double rel_err(const float *C, const float *C0, int acc, const float *A, long ar, long ak, const float *B, long bk,
                      long bs, int R, int K, int S) {
    double worst = 0, scale = 1e-30;
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            double ref = acc ? C0[(long)r * S + s] : 0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double t = (double)A[r * ar + k * ak] * B[k * bk + s * bs];
                ref += t, mag += fabs(t);
            }
            double got = C[(long)r * S + s];
            worst = isnan(got) ? INFINITY : fmax(worst, fabs(got - ref));
            scale = fmax(scale, mag);
        }
    return worst / scale;
}

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* The three products of one shape with one backend; C's of each in out[0..2]. */
static void run3(const backend *b, int M, int K, int N, const float *x, const float *w, const float *dy, const float *c0,
                 float *out[3]) {
    memcpy(out[0], c0, sizeof(float) * M * N);
    b->nn(out[0], x, w, M, K, N, 1);
    memcpy(out[1], c0, sizeof(float) * K * N);
    b->tn_acc(out[1], x, dy, M, K, N);
    tl_poison(out[2], sizeof(float) * M * K);
    b->nt(out[2], dy, w, M, N, K, 0);
}

static void test_backend(const backend *b) {
    const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {6, 16, 16}, {13, 64, 48}, {97, 33, 70}, {300, 64, 256}, {517, 128, 64}};
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < nshapes; s++) {
        int M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        float *x = randn((long)M * K), *w = randn((long)K * N), *dy = randn((long)M * N);
        long cmax = (long)M * N > (long)K * N ? (long)M * N : (long)K * N;
        if ((long)M * K > cmax) cmax = (long)M * K;
        float *c0 = randn(cmax), *out[3], *first[3];
        for (int i = 0; i < 3; i++) out[i] = malloc(sizeof(float) * cmax), first[i] = malloc(sizeof(float) * cmax);
        for (int t = 1; t <= 4; t++) {
            set_threads(t);
            run3(b, M, K, N, x, w, dy, c0, t == 1 ? first : out);
            if (t == 1) {
                /* float32 sums of K (or M) terms: a few ulps times the length, relative to the largest output */
                double tol_k = 4e-7 * sqrt((double)K + 1) * 4, tol_m = 4e-7 * sqrt((double)M + 1) * 4;
                double e0 = rel_err(first[0], c0, 1, x, K, 1, w, N, 1, M, K, N);
                double e1 = rel_err(first[1], c0, 1, x, 1, K, dy, N, 1, K, M, N);
                double e2 = rel_err(first[2], NULL, 0, dy, N, 1, w, 1, N, M, N, K);
                CHECK(e0 <= tol_k, "%s nn %dx%dx%d: rel. error %.3g > %.3g", b->name, M, K, N, e0, tol_k);
                CHECK(e1 <= tol_m, "%s tn_acc %dx%dx%d: rel. error %.3g > %.3g", b->name, M, K, N, e1, tol_m);
                CHECK(e2 <= tol_k * 2, "%s nt %dx%dx%d: rel. error %.3g (NaN poison read?)", b->name, M, K, N, e2);
            } else {
                long n[3] = {(long)M * N, (long)K * N, (long)M * K};
                for (int i = 0; i < 3; i++)
                    CHECK(memcmp(out[i], first[i], sizeof(float) * n[i]) == 0,
                          "%s product %d of %dx%dx%d: %d threads give other bits than 1", b->name, i, M, K, N, t);
            }
        }
        /* accumulate = 0 in nn overwrites a NaN-poisoned C; accumulate = 1 in nt adds */
        set_threads(2);
        tl_poison(out[0], sizeof(float) * M * N);
        b->nn(out[0], x, w, M, K, N, 0);
        CHECK(tl_count_nan(DFA_F32, out[0], (long)M * N) == 0, "%s nn %dx%dx%d overwrite read the poisoned C", b->name, M,
              K, N);
        memcpy(out[2], c0, sizeof(float) * M * K);
        b->nt(out[2], dy, w, M, N, K, 1);
        double e = rel_err(out[2], c0, 1, dy, N, 1, w, 1, N, M, N, K);
        CHECK(e <= 4e-7 * sqrt((double)N + 1) * 8, "%s nt accumulate %dx%dx%d: rel. error %.3g", b->name, M, K, N, e);
        for (int i = 0; i < 3; i++) free(out[i]), free(first[i]);
        free(x), free(w), free(dy), free(c0);
    }
    printf("  %s: %d shapes x 3 products, 1-4 threads bitwise\n", b->name, nshapes);
}

int main(void) {
    tl_init("test_matmul");
    backend own = {"own", dft_mm_own_nn, dft_mm_own_tn_acc, dft_mm_own_nt};
    test_backend(&own);
#ifdef DFT_HAVE_CBLAS
    backend blas = {"blas", dft_mm_blas_nn, dft_mm_blas_tn_acc, dft_mm_blas_nt};
    test_backend(&blas);
    CHECK(dft_gemm_have_blas(), "built with DFT_HAVE_CBLAS but dft_gemm_have_blas() is 0");
#else
    CHECK(!dft_gemm_have_blas(), "no OpenBLAS in this build but dft_gemm_have_blas() is 1");
    CHECK(dft_gemm_use(DFT_MM_BLAS) == -1, "dft_gemm_use(BLAS) must be refused without OpenBLAS");
#endif
    /* dft_gemm_* follow the chosen backend: the same bits as that backend's own call */
    set_threads(1);
    int M = 37, K = 24, N = 40;
    float *x = randn((long)M * K), *w = randn((long)K * N), *a = malloc(sizeof(float) * M * N),
          *b = malloc(sizeof(float) * M * N);
    for (int use = 0; use < 2; use++) {
        if (use == 1 && !dft_gemm_have_blas()) break;
        CHECK(dft_gemm_use((dft_mm_backend)use) == 0, "dft_gemm_use(%d) refused", use);
        CHECK(dft_gemm_backend() == (dft_mm_backend)use, "dft_gemm_backend() is not what dft_gemm_use set");
        dft_gemm_nn(a, x, w, M, K, N, 0);
#ifdef DFT_HAVE_CBLAS
        (use ? dft_mm_blas_nn : dft_mm_own_nn)(b, x, w, M, K, N, 0);
#else
        dft_mm_own_nn(b, x, w, M, K, N, 0);
#endif
        CHECK(memcmp(a, b, sizeof(float) * M * N) == 0, "dft_gemm_nn does not run backend %d", use);
        printf("  dft_gemm_* with %s\n", dft_gemm_describe());
    }
    free(x), free(w), free(a), free(b);
    return tl_finish("test_matmul");
}
