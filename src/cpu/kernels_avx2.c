/* AVX2 + FMA tile kernels (compiled for that ISA only, picked at run time).
 *
 * Same design as the AVX-512 table with 8-float vectors and 16 registers:
 * GEMM blocks of 6 rows x 2 vectors (12 accumulators, 2 B vectors, 1
 * broadcast), the last vector of a block masked so that any N works.
 */
#include <stddef.h>

#include "kernels.h"

#if defined(DFA_X86_SIMD) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../common/dtype.h"

#define AI static inline __attribute__((always_inline))
#define W 8 /* floats per vector */

/* Lanes [0, n) on (n >= 8: all). */
AI __m256i tail_mask(int n) {
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - (n < 8 ? n : 8)));
}

/* 2^x to about 1.3 ulp for x <= 127 (same polynomial as the AVX-512 table);
   results below 2^-126 are exactly 0 and exp2(-inf) = 0. */
AI __m256 exp2v(__m256 x) {
    const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.546144485e-04f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.340042800e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618056938e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550327152e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402265072e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931471825e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
    const __m256i ni = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-126.0f)), _mm256_set1_ps(127.0f)));
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(p, scale), live);
}

/* tanh(x) to about 2 ulp (same method as the AVX-512 table): x + x^3 p(x^2) for |x| < 0.625,
   p of degree 4 fitted to tanh by weighted least squares on [0, 0.625] (relative error under
   1 ulp there), else sign(x) (1 - 2 / (exp(2|x|) + 1)) with |x| clamped at 10, where tanh
   rounds to 1. NaN stays NaN. */
AI __m256 tanhv(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x), y = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.718962755e-03f);
    p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(2.065312490e-02f));
    p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(-5.374465883e-02f));
    p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(1.333151311e-01f));
    p = _mm256_fmadd_ps(p, y, _mm256_set1_ps(-3.333328664e-01f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, y), p, x);
    const __m256 u = _mm256_min_ps(ax, _mm256_set1_ps(10.0f));
    const __m256 e = exp2v(_mm256_mul_ps(u, _mm256_set1_ps(2.8853900817779268f))); /* exp(2u) */
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_or_ps(big, _mm256_and_ps(x, sign));
    const __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* ---- GEMM micro-kernels -------------------------------------------------- */

/* C[MB][8*NV] (+)= A . B[K][8*NV]; A[r][k] at A + r*lda + k (TA = 0) or A + k*lda + r (TA = 1).
   The last vector of each row uses lane mask lm. MB <= 6, NV <= 2; named accumulators
   (not an array) so that the compiler keeps them in registers. */
#define CLD(r, v) (!acc ? _mm256_setzero_ps() : (v) == NV - 1 ? _mm256_maskload_ps(C + (r) * ldc + (v) * W, lm) \
                                                              : _mm256_loadu_ps(C + (r) * ldc + (v) * W))
#define CST(r, v)                                                                                          \
    do {                                                                                                   \
        if ((v) == NV - 1)                                                                                 \
            _mm256_maskstore_ps(C + (r) * ldc + (v) * W, lm, c##r##v);                                     \
        else                                                                                               \
            _mm256_storeu_ps(C + (r) * ldc + (v) * W, c##r##v);                                            \
    } while (0)
#define ROW_INIT(r)                                                                                        \
    if (MB > r) {                                                                                          \
        if (NV > 0) c##r##0 = CLD(r, 0);                                                                   \
        if (NV > 1) c##r##1 = CLD(r, 1);                                                                   \
    }
#define ROW_FMA(r)                                                                                         \
    if (MB > r) {                                                                                          \
        const __m256 a = _mm256_broadcast_ss(TA ? A + k * lda + r : A + r * lda + k);                      \
        if (NV > 0) c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                                             \
        if (NV > 1) c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                                             \
    }
#define ROW_STORE(r)                                                                                       \
    if (MB > r) {                                                                                          \
        if (NV > 0) CST(r, 0);                                                                             \
        if (NV > 1) CST(r, 1);                                                                             \
    }
#define BLD(v) ((v) == NV - 1 ? _mm256_maskload_ps(bk + (v) * W, lm) : _mm256_loadu_ps(bk + (v) * W))

AI void micro(const int MB, const int NV, const int TA, int acc, int K, const float *A, long lda,
              const float *B, long ldb, float *C, long ldc, __m256i lm) {
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
    ROW_INIT(0) ROW_INIT(1) ROW_INIT(2) ROW_INIT(3) ROW_INIT(4) ROW_INIT(5)
    for (int k = 0; k < K; k++) {
        const float *bk = B + k * ldb;
        __m256 b0 = z, b1 = z;
        if (NV > 0) b0 = BLD(0);
        if (NV > 1) b1 = BLD(1);
        ROW_FMA(0) ROW_FMA(1) ROW_FMA(2) ROW_FMA(3) ROW_FMA(4) ROW_FMA(5)
    }
    ROW_STORE(0) ROW_STORE(1) ROW_STORE(2) ROW_STORE(3) ROW_STORE(4) ROW_STORE(5)
}

typedef void (*micro_fn)(int acc, int K, const float *A, long lda, const float *B, long ldb, float *C, long ldc,
                         __m256i lm);

#define MICRO(TA, MB, NV)                                                                                   \
    static void micro_##TA##_##MB##_##NV(int acc, int K, const float *A, long lda, const float *B, long ldb,  \
                                         float *C, long ldc, __m256i lm) {                                    \
        micro(MB, NV, TA, acc, K, A, lda, B, ldb, C, ldc, lm);                                                \
    }
#define MICRO_ROWS(TA, NV)                                                                                  \
    MICRO(TA, 1, NV) MICRO(TA, 2, NV) MICRO(TA, 3, NV) MICRO(TA, 4, NV) MICRO(TA, 5, NV) MICRO(TA, 6, NV)
MICRO_ROWS(0, 1) MICRO_ROWS(0, 2) MICRO_ROWS(1, 1) MICRO_ROWS(1, 2)

#define ROWS6(TA, NV)                                                                                       \
    {NULL, micro_##TA##_1_##NV, micro_##TA##_2_##NV, micro_##TA##_3_##NV, micro_##TA##_4_##NV,             \
     micro_##TA##_5_##NV, micro_##TA##_6_##NV}

/* [TA][NV][MB] */
static const micro_fn micro_tab[2][3][7] = {
    {{NULL}, ROWS6(0, 1), ROWS6(0, 2)},
    {{NULL}, ROWS6(1, 1), ROWS6(1, 2)},
};

#define KC 256 /* K slices summed in order: bits depend on the shapes only */

static void gemm(int TA, int acc, int M, int N, int K, const float *A, long lda, const float *B, long ldb,
                 float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc)
            for (int i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    for (int n0 = 0; n0 < N;) {
        const int rem = N - n0;
        const int nv = rem > W ? 2 : 1;
        const int ncols = rem < nv * W ? rem : nv * W;
        const __m256i lm = tail_mask(ncols - (nv - 1) * W);
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            const float *Ak = TA ? A + k0 * lda : A + k0;
            const float *Bk = B + k0 * ldb + n0;
            for (int m0 = 0; m0 < M; m0 += 6) {
                const int mb = M - m0 < 6 ? M - m0 : 6;
                micro_tab[TA][nv][mb](acc || k0 > 0, kc, TA ? Ak + m0 : Ak + m0 * lda, lda, Bk, ldb,
                                      C + m0 * ldc + n0, ldc, lm);
            }
        }
        n0 += ncols;
    }
}

static void gemm_nn(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    gemm(0, 0, M, N, K, A, lda, B, ldb, C, ldc);
}
static void gemm_nn_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc) {
    gemm(0, 1, M, N, K, A, lda, B, ldb, C, ldc);
}
static void gemm_tn_acc(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C,
                        int ldc) {
    gemm(1, 1, M, N, K, A, lda, B, ldb, C, ldc);
}

/* Transposes the 8 x 8 block r[] in registers. */
AI void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int q = 0; q < 8; q += 4) { /* u[q + s]: column s | column s + 4 of rows q..q+3 */
        u[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
        u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
        u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
        u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
    }
    for (int s = 0; s < 4; s++) {
        r[s] = _mm256_permute2f128_ps(u[s], u[s + 4], 0x20);
        r[s + 4] = _mm256_permute2f128_ps(u[s], u[s + 4], 0x31);
    }
}

static void transpose(int rows, int cols, const float *src, int lds, float *dst, int ldd) {
    for (int i0 = 0; i0 < rows; i0 += W) {
        const int ni = rows - i0 < W ? rows - i0 : W;
        const __m256i mi = tail_mask(ni);
        for (int j0 = 0; j0 < cols; j0 += W) {
            const int nj = cols - j0 < W ? cols - j0 : W;
            const __m256i mj = tail_mask(nj);
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i < ni ? _mm256_maskload_ps(src + (long)(i0 + i) * lds + j0, mj) : _mm256_setzero_ps();
            transpose8(r);
            for (int j = 0; j < nj; j++) _mm256_maskstore_ps(dst + (long)(j0 + j) * ldd + i0, mi, r[j]);
        }
    }
}

#define NT_KC 128
#define NT_NC 64
static void gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        gemm(0, 0, M, N, 0, A, lda, B, ldb, C, ldc);
        return;
    }
    float bt[NT_KC * NT_NC];
    for (int n0 = 0; n0 < N; n0 += NT_NC) {
        const int nc = N - n0 < NT_NC ? N - n0 : NT_NC;
        for (int k0 = 0; k0 < K; k0 += NT_KC) {
            const int kc = K - k0 < NT_KC ? K - k0 : NT_KC;
            transpose(nc, kc, B + (long)n0 * ldb + k0, ldb, bt, nc);
            gemm(0, k0 > 0, M, nc, kc, A + k0, lda, bt, nc, C + n0, ldc);
        }
    }
}

/* ---- element-wise tile operations ---------------------------------------- */

AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

static float exp2_affine_sum(float *x, int n, float a, float b) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    __m256 sum = _mm256_setzero_ps();
    for (int i = 0; i < n; i += W) {
        const __m256i lm = tail_mask(n - i);
        const __m256 p = _mm256_and_ps(exp2v(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, lm), va, vb)),
                                       _mm256_castsi256_ps(lm));
        _mm256_maskstore_ps(x + i, lm, p);
        sum = _mm256_add_ps(sum, p);
    }
    return hsum(sum);
}

/* Lanes i of column block i0 that see key j (i0 + lane >= j - delta), as a float mask. */
AI __m256 visible(__m256i iv, int j, int delta) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(iv, _mm256_set1_epi32(j - delta - 1)));
}

static void softmax_cols(float *st, int ld, int keys, int n, float c, int delta, float *m, float *l,
                         float *alpha) {
    const __m256 vc = _mm256_set1_ps(c), ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i0 = 0; i0 < n; i0 += W) {
        const __m256i lm = tail_mask(n - i0);
        const __m256i iv = _mm256_add_epi32(lane, _mm256_set1_epi32(i0));
        const int masked = keys - 1 - i0 > delta;
        __m256 mx = ninf;
        for (int j = 0; j < keys; j++) {
            __m256 s = _mm256_maskload_ps(st + (long)j * ld + i0, lm);
            if (masked) s = _mm256_blendv_ps(ninf, s, visible(iv, j, delta));
            mx = _mm256_max_ps(mx, s);
        }
        const __m256 m_old = _mm256_maskload_ps(m + i0, lm);
        const __m256 m_new = _mm256_max_ps(m_old, _mm256_mul_ps(mx, vc));
        const __m256 m_use = _mm256_andnot_ps(_mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ), m_new);
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < keys; j++) {
            float *row = st + (long)j * ld + i0;
            /* rounded product first, so that the largest score gets exactly exp2(0) = 1 */
            __m256 p = exp2v(_mm256_sub_ps(_mm256_mul_ps(_mm256_maskload_ps(row, lm), vc), m_use));
            if (masked) p = _mm256_and_ps(p, visible(iv, j, delta));
            _mm256_maskstore_ps(row, lm, p);
            sum = _mm256_add_ps(sum, p);
        }
        const __m256 a = exp2v(_mm256_sub_ps(m_old, m_use));
        _mm256_maskstore_ps(alpha + i0, lm, a);
        _mm256_maskstore_ps(l + i0, lm, _mm256_fmadd_ps(_mm256_maskload_ps(l + i0, lm), a, sum));
        _mm256_maskstore_ps(m + i0, lm, m_new);
    }
}

static void exp2_rows(float *s, int ld, int rows, int cols, float c, const float *bias, int delta) {
    const __m256 vc = _mm256_set1_ps(c);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i = 0; i < rows; i++) {
        float *row = s + (long)i * ld;
        const __m256 b = _mm256_set1_ps(bias[i]);
        const long last = (long)i + delta; /* visible: j <= last */
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __m256i lm = tail_mask(cols - j0);
            __m256 p = exp2v(_mm256_fmsub_ps(_mm256_maskload_ps(row + j0, lm), vc, b));
            if (last < j0 + W - 1) {
                const int lim = last < j0 ? -1 : (int)(last - j0);
                p = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(lim + 1), lane)));
            }
            _mm256_maskstore_ps(row + j0, lm, p);
        }
    }
}

static void dsoftmax_rows(float *dp, const float *p, int ld, int rows, int cols, const float *dsum) {
    for (int i = 0; i < rows; i++) {
        const __m256 d = _mm256_set1_ps(dsum[i]);
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __m256i lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            const __m256 x = _mm256_sub_ps(_mm256_maskload_ps(dp + at, lm), d);
            _mm256_maskstore_ps(dp + at, lm, _mm256_mul_ps(_mm256_maskload_ps(p + at, lm), x));
        }
    }
}

static void softcap_rows(float *s, float *dt, int ld, int rows, int cols, float a, float c) {
    const __m256 va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c), one = _mm256_set1_ps(1.0f);
    for (int i = 0; i < rows; i++)
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __m256i lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            const __m256 t = tanhv(_mm256_mul_ps(_mm256_maskload_ps(s + at, lm), va));
            _mm256_maskstore_ps(s + at, lm, _mm256_mul_ps(vc, t));
            if (dt) _mm256_maskstore_ps(dt + at, lm, _mm256_mul_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t)));
        }
}

static void mul_rows(float *x, const float *y, int ld, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __m256i lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            _mm256_maskstore_ps(x + at, lm, _mm256_mul_ps(_mm256_maskload_ps(x + at, lm), _mm256_maskload_ps(y + at, lm)));
        }
}

static void scale_rows(float *x, int ld, int rows, int cols, const float *s) {
    for (int i = 0; i < rows; i++) {
        const __m256 f = _mm256_set1_ps(s[i]);
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __m256i lm = tail_mask(cols - j0);
            float *p = x + (long)i * ld + j0;
            _mm256_maskstore_ps(p, lm, _mm256_mul_ps(_mm256_maskload_ps(p, lm), f));
        }
    }
}

/* A chain of fused multiply-adds per row, in k order: the same rounding as a GEMM lane. */
static void rowdot(int rows, int n, const float *a, int lda, const float *b, int ldb, float *out) {
    for (int i = 0; i < rows; i++) {
        float s = 0.0f;
        for (int k = 0; k < n; k++) s = fmaf(a[(long)i * lda + k], b[(long)i * ldb + k], s);
        out[i] = s;
    }
}

/* bf16 <-> float32 eight at a time (the same integer rounding as dtype.h); tails and
   other types as dtype.h. */
static void load_f32(dfa_dtype t, const void *src, float *dst, int64_t n) {
    int64_t i = 0;
    if (t == DFA_BF16) {
        const uint16_t *s = src;
        for (; i + W <= n; i += W) {
            const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16);
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
        }
    }
    dfa__load_f32(t, dfa__elem_c(t, src, i), dst + i, n - i);
}

static void store_f32(dfa_dtype t, const float *src, void *dst, int64_t n) {
    int64_t i = 0;
    if (t == DFA_BF16) {
        uint16_t *d = dst;
        const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
        for (; i + W <= n; i += W) {
            const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(src + i));
            /* |u| > inf as signed compare: both operands are non-negative */
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
            r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
            const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
            _mm_storeu_si128((__m128i *)(d + i), packed);
        }
    }
    dfa__store_f32(t, src + i, dfa__elem(t, dst, i), n - i);
}

static const dfa__cpu_kernels table = {
    .name = "avx2",
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

const dfa__cpu_kernels *dfa__cpu_kernels_avx2(void) { return &table; }

#else /* the compiler could not target AVX2 */

const dfa__cpu_kernels *dfa__cpu_kernels_avx2(void) { return NULL; }

#endif
