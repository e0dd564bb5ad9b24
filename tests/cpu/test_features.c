/* Softcap, attention sinks and a value head dim of its own (descriptor version 3) on the
 * CPU against the float64 oracle: forward (o, lse) and backward (dq, dk, dv, dsinks), alone
 * and combined with GQA, causal offsets, documents and windows, every storage type, odd
 * lengths and length 1, fresh random inputs and poisoned outputs. Rows that see no key with
 * a sink must give o = 0 and lse = the sink exactly. A sink added after merging partial
 * results without it (the distributed calls' way) must match one call with it, and every
 * result must have the same bits for any thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sinks.h"
#include "oracle.h"
#include "testlib.h"

static int dv_of(const dfa_attn_desc *d) { return d->head_dim_v ? d->head_dim_v : d->head_dim; }

static void check_close(const char *what, tl_quantity kind, const dfa_attn_desc *d, dfa_dtype t, const void *got,
                        const void *naive, const double *ref, int64_t n) {
    const double err = tl_max_err(t, got, ref, n), naive_err = tl_max_err(t, naive, ref, n);
    const double tol = tl_tolerance(t, kind, naive_err, ref, n);
    CHECK(err <= tol, "%s: max error %.3g > tol %.3g (naive same-precision error %.3g) for %s", what, err, tol,
          naive_err, tl_desc_str(d));
}

/* Random sinks for h heads: mostly near the logits, some far above (the sink takes most of
   each row's weight) or far below (it takes nearly none). */
static float *random_sinks(int h) {
    float *s = malloc(sizeof(float) * (size_t)h);
    for (int i = 0; i < h; i++) {
        switch (tl_rand_int(0, 5)) {
        case 0: s[i] = (float)(6.0 + 4.0 * tl_rand_uniform()); break;
        case 1: s[i] = (float)(-30.0 * tl_rand_uniform()); break;
        default: s[i] = (float)(4.0 * tl_rand_uniform() - 2.0); break;
        }
    }
    return s;
}

/* One full check of forward and backward for d (d->sinks may be set; dsinks is this
   function's own). */
static void check_case(dfa_attn_desc d) {
    const dfa_dtype t = d.dtype;
    const int D = d.head_dim, Dv = dv_of(&d), H = d.num_heads;
    const int64_t nq = (int64_t)d.batch * d.seqlen_q * H * D, no = (int64_t)d.batch * d.seqlen_q * H * Dv;
    const int64_t nk = (int64_t)d.batch * d.seqlen_k * d.num_kv_heads * D;
    const int64_t nv = (int64_t)d.batch * d.seqlen_k * d.num_kv_heads * Dv;
    const int64_t nl = (int64_t)d.batch * H * d.seqlen_q;
    const size_t es = tl_dtype_size(t);
    void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nv), *o = tl_alloc(t, no);
    void *onaive = tl_alloc(t, no);
    float *lse = malloc(sizeof(float) * (size_t)nl);
    tl_fill_normal(t, q, nq, 1.0 + 2.0 * tl_rand_uniform()); /* sharper logits meet the softcap harder */
    tl_fill_normal(t, k, nk, 1.0);
    tl_fill_normal(t, v, nv, 1.0);
    tl_poison(o, (size_t)no * es);
    tl_poison(lse, sizeof(float) * (size_t)nl);

    dfa_status st = dfa_attn_fwd(&d, q, k, v, o, lse);
    CHECK(st == DFA_OK, "fwd failed: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), tl_desc_str(&d));
    CHECK(tl_count_nan(t, o, no) == 0, "fwd left %lld elements of o unwritten/NaN for %s",
          (long long)tl_count_nan(t, o, no), tl_desc_str(&d));

    double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nv);
    double *oref = malloc(sizeof(double) * (size_t)no), *lref = malloc(sizeof(double) * (size_t)nl);
    oracle_fwd(&d, fq, fk, fv, oref, lref);
    naive_fwd_lowp(&d, q, k, v, onaive);
    check_close("o", TL_OUTPUT, &d, t, o, onaive, oref, no);

    /* rows that see no key: o exactly 0 and lse exactly the sink (-inf without) */
    int lse_bad = 0, empty_bad = 0, empty = 0;
    for (int64_t x = 0; x < nl; x++) {
        const int64_t b = x / ((int64_t)H * d.seqlen_q), h = (x / d.seqlen_q) % H, r = x % d.seqlen_q;
        int sees = 0;
        for (int j = 0; j < d.seqlen_k && !sees; j++) {
            const int64_t pi = d.q_start + r, pj = d.k_start + j;
            sees = !(d.causal && pj > pi) &&
                   !(d.q_doc && d.q_doc[b * d.seqlen_q + r] != d.k_doc[b * d.seqlen_k + j]) &&
                   !((d.flags & DFA_FLAG_WINDOW) && ((d.window_left >= 0 && pi - pj > d.window_left) ||
                                                      (d.window_right >= 0 && pj - pi > d.window_right)));
        }
        if (!sees) {
            empty++;
            const float want = d.sinks ? d.sinks[h] : -INFINITY;
            empty_bad += lse[x] != want;
            const int64_t first = ((b * d.seqlen_q + r) * H + h) * Dv;
            for (int c = 0; c < Dv; c++) empty_bad += tl_get(t, o, first + c) != 0.0;
        } else {
            lse_bad += !(fabs(lse[x] - lref[x]) <= 2e-5 * (1.0 + fabs(lref[x])));
        }
    }
    CHECK(lse_bad == 0, "lse: %d rows wrong for %s", lse_bad, tl_desc_str(&d));
    CHECK(empty_bad == 0, "rows that see no key (%d): %d values not o = 0, lse = %s for %s", empty, empty_bad,
          d.sinks ? "sink" : "-inf", tl_desc_str(&d));

    void *dout = tl_alloc(t, no), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nv);
    void *nq_ = tl_alloc(t, nq), *nk_ = tl_alloc(t, nk), *nv_ = tl_alloc(t, nv);
    float *dsinks = malloc(sizeof(float) * (size_t)H), *dsinks_naive = malloc(sizeof(float) * (size_t)H);
    tl_fill_normal(t, dout, no, 1.0);
    tl_poison(dq, (size_t)nq * es);
    tl_poison(dk, (size_t)nk * es);
    tl_poison(dv, (size_t)nv * es);
    tl_poison(dsinks, sizeof(float) * (size_t)H);
    dfa_attn_desc db = d;
    db.dsinks = d.sinks ? dsinks : NULL;
    st = dfa_attn_bwd(&db, q, k, v, o, lse, dout, dq, dk, dv);
    CHECK(st == DFA_OK, "bwd failed: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), tl_desc_str(&d));
    CHECK(tl_count_nan(t, dq, nq) == 0 && tl_count_nan(t, dk, nk) == 0 && tl_count_nan(t, dv, nv) == 0,
          "bwd left unwritten/NaN gradients for %s", tl_desc_str(&d));
    double *fdo = tl_to_f64(t, dout, no);
    double *gq = malloc(sizeof(double) * (size_t)nq), *gk = malloc(sizeof(double) * (size_t)nk),
           *gv = malloc(sizeof(double) * (size_t)nv), *gs = malloc(sizeof(double) * (size_t)H);
    oracle_bwd_all(&d, fq, fk, fv, fdo, gq, gk, gv, gs);
    naive_bwd_lowp_all(&d, q, k, v, dout, nq_, nk_, nv_, dsinks_naive);
    check_close("dq", TL_GRADIENT, &d, t, dq, nq_, gq, nq);
    check_close("dk", TL_GRADIENT, &d, t, dk, nk_, gk, nk);
    check_close("dv", TL_GRADIENT, &d, t, dv, nv_, gv, nv);
    if (d.sinks) {
        CHECK(tl_count_nan(DFA_F32, dsinks, H) == 0, "bwd left dsinks unwritten/NaN for %s", tl_desc_str(&d));
        /* Storing o in the storage type moves each D_i = dout_i . o_i at random, by about
           u sqrt(sum_c (dout_ic o_ic)^2) (u its unit roundoff), and dsinks sums those moves over
           the rows with weights p_i = exp(sink - lse_i): one naive computation may happen to
           cancel them, so the tolerance also allows a few of their standard deviations. */
        const double u = t == DFA_F32 ? 0x1p-24 : t == DFA_F16 ? 0x1p-11 : 0x1p-8;
        double spread = 0;
        for (int h = 0; h < H; h++) {
            double s2 = 0;
            for (int b = 0; b < d.batch; b++)
                for (int i = 0; i < d.seqlen_q; i++) {
                    const double p = exp(d.sinks[h] - lref[((int64_t)b * H + h) * d.seqlen_q + i]);
                    double r2 = 0;
                    for (int c = 0; c < Dv; c++) {
                        const int64_t e = (((int64_t)b * d.seqlen_q + i) * H + h) * Dv + c;
                        r2 += fdo[e] * oref[e] * fdo[e] * oref[e];
                    }
                    s2 += p * p * r2;
                }
            spread = fmax(spread, 4 * u * sqrt(s2));
        }
        const double err = tl_max_err(DFA_F32, dsinks, gs, H), naive_err = tl_max_err(DFA_F32, dsinks_naive, gs, H);
        const double tol = tl_tolerance(t, TL_GRADIENT, naive_err, gs, H) + spread;
        CHECK(err <= tol, "dsinks: max error %.3g > tol %.3g (naive %.3g) for %s", err, tol, naive_err,
              tl_desc_str(&d));
        /* without dsinks: the same dq, dk, dv bits */
        void *dq2 = tl_alloc(t, nq), *dk2 = tl_alloc(t, nk), *dv2 = tl_alloc(t, nv);
        st = dfa_attn_bwd(&d, q, k, v, o, lse, dout, dq2, dk2, dv2);
        CHECK(st == DFA_OK && !memcmp(dq, dq2, (size_t)nq * es) && !memcmp(dk, dk2, (size_t)nk * es) &&
                  !memcmp(dv, dv2, (size_t)nv * es),
              "bwd with sinks: dsinks = NULL changed the other gradients for %s", tl_desc_str(&d));
        free(dq2); free(dk2); free(dv2);
    }
    free(dout); free(dq); free(dk); free(dv); free(nq_); free(nk_); free(nv_); free(dsinks); free(dsinks_naive);
    free(fdo); free(gq); free(gk); free(gv); free(gs);
    free(q); free(k); free(v); free(o); free(onaive); free(lse);
    free(fq); free(fk); free(fv); free(oref); free(lref);
}

static const dfa_dtype types[] = {DFA_F32, DFA_BF16, DFA_F16};

/* Value head dims unlike the query/key ones: the MLA shapes, narrower and wider values, the
   extremes, with causal offsets (some rows see nothing), GQA and odd lengths. */
static void test_head_dims(int stride) {
    static const int dims[][2] = {{192, 128}, {128, 64}, {64, 128}, {8, 256}, {256, 8}, {40, 24}, {128, 192}};
    static const int lens[][2] = {{1, 1}, {1, 77}, {77, 1}, {130, 97}, {200, 257}, {97, 130}};
    int n = 0;
    for (int c = 0; c < 21; c++) {
        if (c % stride) continue;
        const int D = dims[c % 7][0], Dv = dims[c % 7][1], sq = lens[c % 6][0], sk = lens[c % 6][1];
        const int hkv = c % 3 == 0 ? 1 : 2, h = hkv * (c % 2 ? 2 : 1) * (D > 128 ? 1 : 2);
        const int causal = c % 4 != 3;
        const int64_t qs = c % 5 == 2 ? 3 : (sk > sq ? sk - sq : 0), ks = c % 5 == 2 ? 3 + sq / 2 : 0;
        dfa_attn_desc d = tl_desc(1 + c % 2, sq, sk, h, hkv, D, types[c % 3], causal, qs, ks);
        d.head_dim_v = Dv;
        float *sinks = c % 4 == 1 ? random_sinks(h) : NULL;
        d.sinks = sinks;
        if (c % 7 == 4) d.softcap = 20.0f;
        check_case(d);
        free(sinks);
        n++;
    }
    printf("head dims: %d cases\n", n);
}

/* Softcap with GQA/MQA, caps from tight (every logit near saturation) to loose, explicit and
   default scales. */
static void test_softcap(int stride) {
    static const float caps[] = {0.5f, 2.0f, 5.0f, 30.0f, 50.0f, 1e4f};
    static const int heads[][2] = {{8, 1}, {4, 2}, {6, 3}, {2, 2}};
    int n = 0;
    for (int c = 0; c < 18; c++) {
        if (c % stride) continue;
        const int sq = c % 6 == 0 ? 1 : tl_rand_int(2, 200), sk = c % 5 == 0 ? tl_rand_int(1, 3) : tl_rand_int(20, 260);
        const int D = 8 * tl_rand_int(1, 16);
        dfa_attn_desc d = tl_desc(1 + c % 2, sq, sk, heads[c % 4][0], heads[c % 4][1], D, types[c % 3], c % 2,
                                  sk > sq ? sk - sq : 0, 0);
        d.softcap = caps[c % 6];
        if (c % 3 == 2) d.softmax_scale = 0.3f;
        check_case(d);
        n++;
    }
    printf("softcap: %d cases\n", n);
}

/* Sinks with causal (offsets that leave rows fully masked, and every row masked), documents
   and windows, softcap and head_dim_v too. */
static void test_sinks(int stride) {
    static const int windows[] = {0, 1, 40, 150, -1};
    int n = 0;
    for (int c = 0; c < 30; c++) {
        if (c % stride) continue;
        const int sq = c % 7 == 0 ? 1 : tl_rand_int(2, 230), sk = c % 8 == 3 ? 1 : tl_rand_int(2, 230);
        static const int heads[][2] = {{4, 2}, {3, 1}, {2, 2}, {6, 2}};
        const int D = (int[]){16, 64, 40, 128}[c % 4];
        const int b = c % 3 == 1 ? 2 : 1;
        const int N = (sq > sk ? sq : sk) * 2 + 40;
        int64_t qs = tl_rand_int(0, N - sq), ks = tl_rand_int(0, N - sk);
        if (c % 10 == 9) qs = 0, ks = sq + 5; /* every key after every query: all rows empty when causal */
        const int causal = c % 5 != 4;
        dfa_attn_desc d = tl_desc(b, sq, sk, heads[c % 4][0], heads[c % 4][1], D, types[c % 3], causal, qs, ks);
        float *sinks = random_sinks(d.num_heads);
        d.sinks = sinks;
        int32_t *qd = NULL, *kd = NULL;
        const int docs = c % 3 != 0, window = c % 4 >= 2;
        if (docs) {
            qd = malloc(sizeof(int32_t) * (size_t)b * sq);
            kd = malloc(sizeof(int32_t) * (size_t)b * sk);
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)(N + ks + sq)); /* one sequence of positions */
            for (int bb = 0; bb < b; bb++) {
                tl_random_docs(ids, N + (int)ks + sq, 64);
                memcpy(qd + (size_t)bb * sq, ids + qs, sizeof(int32_t) * (size_t)sq);
                memcpy(kd + (size_t)bb * sk, ids + ks, sizeof(int32_t) * (size_t)sk);
            }
            free(ids);
            d.q_doc = qd;
            d.k_doc = kd;
        }
        if (window) {
            d.flags |= DFA_FLAG_WINDOW;
            d.window_left = windows[tl_rand_int(0, 4)];
            d.window_right = windows[tl_rand_int(0, 4)];
        }
        if (c % 6 == 5) d.softcap = 10.0f;
        if (c % 5 == 1) d.head_dim_v = D == 128 ? 64 : 2 * D;
        check_case(d);
        free(sinks); free(qd); free(kd);
        n++;
    }
    printf("sinks: %d cases\n", n);
}

/* Partial results over key chunks, computed and merged without the sink, then the sink added
   once (dfa__lse_add_sink, as the distributed calls do), against one call with the sink. */
static void test_sink_after_merge(void) {
    for (int rep = 0; rep < 6; rep++) {
        const int sq = tl_rand_int(1, 120), sk = tl_rand_int(4, 250), H = 4, Hkv = 2, D = 32, Dv = rep % 2 ? 64 : 32;
        dfa_attn_desc full = tl_desc(1 + rep % 2, sq, sk, H, Hkv, D, DFA_F32, rep % 2, rep % 2 ? tl_rand_int(0, sk) : 0, 0);
        full.head_dim_v = Dv;
        float *sinks = random_sinks(H);
        const int64_t no = (int64_t)full.batch * sq * H * Dv, nl = (int64_t)full.batch * H * sq;
        const int64_t nq = (int64_t)full.batch * sq * H * D, row_k = (int64_t)Hkv * D, row_v = (int64_t)Hkv * Dv;
        float *q = tl_alloc(DFA_F32, nq), *k = tl_alloc(DFA_F32, full.batch * sk * row_k),
              *v = tl_alloc(DFA_F32, full.batch * sk * row_v);
        tl_fill_normal(DFA_F32, q, nq, 1.5);
        tl_fill_normal(DFA_F32, k, full.batch * sk * row_k, 1.0);
        tl_fill_normal(DFA_F32, v, full.batch * sk * row_v, 1.0);
        float *oacc = malloc(4 * (size_t)no), *opart = malloc(4 * (size_t)no), *oone = malloc(4 * (size_t)no);
        float *lacc = malloc(4 * (size_t)nl), *lpart = malloc(4 * (size_t)nl), *lone = malloc(4 * (size_t)nl);
        dfa_attn_desc with = full;
        with.sinks = sinks;
        CHECK(dfa_attn_fwd(&with, q, k, v, oone, lone) == DFA_OK, "sink after merge: one call: %s", dfa_last_error());
        const int cut = sk / 2;
        int ok = 1;
        for (int c = 0; c < 2; c++) {
            const int k0 = c ? cut : 0, len = c ? sk - cut : cut;
            dfa_attn_desc part = full; /* no sink */
            part.seqlen_k = len;
            part.k_start = k0;
            float *kc = tl_slice_rows(DFA_F32, k, full.batch, sk, k0, len, row_k);
            float *vc = tl_slice_rows(DFA_F32, v, full.batch, sk, k0, len, row_v);
            ok &= dfa_attn_fwd(&part, q, kc, vc, c ? opart : oacc, c ? lpart : lacc) == DFA_OK;
            if (c) ok &= dfa_attn_merge(&with, oacc, lacc, opart, lpart) == DFA_OK; /* merge ignores the sinks */
            free(kc);
            free(vc);
        }
        CHECK(ok, "sink after merge: a call failed: %s", dfa_last_error());
        double worst_o = 0, worst_l = 0;
        for (int b = 0; b < full.batch; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < sq; i++) {
                    const int64_t x = ((int64_t)b * H + h) * sq + i;
                    float scale_o;
                    const float l = dfa__lse_add_sink(lacc[x], sinks[h], &scale_o);
                    worst_l = fmax(worst_l, fabs((double)l - lone[x]) / (1.0 + fabs((double)lone[x])));
                    for (int c = 0; c < Dv; c++) {
                        const int64_t e = (((int64_t)b * sq + i) * H + h) * Dv + c;
                        worst_o = fmax(worst_o, fabs((double)oacc[e] * scale_o - oone[e]));
                    }
                    if (lacc[x] == -INFINITY) CHECK(l == sinks[h] && scale_o == 0.0f, "empty row: lse not the sink");
                }
        CHECK(worst_l <= 1e-5 && worst_o <= 1e-5, "sink after merge: lse off by %.3g, o by %.3g for %s", worst_l,
              worst_o, tl_desc_str(&with));
        free(q); free(k); free(v); free(oacc); free(opart); free(oone); free(lacc); free(lpart); free(lone);
        free(sinks);
    }
}

/* Same inputs, any thread count: the same bits, dsinks included. */
static void test_determinism(void) {
    const dfa_dtype ts[] = {DFA_F32, DFA_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const dfa_dtype t = ts[ti];
        dfa_attn_desc d = tl_desc(2, 300, 517, 4, 2, 96, t, 1, 217, 0);
        d.head_dim_v = 48;
        d.softcap = 15.0f;
        float sinks[4] = {0.5f, -1.0f, 3.0f, -8.0f};
        d.sinks = sinks;
        const int64_t nq = (int64_t)d.batch * d.seqlen_q * d.num_heads * 96, no = nq / 2;
        const int64_t nk = (int64_t)d.batch * d.seqlen_k * d.num_kv_heads * 96, nv = nk / 2;
        const int64_t nl = (int64_t)d.batch * d.num_heads * d.seqlen_q;
        const size_t es = tl_dtype_size(t);
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nv), *dout = tl_alloc(t, no);
        tl_fill_normal(t, q, nq, 2.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nv, 1.0);
        tl_fill_normal(t, dout, no, 1.0);
        const int threads[] = {1, 2, 3, 5};
        void *o0 = NULL, *dq0 = NULL, *dk0 = NULL, *dv0 = NULL;
        float *l0 = NULL, ds0[4];
        for (int x = 0; x < 4; x++) {
            dfa_set_num_threads(threads[x]);
            void *o = tl_alloc(t, no), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nv);
            float *l = malloc(4 * (size_t)nl), ds[4];
            d.dsinks = ds;
            CHECK(dfa_attn_fwd(&d, q, k, v, o, l) == DFA_OK, "determinism: fwd failed: %s", dfa_last_error());
            CHECK(dfa_attn_bwd(&d, q, k, v, o, l, dout, dq, dk, dv) == DFA_OK, "determinism: bwd failed: %s",
                  dfa_last_error());
            if (x == 0) {
                o0 = o; dq0 = dq; dk0 = dk; dv0 = dv; l0 = l;
                memcpy(ds0, ds, sizeof ds);
                continue;
            }
            CHECK(!memcmp(o, o0, (size_t)no * es) && !memcmp(l, l0, 4 * (size_t)nl),
                  "determinism: fwd differs between 1 and %d threads", threads[x]);
            CHECK(!memcmp(dq, dq0, (size_t)nq * es) && !memcmp(dk, dk0, (size_t)nk * es) &&
                      !memcmp(dv, dv0, (size_t)nv * es) && !memcmp(ds, ds0, sizeof ds),
                  "determinism: bwd differs between 1 and %d threads", threads[x]);
            free(o); free(dq); free(dk); free(dv); free(l);
        }
        dfa_set_num_threads(0);
        free(o0); free(dq0); free(dk0); free(dv0); free(l0); free(q); free(k); free(v); free(dout);
    }
}

/* test_features [--reduced]: --reduced runs every third case (the lower SIMD paths). */
int main(int argc, char **argv) {
    const int reduced = argc > 1 && !strcmp(argv[1], "--reduced");
    tl_init("test_features");
    printf("cpu isa: %s%s\n", dfa_cpu_isa(), reduced ? "; reduced" : "");
    const int stride = reduced ? 3 : 1;
    test_head_dims(stride);
    test_softcap(stride);
    test_sinks(stride);
    test_sink_after_merge();
    test_determinism();
    return tl_finish("test_features");
}
