/* AVX-512 tile kernels (AVX512F/DQ/VL/BW; compiled for that ISA only, picked at run time).
 *
 * The GEMMs are register-blocked outer products on unpacked operands: for each
 * k, NV vectors of 16 floats of row k of B are loaded once and multiplied by MB
 * broadcast elements of A into an MB x NV block of accumulators held in
 * registers for the whole K loop (6 x 4 or 8 x 3 blocks: 24 accumulators of the
 * 32 zmm registers). The last vector of a block is masked, so any N works
 * without reading past a row. A is read by broadcasts only, so A and A^T cost
 * the same: that is what lets the attention passes avoid packing K and V.
 */
#include <stddef.h>

#include "kernels.h"

#if defined(DFA_X86_SIMD) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__AVX512BW__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../common/dtype.h"

#define AI static inline __attribute__((always_inline))
#define W 16 /* floats per vector */

/* ---- exp2 ---------------------------------------------------------------- */

/* 2^x to about 1.3 ulp for x <= 128: 2^round(x) * p(x - round(x)), p a degree-6
   near-minimax polynomial on [-1/2, 1/2]. Results below 2^-126 are flushed to
   exactly 0 (no denormals reach the GEMMs; exp2(-inf) = 0). */
AI __m512 exp2v(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.546144485e-04f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.340042800e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618056938e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550327152e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402265072e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471825e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    return _mm512_maskz_scalef_ps(live, p, n);
}

/* tanh(x) to about 2 ulp: x + x^3 p(x^2) for |x| < 0.625, p of degree 4 fitted to tanh by
   weighted least squares on [0, 0.625] (relative error under 1 ulp there), else
   sign(x) (1 - 2 / (exp(2|x|) + 1)) with |x| clamped at 10, where tanh rounds to 1 (no
   cancellation: tanh >= 0.55 there). NaN stays NaN. */
AI __m512 tanhv(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 ax = _mm512_abs_ps(x), y = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.718962755e-03f);
    p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(2.065312490e-02f));
    p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(-5.374465883e-02f));
    p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.333151311e-01f));
    p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(-3.333328664e-01f));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, y), p, x);
    const __m512 u = _mm512_min_ps(ax, _mm512_set1_ps(10.0f));
    const __m512 e = exp2v(_mm512_mul_ps(u, _mm512_set1_ps(2.8853900817779268f))); /* exp(2u) */
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big),
                                              _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
    const __m512 r = _mm512_mask_mov_ps(big, _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), small);
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

AI __mmask16 tail_mask(int n) { return n >= W ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* ---- GEMM micro-kernels -------------------------------------------------- */

/* C[MB][16*NV] (+)= A . B[K][16*NV] with A[r][k] at A + r*lda + k (TA = 0) or
   A + k*lda + r (TA = 1). The last vector of each row uses mask lm. MB <= 8 and
   NV <= 4 are compile-time constants after inlining; the accumulators are named
   variables (not an array) so that the compiler keeps all of them in registers. */
#define CLD(r, v) (!acc ? _mm512_setzero_ps() : (v) == NV - 1 ? _mm512_maskz_loadu_ps(lm, C + (r) * ldc + (v) * W) \
                                                              : _mm512_loadu_ps(C + (r) * ldc + (v) * W))
#define CST(r, v)                                                                                          \
    do {                                                                                                   \
        if ((v) == NV - 1)                                                                                 \
            _mm512_mask_storeu_ps(C + (r) * ldc + (v) * W, lm, c##r##v);                                  \
        else                                                                                               \
            _mm512_storeu_ps(C + (r) * ldc + (v) * W, c##r##v);                                            \
    } while (0)
#define ROW_INIT(r)                                                                                        \
    if (MB > r) {                                                                                          \
        if (NV > 0) c##r##0 = CLD(r, 0);                                                                   \
        if (NV > 1) c##r##1 = CLD(r, 1);                                                                   \
        if (NV > 2) c##r##2 = CLD(r, 2);                                                                   \
        if (NV > 3) c##r##3 = CLD(r, 3);                                                                   \
    }
#define ROW_FMA(r)                                                                                         \
    if (MB > r) {                                                                                          \
        const __m512 a = _mm512_set1_ps(TA ? A[k * lda + r] : A[r * lda + k]);                             \
        if (NV > 0) c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                                             \
        if (NV > 1) c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);                                             \
        if (NV > 2) c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);                                             \
        if (NV > 3) c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3);                                             \
    }
#define ROW_STORE(r)                                                                                       \
    if (MB > r) {                                                                                          \
        if (NV > 0) CST(r, 0);                                                                             \
        if (NV > 1) CST(r, 1);                                                                             \
        if (NV > 2) CST(r, 2);                                                                             \
        if (NV > 3) CST(r, 3);                                                                             \
    }
#define BLD(v) ((v) == NV - 1 ? _mm512_maskz_loadu_ps(lm, bk + (v) * W) : _mm512_loadu_ps(bk + (v) * W))

AI void micro(const int MB, const int NV, const int TA, int acc, int K, const float *A, long lda,
              const float *B, long ldb, float *C, long ldc, __mmask16 lm) {
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
    __m512 c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
    __m512 c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
    __m512 c60 = z, c61 = z, c62 = z, c63 = z, c70 = z, c71 = z, c72 = z, c73 = z;
    ROW_INIT(0) ROW_INIT(1) ROW_INIT(2) ROW_INIT(3) ROW_INIT(4) ROW_INIT(5) ROW_INIT(6) ROW_INIT(7)
    for (int k = 0; k < K; k++) {
        const float *bk = B + k * ldb;
        __m512 b0 = z, b1 = z, b2 = z, b3 = z;
        if (NV > 0) b0 = BLD(0);
        if (NV > 1) b1 = BLD(1);
        if (NV > 2) b2 = BLD(2);
        if (NV > 3) b3 = BLD(3);
        ROW_FMA(0) ROW_FMA(1) ROW_FMA(2) ROW_FMA(3) ROW_FMA(4) ROW_FMA(5) ROW_FMA(6) ROW_FMA(7)
    }
    ROW_STORE(0) ROW_STORE(1) ROW_STORE(2) ROW_STORE(3) ROW_STORE(4) ROW_STORE(5) ROW_STORE(6) ROW_STORE(7)
}

typedef void (*micro_fn)(int acc, int K, const float *A, long lda, const float *B, long ldb, float *C, long ldc,
                         __mmask16 lm);

#define MICRO(TA, MB, NV)                                                                                   \
    static void micro_##TA##_##MB##_##NV(int acc, int K, const float *A, long lda, const float *B, long ldb,  \
                                         float *C, long ldc, __mmask16 lm) {                                  \
        micro(MB, NV, TA, acc, K, A, lda, B, ldb, C, ldc, lm);                                                \
    }
#define MICRO_ROWS(TA, NV)                                                                                  \
    MICRO(TA, 1, NV) MICRO(TA, 2, NV) MICRO(TA, 3, NV) MICRO(TA, 4, NV) MICRO(TA, 5, NV) MICRO(TA, 6, NV)  \
    MICRO(TA, 7, NV) MICRO(TA, 8, NV)
MICRO_ROWS(0, 1) MICRO_ROWS(0, 2) MICRO_ROWS(0, 3)
MICRO_ROWS(1, 1) MICRO_ROWS(1, 2) MICRO_ROWS(1, 3)
MICRO(0, 1, 4) MICRO(0, 2, 4) MICRO(0, 3, 4) MICRO(0, 4, 4) MICRO(0, 5, 4) MICRO(0, 6, 4)
MICRO(1, 1, 4) MICRO(1, 2, 4) MICRO(1, 3, 4) MICRO(1, 4, 4) MICRO(1, 5, 4) MICRO(1, 6, 4)

#define ROWS8(TA, NV)                                                                                       \
    {NULL, micro_##TA##_1_##NV, micro_##TA##_2_##NV, micro_##TA##_3_##NV, micro_##TA##_4_##NV,             \
     micro_##TA##_5_##NV, micro_##TA##_6_##NV, micro_##TA##_7_##NV, micro_##TA##_8_##NV}
#define ROWS6(TA, NV)                                                                                       \
    {NULL, micro_##TA##_1_##NV, micro_##TA##_2_##NV, micro_##TA##_3_##NV, micro_##TA##_4_##NV,             \
     micro_##TA##_5_##NV, micro_##TA##_6_##NV, NULL, NULL}

/* [TA][NV][MB] */
static const micro_fn micro_tab[2][5][9] = {
    {{NULL}, ROWS8(0, 1), ROWS8(0, 2), ROWS8(0, 3), ROWS6(0, 4)},
    {{NULL}, ROWS8(1, 1), ROWS8(1, 2), ROWS8(1, 3), ROWS6(1, 4)},
};

/* Columns in 64-wide panels (6-row blocks) when N is a multiple of 64, else in
   48-wide panels (8-row blocks) with a narrower masked last panel. K is cut
   into slices of KC so that a panel of B stays in L1; the slices are summed in
   order, so the bits depend on the shapes only. */
#define KC 256

static void gemm(int TA, int acc, int M, int N, int K, const float *A, long lda, const float *B, long ldb,
                 float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!acc)
            for (int i = 0; i < M; i++) memset(C + i * ldc, 0, sizeof(float) * (size_t)N);
        return;
    }
    const int wide = N % 64 == 0;
    for (int n0 = 0; n0 < N;) {
        const int rem = N - n0;
        const int nv = wide ? 4 : rem >= 48 ? 3 : (rem + W - 1) / W;
        const int mbmax = nv == 4 ? 6 : 8;
        const int ncols = rem < nv * W ? rem : nv * W;
        const __mmask16 lm = tail_mask(ncols - (nv - 1) * W);
        for (int k0 = 0; k0 < K; k0 += KC) {
            const int kc = K - k0 < KC ? K - k0 : KC;
            const float *Ak = TA ? A + k0 * lda : A + k0;
            const float *Bk = B + k0 * ldb + n0;
            for (int m0 = 0; m0 < M; m0 += mbmax) {
                const int mb = M - m0 < mbmax ? M - m0 : mbmax;
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

/* Transposes the 16 x 16 block r[] in registers (r[i] = row i in, r[j] = column j out). */
AI void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4q + s]: in 128-bit lane L, column 4L + s of rows 4q..4q+3 */
    for (int q = 0; q < 16; q += 4) {
        const __m512d a = _mm512_castps_pd(t[q]), b = _mm512_castps_pd(t[q + 1]);
        const __m512d c = _mm512_castps_pd(t[q + 2]), d = _mm512_castps_pd(t[q + 3]);
        r[q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int s = 0; s < 4; s++) {
        const __m512 v0 = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x88), w0 = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xdd);
        const __m512 v1 = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x88);
        const __m512 w1 = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xdd);
        t[s] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        t[s + 8] = _mm512_shuffle_f32x4(v0, v1, 0xdd);
        t[s + 4] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        t[s + 12] = _mm512_shuffle_f32x4(w0, w1, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* dst[j][i] = src[i][j]: 16 x 16 blocks through registers, masked edges. */
static void transpose(int rows, int cols, const float *src, int lds, float *dst, int ldd) {
    for (int i0 = 0; i0 < rows; i0 += 16) {
        const int ni = rows - i0 < 16 ? rows - i0 : 16;
        for (int j0 = 0; j0 < cols; j0 += 16) {
            const int nj = cols - j0 < 16 ? cols - j0 : 16;
            const __mmask16 mj = tail_mask(nj), mi = tail_mask(ni);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < ni ? _mm512_maskz_loadu_ps(mj, src + (long)(i0 + i) * lds + j0) : _mm512_setzero_ps();
            transpose16(r);
            for (int j = 0; j < nj; j++) _mm512_mask_storeu_ps(dst + (long)(j0 + j) * ldd + i0, mi, r[j]);
        }
    }
}

/* C = A . B^T: B is transposed in slices into a small buffer, then the NN kernel runs. */
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

static float exp2_affine_sum(float *x, int n, float a, float b) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += W) {
        const __mmask16 lm = tail_mask(n - i);
        const __m512 p = _mm512_maskz_mov_ps(lm, exp2v(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(lm, x + i), va, vb)));
        _mm512_mask_storeu_ps(x + i, lm, p);
        sum = _mm512_add_ps(sum, p);
    }
    return _mm512_reduce_add_ps(sum);
}

static void softmax_cols(float *st, int ld, int keys, int n, float c, int delta, float *m, float *l,
                         float *alpha) {
    const __m512 vc = _mm512_set1_ps(c), ninf = _mm512_set1_ps(-INFINITY);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int i0 = 0; i0 < n; i0 += W) {
        const __mmask16 lm = tail_mask(n - i0);
        const __m512i iv = _mm512_add_epi32(lane, _mm512_set1_epi32(i0));
        /* key j is visible to column i iff i >= j - delta; no mask when even column i0 sees every key */
        const int masked = keys - 1 - i0 > delta;
        __m512 mx = ninf;
        for (int j = 0; j < keys; j++) {
            __m512 s = _mm512_maskz_loadu_ps(lm, st + (long)j * ld + i0);
            if (masked) s = _mm512_mask_mov_ps(ninf, _mm512_cmpge_epi32_mask(iv, _mm512_set1_epi32(j - delta)), s);
            mx = _mm512_max_ps(mx, s);
        }
        const __m512 m_old = _mm512_maskz_loadu_ps(lm, m + i0);
        const __m512 m_new = _mm512_max_ps(m_old, _mm512_mul_ps(mx, vc));
        const __m512 m_use = _mm512_mask_mov_ps(m_new, _mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ), _mm512_setzero_ps());
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < keys; j++) {
            float *row = st + (long)j * ld + i0;
            /* rounded product first, so that the largest score gets exactly exp2(0) = 1 */
            __m512 p = exp2v(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(lm, row), vc), m_use));
            if (masked) p = _mm512_maskz_mov_ps(_mm512_cmpge_epi32_mask(iv, _mm512_set1_epi32(j - delta)), p);
            _mm512_mask_storeu_ps(row, lm, p);
            sum = _mm512_add_ps(sum, p);
        }
        const __m512 a = exp2v(_mm512_sub_ps(m_old, m_use));
        _mm512_mask_storeu_ps(alpha + i0, lm, a);
        _mm512_mask_storeu_ps(l + i0, lm, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lm, l + i0), a, sum));
        _mm512_mask_storeu_ps(m + i0, lm, m_new);
    }
}

static void exp2_rows(float *s, int ld, int rows, int cols, float c, const float *bias, int delta) {
    const __m512 vc = _mm512_set1_ps(c);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int i = 0; i < rows; i++) {
        float *row = s + (long)i * ld;
        const __m512 b = _mm512_set1_ps(bias[i]);
        /* visible: j <= i + delta */
        const long last = (long)i + delta;
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __mmask16 lm = tail_mask(cols - j0);
            __m512 p = exp2v(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(lm, row + j0), vc, b));
            if (last < j0 + W - 1) {
                const int lim = last < j0 ? -1 : (int)(last - j0);
                p = _mm512_maskz_mov_ps(_mm512_cmple_epi32_mask(lane, _mm512_set1_epi32(lim)), p);
            }
            _mm512_mask_storeu_ps(row + j0, lm, p);
        }
    }
}

static void dsoftmax_rows(float *dp, const float *p, int ld, int rows, int cols, const float *dsum) {
    for (int i = 0; i < rows; i++) {
        const __m512 d = _mm512_set1_ps(dsum[i]);
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __mmask16 lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(lm, dp + at), d);
            _mm512_mask_storeu_ps(dp + at, lm, _mm512_mul_ps(_mm512_maskz_loadu_ps(lm, p + at), x));
        }
    }
}

static void softcap_rows(float *s, float *dt, int ld, int rows, int cols, float a, float c) {
    const __m512 va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c), one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < rows; i++)
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __mmask16 lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            const __m512 t = tanhv(_mm512_mul_ps(_mm512_maskz_loadu_ps(lm, s + at), va));
            _mm512_mask_storeu_ps(s + at, lm, _mm512_mul_ps(vc, t));
            if (dt) _mm512_mask_storeu_ps(dt + at, lm, _mm512_mul_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t)));
        }
}

static void mul_rows(float *x, const float *y, int ld, int rows, int cols) {
    for (int i = 0; i < rows; i++)
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __mmask16 lm = tail_mask(cols - j0);
            const long at = (long)i * ld + j0;
            _mm512_mask_storeu_ps(x + at, lm,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(lm, x + at), _mm512_maskz_loadu_ps(lm, y + at)));
        }
}

static void scale_rows(float *x, int ld, int rows, int cols, const float *s) {
    for (int i = 0; i < rows; i++) {
        const __m512 f = _mm512_set1_ps(s[i]);
        for (int j0 = 0; j0 < cols; j0 += W) {
            const __mmask16 lm = tail_mask(cols - j0);
            float *p = x + (long)i * ld + j0;
            _mm512_mask_storeu_ps(p, lm, _mm512_mul_ps(_mm512_maskz_loadu_ps(lm, p), f));
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

/* bf16 <-> float32 sixteen at a time (the same integer rounding as dtype.h); other types as dtype.h. */
static void load_f32(dfa_dtype t, const void *src, float *dst, int64_t n) {
    if (t != DFA_BF16) {
        dfa__load_f32(t, src, dst, n);
        return;
    }
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i += W) {
        const __mmask16 lm = tail_mask(n - i > W ? W : (int)(n - i));
        const __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, s + i)), 16);
        _mm512_mask_storeu_ps(dst + i, lm, _mm512_castsi512_ps(w));
    }
}

static void store_f32(dfa_dtype t, const float *src, void *dst, int64_t n) {
    if (t != DFA_BF16) {
        dfa__store_f32(t, src, dst, n);
        return;
    }
    uint16_t *d = dst;
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (int64_t i = 0; i < n; i += W) {
        const __mmask16 lm = tail_mask(n - i > W ? W : (int)(n - i));
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(lm, src + i));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
        _mm256_mask_storeu_epi16(d + i, lm, _mm512_cvtepi32_epi16(r));
    }
}

static const dfa__cpu_kernels table = {
    .name = "avx512",
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

const dfa__cpu_kernels *dfa__cpu_kernels_avx512(void) { return &table; }

#else /* the compiler could not target AVX-512 */

const dfa__cpu_kernels *dfa__cpu_kernels_avx512(void) { return NULL; }

#endif
