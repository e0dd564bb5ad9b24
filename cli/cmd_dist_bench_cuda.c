/* `mpirun -np P distflash dist-bench --device cuda`: DistFlashAttn on GPUs, one rank per GPU.
 *
 * For each total sequence length S (each rank holds S/P rows): our single-GPU call on the
 * whole sequence (rank 0; the reference of the scaling efficiency T1 / (P * TP)), then the
 * distributed forward and forward+backward for the ring, the paper's balanced schedule and
 * ours, overlap on and off: medians of CUDA event timings (the slowest rank of each
 * repetition), TFLOP/s per GPU (FLOPs as in DESIGN.md: forward 4 B H S^2 D, halved when
 * causal; forward+backward 3.5x), and per step the compute and wait times of every rank
 * (device timing marks, from one extra repetition). --fit finds the longest causal
 * forward+backward that fits on the P GPUs. --docs MEAN / --window W (bench_masks.h) mask
 * every call, the single-GPU reference included (document ids in device memory); FLOPs then
 * count visible pairs only, so TFLOP/s and the efficiency compare like with like. */
#include <stdio.h>

#include "commands.h"

#if !defined(DFA_HAVE_MPI) || !defined(DFA_HAVE_NCCL)
int cmd_dist_bench_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash dist-bench --device cuda: this build has no %s\n",
#ifndef DFA_HAVE_MPI
            "MPI (apt-get install openmpi-bin libopenmpi-dev)"
#else
            "NCCL (CUDA with NCCL installed, -DDFA_WITH_NCCL=ON)"
#endif
    );
    return 2;
}
#else

#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distflash_cuda.h"
#include "distflash_mpi.h"
#include "distflash_nccl.h"
#include "seqpar/dist_internal.h"
#include "seqpar/executor.h"
#include "bench_masks.h"
#include "cli_values.h"
#include "cuda_fill.h"
#include "measure.h"

static int rank, nranks;

#define DB_CUDA(call)                                                                                     \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(e_));            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                 \
        }                                                                                                 \
    } while (0)

typedef struct {
    int seqs[16], nseqs;
    int batch, heads, kv_heads, head_dim, causal, warmup, reps, single, deterministic, fit, paper, fit_run;
    int same_docs;
    dfa_dtype dtype;
    const char *json;
    bench_mask mask;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np P distflash dist-bench --device cuda [options]   (one rank per GPU)\n\n"
            "  --seqlens 32k,64k,128k,256k   total sequence lengths (each rank holds S/P rows)\n"
            "  --batch B --heads H --kv-heads K --head-dim D          [1, 32, 32, 128]\n"
            "  --dtype bf16|f16                                        [bf16]\n"
            "  --non-causal                  full attention\n"
            "  --reps R --warmup W           timed and untimed repetitions [5, 2]\n"
            "  --paper                       also the paper's balanced schedule\n"
            "  --deterministic               DFA_FLAG_DETERMINISTIC\n"
            "  --no-single                   skip the single-GPU reference\n"
            "  --json FILE                   results as JSON (rank 0)\n"
            "  --docs MEAN                   packed documents, log-normal lengths of this mean (sigma 1, fixed seed)\n"
            "  --window W                    sliding window of W keys back (and ahead when non-causal)\n"
            "  --same-docs                   with --docs: DFA_FLAG_SAME_DOCS on the distributed calls (the ids are\n"
            "                                those of the last call, as in a training step after its first call)\n"
            "  --fit                         the longest causal fwd+bwd that fits (H x D as given)\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){{32768, 65536, 131072, 262144}, 4, 1, 32, 32, 128, 1, 2, 5, 1, 0, 0, 0, 1 << 20, 0, DFA_BF16, NULL, {0.0, -1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int mk = bench_mask_arg(argc, argv, &i, &o->mask);
        if (mk < 0) return -1;
        if (mk) continue;
        int *ip = !strcmp(a, "--batch") ? &o->batch : !strcmp(a, "--heads") ? &o->heads
                : !strcmp(a, "--kv-heads") ? &o->kv_heads : !strcmp(a, "--head-dim") ? &o->head_dim
                : !strcmp(a, "--reps") ? &o->reps : !strcmp(a, "--warmup") ? &o->warmup
                : !strcmp(a, "--fit-run") ? &o->fit_run : NULL;
        if (!strcmp(a, "--device")) {
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank == 0) usage(stdout);
            return 1;
        } else if (ip && v) {
            *ip = atoi(argv[++i]);
            if (*ip < (ip == &o->warmup || ip == &o->fit_run ? 0 : 1)) return -1;
        } else if (!strcmp(a, "--seqlens") && v) {
            if ((o->nseqs = cli_size_list(argv[++i], 1, 1L << 30, o->seqs, 16)) < 1) return -1;
        } else if (!strcmp(a, "--dtype") && v) {
            if (cli_dtype(argv[++i], &o->dtype) || o->dtype == DFA_F32) return -1;
        } else if (!strcmp(a, "--json") && v) {
            o->json = argv[++i];
        } else if (!strcmp(a, "--non-causal")) o->causal = 0;
        else if (!strcmp(a, "--paper")) o->paper = 1;
        else if (!strcmp(a, "--deterministic")) o->deterministic = 1;
        else if (!strcmp(a, "--no-single")) o->single = 0;
        else if (!strcmp(a, "--fit")) o->fit = 1;
        else if (!strcmp(a, "--same-docs")) o->same_docs = 1;
        else {
            if (rank == 0) fprintf(stderr, "distflash dist-bench: unknown or incomplete option %s\n", a);
            return -1;
        }
    }
    if (o->heads % o->kv_heads) return -1;
    if (o->same_docs && !(o->mask.doc_mean > 0)) {
        if (rank == 0) fprintf(stderr, "distflash dist-bench: --same-docs needs --docs\n");
        return -1;
    }
    return 0;
}

typedef struct {
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
} bufs;

/* Allocates the buffers of n rows; 0 on success (nothing left allocated on failure). */
static int alloc_bufs(bufs *b, const opts *o, int64_t n) {
    memset(b, 0, sizeof *b);
    const size_t qb = (size_t)o->batch * n * o->heads * o->head_dim * 2, kb = (size_t)o->batch * n * o->kv_heads * o->head_dim * 2;
    void **p[8] = {&b->q, &b->k, &b->v, &b->o, &b->dout, &b->dq, &b->dk, &b->dv};
    const size_t sz[8] = {qb, kb, kb, qb, qb, qb, kb, kb};
    int bad = 0;
    for (int i = 0; i < 8; i++) bad |= cudaMalloc(p[i], sz[i]) != cudaSuccess;
    bad |= cudaMalloc((void **)&b->lse, sizeof(float) * (size_t)o->batch * o->heads * n) != cudaSuccess;
    if (bad) {
        for (int i = 0; i < 8; i++) cudaFree(*p[i]);
        cudaFree(b->lse);
        (void)cudaGetLastError();
        memset(b, 0, sizeof *b);
        return -1;
    }
    DB_CUDA(bench_cuda_fill_random(o->dtype, b->q, qb, 1 + 10 * (uint64_t)rank));
    DB_CUDA(bench_cuda_fill_random(o->dtype, b->k, kb, 2 + 10 * (uint64_t)rank));
    DB_CUDA(bench_cuda_fill_random(o->dtype, b->v, kb, 3 + 10 * (uint64_t)rank));
    DB_CUDA(bench_cuda_fill_random(o->dtype, b->dout, qb, 4 + 10 * (uint64_t)rank));
    return 0;
}

static void free_bufs(bufs *b) {
    void *p[9] = {b->q, b->k, b->v, b->o, b->dout, b->dq, b->dk, b->dv, b->lse};
    for (int i = 0; i < 9; i++) cudaFree(p[i]);
    memset(b, 0, sizeof *b);
}

static double flops_fwd(const opts *o, double S) {
    return 4.0 * o->batch * o->heads * S * S * o->head_dim * (o->causal ? 0.5 : 1.0);
}

/* Median over reps of (forward, forward+backward) seconds of one configuration; the slowest
   rank's time per repetition. kind < 0: the single-GPU call on rank 0 only. */
typedef struct {
    double fwd, fb;
} timing;

static dfa_status run_once(dfa_comm *c, const dfa_dist_desc *d, int kind, const bufs *b, cudaStream_t s, double *tf,
                           double *tfb) {
    cudaEvent_t e0, e1, e2;
    DB_CUDA(cudaEventCreate(&e0));
    DB_CUDA(cudaEventCreate(&e1));
    DB_CUDA(cudaEventCreate(&e2));
    dfa_status st;
    DB_CUDA(cudaEventRecord(e0, s));
    if (kind < 0) {
        dfa_attn_desc a = d->attn;
        st = dfa_attn_fwd_cuda(&a, b->q, b->k, b->v, b->o, b->lse, s);
        DB_CUDA(cudaEventRecord(e1, s));
        if (!st) st = dfa_attn_bwd_cuda(&a, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv, s);
    } else {
        st = dfa__dist_fwd_cuda(c, d, (dfa__sched_kind)kind, b->q, b->k, b->v, b->o, b->lse, s);
        DB_CUDA(cudaEventRecord(e1, s));
        if (!st) st = dfa__dist_bwd_cuda(c, d, (dfa__sched_kind)kind, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq,
                                         b->dk, b->dv, s);
    }
    DB_CUDA(cudaEventRecord(e2, s));
    DB_CUDA(cudaEventSynchronize(e2));
    float a = 0, ab = 0;
    DB_CUDA(cudaEventElapsedTime(&a, e0, e1));
    DB_CUDA(cudaEventElapsedTime(&ab, e0, e2));
    *tf = 1e-3 * a;
    *tfb = 1e-3 * ab;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(e2);
    return st;
}

static timing measure(dfa_comm *c, const dfa_dist_desc *d, int kind, const bufs *b, cudaStream_t s, const opts *o,
                      int collective) {
    double *f = malloc(sizeof(double) * (size_t)o->reps), *fb = malloc(sizeof(double) * (size_t)o->reps);
    for (int r = 0; r < o->warmup + o->reps; r++) {
        if (collective) MPI_Barrier(MPI_COMM_WORLD);
        double t[2];
        const dfa_status st = run_once(c, d, kind, b, s, &t[0], &t[1]);
        if (st) {
            fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (collective) MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= o->warmup) f[r - o->warmup] = t[0], fb[r - o->warmup] = t[1];
    }
    timing tm = {measure_median(f, o->reps), measure_median(fb, o->reps)};
    free(f);
    free(fb);
    return tm;
}

/* One more call of each pass with device timing marks (after an untimed forward); per step
   compute / wait of every rank, and the host's time before the first step (setup: checks, the agreement, the ids' round trip
   and the plan of a masked call), with the stream idle before each pass so that it is the
   host's own (in a training step the device waits that long, less what it still has queued). */
static void print_steps(dfa_comm *c, const dfa_dist_desc *d, int kind, const bufs *b, cudaStream_t s) {
    dfa__dist_stats sf, sb;
    /* a call of this schedule first: a masked plan's counts are cached for the next calls with the
       same ids and schedule (exec_mask.c, mask_counts), as in a training step */
    if (dfa__dist_fwd_cuda(c, d, (dfa__sched_kind)kind, b->q, b->k, b->v, b->o, b->lse, s) != DFA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaStreamSynchronize(s);
    MPI_Barrier(MPI_COMM_WORLD);
    dfa__dist_set_stats(c, &sf);
    dfa_status st = dfa__dist_fwd_cuda(c, d, (dfa__sched_kind)kind, b->q, b->k, b->v, b->o, b->lse, s);
    cudaStreamSynchronize(s);
    dfa__dist_set_stats(c, &sb);
    if (!st) st = dfa__dist_bwd_cuda(c, d, (dfa__sched_kind)kind, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk,
                                     b->dv, s);
    dfa__dist_set_stats(c, NULL);
    if (st) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int T = sf.steps < 16 ? sf.steps : 16, Tb = sb.steps < 16 ? sb.steps : 16;
    enum { W = 74 }; /* per rank: 4 x 16 step times, then per pass setup and its 4 parts */
    double mine[W] = {0}, *all = rank == 0 ? malloc(sizeof mine * (size_t)nranks) : NULL;
    for (int t = 0; t < T; t++) mine[t] = sf.compute_s[t], mine[16 + t] = sf.wait_s[t];
    for (int t = 0; t < Tb; t++) mine[32 + t] = sb.compute_s[t], mine[48 + t] = sb.wait_s[t];
    const dfa__dist_stats *ps[2] = {&sf, &sb};
    for (int pass = 0; pass < 2; pass++) {
        double *x = mine + 64 + 5 * pass;
        x[0] = ps[pass]->setup_s;
        x[1] = ps[pass]->setup_plan_s;
        x[2] = ps[pass]->setup_agree_s;
        x[3] = ps[pass]->setup_ids_s;
        x[4] = ps[pass]->setup_mask_plan_s;
    }
    MPI_Gather(mine, W, MPI_DOUBLE, all, W, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int pass = 0; pass < 2; pass++) {
            printf("    %s  rank |", pass ? "bwd" : "fwd");
            for (int t = 0; t < (pass ? Tb : T); t++) printf(" step %d compute/wait ms |", t);
            printf(" host setup ms (plan, agree, ids, masked plan)\n");
            for (int p = 0; p < nranks; p++) {
                const double *x = all + W * p;
                printf("         R%-3d |", p);
                for (int t = 0; t < (pass ? Tb : T); t++)
                    printf(" %10.2f / %-9.2f |", 1e3 * x[32 * pass + t], 1e3 * x[32 * pass + 16 + t]);
                const double *u = x + 64 + 5 * pass;
                printf(" %8.2f (%.2f %.2f %.2f %.2f)\n", 1e3 * u[0], 1e3 * u[1], 1e3 * u[2], 1e3 * u[3], 1e3 * u[4]);
            }
        }
        free(all);
    }
}

static const char *kind_name(int k) { return k == DFA__SCHED_RING ? "ring" : k == DFA__SCHED_PAPER ? "paper" : "balanced"; }

/* The longest causal forward+backward on the P GPUs. A forward+backward at the lengths where
   memory runs out takes minutes (its FLOPs grow with S^2), so the check is in two parts:
   (1) the memory model per token (the caller's tensors, plus the workspace of a call split
   into the most head groups) against the fullest GPU's free memory gives a length, at which
   every tensor is allocated and the backward's workspace reserved (dfa__dist_reserve: the
   allocation a call makes before its kernels, which allocate nothing more), stepping down 2%
   until it fits; (2) one real forward+backward at --fit-run tokens (default 1M), long enough
   to need head groups, shows the calls run there. */
static int run_fit(dfa_comm *c, const opts *o, cudaStream_t s) {
    dfa_dist_desc d = dfa_dist_desc_init(o->batch, 1, o->heads, o->kv_heads, o->head_dim);
    d.attn.dtype = o->dtype;
    d.attn.causal = 1;
    d.overlap = 1;
    d.attn.flags = o->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    const int64_t probe = 1 << 16; /* rows per rank of the model's measurement */
    const double tensors =
        (double)o->batch * (4.0 * o->heads + 4.0 * o->kv_heads) * o->head_dim * 2 + 4.0 * o->batch * o->heads;
    /* the workspace per token of one pass, and of a pass over one group of H/Hkv heads and one kv head */
    dfa_dist_desc g1 = d;
    g1.attn.seqlen_q = g1.attn.seqlen_k = (int)probe;
    const double ws1 = (double)dfa_dist_attn_cuda_workspace_bytes(nranks, &g1) / probe;
    g1.attn.num_heads = o->heads / o->kv_heads;
    g1.attn.num_kv_heads = 1;
    const double pack = (double)o->batch * (3.0 * (o->heads / o->kv_heads) + 2.0) * o->head_dim * 2 + 4.0 * o->batch * (o->heads / o->kv_heads);
    const double wsg = (double)dfa_dist_attn_cuda_workspace_bytes(nranks, &g1) / probe + pack;
    size_t fr = 0, tot = 0;
    DB_CUDA(cudaMemGetInfo(&fr, &tot));
    double f = (double)fr;
    MPI_Allreduce(MPI_IN_PLACE, &f, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    const int64_t unit = 1024;
    int64_t n = (int64_t)((f - (double)(1u << 30)) / (tensors + wsg)) / unit * unit;
    if (rank == 0)
        printf("fit model per token on each GPU: tensors %.0f B (q, o, dout, dq: %d heads; k, v, dk, dv: %d); workspace "
               "%.0f B in one pass, %.0f B in %d head groups; free %.2f GiB -> %lld rows per GPU\n",
               tensors, o->heads, o->kv_heads, ws1, wsg, o->kv_heads, f / 1073741824.0, (long long)n);
    int64_t found = 0;
    for (int attempt = 0; attempt < 8 && n > 0 && !found; attempt++) {
        bufs b;
        int ok = n <= 0x7fffffff && alloc_bufs(&b, o, n) == 0, groups = 0;
        size_t left = 0;
        if (ok) {
            d.attn.seqlen_q = d.attn.seqlen_k = (int)n;
            const dfa_status st = dfa__dist_reserve(c, &d, DFA__PASS_BWD, &groups);
            ok = st == DFA_OK;
            cudaMemGetInfo(&left, &tot);
            if (!ok) printf("  rank %d, %lld rows: %s\n", rank, (long long)n, dfa_last_error());
            free_bufs(&b);
        }
        dfa_comm_set_workspace(c, NULL, 0); /* gives the workspace back */
        (void)cudaGetLastError();
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0)
            printf("  %lld tokens (%lld per GPU): %s (%d head groups, %.2f GiB left on rank 0)\n", (long long)n * nranks,
                   (long long)n, ok ? "tensors and workspace allocated" : "does not fit", groups, left / 1073741824.0);
        fflush(stdout);
        if (ok) found = n;
        else n = n * 98 / 100 / unit * unit;
    }
    if (rank == 0)
        printf("longest causal fwd+bwd on %d GPUs at %d heads x %d (memory): %lld tokens (%lld per GPU)\n", nranks,
               o->heads, o->head_dim, (long long)found * nranks, (long long)found);
    /* (2) a real forward+backward at the run length */
    const int64_t rn = (int64_t)o->fit_run / nranks / unit * unit;
    if (rn > 0) {
        bufs b;
        int ok = alloc_bufs(&b, o, rn) == 0;
        double secs = 0.0;
        if (ok) {
            d.attn.seqlen_q = d.attn.seqlen_k = (int)rn;
            const double t0 = MPI_Wtime();
            dfa_status st = dfa_dist_attn_fwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, s);
            if (!st) st = dfa_dist_attn_bwd_cuda(c, &d, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, s);
            const cudaError_t ce = cudaStreamSynchronize(s);
            secs = MPI_Wtime() - t0;
            ok = st == DFA_OK && ce == cudaSuccess;
            if (!ok) printf("  rank %d: %s\n", rank, st ? dfa_last_error() : cudaGetErrorString(ce));
            free_bufs(&b);
        }
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (rank == 0)
            printf("fwd+bwd at %lld tokens (%lld per GPU): %s in %.1f s (%.0f TFLOP/s per GPU)\n", (long long)rn * nranks,
                   (long long)rn, ok ? "ran" : "FAILED", secs,
                   3.5 * flops_fwd(o, (double)rn * nranks) / nranks / secs / 1e12);
    }
    return found ? 0 : 1;
}

int cmd_dist_bench_cuda(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    opts o;
    const int prc = parse(argc, argv, &o);
    if (prc) {
        if (prc < 0 && rank == 0) usage(stderr);
        MPI_Finalize();
        return prc > 0 ? 0 : 2;
    }
    int ndev = 0;
    DB_CUDA(cudaGetDeviceCount(&ndev));
    dfa_comm *c = NULL;
    if (dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, rank % ndev, &c) != DFA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    cudaStream_t s;
    DB_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (o.fit) {
        run_fit(c, &o, s);
        dfa_comm_destroy(c);
        MPI_Finalize();
        return 0;
    }
    FILE *js = rank == 0 && o.json ? fopen(o.json, "w") : NULL;
    if (js) fprintf(js, "{\"gpus\": %d, \"heads\": %d, \"head_dim\": %d, \"causal\": %d, \"results\": [\n", nranks, o.heads,
                    o.head_dim, o.causal);
    if (rank == 0) {
        struct cudaDeviceProp prop;
        cudaGetDeviceProperties(&prop, 0);
        char mdesc[160];
        bench_mask_describe(&o.mask, 0, mdesc, sizeof mdesc);
        printf("dist-bench --device cuda: %d ranks on %s, batch %d, %d heads (%d kv) x %d, %s, %s%s, %s%s; median of %d "
               "(+%d warm-up)\n%s\n",
               nranks, prop.name, o.batch, o.heads, o.kv_heads, o.head_dim, o.dtype == DFA_BF16 ? "bf16" : "f16",
               o.causal ? "causal" : "non-causal", o.deterministic ? ", deterministic" : "", mdesc,
               o.same_docs ? " (DFA_FLAG_SAME_DOCS)" : "", o.reps, o.warmup,
               dfa_version_string());
        if (bench_mask_on(&o.mask)) printf("(masked: FLOPs over visible pairs only)\n");
        printf("\n%8s %-9s %-7s %9s %10s %9s %9s %8s %8s\n", "S", "schedule", "overlap", "fwd ms", "f+b ms",
               "fwd TF/s", "f+b TF/s", "eff f+b", "vs ring");
    }
    int first = 1;
    for (int si = 0; si < o.nseqs; si++) {
        const int64_t S = o.seqs[si], n = S / nranks;
        if (S % nranks) {
            if (rank == 0) printf("S = %lld is not a multiple of %d: skipped\n", (long long)S, nranks);
            continue;
        }
        /* masks: the whole sequence's ids (the same on every rank) on the host for the visible
           FLOPs, on the device for the calls (the single GPU's whole sequence, this rank's rows) */
        const int masked = bench_mask_on(&o.mask);
        int ndocs = 0;
        int32_t *ids = bench_docs(&o.mask, o.batch, S, &ndocs);
        int32_t *lids = bench_docs_slice(ids, o.batch, S, (int64_t)rank * n, n);
        int32_t *ids_dev = NULL, *lids_dev = NULL;
        if (ids) {
            DB_CUDA(cudaMalloc((void **)&lids_dev, sizeof(int32_t) * (size_t)o.batch * n));
            DB_CUDA(cudaMemcpy(lids_dev, lids, sizeof(int32_t) * (size_t)o.batch * n, cudaMemcpyHostToDevice));
        }
        double F = flops_fwd(&o, (double)S);
        if (masked) {
            dfa_attn_desc whole = dfa_attn_desc_init(o.batch, (int)S, (int)S, o.heads, o.kv_heads, o.head_dim);
            whole.causal = o.causal;
            bench_mask_apply(&o.mask, &whole, ids);
            F = bench_visible_flops(&whole);
            if (rank == 0)
                printf("%8lld mask: %d documents per row, %.2f%% of the pairs visible\n", (long long)S, ndocs,
                       100.0 * F / (4.0 * o.heads * o.head_dim * o.batch * (double)S * (double)S));
        }
        timing t1 = {0, 0};
        if (o.single) {
            if (rank == 0) {
                bufs whole;
                if (alloc_bufs(&whole, &o, S)) {
                    printf("%8lld single GPU: does not fit\n", (long long)S);
                } else {
                    dfa_dist_desc d1 = dfa_dist_desc_init(o.batch, (int)S, o.heads, o.kv_heads, o.head_dim);
                    d1.attn.dtype = o.dtype;
                    d1.attn.causal = o.causal;
                    d1.attn.flags = o.deterministic ? DFA_FLAG_DETERMINISTIC : 0;
                    if (ids) {
                        DB_CUDA(cudaMalloc((void **)&ids_dev, sizeof(int32_t) * (size_t)o.batch * S));
                        DB_CUDA(cudaMemcpy(ids_dev, ids, sizeof(int32_t) * (size_t)o.batch * S, cudaMemcpyHostToDevice));
                    }
                    bench_mask_apply(&o.mask, &d1.attn, ids_dev);
                    t1 = measure(NULL, &d1, -1, &whole, s, &o, 0);
                    cudaFree(ids_dev);
                    ids_dev = NULL;
                    free_bufs(&whole);
                    printf("%8lld %-9s %-7s %9.2f %10.2f %9.1f %9.1f\n", (long long)S, "1 GPU", "-", 1e3 * t1.fwd,
                           1e3 * t1.fb, F / t1.fwd / 1e12, 3.5 * F / t1.fb / 1e12);
                }
            }
            MPI_Bcast(&t1, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        }
        bufs b;
        int ok = alloc_bufs(&b, &o, n) == 0;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!ok) {
            if (rank == 0) printf("%8lld: the buffers do not fit\n", (long long)S);
            free_bufs(&b);
            cudaFree(lids_dev);
            free(ids);
            free(lids);
            continue;
        }
        dfa_dist_desc d = dfa_dist_desc_init(o.batch, (int)n, o.heads, o.kv_heads, o.head_dim);
        d.attn.dtype = o.dtype;
        d.attn.causal = o.causal;
        d.attn.flags = o.deterministic ? DFA_FLAG_DETERMINISTIC : 0;
        bench_mask_apply(&o.mask, &d.attn, lids_dev);
        /* every call after the first of each size reuses the kept ids (the first reads them: nothing kept) */
        if (o.same_docs) d.attn.flags |= DFA_FLAG_SAME_DOCS;
        const int kinds[3] = {DFA__SCHED_RING, DFA__SCHED_BALANCED, DFA__SCHED_PAPER};
        timing res[3][2];
        for (int ki = 0; ki < (o.paper ? 3 : 2); ki++)
            for (int ov = 1; ov >= 0; ov--) {
                d.overlap = ov;
                res[ki][ov] = measure(c, &d, kinds[ki], &b, s, &o, 1);
                const timing *r = &res[ki][ov];
                if (rank == 0) {
                    const double eff = t1.fb > 0 ? t1.fb / (nranks * r->fb) : 0.0;
                    printf("%8lld %-9s %-7s %9.2f %10.2f %9.1f %9.1f %8.3f %7.3fx\n", (long long)S, kind_name(kinds[ki]),
                           ov ? "on" : "off", 1e3 * r->fwd, 1e3 * r->fb, F / nranks / r->fwd / 1e12,
                           3.5 * F / nranks / r->fb / 1e12, eff, res[0][ov].fb / r->fb);
                    if (js)
                        fprintf(js, "%s{\"S\": %lld, \"docs_mean\": %g, \"window\": %d, \"schedule\": \"%s\", \"overlap\": %d, \"fwd_ms\": %.4f, \"fb_ms\": %.4f, "
                                    "\"single_fwd_ms\": %.4f, \"single_fb_ms\": %.4f, \"tflops_fwd_per_gpu\": %.2f, "
                                    "\"tflops_fb_per_gpu\": %.2f, \"efficiency_fb\": %.4f}",
                                first ? "" : ",\n", (long long)S, o.mask.doc_mean, o.mask.window, kind_name(kinds[ki]), ov,
                                1e3 * r->fwd, 1e3 * r->fb,
                                1e3 * t1.fwd, 1e3 * t1.fb, F / nranks / r->fwd / 1e12, 3.5 * F / nranks / r->fb / 1e12,
                                eff);
                    first = 0;
                    fflush(stdout);
                }
            }
        for (int ki = 0; ki < 2; ki++) {
            d.overlap = 1;
            if (rank == 0) printf("  S = %lld, %s, overlap on: per step (one more call with timing marks)\n", (long long)S,
                                  kind_name(kinds[ki]));
            print_steps(c, &d, kinds[ki], &b, s);
        }
        free_bufs(&b);
        cudaFree(lids_dev);
        free(ids);
        free(lids);
    }
    if (js) {
        fprintf(js, "\n]}\n");
        fclose(js);
    }
    dfa_comm_destroy(c);
    cudaStreamDestroy(s);
    MPI_Finalize();
    return 0;
}
#endif
