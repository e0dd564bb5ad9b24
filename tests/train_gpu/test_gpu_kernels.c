/* Each kernel of the GPU model (train/cuda/kernels.h) and the cuBLASLt wrapper (gemm.h) against
 * a plain CPU reference: the CPU model's own ops (train/model/ops.h, optim.h) on the same
 * bf16-rounded inputs, or float64 sums. Bounds: float32 math on identical inputs agrees to ~1e-5
 * relative; a bf16 output is within one bf16 rounding (2^-8 relative) of the float reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_train_util.h"
#include "testlib.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/model/ops.h"
#include "train/optim.h"

#define BF16_TOL (1.0 / 128) /* one rounding of a value, relative, with room for the float32 math */

static float *randn(size_t n, double sd) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(sd * tl_rand_normal());
    return p;
}
static uint16_t *to_bf(const float *x, size_t n) {
    uint16_t *b = malloc(2 * n);
    for (size_t i = 0; i < n; i++) b[i] = bf16_of(x[i]);
    return b;
}
static void round_all(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = round_bf16(x[i]);
}
/* The largest error of got against ref relative to a scale of each element's own plus floor:
   scale[i] (|ref[i]| or more), or |ref[i]| itself when scale is NULL. */
static double bf_err_scaled(const uint16_t *got, const float *ref, const float *scale, size_t n, double floor) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(f32_of(got[i]) - ref[i]) / ((scale ? scale[i] : fabs(ref[i])) + floor);
        if (!(e <= w)) w = e; /* NaN sticks */
    }
    return w;
}
/* largest |got - ref| / (|ref| + floor) over bf16 values got */
static double bf_err(const uint16_t *got, const float *ref, size_t n, double floor) {
    return bf_err_scaled(got, ref, NULL, n, floor);
}
static double f_err(const float *got, const float *ref, size_t n, double floor) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + floor);
        if (!(e <= w)) w = e;
    }
    return w;
}

static void test_embed(void) {
    int n = 777, d = 72;
    float *wte = randn(256 * (size_t)d, 1.0);
    uint8_t *tok = malloc(n);
    for (int r = 0; r < n; r++) tok[r] = (uint8_t)(r % 5 == 0 ? 7 : tl_rand_int(0, 255));
    float *dw = dcopy(wte, sizeof(float) * 256 * d);
    uint8_t *dt = dcopy(tok, n);
    uint16_t *dx = dmalloc(2 * (size_t)n * d), *hx = malloc(2 * (size_t)n * d);
    CUDA_OK(dftk_embed_fwd(dx, dw, dt, n, d, 0));
    hcopy(hx, dx, 2 * (size_t)n * d);
    int bad = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) bad += hx[(size_t)r * d + i] != bf16_of(wte[(size_t)tok[r] * d + i]);
    CHECK(bad == 0, "embedding forward: %d values are not bf16(wte[token])", bad);

    /* backward: counting sort, then the sums in row order */
    float *dres = randn((size_t)n * d, 1.0), *ref = calloc(256 * (size_t)d, sizeof(float));
    float *start = randn(256 * (size_t)d, 1.0);
    memcpy(ref, start, sizeof(float) * 256 * d);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++) ref[(size_t)tok[r] * d + i] += dres[(size_t)r * d + i];
    int off[257] = {0}, cnt[256] = {0}, *rows = malloc(sizeof(int) * n), at[256];
    for (int r = 0; r < n; r++) cnt[tok[r]]++;
    for (int v = 0; v < 256; v++) off[v + 1] = off[v] + cnt[v], at[v] = off[v];
    for (int r = 0; r < n; r++) rows[at[tok[r]]++] = r;
    float *dg = dcopy(start, sizeof(float) * 256 * d), *ddres = dcopy(dres, sizeof(float) * n * d);
    int *drows = dcopy(rows, sizeof(int) * n), *doff = dcopy(off, sizeof off);
    CUDA_OK(dftk_embed_bwd(dg, ddres, drows, doff, d, 0));
    float *got = malloc(sizeof(float) * 256 * d);
    hcopy(got, dg, sizeof(float) * 256 * d);
    double e = f_err(got, ref, 256 * (size_t)d, 1.0);
    CHECK(e < 1e-5, "embedding backward: error %.3g", e);
    cudaFree(dw), cudaFree(dt), cudaFree(dx), cudaFree(dg), cudaFree(ddres), cudaFree(drows), cudaFree(doff);
    free(wte), free(tok), free(hx), free(dres), free(ref), free(start), free(rows), free(got);
}

static void test_rmsnorm(int n, int d) {
    size_t nd = (size_t)n * d;
    float *x = randn(nd, 2.0), *gain = randn(d, 1.0), *dout = randn(nd, 1.0), *dx0 = randn(nd, 0.5);
    round_all(x, nd);
    float *out = malloc(sizeof(float) * nd), *rstd = malloc(sizeof(float) * n);
    dft_rmsnorm_fwd(out, rstd, x, gain, n, d, 1e-5f);
    uint16_t *xb = to_bf(x, nd), *dxb = dcopy(xb, 2 * nd), *dout_b = dmalloc(2 * nd), *hout = malloc(2 * nd);
    float *dgain_ = dcopy(gain, sizeof(float) * d), *drstd = dmalloc(sizeof(float) * n), *hrstd = malloc(sizeof(float) * n);
    CUDA_OK(dftk_rmsnorm_fwd(dout_b, drstd, dxb, dgain_, n, d, 1e-5f, 0));
    hcopy(hout, dout_b, 2 * nd);
    hcopy(hrstd, drstd, sizeof(float) * n);
    double e1 = bf_err(hout, out, nd, 1e-3), e2 = f_err(hrstd, rstd, n, 0);
    CHECK(e1 < BF16_TOL && e2 < 1e-4, "rmsnorm forward n %d d %d: out error %.3g, rstd error %.3g", n, d, e1, e2);

    /* backward with the GPU's rstd (the CPU's differs in the last bits) */
    float *refdx = malloc(sizeof(float) * nd), *refdg = randn(d, 1.0), *dg0 = malloc(sizeof(float) * d);
    memcpy(refdx, dx0, sizeof(float) * nd), memcpy(dg0, refdg, sizeof(float) * d);
    dft_rmsnorm_bwd(refdx, refdg, dout, x, hrstd, gain, n, d);
    float *ddx = dcopy(dx0, sizeof(float) * nd), *ddg = dcopy(dg0, sizeof(float) * d);
    float *ddout = dcopy(dout, sizeof(float) * nd);
    float *part = dmalloc(sizeof(float) * (size_t)dftk_rmsnorm_bwd_blocks(n) * d);
    uint16_t *ddxb = dmalloc(2 * nd);
    CUDA_OK(dftk_rmsnorm_bwd(ddx, ddxb, ddg, part, ddout, dxb, drstd, dgain_, n, d, 0));
    float *hdx = malloc(sizeof(float) * nd), *hdg = malloc(sizeof(float) * d);
    uint16_t *hdxb = malloc(2 * nd);
    hcopy(hdx, ddx, sizeof(float) * nd), hcopy(hdg, ddg, sizeof(float) * d), hcopy(hdxb, ddxb, 2 * nd);
    double e3 = f_err(hdx, refdx, nd, 1e-2), e4 = f_err(hdg, refdg, d, 1e-1);
    int mism = 0;
    for (size_t i = 0; i < nd; i++) mism += hdxb[i] != bf16_of(hdx[i]);
    CHECK(e3 < 1e-4 && e4 < 1e-4 && mism == 0, "rmsnorm backward n %d d %d: dx error %.3g, dgain error %.3g, %d bf16 copies wrong",
          n, d, e3, e4, mism);
    /* the same inputs give the same bits (no atomics) */
    float *ddx2 = dcopy(dx0, sizeof(float) * nd), *ddg2 = dcopy(dg0, sizeof(float) * d), *hdg2 = malloc(sizeof(float) * d);
    CUDA_OK(dftk_rmsnorm_bwd(ddx2, NULL, ddg2, part, ddout, dxb, drstd, dgain_, n, d, 0));
    hcopy(hdg2, ddg2, sizeof(float) * d);
    CHECK(memcmp(hdg2, hdg, sizeof(float) * d) == 0, "rmsnorm backward: dgain differs between two identical calls");
    cudaFree(dxb), cudaFree(dout_b), cudaFree(dgain_), cudaFree(drstd), cudaFree(ddx), cudaFree(ddg), cudaFree(ddout);
    cudaFree(part), cudaFree(ddxb), cudaFree(ddx2), cudaFree(ddg2);
    free(x), free(gain), free(dout), free(dx0), free(out), free(rstd), free(xb), free(hout), free(hrstd), free(refdx);
    free(refdg), free(dg0), free(hdx), free(hdg), free(hdxb), free(hdg2);
}

static void test_rope(void) {
    int batch = 2, rows = 50, heads = 3, hd = 64;
    size_t n = (size_t)batch * rows * heads * hd;
    int64_t pos[50];
    for (int r = 0; r < rows; r++) pos[r] = 1000000 + 3 * r; /* far positions: the tables keep the phase */
    float *c = malloc(sizeof(float) * rows * hd / 2), *s = malloc(sizeof(float) * rows * hd / 2);
    dft_rope_tables(c, s, pos, rows, hd, 10000.0f);
    float *dc = dcopy(c, sizeof(float) * rows * hd / 2), *ds = dcopy(s, sizeof(float) * rows * hd / 2);
    for (int inv = 0; inv < 2; inv++) {
        float *x = randn(n, 1.0);
        round_all(x, n);
        uint16_t *xb = to_bf(x, n), *dx = dcopy(xb, 2 * n), *got = malloc(2 * n);
        dft_rope(x, c, s, batch, rows, heads, hd, inv);
        CUDA_OK(dftk_rope(dx, dc, ds, (long)batch * rows, rows, heads, hd, inv, 0));
        hcopy(got, dx, 2 * n);
        double e = bf_err(got, x, n, 1e-2);
        CHECK(e < BF16_TOL, "rope %s: error %.3g", inv ? "backward" : "forward", e);
        cudaFree(dx), free(x), free(xb), free(got);
    }
    cudaFree(dc), cudaFree(ds), free(c), free(s);
}

/* n % 8 != 0: the scalar kernels, da over dg; n % 8 == 0: the 16-byte kernels, da and db over a and b
   (as the model calls them) */
static void test_swiglu(long n) {
    int vec = n % 8 == 0;
    float *a = randn(n, 2.0), *b = randn(n, 1.0), *dg = randn(n, 1.0);
    round_all(a, n), round_all(b, n), round_all(dg, n);
    float *g = malloc(sizeof(float) * n), *da = malloc(sizeof(float) * n), *db = malloc(sizeof(float) * n);
    dft_swiglu_fwd(g, a, b, n);
    dft_swiglu_bwd(da, db, dg, a, b, n);
    uint16_t *ab = to_bf(a, n), *bb = to_bf(b, n), *gb = to_bf(dg, n);
    uint16_t *d_a = dcopy(ab, 2 * n), *d_b = dcopy(bb, 2 * n), *d_dg = dcopy(gb, 2 * n), *d_g = dmalloc(2 * n);
    uint16_t *d_db = dmalloc(2 * n), *h = malloc(2 * n);
    CUDA_OK(dftk_swiglu_fwd(d_g, d_a, d_b, n, 0));
    hcopy(h, d_g, 2 * n);
    double e = bf_err(h, g, n, 1e-2);
    CHECK(e < BF16_TOL, "swiglu forward (n %ld): error %.3g", n, e);
    if (vec) CUDA_OK(dftk_swiglu_bwd(d_a, d_b, d_dg, d_a, d_b, n, 0));
    else CUDA_OK(dftk_swiglu_bwd(d_dg, d_db, d_dg, d_a, d_b, n, 0));
    hcopy(h, vec ? d_a : d_dg, 2 * n);
    double e1 = bf_err(h, da, n, 1e-2);
    hcopy(h, vec ? d_b : d_db, 2 * n);
    double e2 = bf_err(h, db, n, 1e-2);
    CHECK(e1 < BF16_TOL && e2 < BF16_TOL, "swiglu backward (n %ld): da error %.3g, db error %.3g", n, e1, e2);
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_dg), cudaFree(d_g), cudaFree(d_db);
    free(a), free(b), free(dg), free(g), free(da), free(db), free(ab), free(bb), free(gb), free(h);
}

static void test_cross_entropy(void) {
    int n = 1000;
    float *l = randn((size_t)n * 256, 3.0), *w = malloc(sizeof(float) * n);
    uint8_t *t = malloc(n), *am = malloc(n), *gam = malloc(n);
    for (int r = 0; r < n; r++) t[r] = (uint8_t)tl_rand_int(0, 255), w[r] = r % 7 == 0 ? 0.0f : (float)tl_rand_uniform() * 3;
    float *dl = dcopy(l, sizeof(float) * n * 256), *dw = dcopy(w, sizeof(float) * n);
    uint8_t *dt = dcopy(t, n), *dam = dmalloc(n);
    uint16_t *dgl = dmalloc(2 * (size_t)n * 256), *hg = malloc(2 * (size_t)n * 256);
    double *dnll = dmalloc(sizeof(double) * n), *hnll = malloc(sizeof(double) * n);
    double *dsum = dmalloc(sizeof(double) * (DFTK_SUM_BLOCKS + 1)), total = 0;
    CUDA_OK(dftk_cross_entropy(dgl, dnll, dam, dl, dt, dw, 0.01f, n, 0));
    CUDA_OK(dftk_sum_f64(dsum + DFTK_SUM_BLOCKS, dnll, n, dsum, 0));
    hcopy(&total, dsum + DFTK_SUM_BLOCKS, sizeof(double));
    hcopy(hg, dgl, 2 * (size_t)n * 256), hcopy(hnll, dnll, sizeof(double) * n), hcopy(gam, dam, n);
    double ref = dft_cross_entropy(l, t, w, 0.01f, n, 256, am); /* l becomes the gradient */
    CHECK(fabs(total - ref) <= 1e-5 * fabs(ref), "cross-entropy: loss %.9g, CPU %.9g", total, ref);
    double e = bf_err(hg, l, (size_t)n * 256, 1e-6);
    int wrong = 0;
    for (int r = 0; r < n; r++) wrong += am[r] != gam[r];
    CHECK(e < BF16_TOL && wrong == 0, "cross-entropy: dlogits error %.3g, %d argmax differ", e, wrong);
    cudaFree(dl), cudaFree(dw), cudaFree(dt), cudaFree(dam), cudaFree(dgl), cudaFree(dnll), cudaFree(dsum);
    free(l), free(w), free(t), free(am), free(gam), free(hg), free(hnll);
}

static void test_sums_and_adamw(void) {
    size_t n = 3000017;
    float *g = randn(n, 0.1);
    double ref = dft_sum_squares(g, n), got = 0;
    float *dg = dcopy(g, sizeof(float) * n);
    double *part = dmalloc(sizeof(double) * (DFTK_SUM_BLOCKS + 1));
    CUDA_OK(dftk_sum_f32(part + DFTK_SUM_BLOCKS, dg, n, 1, part, 0));
    hcopy(&got, part + DFTK_SUM_BLOCKS, sizeof got);
    CHECK(fabs(got - ref) <= 1e-10 * ref, "sum of squares %.17g, CPU %.17g", got, ref);
    /* clip factor: none, clipped, NaN */
    float *df = dmalloc(sizeof(float)), f = 0;
    const float norms[3] = {0.0f, 1.0f, 1e9f};
    for (int k = 0; k < 3; k++) {
        CUDA_OK(dftk_clip_factor(df, part + DFTK_SUM_BLOCKS, norms[k], 0));
        hcopy(&f, df, sizeof f);
        CHECK(f == dft_clip_factor(got, norms[k]), "clip factor %g for max norm %g, CPU %g", f, norms[k],
              dft_clip_factor(got, norms[k]));
    }
    /* AdamW: the CPU's bits, with and without a clip factor (the CPU scales first: dft_scale) */
    dft_adamw h = {0.9f, 0.95f, 1e-8f, 0.1f};
    for (int clipped = 0; clipped < 2; clipped++) {
        float *p = randn(n, 0.02), *m = randn(n, 0.01), *v = randn(n, 0.01);
        for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
        float *dp = dcopy(p, 4 * n), *dm = dcopy(m, 4 * n), *dv = dcopy(v, 4 * n), *gg = malloc(4 * n);
        uint16_t *dpb = dmalloc(2 * n), *hpb = malloc(2 * n);
        float factor = clipped ? 0.37f : 1.0f;
        CUDA_OK(cudaMemcpy(df, &factor, sizeof factor, cudaMemcpyHostToDevice));
        long t = 7;
        double c1 = 1.0 - pow((double)h.beta1, 7.0), c2 = 1.0 - pow((double)h.beta2, 7.0);
        CUDA_OK(dftk_adamw(dp, dpb, dg, dm, dv, n, df, h.beta1, h.beta2, h.eps, h.weight_decay, 3e-4f, c1, c2, 0));
        memcpy(gg, g, 4 * n);
        if (clipped) dft_scale(gg, n, factor);
        dft_adamw_update(p, gg, m, v, n, &h, 3e-4f, t, 1);
        float *hp = malloc(4 * n), *hm = malloc(4 * n), *hv = malloc(4 * n);
        hcopy(hp, dp, 4 * n), hcopy(hm, dm, 4 * n), hcopy(hv, dv, 4 * n), hcopy(hpb, dpb, 2 * n);
        size_t diff = 0, bfw = 0;
        for (size_t i = 0; i < n; i++) {
            diff += hp[i] != p[i] || hm[i] != m[i] || hv[i] != v[i];
            bfw += hpb[i] != bf16_of(hp[i]);
        }
        CHECK(diff == 0 && bfw == 0, "AdamW%s: %zu values differ from the CPU's, %zu bf16 copies wrong",
              clipped ? " (clipped)" : "", diff, bfw);
        cudaFree(dp), cudaFree(dm), cudaFree(dv), cudaFree(dpb);
        free(p), free(m), free(v), free(gg), free(hp), free(hm), free(hv), free(hpb);
    }
    /* cast */
    uint16_t *db = dmalloc(2 * n), *hb = malloc(2 * n);
    CUDA_OK(dftk_to_bf16(db, dg, n, 0));
    hcopy(hb, db, 2 * n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += hb[i] != bf16_of(g[i]);
    CHECK(bad == 0, "f32 -> bf16: %zu values not rounded to nearest even", bad);
    cudaFree(dg), cudaFree(part), cudaFree(df), cudaFree(db), free(g), free(hb);
}

/* row-major C = beta Cin + op(A) op(B) in float64 from bf16-rounded operands */
static void test_gemm(void) {
    dft_blas *b = NULL;
    char err[512];
    CHECK(dft_blas_create(&b, 0, 32 << 20, err, sizeof err) == 0, "dft_blas_create: %s", err);
    if (!b) return;
    /* shift: operands 16 bytes past a 256-byte boundary, as a weight inside the flat parameter array */
    const struct { int M, N, K, ta, tb, out; float beta; int shift; } cases[] = {
        {300, 136, 64, 0, 0, DFT_OUT_BF16, 0, 0}, {300, 64, 136, 0, 1, DFT_OUT_F32, 0, 0},
        {64, 136, 300, 1, 0, DFT_OUT_F32, 1, 0},  {300, 64, 136, 0, 1, DFT_OUT_F32, 1, 0},
        {256, 128, 512, 0, 0, DFT_OUT_BF16, 1, 0}, {256, 136, 512, 0, 0, DFT_OUT_BF16, 0, 1},
        {136, 256, 300, 1, 0, DFT_OUT_F32, 1, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int M = cases[k].M, N = cases[k].N, K = cases[k].K, ta = cases[k].ta, tb = cases[k].tb, f32 = cases[k].out;
        float beta = cases[k].beta;
        float *A = randn((size_t)M * K, 1.0), *B = randn((size_t)K * N, 1.0), *C0 = randn((size_t)M * N, 1.0);
        round_all(A, (size_t)M * K), round_all(B, (size_t)K * N), round_all(C0, (size_t)M * N);
        float *ref = malloc(sizeof(float) * M * N), *scale = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0.0;
                for (int q = 0; q < K; q++) {
                    double a = ta ? A[(size_t)q * M + i] : A[(size_t)i * K + q];
                    double bb = tb ? B[(size_t)j * K + q] : B[(size_t)q * N + j];
                    s += a * bb;
                }
                const double c = beta ? C0[(size_t)i * N + j] : 0.0;
                ref[(size_t)i * N + j] = (float)(s + c);
                /* an epilogue may round A B and beta C before it adds them: the error scales with
                   both terms, not with their sum, which can cancel to nearly zero */
                scale[(size_t)i * N + j] = (float)(fabs(s) + fabs(c));
            }
        uint16_t *Ab = to_bf(A, (size_t)M * K), *Bb = to_bf(B, (size_t)K * N), *Cb = to_bf(C0, (size_t)M * N);
        size_t sh = cases[k].shift ? 16 : 0;
        char *baseA = dmalloc(2 * (size_t)M * K + sh), *baseB = dmalloc(2 * (size_t)K * N + sh);
        void *dA = baseA + sh, *dB = baseB + sh;
        CUDA_OK(cudaMemcpy(dA, Ab, 2 * (size_t)M * K, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dB, Bb, 2 * (size_t)K * N, cudaMemcpyHostToDevice));
        void *dC = f32 ? dcopy(C0, 4 * (size_t)M * N) : dcopy(Cb, 2 * (size_t)M * N);
        int rc = dft_blas_gemm(b, M, N, K, dA, ta, dB, tb, dC, NULL, (dft_out_type)f32, beta, err, sizeof err);
        CHECK(rc == 0, "gemm %zu: %s", k, err);
        double e;
        if (f32) {
            float *h = malloc(4 * (size_t)M * N);
            hcopy(h, dC, 4 * (size_t)M * N);
            e = f_err(h, ref, (size_t)M * N, sqrt((double)K));
            free(h);
        } else {
            uint16_t *h = malloc(2 * (size_t)M * N);
            hcopy(h, dC, 2 * (size_t)M * N);
            e = bf_err_scaled(h, ref, scale, (size_t)M * N, sqrt((double)K) * 1e-2);
            free(h);
        }
        /* bf16 output on top of a bf16 C (the residual adds): measured against |A B| + |beta C|, as
           cuBLASLt's epilogue may round each term (against the sum alone the error reaches a few percent
           where the two cancel), with two roundings' room */
        const double tol = f32 ? 1e-4 : beta != 0 ? 2 * BF16_TOL : BF16_TOL;
        CHECK(e < tol, "gemm %d x %d x %d (trans %d %d, %s, beta %g, shift %zu): error %.3g", M, N,
              K, ta, tb, f32 ? "f32" : "bf16", beta, sh, e);
        cudaFree(baseA), cudaFree(baseB), cudaFree(dC);
        free(A), free(B), free(C0), free(ref), free(scale), free(Ab), free(Bb), free(Cb);
    }
    CHECK(dft_blas_gemm(b, 0, 4, 4, NULL, 0, NULL, 0, NULL, NULL, DFT_OUT_F32, 0, err, sizeof err) != 0 &&
              strstr(err, "shape"),
          "a bad matmul shape must be refused with a message: \"%s\"", err);
    dft_blas_destroy(b);
}

int main(void) {
    if (gpu_count() < 1) return printf("no CUDA device: skipped\n"), 77;
    tl_init("test_gpu_kernels");
    test_embed();
    test_rmsnorm(50, 100);  /* d % 8 != 0: the scalar kernels */
    test_rmsnorm(333, 200); /* the 16-byte kernels from here on */
    test_rmsnorm(5, 2048);
    test_rmsnorm(3, 16384); /* more than 48 KiB of shared memory for the column partials */
    test_rope();
    test_swiglu(100003);
    test_swiglu(100000);
    test_cross_entropy();
    test_sums_and_adamw();
    test_gemm();
    return tl_finish("test_gpu_kernels");
}
