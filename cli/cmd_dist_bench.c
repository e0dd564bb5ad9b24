/* `mpirun -np P distflash dist-bench`: sequence-parallel attention timings.
 *
 * For each schedule (ring, the paper's balanced, ours) with overlap on and off: the median
 * forward+backward makespan over the repetitions, per rank and per step the compute and
 * wait time, the speedup over the ring and over one process computing the whole sequence,
 * and each rank's measured idle time beside the simulator's prediction (simulate.h) with
 * the FLOP rate measured in this run and the given link bandwidth. With --docs / --window
 * (bench_masks.h) every call, the one-process reference included, carries the mask; the
 * schedules then follow masked plans, FLOP rates count visible pairs only, and the
 * simulator (unmasked schedules) is left out. */
#include <stdio.h>

#include "commands.h"

#ifndef DFA_HAVE_MPI
int cmd_dist_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash dist-bench: this build has no MPI. Install Open MPI "
                    "(apt-get install openmpi-bin libopenmpi-dev), rebuild, and run it as\n"
                    "  mpirun -np 2 distflash dist-bench\n");
    return 2;
}
#else

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "seqpar/dist_internal.h"
#include "seqpar/executor.h"
#include "sim/simulate.h"
#include "bench_masks.h"
#include "cli_values.h"
#include "distflash_mpi.h"

typedef struct {
    int rows, batch, heads, kv_heads, head_dim, causal, reps, warmup, threads, single, detail;
    dfa_dtype dtype;
    double bandwidth, latency;
    bench_mask mask;
} bench_opts;

static int rank, nranks;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: mpirun -np P distflash dist-bench [options]\n\n"
            "Times dfa_dist_attn_fwd + dfa_dist_attn_bwd for the ring, the paper's balanced schedule and\n"
            "ours (DFA_SCHEDULE_BALANCED), overlap on and off; one process on the whole sequence for\n"
            "reference; per rank and per step compute and wait times; idle time against the simulator.\n\n"
            "options:\n"
            "  --device cpu|cuda     cuda: DistFlashAttn on GPUs over NCCL, one rank per GPU\n"
            "                        (its own options: dist-bench --device cuda --help)\n"
            "  --rows N              local rows (tokens) per rank          [2048]\n"
            "  --batch B --heads H --kv-heads K --head-dim D              [1, 8, 8, 128]\n"
            "  --dtype f32|bf16|f16                                        [f32]\n"
            "  --non-causal          full attention\n"
            "  --reps R --warmup W   timed and untimed repetitions          [3, 1]\n"
            "  --threads T           OpenMP threads per rank               [1]\n"
            "  --bandwidth BW        link bytes/s for the simulator         [5e9]\n"
            "  --latency L           seconds per message for the simulator  [2e-6]\n"
            "  --no-single           skip the one-process reference\n"
            "  --docs MEAN           packed documents, log-normal lengths of this mean (sigma 1, fixed seed)\n"
            "  --window W            sliding window of W keys back (and ahead when non-causal)\n"
            "  --detail              per-step tables for every configuration (default: ours and the ring)\n");
}

static int parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){2048, 1, 8, 8, 128, 1, 3, 1, 1, 1, 0, DFA_F32, 5e9, 2e-6, {0.0, -1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int mk = bench_mask_arg(argc, argv, &i, &o->mask);
        if (mk < 0) {
            if (rank == 0) fprintf(stderr, "distflash dist-bench: %s needs a value (--docs >= 1, --window >= 0)\n", a);
            return -1;
        }
        if (mk) continue;
        int *ip = !strcmp(a, "--rows")       ? &o->rows
                  : !strcmp(a, "--batch")    ? &o->batch
                  : !strcmp(a, "--heads")    ? &o->heads
                  : !strcmp(a, "--kv-heads") ? &o->kv_heads
                  : !strcmp(a, "--head-dim") ? &o->head_dim
                  : !strcmp(a, "--reps")     ? &o->reps
                  : !strcmp(a, "--warmup")   ? &o->warmup
                  : !strcmp(a, "--threads")  ? &o->threads
                                             : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (rank == 0) usage(stdout);
            return 1;
        } else if (ip || !strcmp(a, "--dtype") || !strcmp(a, "--bandwidth") || !strcmp(a, "--latency")) {
            if (!v) {
                if (rank == 0) fprintf(stderr, "distflash dist-bench: %s needs a value\n", a);
                return -1;
            }
            i++;
            if (ip) {
                *ip = atoi(v);
                if (*ip < (ip == &o->warmup ? 0 : 1)) {
                    if (rank == 0) fprintf(stderr, "distflash dist-bench: bad value for %s\n", a);
                    return -1;
                }
            } else if (!strcmp(a, "--dtype")) {
                if (cli_dtype(v, &o->dtype)) {
                    if (rank == 0) fprintf(stderr, "distflash dist-bench: --dtype is f32, bf16 or f16\n");
                    return -1;
                }
            } else {
                const double x = strtod(v, NULL);
                if (!(x >= 0.0)) return -1;
                if (!strcmp(a, "--bandwidth")) o->bandwidth = x;
                else o->latency = x;
            }
        } else if (!strcmp(a, "--non-causal")) {
            o->causal = 0;
        } else if (!strcmp(a, "--no-single")) {
            o->single = 0;
        } else if (!strcmp(a, "--detail")) {
            o->detail = 1;
        } else {
            if (rank == 0) {
                fprintf(stderr, "distflash dist-bench: unknown option %s\n\n", a);
                usage(stderr);
            }
            return -1;
        }
    }
    return 0;
}

static void *rand_buf(dfa_dtype t, int64_t n, unsigned seed) {
    const size_t es = t == DFA_F32 ? 4 : 2;
    void *p = malloc((size_t)n * es);
    if (!p) return NULL;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float x = (float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        if (t == DFA_F32) {
            ((float *)p)[i] = x;
        } else { /* truncation is fine for benchmark data */
            uint32_t u;
            memcpy(&u, &x, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        }
    }
    return p;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void loadavg(char *buf, size_t len) {
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, (int)len, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* Per-rank record of one call, gathered to rank 0. */
#define MAXS 64
typedef struct {
    double wall, compute_total, steps, setup, finish, post, compute_cpu;
    double compute[MAXS], wait[MAXS];
} call_rec;

static call_rec record_of(const dfa__dist_stats *s, double wall) {
    call_rec r;
    memset(&r, 0, sizeof r);
    r.wall = wall;
    r.steps = s->steps;
    r.setup = s->setup_s;
    r.finish = s->finish_s;
    r.compute_cpu = s->compute_cpu_s;
    for (int t = 0; t < s->steps && t < DFA__STATS_MAX_STEPS; t++) {
        if (t < MAXS) {
            r.compute[t] = s->compute_s[t];
            r.wait[t] = s->wait_s[t];
        }
        r.compute_total += s->compute_s[t];
        r.post += s->post_s[t];
    }
    return r;
}

typedef struct {
    dfa__sched_kind kind;
    int overlap;
    double makespan; /* median fwd+bwd */
    double best;     /* fastest repetition */
    call_rec *fwd, *bwd; /* [nranks] on rank 0: the median repetition */
} result;

/* FLOPs of the tasks of one rank (rank >= 0) or of all ranks (rank < 0): with the measured
   compute times they give the rates that calibrate the simulator. */
static double schedule_flops(const dfa__sched *s, const dfa__msg_shape *sh, int bwd, int rank_only) {
    double f = 0.0;
    for (int t = 0; t < dfa__sched_steps(s); t++)
        for (int r = 0; r < s->nranks; r++) {
            dfa__task k;
            if ((rank_only < 0 || r == rank_only) && dfa__sched_task(s, r, t, &k))
                f += dfa__task_flops(&k, s->rows, sh, bwd);
        }
    return f;
}

/* cpu share: process CPU time during the blocks over their wall time x threads; below 100%
   the rank shared its cores with something else (other programs on the machine). */
static void print_steps(const char *pass, const call_rec *rec, int P, int threads) {
    const int T = (int)rec[0].steps < MAXS ? (int)rec[0].steps : MAXS;
    printf("    %-4s rank |", pass);
    for (int t = 0; t < T; t++) printf(" step %-2d c/w ms  |", t);
    printf("  compute   wait+other (setup post finish)  cpu share\n");
    for (int p = 0; p < P; p++) {
        printf("         R%-3d |", p);
        for (int t = 0; t < T; t++) printf(" %7.1f/%-7.1f |", 1e3 * rec[p].compute[t], 1e3 * rec[p].wait[t]);
        printf(" %8.1f   %8.1f   (%.1f %.1f %.1f)  %5.1f%%\n", 1e3 * rec[p].compute_total,
               1e3 * (rec[p].wall - rec[p].compute_total), 1e3 * rec[p].setup, 1e3 * rec[p].post, 1e3 * rec[p].finish,
               rec[p].compute_total > 0 ? 100 * rec[p].compute_cpu / (rec[p].compute_total * threads) : 0.0);
    }
}

int cmd_dist_bench(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cuda")) return cmd_dist_bench_cuda(argc, argv);
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    bench_opts o;
    const int prc = parse(argc, argv, &o);
    if (prc) {
        MPI_Finalize();
        return prc > 0 ? 0 : 2;
    }
    dfa_set_num_threads(o.threads);
    dfa_comm *c = NULL;
    if (dfa_comm_create_mpi(MPI_COMM_WORLD, &c) != DFA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int P = nranks, n = o.rows;
    const int64_t nq = (int64_t)o.batch * n * o.heads * o.head_dim, nk = (int64_t)o.batch * n * o.kv_heads * o.head_dim;
    const int64_t nl = (int64_t)o.batch * o.heads * n;
    const size_t es = o.dtype == DFA_F32 ? 4 : 2;
    void *q = rand_buf(o.dtype, nq, 1 + rank), *k = rand_buf(o.dtype, nk, 100 + rank),
         *v = rand_buf(o.dtype, nk, 200 + rank), *dout = rand_buf(o.dtype, nq, 300 + rank);
    void *out = malloc((size_t)nq * es), *dq = malloc((size_t)nq * es), *dk = malloc((size_t)nk * es),
         *dv = malloc((size_t)nk * es);
    float *lse = malloc(sizeof(float) * (size_t)nl);
    if (!q || !k || !v || !dout || !out || !dq || !dk || !dv || !lse) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dfa_dist_desc d = {0};
    d.attn = dfa_attn_desc_init(o.batch, n, n, o.heads, o.kv_heads, o.head_dim);
    d.attn.dtype = o.dtype;
    d.attn.causal = o.causal;
    /* masks: the whole sequence's document ids (the same on every rank), this rank's rows */
    const int masked = bench_mask_on(&o.mask);
    int ndocs = 0;
    int32_t *ids = bench_docs(&o.mask, o.batch, (int64_t)P * n, &ndocs);
    int32_t *lids = bench_docs_slice(ids, o.batch, (int64_t)P * n, (int64_t)rank * n, n);
    if (o.mask.doc_mean > 0 && (!ids || !lids)) {
        fprintf(stderr, "rank %d: out of memory for the document ids\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    bench_mask_apply(&o.mask, &d.attn, lids);
    dfa_attn_desc whole = d.attn; /* the whole sequence, for the reference and the visible FLOPs */
    whole.seqlen_q = whole.seqlen_k = P * n;
    bench_mask_apply(&o.mask, &whole, ids);
    const double vis_fwd = bench_visible_flops(&whole); /* forward; the backward counts 2.5x */
    const dfa__msg_shape sh = {o.batch, o.heads, o.kv_heads, o.head_dim, es};
    char load[128], mdesc[160];
    bench_mask_describe(&o.mask, ndocs, mdesc, sizeof mdesc);
    if (rank == 0) {
        loadavg(load, sizeof load);
        printf("dist-bench: %d ranks x %d rows = %lld tokens, batch %d, %d heads (%d kv), head_dim %d, %s, %s, %s, "
               "%d thread(s)/rank, median of %d (+%d warm-up)\n%s\nloadavg before: %s\n",
               P, n, (long long)P * n, o.batch, o.heads, o.kv_heads, o.head_dim,
               o.dtype == DFA_F32 ? "f32" : o.dtype == DFA_BF16 ? "bf16" : "f16", o.causal ? "causal" : "non-causal",
               mdesc, o.threads, o.reps, o.warmup, dfa_version_string(), load);
        if (masked)
            printf("visible pairs: %.4g of %.4g (%.2f%%); FLOP rates below count visible pairs only\n",
                   vis_fwd / (4.0 * o.heads * o.head_dim),
                   (double)o.batch * P * n * (double)P * n, 100.0 * vis_fwd / (4.0 * o.heads * o.head_dim) /
                                                                ((double)o.batch * P * n * (double)P * n));
        fflush(stdout);
    }

    /* One process on the whole sequence (rank 0; the others wait at a barrier). */
    double single = 0.0;
    if (o.single) {
        if (rank == 0) {
            dfa_attn_desc full = whole;
            const int64_t fq = nq * P, fk = nk * P;
            void *Q = rand_buf(o.dtype, fq, 7), *K = rand_buf(o.dtype, fk, 8), *V = rand_buf(o.dtype, fk, 9),
                 *DO = rand_buf(o.dtype, fq, 10);
            void *O = malloc((size_t)fq * es), *DQ = malloc((size_t)fq * es), *DK = malloc((size_t)fk * es),
                 *DV = malloc((size_t)fk * es);
            float *L = malloc(sizeof(float) * (size_t)(nl * P));
            double *times = malloc(sizeof(double) * (size_t)o.reps);
            if (!Q || !K || !V || !DO || !O || !DQ || !DK || !DV || !L || !times) {
                fprintf(stderr, "out of memory for the one-process reference\n");
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            for (int r = 0; r < o.warmup + o.reps; r++) {
                const double t0 = now();
                if (dfa_attn_fwd(&full, Q, K, V, O, L) != DFA_OK ||
                    dfa_attn_bwd(&full, Q, K, V, O, L, DO, DQ, DK, DV) != DFA_OK) {
                    fprintf(stderr, "one-process reference failed: %s\n", dfa_last_error());
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                if (r >= o.warmup) times[r - o.warmup] = now() - t0;
            }
            qsort(times, (size_t)o.reps, sizeof(double), cmp_double);
            single = times[o.reps / 2];
            printf("\none process, whole sequence, fwd+bwd: %.3f s (median)", single);
            if (masked) printf(", %.2f GFLOP/s (visible pairs)", 3.5 * vis_fwd / single / 1e9);
            printf("\n");
            fflush(stdout);
            free(Q); free(K); free(V); free(DO); free(O); free(DQ); free(DK); free(DV); free(L); free(times);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }

    /* Repetitions outermost, configurations inside, so that a slow spell on the shared
       machine falls on every configuration alike. */
    static const dfa__sched_kind kinds[3] = {DFA__SCHED_RING, DFA__SCHED_PAPER, DFA__SCHED_BALANCED};
    enum { NCFG = 6 };
    result res[NCFG];
    dfa__dist_stats sf, sb;
    const int nrep = o.warmup + o.reps;
    double *span = malloc(sizeof(double) * NCFG * (size_t)nrep), *ms = malloc(sizeof(double) * (size_t)o.reps);
    call_rec *recs = malloc(sizeof(call_rec) * NCFG * (size_t)nrep * 2);
    if (!span || !ms || !recs) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int ci = 0; ci < NCFG; ci++) {
        res[ci].kind = kinds[ci / 2];
        res[ci].overlap = ci % 2 == 0;
    }
    for (int r = 0; r < nrep; r++)
        for (int ci = 0; ci < NCFG; ci++) {
            d.overlap = res[ci].overlap;
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = now();
            dfa__dist_set_stats(c, &sf);
            dfa_status st = dfa__dist_fwd(c, &d, res[ci].kind, q, k, v, out, lse);
            const double t1 = now();
            dfa__dist_set_stats(c, &sb);
            if (!st) st = dfa__dist_bwd(c, &d, res[ci].kind, q, k, v, out, lse, dout, dq, dk, dv);
            const double t2 = now();
            dfa__dist_set_stats(c, NULL);
            if (st) {
                fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            call_rec *rc = &recs[((size_t)ci * nrep + r) * 2];
            rc[0] = record_of(&sf, t1 - t0);
            rc[1] = record_of(&sb, t2 - t1);
            double local = t2 - t0;
            MPI_Allreduce(&local, &span[ci * nrep + r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }
    for (int ci = 0; ci < NCFG; ci++) {
        result *R = &res[ci];
        /* the median repetition (every rank sees the same spans) */
        for (int r = o.warmup; r < nrep; r++) ms[r - o.warmup] = span[ci * nrep + r];
        qsort(ms, (size_t)o.reps, sizeof(double), cmp_double);
        R->makespan = ms[o.reps / 2];
        R->best = ms[0];
        int med = o.warmup;
        for (int r = o.warmup; r < nrep; r++)
            if (span[ci * nrep + r] == R->makespan) med = r;
        R->fwd = rank == 0 ? malloc(sizeof(call_rec) * (size_t)P) : NULL;
        R->bwd = rank == 0 ? malloc(sizeof(call_rec) * (size_t)P) : NULL;
        const call_rec *rc = &recs[((size_t)ci * nrep + med) * 2];
        MPI_Gather(&rc[0], (int)sizeof(call_rec), MPI_BYTE, R->fwd, (int)sizeof(call_rec), MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Gather(&rc[1], (int)sizeof(call_rec), MPI_BYTE, R->bwd, (int)sizeof(call_rec), MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    free(span);

    if (rank == 0) {
        loadavg(load, sizeof load);
        printf("loadavg after: %s\n", load);
        printf("\n%-9s %-7s %10s %9s %9s %10s %9s%s\n", "schedule", "overlap", "f+b s", "vs ring", "vs paper",
               o.single ? "vs 1 proc" : "", "(min s)", masked ? "  GFLOP/s/rank (visible)" : "");
        for (int ci = 0; ci < 6; ci++) {
            const result *R = &res[ci];
            printf("%-9s %-7s %10.3f %8.3fx %8.3fx", dfa__sched_name(R->kind), R->overlap ? "on" : "off", R->makespan,
                   res[ci % 2].makespan / R->makespan, res[2 + ci % 2].makespan / R->makespan);
            if (o.single) printf(" %9.3fx", single / R->makespan);
            else printf(" %10s", "");
            printf(" %9.3f", R->best);
            if (masked) printf("  %10.2f", 3.5 * vis_fwd / P / R->makespan / 1e9);
            printf("\n");
        }
        if (masked && o.single)
            printf("scaling efficiency (vs 1 proc / %d ranks), ours overlap on: %.3f\n", P,
                   single / (P * res[4].makespan));
        if (masked) printf("\n(masked plans: the simulator, which models the unmasked schedules, is left out)\n");
        for (int ci = 0; ci < 6 && masked; ci++) {
            const result *R = &res[ci];
            if (!(o.detail || (R->overlap && R->kind != DFA__SCHED_PAPER))) continue;
            printf("\n%s, overlap %s: fwd+bwd %.3f s\n", dfa__sched_name(R->kind), R->overlap ? "on" : "off", R->makespan);
            print_steps("fwd", R->fwd, P, o.threads);
            print_steps("bwd", R->bwd, P, o.threads);
        }
        for (int ci = 0; ci < 6 && !masked; ci++) {
            const result *R = &res[ci];
            const int show = o.detail || (R->overlap && R->kind != DFA__SCHED_PAPER);
            /* the simulator with this run's measured FLOP rate (per pass) and the given link */
            const dfa__sched s = {R->kind, P, o.causal, n, NULL};
            double cf = 0.0, cb = 0.0;
            for (int p = 0; p < P; p++) {
                cf += R->fwd[p].compute_total;
                cb += R->bwd[p].compute_total;
            }
            dfa__sim_model mf = {0, R->overlap, schedule_flops(&s, &sh, 0, -1) / cf, o.bandwidth, o.latency, sh, NULL,
                                NULL, 0, 0, 0.0, 0.0};
            dfa__sim_model mb = mf;
            mb.bwd = 1;
            mb.flops = schedule_flops(&s, &sh, 1, -1) / cb;
            dfa__sim_result rf, rb, qf, qb;
            const int simok = dfa__sim_run(&s, &mf, &rf) == 0 && dfa__sim_run(&s, &mb, &rb) == 0;
            /* again with each rank's own measured rate (cores differ, and other programs slow some) */
            double *rate_f = malloc(sizeof(double) * (size_t)P), *rate_b = malloc(sizeof(double) * (size_t)P);
            for (int p = 0; p < P; p++) {
                const double ff = schedule_flops(&s, &sh, 0, p), fb = schedule_flops(&s, &sh, 1, p);
                rate_f[p] = ff > 0 && R->fwd[p].compute_total > 0 ? ff / R->fwd[p].compute_total : mf.flops;
                rate_b[p] = fb > 0 && R->bwd[p].compute_total > 0 ? fb / R->bwd[p].compute_total : mb.flops;
            }
            dfa__sim_model pf = mf, pb = mb;
            pf.rank_flops = rate_f;
            pb.rank_flops = rate_b;
            const int simok2 = simok && dfa__sim_run(&s, &pf, &qf) == 0 && dfa__sim_run(&s, &pb, &qb) == 0;
            printf("\n%s, overlap %s: fwd+bwd %.3f s; measured rate %.1f GFLOP/s fwd, %.1f bwd per rank\n",
                   dfa__sched_name(R->kind), R->overlap ? "on" : "off", R->makespan, mf.flops / 1e9, mb.flops / 1e9);
            if (show) {
                print_steps("fwd", R->fwd, P, o.threads);
                print_steps("bwd", R->bwd, P, o.threads);
            }
            printf("    idle (fwd+bwd)  measured            simulated, one rate     simulated, each rank's rate\n");
            for (int p = 0; p < P && simok2; p++) {
                const double wall = R->fwd[p].wall + R->bwd[p].wall;
                const double idle = wall - R->fwd[p].compute_total - R->bwd[p].compute_total;
                const double s1 = rf.makespan - rf.compute[p] + rb.makespan - rb.compute[p];
                const double s2 = qf.makespan - qf.compute[p] + qb.makespan - qb.compute[p];
                printf("    R%-4d          %7.3f s (%5.1f%%)   %7.3f s (%5.1f%%)       %7.3f s (%5.1f%%)\n", p, idle,
                       100 * idle / wall, s1, 100 * s1 / (rf.makespan + rb.makespan), s2,
                       100 * s2 / (qf.makespan + qb.makespan));
            }
            if (simok2) {
                printf("    makespan        measured %.3f s   predicted %.3f s         predicted %.3f s\n", R->makespan,
                       rf.makespan + rb.makespan, qf.makespan + qb.makespan);
                dfa__sim_free(&rf);
                dfa__sim_free(&rb);
                dfa__sim_free(&qf);
                dfa__sim_free(&qb);
            } else {
                printf("    (the simulator failed)\n");
            }
            free(rate_f);
            free(rate_b);
        }
        for (int ci = 0; ci < 6; ci++) {
            free(res[ci].fwd);
            free(res[ci].bwd);
        }
    }
    free(ms);
    free(recs);
    free(q); free(k); free(v); free(dout); free(out); free(dq); free(dk); free(dv); free(lse);
    free(ids);
    free(lids);
    dfa_comm_destroy(c);
    MPI_Finalize();
    return 0;
}
#endif
