/* `distflash rank-sim`: each rank's whole pass of a P-rank distributed call, run on one GPU.
 *
 * What P GPUs would take cannot be timed without P GPUs, but most of it is each rank's own
 * device work: its blocks, the float32 accumulators' fills and folds, the direct 16-bit writes,
 * the rounding passes, the packing of messages, and its host setup. This runs the library's
 * executor for rank r of P (r = 0 .. P-1 in turn) with the CUDA compute table on a loopback
 * communicator: sends go nowhere, receives are zero-filled on the call's stream (about the
 * device traffic a received message costs), collectives see one rank, and the document ids of
 * every rank come from the whole sequence's copy. So every rank plans the same masked plan
 * the real call would (lending included) and does all of its work except waiting for
 * transfers. The busiest rank's forward+backward against the single-GPU call on the whole
 * sequence (same run) bounds the P-GPU scaling efficiency from above: on NVLink with overlap
 * the transfers hide behind the blocks, so the bound is near what P GPUs measure unless a rank
 * waits for a peer's message that arrives late. Device backends write the direct parts (the
 * host-style loopback is told to, dfa__dist_force_direct), as the NCCL path does. */
#include <stdio.h>

#include "commands.h"

#ifndef DFA_HAVE_CUDA
int cmd_rank_sim(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash rank-sim: this build has no CUDA support\n");
    return 2;
}
#else

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_masks.h"
#include "cli_values.h"
#include "comm_loop.h"
#include "common/desc.h"
#include "common/error.h"
#include "cuda/launch.h"
#include "cuda_fill.h"
#include "measure.h"
#include "plan_args.h"
#include "distflash_cuda.h"
#include "seqpar/comm.h"
#include "seqpar/executor.h"

#define RS_CUDA(call) BENCH_CUDA_OR_EXIT("rank-sim", call)

/* What one H200 receives over NVLink from one peer, bytes a second (NCCL's point-to-point
   between two H200s; the pessimistic line of the output charges every received byte at it). */
#define RS_LINK_BYTES_S 300e9

/* --- the loopback communicator ------------------------------------------------------------ */

typedef struct {
    const int32_t *all_ids; /* device: every rank's ids, [P][batch][n] (batch 1: the whole sequence) */
} loop_impl;

static dfa_status loop_start(dfa_comm *c, const dfa__xfer *x, int n, void **pending) {
    for (int i = 0; i < n; i++)
        if (!x[i].is_send) {
            const cudaError_t e = cudaMemsetAsync(x[i].buf, 0, x[i].bytes, (cudaStream_t)c->stream);
            if (e != cudaSuccess)
                return dfa__fail(DFA_ERR_BACKEND, "rank-sim", "cudaMemsetAsync: %s", cudaGetErrorString(e));
        }
    *pending = NULL;
    return DFA_OK;
}

static dfa_status loop_wait(dfa_comm *c, void *pending) {
    (void)c;
    (void)pending;
    return DFA_OK;
}

/* The ids of every rank, from the whole sequence's copy (the real allgather waits too). */
static dfa_status loop_allgather(dfa_comm *c, const void *send, void *recv, size_t bytes) {
    (void)send;
    return comm_loop_allgather_ids(c, recv, bytes, ((const loop_impl *)c->impl)->all_ids, "rank-sim");
}

static void loop_destroy(dfa_comm *c) {
    free(c->impl);
    free(c);
}

static const dfa__comm_ops loop_ops = {
    .name = "loopback",
    .start = loop_start,
    .wait = loop_wait,
    .allreduce_max = comm_loop_allreduce_max,
    .bcast = comm_loop_bcast,
    .allgather = loop_allgather,
    .destroy = loop_destroy,
};

static dfa_comm *loop_create(int rank, int size, const int32_t *all_ids) {
    dfa_comm *c = calloc(1, sizeof *c);
    loop_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        fprintf(stderr, "distflash rank-sim: out of host memory\n");
        exit(1);
    }
    m->all_ids = all_ids;
    c->ops = &loop_ops;
    c->compute = dfa__compute_cuda();
    c->rank = rank;
    c->size = size;
    c->impl = m;
    c->call = "rank-sim";
    dfa__dist_force_direct(c, 1); /* as the NCCL path does once the ranks agreed on the host */
    return c;
}

/* --- the command ---------------------------------------------------------------------------- */

typedef struct {
    plan_args sh;   /* the sequence, ranks, heads and mask */
    plan_variant v; /* the schedule, split pairs, the fold cost */
    int warmup, same_docs, bwd_qsplit;
} rs_opts;

static int usage(FILE *f) {
    fprintf(f, "usage: distflash rank-sim [options]   (one GPU)\n\n");
    plan_args_usage(f, "each call");
    fprintf(f, "  --warmup W        untimed repetitions first (default 1)\n"
               "  --same-docs       DFA_FLAG_SAME_DOCS after each rank's first call\n"
               "  --bwd-qsplit N    CTAs per key tile in the float32 backward blocks (default 0: the library's\n"
               "                    choice; 1: never split; launch_bwd.cuh dfa__bwd_qsplit_for)\n");
    plan_variant_usage(f);
    return f == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, rs_opts *o) {
    *o = (rs_opts){plan_args_default(), plan_variant_default(), 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        int m = plan_args_parse(argc, argv, &i, &o->sh);
        if (!m) m = plan_variant_parse(argc, argv, &i, &o->v);
        if (m < 0) return -1;
        if (m > 0) continue;
        if (!strcmp(a, "--same-docs")) o->same_docs = 1;
        else if (i + 1 < argc && !strcmp(a, "--warmup")) {
            if (cli_size(argv[++i], 0, 1000, &o->warmup)) return -1;
        } else if (i + 1 < argc && !strcmp(a, "--bwd-qsplit")) {
            if (cli_size(argv[++i], 0, 1024, &o->bwd_qsplit)) return -1;
        } else {
            return -1;
        }
    }
    if (plan_args_finish(&o->sh)) return -1;
    if (o->same_docs && !(o->sh.mask.doc_mean > 0)) {
        fprintf(stderr, "distflash rank-sim: --same-docs needs documents (--docs MEAN > 0)\n");
        return -1;
    }
    return 0;
}

/* The whole sequence's tensors ([S] rows); a rank's rows are a contiguous slice (batch 1). */
typedef struct {
    char *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
} rs_bufs;

typedef struct {
    rs_opts o;
    size_t qrow, krow; /* bytes a row */
    cudaStream_t st;
    cudaEvent_t ev[3];
} rs_ctx;

/* One forward+backward: milliseconds of the forward and of both. rank < 0: the single-GPU
   call on the whole sequence; else rank's pass through the executor on c, and with marks (NULL:
   none) the executor's timing of the forward and the backward in marks[0], marks[1], the
   stream idle before each (so a pass's host setup is its own). */
static void run_once(rs_ctx *x, const rs_bufs *b, dfa_comm *c, const dfa_dist_desc *dd, const dfa_attn_desc *whole,
                     int rank, double ms[2], dfa__dist_stats *marks) {
    const int n = dd ? dd->attn.seqlen_q : 0;
    const size_t q0 = rank < 0 ? 0 : (size_t)rank * n * x->qrow, k0 = rank < 0 ? 0 : (size_t)rank * n * x->krow;
    float *lse = b->lse + (rank < 0 ? 0 : (size_t)rank * n * x->o.sh.heads);
    dfa_status st;
    RS_CUDA(cudaEventRecord(x->ev[0], x->st));
    if (rank < 0) {
        st = dfa_attn_fwd_cuda(whole, b->q, b->k, b->v, b->o, b->lse, x->st);
        RS_CUDA(cudaEventRecord(x->ev[1], x->st));
        if (!st) st = dfa_attn_bwd_cuda(whole, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv, x->st);
    } else {
        const dfa__sched_kind kind = x->o.v.ring ? DFA__SCHED_RING : DFA__SCHED_BALANCED;
        c->stream = x->st;
        const dfa__dist_io fio = {.q = b->q + q0, .k = b->k + k0, .v = b->v + k0, .o_out = b->o + q0, .lse_out = lse};
        dfa__dist_set_stats(c, marks);
        st = dfa__dist_run(c, dd, kind, DFA__PASS_FWD, &fio, DFA_OK, "rank-sim fwd");
        RS_CUDA(cudaEventRecord(x->ev[1], x->st));
        if (marks) {
            RS_CUDA(cudaStreamSynchronize(x->st));
            dfa__dist_set_stats(c, marks + 1);
        }
        const dfa__dist_io bio = {.q = b->q + q0, .k = b->k + k0, .v = b->v + k0, .o = b->o + q0, .lse = lse,
                                  .dout = b->dout + q0, .dq = b->dq + q0, .dk = b->dk + k0, .dv = b->dv + k0};
        if (!st) st = dfa__dist_run(c, dd, kind, DFA__PASS_BWD, &bio, DFA_OK, "rank-sim bwd");
        dfa__dist_set_stats(c, NULL);
    }
    if (st) {
        fprintf(stderr, "distflash rank-sim: rank %d: %s\n", rank, dfa_last_error());
        exit(1);
    }
    RS_CUDA(cudaEventRecord(x->ev[2], x->st));
    RS_CUDA(cudaEventSynchronize(x->ev[2]));
    float a = 0, ab = 0;
    RS_CUDA(cudaEventElapsedTime(&a, x->ev[0], x->ev[1]));
    RS_CUDA(cudaEventElapsedTime(&ab, x->ev[0], x->ev[2]));
    ms[0] = a, ms[1] = ab;
}

int cmd_rank_sim(int argc, char **argv) {
    rs_ctx x;
    memset(&x, 0, sizeof x);
    const int p = parse(argc, argv, &x.o);
    if (p) return usage(p > 0 ? stdout : stderr);
    const rs_opts *o = &x.o;
    const int P = o->sh.ranks, S = o->sh.seqlen, n = S / P, H = o->sh.heads, HK = o->sh.kv_heads, D = o->sh.head_dim;
    x.qrow = (size_t)H * D * 2;
    x.krow = (size_t)HK * D * 2;
    int ndocs = 0;
    int32_t *ids = bench_docs(&o->sh.mask, 1, S, &ndocs);
    if (o->sh.mask.doc_mean > 0 && !ids) {
        fprintf(stderr, "distflash rank-sim: out of host memory\n");
        return 1;
    }
    rs_bufs b;
    char **t[8] = {&b.q, &b.k, &b.v, &b.o, &b.dout, &b.dq, &b.dk, &b.dv};
    for (int i = 0; i < 8; i++) {
        const int kv = i == 1 || i == 2 || i == 6 || i == 7;
        RS_CUDA(cudaMalloc((void **)t[i], (size_t)S * (kv ? x.krow : x.qrow)));
    }
    RS_CUDA(cudaMalloc((void **)&b.lse, sizeof(float) * (size_t)S * H));
    int32_t *ids_dev = NULL;
    if (ids) {
        RS_CUDA(cudaMalloc((void **)&ids_dev, sizeof(int32_t) * (size_t)S));
        RS_CUDA(cudaMemcpy(ids_dev, ids, sizeof(int32_t) * (size_t)S, cudaMemcpyHostToDevice));
    }
    {
        char *dst[4] = {b.q, b.k, b.v, b.dout};
        const size_t bytes[4] = {S * x.qrow, S * x.krow, S * x.krow, S * x.qrow};
        for (int i = 0; i < 4; i++) RS_CUDA(bench_cuda_fill_random(o->sh.dtype, dst[i], bytes[i], 11 + (uint64_t)i));
    }
    RS_CUDA(cudaStreamCreateWithFlags(&x.st, cudaStreamNonBlocking));
    for (int i = 0; i < 3; i++) RS_CUDA(cudaEventCreate(&x.ev[i]));

    dfa_attn_desc whole = dfa_attn_desc_init(1, S, S, H, HK, D);
    whole.dtype = o->sh.dtype;
    whole.causal = 1;
    bench_mask_apply(&o->sh.mask, &whole, ids_dev);
    char what[160], split[64] = "";
    bench_mask_describe(&o->sh.mask, ndocs, what, sizeof what);
    if (o->bwd_qsplit == 1) snprintf(split, sizeof split, ", key tiles never split");
    else if (o->bwd_qsplit > 1) snprintf(split, sizeof split, ", every key tile split %d ways", o->bwd_qsplit);
    if (o->v.no_split) snprintf(split + strlen(split), sizeof split - strlen(split), ", no split pairs or bands");
    printf("rank-sim: %d tokens on %d simulated ranks (%d rows each), %s, %d heads (%d kv) x %d, %s, causal, %s "
           "schedule%s%s; medians of %d (+%d warm-up)\n",
           S, P, n, what, H, HK, D, cli_dtype_name(o->sh.dtype), o->v.ring ? "ring" : "balanced",
           o->same_docs ? ", DFA_FLAG_SAME_DOCS" : "", split, o->sh.reps, o->warmup);
    /* the backward's key tiles over several CTAs (launch_bwd.cuh); the single-GPU call's 16-bit
       kernel never splits */
    dfa__cuda_force_bwd_qsplit(o->bwd_qsplit);
    printf("(each rank's whole pass through the executor on this GPU, transfers replaced by zero-filled receives: "
           "everything but the waits for peers)\n\n");

    /* every rank's communicator at once, so that the repetitions interleave the ranks and the
       single-GPU call: a GPU's clock can drift by a few percent over a run, which would
       otherwise favour whichever ran first */
    dfa_comm **cs = calloc((size_t)P, sizeof *cs);
    dfa_dist_desc *dds = calloc((size_t)P, sizeof *dds);
    /* [rank + 1][rep]: row 0 the single-GPU call */
    double *fs = malloc(sizeof(double) * (size_t)(P + 1) * o->sh.reps), *fbs = malloc(sizeof(double) * (size_t)(P + 1) * o->sh.reps);
    if (!cs || !dds || !fs || !fbs) {
        fprintf(stderr, "distflash rank-sim: out of host memory\n");
        return 1;
    }
    for (int r = 0; r < P; r++) {
        cs[r] = loop_create(r, P, ids_dev);
        dfa__dist_set_fold_cost(cs[r], o->v.fold_cost);
        dfa__dist_set_split_pairs(cs[r], o->v.no_split ? 0 : 1);
        dfa_dist_desc user = dfa_dist_desc_init(1, n, H, HK, D);
        user.attn.dtype = o->sh.dtype;
        user.attn.causal = 1;
        user.overlap = 1;
        user.schedule = o->v.ring ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
        bench_mask_apply(&o->sh.mask, &user.attn, ids_dev ? ids_dev + (size_t)r * n : NULL);
        if (dfa__dist_desc_import(&user, &dds[r], "rank-sim")) {
            fprintf(stderr, "distflash rank-sim: %s\n", dfa_last_error());
            return 1;
        }
        double ms[2];
        run_once(&x, &b, cs[r], &dds[r], &whole, r, ms, NULL); /* the first call reads the ids (nothing kept) */
        if (o->same_docs) dds[r].attn.flags |= DFA_FLAG_SAME_DOCS;
    }
    for (int rep = 0; rep < o->warmup + o->sh.reps; rep++)
        for (int r = -1; r < P; r++) {
            double ms[2];
            RS_CUDA(cudaStreamSynchronize(x.st)); /* the stream idle before each call, as dist-bench */
            run_once(&x, &b, r < 0 ? NULL : cs[r], r < 0 ? NULL : &dds[r], &whole, r, ms, NULL);
            const size_t at = (size_t)(r + 1) * o->sh.reps + rep - o->warmup;
            if (rep >= o->warmup) fs[at] = ms[0], fbs[at] = ms[1];
        }
    const double single[2] = {measure_median(fs, o->sh.reps), measure_median(fbs, o->sh.reps)};
    printf("  1 GPU, whole sequence   fwd %8.2f ms   f+b %8.2f ms\n", single[0], single[1]);
    double most = 0, sum = 0, exposed = 0;
    int pieces = 0, bands = 0;
    for (int r = 0; r < P; r++) {
        const double ms[2] = {measure_median(fs + (size_t)(r + 1) * o->sh.reps, o->sh.reps),
                              measure_median(fbs + (size_t)(r + 1) * o->sh.reps, o->sh.reps)};
        /* one more call with the executor's timing marks: per step, and the host's setup */
        dfa__dist_stats marks[2];
        double unused[2];
        RS_CUDA(cudaStreamSynchronize(x.st));
        run_once(&x, &b, cs[r], &dds[r], &whole, r, unused, marks);
        const dfa__dist_stats sf = marks[0], sb = marks[1];
        pieces = sf.pieces, bands = sf.bands;
        printf("  rank %-3d                fwd %8.2f ms   f+b %8.2f ms   steps fwd", r, ms[0], ms[1]);
        for (int s = 0; s < sf.steps && s < 8; s++) printf(" %.2f", 1e3 * sf.compute_s[s]);
        printf(", bwd");
        for (int s = 0; s < sb.steps && s < 8; s++) printf(" %.2f", 1e3 * sb.compute_s[s]);
        printf(" ms; host setup %.2f / %.2f ms; receives %.1f / %.1f MB\n", 1e3 * sf.setup_s, 1e3 * sb.setup_s,
               1e-6 * (double)sf.bytes_recv, 1e-6 * (double)sb.bytes_recv);
        fflush(stdout);
        const double with_transfers = ms[1] + 1e3 * (double)(sf.bytes_recv + sb.bytes_recv) / RS_LINK_BYTES_S;
        if (with_transfers > exposed) exposed = with_transfers;
        most = ms[1] > most ? ms[1] : most;
        sum += ms[1];
    }
    for (int r = 0; r < P; r++) dfa_comm_destroy(cs[r]);
    free(cs), free(dds), free(fs), free(fbs);
    printf("  (the plan: %d tasks compute pieces of pairs split over ranks, %d lent bands of diagonals)\n", pieces, bands);
    printf("\n  busiest rank f+b %.2f ms, mean %.2f (balance %.3f); bound on the %d-GPU scaling efficiency: "
           "%.3f (1 GPU %.2f ms / (%d x %.2f))\n",
           most, sum / P, sum / P / most, P, single[1] / (P * most), single[1], P, most);
    printf("  if no transfer overlapped (every received byte at %.0f GB/s after the rank's work): %.3f\n",
           RS_LINK_BYTES_S / 1e9, single[1] / (P * exposed));
    for (int i = 0; i < 3; i++) cudaEventDestroy(x.ev[i]);
    cudaStreamDestroy(x.st);
    for (int i = 0; i < 8; i++) cudaFree(*t[i]);
    cudaFree(b.lse);
    cudaFree(ids_dev);
    free(ids);
    return 0;
}
#endif
