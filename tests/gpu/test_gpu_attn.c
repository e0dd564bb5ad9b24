/* The CUDA forward, backward and merge against the float64 oracle and the CPU
 * library, on fresh random inputs with poisoned outputs: sequence lengths 1, 17,
 * 128, 1000, 4097; causal masks with offsets (rows that see nothing included);
 * GQA/MQA; every head-dim class; bf16 and f16; every forward kernel the device
 * has (mma.sync everywhere, wgmma for head dims 64/128 on sm_90), forward and
 * backward; atomic and deterministic dq. Tolerance: twice the error of a naive
 * same-precision computation plus a small absolute term (as tests/cpu).
 * DFA_GPU_TEST_SMALL=1 runs a few tiny cases (for compute-sanitizer);
 * DFA_GPU_TEST_KERNEL=mma|wgmma checks one family of kernels (forward and backward). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_values.h"
#include "oracle.h"
#include "testlib.h"
#include "distflash_cuda.h"
#include "gpu_util.h"

static int cc;
static const char *only_kernel; /* DFA_GPU_TEST_KERNEL=mma|wgmma: check one family of kernels */

/* max |got - ref| <= 2 * naive error + atol; returns the tolerance used */
static double check_close(const char *what, const char *kernel, const dfa_attn_desc *d, const void *got,
                          const void *naive, const double *ref, int64_t n) {
    const dfa_dtype t = d->dtype;
    const double err = tl_max_err(t, got, ref, n), naive_err = tl_max_err(t, naive, ref, n);
    const double tol = tl_tolerance(t, what[0] == 'd' ? TL_GRADIENT : TL_OUTPUT, naive_err, ref, n);
    CHECK(err <= tol, "%s [%s]: max error %.3g > tol %.3g (naive same-precision error %.3g) for %s", what, kernel, err,
          tol, naive_err, tl_desc_str(d));
    return tol;
}

/* The GPU result may differ from the CPU library's by the GPU's tolerance plus the CPU's own error. */
static void check_vs_cpu(const char *what, const char *kernel, const dfa_attn_desc *d, const void *got,
                         const void *cpu, const double *ref, int64_t n, double tol) {
    const dfa_dtype t = d->dtype;
    double diff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = fabs(tl_get(t, got, i) - tl_get(t, cpu, i));
        if (!(x <= diff)) diff = x; /* NaN sticks */
    }
    const double cpu_err = tl_max_err(t, cpu, ref, n);
    CHECK(diff <= tol + cpu_err, "%s [%s]: differs from the CPU library by %.3g (> %.3g) for %s", what, kernel, diff,
          tol + cpu_err, tl_desc_str(d));
}

static void check_case(const dfa_attn_desc *d, int with_bwd) {
    const dfa_dtype t = d->dtype;
    const size_t es = tl_dtype_size(t);
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim;
    const int64_t nl = (int64_t)d->batch * d->num_heads * d->seqlen_q;
    void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk), *o = tl_alloc(t, nq);
    void *o2 = tl_alloc(t, nq), *onaive = tl_alloc(t, nq), *ocpu = tl_alloc(t, nq);
    float *lse = malloc(4 * (size_t)nl), *lcpu = malloc(4 * (size_t)nl);
    tl_fill_normal(t, q, nq, 1.0 + tl_rand_uniform());
    tl_fill_normal(t, k, nk, 1.0);
    tl_fill_normal(t, v, nk, 1.0);

    double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk);
    double *oref = malloc(8 * (size_t)nq), *lref = malloc(8 * (size_t)nl);
    oracle_fwd(d, fq, fk, fv, oref, lref);
    naive_fwd_lowp(d, q, k, v, onaive);
    CHECK(dfa_attn_fwd(d, q, k, v, ocpu, lcpu) == DFA_OK, "CPU fwd failed: %s", dfa_last_error());

    void *qd = dev_copy_of(q, (size_t)nq * es), *kd = dev_copy_of(k, (size_t)nk * es), *vd = dev_copy_of(v, (size_t)nk * es);
    void *od = dev_alloc((size_t)nq * es);
    float *ld = dev_alloc(4 * (size_t)nl);

    const int wgmma_ok = cc == 90 && (d->head_dim == 64 || d->head_dim == 128);
    const char *kernels[2] = {"mma", "wgmma"};
    for (int kern = 0; kern < 1 + wgmma_ok; kern++) {
        if (only_kernel && strcmp(only_kernel, kernels[kern])) continue;
        setenv("DFA_CUDA_FWD_KERNEL", kernels[kern], 1);
        for (int rep = 0; rep < 2; rep++) {
            dev_poison(od, (size_t)nq * es);
            dev_poison(ld, 4 * (size_t)nl);
            dfa_status st = dfa_attn_fwd_cuda(d, qd, kd, vd, od, ld, 0);
            CHECK(st == DFA_OK, "fwd [%s] failed: %s (%s) for %s", kernels[kern], dfa_status_string(st), dfa_last_error(),
                  tl_desc_str(d));
            CUDA_OK(cudaGetLastError());
            to_host(rep ? o2 : o, od, (size_t)nq * es);
            if (rep == 0) to_host(lse, ld, 4 * (size_t)nl);
        }
        CHECK(!memcmp(o, o2, (size_t)nq * es), "fwd [%s] not reproducible bit for bit for %s", kernels[kern], tl_desc_str(d));
        CHECK(tl_count_nan(t, o, nq) == 0, "fwd [%s] left %lld elements of o unwritten/NaN for %s", kernels[kern],
              (long long)tl_count_nan(t, o, nq), tl_desc_str(d));
        const double tol = check_close("o", kernels[kern], d, o, onaive, oref, nq);
        check_vs_cpu("o", kernels[kern], d, o, ocpu, oref, nq, tol);
        int lse_bad = 0, masked_bad = 0;
        for (int64_t i = 0; i < nl; i++) {
            if (lref[i] == -INFINITY) {
                lse_bad += lse[i] != -INFINITY;
                const int64_t b = i / ((int64_t)d->num_heads * d->seqlen_q), h = (i / d->seqlen_q) % d->num_heads,
                              r = i % d->seqlen_q;
                const int64_t first = ((b * d->seqlen_q + r) * d->num_heads + h) * d->head_dim;
                for (int c = 0; c < d->head_dim; c++) masked_bad += tl_get(t, o, first + c) != 0.0;
            } else {
                lse_bad += !(fabs(lse[i] - lref[i]) <= 2e-5 * (1.0 + fabs(lref[i])));
            }
        }
        CHECK(lse_bad == 0, "lse [%s]: %d rows wrong for %s", kernels[kern], lse_bad, tl_desc_str(d));
        CHECK(masked_bad == 0, "fully masked rows [%s]: %d elements of o not exactly 0 for %s", kernels[kern], masked_bad,
              tl_desc_str(d));
        /* lse is optional */
        dev_poison(od, (size_t)nq * es);
        CHECK(dfa_attn_fwd_cuda(d, qd, kd, vd, od, NULL, 0) == DFA_OK, "fwd [%s] with lse = NULL failed: %s",
              kernels[kern], dfa_last_error());
        to_host(o2, od, (size_t)nq * es);
        CHECK(!memcmp(o, o2, (size_t)nq * es), "fwd [%s] with lse = NULL gives another o for %s", kernels[kern],
              tl_desc_str(d));
    }
    unsetenv("DFA_CUDA_FWD_KERNEL");

    if (with_bwd) {
        /* the backward reads the o and lse of a forward checked above */
        const int use_wgmma = wgmma_ok && !(only_kernel && !strcmp(only_kernel, "mma"));
        setenv("DFA_CUDA_FWD_KERNEL", use_wgmma ? "wgmma" : "mma", 1);
        dfa_status st = dfa_attn_fwd_cuda(d, qd, kd, vd, od, ld, 0);
        unsetenv("DFA_CUDA_FWD_KERNEL");
        CHECK(st == DFA_OK, "fwd failed: %s", dfa_last_error());
        void *dout = tl_alloc(t, nq), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nk);
        void *dq2 = tl_alloc(t, nq), *dk2 = tl_alloc(t, nk), *dv2 = tl_alloc(t, nk);
        void *nq_ = tl_alloc(t, nq), *nk_ = tl_alloc(t, nk), *nv_ = tl_alloc(t, nk);
        void *cq = tl_alloc(t, nq), *ck = tl_alloc(t, nk), *cv = tl_alloc(t, nk);
        tl_fill_normal(t, dout, nq, 1.0);
        double *fdo = tl_to_f64(t, dout, nq);
        double *gq = malloc(8 * (size_t)nq), *gk = malloc(8 * (size_t)nk), *gv = malloc(8 * (size_t)nk);
        oracle_bwd(d, fq, fk, fv, fdo, gq, gk, gv);
        naive_bwd_lowp(d, q, k, v, dout, nq_, nk_, nv_);
        CHECK(dfa_attn_bwd(d, q, k, v, ocpu, lcpu, dout, cq, ck, cv) == DFA_OK, "CPU bwd failed: %s", dfa_last_error());
        void *dod = dev_copy_of(dout, (size_t)nq * es);
        void *dqd = dev_alloc((size_t)nq * es), *dkd = dev_alloc((size_t)nk * es), *dvd = dev_alloc((size_t)nk * es);
        for (int run = 0; run < 4; run++) {
            const int det = run & 1, bk = run >> 1; /* dq path; backward kernel family */
            if (bk == 1 && !wgmma_ok) continue;
            if (only_kernel && strcmp(only_kernel, kernels[bk])) continue;
            setenv("DFA_CUDA_BWD_KERNEL", kernels[bk], 1);
            dfa_attn_desc d2 = *d;
            d2.flags = det ? DFA_FLAG_DETERMINISTIC : 0;
            char kname[64];
            snprintf(kname, sizeof kname, "%s, %s dq", kernels[bk], det ? "deterministic" : "atomic");
            for (int rep = 0; rep < 1 + det; rep++) {
                dev_poison(dqd, (size_t)nq * es);
                dev_poison(dkd, (size_t)nk * es);
                dev_poison(dvd, (size_t)nk * es);
                st = dfa_attn_bwd_cuda(&d2, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, 0);
                CHECK(st == DFA_OK, "bwd [%s] failed: %s (%s) for %s", kname, dfa_status_string(st), dfa_last_error(),
                      tl_desc_str(d));
                CUDA_OK(cudaGetLastError());
                to_host(rep ? dq2 : dq, dqd, (size_t)nq * es);
                to_host(rep ? dk2 : dk, dkd, (size_t)nk * es);
                to_host(rep ? dv2 : dv, dvd, (size_t)nk * es);
            }
            if (det)
                CHECK(!memcmp(dq, dq2, (size_t)nq * es) && !memcmp(dk, dk2, (size_t)nk * es) &&
                          !memcmp(dv, dv2, (size_t)nk * es),
                      "deterministic bwd gave different bits on a second run for %s", tl_desc_str(d));
            CHECK(tl_count_nan(t, dq, nq) == 0 && tl_count_nan(t, dk, nk) == 0 && tl_count_nan(t, dv, nk) == 0,
                  "bwd [%s] left unwritten/NaN gradients (dq %lld, dk %lld, dv %lld) for %s", kname,
                  (long long)tl_count_nan(t, dq, nq), (long long)tl_count_nan(t, dk, nk),
                  (long long)tl_count_nan(t, dv, nk), tl_desc_str(d));
            double tol = check_close("dq", kname, d, dq, nq_, gq, nq);
            check_vs_cpu("dq", kname, d, dq, cq, gq, nq, tol);
            tol = check_close("dk", kname, d, dk, nk_, gk, nk);
            check_vs_cpu("dk", kname, d, dk, ck, gk, nk, tol);
            tol = check_close("dv", kname, d, dv, nv_, gv, nk);
            check_vs_cpu("dv", kname, d, dv, cv, gv, nk, tol);
        }
        unsetenv("DFA_CUDA_BWD_KERNEL");
        CUDA_OK(cudaFree(dod)); CUDA_OK(cudaFree(dqd)); CUDA_OK(cudaFree(dkd)); CUDA_OK(cudaFree(dvd));
        free(dout); free(dq); free(dk); free(dv); free(dq2); free(dk2); free(dv2); free(nq_); free(nk_); free(nv_);
        free(cq); free(ck); free(cv); free(fdo); free(gq); free(gk); free(gv);
    }
    CUDA_OK(cudaFree(qd)); CUDA_OK(cudaFree(kd)); CUDA_OK(cudaFree(vd)); CUDA_OK(cudaFree(od)); CUDA_OK(cudaFree(ld));
    free(q); free(k); free(v); free(o); free(o2); free(onaive); free(ocpu); free(lse); free(lcpu);
    free(fq); free(fk); free(fv); free(oref); free(lref);
}

typedef struct {
    int b, sq, sk, h, hkv, d;
    dfa_dtype t;
    int causal;
    long long qs, ks;
    int bwd;
} shape;

static const shape small_cases[] = {
    {1, 17, 40, 4, 2, 64, DFA_BF16, 1, 23, 0, 1},
    {2, 33, 33, 2, 1, 128, DFA_F16, 1, 0, 0, 1},
    {1, 9, 70, 2, 2, 40, DFA_BF16, 0, 0, 0, 1},
    {1, 20, 20, 1, 1, 256, DFA_BF16, 1, 0, 0, 1},
};

static const shape cases[] = {
    /* lengths 1 .. 4097, every head-dim class (padded to 64/128/256 inside), GQA/MQA, offsets */
    {1, 1, 1, 2, 2, 64, DFA_BF16, 0, 0, 0, 1},
    {1, 1, 1, 2, 1, 128, DFA_F16, 1, 0, 0, 1},
    {3, 17, 17, 4, 1, 40, DFA_F16, 1, 0, 0, 1},
    {1, 17, 1000, 3, 3, 8, DFA_BF16, 1, 983, 0, 1},
    {2, 128, 128, 4, 2, 128, DFA_BF16, 1, 100, 150, 1}, /* the first 50 rows see nothing */
    {1, 128, 128, 8, 8, 64, DFA_F16, 0, 0, 0, 1},
    {1, 1000, 1000, 2, 2, 64, DFA_F16, 1, 0, 0, 1},
    {1, 1000, 128, 2, 1, 256, DFA_BF16, 0, 0, 0, 1},
    {1, 1000, 1000, 2, 1, 128, DFA_BF16, 1, 0, 0, 1},
    {2, 128, 1000, 8, 2, 136, DFA_F16, 1, 900, 0, 1},
    {1, 300, 517, 4, 2, 96, DFA_BF16, 1, 217, 0, 1},
    {1, 200, 300, 2, 2, 192, DFA_F16, 1, 50, 0, 1},
    {1, 130, 70, 2, 1, 248, DFA_BF16, 0, 0, 0, 1},
    {1, 64, 64, 2, 2, 128, DFA_BF16, 1, 5, 72, 1}, /* every row fully masked */
    {1, 64, 64, 2, 2, 64, DFA_F16, 1, 500, 0, 1},  /* every key visible */
    {1, 4097, 4097, 1, 1, 64, DFA_BF16, 1, 0, 0, 1},
    {1, 1000, 4097, 1, 1, 128, DFA_F16, 1, 3097, 0, 0},
    {1, 4097, 1000, 2, 2, 128, DFA_BF16, 0, 0, 0, 0},
};

/* Keys split into chunks, each forward on the device with its k_start, merged on the device,
   against one call over all keys; plus the merge of random partials against the CPU merge. */
static void test_merge(void) {
    for (int rep = 0; rep < 6; rep++) {
        const dfa_dtype t = rep % 2 ? DFA_BF16 : DFA_F16;
        const int sq = tl_rand_int(1, 150), sk = tl_rand_int(5, 400), H = 4, Hkv = rep % 3 ? 2 : 1;
        const int D = rep % 2 ? 64 : 8 * tl_rand_int(1, 32);
        const int causal = rep % 2;
        dfa_attn_desc full = tl_desc(1 + rep % 2, sq, sk, H, Hkv, D, t, causal, causal ? tl_rand_int(0, sk) : 0, 0);
        const size_t es = tl_dtype_size(t);
        const int64_t nq = (int64_t)full.batch * sq * H * D, nl = (int64_t)full.batch * H * sq;
        const int64_t nk = (int64_t)full.batch * sk * Hkv * D;
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk);
        tl_fill_normal(t, q, nq, 1.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nk, 1.0);
        void *qd = dev_copy_of(q, (size_t)nq * es);
        void *oacc = dev_alloc((size_t)nq * es), *opart = dev_alloc((size_t)nq * es), *oone = dev_alloc((size_t)nq * es);
        float *lacc = dev_alloc(4 * (size_t)nl), *lpart = dev_alloc(4 * (size_t)nl), *lone = dev_alloc(4 * (size_t)nl);
        void *kfull = dev_copy_of(k, (size_t)nk * es), *vfull = dev_copy_of(v, (size_t)nk * es);
        int ok = dfa_attn_fwd_cuda(&full, qd, kfull, vfull, oone, lone, 0) == DFA_OK;
        const int chunks = tl_rand_int(2, 5 < sk ? 5 : sk);
        const size_t row = (size_t)Hkv * D * es;
        for (int c = 0; c < chunks; c++) {
            const int k0 = sk * c / chunks, len = sk * (c + 1) / chunks - k0;
            if (len <= 0) continue;
            dfa_attn_desc part = full;
            part.seqlen_k = len;
            part.k_start = k0;
            char *kc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D), *vc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D);
            for (int b = 0; b < full.batch; b++) {
                memcpy(kc + (size_t)b * len * row, (char *)k + ((size_t)b * sk + k0) * row, (size_t)len * row);
                memcpy(vc + (size_t)b * len * row, (char *)v + ((size_t)b * sk + k0) * row, (size_t)len * row);
            }
            void *kcd = dev_copy_of(kc, (size_t)full.batch * len * row), *vcd = dev_copy_of(vc, (size_t)full.batch * len * row);
            ok &= dfa_attn_fwd_cuda(&part, qd, kcd, vcd, c ? opart : oacc, c ? lpart : lacc, 0) == DFA_OK;
            if (c) ok &= dfa_attn_merge_cuda(&full, oacc, lacc, opart, lpart, 0) == DFA_OK;
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaFree(kcd)); CUDA_OK(cudaFree(vcd));
            free(kc); free(vc);
        }
        CHECK(ok, "merge: a device call failed: %s", dfa_last_error());
        void *h_acc = tl_alloc(t, nq), *h_one = tl_alloc(t, nq);
        float *hl_acc = malloc(4 * (size_t)nl), *hl_one = malloc(4 * (size_t)nl);
        to_host(h_acc, oacc, (size_t)nq * es);
        to_host(h_one, oone, (size_t)nq * es);
        to_host(hl_acc, lacc, 4 * (size_t)nl);
        to_host(hl_one, lone, 4 * (size_t)nl);
        double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk);
        double *oref = malloc(8 * (size_t)nq), *lref = malloc(8 * (size_t)nl);
        oracle_fwd(&full, fq, fk, fv, oref, lref);
        const double e_one = tl_max_err(t, h_one, oref, nq), e_merge = tl_max_err(t, h_acc, oref, nq);
        CHECK(e_merge <= 2 * e_one + chunks * 0x1p-7 * fmax(1.0, tl_max_abs(oref, nq)),
              "merge of %d chunks: error %.3g vs one call %.3g for %s", chunks, e_merge, e_one, tl_desc_str(&full));
        int lbad = 0;
        for (int64_t i = 0; i < nl; i++)
            lbad += lref[i] == -INFINITY ? hl_acc[i] != -INFINITY : !(fabs(hl_acc[i] - lref[i]) <= 1e-5 * (1 + fabs(lref[i])));
        CHECK(lbad == 0, "merge: %d lse rows wrong for %s", lbad, tl_desc_str(&full));
        CUDA_OK(cudaFree(qd)); CUDA_OK(cudaFree(oacc)); CUDA_OK(cudaFree(opart)); CUDA_OK(cudaFree(oone));
        CUDA_OK(cudaFree(lacc)); CUDA_OK(cudaFree(lpart)); CUDA_OK(cudaFree(lone)); CUDA_OK(cudaFree(kfull)); CUDA_OK(cudaFree(vfull));
        free(q); free(k); free(v); free(h_acc); free(h_one); free(hl_acc); free(hl_one);
        free(fq); free(fk); free(fv); free(oref); free(lref);
    }
    /* random partials (with -inf rows on either side), every storage type, against the CPU merge */
    const dfa_dtype types[] = {DFA_F32, DFA_BF16, DFA_F16};
    for (int ti = 0; ti < 3; ti++) {
        const dfa_dtype t = types[ti];
        dfa_attn_desc d = tl_desc(2, 37, 1, 3, 3, 24, t, 0, 0, 0);
        const int64_t no = (int64_t)d.batch * d.seqlen_q * d.num_heads * d.head_dim, nl = (int64_t)d.batch * d.num_heads * d.seqlen_q;
        const size_t es = tl_dtype_size(t);
        void *oa = tl_alloc(t, no), *op = tl_alloc(t, no), *og = tl_alloc(t, no);
        float *la = malloc(4 * (size_t)nl), *lp = malloc(4 * (size_t)nl), *lg = malloc(4 * (size_t)nl);
        tl_fill_normal(t, oa, no, 1.0);
        tl_fill_normal(t, op, no, 1.0);
        for (int64_t i = 0; i < nl; i++) {
            la[i] = (float)(3.0 * tl_rand_normal());
            lp[i] = (float)(3.0 * tl_rand_normal());
            if (i % 5 == 1) la[i] = -INFINITY;
            if (i % 7 == 2) lp[i] = -INFINITY;
        }
        for (int64_t r = 0; r < no / d.head_dim; r++) { /* rows with lse = -inf hold o = 0 */
            const int64_t h = r % d.num_heads, bi = r / d.num_heads, b = bi / d.seqlen_q, i = bi % d.seqlen_q;
            const int64_t li = (b * d.num_heads + h) * d.seqlen_q + i;
            for (int c = 0; c < d.head_dim; c++) {
                if (la[li] == -INFINITY) tl_set(t, oa, r * d.head_dim + c, 0.0);
                if (lp[li] == -INFINITY) tl_set(t, op, r * d.head_dim + c, 0.0);
            }
        }
        void *oad = dev_copy_of(oa, (size_t)no * es), *opd = dev_copy_of(op, (size_t)no * es);
        float *lad = dev_copy_of(la, 4 * (size_t)nl), *lpd = dev_copy_of(lp, 4 * (size_t)nl);
        CHECK(dfa_attn_merge_cuda(&d, oad, lad, opd, lpd, 0) == DFA_OK, "merge_cuda failed: %s", dfa_last_error());
        CHECK(dfa_attn_merge(&d, oa, la, op, lp) == DFA_OK, "CPU merge failed: %s", dfa_last_error());
        to_host(og, oad, (size_t)no * es);
        to_host(lg, lad, 4 * (size_t)nl);
        double od = 0, ld = 0;
        for (int64_t i = 0; i < no; i++) {
            const double x = fabs(tl_get(t, og, i) - tl_get(t, oa, i));
            if (!(x <= od)) od = x;
        }
        for (int64_t i = 0; i < nl; i++) {
            const double x = la[i] == -INFINITY ? (lg[i] == -INFINITY ? 0.0 : INFINITY) : fabs(lg[i] - la[i]);
            if (!(x <= ld)) ld = x;
        }
        const double unit = t == DFA_F32 ? 1e-5 : t == DFA_F16 ? 2e-3 : 1.6e-2;
        CHECK(od <= unit * 4 && ld <= 1e-5 * 10, "merge (%s) differs from the CPU merge: o by %.3g, lse by %.3g",
              cli_dtype_name(t), od, ld);
        CUDA_OK(cudaFree(oad)); CUDA_OK(cudaFree(opd)); CUDA_OK(cudaFree(lad)); CUDA_OK(cudaFree(lpd));
        free(oa); free(op); free(og); free(la); free(lp); free(lg);
    }
}

int main(void) {
    tl_init("test_gpu_attn");
    if (!have_gpu()) return 77; /* ctest: skipped */
    cc = device_cc();
    only_kernel = getenv("DFA_GPU_TEST_KERNEL");
    if (only_kernel && !*only_kernel) only_kernel = NULL;
    printf("device compute capability %d.%d; %s\n", cc / 10, cc % 10, dfa_version_string());
    const char *sm = getenv("DFA_GPU_TEST_SMALL");
    const int small = sm && *sm == '1';
    const shape *list = small ? small_cases : cases;
    const int n = small ? (int)(sizeof small_cases / sizeof small_cases[0]) : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const shape *s = &list[i];
        dfa_attn_desc d = tl_desc(s->b, s->sq, s->sk, s->h, s->hkv, s->d, s->t, s->causal, s->qs, s->ks);
        check_case(&d, s->bwd);
        printf("  case %2d done: %s\n", i, tl_desc_str(&d));
        fflush(stdout);
    }
    if (!small) test_merge();
    return tl_finish("test_gpu_attn");
}
