#include "bench_passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "common/dtype.h"
#include "naive_attn.h"

double pass_fwd_flops(const dfa_attn_desc *d) {
    return 4.0 * d->batch * d->num_heads * (double)d->seqlen_q * d->seqlen_k * d->head_dim * (d->causal ? 0.5 : 1.0);
}

const char *pass_bytes_str(double bytes, char *buf, int n) {
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, (size_t)n, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, (size_t)n, "%.0f MiB", bytes / (1024.0 * 1024));
    return buf;
}

/* max |a - b| over n elements of type t, and max |b| */
static void compare(dfa_dtype t, const void *a, const void *b, int64_t n, double *err, double *ref_max) {
    double e = 0, m = 0;
    float x[256], y[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int k = n - i0 < 256 ? (int)(n - i0) : 256;
        dfa__load_f32(t, dfa__elem_c(t, a, i0), x, k);
        dfa__load_f32(t, dfa__elem_c(t, b, i0), y, k);
        for (int i = 0; i < k; i++) {
            const double dd = fabs((double)x[i] - y[i]);
            if (!(dd <= e)) e = isnan(dd) ? INFINITY : dd;
            m = fmax(m, fabs((double)y[i]));
        }
    }
    *err = e, *ref_max = m;
}

static void run_pass(void *arg, measure_result *r) {
    const pass_job *job = arg;
    const dfa_attn_desc *d = &job->d;
#ifdef __GLIBC__
    /* A fixed mmap threshold: every large block is mapped and returned on free, so one
       call's peak does not depend on what earlier calls left in the heap (glibc's
       dynamic threshold would otherwise keep freed scratch resident across repeats). */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
#endif
    const int bwd = job->kind == PASS_FLASH_BWD || job->kind == PASS_NAIVE_BWD;
    const int naive = job->kind == PASS_NAIVE_FWD || job->kind == PASS_NAIVE_BWD;
    const size_t qb = measure_q_bytes(d), kb = measure_kv_bytes(d), lb = measure_lse_bytes(d);
    const int64_t nq = (int64_t)(qb / dfa__dtype_size(d->dtype)), nk = (int64_t)(kb / dfa__dtype_size(d->dtype));
    void *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *o = malloc(qb);
    float *lse = malloc(lb);
    void *dout = bwd ? malloc(qb) : NULL, *dq = bwd ? malloc(qb) : NULL, *dk = bwd ? malloc(kb) : NULL,
         *dv = bwd ? malloc(kb) : NULL;
    if (!q || !k || !v || !o || !lse || (bwd && (!dout || !dq || !dk || !dv))) {
        snprintf(r->msg, sizeof r->msg, "cannot allocate the inputs");
        return;
    }
    measure_fill(d->dtype, q, nq, 1);
    measure_fill(d->dtype, k, nk, 2);
    measure_fill(d->dtype, v, nk, 3);
    memset(o, 0, qb);
    memset(lse, 0, lb);
    if (bwd) {
        measure_fill(d->dtype, dout, nq, 4);
        memset(dq, 0, qb), memset(dk, 0, kb), memset(dv, 0, kb);
    }
    dfa_set_num_threads(job->threads);
    const int threads = job->threads; /* 0 lets OpenMP choose in the naive passes too */
    if (bwd && dfa_attn_fwd(d, q, k, v, o, lse) != DFA_OK) {
        snprintf(r->msg, sizeof r->msg, "dfa_attn_fwd: %s", dfa_last_error());
        return;
    }
    r->baseline_kib = measure_rss_kib();
    for (int rep = -job->warmup; rep < job->reps && rep < MEASURE_MAX_REPS; rep++) {
        const double t0 = measure_now();
        int fail = 0;
        switch (job->kind) {
        case PASS_FLASH_FWD: fail = dfa_attn_fwd(d, q, k, v, o, lse) != DFA_OK; break;
        case PASS_FLASH_BWD: fail = dfa_attn_bwd(d, q, k, v, o, lse, dout, dq, dk, dv) != DFA_OK; break;
        case PASS_NAIVE_FWD: fail = naive_attn_fwd(d, q, k, v, o, lse, threads) != 0; break;
        case PASS_NAIVE_BWD: fail = naive_attn_bwd(d, q, k, v, o, lse, dout, dq, dk, dv, threads) != 0; break;
        }
        const double dt = measure_now() - t0;
        if (fail) {
            snprintf(r->msg, sizeof r->msg, "%s", naive ? "the naive pass could not allocate its scratch" : dfa_last_error());
            return;
        }
        if (rep >= 0) r->seconds[r->reps++] = dt;
    }
    if (job->check) { /* the other implementation once, compared element by element */
        void *o2 = malloc(qb);
        float *lse2 = malloc(lb);
        void *g2[3] = {bwd ? malloc(qb) : NULL, bwd ? malloc(kb) : NULL, bwd ? malloc(kb) : NULL};
        int fail;
        if (!bwd)
            fail = naive ? dfa_attn_fwd(d, q, k, v, o2, lse2) != DFA_OK : naive_attn_fwd(d, q, k, v, o2, lse2, threads) != 0;
        else
            fail = naive ? dfa_attn_bwd(d, q, k, v, o, lse, dout, g2[0], g2[1], g2[2]) != DFA_OK
                         : naive_attn_bwd(d, q, k, v, o, lse, dout, g2[0], g2[1], g2[2], threads) != 0;
        if (fail) {
            snprintf(r->msg, sizeof r->msg, "the comparison run failed");
            return;
        }
        double e, m;
        if (!bwd) {
            compare(d->dtype, o, o2, nq, &e, &m);
            r->value[0] = e, r->value[1] = m;
            double le = 0;
            for (size_t i = 0; i < lb / 4; i++)
                if (!(isinf(lse[i]) && isinf(lse2[i]))) le = fmax(le, fabs((double)lse[i] - lse2[i]));
            r->value[2] = le;
        } else {
            void *mine[3] = {dq, dk, dv};
            const int64_t cnt[3] = {nq, nk, nk};
            for (int t = 0; t < 3; t++) {
                compare(d->dtype, mine[t], g2[t], cnt[t], &e, &m);
                r->value[2 * t] = e, r->value[2 * t + 1] = m;
            }
        }
        free(o2), free(lse2), free(g2[0]), free(g2[1]), free(g2[2]);
    }
    r->ok = 1;
}

pass_outcome pass_measure(const pass_job *job) {
    pass_outcome out;
    memset(&out, 0, sizeof out);
    measure_result r;
    memset(&r, 0, sizeof r);
    double peak_kib = 0, other = -1;
    if (measure_in_child(run_pass, (void *)job, &r, &peak_kib, &other) != 0 || r.reps < 1) {
        snprintf(out.why, sizeof out.why, "failed: %s", r.msg[0] ? r.msg : "no timed run");
        return out;
    }
    const int bwd = job->kind == PASS_FLASH_BWD || job->kind == PASS_NAIVE_BWD;
    out.ran = 1;
    out.median_s = measure_median(r.seconds, r.reps);
    out.gflops = pass_fwd_flops(&job->d) * (bwd ? 2.5 : 1.0) / out.median_s / 1e9;
    out.extra_mib = peak_kib / 1024.0;
    out.other_cpus = other;
    memcpy(out.value, r.value, sizeof out.value);
    return out;
}
