/* Kernel lab for the model's matmuls: each backend (our micro-kernel in its AVX2+FMA and
 * portable builds, and OpenBLAS when the build has it) runs the three products of a linear
 * layer (y = x W, dW += x^T dy, dx = dy W^T) at the trainer's shapes, is checked against a
 * double-precision product, and is timed (median of runs), as GFLOP/s and as a fraction of
 * this machine's float32 FMA peak measured in the same run with the same threads.
 *   build/lab/train/matmul_lab [rows] [--threads N] [--d D --ffn F]
 *     rows: tokens per rank (default 8192); --d/--ffn: the shapes of one model (its four
 *     linear layers' K x N: d x d, d x F, F x d, d x 256) instead of the default list.
 * The own kernel's portable build is chosen with DFA_MM_PORTABLE=1 (the lab runs each backend
 * in this process; run it again with DFA_MM_PORTABLE=1 for the portable build).
 * With one thread everything is timed in CPU seconds of this process, the FMA peak included
 * (its GFLOP/s scaled by wall / CPU seconds over its measurement): on a machine shared with
 * other jobs, time slices lost to them then count for neither the kernels nor the peak. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "fma_peak.h"
#include "measure.h"
#include "train/model/matmul.h"

static void fill(float *p, long n, unsigned seed) {
    for (long i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * 0x1.0p-24 - 0.5);
    }
}

/* max |C - ref| / max |ref| of C[M,N] = sum_k A(m,k) B(k,n), with A, B given by strides. */
static double check(const float *C, const float *A, long am, long ak, const float *B, long bk, long bn, int M, int K,
                    int N) {
    double worst = 0, scale = 0;
    for (int m = 0; m < M; m += 97)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)A[m * am + k * ak] * B[k * bk + n * bn];
            worst = fmax(worst, fabs(C[(long)m * N + n] - s));
            scale = fmax(scale, fabs(s));
        }
    return worst / scale;
}

int main(int argc, char **argv) {
    int M = 8192, threads = 1, d = 0, ffn = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--d") && i + 1 < argc) d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ffn") && i + 1 < argc) ffn = atoi(argv[++i]);
        else M = atoi(argv[i]);
    }
    if (M < 1 || threads < 1) return fprintf(stderr, "usage: matmul_lab [rows] [--threads N] [--d D --ffn F]\n"), 2;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    int shapes[8][2] = {{64, 64}, {64, 128}, {128, 64}, {64, 256}, {256, 64}};
    int nshapes = 5;
    if (d > 0) {
        if (ffn <= 0) ffn = 4 * d;
        int s[4][2] = {{d, d}, {d, ffn}, {ffn, d}, {d, 256}};
        memcpy(shapes, s, sizeof s);
        nshapes = 4;
    }
    int cpu_time = threads == 1;
    double (*now)(void) = cpu_time ? measure_cpu_now : measure_now;
    fma_peak_result peaks[3];
    double w0 = measure_now(), c0 = measure_cpu_now();
    int np = fma_peak_measure(threads, 0.5, peaks);
    double busy = cpu_time ? (measure_now() - w0) / (measure_cpu_now() - c0) : 1.0; /* >= 1 when shared */
    double peak = 0;
    for (int i = 0; i < np; i++) peak = fmax(peak, peaks[i].gflops * busy);
    printf("matmul_lab: %d rows, %d thread%s; float32 FMA peak %.1f GFLOP/s measured now (%s; wall/CPU %.2f)\n", M,
           threads, threads == 1 ? "" : "s", peak, cpu_time ? "CPU time" : "wall time", busy);
    int nbackends = dft_gemm_have_blas() ? 2 : 1;
    printf("| backend | K | N | x W GFLOP/s (of peak) | x^T dy | dy W^T | max rel. error |\n|---|---|---|---|---|---|---|\n");
    double sum_frac[2] = {0, 0};
    for (int be = 0; be < nbackends; be++) {
        dft_gemm_use((dft_mm_backend)be);
        const char *name = be ? "OpenBLAS" : (getenv("DFA_MM_PORTABLE") ? "own (portable)" : "own (best)");
        for (int s = 0; s < nshapes; s++) {
            int K = shapes[s][0], N = shapes[s][1];
            float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * K * N);
            float *y = malloc(sizeof(float) * M * N), *dw = calloc((size_t)K * N, sizeof(float));
            float *dx = malloc(sizeof(float) * M * K);
            fill(x, (long)M * K, 1), fill(w, (long)K * N, 2), fill(y, (long)M * N, 3);
            double t[3][7], flops = 2.0 * M * K * N, err = 0;
            for (int r = 0; r < 7; r++) {
                double t0 = now();
                dft_gemm_nn(y, x, w, M, K, N, 0);
                t[0][r] = now() - t0;
                if (r == 0) err = fmax(err, check(y, x, K, 1, w, N, 1, M, K, N));
                memset(dw, 0, sizeof(float) * K * N);
                t0 = now();
                dft_gemm_tn_acc(dw, x, y, M, K, N);
                t[1][r] = now() - t0;
                t0 = now();
                dft_gemm_nt(dx, y, w, M, N, K, 0);
                t[2][r] = now() - t0;
                if (r == 0) err = fmax(err, check(dx, y, N, 1, w, 1, N, M, N, K));
            }
            /* dW = x^T y: check a few entries (the last run's, one product from zero) */
            double worst = 0, scale = 0;
            for (int k = 0; k < K; k += 7)
                for (int n = 0; n < N; n += 5) {
                    double ref = 0;
                    for (int m = 0; m < M; m++) ref += (double)x[(long)m * K + k] * y[(long)m * N + n];
                    worst = fmax(worst, fabs(dw[k * N + n] - ref)), scale = fmax(scale, fabs(ref));
                }
            err = fmax(err, worst / scale);
            double g[3];
            for (int i = 0; i < 3; i++) g[i] = flops / measure_median(t[i], 7) * 1e-9, sum_frac[be] += g[i] / peak;
            printf("| %s | %d | %d | %.1f (%.2f) | %.1f (%.2f) | %.1f (%.2f) | %.1e |\n", name, K, N, g[0], g[0] / peak,
                   g[1], g[1] / peak, g[2], g[2] / peak, err);
            free(x), free(w), free(y), free(dw), free(dx);
        }
    }
    printf("mean fraction of peak over the table: own %.2f", sum_frac[0] / (3 * nshapes));
    if (nbackends > 1) printf(", OpenBLAS %.2f", sum_frac[1] / (3 * nshapes));
    printf("\n");
    return 0;
}
