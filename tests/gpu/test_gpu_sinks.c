/* Attention sinks on the device (dfa_attn_fwd_cuda / dfa_attn_bwd_cuda with d->sinks and
 * d->dsinks) against the float64 oracle, the naive same-precision path and the CPU library,
 * on fresh random inputs with poisoned outputs: causal, sliding windows, documents, GQA/MQA,
 * rows that see no key (o = 0 and lse = the sink exactly), every forward kernel the device has,
 * atomic and deterministic dq; o the same bits with lse = NULL and with the caller's scratch;
 * dsinks the same bits on every run, and dq, dk, dv the same bits with dsinks = NULL.
 * Tolerance: twice the error of a naive same-precision computation plus a small absolute
 * term (as tests/cpu); dsinks also allows a few standard deviations of the moves that rounding
 * o to the storage type makes in each row's D (tests/cpu/test_features.c).
 * DFA_GPU_TEST_SMALL=1 runs a few tiny cases (for compute-sanitizer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/launch.h"
#include "gpu_util.h"
#include "oracle.h"
#include "testlib.h"
#include "distflash_cuda.h"

static int cc;

static double close_tol(const char *what, const char *kernel, const dfa_attn_desc *d, const void *got,
                        const void *naive, const double *ref, int64_t n) {
    const dfa_dtype t = d->dtype;
    const double err = tl_max_err(t, got, ref, n), naive_err = tl_max_err(t, naive, ref, n);
    const double tol = tl_tolerance(t, what[0] == 'd' ? TL_GRADIENT : TL_OUTPUT, naive_err, ref, n);
    CHECK(err <= tol, "%s [%s]: max error %.3g > tol %.3g (naive %.3g) for %s", what, kernel, err, tol, naive_err,
          tl_desc_str(d));
    return tol;
}

/* The dsinks budget: the core's rule on the naive float32 dsinks, plus four standard deviations
   of sum_i p_i (dD_i), where rounding o moves D_i = dout_i . o_i by about u |dout_i o_i|. */
static double dsinks_tol(const dfa_attn_desc *d, const float *naive, const double *ref, const double *fdo,
                         const double *oref, const double *lref) {
    const int H = d->num_heads, S = d->seqlen_q, Dv = d->head_dim;
    const double u = d->dtype == DFA_F16 ? 0x1p-11 : 0x1p-8;
    double spread = 0;
    for (int h = 0; h < H; h++) {
        double s2 = 0;
        for (int b = 0; b < d->batch; b++)
            for (int i = 0; i < S; i++) {
                const double p = exp(d->sinks[h] - lref[((int64_t)b * H + h) * S + i]);
                double r2 = 0;
                for (int c = 0; c < Dv; c++) {
                    const int64_t e = (((int64_t)b * S + i) * H + h) * Dv + c;
                    r2 += fdo[e] * oref[e] * fdo[e] * oref[e];
                }
                s2 += p * p * r2;
            }
        spread = fmax(spread, 4 * u * sqrt(s2));
    }
    return tl_tolerance(d->dtype, TL_GRADIENT, tl_max_err(DFA_F32, naive, ref, H), ref, H) + spread;
}

typedef struct {
    int b, sq, sk, h, hkv, d;
    dfa_dtype t;
    int causal;
    long long qs, ks;
    int docs;       /* random packed documents */
    int window;     /* DFA_FLAG_WINDOW with window_left = window - 1, window_right = 0 (causal) or window */
} scase;

static void check_sinks_case(const scase *c) {
    const dfa_dtype t = c->t;
    const size_t es = tl_dtype_size(t);
    dfa_attn_desc d = tl_desc(c->b, c->sq, c->sk, c->h, c->hkv, c->d, t, c->causal, c->qs, c->ks);
    const int H = d.num_heads;
    const int64_t nq = (int64_t)d.batch * d.seqlen_q * H * d.head_dim;
    const int64_t nk = (int64_t)d.batch * d.seqlen_k * d.num_kv_heads * d.head_dim;
    const int64_t nl = (int64_t)d.batch * H * d.seqlen_q;
    float *sinks = malloc(sizeof(float) * (size_t)H);
    for (int h = 0; h < H; h++) sinks[h] = (float)(8.0 * tl_rand_uniform() - 3.0); /* barely felt to dominant */
    int32_t *qdoc = NULL, *kdoc = NULL;
    if (c->docs) { /* one sequence (sq == sk, no offsets): the same ids on both sides */
        qdoc = malloc(sizeof(int32_t) * (size_t)d.batch * d.seqlen_q);
        for (int b = 0; b < d.batch; b++) tl_random_docs(qdoc + (size_t)b * d.seqlen_q, d.seqlen_q, d.seqlen_q / 4 > 0 ? d.seqlen_q / 4 : 1);
        kdoc = qdoc;
    }
    d.q_doc = qdoc;
    d.k_doc = kdoc;
    if (c->window) {
        d.flags |= DFA_FLAG_WINDOW;
        d.window_left = c->window - 1;
        d.window_right = c->causal ? 0 : c->window;
    }
    d.sinks = sinks;

    void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk), *dout = tl_alloc(t, nq);
    tl_fill_normal(t, q, nq, 1.0 + tl_rand_uniform());
    tl_fill_normal(t, k, nk, 1.0);
    tl_fill_normal(t, v, nk, 1.0);
    tl_fill_normal(t, dout, nq, 1.0);
    double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk), *fdo = tl_to_f64(t, dout, nq);
    double *oref = malloc(8 * (size_t)nq), *lref = malloc(8 * (size_t)nl);
    double *gq = malloc(8 * (size_t)nq), *gk = malloc(8 * (size_t)nk), *gv = malloc(8 * (size_t)nk), *gs = malloc(8 * (size_t)H);
    oracle_fwd(&d, fq, fk, fv, oref, lref);
    oracle_bwd_all(&d, fq, fk, fv, fdo, gq, gk, gv, gs);
    void *on = tl_alloc(t, nq), *nq_ = tl_alloc(t, nq), *nk_ = tl_alloc(t, nk), *nv_ = tl_alloc(t, nk);
    float *dsn = malloc(sizeof(float) * (size_t)H);
    naive_fwd_lowp(&d, q, k, v, on);
    naive_bwd_lowp_all(&d, q, k, v, dout, nq_, nk_, nv_, dsn);

    /* the device descriptor: the same with device pointers */
    dfa_attn_desc dd = d;
    dd.sinks = dev_copy_of(sinks, sizeof(float) * (size_t)H);
    if (qdoc) dd.q_doc = dd.k_doc = dev_copy_of(qdoc, sizeof(int32_t) * (size_t)d.batch * d.seqlen_q);
    float *dsd = dev_alloc(sizeof(float) * (size_t)H);
    void *qd = dev_copy_of(q, (size_t)nq * es), *kd = dev_copy_of(k, (size_t)nk * es), *vd = dev_copy_of(v, (size_t)nk * es);
    void *dod = dev_copy_of(dout, (size_t)nq * es), *od = dev_alloc((size_t)nq * es);
    void *dqd = dev_alloc((size_t)nq * es), *dkd = dev_alloc((size_t)nk * es), *dvd = dev_alloc((size_t)nk * es);
    float *ld = dev_alloc(4 * (size_t)nl);
    void *o = tl_alloc(t, nq), *o2 = tl_alloc(t, nq);
    float *lse = malloc(4 * (size_t)nl);

    const int wgmma = cc == 90 && (d.head_dim == 64 || d.head_dim == 128 || d.head_dim == 256);
    static const char *names[2] = {"mma", "wgmma"};
    static const int fams[2] = {DFA__FAMILY_MMA, DFA__FAMILY_WGMMA};
    for (int kern = 0; kern < 1 + wgmma; kern++) {
        dfa__cuda_force_family(fams[kern]);
        /* plain, lse = NULL, the caller's scratch */
        for (int rep = 0; rep < 3; rep++) {
            dev_poison(od, (size_t)nq * es);
            dev_poison(ld, 4 * (size_t)nl);
            const size_t sb = rep == 2 ? dfa_attn_fwd_cuda_scratch_bytes(&dd) : 0;
            void *scr = sb ? dev_alloc(sb) : NULL;
            if (scr) dev_poison(scr, sb);
            const dfa_status st = rep == 2   ? dfa_attn_fwd_cuda_with_scratch(&dd, qd, kd, vd, od, NULL, scr, sb, 0)
                                  : rep == 1 ? dfa_attn_fwd_cuda(&dd, qd, kd, vd, od, NULL, 0)
                                             : dfa_attn_fwd_cuda(&dd, qd, kd, vd, od, ld, 0);
            CHECK(st == DFA_OK, "fwd [%s, rep %d] failed: %s (%s) for %s", names[kern], rep, dfa_status_string(st),
                  dfa_last_error(), tl_desc_str(&d));
            CUDA_OK(cudaDeviceSynchronize());
            if (scr) CUDA_OK(cudaFree(scr));
            to_host(rep ? o2 : o, od, (size_t)nq * es);
            if (rep == 0) to_host(lse, ld, 4 * (size_t)nl);
            if (rep)
                CHECK(!memcmp(o, o2, (size_t)nq * es), "fwd [%s] with %s gives another o for %s", names[kern],
                      rep == 1 ? "lse = NULL" : "the caller's scratch and lse = NULL", tl_desc_str(&d));
        }
        CHECK(tl_count_nan(t, o, nq) == 0, "fwd [%s] left o unwritten/NaN for %s", names[kern], tl_desc_str(&d));
        close_tol("o", names[kern], &d, o, on, oref, nq);
        int lbad = 0, empty = 0, empty_bad = 0;
        for (int64_t i = 0; i < nl; i++) {
            const int h = (int)((i / d.seqlen_q) % H);
            if (lref[i] == (double)sinks[h]) {
                /* a row that sees no key (any visible key adds a weight the float64 oracle keeps):
                   lse is the sink exactly and o is 0 */
                empty++;
                const int64_t b = i / ((int64_t)H * d.seqlen_q), r = i % d.seqlen_q;
                const int64_t first = ((b * d.seqlen_q + r) * H + h) * d.head_dim;
                empty_bad += lse[i] != sinks[h];
                for (int cc2 = 0; cc2 < d.head_dim; cc2++) empty_bad += tl_get(t, o, first + cc2) != 0.0;
            } else {
                lbad += !(fabs(lse[i] - lref[i]) <= 2e-5 * (1.0 + fabs(lref[i])));
            }
        }
        CHECK(lbad == 0, "lse [%s]: %d rows off the oracle for %s", names[kern], lbad, tl_desc_str(&d));
        CHECK(empty_bad == 0, "rows that see no key [%s]: %d values not o = 0, lse = sink for %s", names[kern],
              empty_bad, tl_desc_str(&d));
        if (c->qs < c->ks && c->causal)
            CHECK(empty > 0, "the case has no row that sees nothing (%s)", tl_desc_str(&d));
    }
    dfa__cuda_force_family(DFA__FAMILY_AUTO);

    /* backward from the checked forward (the default family's o and lse) */
    CHECK(dfa_attn_fwd_cuda(&dd, qd, kd, vd, od, ld, 0) == DFA_OK, "fwd failed: %s", dfa_last_error());
    void *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nk), *x = tl_alloc(t, nq > nk ? nq : nk);
    float *ds = malloc(sizeof(float) * (size_t)H), *ds2 = malloc(sizeof(float) * (size_t)H);
    const double tol_ds = dsinks_tol(&d, dsn, gs, fdo, oref, lref);
    for (int run = 0; run < 4; run++) {
        const int det = run & 1, bk = run >> 1;
        if (bk && !wgmma) continue;
        dfa__cuda_force_family(fams[bk]);
        char kname[64];
        snprintf(kname, sizeof kname, "%s, %s dq", names[bk], det ? "deterministic" : "atomic");
        dfa_attn_desc db = dd;
        db.flags = (dd.flags & ~DFA_FLAG_DETERMINISTIC) | (det ? DFA_FLAG_DETERMINISTIC : 0u);
        db.dsinks = dsd;
        for (int rep = 0; rep < 2; rep++) { /* dsinks twice: the same bits */
            dev_poison(dqd, (size_t)nq * es);
            dev_poison(dkd, (size_t)nk * es);
            dev_poison(dvd, (size_t)nk * es);
            dev_poison(dsd, sizeof(float) * (size_t)H);
            const dfa_status st = dfa_attn_bwd_cuda(&db, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, 0);
            CHECK(st == DFA_OK, "bwd [%s] failed: %s (%s) for %s", kname, dfa_status_string(st), dfa_last_error(),
                  tl_desc_str(&d));
            to_host(rep ? ds2 : ds, dsd, sizeof(float) * (size_t)H);
        }
        CHECK(!memcmp(ds, ds2, sizeof(float) * (size_t)H), "dsinks [%s] differ between two runs for %s", kname,
              tl_desc_str(&d));
        to_host(dq, dqd, (size_t)nq * es);
        to_host(dk, dkd, (size_t)nk * es);
        to_host(dv, dvd, (size_t)nk * es);
        CHECK(tl_count_nan(t, dq, nq) == 0 && tl_count_nan(t, dk, nk) == 0 && tl_count_nan(t, dv, nk) == 0 &&
                  tl_count_nan(DFA_F32, ds, H) == 0,
              "bwd [%s] left gradients unwritten/NaN for %s", kname, tl_desc_str(&d));
        close_tol("dq", kname, &d, dq, nq_, gq, nq);
        close_tol("dk", kname, &d, dk, nk_, gk, nk);
        close_tol("dv", kname, &d, dv, nv_, gv, nk);
        double err = 0;
        for (int h = 0; h < H; h++) err = fmax(err, fabs(ds[h] - gs[h]));
        CHECK(err <= tol_ds, "dsinks [%s]: max error %.3g > tol %.3g for %s", kname, err, tol_ds, tl_desc_str(&d));
        /* without dsinks: dk, dv (and the deterministic dq) the same bits */
        db.dsinks = NULL;
        dev_poison(dsd, sizeof(float) * (size_t)H);
        CHECK(dfa_attn_bwd_cuda(&db, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, 0) == DFA_OK, "bwd [%s] without dsinks: %s",
              kname, dfa_last_error());
        to_host(x, dkd, (size_t)nk * es);
        int same = !memcmp(x, dk, (size_t)nk * es);
        to_host(x, dvd, (size_t)nk * es);
        same &= !memcmp(x, dv, (size_t)nk * es);
        if (det) {
            to_host(x, dqd, (size_t)nq * es);
            same &= !memcmp(x, dq, (size_t)nq * es);
        }
        to_host(ds2, dsd, sizeof(float) * (size_t)H);
        CHECK(same && tl_count_nan(DFA_F32, ds2, H) == H,
              "bwd [%s] without dsinks: other gradients, or dsinks written, for %s", kname, tl_desc_str(&d));
    }
    dfa__cuda_force_family(DFA__FAMILY_AUTO);

    CUDA_OK(cudaFree((void *)dd.sinks));
    if (qdoc) CUDA_OK(cudaFree((void *)dd.q_doc));
    CUDA_OK(cudaFree(dsd)); CUDA_OK(cudaFree(qd)); CUDA_OK(cudaFree(kd)); CUDA_OK(cudaFree(vd)); CUDA_OK(cudaFree(dod));
    CUDA_OK(cudaFree(od)); CUDA_OK(cudaFree(dqd)); CUDA_OK(cudaFree(dkd)); CUDA_OK(cudaFree(dvd)); CUDA_OK(cudaFree(ld));
    free(sinks); free(qdoc); free(q); free(k); free(v); free(dout); free(fq); free(fk); free(fv); free(fdo);
    free(oref); free(lref); free(gq); free(gk); free(gv); free(gs); free(on); free(nq_); free(nk_); free(nv_); free(dsn);
    free(o); free(o2); free(lse); free(dq); free(dk); free(dv); free(x); free(ds); free(ds2);
}

static const scase small_cases[] = {
    {1, 40, 40, 4, 2, 64, DFA_BF16, 1, 0, 23, 0, 0}, /* rows 0..22 see no key */
    {1, 33, 33, 2, 1, 128, DFA_F16, 1, 0, 0, 1, 0},
    {1, 30, 30, 2, 2, 40, DFA_BF16, 1, 0, 0, 0, 5},
};

static const scase cases[] = {
    {1, 300, 300, 8, 2, 64, DFA_BF16, 1, 0, 0, 0, 0},     /* causal, GQA */
    {2, 128, 160, 4, 4, 128, DFA_F16, 1, 0, 40, 0, 0},    /* causal, the first 40 rows see nothing */
    {1, 257, 257, 4, 1, 128, DFA_F16, 1, 0, 0, 0, 33},    /* sliding window, MQA */
    {1, 200, 200, 2, 2, 64, DFA_BF16, 0, 0, 0, 0, 17},    /* two-sided window */
    {2, 500, 500, 4, 2, 128, DFA_BF16, 1, 0, 0, 1, 0},    /* documents, causal, GQA */
    {1, 300, 300, 2, 1, 96, DFA_F16, 0, 0, 0, 1, 0},      /* documents, not causal (mma.sync only) */
    {1, 1000, 1000, 2, 2, 256, DFA_BF16, 1, 0, 0, 0, 0},  /* head dim 256 */
    {2, 17, 1000, 3, 3, 8, DFA_BF16, 1, 983, 0, 0, 0},
};

int main(void) {
    tl_init("test_gpu_sinks");
    if (!have_gpu()) return 77; /* ctest: skipped */
    cc = device_cc();
    const char *sm = getenv("DFA_GPU_TEST_SMALL");
    const int small = sm && *sm == '1';
    const scase *list = small ? small_cases : cases;
    const int n = small ? (int)(sizeof small_cases / sizeof small_cases[0]) : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        check_sinks_case(&list[i]);
        printf("  sinks case %d done\n", i);
        fflush(stdout);
    }
    return tl_finish("test_gpu_sinks");
}
