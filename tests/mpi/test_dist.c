/* Distributed attention under mpirun (any number of ranks): every rank's o, lse, dq, dk,
 * dv equal the single-process result on the whole sequence, for both schedules (and the
 * paper's internal one), causal and not, MHA/GQA/MQA, f32 and bf16, overlap on and off,
 * batch 1 and 2, chunks of 1 row up, with sinks (dsinks summed over the ranks), softcap and
 * value head dims of their own; outputs poisoned beforehand.
 *
 * Rank 0 draws the whole sequence's inputs and computes the references (the float64
 * oracle, the naive same-precision path that sets the error budget, and the single-process
 * library call) and broadcasts them; every rank checks its own rows: within the core's
 * tolerance of the oracle (at most 2x the naive path's error plus about an ulp at the
 * largest value; see tolerance()), and as close to the single-process result.
 *
 * The cases come in groups (test_dist --group dense|masked|lend; all without the option), so
 * that each ctest is short enough for a 2-core machine under the sanitizers. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_values.h"
#include "oracle.h"
#include "testlib.h"
#include "seqpar/dist_internal.h"
#include "seqpar/executor.h"
#include "distflash_mpi.h"

static int rank, nranks;

/* Max |got - ref| over a local slice, against a tolerance from the whole tensor. */
static void check_slice(const char *what, const char *cfg, dfa_dtype t, const void *got, const double *ref_slice,
                        int64_t n_slice, double tol) {
    const double err = tl_max_err(t, got, ref_slice, n_slice);
    CHECK(err <= tol, "rank %d: %s: max error %.3g > tol %.3g for %s", rank, what, err, tol, cfg);
}

/* The budget for one tensor: the core's rule (2x the naive same-precision error plus about
   an ulp at the largest value), or 2x the single-process library's own error when that is
   larger. The distributed result must match the library on the whole sequence; when the
   library itself misses the core's rule (a few bf16 gradients of 2-token sequences do: o is
   rounded before D = rowsum(dO o), and with two keys that rounding dominates dk), that is the
   single-device kernel's business, so it is printed as a note, not failed here. */
static double tolerance(const char *what, const char *cfg, dfa_dtype t, const void *naive, const void *single,
                        const double *ref, int64_t n) {
    const tl_quantity kind = what[0] == 'd' ? TL_GRADIENT : TL_OUTPUT;
    const double core = tl_tolerance(t, kind, tl_max_err(t, naive, ref, n), ref, n);
    const double lib = tl_tolerance(t, kind, tl_max_err(t, single, ref, n), ref, n);
    if (rank == 0 && tl_max_err(t, single, ref, n) > core)
        printf("note: the single-process %s misses the core tolerance (%.3g > %.3g) for %s\n", what,
               tl_max_err(t, single, ref, n), core, cfg);
    return fmax(core, lib);
}

/* The budget for dsinks (the rule of tests/cpu/test_features.c): the core's rule on the naive
   float32 dsinks, plus a few standard deviations of the moves that rounding o to the storage
   type makes in each D_i = dout_i . o_i, weighted by exp(sink - lse_i); or the single-process
   call's own error when that is larger. */
static double dsinks_tolerance(const dfa_attn_desc *d, dfa_dtype t, const float *naive, const float *single,
                               const double *ref, const double *fdo, const double *oref, const double *lref) {
    const int H = d->num_heads, N = d->seqlen_q, Dv = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const double u = t == DFA_F32 ? 0x1p-24 : t == DFA_F16 ? 0x1p-11 : 0x1p-8;
    double spread = 0;
    for (int h = 0; h < H; h++) {
        double s2 = 0;
        for (int b = 0; b < d->batch; b++)
            for (int i = 0; i < N; i++) {
                const double p = exp(d->sinks[h] - lref[((int64_t)b * H + h) * N + i]);
                double r2 = 0;
                for (int c = 0; c < Dv; c++) {
                    const int64_t e = (((int64_t)b * N + i) * H + h) * Dv + c;
                    r2 += fdo[e] * oref[e] * fdo[e] * oref[e];
                }
                s2 += p * p * r2;
            }
        spread = fmax(spread, 4 * u * sqrt(s2));
    }
    const double core = tl_tolerance(t, TL_GRADIENT, tl_max_err(DFA_F32, naive, ref, H), ref, H) + spread;
    const double lib = 2 * tl_max_err(DFA_F32, single, ref, H);
    return fmax(core, lib);
}

typedef struct {
    int B, n, H, Hkv, D;
    dfa_dtype t;
    int causal, overlap;
    dfa__sched_kind kind;
    int docs;                /* 1: random packed documents (lengths 1, short, about a chunk, longer);
                                2: short documents, then one over the last chunk (a busy diagonal);
                                3: one over the last chunk but one and most of the last (a split pair) */
    int window, left, right; /* DFA_FLAG_WINDOW and its sizes */
    int split;               /* dfa__dist_set_split_pairs's on: 1 the default, 0 the plans before split pairs
                                (one lent band at most), 2 split pairs without lending */
    int Dv;                  /* head_dim_v (0: D) */
    float softcap;           /* 0: off */
    int sinks;               /* 1: random sinks, and dsinks from the backward */
} dcase;

static void run_case(dfa_comm *c, const dcase *k) {
    const int B = k->B, n = k->n, N = n * nranks, H = k->H, Hkv = k->Hkv, D = k->D, Dv = k->Dv ? k->Dv : k->D;
    const dfa_dtype t = k->t;
    const size_t es = tl_dtype_size(t);
    const int64_t wq = (int64_t)H * D, wk = (int64_t)Hkv * D, wo = (int64_t)H * Dv, wv = (int64_t)Hkv * Dv;
    const int64_t NQ = (int64_t)B * N * wq, NK = (int64_t)B * N * wk, NL = (int64_t)B * H * N;
    const int64_t NO = (int64_t)B * N * wo, NV = (int64_t)B * N * wv;
    const int64_t nq = (int64_t)B * n * wq, nk = (int64_t)B * n * wk, nl = (int64_t)B * H * n;
    const int64_t no = (int64_t)B * n * wo, nv = (int64_t)B * n * wv;
    char cfg[240];
    snprintf(cfg, sizeof cfg,
             "P=%d %s B=%d n=%d H=%d Hkv=%d D=%d Dv=%d %s causal=%d overlap=%d docs=%d window=%d(%d,%d) softcap=%g "
             "sinks=%d",
             nranks, dfa__sched_name(k->kind), B, n, H, Hkv, D, Dv, cli_dtype_name(t), k->causal, k->overlap, k->docs,
             k->window, k->left, k->right, (double)k->softcap, k->sinks);
    int32_t *ids = NULL, *lids = NULL; /* the whole sequence's document ids [B][N], this rank's [B][n] */
    if (k->docs) {
        ids = malloc(sizeof(int32_t) * (size_t)B * N);
        if (rank == 0)
            for (int b = 0; b < B; b++) {
                if (k->docs == 3) tl_straddle_docs(ids + (size_t)b * N, N, n);
                else if (k->docs == 2) tl_busy_docs(ids + (size_t)b * N, N, n);
                else tl_random_docs(ids + (size_t)b * N, N, n);
            }
        MPI_Bcast(ids, B * N, MPI_INT32_T, 0, MPI_COMM_WORLD);
        lids = tl_slice_rows(DFA_F32, ids, B, N, rank * n, n, 1); /* 4-byte rows */
    }

    /* the whole sequence, drawn on rank 0 */
    void *q = tl_alloc(t, NQ), *kk = tl_alloc(t, NK), *v = tl_alloc(t, NV), *dout = tl_alloc(t, NO);
    float *sinks = k->sinks ? malloc(sizeof(float) * (size_t)H) : NULL;
    if (rank == 0) {
        tl_fill_normal(t, q, NQ, 1.0 + tl_rand_uniform());
        tl_fill_normal(t, kk, NK, 1.0);
        tl_fill_normal(t, v, NV, 1.0);
        tl_fill_normal(t, dout, NO, 1.0);
        /* sinks from well below to above a row's usual lse: from barely felt to dominant */
        for (int h = 0; sinks && h < H; h++) sinks[h] = (float)(6.0 * tl_rand_uniform() - 2.0);
    }
    MPI_Bcast(q, (int)(NQ * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(kk, (int)(NK * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(v, (int)(NV * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(dout, (int)(NO * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (sinks) MPI_Bcast(sinks, H, MPI_FLOAT, 0, MPI_COMM_WORLD);

    /* references on the whole sequence */
    dfa_attn_desc full = tl_desc(B, N, N, H, Hkv, D, t, k->causal, 0, 0);
    full.q_doc = full.k_doc = ids;
    full.head_dim_v = k->Dv;
    full.softcap = k->softcap;
    full.sinks = sinks;
    if (k->window) {
        full.flags |= DFA_FLAG_WINDOW;
        full.window_left = k->left;
        full.window_right = k->right;
    }
    /* The references are rank 0's and travel to the others: every rank would compute the
       same (the oracle is quadratic in the whole sequence, the costliest part of a case). */
    void *o1 = tl_alloc(t, NO), *dq1 = tl_alloc(t, NQ), *dk1 = tl_alloc(t, NK), *dv1 = tl_alloc(t, NV);
    float *l1 = malloc(sizeof(float) * (size_t)NL);
    double *oref = malloc(8 * (size_t)NO), *lref = malloc(8 * (size_t)NL);
    double *gq = malloc(8 * (size_t)NQ), *gk = malloc(8 * (size_t)NK), *gv = malloc(8 * (size_t)NV);
    double gs[64] = {0};            /* the oracle's dsinks (H <= 64), over every row */
    float ds1[64] = {0};            /* the single-process call's */
    double tols[5] = {0, 0, 0, 0, 0}; /* o, dq, dk, dv, dsinks */
    if (rank == 0) {
        dfa_attn_desc fb = full;
        fb.dsinks = sinks ? ds1 : NULL;
        CHECK(dfa_attn_fwd(&full, q, kk, v, o1, l1) == DFA_OK, "single fwd: %s", dfa_last_error());
        CHECK(dfa_attn_bwd(&fb, q, kk, v, o1, l1, dout, dq1, dk1, dv1) == DFA_OK, "single bwd: %s", dfa_last_error());
        double *fq = tl_to_f64(t, q, NQ), *fk = tl_to_f64(t, kk, NK), *fv = tl_to_f64(t, v, NV);
        double *fdo = tl_to_f64(t, dout, NO);
        oracle_fwd(&full, fq, fk, fv, oref, lref);
        oracle_bwd_all(&full, fq, fk, fv, fdo, gq, gk, gv, sinks ? gs : NULL);
        void *on = tl_alloc(t, NO), *dqn = tl_alloc(t, NQ), *dkn = tl_alloc(t, NK), *dvn = tl_alloc(t, NV);
        float dsn[64];
        naive_fwd_lowp(&full, q, kk, v, on);
        naive_bwd_lowp_all(&full, q, kk, v, dout, dqn, dkn, dvn, sinks ? dsn : NULL);
        tols[0] = tolerance("o", cfg, t, on, o1, oref, NO);
        tols[1] = tolerance("dq", cfg, t, dqn, dq1, gq, NQ);
        tols[2] = tolerance("dk", cfg, t, dkn, dk1, gk, NK);
        tols[3] = tolerance("dv", cfg, t, dvn, dv1, gv, NV);
        if (sinks) tols[4] = dsinks_tolerance(&full, t, dsn, ds1, gs, fdo, oref, lref);
        free(fq); free(fk); free(fv); free(fdo); free(on); free(dqn); free(dkn); free(dvn);
    }
    MPI_Bcast(o1, (int)(NO * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(dq1, (int)(NQ * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(dk1, (int)(NK * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(dv1, (int)(NV * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(l1, (int)NL, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Bcast(oref, (int)NO, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(lref, (int)NL, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(gq, (int)NQ, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(gk, (int)NK, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(gv, (int)NV, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(gs, 64, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(ds1, 64, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Bcast(tols, 5, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    const double tol_o = tols[0], tol_dq = tols[1], tol_dk = tols[2], tol_dv = tols[3], tol_ds = tols[4];

    /* this rank's rows */
    const int r0 = (int)dfa_dist_position(k->kind == DFA__SCHED_RING ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED,
                                          rank, nranks, n, 0);
    CHECK(r0 == rank * n, "dfa_dist_position: %d", r0);
    void *lq = tl_slice_rows(t, q, B, N, r0, n, wq), *lk = tl_slice_rows(t, kk, B, N, r0, n, wk);
    void *lv = tl_slice_rows(t, v, B, N, r0, n, wv), *ldo = tl_slice_rows(t, dout, B, N, r0, n, wo);
    void *lo = tl_alloc(t, no), *ldq = tl_alloc(t, nq), *ldk = tl_alloc(t, nk), *ldv = tl_alloc(t, nv);
    float *ll = malloc(sizeof(float) * (size_t)nl), lds[64];
    tl_poison(lo, (size_t)no * es);
    tl_poison(ll, sizeof(float) * (size_t)nl);
    tl_poison(ldq, (size_t)nq * es);
    tl_poison(ldk, (size_t)nk * es);
    tl_poison(ldv, (size_t)nv * es);
    tl_poison(lds, sizeof lds);

    dfa_dist_desc dd = {0};
    dd.attn = tl_desc(B, n, n, H, Hkv, D, t, k->causal, 12345, -7); /* offsets are ignored */
    dd.attn.q_doc = dd.attn.k_doc = lids;
    dd.attn.flags = full.flags;
    dd.attn.window_left = full.window_left;
    dd.attn.window_right = full.window_right;
    dd.attn.head_dim_v = k->Dv;
    dd.attn.softcap = k->softcap;
    dd.attn.sinks = sinks;
    dd.schedule = k->kind == DFA__SCHED_RING ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
    dd.overlap = k->overlap;
    dfa__dist_stats stats;
    const int masked = k->docs || k->window;
    if (masked) dfa__comm_drop_cache(c); /* the workspace grows with the calls: measure this case's */
    dfa__dist_set_split_pairs(c, k->split);
    dfa__dist_set_stats(c, &stats);
    dfa_status st = dfa__dist_fwd(c, &dd, k->kind, lq, lk, lv, lo, ll);
    dfa__dist_set_stats(c, NULL);
    CHECK(st == DFA_OK, "rank %d: dist fwd failed: %s (%s) for %s", rank, dfa_status_string(st), dfa_last_error(), cfg);
    /* a window shorter than a chunk: the diagonal, then neighbours only (each rank at most 2 of them
       causal, 4 not; test_schedule checks that only neighbours pair) */
    if (k->window && !k->docs && k->left >= 0 && k->left < n && (k->causal || (k->right >= 0 && k->right < n)))
        CHECK(stats.steps <= (nranks == 1 ? 1 : k->causal ? 3 : 5), "rank %d: %d steps under window (%d,%d) < n for %s",
              rank, stats.steps, k->left, k->right, cfg);
    /* a busy diagonal: one step of diagonals, and one for its lent rows (with chunks of two tiles
       or more: the plan balances on tile cost, DFA__PLAN_TILE) */
    const int lends = k->docs == 2 && nranks > 1 && k->causal && B == 1 && k->kind != DFA__SCHED_RING && n >= 256;
    /* (one band: 2 steps; more bands, split_pairs, may take more) */
    if (lends)
        CHECK(k->split ? stats.steps >= 2 : stats.steps == 2,
              "rank %d: %d steps with a busy last diagonal (want 2: it lends its first rows) for %s", rank, stats.steps, cfg);
    /* three ranks of 1024 rows: two ranks of short documents take a band each (the plan lends the
       diagonal in three) */
    if (lends && k->split == 1 && nranks == 3 && n == 1024)
        CHECK(stats.bands >= 2, "rank %d: %d band(s) lent by the busy diagonal for %s", rank, stats.bands, cfg);
    if (lends && !k->split) CHECK(stats.bands == 1, "rank %d: %d bands without split pairs for %s", rank, stats.bands, cfg);
    /* a dense pair of the last two chunks, 3/4 n rows: from P = 3 it is split, pieces on a third
       rank (schedule.h, split pairs), once it has two tiles of rows, when lending is off (else the
       plan may lend diagonal bands instead: the tile costs are close) */
    const int splits = k->docs == 3 && k->split == 2 && nranks > 2 && k->causal && B == 1 &&
                       k->kind != DFA__SCHED_RING && 3 * n / 4 >= 256;
    if (splits) CHECK(stats.pieces >= 2, "rank %d: %d pieces of split pairs for %s", rank, stats.pieces, cfg);
    dfa__dist_set_stats(c, &stats);
    dfa_dist_desc db = dd; /* the backward writes this rank's share of dsinks */
    db.attn.dsinks = sinks ? lds : NULL;
    st = dfa__dist_bwd(c, &db, k->kind, lq, lk, lv, lo, ll, ldo, ldq, ldk, ldv);
    dfa__dist_set_stats(c, NULL);
    if (lends)
        CHECK(k->split ? stats.steps >= 2 : stats.steps == 2, "rank %d: backward: %d steps with a busy last diagonal for %s",
              rank, stats.steps, cfg);
    if (splits) CHECK(stats.pieces >= 2, "rank %d: backward: %d pieces of split pairs for %s", rank, stats.pieces, cfg);
    CHECK(st == DFA_OK, "rank %d: dist bwd failed: %s (%s) for %s", rank, dfa_status_string(st), dfa_last_error(), cfg);
    /* a masked plan's workspace (lent rows included) within the bound the library publishes */
    if (masked) {
        const size_t bound = dfa__dist_workspace_bytes(nranks, &dd, dfa__compute_cpu(), 0);
        CHECK(c->ws_bytes <= bound, "rank %d: the masked calls took %zu bytes of workspace, above the bound %zu for %s",
              rank, c->ws_bytes, bound, cfg);
    }
    CHECK(tl_count_nan(t, lo, no) == 0 && tl_count_nan(t, ldq, nq) == 0 && tl_count_nan(t, ldk, nk) == 0 &&
              tl_count_nan(t, ldv, nv) == 0 && tl_count_nan(DFA_F32, ll, nl) == 0,
          "rank %d: outputs left unwritten (NaN) for %s", rank, cfg);
    if (sinks) { /* each rank's dsinks covers its rows; summed over the ranks (as a trainer
                    reduces a replicated parameter's gradient) they are the whole sequence's */
        CHECK(tl_count_nan(DFA_F32, lds, H) == 0, "rank %d: dsinks left unwritten (NaN) for %s", rank, cfg);
        double mine[64], sum[64];
        for (int h = 0; h < H; h++) mine[h] = lds[h];
        MPI_Allreduce(mine, sum, H, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        double err = 0, err1 = 0, single = 0;
        for (int h = 0; h < H; h++) {
            err = fmax(err, fabs(sum[h] - gs[h]));
            err1 = fmax(err1, fabs(sum[h] - ds1[h]));
            single = fmax(single, fabs(ds1[h] - gs[h]));
        }
        CHECK(err <= tol_ds && err1 <= tol_ds + single,
              "rank %d: dsinks summed over the ranks: error %.3g vs the oracle (tol %.3g), %.3g vs the single-process "
              "call (tol %.3g) for %s", rank, err, tol_ds, err1, tol_ds + single, cfg);
    }

    /* against the oracle */
    double *so = tl_slice_rows_f64(oref, B, N, r0, n, wo), *sdq = tl_slice_rows_f64(gq, B, N, r0, n, wq);
    double *sdk = tl_slice_rows_f64(gk, B, N, r0, n, wk), *sdv = tl_slice_rows_f64(gv, B, N, r0, n, wv);
    check_slice("o vs oracle", cfg, t, lo, so, no, tol_o);
    check_slice("dq vs oracle", cfg, t, ldq, sdq, nq, tol_dq);
    check_slice("dk vs oracle", cfg, t, ldk, sdk, nk, tol_dk);
    check_slice("dv vs oracle", cfg, t, ldv, sdv, nv, tol_dv);
    int lbad = 0, lbad1 = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const double ref = lref[((int64_t)b * H + h) * N + r0 + i];
                const float got = ll[((int64_t)b * H + h) * n + i], one = l1[((int64_t)b * H + h) * N + r0 + i];
                lbad += !(fabs(got - ref) <= 2e-5 * (1.0 + fabs(ref)));
                lbad1 += !(fabs(got - one) <= 2e-5 * (1.0 + fabs(ref)));
            }
    CHECK(lbad == 0 && lbad1 == 0, "rank %d: lse: %d rows off the oracle, %d off the single-process call for %s",
          rank, lbad, lbad1, cfg);
    /* against the single-process library call, with the same budget */
    double *s1o = tl_to_f64(t, o1, NO), *s1q = tl_to_f64(t, dq1, NQ), *s1k = tl_to_f64(t, dk1, NK),
           *s1v = tl_to_f64(t, dv1, NV);
    double *x;
    check_slice("o vs single", cfg, t, lo, x = tl_slice_rows_f64(s1o, B, N, r0, n, wo), no, tol_o);
    free(x);
    check_slice("dq vs single", cfg, t, ldq, x = tl_slice_rows_f64(s1q, B, N, r0, n, wq), nq, tol_dq);
    free(x);
    check_slice("dk vs single", cfg, t, ldk, x = tl_slice_rows_f64(s1k, B, N, r0, n, wk), nk, tol_dk);
    free(x);
    check_slice("dv vs single", cfg, t, ldv, x = tl_slice_rows_f64(s1v, B, N, r0, n, wv), nv, tol_dv);
    free(x);

    /* the step-0 diagonal's direct writes (device backends: exec_io.c, use_direct), forced
       here: the same bits as the accumulators' rounding, every element written */
    {
        void *xo = tl_alloc(t, no), *xq = tl_alloc(t, nq), *xk = tl_alloc(t, nk), *xv = tl_alloc(t, nv);
        float *xl = malloc(sizeof(float) * (size_t)nl), xs[64];
        tl_poison(xo, (size_t)no * es);
        tl_poison(xq, (size_t)nq * es);
        tl_poison(xk, (size_t)nk * es);
        tl_poison(xv, (size_t)nv * es);
        tl_poison(xl, sizeof(float) * (size_t)nl);
        tl_poison(xs, sizeof xs);
        dfa__dist_force_direct(c, 1);
        st = dfa__dist_fwd(c, &dd, k->kind, lq, lk, lv, xo, xl);
        CHECK(st == DFA_OK, "rank %d: fwd with direct writes failed: %s for %s", rank, dfa_last_error(), cfg);
        dfa_dist_desc dx = dd;
        dx.attn.dsinks = sinks ? xs : NULL;
        st = dfa__dist_bwd(c, &dx, k->kind, lq, lk, lv, lo, ll, ldo, xq, xk, xv);
        CHECK(st == DFA_OK, "rank %d: bwd with direct writes failed: %s for %s", rank, dfa_last_error(), cfg);
        dfa__dist_force_direct(c, 0);
        CHECK(!memcmp(xo, lo, (size_t)no * es) && !memcmp(xl, ll, sizeof(float) * (size_t)nl),
              "rank %d: o or lse differ with direct writes for %s", rank, cfg);
        CHECK(!memcmp(xq, ldq, (size_t)nq * es) && !memcmp(xk, ldk, (size_t)nk * es) &&
                  !memcmp(xv, ldv, (size_t)nv * es) && (!sinks || !memcmp(xs, lds, sizeof(float) * (size_t)H)),
              "rank %d: dq, dk, dv or dsinks differ with direct writes for %s", rank, cfg);
        free(xo); free(xq); free(xk); free(xv); free(xl);
    }

    /* DFA_FLAG_SAME_DOCS: the calls above left this mask's ids with the communicator, so the
       flag reuses them (same bits); when one rank has forgotten them every rank reads them
       again (no hang, same bits); ids changed under the promise are not read, so the result
       is the kept ids' (as documented: the promise is not checked) */
    if (k->docs) {
        int32_t *other = malloc(sizeof(int32_t) * (size_t)B * n);
        for (int i = 0; i < B * n; i++) other[i] = 7; /* one document */
        void *xo = tl_alloc(t, no), *xq = tl_alloc(t, nq), *xk = tl_alloc(t, nk), *xv = tl_alloc(t, nv);
        float *xl = malloc(sizeof(float) * (size_t)nl);
        static const char *const round_name[] = {"kept ids", "kept on some ranks only", "ids changed under the flag"};
        for (int round = 0; round < 3; round++) {
            if (round == 1 && rank == 0) dfa__comm_drop_cache(c);
            dfa_dist_desc sd = dd;
            sd.attn.flags |= DFA_FLAG_SAME_DOCS;
            if (round == 2) sd.attn.q_doc = sd.attn.k_doc = other;
            tl_poison(xo, (size_t)no * es);
            tl_poison(xl, sizeof(float) * (size_t)nl);
            tl_poison(xq, (size_t)nq * es);
            tl_poison(xk, (size_t)nk * es);
            tl_poison(xv, (size_t)nv * es);
            st = dfa__dist_fwd(c, &sd, k->kind, lq, lk, lv, xo, xl);
            CHECK(st == DFA_OK, "rank %d: fwd, DFA_FLAG_SAME_DOCS (%s): %s for %s", rank, round_name[round],
                  dfa_last_error(), cfg);
            st = dfa__dist_bwd(c, &sd, k->kind, lq, lk, lv, lo, ll, ldo, xq, xk, xv);
            CHECK(st == DFA_OK, "rank %d: bwd, DFA_FLAG_SAME_DOCS (%s): %s for %s", rank, round_name[round],
                  dfa_last_error(), cfg);
            CHECK(!memcmp(xo, lo, (size_t)no * es) && !memcmp(xl, ll, sizeof(float) * (size_t)nl) &&
                      !memcmp(xq, ldq, (size_t)nq * es) && !memcmp(xk, ldk, (size_t)nk * es) &&
                      !memcmp(xv, ldv, (size_t)nv * es),
                  "rank %d: outputs differ with DFA_FLAG_SAME_DOCS (%s) for %s", rank, round_name[round], cfg);
        }
        free(xo); free(xq); free(xk); free(xv); free(xl); free(other);
    }

    /* lse may be NULL in the forward (inference), like dfa_attn_fwd */
    tl_poison(lo, (size_t)no * es);
    st = dfa__dist_fwd(c, &dd, k->kind, lq, lk, lv, lo, NULL);
    CHECK(st == DFA_OK, "rank %d: fwd without lse failed: %s", rank, dfa_last_error());
    check_slice("o (lse NULL) vs oracle", cfg, t, lo, so, no, tol_o);

    free(q); free(kk); free(v); free(dout); free(o1); free(dq1); free(dk1); free(dv1); free(l1);
    free(oref); free(lref); free(gq); free(gk); free(gv);
    free(lq); free(lk); free(lv); free(ldo); free(lo); free(ldq); free(ldk); free(ldv); free(ll);
    free(so); free(sdq); free(sdk); free(sdv); free(s1o); free(s1q); free(s1k); free(s1v);
    free(ids); free(lids); free(sinks);
}

/* A call split into groups of heads (as the device backends do when memory is short) gives
   the same bits as one pass: each group is the same computation on its heads (the last shape
   with sinks, dsinks, softcap and a value head dim of its own: each group its own sinks). */
static void check_head_groups(dfa_comm *c) {
    static const int shapes[][4] = {{8, 4, 16, 0}, {6, 3, 32, 0}, {4, 4, 16, 0}, {8, 4, 32, 16}}; /* H, Hkv, D, Dv */
    for (int si = 0; si < 4; si++) {
        const int B = 2, n = 7 + si, H = shapes[si][0], Hkv = shapes[si][1], D = shapes[si][2];
        const int Dv = shapes[si][3] ? shapes[si][3] : D, v3 = si == 3;
        const dfa_dtype t = si == 1 ? DFA_F32 : DFA_BF16;
        const int64_t nq = (int64_t)B * n * H * D, nk = (int64_t)B * n * Hkv * D, nl = (int64_t)B * H * n;
        const int64_t no = (int64_t)B * n * H * Dv, nv = (int64_t)B * n * Hkv * Dv;
        const size_t es = tl_dtype_size(t);
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nv), *dout = tl_alloc(t, no);
        tl_fill_normal(t, q, nq, 1.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nv, 1.0);
        tl_fill_normal(t, dout, no, 1.0);
        float sinks[8], ds[2][8];
        for (int h = 0; h < H; h++) sinks[h] = 0.5f * (float)h - 1.0f;
        dfa_dist_desc d = dfa_dist_desc_init(B, n, H, Hkv, D);
        d.attn.dtype = t;
        d.attn.causal = 1;
        d.overlap = si % 2;
        if (v3) {
            d.attn.head_dim_v = Dv;
            d.attn.softcap = 3.0f;
            d.attn.sinks = sinks;
        }
        void *out[2][4];
        float *lse[2];
        for (int pass = 0; pass < 2; pass++) {
            const int groups = pass == 0 ? 1 : (si == 2 ? 4 : 2);
            dfa__dist_force_head_groups(c, groups);
            out[pass][0] = tl_alloc(t, no), out[pass][1] = tl_alloc(t, nq);
            out[pass][2] = tl_alloc(t, nk), out[pass][3] = tl_alloc(t, nv);
            lse[pass] = malloc(sizeof(float) * (size_t)nl);
            tl_poison(out[pass][0], (size_t)no * es);
            tl_poison(lse[pass], sizeof(float) * (size_t)nl);
            tl_poison(ds[pass], sizeof ds[pass]);
            CHECK(dfa_dist_attn_fwd(c, &d, q, k, v, out[pass][0], lse[pass]) == DFA_OK, "groups %d fwd: %s", groups,
                  dfa_last_error());
            dfa_dist_desc db = d;
            db.attn.dsinks = v3 ? ds[pass] : NULL;
            CHECK(dfa_dist_attn_bwd(c, &db, q, k, v, out[pass][0], lse[pass], dout, out[pass][1], out[pass][2],
                                    out[pass][3]) == DFA_OK,
                  "groups %d bwd: %s", groups, dfa_last_error());
        }
        dfa__dist_force_head_groups(c, 0);
        const size_t bytes[4] = {(size_t)no * es, (size_t)nq * es, (size_t)nk * es, (size_t)nv * es};
        static const char *const what[4] = {"o", "dq", "dk", "dv"};
        for (int i = 0; i < 4; i++)
            CHECK(!memcmp(out[0][i], out[1][i], bytes[i]), "rank %d: %s differs in head groups (H=%d Hkv=%d)", rank,
                  what[i], H, Hkv);
        CHECK(!memcmp(lse[0], lse[1], sizeof(float) * (size_t)nl), "rank %d: lse differs in head groups", rank);
        if (v3)
            CHECK(!memcmp(ds[0], ds[1], sizeof(float) * (size_t)H) && tl_count_nan(DFA_F32, ds[0], H) == 0,
                  "rank %d: dsinks differ in head groups (or NaN)", rank);
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < 4; i++) free(out[pass][i]);
            free(lse[pass]);
        }
        free(q); free(k); free(v); free(dout);
    }
}

/* The group of cases to run (--group NAME), or NULL for all. */
static const char *only;
static int group(const char *name) { return !only || !strcmp(only, name); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--group")) only = argv[i + 1];
    if (only && strcmp(only, "dense") && strcmp(only, "masked") && strcmp(only, "lend")) {
        fprintf(stderr, "test_dist: --group takes dense, masked or lend\n");
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank == 0) tl_init("test_dist");
    dfa_comm *c = NULL;
    dfa_status st = dfa_comm_create_mpi(MPI_COMM_WORLD, &c);
    CHECK(st == DFA_OK, "dfa_comm_create_mpi: %s", dfa_last_error());
    CHECK(dfa_comm_rank(c) == rank && dfa_comm_size(c) == nranks, "rank/size %d/%d", dfa_comm_rank(c),
          dfa_comm_size(c));

    static const int heads[][2] = {{4, 4}, {4, 2}, {6, 2}, {4, 1}};
    static const int rows[] = {9, 16, 1, 13, 24, 2};
    int ncase = 0;
    for (int ti = 0; ti < 2 && group("dense"); ti++)
        for (int causal = 0; causal <= 1; causal++)
            for (int ki = 0; ki < 2; ki++)
                for (int overlap = 0; overlap <= 1; overlap++) {
                    const int i = ncase++;
                    dcase k = {1 + (i % 3 == 1), rows[i % 6], heads[i % 4][0], heads[i % 4][1], i % 2 ? 16 : 32,
                               ti ? DFA_BF16 : DFA_F32, causal, overlap,
                               ki ? DFA__SCHED_RING : DFA__SCHED_BALANCED, 0, 0, 0, 0, 1, 0, 0.0f, 0};
                    run_case(c, &k);
                }
    /* the paper's published schedule (internal; dist-bench compares it) */
    for (int i = 0; i < 2 && group("dense"); i++) {
        dcase k = {2, 10 + i, 4, 2, 16, i ? DFA_BF16 : DFA_F32, 1, i, DFA__SCHED_PAPER, 0, 0, 0, 0, 1, 0, 0.0f, 0};
        run_case(c, &k);
        ncase++;
    }
    /* sinks (causal and not, GQA), softcap with GQA, value head dims of their own (192/128,
       128/64), and all three together: both schedules, f32 and bf16, overlap on and off */
    for (int i = 0; i < 7 && group("dense"); i++) {
        static const int dims[7][2] = {{16, 0}, {32, 0}, {16, 0}, {32, 0}, {192, 128}, {128, 64}, {64, 32}};
        dcase k = {1 + (i % 3 == 2), rows[i % 6] + 1, heads[(i + 1) % 4][0], heads[(i + 1) % 4][1], dims[i][0],
                   i % 2 ? DFA_BF16 : DFA_F32, i != 1, i % 2, i % 3 == 1 ? DFA__SCHED_RING : DFA__SCHED_BALANCED,
                   0, 0, 0, 0, 1, dims[i][1], i == 2 || i == 3 || i == 6 ? 4.0f : 0.0f, i < 2 || i == 6};
        run_case(c, &k);
        ncase++;
    }
    /* documents and sliding windows: windows of 0, 1, a chunk and wider, one and two sided */
    for (int i = 0; i < 12 && group("masked"); i++) {
        const int n = rows[i % 6] + 2, w[] = {0, 1, n, n / 2, 2 * n + 1, -1};
        dcase k = {1 + (i % 4 == 3), n, heads[i % 4][0], heads[i % 4][1], 16, i % 3 ? DFA_BF16 : DFA_F32,
                   i % 5 != 4, i % 2, i % 3 == 2 ? DFA__SCHED_RING : DFA__SCHED_BALANCED, i % 3 != 1, i % 3 != 0,
                   w[i % 6], w[(i / 2 + 5) % 6], 1, 0, 0.0f, 0};
        run_case(c, &k);
        ncase++;
    }
    /* sinks with windows, documents and both; softcap with documents and GQA; value head dims
       of their own under masks (192/128 windowed, 128/64 with documents) */
    for (int i = 0; i < 6 && group("masked"); i++) {
        const int n = rows[(i + 2) % 6] + 3;
        static const int docs[6] = {0, 1, 1, 1, 0, 1}, win[6] = {1, 0, 1, 0, 1, 1}, dims[6][2] = {
            {16, 0}, {16, 0}, {32, 0}, {16, 0}, {192, 128}, {128, 64}};
        dcase k = {1 + (i == 3), n, heads[i % 4][0], heads[i % 4][1], dims[i][0], i % 2 ? DFA_BF16 : DFA_F32,
                   i != 2, i % 2, i == 1 ? DFA__SCHED_RING : DFA__SCHED_BALANCED, docs[i], win[i], n / 2 + 1,
                   i == 2 ? 3 : 0, 1, dims[i][1], i == 3 ? 6.0f : 0.0f, i < 3 || i == 5};
        run_case(c, &k);
        ncase++;
    }
    /* a busy last diagonal lends its first rows: both passes, float32 and bf16, GQA, overlap on
       and off, windows; B = 2 and the ring do not lend (checked against the oracle all the same).
       Chunks this small are memory-bound: with the folds costed (DFA__PLAN_FOLD_COST) no lending
       would pay, so the plans here leave them out. */
    dfa__dist_set_fold_cost(c, 0);
    for (int i = 0; i < 8 && group("lend"); i++) {
        /* tiles of 128 rows: lending needs n >= 256; at 1024 the plan lends as many rows as a
           lent block may take (dfa__lend_rows: the workspace bound's limit, checked below) */
        const int n = (int[]){nranks <= 3 ? 1024 : 640, 300, 24, 37}[i % 4];
        dcase k = {1 + (i == 7), n, heads[i % 4][0], heads[i % 4][1], 16, i % 2 ? DFA_BF16 : DFA_F32, 1, i % 3 != 1,
                   i == 6 ? DFA__SCHED_RING : i == 5 ? DFA__SCHED_PAPER : DFA__SCHED_BALANCED, 2, i == 3, n / 2, 0, i < 4, 0, 0.0f, 0};
        run_case(c, &k);
        ncase++;
    }
    /* a dense pair of the last two chunks is split (its last rows on a third rank from P = 3):
       both passes, float32 and bf16, GQA, overlap on and off; B = 2 and the ring do not split */
    for (int i = 0; i < 5 && group("lend"); i++) {
        const int n = i == 4 ? 300 : 384;
        dcase k = {1 + (i == 3), n, heads[i % 4][0], heads[i % 4][1], 16, i % 2 ? DFA_BF16 : DFA_F32, 1, i % 3 != 1,
                   i == 2 ? DFA__SCHED_RING : DFA__SCHED_BALANCED, 3, 0, 0, 0, i % 2 ? 1 : 2, 0, 0.0f, 0};
        run_case(c, &k);
        ncase++;
    }
    /* ... with sinks and a value head dim of its own, lending and splitting */
    for (int i = 0; i < 2 && group("lend"); i++) {
        dcase k = {1, i ? 384 : 300, 4, 2, 32, i ? DFA_BF16 : DFA_F32, 1, 1, DFA__SCHED_BALANCED, i ? 3 : 2, 0, 0, 0,
                   i ? 2 : 1, 16, 0.0f, 1};
        run_case(c, &k);
        ncase++;
    }
    dfa__dist_set_fold_cost(c, -1);
    /* the same shapes and mask fields with fresh ids, three times: the communicator keeps the last
       masked plan's pair work for calls with the same ids (the backward after its forward) and
       must count again when only the ids' values change */
    for (int i = 0; i < 3 && group("masked"); i++) {
        dcase k = {1, 9, 4, 2, 16, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, 1, 0, 0, 0, 1, 0, 0.0f, 0};
        run_case(c, &k);
        ncase++;
    }
    if (group("dense")) check_head_groups(c);
    dfa_comm_destroy(c);
    int fails = tl_failures, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("test_dist: %d ranks, %d cases (%s)\n", nranks, ncase, only ? only : "every group");
    const int rc = tl_finish("test_dist");
    MPI_Finalize();
    return rc || all ? 1 : 0;
}
