/* DistFlashAttn on GPUs under mpirun, one rank per GPU (label gpu; np 1 and 2).
 *
 * Every rank's o, lse, dq, dk, dv equal the float64 oracle and our single-GPU call on the
 * whole sequence within the tolerance rule (testlib.h; the budget is the larger of the
 * core's and the single-GPU call's own), over schedules (balanced, ring, the paper's),
 * causal and not, MHA/GQA/MQA and odd head counts, head dims 64/96/128/256, bf16 and f16,
 * chunks of 1 row up; outputs poisoned first. Then: overlap on and off give the same bits
 * (deterministic backward); the forward and backward captured in a CUDA graph replay with
 * the same bits as uncaptured calls; both communicator constructors; the caller's
 * workspace; bad arguments on one rank fail every rank (new descriptor) or leave every
 * rank's outputs untouched and are reported at the peers' next call (agreed descriptor);
 * a rank that never calls ends in DFA_ERR_BACKEND after the timeout instead of a hang.
 * Masks (documents as device ids, sliding windows): random documents (length 1 up to longer
 * than a chunk), windows of 1, a chunk and the whole sequence, with and without causal,
 * bf16 and f16, GQA, forward and backward against the oracle and the single-GPU masked
 * call; bad ids on one rank fail every rank with outputs untouched; capture is refused.
 * DFA_GPU_TEST_SMALL=1 (the compute-sanitizer runs): a few small cases, no timeouts.
 * DFA_GPU_TEST_MASKS=1: the mask tests only (bench/seqpar/masks_gpu_check.sh). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distflash_cuda.h"
#include "distflash_mpi.h"
#include "distflash_nccl.h"
#include "dist_check.h"
#include "gpu_util.h"
#include "oracle.h"
#include "seqpar/dist_internal.h"
#include "seqpar/executor.h"
#include "testlib.h"

static int rank, nranks, small;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    int B, n, H, Hkv, D;
    dfa_dtype t;
    int causal, overlap;
    dfa__sched_kind kind;
    unsigned flags;
    int docs;                /* 1: random packed documents (device ids); 2: a busy last diagonal */
    int window, left, right; /* DFA_FLAG_WINDOW and its sizes */
} dcase;

/* The mask of a case on a descriptor (ids: the descriptor's document ids, or NULL). */
static void set_mask(dfa_attn_desc *a, const dcase *k, const int32_t *ids) {
    a->q_doc = a->k_doc = k->docs ? ids : NULL;
    if (k->window) {
        a->flags |= DFA_FLAG_WINDOW;
        a->window_left = k->left;
        a->window_right = k->right;
    }
}

static dfa_dist_desc desc_of(const dcase *k) {
    dfa_dist_desc d = dfa_dist_desc_init(k->B, k->n, k->H, k->Hkv, k->D);
    d.attn.dtype = k->t;
    d.attn.causal = k->causal;
    d.attn.flags = k->flags;
    d.schedule = k->kind == DFA__SCHED_RING ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
    d.overlap = k->overlap;
    set_mask(&d.attn, k, NULL); /* the caller sets this rank's device ids */
    return d;
}

/* This rank's device buffers of one case. */
typedef struct {
    void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
    float *lse;
    size_t qb, kb, lb;
} dbufs;

/* A forward issued while gs is being captured, the capture then ended and its graph dropped:
   the call's status (for calls that must refuse capture; the capture's own status is not
   checked, as a refusal may have queried the device and invalidated it). */
static dfa_status fwd_captured(dfa_comm *c, const dfa_dist_desc *d, const dbufs *b, cudaStream_t gs) {
    CUDA_OK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
    const dfa_status st = dfa_dist_attn_fwd_cuda(c, d, b->q, b->k, b->v, b->o, b->lse, gs);
    cudaGraph_t g = NULL;
    cudaStreamEndCapture(gs, &g);
    if (g) cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return st;
}

static void dbufs_make(dbufs *b, const dcase *k, const void *hq, const void *hk, const void *hv, const void *hdo) {
    const size_t es = tl_dtype_size(k->t);
    b->qb = (size_t)k->B * k->n * k->H * k->D * es;
    b->kb = (size_t)k->B * k->n * k->Hkv * k->D * es;
    b->lb = sizeof(float) * (size_t)k->B * k->H * k->n;
    b->q = dev_copy_of(hq, b->qb);
    b->k = dev_copy_of(hk, b->kb);
    b->v = dev_copy_of(hv, b->kb);
    b->dout = dev_copy_of(hdo, b->qb);
    b->o = dev_alloc(b->qb);
    b->dq = dev_alloc(b->qb);
    b->dk = dev_alloc(b->kb);
    b->dv = dev_alloc(b->kb);
    b->lse = dev_alloc(b->lb);
}

static void dbufs_poison(dbufs *b) {
    dev_poison(b->o, b->qb);
    dev_poison(b->dq, b->qb);
    dev_poison(b->dk, b->kb);
    dev_poison(b->dv, b->kb);
    dev_poison(b->lse, b->lb);
    CUDA_OK(cudaDeviceSynchronize()); /* the memsets ran on the legacy stream; the calls use a non-blocking one */
}

static void dbufs_free(dbufs *b) {
    void *p[9] = {b->q, b->k, b->v, b->dout, b->o, b->dq, b->dk, b->dv, b->lse};
    for (int i = 0; i < 9; i++) cudaFree(p[i]);
}

/* 1 when every byte of the outputs is still the poison */
static int outputs_untouched(const dbufs *b) {
    const size_t sizes[5] = {b->qb, b->qb, b->kb, b->kb, b->lb};
    const void *p[5] = {b->o, b->dq, b->dk, b->dv, b->lse};
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        unsigned char *h = malloc(sizes[i]);
        to_host(h, p[i], sizes[i]);
        for (size_t j = 0; j < sizes[i] && ok; j++) ok = h[j] == 0xff;
        free(h);
    }
    return ok;
}

static dfa_status fwd_bwd(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, dbufs *b, cudaStream_t s) {
    dfa_status st = dfa__dist_fwd_cuda(c, d, kind, b->q, b->k, b->v, b->o, b->lse, s);
    if (!st) st = dfa__dist_bwd_cuda(c, d, kind, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv, s);
    return st;
}

/* The whole sequence's inputs, drawn on rank 0 and broadcast; with documents, their ids
   [B][N] on the host and this rank's [B][n] on the device. */
typedef struct {
    void *q, *k, *v, *dout;
    int32_t *ids;
    int32_t *lids_dev;
} whole;

static whole draw_whole(const dcase *k) {
    const int N = k->n * nranks;
    const int64_t NQ = (int64_t)k->B * N * k->H * k->D, NK = (int64_t)k->B * N * k->Hkv * k->D;
    const size_t es = tl_dtype_size(k->t);
    whole w = {tl_alloc(k->t, NQ), tl_alloc(k->t, NK), tl_alloc(k->t, NK), tl_alloc(k->t, NQ), NULL, NULL};
    if (rank == 0) {
        tl_fill_normal(k->t, w.q, NQ, 1.0 + tl_rand_uniform());
        tl_fill_normal(k->t, w.k, NK, 1.0);
        tl_fill_normal(k->t, w.v, NK, 1.0);
        tl_fill_normal(k->t, w.dout, NQ, 1.0);
    }
    MPI_Bcast(w.q, (int)(NQ * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(w.k, (int)(NK * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(w.v, (int)(NK * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(w.dout, (int)(NQ * es), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (k->docs) {
        w.ids = malloc(sizeof(int32_t) * (size_t)k->B * N);
        if (rank == 0)
            for (int b = 0; b < k->B; b++) {
                if (k->docs == 2) tl_busy_docs(w.ids + (size_t)b * N, N, k->n);
                else tl_random_docs(w.ids + (size_t)b * N, N, k->n);
            }
        MPI_Bcast(w.ids, k->B * N, MPI_INT32_T, 0, MPI_COMM_WORLD);
        int32_t *lids = tl_slice_rows(DFA_F32, w.ids, k->B, N, rank * k->n, k->n, 1); /* 4-byte rows */
        w.lids_dev = dev_copy_of(lids, sizeof(int32_t) * (size_t)k->B * k->n);
        free(lids);
    }
    return w;
}

static void whole_free(whole *w) {
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->dout);
    free(w->ids);
    cudaFree(w->lids_dev);
}

/* This rank's slices of the whole sequence on the device. */
static void local_bufs(dbufs *b, const dcase *k, const whole *w) {
    const int N = k->n * nranks, r0 = rank * k->n;
    const int64_t wq = (int64_t)k->H * k->D, wk = (int64_t)k->Hkv * k->D;
    void *lq = tl_slice_rows(k->t, w->q, k->B, N, r0, k->n, wq), *lk = tl_slice_rows(k->t, w->k, k->B, N, r0, k->n, wk);
    void *lv = tl_slice_rows(k->t, w->v, k->B, N, r0, k->n, wk), *ldo = tl_slice_rows(k->t, w->dout, k->B, N, r0, k->n, wq);
    dbufs_make(b, k, lq, lk, lv, ldo);
    free(lq);
    free(lk);
    free(lv);
    free(ldo);
}

/* The single-GPU call on the whole sequence (this rank's device), to host. */
static void single_gpu(const dcase *k, const whole *w, void *o, float *lse, void *dq, void *dk, void *dv) {
    const int N = k->n * nranks;
    dfa_attn_desc full = tl_desc(k->B, N, N, k->H, k->Hkv, k->D, k->t, k->causal, 0, 0);
    full.flags = k->flags;
    int32_t *ids = k->docs ? dev_copy_of(w->ids, sizeof(int32_t) * (size_t)k->B * N) : NULL;
    set_mask(&full, k, ids);
    const size_t es = tl_dtype_size(k->t);
    const size_t qb = (size_t)k->B * N * k->H * k->D * es, kb = (size_t)k->B * N * k->Hkv * k->D * es;
    const size_t lb = sizeof(float) * (size_t)k->B * k->H * N;
    void *q = dev_copy_of(w->q, qb), *kk = dev_copy_of(w->k, kb), *v = dev_copy_of(w->v, kb), *dout = dev_copy_of(w->dout, qb);
    void *go = dev_alloc(qb), *gdq = dev_alloc(qb), *gdk = dev_alloc(kb), *gdv = dev_alloc(kb);
    float *gl = dev_alloc(lb);
    CHECK(dfa_attn_fwd_cuda(&full, q, kk, v, go, gl, 0) == DFA_OK, "single fwd: %s", dfa_last_error());
    CHECK(dfa_attn_bwd_cuda(&full, q, kk, v, go, gl, dout, gdq, gdk, gdv, 0) == DFA_OK, "single bwd: %s", dfa_last_error());
    to_host(o, go, qb);
    to_host(lse, gl, lb);
    to_host(dq, gdq, qb);
    to_host(dk, gdk, kb);
    to_host(dv, gdv, kb);
    void *p[10] = {q, kk, v, dout, go, gdq, gdk, gdv, gl, ids};
    for (int i = 0; i < 10; i++) cudaFree(p[i]);
}

static void run_case(dfa_comm *c, const dcase *k, cudaStream_t s) {
    const int B = k->B, n = k->n, N = n * nranks, H = k->H, Hkv = k->Hkv, D = k->D, r0 = rank * n;
    const dfa_dtype t = k->t;
    const size_t es = tl_dtype_size(t);
    const int64_t wq = (int64_t)H * D, wk = (int64_t)Hkv * D;
    const int64_t NQ = (int64_t)B * N * wq, NK = (int64_t)B * N * wk, NL = (int64_t)B * H * N;
    const int64_t nq = (int64_t)B * n * wq, nk = (int64_t)B * n * wk, nl = (int64_t)B * H * n;
    char cfg[200];
    snprintf(cfg, sizeof cfg, "P=%d %s B=%d n=%d H=%d Hkv=%d D=%d %s causal=%d overlap=%d%s docs=%d window=%d(%d,%d)",
             nranks, dfa__sched_name(k->kind), B, n, H, Hkv, D, t == DFA_BF16 ? "bf16" : "f16", k->causal, k->overlap,
             k->flags ? " deterministic" : "", k->docs, k->window, k->left, k->right);
    whole w = draw_whole(k);
    /* references on the whole sequence: the oracle, the naive same-precision path, our single GPU */
    dfa_attn_desc full = tl_desc(B, N, N, H, Hkv, D, t, k->causal, 0, 0);
    set_mask(&full, k, w.ids);
    double *fq = tl_to_f64(t, w.q, NQ), *fk = tl_to_f64(t, w.k, NK), *fv = tl_to_f64(t, w.v, NK), *fdo = tl_to_f64(t, w.dout, NQ);
    double *oref = malloc(8 * (size_t)NQ), *lref = malloc(8 * (size_t)NL), *gq = malloc(8 * (size_t)NQ),
           *gk = malloc(8 * (size_t)NK), *gv = malloc(8 * (size_t)NK);
    oracle_fwd(&full, fq, fk, fv, oref, lref);
    oracle_bwd(&full, fq, fk, fv, fdo, gq, gk, gv);
    void *on = tl_alloc(t, NQ), *dqn = tl_alloc(t, NQ), *dkn = tl_alloc(t, NK), *dvn = tl_alloc(t, NK);
    naive_fwd_lowp(&full, w.q, w.k, w.v, on);
    naive_bwd_lowp(&full, w.q, w.k, w.v, w.dout, dqn, dkn, dvn);
    void *o1 = tl_alloc(t, NQ), *dq1 = tl_alloc(t, NQ), *dk1 = tl_alloc(t, NK), *dv1 = tl_alloc(t, NK);
    float *l1 = malloc(sizeof(float) * (size_t)NL);
    single_gpu(k, &w, o1, l1, dq1, dk1, dv1);
    const double tol_o = dist_budget(t, TL_OUTPUT, on, o1, oref, NQ), tol_dq = dist_budget(t, TL_GRADIENT, dqn, dq1, gq, NQ);
    const double tol_dk = dist_budget(t, TL_GRADIENT, dkn, dk1, gk, NK), tol_dv = dist_budget(t, TL_GRADIENT, dvn, dv1, gv, NK);

    dbufs b;
    local_bufs(&b, k, &w);
    dbufs_poison(&b);
    dfa_dist_desc d = desc_of(k);
    set_mask(&d.attn, k, w.lids_dev);
    const dfa_status st = fwd_bwd(c, &d, k->kind, &b, s);
    CHECK(st == DFA_OK, "rank %d: %s (%s) for %s", rank, dfa_status_string(st), dfa_last_error(), cfg);
    CUDA_OK(cudaStreamSynchronize(s));
    void *lo = tl_alloc(t, nq), *ldq = tl_alloc(t, nq), *ldk = tl_alloc(t, nk), *ldv = tl_alloc(t, nk);
    float *ll = malloc(sizeof(float) * (size_t)nl);
    to_host(lo, b.o, b.qb);
    to_host(ldq, b.dq, b.qb);
    to_host(ldk, b.dk, b.kb);
    to_host(ldv, b.dv, b.kb);
    to_host(ll, b.lse, b.lb);
    CHECK(tl_count_nan(t, lo, nq) == 0 && tl_count_nan(t, ldq, nq) == 0 && tl_count_nan(t, ldk, nk) == 0 &&
              tl_count_nan(t, ldv, nk) == 0 && tl_count_nan(DFA_F32, ll, nl) == 0,
          "rank %d: outputs left unwritten (NaN) for %s", rank, cfg);
    const dist_output out[4] = {{"o", lo, o1, oref, wq, tol_o}, {"dq", ldq, dq1, gq, wq, tol_dq},
                                {"dk", ldk, dk1, gk, wk, tol_dk}, {"dv", ldv, dv1, gv, wk, tol_dv}};
    dist_check_rank(t, out, 4, ll, lref, B, H, N, r0, n, 1, rank, cfg);
    /* lse may be NULL in the forward */
    dev_poison(b.o, b.qb);
    CHECK(dfa__dist_fwd_cuda(c, &d, k->kind, b.q, b.k, b.v, b.o, NULL, s) == DFA_OK, "rank %d: fwd without lse: %s", rank,
          dfa_last_error());
    void *lo2 = tl_alloc(t, nq);
    to_host(lo2, b.o, b.qb);
    CHECK(!memcmp(lo, lo2, b.qb), "rank %d: o differs without lse for %s", rank, cfg);
    free(lo2);

    dbufs_free(&b);
    whole_free(&w);
    free(fq); free(fk); free(fv); free(fdo); free(oref); free(lref); free(gq); free(gk); free(gv);
    free(on); free(dqn); free(dkn); free(dvn); free(o1); free(dq1); free(dk1); free(dv1); free(l1);
    free(lo); free(ldq); free(ldk); free(ldv); free(ll);
    (void)es;
}

/* Host copies of every output of a call. */
static unsigned char *snapshot(const dbufs *b) {
    const size_t total = 2 * b->qb + 2 * b->kb + b->lb;
    unsigned char *h = malloc(total), *p = h;
    to_host(p, b->o, b->qb), p += b->qb;
    to_host(p, b->dq, b->qb), p += b->qb;
    to_host(p, b->dk, b->kb), p += b->kb;
    to_host(p, b->dv, b->kb), p += b->kb;
    to_host(p, b->lse, b->lb);
    return h;
}

/* Overlap on and off, and graph replays, give the same bits (deterministic backward). */
static void test_bits(dfa_comm *c, cudaStream_t s) {
    dcase k = {1, small ? 64 : 320, 4, 2, 128, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, DFA_FLAG_DETERMINISTIC, 0, 0, 0, 0};
    whole w = draw_whole(&k);
    dbufs b;
    local_bufs(&b, &k, &w);
    dfa_dist_desc d = desc_of(&k);
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: overlap on: %s", rank, dfa_last_error());
    unsigned char *on = snapshot(&b);
    d.overlap = 0;
    dbufs_poison(&b);
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: overlap off: %s", rank, dfa_last_error());
    unsigned char *off = snapshot(&b);
    const size_t total = 2 * b.qb + 2 * b.kb + b.lb;
    CHECK(!memcmp(on, off, total), "rank %d: overlap on and off differ", rank);
    /* in two groups of heads (what a call does when memory is short): the same bits */
    d.overlap = 1;
    dfa__dist_force_head_groups(c, 2);
    dbufs_poison(&b);
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: head groups: %s", rank, dfa_last_error());
    dfa__dist_force_head_groups(c, 0);
    unsigned char *grouped = snapshot(&b);
    CHECK(!memcmp(on, grouped, total), "rank %d: two head groups differ from one", rank);
    free(grouped);

    /* a CUDA graph: one uncaptured call with this descriptor (done above), then capture */
    d.overlap = 1;
    cudaStream_t gs;
    CUDA_OK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    CHECK(fwd_bwd(c, &d, k.kind, &b, gs) == DFA_OK, "rank %d: warm-up on the capture stream: %s", rank, dfa_last_error());
    CUDA_OK(cudaStreamSynchronize(gs));
    cudaGraph_t g = NULL;
    CUDA_OK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
    const dfa_status st = fwd_bwd(c, &d, k.kind, &b, gs);
    const cudaError_t ce = cudaStreamEndCapture(gs, &g);
    CHECK(st == DFA_OK && ce == cudaSuccess, "rank %d: capture: %s / %s", rank, st ? dfa_last_error() : "ok",
          cudaGetErrorString(ce));
    if (st == DFA_OK && ce == cudaSuccess) {
        cudaGraphExec_t ge;
        CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
        for (int rep = 0; rep < 2; rep++) {
            dbufs_poison(&b);
            CUDA_OK(cudaGraphLaunch(ge, gs));
            CUDA_OK(cudaStreamSynchronize(gs));
            unsigned char *gr = snapshot(&b);
            CHECK(!memcmp(on, gr, total), "rank %d: graph replay %d differs from the uncaptured call", rank, rep);
            free(gr);
        }
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    /* a new descriptor cannot be captured: it needs the host agreement */
    dfa_dist_desc d2 = d;
    d2.attn.softmax_scale = 0.125f;
    const dfa_status st2 = fwd_captured(c, &d2, &b, gs);
    CHECK(st2 == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "uncaptured"),
          "rank %d: capturing a new descriptor: %s: %s", rank, dfa_status_string(st2), dfa_last_error());
    cudaStreamDestroy(gs);
    free(on);
    free(off);
    dbufs_free(&b);
    whole_free(&w);
}

/* Bad arguments: on a new descriptor every rank fails alike; on an agreed one the bad rank
   fails, the peers' outputs stay untouched and they hear of it at their next call. */
static void test_errors(dfa_comm *c, cudaStream_t s) {
    const int bad = nranks - 1;
    dcase k = {1, 48, 4, 2, 64, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, 0, 0, 0, 0, 0};
    whole w = draw_whole(&k);
    dbufs b;
    local_bufs(&b, &k, &w);
    dfa_dist_desc d = desc_of(&k);
    char want[64];
    snprintf(want, sizeof want, "rank %d failed", bad);

    /* a NULL pointer on one rank, new descriptor */
    d.attn.softmax_scale = 0.1f;
    dbufs_poison(&b);
    dfa_status st = dfa_dist_attn_fwd_cuda(c, &d, rank == bad ? NULL : b.q, b.k, b.v, b.o, b.lse, s);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT, "rank %d: NULL q on rank %d: %s", rank, bad, dfa_status_string(st));
    CHECK(strstr(dfa_last_error(), "q is NULL") && (rank == bad || nranks == 1 || strstr(dfa_last_error(), want)),
          "rank %d: message: %s", rank, dfa_last_error());
    CHECK(outputs_untouched(&b), "rank %d: outputs written after a refused call", rank);

    /* descriptors that differ across ranks, new descriptor */
    if (nranks > 1) {
        dfa_dist_desc dd = d;
        if (rank == 0) dd.attn.softmax_scale = 0.2f;
        st = dfa_dist_attn_fwd_cuda(c, &dd, b.q, b.k, b.v, b.o, b.lse, s);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "differs across ranks"),
              "rank %d: differing descriptors: %s: %s", rank, dfa_status_string(st), dfa_last_error());
        CHECK(outputs_untouched(&b), "rank %d: outputs written after differing descriptors", rank);
    }
    /* f32, host memory, an MPI communicator */
    dfa_dist_desc df = d;
    df.attn.dtype = DFA_F32;
    st = dfa_dist_attn_fwd_cuda(c, &df, b.q, b.k, b.v, b.o, b.lse, s);
    CHECK(st == DFA_ERR_UNSUPPORTED && strstr(dfa_last_error(), "DFA_F32"), "rank %d: f32: %s", rank, dfa_last_error());
    /* masks: document ids in host memory, k_doc that is not q_doc, a bad window */
    {
        const size_t ib = sizeof(int32_t) * (size_t)k.B * k.n;
        int32_t *hids = calloc(1, ib);
        int32_t *ids = dev_copy_of(hids, ib), *ids2 = dev_copy_of(hids, ib);
        dfa_dist_desc dm = d;
        dm.attn.softmax_scale = 0.3f;
        dm.attn.q_doc = dm.attn.k_doc = hids;
        st = dfa_dist_attn_fwd_cuda(c, &dm, b.q, b.k, b.v, b.o, b.lse, s);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "d->attn.q_doc") &&
                  strstr(dfa_last_error(), "not device memory"),
              "rank %d: host document ids: %s: %s", rank, dfa_status_string(st), dfa_last_error());
        dm.attn.q_doc = ids;
        dm.attn.k_doc = ids2;
        st = dfa_dist_attn_bwd_cuda(c, &dm, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "d->attn.k_doc differs"),
              "rank %d: k_doc not q_doc: %s: %s", rank, dfa_status_string(st), dfa_last_error());
        dm.attn.q_doc = dm.attn.k_doc = NULL;
        dm.attn.flags |= DFA_FLAG_WINDOW;
        dm.attn.window_right = -3;
        st = dfa_dist_attn_fwd_cuda(c, &dm, b.q, b.k, b.v, b.o, b.lse, s);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "window_right"), "rank %d: window_right -3: %s",
              rank, dfa_last_error());
        CHECK(outputs_untouched(&b), "rank %d: outputs written after a refused mask", rank);
        CHECK(dfa_dist_attn_cuda_workspace_bytes(nranks, &dm) == 0, "workspace bytes of a bad window");
        dm.attn.window_right = 0;
        CHECK(dfa_dist_attn_cuda_workspace_bytes(nranks, &dm) >= dfa_dist_attn_cuda_workspace_bytes(nranks, &d),
              "a masked workspace is at least the unmasked one");
        cudaFree(ids);
        cudaFree(ids2);
        free(hids);
    }
    void *host = malloc(b.qb);
    st = dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, host, b.lse, s);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "not device memory"), "rank %d: host o: %s", rank,
          dfa_last_error());
    free(host);
    dfa_comm *mc = NULL;
    CHECK(dfa_comm_create_mpi(MPI_COMM_WORLD, &mc) == DFA_OK, "dfa_comm_create_mpi: %s", dfa_last_error());
    st = dfa_dist_attn_fwd_cuda(mc, &d, b.q, b.k, b.v, b.o, b.lse, s);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "NCCL"), "rank %d: MPI communicator: %s", rank,
          dfa_last_error());
    CHECK(dfa_comm_set_timeout(mc, 1.0) == DFA_ERR_UNSUPPORTED, "set_timeout on an MPI communicator");
    dfa_comm_destroy(mc);
    CHECK(dfa_comm_set_timeout(c, 0.0) == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "seconds"),
          "set_timeout 0: %s", dfa_last_error());
    CHECK(dfa_comm_set_timeout(c, NAN) == DFA_ERR_INVALID_ARGUMENT, "set_timeout NaN");
    CHECK(dfa_comm_set_workspace(c, (char *)b.o + 16, 1024) == DFA_ERR_INVALID_ARGUMENT &&
              strstr(dfa_last_error(), "256-byte"), "misaligned workspace: %s", dfa_last_error());
    CHECK(dfa_dist_attn_fwd_cuda(NULL, &d, b.q, b.k, b.v, b.o, b.lse, s) == DFA_ERR_INVALID_ARGUMENT &&
              strstr(dfa_last_error(), "c (the communicator) is NULL"), "NULL communicator: %s", dfa_last_error());

    /* an agreed descriptor, then a NULL pointer on one rank: it fails at once, nobody hangs,
       nobody's outputs change, and the peers report it at their next call */
    d.attn.softmax_scale = 0.0f;
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: agreeing: %s", rank, dfa_last_error());
    CUDA_OK(cudaStreamSynchronize(s));
    unsigned char *good = snapshot(&b);
    dbufs_poison(&b);
    st = dfa_dist_attn_bwd_cuda(c, &d, b.q, rank == bad ? NULL : b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s);
    CUDA_OK(cudaStreamSynchronize(s));
    if (rank == bad) CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "k is NULL"), "bad rank: %s", dfa_last_error());
    else CHECK(st == DFA_OK, "rank %d: a peer's bad call: %s", rank, dfa_last_error());
    CHECK(dfa_comm_check(c) == (rank == bad ? DFA_OK : DFA_ERR_INVALID_ARGUMENT) &&
              (rank == bad || strstr(dfa_last_error(), want)),
          "rank %d: dfa_comm_check after a peer's bad call: %s", rank, dfa_last_error());
    /* dq, dk, dv untouched: o and lse were poisoned too and nothing wrote them */
    CHECK(outputs_untouched(&b), "rank %d: outputs written in a call a peer failed", rank);
    /* and the communicator goes on */
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: after a failed call: %s", rank, dfa_last_error());
    unsigned char *again = snapshot(&b);
    /* the forward is bitwise reproducible (dq uses atomics here) */
    CHECK(!memcmp(good, again, b.qb), "rank %d: o differs after recovering", rank);
    free(good);

    /* the caller's workspace */
    const size_t need = dfa_dist_attn_cuda_workspace_bytes(nranks, &d);
    CHECK(need > 0, "workspace bytes: %zu", need);
    CHECK(dfa_dist_attn_cuda_workspace_bytes(0, &d) == 0, "workspace for 0 ranks");
    void *ws = dev_alloc(need);
    CHECK(dfa_comm_set_workspace(c, ws, need / 2) == DFA_OK, "set_workspace: %s", dfa_last_error());
    st = fwd_bwd(c, &d, k.kind, &b, s);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "workspace"), "rank %d: small workspace: %s", rank,
          dfa_last_error());
    CHECK(dfa_comm_set_workspace(c, ws, need) == DFA_OK, "set_workspace: %s", dfa_last_error());
    dbufs_poison(&b);
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: with the caller's workspace: %s", rank, dfa_last_error());
    unsigned char *ext = snapshot(&b);
    CHECK(!memcmp(ext, again, b.qb), "rank %d: o differs with the caller's workspace", rank);
    free(ext);
    free(again);
    CHECK(dfa_comm_set_workspace(c, NULL, 0) == DFA_OK, "set_workspace NULL: %s", dfa_last_error());
    cudaFree(ws);
    dbufs_free(&b);
    whole_free(&w);
}

/* Masks: documents (device ids) and sliding windows, forward and backward, against the
   oracle and the single-GPU masked call (run_case). */
static void test_masks(dfa_comm *c, cudaStream_t s) {
    const int n = small ? 24 : 80, N = n * nranks;
    const dfa__sched_kind BAL = DFA__SCHED_BALANCED, RING = DFA__SCHED_RING;
    /* B, n, H, Hkv, D, dtype, causal, overlap, schedule, flags, docs, window, left, right */
    const dcase cases[] = {
        {1, n, 4, 2, 64, DFA_BF16, 1, 1, BAL, 0, 1, 0, 0, 0},                        /* documents, causal, GQA */
        {2, n, 4, 4, 128, DFA_F16, 1, 0, RING, 0, 1, 1, 1, 0},                       /* documents + window 1 */
        {1, n, 8, 1, 64, DFA_BF16, 1, 1, BAL, 0, 0, 1, n, 0},                        /* window of a chunk, MQA */
        {1, n, 4, 2, 64, DFA_F16, 0, 1, BAL, DFA_FLAG_DETERMINISTIC, 1, 1, N, N},    /* documents, whole-sequence window */
        {1, n + 5, 6, 2, 128, DFA_BF16, 0, 1, BAL, 0, 0, 1, 1, 1},                   /* window 1 both sides */
        {1, n - 3, 4, 2, 64, DFA_F16, 1, 1, BAL, 0, 1, 1, n / 2, -1},                /* documents + half-chunk window */
        {1, 272, 4, 2, 128, DFA_BF16, 1, 1, BAL, 0, 2, 0, 0, 0},                     /* a busy diagonal lends rows */
        {1, 300, 4, 4, 64, DFA_F16, 1, 0, BAL, 0, 2, 1, 200, 0},                     /* the same, with a window */
    };
    const int ncases = small ? 3 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        /* chunks this small would not lend with the folds costed (DFA__PLAN_FOLD_COST) */
        dfa__dist_set_fold_cost(c, cases[i].docs == 2 ? 0 : -1);
        run_case(c, &cases[i], s);
    }
    dfa__dist_set_fold_cost(c, -1);
}

/* The step-0 diagonal's direct 16-bit writes (every masked call on the device, exec_io.c
   use_direct) give the bits of the float32 accumulators' rounding: documents, a window, lent
   rows, the deterministic backward (atomics would sum dq in any order). */
static void test_direct_bits(dfa_comm *c, cudaStream_t s) {
    const int n = small ? 24 : 80;
    const dfa__sched_kind BAL = DFA__SCHED_BALANCED;
    const int det = DFA_FLAG_DETERMINISTIC;
    const dcase cases[] = {
        {1, n, 4, 2, 64, DFA_BF16, 1, 1, BAL, det, 1, 0, 0, 0},   /* documents */
        {1, n + 3, 4, 4, 128, DFA_F16, 1, 1, BAL, det, 0, 1, n / 2, 0}, /* window of half a chunk */
        {2, n, 4, 2, 128, DFA_BF16, 1, 0, BAL, det, 0, 1, n, 0},   /* two batch rows, a chunk's window */
        {1, 272, 4, 2, 128, DFA_BF16, 1, 1, BAL, det, 2, 0, 0, 0}, /* a busy diagonal lends rows */
    };
    const int ncases = small ? 1 : (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        const dcase *k = &cases[i];
        whole w = draw_whole(k);
        dbufs b;
        local_bufs(&b, k, &w);
        dfa_dist_desc d = desc_of(k);
        set_mask(&d.attn, k, w.lids_dev);
        dfa__dist_set_fold_cost(c, k->docs == 2 ? 0 : -1);
        unsigned char *snap[2];
        for (int off = 0; off < 2; off++) {
            dfa__dist_force_direct(c, off ? -1 : 0);
            dbufs_poison(&b);
            CHECK(fwd_bwd(c, &d, k->kind, &b, s) == DFA_OK, "rank %d: direct %s, case %d: %s", rank, off ? "off" : "on",
                  i, dfa_last_error());
            snap[off] = snapshot(&b);
        }
        dfa__dist_force_direct(c, 0);
        dfa__dist_set_fold_cost(c, -1);
        CHECK(!memcmp(snap[0], snap[1], 2 * b.qb + 2 * b.kb + b.lb),
              "rank %d: case %d: the direct writes differ from the accumulators' rounding", rank, i);
        free(snap[0]);
        free(snap[1]);
        dbufs_free(&b);
        whole_free(&w);
    }
}

/* DFA_FLAG_SAME_DOCS on the device: the communicator's copies of the ids (host and device)
   replace the exchange; one rank without them makes every rank read them; ids changed under
   the promise are not read (the kept ids' result, as documented). Same bits as the plain call
   each time: documents, and a busy diagonal lending rows. */
static void test_same_docs(dfa_comm *c, cudaStream_t s) {
    const dfa__sched_kind BAL = DFA__SCHED_BALANCED;
    const dcase cases[] = {
        {1, small ? 24 : 80, 4, 2, 64, DFA_BF16, 1, 1, BAL, DFA_FLAG_DETERMINISTIC, 1, 0, 0, 0},
        {1, 272, 4, 2, 128, DFA_BF16, 1, 1, BAL, DFA_FLAG_DETERMINISTIC, 2, 1, 300, 0},
    };
    static const char *const what[] = {"kept ids", "kept on some ranks only", "ids changed under the flag"};
    for (int i = 0; i < (small ? 1 : 2); i++) {
        const dcase *k = &cases[i];
        whole w = draw_whole(k);
        dbufs b;
        local_bufs(&b, k, &w);
        const size_t ib = sizeof(int32_t) * (size_t)k->B * k->n;
        int32_t *hone = malloc(ib);
        for (int j = 0; j < k->B * k->n; j++) hone[j] = 7; /* one document */
        int32_t *done = dev_copy_of(hone, ib);
        dfa_dist_desc d = desc_of(k);
        set_mask(&d.attn, k, w.lids_dev);
        dfa__dist_set_fold_cost(c, k->docs == 2 ? 0 : -1);
        dbufs_poison(&b);
        CHECK(fwd_bwd(c, &d, k->kind, &b, s) == DFA_OK, "rank %d: same docs case %d, plain: %s", rank, i,
              dfa_last_error());
        unsigned char *want = snapshot(&b);
        for (int round = 0; round < 3; round++) {
            if (round == 1 && rank == 0) dfa__comm_drop_cache(c);
            dfa_dist_desc sd = d;
            sd.attn.flags |= DFA_FLAG_SAME_DOCS;
            if (round == 2) sd.attn.q_doc = sd.attn.k_doc = done;
            dbufs_poison(&b);
            CHECK(fwd_bwd(c, &sd, k->kind, &b, s) == DFA_OK, "rank %d: same docs case %d (%s): %s", rank, i,
                  what[round], dfa_last_error());
            unsigned char *got = snapshot(&b);
            CHECK(!memcmp(got, want, 2 * b.qb + 2 * b.kb + b.lb),
                  "rank %d: case %d: outputs differ with DFA_FLAG_SAME_DOCS (%s)", rank, i, what[round]);
            free(got);
        }
        dfa__dist_set_fold_cost(c, -1);
        free(want);
        free(hone);
        cudaFree(done);
        dbufs_free(&b);
        whole_free(&w);
    }
}

/* Masked calls that must fail: bad ids on one rank (every rank fails, outputs untouched),
   documents on some ranks only, a window that differs, and a capture. */
static void test_mask_errors(dfa_comm *c, cudaStream_t s) {
    const int bad = nranks - 1;
    dcase k = {1, 40, 4, 2, 64, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, 0, 1, 0, 0, 0};
    whole w = draw_whole(&k);
    dbufs b;
    local_bufs(&b, &k, &w);
    char who[64];
    snprintf(who, sizeof who, "rank %d failed", bad);
    const size_t ib = sizeof(int32_t) * (size_t)k.B * k.n;
    int32_t *hbad = malloc(ib);
    for (int i = 0; i < k.B * k.n; i++) hbad[i] = 3 + i / 5;
    hbad[k.n / 2] = -100;
    int32_t *dbad = dev_copy_of(hbad, ib);
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = desc_of(&k);
        set_mask(&d.attn, &k, rank == bad ? dbad : w.lids_dev);
        dbufs_poison(&b);
        dfa_status st = bwd ? dfa_dist_attn_bwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s)
                            : dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "d->q_doc decreases") &&
                  (rank == bad || strstr(dfa_last_error(), who)),
              "rank %d: decreasing ids on rank %d (%s): %s: %s", rank, bad, bwd ? "bwd" : "fwd", dfa_status_string(st),
              dfa_last_error());
        CHECK(outputs_untouched(&b), "rank %d: outputs written after bad ids on rank %d", rank, bad);
        if (nranks > 1) {
            /* documents on some ranks only (a fresh scale: no rank remembers this descriptor) */
            d = desc_of(&k);
            d.attn.softmax_scale = 0.11f + 0.01f * (float)bwd;
            set_mask(&d.attn, &k, rank == 0 ? NULL : w.lids_dev);
            st = bwd ? dfa_dist_attn_bwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s)
                     : dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
            CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "d->attn.q_doc (set or NULL)"),
                  "rank %d: documents on some ranks: %s: %s", rank, dfa_status_string(st), dfa_last_error());
            /* a window that differs */
            d = desc_of(&k);
            set_mask(&d.attn, &k, w.lids_dev);
            d.attn.flags |= DFA_FLAG_WINDOW;
            d.attn.window_left = rank == bad ? 3 : 2;
            d.attn.window_right = 0;
            st = bwd ? dfa_dist_attn_bwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s)
                     : dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
            CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "d->attn.window_left is 2 on some ranks and 3"),
                  "rank %d: window differs: %s: %s", rank, dfa_status_string(st), dfa_last_error());
            CHECK(outputs_untouched(&b), "rank %d: outputs written after differing masks", rank);
        }
    }
    /* a good masked call, then the same one captured: refused before anything is enqueued */
    dfa_dist_desc d = desc_of(&k);
    set_mask(&d.attn, &k, w.lids_dev);
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: masked call: %s", rank, dfa_last_error());
    CUDA_OK(cudaStreamSynchronize(s));
    dbufs_poison(&b);
    cudaStream_t gs;
    CUDA_OK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    for (int win = 0; win <= 1; win++) {
        dfa_dist_desc dc = d;
        if (win) { /* a window alone (no ids to copy) is refused too: it agrees on the host */
            dc.attn.q_doc = dc.attn.k_doc = NULL;
            dc.attn.flags |= DFA_FLAG_WINDOW;
            dc.attn.window_left = 5;
        }
        const dfa_status st = fwd_captured(c, &dc, &b, gs);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "captured") &&
                  strstr(dfa_last_error(), "DFA_FLAG_WINDOW"),
              "rank %d: capturing a masked call (%s): %s: %s", rank, win ? "window" : "documents", dfa_status_string(st),
              dfa_last_error());
    }
    CHECK(outputs_untouched(&b), "rank %d: outputs written by a refused capture", rank);
    cudaStreamDestroy(gs);
    CHECK(dfa_comm_check(c) == DFA_OK, "rank %d: after the mask errors: %s", rank, dfa_last_error());
    /* and the communicator goes on */
    CHECK(fwd_bwd(c, &d, k.kind, &b, s) == DFA_OK, "rank %d: masked call after the errors: %s", rank, dfa_last_error());
    CUDA_OK(cudaStreamSynchronize(s));
    cudaFree(dbad);
    free(hbad);
    dbufs_free(&b);
    whole_free(&w);
}

/* A rank that never calls: the others fail with DFA_ERR_BACKEND after the timeout. */
static void test_timeouts(cudaStream_t s) {
    const double T = 3.0;
    dcase k = {1, 64, 2, 2, 64, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, 0, 0, 0, 0, 0};
    whole w = draw_whole(&k);
    dbufs b;
    local_bufs(&b, &k, &w);
    const dfa_dist_desc d = desc_of(&k);
    /* (a) the host agreement of a new descriptor */
    dfa_comm *c = NULL;
    CHECK(dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, rank, &c) == DFA_OK, "create: %s", dfa_last_error());
    CHECK(dfa_comm_set_timeout(c, T) == DFA_OK, "set_timeout: %s", dfa_last_error());
    if (rank == 0) {
        const double t0 = now();
        const dfa_status st = dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
        const double dt = now() - t0;
        CHECK(st == DFA_ERR_BACKEND && strstr(dfa_last_error(), "timed out") && strstr(dfa_last_error(), "agreement"),
              "a peer that never calls (new descriptor): %s: %s", dfa_status_string(st), dfa_last_error());
        CHECK(dt >= T * 0.9 && dt < T + 30, "timed out after %.1f s (timeout %.1f s)", dt, T);
        CHECK(dfa_comm_check(c) == DFA_ERR_BACKEND && strstr(dfa_last_error(), "aborted"), "after the abort: %s",
              dfa_last_error());
        CHECK(dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s) == DFA_ERR_BACKEND, "aborted communicator");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    dfa_comm_destroy(c);
    /* (b) an agreed descriptor: the call enqueues, the watchdog aborts the transfers */
    CHECK(dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, rank, &c) == DFA_OK, "create: %s", dfa_last_error());
    CHECK(dfa_comm_set_timeout(c, T) == DFA_OK, "set_timeout: %s", dfa_last_error());
    CHECK(dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s) == DFA_OK, "agreeing: %s", dfa_last_error());
    CUDA_OK(cudaStreamSynchronize(s));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        const double t0 = now();
        const dfa_status st = dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
        CHECK(st == DFA_OK, "enqueue with an absent peer: %s", dfa_last_error());
        const cudaError_t ce = cudaStreamSynchronize(s);
        const double dt = now() - t0;
        (void)cudaGetLastError();
        CHECK(dt < T + 60, "the stream came back after %.1f s (%s)", dt, cudaGetErrorString(ce));
        const dfa_status st2 = dfa_comm_check(c);
        CHECK(st2 == DFA_ERR_BACKEND && strstr(dfa_last_error(), "timed out") &&
                  (strstr(dfa_last_error(), "step") || strstr(dfa_last_error(), "agreement")),
              "the watchdog: %s: %s", dfa_status_string(st2), dfa_last_error());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    dfa_comm_destroy(c);
    dbufs_free(&b);
    whole_free(&w);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
    int ok = ndev >= nranks && ndev > 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) {
        if (rank == 0) printf("test_dist_gpu: %d ranks need as many GPUs (this machine has %d): skipped\n", nranks, ndev);
        MPI_Finalize();
        return 77;
    }
    small = getenv("DFA_GPU_TEST_SMALL") != NULL;
    CUDA_OK(cudaSetDevice(rank));
    if (device_cc() < 80) {
        if (rank == 0) printf("test_dist_gpu: compute capability 8.0 or newer needed: skipped\n");
        MPI_Finalize();
        return 77;
    }
    tl_init("test_dist_gpu");
    /* every rank draws the same case parameters */
    dfa_comm *c = NULL;
    CHECK(dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, rank, &c) == DFA_OK, "dfa_comm_create_nccl_mpi: %s", dfa_last_error());
    CHECK(dfa_comm_rank(c) == rank && dfa_comm_size(c) == nranks, "rank/size");
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    static const int heads[][2] = {{4, 4}, {6, 2}, {8, 1}, {5, 5}, {3, 1}};
    static const int rows[] = {37, 128, 1, 300, 64, 200};
    static const int dims[] = {128, 64, 96, 128, 256, 64};
    static const dfa__sched_kind kinds[] = {DFA__SCHED_BALANCED, DFA__SCHED_RING, DFA__SCHED_PAPER};
    const int masks_only = getenv("DFA_GPU_TEST_MASKS") != NULL;
    const int ncases = masks_only ? 0 : small ? 4 : 30;
    for (int i = 0; i < ncases; i++) {
        dcase k = {1 + (i % 4 == 3), small ? 16 + i : rows[i % 6], heads[i % 5][0], heads[i % 5][1], dims[i % 6],
                   i % 3 == 2 ? DFA_F16 : DFA_BF16, i % 5 != 4, (i / 2) % 2 == 0, kinds[i % 3],
                   i % 7 == 3 ? DFA_FLAG_DETERMINISTIC : 0, 0, 0, 0, 0};
        run_case(c, &k, s);
    }
    /* the other constructor: a communicator from the caller's own NCCL communicator */
    if (!masks_only) {
        ncclUniqueId id;
        if (rank == 0) ncclGetUniqueId(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        ncclComm_t nc;
        CHECK(ncclCommInitRank(&nc, nranks, id, rank) == ncclSuccess, "ncclCommInitRank");
        dfa_comm *c2 = NULL;
        CHECK(dfa_comm_create_nccl(nc, &c2) == DFA_OK, "dfa_comm_create_nccl: %s", dfa_last_error());
        CHECK(dfa_comm_create_nccl(NULL, &c2) == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "comm is NULL"),
              "NULL nccl comm: %s", dfa_last_error());
        CHECK(dfa_comm_create_nccl(nc, NULL) == DFA_ERR_INVALID_ARGUMENT, "NULL out");
        dcase k = {2, 50, 4, 2, 128, DFA_BF16, 1, 1, DFA__SCHED_BALANCED, 0, 0, 0, 0, 0};
        run_case(c2, &k, s);
        dfa_comm_destroy(c2);
        ncclCommDestroy(nc);
    }
    dfa_comm *bad = NULL;
    CHECK(dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, ndev + 5, &bad) == DFA_ERR_INVALID_ARGUMENT &&
              strstr(dfa_last_error(), "device"), "bad device: %s", dfa_last_error());
    CHECK(dfa_comm_create_nccl_mpi(MPI_COMM_NULL, 0, &bad) == DFA_ERR_INVALID_ARGUMENT, "MPI_COMM_NULL");
    CUDA_OK(cudaSetDevice(rank));
    if (!masks_only) test_bits(c, s);
    if (!masks_only) test_errors(c, s);
    test_masks(c, s);
    test_direct_bits(c, s);
    test_same_docs(c, s);
    test_mask_errors(c, s);
    CHECK(dfa_comm_check(c) == DFA_OK, "rank %d: leftover failure: %s", rank, dfa_last_error());
    dfa_comm_destroy(c);
    if (!small && !masks_only && nranks > 1) test_timeouts(s);
    cudaStreamDestroy(s);
    int fails = tl_failures, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_dist_gpu: %d ranks, %d cases%s\n", nranks, ncases + !masks_only, masks_only ? " (masks only)" : "");
    const int rc = tl_finish("test_dist_gpu");
    MPI_Finalize();
    return rc || all ? 1 : 0;
}
