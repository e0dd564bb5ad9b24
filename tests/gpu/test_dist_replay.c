/* DistFlashAttn's executor for P ranks on one GPU, by replay (label gpu; no MPI, no NCCL).
 *
 * A machine with two GPUs is rarely lent, and NCCL refuses two ranks on one device, so this runs
 * the P ranks' passes one after another on one GPU through a communicator that records what each
 * rank sends and delivers it on the next round to the rank that receives it (messages match by
 * sender, receiver, tag and order, as the real backends match them). A rank's inputs (keys and
 * values, query rows) are its peers' own data, and its results depend only on its inputs, so
 * round 1 records every input, round 2 computes every result from the right inputs, and round 3
 * delivers the right results: each rank's outputs are then what a real P-rank call computes, with
 * the same plan, messages, blocks on the CUDA compute table, folds and roundings. Not tested
 * here: concurrency, NCCL itself, the device-side agreement (test_dist_gpu does those on two GPUs).
 *
 * Checked against the float64 oracle and the single-GPU call on the whole sequence (the tolerance
 * rule of testlib.h), outputs poisoned first, for P = 2..5: the masked plans with their lent
 * bands and split pairs (schedule.h; layouts that force them, the plan before them too), random
 * documents and windows, GQA, bf16 and f16, and the unmasked schedules. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_loop.h"
#include "distflash_cuda.h"
#include "dist_check.h"
#include "gpu_util.h"
#include "oracle.h"
#include "common/error.h"
#include "seqpar/comm.h"
#include "seqpar/compute.h"
#include "seqpar/executor.h"
#include "testlib.h"

/* --- the replay communicator ----------------------------------------------------------------- */

typedef struct {
    int src, dst, tag, seq;
    size_t bytes;
    void *dev; /* the sent bytes (a copy; the round's record) */
} message;

typedef struct {
    message *m;
    int n, cap;
} message_list;

/* What every rank sent in this round (rec) and in the last (prev), and what was received in this
   round (for the receivers' order). Shared by the P communicators of a case. */
static message_list rec, prev, recvd;
static const int32_t *all_ids; /* every rank's ids on the device, [P][batch][n] */

static void list_push(message_list *l, message x) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->m = realloc(l->m, sizeof *l->m * (size_t)l->cap);
        if (!l->m) abort();
    }
    l->m[l->n++] = x;
}

static void list_clear(message_list *l) {
    for (int i = 0; i < l->n; i++) cudaFree(l->m[i].dev);
    l->n = 0;
}

/* How many messages from src to dst with tag the list holds (the order of the next one). */
static int list_count(const message_list *l, int src, int dst, int tag) {
    int k = 0;
    for (int i = 0; i < l->n; i++) k += l->m[i].src == src && l->m[i].dst == dst && l->m[i].tag == tag;
    return k;
}

/* The next round: what was recorded becomes what is delivered. */
static void next_round(void) {
    CUDA_OK(cudaDeviceSynchronize());
    list_clear(&prev);
    message_list t = prev;
    prev = rec;
    rec = t;
    recvd.n = 0;
}

static void forget_all(void) {
    CUDA_OK(cudaDeviceSynchronize());
    list_clear(&prev);
    list_clear(&rec);
    recvd.n = 0;
}

static dfa_status replay_start(dfa_comm *c, const dfa__xfer *x, int n, void **pending) {
    cudaStream_t s = (cudaStream_t)c->stream;
    for (int i = 0; i < n; i++) {
        if (x[i].is_send) {
            message m = {c->rank, x[i].peer, x[i].tag, list_count(&rec, c->rank, x[i].peer, x[i].tag), x[i].bytes, NULL};
            if (cudaMalloc(&m.dev, x[i].bytes ? x[i].bytes : 1) != cudaSuccess ||
                (x[i].bytes && cudaMemcpyAsync(m.dev, x[i].buf, x[i].bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess))
                return dfa__fail(DFA_ERR_BACKEND, "replay", "cannot record a message");
            list_push(&rec, m);
            continue;
        }
        const int seq = list_count(&recvd, x[i].peer, c->rank, x[i].tag);
        list_push(&recvd, (message){x[i].peer, c->rank, x[i].tag, seq, x[i].bytes, NULL});
        const message *found = NULL;
        for (int j = 0; j < prev.n && !found; j++)
            if (prev.m[j].src == x[i].peer && prev.m[j].dst == c->rank && prev.m[j].tag == x[i].tag && prev.m[j].seq == seq)
                found = &prev.m[j];
        if (found && found->bytes != x[i].bytes)
            return dfa__fail(DFA_ERR_INTERNAL, "replay", "rank %d expects %zu bytes from rank %d (tag %d), which sent %zu",
                             c->rank, x[i].bytes, x[i].peer, x[i].tag, found->bytes);
        const cudaError_t e = !x[i].bytes ? cudaSuccess
                              : found     ? cudaMemcpyAsync(x[i].buf, found->dev, x[i].bytes, cudaMemcpyDeviceToDevice, s)
                                          : cudaMemsetAsync(x[i].buf, 0, x[i].bytes, s); /* round 1 */
        if (e != cudaSuccess) return dfa__fail(DFA_ERR_BACKEND, "replay", "%s", cudaGetErrorString(e));
    }
    *pending = NULL;
    return DFA_OK;
}

static dfa_status replay_wait(dfa_comm *c, void *pending) {
    (void)c;
    (void)pending;
    return DFA_OK; /* the copies were ordered on the call's stream */
}

static dfa_status replay_allgather(dfa_comm *c, const void *send, void *recv, size_t bytes) {
    (void)send;
    return comm_loop_allgather_ids(c, recv, bytes, all_ids, "replay");
}

static void replay_destroy(dfa_comm *c) { free(c); }

static const dfa__comm_ops replay_ops = {
    .name = "replay",
    .start = replay_start,
    .wait = replay_wait,
    .allreduce_max = comm_loop_allreduce_max, /* every case is valid on every rank */
    .bcast = comm_loop_bcast,
    .allgather = replay_allgather,
    .destroy = replay_destroy,
};

static dfa_comm *replay_create(int rank, int size) {
    dfa_comm *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->ops = &replay_ops;
    c->compute = dfa__compute_cuda();
    c->rank = rank;
    c->size = size;
    c->call = "replay";
    return c;
}

/* --- the cases ------------------------------------------------------------------------------- */

typedef struct {
    int P, B, n, H, Hkv, D;
    dfa_dtype t;
    int causal;
    dfa__sched_kind kind;
    int docs;                /* 0 none; 1 random; 2 a busy last diagonal; 3 a dense pair of the last two chunks */
    int window, left, right; /* DFA_FLAG_WINDOW and its sizes */
    int split;               /* dfa__dist_set_split_pairs: 1 the library's plan, 0 the plan before, 2 pieces only */
    int fold_cost;           /* dfa__dist_set_fold_cost (-1: the library's) */
    int direct;              /* dfa__dist_force_direct */
    int rounds;              /* 0: three (right); fewer leave results undelivered, which the checks must see */
    int sinks;               /* 1: random sinks; each rank's dsinks, summed, against the oracle's */
    float softcap;           /* 0: none */
} rcase;

static int checked;

static void set_mask(dfa_attn_desc *a, const rcase *k, const int32_t *ids) {
    a->q_doc = a->k_doc = k->docs ? ids : NULL;
    if (k->window) {
        a->flags |= DFA_FLAG_WINDOW;
        a->window_left = k->left;
        a->window_right = k->right;
    }
}

/* One pass of every rank (dd: each rank's descriptor), three rounds (see the top); the last
   round's outputs stay. stats: rank 0's of the last round. */
static dfa_status run_pass(dfa_comm **cs, const rcase *k, const dfa_dist_desc *dd, dfa__pass pass, char *const *q,
                           char *const *kk, char *const *v, char *const *o, float *const *lse, char *const *dout,
                           char *const *dq, char *const *dk, char *const *dv, cudaStream_t s, dfa__dist_stats *stats) {
    const int rounds = k->rounds ? k->rounds : 3;
    forget_all();
    for (int round = 0; round < rounds; round++) {
        for (int r = 0; r < k->P; r++) {
            cs[r]->stream = s;
            dfa__dist_io io = {.q = q[r], .k = kk[r], .v = v[r]};
            if (pass == DFA__PASS_FWD) {
                io.o_out = o[r];
                io.lse_out = lse[r];
            } else {
                io.o = o[r], io.lse = lse[r], io.dout = dout[r], io.dq = dq[r], io.dk = dk[r], io.dv = dv[r];
            }
            dfa__dist_set_stats(cs[r], round == rounds - 1 && r == 0 ? stats : NULL);
            const dfa_status st = dfa__dist_run(cs[r], &dd[r], k->kind, pass, &io, DFA_OK, "replay");
            dfa__dist_set_stats(cs[r], NULL);
            if (st) return st;
        }
        next_round();
    }
    forget_all();
    return DFA_OK;
}

static void run_case(const rcase *k, cudaStream_t s) {
    const int P = k->P, B = k->B, n = k->n, N = n * P, H = k->H, Hkv = k->Hkv, D = k->D;
    const dfa_dtype t = k->t;
    const size_t es = tl_dtype_size(t);
    const int64_t wq = (int64_t)H * D, wk = (int64_t)Hkv * D;
    const int64_t NQ = (int64_t)B * N * wq, NK = (int64_t)B * N * wk, NL = (int64_t)B * H * N;
    const int64_t nq = (int64_t)B * n * wq, nk = (int64_t)B * n * wk, nl = (int64_t)B * H * n;
    char cfg[260];
    snprintf(cfg, sizeof cfg,
             "P=%d %s B=%d n=%d H=%d Hkv=%d D=%d %s causal=%d docs=%d window=%d(%d,%d) split=%d fold=%d direct=%d sinks=%d "
             "softcap=%g",
             P, dfa__sched_name(k->kind), B, n, H, Hkv, D, t == DFA_BF16 ? "bf16" : "f16", k->causal, k->docs, k->window,
             k->left, k->right, k->split, k->fold_cost, k->direct, k->sinks, (double)k->softcap);

    /* the whole sequence */
    void *hq = tl_alloc(t, NQ), *hk = tl_alloc(t, NK), *hv = tl_alloc(t, NK), *hdo = tl_alloc(t, NQ);
    tl_fill_normal(t, hq, NQ, 1.0 + tl_rand_uniform());
    tl_fill_normal(t, hk, NK, 1.0);
    tl_fill_normal(t, hv, NK, 1.0);
    tl_fill_normal(t, hdo, NQ, 1.0);
    float hs[16];
    for (int h = 0; h < H; h++) hs[h] = (float)(6.0 * tl_rand_uniform() - 2.0);
    float *sinks_dev = k->sinks ? dev_copy_of(hs, sizeof(float) * (size_t)H) : NULL;
    int32_t *ids = NULL, *ids_ranks = NULL; /* [B][N]; [P][B][n] */
    if (k->docs) {
        ids = malloc(sizeof(int32_t) * (size_t)B * N);
        ids_ranks = malloc(sizeof(int32_t) * (size_t)B * N);
        for (int b = 0; b < B; b++) {
            int32_t *row = ids + (size_t)b * N;
            if (k->docs == 3) tl_straddle_docs(row, N, n);
            else if (k->docs == 2) tl_busy_docs(row, N, n);
            else tl_random_docs(row, N, n);
        }
        for (int r = 0; r < P; r++)
            for (int b = 0; b < B; b++)
                memcpy(ids_ranks + ((size_t)r * B + b) * n, ids + (size_t)b * N + (size_t)r * n, sizeof(int32_t) * (size_t)n);
    }

    /* references: the oracle, the naive same-precision path, our single-GPU call */
    dfa_attn_desc full = tl_desc(B, N, N, H, Hkv, D, t, k->causal, 0, 0);
    set_mask(&full, k, ids);
    full.sinks = k->sinks ? hs : NULL;
    full.softcap = k->softcap;
    double *fq = tl_to_f64(t, hq, NQ), *fk = tl_to_f64(t, hk, NK), *fv = tl_to_f64(t, hv, NK), *fdo = tl_to_f64(t, hdo, NQ);
    double *oref = malloc(8 * (size_t)NQ), *lref = malloc(8 * (size_t)NL), *gq = malloc(8 * (size_t)NQ),
           *gk = malloc(8 * (size_t)NK), *gv = malloc(8 * (size_t)NK);
    oracle_fwd(&full, fq, fk, fv, oref, lref);
    double gs[16];
    oracle_bwd_all(&full, fq, fk, fv, fdo, gq, gk, gv, k->sinks ? gs : NULL);
    void *on = tl_alloc(t, NQ), *dqn = tl_alloc(t, NQ), *dkn = tl_alloc(t, NK), *dvn = tl_alloc(t, NK);
    float dsn[16], ds1[16];
    naive_fwd_lowp(&full, hq, hk, hv, on);
    naive_bwd_lowp_all(&full, hq, hk, hv, hdo, dqn, dkn, dvn, k->sinks ? dsn : NULL);
    const size_t QB = (size_t)NQ * es, KB = (size_t)NK * es, LB = sizeof(float) * (size_t)NL;
    void *o1 = malloc(QB), *dq1 = malloc(QB), *dk1 = malloc(KB), *dv1 = malloc(KB);
    {
        dfa_attn_desc g = full;
        int32_t *gids = k->docs ? dev_copy_of(ids, sizeof(int32_t) * (size_t)B * N) : NULL;
        set_mask(&g, k, gids);
        g.sinks = sinks_dev;
        void *q = dev_copy_of(hq, QB), *kk = dev_copy_of(hk, KB), *v = dev_copy_of(hv, KB), *dout = dev_copy_of(hdo, QB);
        void *go = dev_alloc(QB), *gdq = dev_alloc(QB), *gdk = dev_alloc(KB), *gdv = dev_alloc(KB);
        float *gl = dev_alloc(LB), *gds = dev_alloc(sizeof ds1);
        CHECK(dfa_attn_fwd_cuda(&g, q, kk, v, go, gl, s) == DFA_OK, "single fwd: %s", dfa_last_error());
        g.dsinks = sinks_dev ? gds : NULL;
        CHECK(dfa_attn_bwd_cuda(&g, q, kk, v, go, gl, dout, gdq, gdk, gdv, s) == DFA_OK, "single bwd: %s", dfa_last_error());
        to_host(ds1, gds, sizeof ds1);
        cudaFree(gds);
        to_host(o1, go, QB);
        to_host(dq1, gdq, QB);
        to_host(dk1, gdk, KB);
        to_host(dv1, gdv, KB);
        void *p[10] = {q, kk, v, dout, go, gdq, gdk, gdv, gl, gids};
        for (int i = 0; i < 10; i++) cudaFree(p[i]);
    }
    const double tol_o = dist_budget(t, TL_OUTPUT, on, o1, oref, NQ), tol_dq = dist_budget(t, TL_GRADIENT, dqn, dq1, gq, NQ);
    const double tol_dk = dist_budget(t, TL_GRADIENT, dkn, dk1, gk, NK), tol_dv = dist_budget(t, TL_GRADIENT, dvn, dv1, gv, NK);
    const double tol_ds = k->sinks ? dist_dsinks_budget(&full, dsn, ds1, gs, fdo, oref, lref) : 0.0;

    /* every rank's chunk on the device, outputs poisoned */
    char *q[8], *kk[8], *v[8], *dout[8], *o[8], *dq[8], *dk[8], *dv[8];
    float *lse[8], *dsinks[8];
    int32_t *lids[8];
    dfa_comm *cs[8];
    for (int r = 0; r < P; r++) {
        void *lq = tl_slice_rows(t, hq, B, N, r * n, n, wq), *lk = tl_slice_rows(t, hk, B, N, r * n, n, wk);
        void *lv = tl_slice_rows(t, hv, B, N, r * n, n, wk), *ldo = tl_slice_rows(t, hdo, B, N, r * n, n, wq);
        q[r] = dev_copy_of(lq, (size_t)nq * es), kk[r] = dev_copy_of(lk, (size_t)nk * es);
        v[r] = dev_copy_of(lv, (size_t)nk * es), dout[r] = dev_copy_of(ldo, (size_t)nq * es);
        free(lq), free(lk), free(lv), free(ldo);
        o[r] = dev_alloc((size_t)nq * es), dq[r] = dev_alloc((size_t)nq * es);
        dk[r] = dev_alloc((size_t)nk * es), dv[r] = dev_alloc((size_t)nk * es);
        lse[r] = dev_alloc(sizeof(float) * (size_t)nl);
        dev_poison(o[r], (size_t)nq * es), dev_poison(dq[r], (size_t)nq * es);
        dev_poison(dk[r], (size_t)nk * es), dev_poison(dv[r], (size_t)nk * es);
        dev_poison(lse[r], sizeof(float) * (size_t)nl);
        dsinks[r] = dev_alloc(sizeof(float) * 16);
        dev_poison(dsinks[r], sizeof(float) * 16);
        lids[r] = k->docs ? dev_copy_of(ids_ranks + (size_t)r * B * n, sizeof(int32_t) * (size_t)B * n) : NULL;
        cs[r] = replay_create(r, P);
        dfa__dist_set_split_pairs(cs[r], k->split);
        dfa__dist_set_fold_cost(cs[r], k->fold_cost);
        dfa__dist_force_direct(cs[r], k->direct);
    }
    int32_t *ids_dev = k->docs ? dev_copy_of(ids_ranks, sizeof(int32_t) * (size_t)B * N) : NULL;
    all_ids = ids_dev;
    CUDA_OK(cudaDeviceSynchronize());

    /* the passes: one descriptor per rank (its own ids) */
    dfa__dist_stats sf = {0}, sb = {0};
    dfa_status st = DFA_OK;
    dfa_dist_desc dd[8];
    for (int r = 0; r < P; r++) {
        dd[r] = dfa_dist_desc_init(B, n, H, Hkv, D);
        dd[r].attn.dtype = t;
        dd[r].attn.causal = k->causal;
        dd[r].schedule = k->kind == DFA__SCHED_RING ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
        set_mask(&dd[r].attn, k, lids[r]);
        dd[r].attn.sinks = sinks_dev; /* the forward reads the sinks, the backward writes this rank's dsinks */
        dd[r].attn.dsinks = sinks_dev ? dsinks[r] : NULL;
        dd[r].attn.softcap = k->softcap;
    }
    st = run_pass(cs, k, dd, DFA__PASS_FWD, q, kk, v, o, lse, dout, dq, dk, dv, s, &sf);
    CHECK(st == DFA_OK, "forward: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), cfg);
    if (!st) st = run_pass(cs, k, dd, DFA__PASS_BWD, q, kk, v, o, lse, dout, dq, dk, dv, s, &sb);
    CHECK(st == DFA_OK, "backward: %s (%s) for %s", dfa_status_string(st), dfa_last_error(), cfg);
    if (k->docs == 3 && k->split == 2 && P >= 3 && k->causal && B == 1 && k->kind != DFA__SCHED_RING)
        CHECK(sf.pieces >= 2 && sb.pieces >= 2, "%d / %d pieces of split pairs for %s", sf.pieces, sb.pieces, cfg);
    /* (folds at no cost: at the default cost these chunks keep their diagonals) */
    if (k->docs == 2 && k->split == 1 && P == 3 && n == 1024 && k->fold_cost == 0)
        CHECK(sf.bands >= 2, "%d band(s) for %s", sf.bands, cfg);
    if (k->split == 0) CHECK(sf.pieces == 0 && sf.bands <= 1, "the plan before split %d pairs, %d bands for %s", sf.pieces,
                             sf.bands, cfg);

    /* every rank's outputs against the references */
    void *lo = tl_alloc(t, nq), *ldq = tl_alloc(t, nq), *ldk = tl_alloc(t, nk), *ldv = tl_alloc(t, nk);
    float *ll = malloc(sizeof(float) * (size_t)nl);
    const int expect_right = !k->rounds || k->rounds >= 3;
    int off = 0; /* comparisons over their budget (fewer rounds: some must be) */
    for (int r = 0; r < P && !st; r++) {
        to_host(lo, o[r], (size_t)nq * es);
        to_host(ldq, dq[r], (size_t)nq * es);
        to_host(ldk, dk[r], (size_t)nk * es);
        to_host(ldv, dv[r], (size_t)nk * es);
        to_host(ll, lse[r], sizeof(float) * (size_t)nl);
        CHECK(tl_count_nan(t, lo, nq) == 0 && tl_count_nan(t, ldq, nq) == 0 && tl_count_nan(t, ldk, nk) == 0 &&
                  tl_count_nan(t, ldv, nk) == 0 && tl_count_nan(DFA_F32, ll, nl) == 0,
              "rank %d: outputs left unwritten (NaN) for %s", r, cfg);
        const dist_output out[4] = {{"o", lo, o1, oref, wq, tol_o}, {"dq", ldq, dq1, gq, wq, tol_dq},
                                    {"dk", ldk, dk1, gk, wk, tol_dk}, {"dv", ldv, dv1, gv, wk, tol_dv}};
        off += dist_check_rank(t, out, 4, ll, lref, B, H, N, r * n, n, expect_right, r, cfg);
    }
    if (k->sinks && !st) { /* each rank's dsinks covers its own rows: their sum is the sequence's */
        double sum[16] = {0};
        float part[16];
        for (int r = 0; r < P; r++) {
            to_host(part, dsinks[r], sizeof part);
            for (int h = 0; h < H; h++) sum[h] += part[h];
        }
        double err = 0;
        for (int h = 0; h < H; h++) err = fmax(err, fabs(sum[h] - gs[h]));
        off += !(err <= tol_ds);
        CHECK(!expect_right || err <= tol_ds, "dsinks summed over the ranks: %.3g > %.3g off the oracle for %s", err,
              tol_ds, cfg);
    }
    CHECK(expect_right || off > 0, "%d round(s) of replay (results never delivered) passed the checks for %s", k->rounds,
          cfg);
    checked++;

    for (int r = 0; r < P; r++) {
        void *p[11] = {q[r], kk[r], v[r], dout[r], o[r], dq[r], dk[r], dv[r], lse[r], lids[r], dsinks[r]};
        for (int i = 0; i < 11; i++) cudaFree(p[i]);
        dfa_comm_destroy(cs[r]);
    }
    cudaFree(ids_dev);
    cudaFree(sinks_dev);
    all_ids = NULL;
    free(hq), free(hk), free(hv), free(hdo), free(ids), free(ids_ranks);
    free(fq), free(fk), free(fv), free(fdo), free(oref), free(lref), free(gq), free(gk), free(gv);
    free(on), free(dqn), free(dkn), free(dvn), free(o1), free(dq1), free(dk1), free(dv1);
    free(lo), free(ldq), free(ldk), free(ldv), free(ll);
}

int main(void) {
    tl_init("test_dist_replay");
    if (!have_gpu()) return 77; /* ctest: skipped */
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int small = getenv("DFA_GPU_TEST_SMALL") != NULL;
    /* split pairs (pieces on a third rank, lending off so that they happen), the library's plan
       and the plan before, on a dense pair of the last two chunks; GQA, f16 */
    for (int P = 2; P <= (small ? 3 : 5); P++)
        for (int split = 0; split <= 2; split++) {
            const rcase k = {P, 1, 384, 4, split == 1 ? 2 : 4, 64, split == 2 ? DFA_F16 : DFA_BF16, 1,
                             DFA__SCHED_BALANCED, 3, 0, 0, 0, split, 0, (P + split) % 2, 0, 0, 0};
            run_case(&k, s);
        }
    /* a busy last diagonal lent in bands (3 ranks of 1024 rows: three bands), and in one band */
    for (int split = 0; split <= 1 && !small; split++) {
        const rcase k = {3, 1, 1024, 2, 2, 64, DFA_BF16, 1, DFA__SCHED_BALANCED, 2, 0, 0, 0, split, 0, 1, 0, 0, 0};
        run_case(&k, s);
    }
    /* random documents and windows, two batch rows, the ring; unmasked schedules */
    static const int heads[][2] = {{4, 4}, {4, 2}, {6, 2}, {4, 1}};
    for (int i = 0; i < (small ? 2 : 8); i++) {
        const int P = 2 + i % 4, n = (int[]){37, 128, 200, 300}[i % 4];
        const int w[] = {0, 1, n, n / 2};
        const rcase k = {P, 1 + (i % 4 == 3), n, heads[i % 4][0], heads[i % 4][1], i % 2 ? 64 : 128,
                         i % 3 ? DFA_BF16 : DFA_F16, i % 5 != 4, i % 3 == 2 ? DFA__SCHED_RING : DFA__SCHED_BALANCED,
                         i < 6 ? 1 : 0, i % 2, w[i % 4], i % 3 == 0 ? -1 : w[(i + 1) % 4], 1, -1, i % 2, 0, 0, 0};
        run_case(&k, s);
    }
    /* sinks: causal with GQA, documents, a window, the ring, a lent diagonal, two batch rows */
    for (int i = 0; i < (small ? 2 : 6); i++) {
        const int P = 2 + i % 3, n = (int[]){128, 200, 300, 64, 1024, 96}[i];
        const rcase k = {i == 4 ? 3 : P, 1 + (i == 5), n, 4, i % 2 ? 2 : 1, i % 2 ? 64 : 128, i % 3 ? DFA_BF16 : DFA_F16,
                         i != 3, i == 3 ? DFA__SCHED_RING : DFA__SCHED_BALANCED, i == 4 ? 2 : i == 1 || i == 5,
                         i == 2 || i == 3, 40, i == 3 ? 40 : 0, 1, i == 4 ? 0 : -1, i % 2, 0, 1, 0};
        run_case(&k, s);
    }
    /* softcap: causal with GQA, documents, a window, the ring, with sinks */
    for (int i = 0; i < (small ? 1 : 4); i++) {
        const int P = 2 + i % 3, n = (int[]){128, 200, 300, 96}[i];
        const rcase k = {P, 1 + (i == 3), n, 4, i % 2 ? 2 : 1, i % 2 ? 64 : 128, i % 3 ? DFA_BF16 : DFA_F16, 1,
                         i == 2 ? DFA__SCHED_RING : DFA__SCHED_BALANCED, i == 1, i == 2, 40, 0, 1, -1, i % 2, 0, i == 3,
                         (float[]){3.0f, 20.0f, 5.0f, 2.0f}[i]};
        run_case(&k, s);
    }
    /* the checks are not vacuous: with one or two rounds some results never arrive (one round: no
       input either), and the outputs must miss the references */
    for (int rounds = 1; rounds <= 2; rounds++) {
        const rcase k = {3, 1, 384, 4, 4, 64, DFA_BF16, 1, DFA__SCHED_BALANCED, 3, 0, 0, 0, 2, 0, 1, rounds, 0, 0};
        run_case(&k, s);
    }
    CUDA_OK(cudaStreamDestroy(s));
    forget_all();
    free(rec.m), free(prev.m), free(recvd.m);
    printf("test_dist_replay: %d cases\n", checked);
    return tl_finish("test_dist_replay");
}
