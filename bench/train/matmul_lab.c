/* Kernel lab for the model's matmuls: each micro-kernel build (AVX2+FMA, portable) runs the
 * three products of a linear layer (y = x W, dW += x^T dy, dx = dy W^T) at the trainer's
 * shapes, is checked against a double-precision product, and is timed (median of runs).
 *   build/bench/train/matmul_lab [rows]          (rows: tokens per rank, default 8192)
 * The kernel is chosen with DFA_MM_PORTABLE=1 (the lab re-runs itself for each). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int M = argc > 1 ? atoi(argv[1]) : 8192;
    const int shapes[][2] = {{64, 64}, {64, 128}, {128, 64}, {64, 256}, {256, 64}};
    printf("kernel %s, %d rows\n", getenv("DFA_MM_PORTABLE") ? "portable" : "best (AVX2+FMA where available)", M);
    printf("| K | N | x W GFLOP/s | x^T dy GFLOP/s | dy W^T GFLOP/s | max rel. error |\n|---|---|---|---|---|---|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int K = shapes[s][0], N = shapes[s][1];
        float *x = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * K * N);
        float *y = malloc(sizeof(float) * M * N), *dw = calloc((size_t)K * N, sizeof(float));
        float *dx = malloc(sizeof(float) * M * K);
        fill(x, (long)M * K, 1), fill(w, (long)K * N, 2), fill(y, (long)M * N, 3);
        double t[3][7], flops = 2.0 * M * K * N, err = 0;
        for (int r = 0; r < 7; r++) {
            double t0 = measure_now();
            dft_gemm_nn(y, x, w, M, K, N, 0);
            t[0][r] = measure_now() - t0;
            if (r == 0) err = fmax(err, check(y, x, K, 1, w, N, 1, M, K, N));
            memset(dw, 0, sizeof(float) * K * N);
            t0 = measure_now();
            dft_gemm_tn_acc(dw, x, y, M, K, N);
            t[1][r] = measure_now() - t0;
            t0 = measure_now();
            dft_gemm_nt(dx, y, w, M, N, K, 0);
            t[2][r] = measure_now() - t0;
            if (r == 0) err = fmax(err, check(dx, y, N, 1, w, 1, N, M, N, K));
        }
        /* dW = x^T y: check a few entries */
        double worst = 0, scale = 0;
        for (int k = 0; k < K; k += 7)
            for (int n = 0; n < N; n += 5) {
                double ref = 0;
                for (int m = 0; m < M; m++) ref += (double)x[(long)m * K + k] * y[(long)m * N + n];
                worst = fmax(worst, fabs(dw[k * N + n] - ref)), scale = fmax(scale, fabs(ref));
            }
        err = fmax(err, worst / scale);
        printf("| %d | %d | %.1f | %.1f | %.1f | %.1e |\n", K, N, flops / measure_median(t[0], 7) * 1e-9,
               flops / measure_median(t[1], 7) * 1e-9, flops / measure_median(t[2], 7) * 1e-9, err);
        free(x), free(w), free(y), free(dw), free(dx);
    }
    return 0;
}
