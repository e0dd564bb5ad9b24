/* Portable C tile kernels: the fallback on any processor and the reference
   the SIMD tables are tested against. */
#include <math.h>

#include "../common/dtype.h"
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

static void gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(long)i * ldc + j] = 0.0f;
    gemm_nn_acc(M, N, K, A, lda, B, ldb, C, ldc);
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

static void softmax_cols(float *st, int ld, int keys, int n, float c, int delta, float *m, float *l,
                         float *alpha) {
    for (int i = 0; i < n; i++) {
        float mx = -INFINITY;
        for (int j = 0; j < keys; j++)
            if (j - i <= delta) mx = fmaxf(mx, st[(long)j * ld + i] * c);
        const float m_new = fmaxf(m[i], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* -inf - -inf would be NaN */
        float sum = 0.0f;
        for (int j = 0; j < keys; j++) {
            float *s = st + (long)j * ld + i;
            *s = j - i <= delta ? exp2f(*s * c - m_use) : 0.0f;
            sum += *s;
        }
        alpha[i] = exp2f(m[i] - m_use);
        l[i] = l[i] * alpha[i] + sum;
        m[i] = m_new;
    }
}

static void exp2_rows(float *s, int ld, int rows, int cols, float c, const float *bias, int delta) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float *x = s + (long)i * ld + j;
            *x = j - i <= delta ? exp2f(*x * c - bias[i]) : 0.0f;
        }
}

static void dsoftmax_rows(float *dp, const float *p, int ld, int rows, int cols, const float *dsum) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const long at = (long)i * ld + j;
            dp[at] = p[at] * (dp[at] - dsum[i]);
        }
}

static void softcap_rows(float *s, float *dt, int ld, int rows, int cols, float a, float c) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const long at = (long)i * ld + j;
            const float t = tanhf(a * s[at]);
            s[at] = c * t;
            if (dt) dt[at] = (1.0f - t) * (1.0f + t);
        }
}

static void mul_rows(float *x, const float *y, int ld, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) x[(long)i * ld + j] *= y[(long)i * ld + j];
}

static void scale_rows(float *x, int ld, int rows, int cols, const float *s) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) x[(long)i * ld + j] *= s[i];
}

static void rowdot(int rows, int n, const float *a, int lda, const float *b, int ldb, float *out) {
    for (int i = 0; i < rows; i++) {
        float s = 0.0f;
        for (int k = 0; k < n; k++) s += a[(long)i * lda + k] * b[(long)i * ldb + k];
        out[i] = s;
    }
}

static void transpose(int rows, int cols, const float *src, int lds, float *dst, int ldd) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) dst[(long)j * ldd + i] = src[(long)i * lds + j];
}

static void load_f32(dfa_dtype t, const void *src, float *dst, int64_t n) { dfa__load_f32(t, src, dst, n); }
static void store_f32(dfa_dtype t, const float *src, void *dst, int64_t n) { dfa__store_f32(t, src, dst, n); }

static const dfa__cpu_kernels table = {
    .name = "scalar",
    .gemm_nt = gemm_nt,
    .gemm_nn_acc = gemm_nn_acc,
    .gemm_tn_acc = gemm_tn_acc,
    .exp2_affine_sum = exp2_affine_sum,
    .gemm_nn = gemm_nn,
    .softmax_cols = softmax_cols,
    .exp2_rows = exp2_rows,
    .dsoftmax_rows = dsoftmax_rows,
    .softcap_rows = softcap_rows,
    .mul_rows = mul_rows,
    .scale_rows = scale_rows,
    .rowdot = rowdot,
    .transpose = transpose,
    .load_f32 = load_f32,
    .store_f32 = store_f32,
};

const dfa__cpu_kernels *dfa__cpu_kernels_scalar(void) { return &table; }
