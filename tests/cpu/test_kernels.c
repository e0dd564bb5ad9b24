/* Every compiled (and usable) SIMD kernel table against the scalar one, op by
 * op, on random tiles of odd sizes and strides: results within the rounding
 * bound of the op, nothing written outside the output tile, masks and
 * infinities handled as kernels.h says (softcap's tanh too), plus two exactness properties the
 * attention passes rely on (rowdot rounds like a GEMM element; the largest
 * score of a softmax column gets exactly 1). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "cpu/kernels.h"

#define SENTINEL 1234.5f
#define U 0x1p-24 /* unit roundoff of float32 */

static float *randv(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = (float)tl_rand_normal();
    return p;
}
static float *filled(size_t n, float x) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = x;
    return p;
}

/* The four GEMM forms; B is K x N (nn, tn) or N x K (nt). */
enum { NN, NN_ACC, TN_ACC, NT };
static const char *gemm_name[] = {"gemm_nn", "gemm_nn_acc", "gemm_tn_acc", "gemm_nt"};

static void call_gemm(const dfa__cpu_kernels *t, int form, int M, int N, int K, const float *A, int lda, const float *B,
                      int ldb, float *C, int ldc) {
    switch (form) {
    case NN: t->gemm_nn(M, N, K, A, lda, B, ldb, C, ldc); break;
    case NN_ACC: t->gemm_nn_acc(M, N, K, A, lda, B, ldb, C, ldc); break;
    case TN_ACC: t->gemm_tn_acc(M, N, K, A, lda, B, ldb, C, ldc); break;
    default: t->gemm_nt(M, N, K, A, lda, B, ldb, C, ldc); break;
    }
}

static void test_gemm(const dfa__cpu_kernels *t) {
    const dfa__cpu_kernels *ref = dfa__cpu_kernels_scalar();
    static const int sizes[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 47, 48, 49, 63, 64, 65, 97, 130};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    int bad = 0, outside = 0, cases = 0;
    for (int form = 0; form < 4; form++)
        for (int rep = 0; rep < 60; rep++) {
            const int M = sizes[tl_rand_int(0, ns - 1)], N = sizes[tl_rand_int(0, ns - 1)];
            const int K = rep == 0 ? 0 : rep == 1 ? 300 : sizes[tl_rand_int(0, ns - 1)];
            const int ta = form == TN_ACC, tb = form == NT;
            const int lda = (ta ? M : K) + tl_rand_int(0, 5), ldb = (tb ? K : N) + tl_rand_int(0, 5);
            const int ldc = N + tl_rand_int(1, 5);
            float *A = randv((size_t)(ta ? K : M) * lda), *B = randv((size_t)(tb ? N : K) * ldb);
            float *C0 = randv((size_t)M * ldc), *C = malloc(sizeof(float) * (M * ldc + 1)),
                  *R = malloc(sizeof(float) * (M * ldc + 1));
            for (int i = 0; i < M; i++)
                for (int j = N; j < ldc; j++) C0[i * ldc + j] = SENTINEL; /* between rows: must stay */
            memcpy(C, C0, sizeof(float) * M * ldc);
            memcpy(R, C0, sizeof(float) * M * ldc);
            call_gemm(t, form, M, N, K, A, lda, B, ldb, C, ldc);
            call_gemm(ref, form, M, N, K, A, lda, B, ldb, R, ldc);
            const int acc = form == NN_ACC || form == TN_ACC;
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double mag = acc ? fabs(C0[i * ldc + j]) : 0;
                    for (int k = 0; k < K; k++) {
                        const float a = ta ? A[k * lda + i] : A[i * lda + k], b = tb ? B[j * ldb + k] : B[k * ldb + j];
                        mag += fabs((double)a * b);
                    }
                    const double diff = fabs((double)C[i * ldc + j] - R[i * ldc + j]);
                    bad += !(diff <= 2.0 * (K + 2) * U * mag + 1e-30);
                }
                for (int j = N; j < ldc; j++) outside += C[i * ldc + j] != SENTINEL;
            }
            cases++;
            free(A), free(B), free(C0), free(C), free(R);
        }
    CHECK(bad == 0, "%s: %d GEMM elements outside the rounding bound", t->name, bad);
    CHECK(outside == 0, "%s: %d elements written outside the output tile", t->name, outside);
    printf("  %s: %d GEMM cases (%s, %s, %s, %s)\n", t->name, cases, gemm_name[0], gemm_name[1], gemm_name[2],
           gemm_name[3]);
}

/* relative difference with a floor for tiny values */
static int j_in(int i, int ld, int cols) { return i % ld < cols; }

static int near(double a, double b, double rel) {
    if (isinf(a) || isinf(b)) return a == b;
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-37;
}

static void test_exp2(const dfa__cpu_kernels *t) {
    /* accuracy against exp2 in double, over the range the passes use and beyond */
    const int n = 4001;
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) x[i] = -140.0f + 160.0f * i / (n - 1) + (float)tl_rand_uniform() * 0.01f;
    x[7] = -INFINITY;
    memcpy(y, x, sizeof(float) * n);
    const float sum = t->exp2_affine_sum(y, n, 1.0f, 0.0f);
    int bad = 0;
    double exact_sum = 0;
    for (int i = 0; i < n; i++) {
        const double e = exp2((double)x[i]);
        exact_sum += e;
        if (e >= 0x1p-126) bad += !(fabs(y[i] - e) <= 3 * U * 2 * e); /* about 3 ulp */
        else bad += !(y[i] >= 0 && y[i] <= 0x1p-125);
    }
    CHECK(bad == 0, "%s: exp2 off by more than 3 ulp at %d points", t->name, bad);
    CHECK(y[7] == 0.0f, "%s: exp2(-inf) = %g, not 0", t->name, y[7]);
    CHECK(near(sum, exact_sum, 1e-5), "%s: exp2_affine_sum returned %g, sum is %g", t->name, sum, exact_sum);
    /* affine form and odd lengths against the scalar table */
    for (int rep = 0; rep < 20; rep++) {
        const int m = tl_rand_int(0, 77);
        const float a = (float)(0.1 + tl_rand_uniform()), b = (float)tl_rand_normal();
        float *p = randv((size_t)m + 1), *q = malloc(sizeof(float) * (m + 1));
        p[m] = SENTINEL;
        memcpy(q, p, sizeof(float) * (m + 1));
        const float s1 = t->exp2_affine_sum(p, m, a, b), s2 = dfa__cpu_kernels_scalar()->exp2_affine_sum(q, m, a, b);
        int off = 0;
        for (int i = 0; i < m; i++) off += !near(p[i], q[i], 1e-6);
        CHECK(off == 0 && near(s1, s2, 1e-5) && p[m] == SENTINEL, "%s: exp2_affine_sum differs from scalar (n=%d)",
              t->name, m);
        free(p), free(q);
    }
    free(x), free(y);
}

static void test_softmax_cols(const dfa__cpu_kernels *t) {
    const dfa__cpu_kernels *ref = dfa__cpu_kernels_scalar();
    int bad = 0, outside = 0, exact_one = 0, maxes = 0;
    for (int rep = 0; rep < 200; rep++) {
        const int keys = tl_rand_int(1, 70), n = tl_rand_int(1, 53), ld = n + tl_rand_int(0, 9);
        const int mode = rep % 4;
        const int delta = mode == 0 ? DFA__NO_MASK : mode == 1 ? tl_rand_int(-n - 3, keys + 3) : tl_rand_int(-10, 10);
        const float c = (float)(0.05 + 0.3 * tl_rand_uniform());
        float *s = randv((size_t)keys * ld), *r = malloc(sizeof(float) * keys * ld);
        for (size_t i = 0; i < (size_t)keys * ld; i++) s[i] *= 4.0f;
        for (int j = 0; j < keys; j++)
            for (int i = n; i < ld; i++) s[j * ld + i] = SENTINEL;
        memcpy(r, s, sizeof(float) * keys * ld);
        float *m = malloc(sizeof(float) * n), *l = malloc(sizeof(float) * n), *al = malloc(sizeof(float) * n);
        float *m2 = malloc(sizeof(float) * n), *l2 = malloc(sizeof(float) * n), *al2 = malloc(sizeof(float) * n);
        float *m_old = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) { /* a first step (-inf, 0) or a later one */
            const int first = mode == 3 || tl_rand_int(0, 2) == 0;
            m[i] = m2[i] = m_old[i] = first ? -INFINITY : (float)tl_rand_normal();
            l[i] = l2[i] = first ? 0.0f : (float)(1 + 5 * tl_rand_uniform());
        }
        t->softmax_cols(s, ld, keys, n, c, delta, m, l, al);
        ref->softmax_cols(r, ld, keys, n, c, delta, m2, l2, al2);
        for (int i = 0; i < n; i++) {
            bad += !(m[i] == m2[i]); /* a max is exact */
            bad += !near(l[i], l2[i], 1e-5) || !near(al[i], al2[i], 1e-6);
            for (int j = 0; j < keys; j++) bad += !near(s[j * ld + i], r[j * ld + i], 1e-6);
            /* when the running max moved to this tile, its largest score's probability is exactly 1 */
            if (m[i] > m_old[i]) {
                int ones = 0;
                for (int j = 0; j < keys; j++) ones += s[j * ld + i] == 1.0f;
                exact_one += ones == 0;
                maxes++;
            }
        }
        for (int j = 0; j < keys; j++)
            for (int i = n; i < ld; i++) outside += s[j * ld + i] != SENTINEL;
        free(s), free(r), free(m), free(l), free(al), free(m2), free(l2), free(al2), free(m_old);
    }
    CHECK(bad == 0, "%s: softmax_cols differs from scalar at %d values", t->name, bad);
    CHECK(outside == 0, "%s: softmax_cols wrote %d values outside the tile", t->name, outside);
    CHECK(exact_one == 0, "%s: softmax_cols gave %d column maxima a probability other than exactly 1", t->name, exact_one);
    CHECK(maxes > 100, "softmax_cols: only %d columns exercised the new-maximum case", maxes);
}

static void test_rows(const dfa__cpu_kernels *t) {
    const dfa__cpu_kernels *ref = dfa__cpu_kernels_scalar();
    int bad = 0, outside = 0;
    for (int rep = 0; rep < 150; rep++) {
        const int rows = tl_rand_int(1, 50), cols = tl_rand_int(1, 70), ld = cols + tl_rand_int(0, 7);
        const int delta = rep % 3 == 0 ? DFA__NO_MASK : tl_rand_int(-cols, cols + 2);
        const float c = (float)(0.05 + 0.3 * tl_rand_uniform());
        float *s = randv((size_t)rows * ld), *p = randv((size_t)rows * ld), *bias = randv((size_t)rows),
              *dsum = randv((size_t)rows), *f = randv((size_t)rows);
        for (int i = 0; i < rows; i++) {
            bias[i] = rep % 5 == 0 && i % 3 == 0 ? INFINITY : bias[i] * 3.0f; /* +inf: a row of zeros */
            for (int j = cols; j < ld; j++) s[i * ld + j] = p[i * ld + j] = SENTINEL;
        }
        float *s1 = malloc(sizeof(float) * rows * ld), *s2 = malloc(sizeof(float) * rows * ld);
        /* exp2_rows */
        memcpy(s1, s, sizeof(float) * rows * ld), memcpy(s2, s, sizeof(float) * rows * ld);
        t->exp2_rows(s1, ld, rows, cols, c, bias, delta);
        ref->exp2_rows(s2, ld, rows, cols, c, bias, delta);
        for (int i = 0; i < rows; i++) {
            for (int j = 0; j < cols; j++) {
                bad += !near(s1[i * ld + j], s2[i * ld + j], 1e-6);
                if (isinf(bias[i])) bad += s1[i * ld + j] != 0.0f;
                if (j - i > delta) bad += s1[i * ld + j] != 0.0f;
            }
            for (int j = cols; j < ld; j++) outside += s1[i * ld + j] != SENTINEL;
        }
        /* dsoftmax_rows and scale_rows: the same operations, so the same bits */
        memcpy(s1, s, sizeof(float) * rows * ld), memcpy(s2, s, sizeof(float) * rows * ld);
        t->dsoftmax_rows(s1, p, ld, rows, cols, dsum);
        ref->dsoftmax_rows(s2, p, ld, rows, cols, dsum);
        bad += memcmp(s1, s2, sizeof(float) * rows * ld) != 0;
        memcpy(s1, s, sizeof(float) * rows * ld), memcpy(s2, s, sizeof(float) * rows * ld);
        t->scale_rows(s1, ld, rows, cols, f);
        ref->scale_rows(s2, ld, rows, cols, f);
        bad += memcmp(s1, s2, sizeof(float) * rows * ld) != 0;
        /* transpose: exact, nothing outside */
        const int ldd = rows + tl_rand_int(0, 5);
        float *d1 = filled((size_t)cols * ldd, SENTINEL), *d2 = filled((size_t)cols * ldd, SENTINEL);
        t->transpose(rows, cols, s, ld, d1, ldd);
        ref->transpose(rows, cols, s, ld, d2, ldd);
        bad += memcmp(d1, d2, sizeof(float) * cols * ldd) != 0;
        /* rowdot: against scalar, and rounded exactly like one element of this table's gemm_nn */
        const int n = tl_rand_int(0, 260);
        float *a = randv((size_t)rows * (n + 1)), *b = randv((size_t)rows * (n + 1));
        float *o1 = malloc(sizeof(float) * rows), *o2 = malloc(sizeof(float) * rows);
        t->rowdot(rows, n, a, n + 1, b, n + 1, o1);
        ref->rowdot(rows, n, a, n + 1, b, n + 1, o2);
        for (int i = 0; i < rows; i++) {
            double mag = 0;
            for (int k = 0; k < n; k++) mag += fabs((double)a[i * (n + 1) + k] * b[i * (n + 1) + k]);
            bad += !(fabs((double)o1[i] - o2[i]) <= 2.0 * (n + 2) * U * mag + 1e-30);
            float g;
            t->gemm_nn(1, 1, n, a + i * (n + 1), n + 1, b + i * (n + 1), 1, &g, 1);
            bad += memcmp(&g, &o1[i], sizeof g) != 0;
        }
        free(a), free(b), free(o1), free(o2), free(d1), free(d2);
        free(s), free(p), free(bias), free(dsum), free(f), free(s1), free(s2);
    }
    CHECK(bad == 0, "%s: %d row-operation results differ from scalar (or a mask/+inf row not zero)", t->name, bad);
    CHECK(outside == 0, "%s: row operations wrote %d values outside the tile", t->name, outside);
}

/* Storage conversions: the same bits as src/common/dtype.h, specials included. */
/* softcap_rows against float64 tanh (of the same rounded product a * x): the capped value
   within a few ulps, the derivative within a few units of 1, infinities to +-c with
   derivative 0, NaN kept, nothing written outside the tile; mul_rows exact. */
static void test_softcap(const dfa__cpu_kernels *t) {
    int bad = 0, outside = 0, special = 0, mul_bad = 0;
    for (int rep = 0; rep < 80; rep++) {
        const int rows = tl_rand_int(1, 9), cols = tl_rand_int(1, 70), ld = cols + tl_rand_int(0, 5);
        const float c = (float)(0.5 + 60.0 * tl_rand_uniform()), a = (float)(0.05 + tl_rand_uniform()) / c;
        float *x = malloc(sizeof(float) * (size_t)rows * ld), *dt = malloc(sizeof(float) * (size_t)rows * ld);
        float *x0 = malloc(sizeof(float) * (size_t)rows * ld);
        for (int i = 0; i < rows * ld; i++) {
            const double mag = pow(10.0, -6.0 + 8.0 * tl_rand_uniform()); /* 1e-6 .. 1e2 times c */
            x0[i] = (j_in(i, ld, cols) ? (float)((tl_rand_uniform() < 0.5 ? -1 : 1) * mag * c) : SENTINEL);
            dt[i] = SENTINEL;
        }
        if (rep % 4 == 0) x0[0] = INFINITY, x0[(rows - 1) * ld] = -INFINITY;
        if (rep % 4 == 1) x0[0] = NAN;
        if (rep % 4 == 2) x0[0] = 0.0f;
        memcpy(x, x0, sizeof(float) * (size_t)rows * ld);
        t->softcap_rows(x, rep % 5 == 4 ? NULL : dt, ld, rows, cols, a, c);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < ld; j++) {
                const int at = i * ld + j;
                if (j >= cols) {
                    outside += x[at] != SENTINEL || dt[at] != SENTINEL;
                    continue;
                }
                const double th = tanh((double)(a * x0[at])), want = (double)c * th;
                if (isnan(x0[at])) {
                    special += !isnan(x[at]);
                    continue;
                }
                if (isinf(x0[at])) special += x[at] != (x0[at] > 0 ? c : -c) || (rep % 5 != 4 && dt[at] != 0.0f);
                bad += !(fabs(x[at] - want) <= 8 * U * fabs(want) + 1e-38);
                if (rep % 5 != 4) bad += !(fabs(dt[at] - (1.0 - th * th)) <= 16 * U);
                else outside += dt[at] != SENTINEL;
            }
        float *y = randv((size_t)rows * ld), *z = malloc(sizeof(float) * (size_t)rows * ld);
        memcpy(z, x0, sizeof(float) * (size_t)rows * ld);
        t->mul_rows(z, y, ld, rows, cols);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < ld; j++) {
                const int at = i * ld + j;
                const float want = j < cols ? x0[at] * y[at] : x0[at];
                mul_bad += memcmp(&z[at], &want, sizeof want) != 0;
            }
        free(x); free(dt); free(x0); free(y); free(z);
    }
    CHECK(bad == 0, "%s softcap_rows: %d values off", t->name, bad);
    CHECK(special == 0, "%s softcap_rows: %d infinities or NaNs mishandled", t->name, special);
    CHECK(outside == 0, "%s softcap_rows: %d values written outside the tile", t->name, outside);
    CHECK(mul_bad == 0, "%s mul_rows: %d values not x * y exactly", t->name, mul_bad);
}

static void test_convert(const dfa__cpu_kernels *t) {
    const dfa__cpu_kernels *ref = dfa__cpu_kernels_scalar();
    static const dfa_dtype types[] = {DFA_BF16, DFA_F16, DFA_F32};
    int bad = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int rep = 0; rep < 40; rep++) {
            const dfa_dtype ty = types[ti];
            const int n = tl_rand_int(0, 100);
            const size_t es = ty == DFA_F32 ? 4 : 2;
            float *x = malloc(sizeof(float) * (n + 1)), *y1 = malloc(sizeof(float) * (n + 1)),
                  *y2 = malloc(sizeof(float) * (n + 1));
            unsigned char *h1 = malloc(es * (n + 1)), *h2 = malloc(es * (n + 1));
            for (int i = 0; i < n; i++) {
                uint32_t u = (uint32_t)tl_rand_u64(); /* any bit pattern: NaNs, infinities, denormals */
                if (rep % 2) { /* or ordinary values, some exactly halfway between two bf16 values */
                    const float f = (float)tl_rand_normal();
                    memcpy(&u, &f, 4);
                    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;
                }
                memcpy(&x[i], &u, 4);
            }
            memset(h1, 0x5a, es * (n + 1)), memset(h2, 0x5a, es * (n + 1));
            t->store_f32(ty, x, h1, n);
            ref->store_f32(ty, x, h2, n);
            bad += memcmp(h1, h2, es * (n + 1)) != 0;
            memset(y1, 0x5a, sizeof(float) * (n + 1)), memset(y2, 0x5a, sizeof(float) * (n + 1));
            t->load_f32(ty, h2, y1, n);
            ref->load_f32(ty, h2, y2, n);
            bad += memcmp(y1, y2, sizeof(float) * (n + 1)) != 0;
            free(x), free(y1), free(y2), free(h1), free(h2);
        }
    CHECK(bad == 0, "%s: %d storage conversions differ from dtype.h's bits", t->name, bad);
}

int main(void) {
    tl_init("test_kernels");
    const dfa__cpu_kernels *tables[] = {dfa__cpu_kernels_avx512(), dfa__cpu_kernels_avx2(), dfa__cpu_kernels_scalar()};
    int tested = 0;
    for (int i = 0; i < 3; i++) {
        const dfa__cpu_kernels *t = tables[i];
        if (!t) continue;
        if (!dfa__cpu_kernels_usable(t)) {
            printf("  %s: compiled in, but this processor lacks it: skipped\n", t->name);
            continue;
        }
        test_gemm(t);
        test_exp2(t);
        test_softmax_cols(t);
        test_rows(t);
        test_softcap(t);
        test_convert(t);
        tested++;
    }
    printf("tables tested: %d; in use: %s\n", tested, dfa_cpu_isa());
    return tl_finish("test_kernels");
}
