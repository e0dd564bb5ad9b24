/* Forward, backward and merge on the CPU against the float64 oracle, over a
 * grid of shapes (awkward lengths, GQA/MQA, causal offsets that leave rows
 * fully masked, every supported head-dim class, f32/bf16/f16, batch 1 and 3),
 * on fresh random inputs, with poisoned outputs. Plus bitwise determinism
 * across thread counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"
#include "testlib.h"

static void check_close(const char *what, tl_quantity kind, const dfa_attn_desc *d, dfa_dtype t, const void *got,
                        const void *naive, const double *ref, int64_t n) {
    const double err = tl_max_err(t, got, ref, n), naive_err = tl_max_err(t, naive, ref, n);
    const double tol = tl_tolerance(t, kind, naive_err, ref, n);
    CHECK(err <= tol, "%s: max error %.3g > tol %.3g (naive same-precision error %.3g) for %s", what, err, tol,
          naive_err, tl_desc_str(d));
}

/* One full check of fwd (and bwd) for descriptor d. */
static void check_case(const dfa_attn_desc *d, int with_bwd) {
    const dfa_dtype t = d->dtype;
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim;
    const int64_t nl = (int64_t)d->batch * d->num_heads * d->seqlen_q;
    const size_t es = tl_dtype_size(t);
    void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk), *o = tl_alloc(t, nq);
    void *onaive = tl_alloc(t, nq);
    float *lse = malloc(sizeof(float) * (size_t)nl);
    tl_fill_normal(t, q, nq, 1.0 + tl_rand_uniform()); /* sharper or flatter softmax from case to case */
    tl_fill_normal(t, k, nk, 1.0);
    tl_fill_normal(t, v, nk, 1.0);
    tl_poison(o, (size_t)nq * es);
    tl_poison(lse, sizeof(float) * (size_t)nl);

    dfa_status st = dfa_attn_fwd(d, q, k, v, o, lse);
    CHECK(st == DFA_OK, "fwd failed: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), tl_desc_str(d));
    CHECK(tl_count_nan(t, o, nq) == 0, "fwd left %lld elements of o unwritten/NaN for %s",
          (long long)tl_count_nan(t, o, nq), tl_desc_str(d));

    double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk);
    double *oref = malloc(sizeof(double) * (size_t)nq), *lref = malloc(sizeof(double) * (size_t)nl);
    oracle_fwd(d, fq, fk, fv, oref, lref);
    naive_fwd_lowp(d, q, k, v, onaive);
    check_close("o", TL_OUTPUT, d, t, o, onaive, oref, nq);

    int lse_bad = 0, masked_bad = 0;
    for (int64_t i = 0; i < nl; i++) {
        if (lref[i] == -INFINITY) {
            lse_bad += lse[i] != -INFINITY;
            /* the row's o must be exactly 0 */
            const int64_t b = i / ((int64_t)d->num_heads * d->seqlen_q), h = (i / d->seqlen_q) % d->num_heads,
                          r = i % d->seqlen_q;
            const int64_t first = ((b * d->seqlen_q + r) * d->num_heads + h) * d->head_dim;
            for (int c = 0; c < d->head_dim; c++) masked_bad += tl_get(t, o, first + c) != 0.0;
        } else {
            lse_bad += !(fabs(lse[i] - lref[i]) <= 2e-5 * (1.0 + fabs(lref[i])));
        }
    }
    CHECK(lse_bad == 0, "lse: %d rows wrong for %s", lse_bad, tl_desc_str(d));
    CHECK(masked_bad == 0, "fully masked rows: %d elements of o not exactly 0 for %s", masked_bad, tl_desc_str(d));

    if (with_bwd) {
        void *dout = tl_alloc(t, nq), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nk);
        void *nq_ = tl_alloc(t, nq), *nk_ = tl_alloc(t, nk), *nv_ = tl_alloc(t, nk);
        tl_fill_normal(t, dout, nq, 1.0);
        tl_poison(dq, (size_t)nq * es);
        tl_poison(dk, (size_t)nk * es);
        tl_poison(dv, (size_t)nk * es);
        st = dfa_attn_bwd(d, q, k, v, o, lse, dout, dq, dk, dv);
        CHECK(st == DFA_OK, "bwd failed: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), tl_desc_str(d));
        CHECK(tl_count_nan(t, dq, nq) == 0 && tl_count_nan(t, dk, nk) == 0 && tl_count_nan(t, dv, nk) == 0,
              "bwd left unwritten/NaN gradients for %s", tl_desc_str(d));
        double *fdo = tl_to_f64(t, dout, nq);
        double *gq = malloc(sizeof(double) * (size_t)nq), *gk = malloc(sizeof(double) * (size_t)nk),
               *gv = malloc(sizeof(double) * (size_t)nk);
        oracle_bwd(d, fq, fk, fv, fdo, gq, gk, gv);
        naive_bwd_lowp(d, q, k, v, dout, nq_, nk_, nv_);
        check_close("dq", TL_GRADIENT, d, t, dq, nq_, gq, nq);
        check_close("dk", TL_GRADIENT, d, t, dk, nk_, gk, nk);
        check_close("dv", TL_GRADIENT, d, t, dv, nv_, gv, nk);
        free(dout); free(dq); free(dk); free(dv); free(nq_); free(nk_); free(nv_);
        free(fdo); free(gq); free(gk); free(gv);
    }
    free(q); free(k); free(v); free(o); free(onaive); free(lse);
    free(fq); free(fk); free(fv); free(oref); free(lref);
}

/* The shape grid. Work (B*H*Sq*Sk*D) is capped so that the float64 oracle stays quick;
   the largest cases drop to fewer heads rather than being skipped. */
static void test_grid(int stride) {
    static const int pairs[][2] = {{1, 1},    {1, 7},     {7, 1},    {7, 64},   {64, 127},
                                   {127, 64}, {127, 1000}, {1000, 127}, {1000, 1000}, {64, 64}};
    static const int dims[] = {8, 40, 64, 128, 256};
    static const int heads[][2] = {{2, 2}, {8, 1}, {16, 2}, {4, 1}, {3, 3}, {1, 1}};
    static const dfa_dtype types[] = {DFA_F32, DFA_BF16, DFA_F16};
    int n = 0, idx = 0;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            if (idx++ % stride) continue;
            const int sq = pairs[p][0], sk = pairs[p][1], D = dims[di];
            const dfa_dtype t = types[(p + di) % 3];
            const int batch = (p + di) % 2 ? 3 : 1;
            const int causal = (int)((p + di / 2) % 2);
            size_t hi = (p * 3 + di) % 6;
            while (hi < 5 && (double)batch * heads[hi][0] * sq * sk * D > 1.2e8) hi++;
            int b = batch;
            if ((double)b * heads[hi][0] * sq * sk * D > 1.2e8) b = 1;
            /* offsets: bottom-right aligned, top-left, or keys starting after the first
               queries (those rows see nothing), or keys entirely in the future */
            int64_t qs = 0, ks = 0;
            switch ((p + 2 * di) % 4) {
            case 0: qs = sk > sq ? sk - sq : 0; break;
            case 1: break;
            case 2: qs = 1000; ks = 1000 + sq / 2 + 1; break;
            case 3: qs = 5; ks = 5 + sq + 3; break; /* every row fully masked when causal */
            }
            dfa_attn_desc d = tl_desc(b, sq, sk, heads[hi][0], heads[hi][1], D, t, causal, qs, ks);
            check_case(&d, 1);
            n++;
        }
    printf("grid: %d cases\n", n);
}

/* A random document layout of n positions: ids non-decreasing, starting anywhere (negative
   too) and stepping by 1..3; lengths mix 1, short, about a tile and longer than a tile. */
static void random_docs(int32_t *ids, int n) {
    int32_t id = tl_rand_int(-50, 50);
    for (int i = 0; i < n;) {
        int len;
        switch (tl_rand_int(0, 3)) {
        case 0: len = 1; break;
        case 1: len = tl_rand_int(2, 20); break;
        case 2: len = tl_rand_int(40, 110); break;
        default: len = tl_rand_int(100, 300); break;
        }
        for (int r = 0; r < len && i < n; r++) ids[i++] = id;
        id += tl_rand_int(1, 3);
    }
}

/* Documents and sliding windows against the float64 oracle (which applies the mask as
   distflash.h writes it): random layouts over global positions shared by q and k (chunks
   at offsets), windows of 0, 1, a tile, about a chunk and the whole sequence, causal and
   not, GQA, odd lengths, every storage type, with and without documents. */
static void test_masks(int stride) {
    static const int windows[] = {0, 1, 96, 200, 100000, -1};
    int n = 0;
    for (int c = 0; c < 48; c++) {
        if (c % stride) continue;
        const int sq = c % 5 == 0 ? tl_rand_int(1, 8) : tl_rand_int(20, 330);
        const int sk = c % 7 == 0 ? tl_rand_int(1, 8) : tl_rand_int(20, 330);
        static const int heads[][2] = {{2, 2}, {4, 1}, {3, 3}, {6, 2}};
        static const int dims[] = {8, 32, 64, 40};
        static const dfa_dtype types[] = {DFA_F32, DFA_BF16, DFA_F16};
        const int b = c % 3 == 1 ? 2 : 1;
        /* the query chunk and the key chunk sit somewhere in one sequence of N positions */
        const int N = (sq > sk ? sq : sk) * 2 + 50;
        const int64_t qs = tl_rand_int(0, N - sq);
        const int64_t ks = c % 4 == 0 ? (qs < N - sk ? qs : N - sk) : tl_rand_int(0, N - sk);
        dfa_attn_desc d = tl_desc(b, sq, sk, heads[c % 4][0], heads[c % 4][1], dims[(c / 4) % 4], types[c % 3],
                                  (c / 2) % 2, qs, ks);
        const int docs = c % 6 != 5, window = c % 3 != 2 || !docs;
        int32_t *qd = malloc(sizeof(int32_t) * (size_t)b * sq), *kd = malloc(sizeof(int32_t) * (size_t)b * sk);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)N);
        for (int bb = 0; bb < b; bb++) {
            random_docs(ids, N);
            memcpy(qd + (size_t)bb * sq, ids + qs, sizeof(int32_t) * (size_t)sq);
            memcpy(kd + (size_t)bb * sk, ids + ks, sizeof(int32_t) * (size_t)sk);
        }
        if (docs) {
            d.q_doc = qd;
            d.k_doc = kd;
        }
        if (window) {
            d.flags |= DFA_FLAG_WINDOW;
            d.window_left = windows[tl_rand_int(0, 5)];
            d.window_right = windows[tl_rand_int(0, 5)];
        }
        check_case(&d, 1);
        n++;
        free(qd); free(kd); free(ids);
    }
    printf("masks: %d cases\n", n);
}

/* Keys split into 2..5 chunks, each computed separately (with its k_start) and merged,
   must match one call over all keys. */
static void test_merge(void) {
    for (int rep = 0; rep < 12; rep++) {
        const dfa_dtype t = rep % 3 == 1 ? DFA_BF16 : DFA_F32;
        const int sq = tl_rand_int(1, 150), sk = tl_rand_int(5, 300), H = 4, Hkv = rep % 2 ? 1 : 2,
                  D = 8 * tl_rand_int(1, 12);
        const int causal = rep % 2;
        const int64_t qs = causal ? tl_rand_int(0, sk) : 0;
        dfa_attn_desc full = tl_desc(1 + rep % 2, sq, sk, H, Hkv, D, t, causal, qs, 0);
        const int64_t nq = (int64_t)full.batch * sq * H * D, nl = (int64_t)full.batch * H * sq;
        const int64_t nk = (int64_t)full.batch * sk * Hkv * D;
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk);
        tl_fill_normal(t, q, nq, 1.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nk, 1.0);
        void *oacc = tl_alloc(t, nq), *opart = tl_alloc(t, nq), *oone = tl_alloc(t, nq);
        float *lacc = malloc(4 * (size_t)nl), *lpart = malloc(4 * (size_t)nl), *lone = malloc(4 * (size_t)nl);
        CHECK(dfa_attn_fwd(&full, q, k, v, oone, lone) == DFA_OK, "merge: full fwd failed");

        const int chunks = tl_rand_int(2, 5 < sk ? 5 : sk);
        int cuts[6] = {0};
        for (int c = 1; c < chunks; c++) cuts[c] = sk * c / chunks + tl_rand_int(-1, 1) * (sk > 20);
        cuts[chunks] = sk;
        int ok = 1;
        for (int c = 0; c < chunks; c++) {
            const int k0 = cuts[c], len = cuts[c + 1] - cuts[c];
            if (len <= 0) continue;
            dfa_attn_desc part = full;
            part.seqlen_k = len;
            part.k_start = k0;
            /* this chunk's k and v rows, contiguous per batch */
            const size_t es = tl_dtype_size(t), row = (size_t)Hkv * D * es;
            char *kc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D), *vc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D);
            for (int b = 0; b < full.batch; b++) {
                memcpy(kc + (size_t)b * len * row, (char *)k + ((size_t)b * sk + k0) * row, (size_t)len * row);
                memcpy(vc + (size_t)b * len * row, (char *)v + ((size_t)b * sk + k0) * row, (size_t)len * row);
            }
            void *dst_o = c == 0 ? oacc : opart;
            float *dst_l = c == 0 ? lacc : lpart;
            ok &= dfa_attn_fwd(&part, q, kc, vc, dst_o, dst_l) == DFA_OK;
            if (c > 0) ok &= dfa_attn_merge(&full, oacc, lacc, opart, lpart) == DFA_OK;
            free(kc);
            free(vc);
        }
        CHECK(ok, "merge: a call failed: %s", dfa_last_error());
        double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk);
        double *oref = malloc(8 * (size_t)nq), *lref = malloc(8 * (size_t)nl);
        oracle_fwd(&full, fq, fk, fv, oref, lref);
        /* merged output: at most a few roundings more than one call (one per merge in the storage type) */
        const double e_one = tl_max_err(t, oone, oref, nq), e_merge = tl_max_err(t, oacc, oref, nq);
        const double unit = t == DFA_F32 ? 0x1p-20 : 0x1p-7;
        CHECK(e_merge <= 2 * e_one + chunks * unit * fmax(1.0, tl_max_abs(oref, nq)),
              "merge of %d chunks: error %.3g vs one call %.3g for %s", chunks, e_merge, e_one, tl_desc_str(&full));
        int lbad = 0;
        for (int64_t i = 0; i < nl; i++)
            lbad += lref[i] == -INFINITY ? lacc[i] != -INFINITY : !(fabs(lacc[i] - lref[i]) <= 1e-5 * (1 + fabs(lref[i])));
        CHECK(lbad == 0, "merge: %d lse rows wrong for %s", lbad, tl_desc_str(&full));
        free(q); free(k); free(v); free(oacc); free(opart); free(oone); free(lacc); free(lpart); free(lone);
        free(fq); free(fk); free(fv); free(oref); free(lref);
    }
}

/* Same inputs, any thread count: the same bits. */
static void test_determinism(void) {
    const dfa_dtype types[] = {DFA_F32, DFA_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const dfa_dtype t = types[ti];
        dfa_attn_desc d = tl_desc(2, 300, 517, 4, 2, 64, t, 1, 217, 0);
        const int64_t nq = (int64_t)d.batch * d.seqlen_q * d.num_heads * d.head_dim;
        const int64_t nk = (int64_t)d.batch * d.seqlen_k * d.num_kv_heads * d.head_dim;
        const int64_t nl = (int64_t)d.batch * d.num_heads * d.seqlen_q;
        const size_t es = tl_dtype_size(t);
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk), *dout = tl_alloc(t, nq);
        tl_fill_normal(t, q, nq, 1.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nk, 1.0);
        tl_fill_normal(t, dout, nq, 1.0);
        const int threads[] = {1, 2, 3, 5};
        void *o0 = NULL, *dq0 = NULL, *dk0 = NULL, *dv0 = NULL;
        float *l0 = NULL;
        for (int x = 0; x < 4; x++) {
            dfa_set_num_threads(threads[x]);
            void *o = tl_alloc(t, nq), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nk);
            float *l = malloc(4 * (size_t)nl);
            CHECK(dfa_attn_fwd(&d, q, k, v, o, l) == DFA_OK, "determinism: fwd failed");
            CHECK(dfa_attn_bwd(&d, q, k, v, o, l, dout, dq, dk, dv) == DFA_OK, "determinism: bwd failed");
            if (x == 0) {
                o0 = o; dq0 = dq; dk0 = dk; dv0 = dv; l0 = l;
                continue;
            }
            CHECK(!memcmp(o, o0, (size_t)nq * es) && !memcmp(l, l0, 4 * (size_t)nl),
                  "determinism: fwd differs between 1 and %d threads", threads[x]);
            CHECK(!memcmp(dq, dq0, (size_t)nq * es) && !memcmp(dk, dk0, (size_t)nk * es) &&
                      !memcmp(dv, dv0, (size_t)nk * es),
                  "determinism: bwd differs between 1 and %d threads", threads[x]);
            free(o); free(dq); free(dk); free(dv); free(l);
        }
        dfa_set_num_threads(0);
        free(o0); free(dq0); free(dk0); free(dv0); free(l0); free(q); free(k); free(v); free(dout);
    }
}

/* test_attn [--reduced]: --reduced runs every third case of the grid (used to run
   the lower SIMD paths end to end without doubling the suite's time). */
int main(int argc, char **argv) {
    const int reduced = argc > 1 && !strcmp(argv[1], "--reduced");
    tl_init("test_attn");
    printf("cpu isa: %s; %s%s\n", dfa_cpu_isa(), dfa_version_string(), reduced ? "; reduced grid" : "");
    test_grid(reduced ? 3 : 1);
    test_masks(reduced ? 3 : 1);
    test_merge();
    test_determinism();
    return tl_finish("test_attn");
}
