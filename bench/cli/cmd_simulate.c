/* `distflash simulate`: a sequence-parallel schedule as a table (steps x ranks), its check
 * (every causal pair once, every receive matched), and the predicted makespans of the ring,
 * the paper's balanced schedule and ours under a unit model and a compute/bandwidth model.
 * Pure arithmetic: no MPI, no kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_values.h"
#include "commands.h"
#include "common/dtype.h"
#include "seqpar/schedule.h"
#include "seqpar/simulate.h"

typedef struct {
    int p_lo, p_hi, table, messages, causal, overlap;
    dfa__sched_kind show;
    int rows;
    dfa__sim_model m; /* bwd is set per pass */
    const char *dtype;
} sim_opts;

static const dfa__sched_kind all_kinds[3] = {DFA__SCHED_RING, DFA__SCHED_PAPER, DFA__SCHED_BALANCED};

static void usage(FILE *f) {
    fprintf(f,
            "usage: distflash simulate --ranks P [options]\n"
            "       distflash simulate --ranks A-B          (one summary line per P)\n\n"
            "Prints the schedule as a table (steps x ranks; up to 16 ranks unless --table), checks it\n"
            "(every causal (q chunk, k chunk) pair computed exactly once for every query row, every\n"
            "receive matched by a send at the same step) and predicts the makespan of the ring, the\n"
            "paper's balanced schedule and ours (DFA_SCHEDULE_BALANCED) under:\n"
            "  the unit model   : a full chunk-by-chunk block costs 1, a diagonal block 1/2, messages free;\n"
            "  the machine model: FLOPs / --flops per block, a message done when both ends have posted it\n"
            "                     plus --latency plus bytes / --bandwidth (a rank's link shared by its\n"
            "                     messages of the step), overlapped with the step's compute unless --no-overlap.\n\n"
            "options (defaults: one H200 per rank, LLaMA-7B-like GQA attention layer):\n"
            "  --ranks P | A-B      ranks (1..4096)\n"
            "  --schedule S         table of: balanced (default), paper, ring\n"
            "  --rows N             local rows (tokens) per rank           [4096]\n"
            "  --batch B --heads H --kv-heads K --head-dim D                [1, 32, 8, 128]\n"
            "  --dtype bf16|f16|f32 storage type of the messages           [bf16]\n"
            "  --flops F            FLOP/s per rank                        [4e14]\n"
            "  --bandwidth BW       bytes/s per rank and direction         [3e11]\n"
            "  --latency L          seconds per message                    [1e-5]\n"
            "  --non-causal         full attention (every schedule is then the ring)\n"
            "  --no-overlap         wait for messages before computing\n"
            "  --table              print the table for any P\n"
            "  --messages           also list each step's messages\n");
}

static int parse(int argc, char **argv, sim_opts *o) {
    *o = (sim_opts){0, 0, 0, 0, 1, 1, DFA__SCHED_BALANCED, 4096, {0, 1, 4e14, 3e11, 1e-5, {1, 32, 8, 128, 2}, NULL}, "bf16"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT()                                                                                                     \
    do {                                                                                                           \
        if (!v) {                                                                                                  \
            fprintf(stderr, "distflash simulate: %s needs a value\n", a);                                          \
            return -1;                                                                                             \
        }                                                                                                          \
        i++;                                                                                                       \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--ranks")) {
            NEXT();
            char *end;
            o->p_lo = (int)strtol(v, &end, 10);
            o->p_hi = *end == '-' ? (int)strtol(end + 1, &end, 10) : o->p_lo;
            if (*end || o->p_lo < 1 || o->p_hi < o->p_lo || o->p_hi > 4096) {
                fprintf(stderr, "distflash simulate: --ranks wants P or A-B with 1 <= A <= B <= 4096\n");
                return -1;
            }
        } else if (!strcmp(a, "--schedule")) {
            NEXT();
            if (!strcmp(v, "balanced")) o->show = DFA__SCHED_BALANCED;
            else if (!strcmp(v, "paper")) o->show = DFA__SCHED_PAPER;
            else if (!strcmp(v, "ring")) o->show = DFA__SCHED_RING;
            else {
                fprintf(stderr, "distflash simulate: --schedule is balanced, paper or ring\n");
                return -1;
            }
        } else if (!strcmp(a, "--rows") || !strcmp(a, "--batch") || !strcmp(a, "--heads") ||
                   !strcmp(a, "--kv-heads") || !strcmp(a, "--head-dim")) {
            NEXT();
            const int x = atoi(v);
            if (x < 1) {
                fprintf(stderr, "distflash simulate: %s must be >= 1\n", a);
                return -1;
            }
            if (!strcmp(a, "--rows")) o->rows = x;
            else if (!strcmp(a, "--batch")) o->m.shape.batch = x;
            else if (!strcmp(a, "--heads")) o->m.shape.heads = x;
            else if (!strcmp(a, "--kv-heads")) o->m.shape.kv_heads = x;
            else o->m.shape.head_dim = x;
        } else if (!strcmp(a, "--dtype")) {
            NEXT();
            dfa_dtype t;
            if (cli_dtype(v, &t)) {
                fprintf(stderr, "distflash simulate: --dtype is bf16, f16 or f32\n");
                return -1;
            }
            o->m.shape.elem = dfa__dtype_size(t);
            o->dtype = v;
        } else if (!strcmp(a, "--flops") || !strcmp(a, "--bandwidth") || !strcmp(a, "--latency")) {
            NEXT();
            const double x = strtod(v, NULL);
            if (!(x > 0.0) && !(x == 0.0 && !strcmp(a, "--latency"))) {
                fprintf(stderr, "distflash simulate: %s must be > 0\n", a);
                return -1;
            }
            if (!strcmp(a, "--flops")) o->m.flops = x;
            else if (!strcmp(a, "--bandwidth")) o->m.bandwidth = x;
            else o->m.latency = x;
        } else if (!strcmp(a, "--non-causal")) {
            o->causal = 0;
        } else if (!strcmp(a, "--no-overlap")) {
            o->overlap = 0;
        } else if (!strcmp(a, "--table")) {
            o->table = 1;
        } else if (!strcmp(a, "--messages")) {
            o->messages = 1;
        } else {
            fprintf(stderr, "distflash simulate: unknown option %s\n\n", a);
            usage(stderr);
            return -1;
        }
#undef NEXT
    }
    if (!o->p_lo) {
        usage(stderr);
        return -1;
    }
    if (o->m.shape.heads % o->m.shape.kv_heads) {
        fprintf(stderr, "distflash simulate: --heads must be a multiple of --kv-heads\n");
        return -1;
    }
    o->m.overlap = o->overlap;
    return 0;
}

/* "q3·k1", with the row window when it is not the whole chunk, "diag" on a masked block
   and "help" when the rank computes another rank's queries. */
static void cell(char *buf, size_t len, const dfa__sched *s, int rank, int step) {
    dfa__task t;
    if (!dfa__sched_task(s, rank, step, &t)) {
        snprintf(buf, len, "idle");
        return;
    }
    char rows[48] = "";
    if (t.row0 != 0 || t.row1 != s->rows) snprintf(rows, sizeof rows, "[%d:%d]", t.row0, t.row1);
    snprintf(buf, len, "q%d%s\xc2\xb7k%d%s%s", t.q_chunk, rows, t.k_chunk, t.causal_mask ? " diag" : "",
             t.q_chunk != rank ? " help" : "");
}

/* Display width of a UTF-8 string (the middle dot is one column). */
static int width(const char *s) {
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

static void print_table(const dfa__sched *s) {
    const int P = s->nranks, T = dfa__sched_steps(s);
    char buf[96];
    int w = 4;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < P; r++) {
            cell(buf, sizeof buf, s, r, t);
            if (width(buf) > w) w = width(buf);
        }
    printf("| step |");
    for (int r = 0; r < P; r++) printf(" R%-*d |", w - 1, r);
    printf("\n|------|");
    for (int r = 0; r < P; r++) {
        for (int i = 0; i < w + 2; i++) putchar('-');
        putchar('|');
    }
    printf("\n");
    for (int t = 0; t < T; t++) {
        printf("| %4d |", t);
        for (int r = 0; r < P; r++) {
            cell(buf, sizeof buf, s, r, t);
            printf(" %s%*s |", buf, w - width(buf), "");
        }
        printf("\n");
    }
}

static const char *kind_label(dfa__msg_kind k, int bwd) {
    switch (k) {
    case DFA__MSG_KV: return "k,v";
    case DFA__MSG_QUERY: return bwd ? "q,o,dout,lse" : "q";
    case DFA__MSG_QRESULT: return bwd ? "dq" : "o,lse";
    case DFA__MSG_KVRESULT: return "dk,dv";
    }
    return "?";
}

/* The messages posted at each step: the next step's inputs and the previous step's results. */
static void print_messages(const dfa__sched *s, int bwd) {
    const int P = s->nranks, T = dfa__sched_steps(s), cap = dfa__sched_max_messages(s);
    dfa__msg *m = malloc(sizeof *m * (size_t)cap);
    if (!m) return;
    printf("messages of the %s pass (posted at a step before its compute, waited after it):\n",
           bwd ? "backward" : "forward");
    for (int t = 0; t <= T; t++) {
        printf("  %s %d:", t < T ? "step" : "after step", t < T ? t : T - 1);
        int any = 0;
        for (int g = 0; g < 2; g++) {
            const int of = g == 0 ? t + 1 : t - 1;
            if (of < 0 || of >= T) continue;
            for (int r = 0; r < P; r++) {
                const int n = dfa__sched_messages(s, bwd, r, of, m, cap);
                for (int i = 0; i < n; i++) {
                    if (!m[i].send || dfa__msg_is_input(m[i].kind) != (g == 0)) continue;
                    const dfa__task *k = &m[i].task;
                    char rows[48] = "";
                    if (k->row0 != 0 || k->row1 != s->rows) snprintf(rows, sizeof rows, "[%d:%d]", k->row0, k->row1);
                    if (m[i].kind == DFA__MSG_KV || m[i].kind == DFA__MSG_KVRESULT)
                        printf(" %s of k%d R%d\xe2\x86\x92R%d;", kind_label(m[i].kind, bwd), k->k_chunk, r, m[i].peer);
                    else
                        printf(" %s of q%d%s R%d\xe2\x86\x92R%d;", kind_label(m[i].kind, bwd), k->q_chunk, rows, r,
                               m[i].peer);
                    any = 1;
                }
            }
        }
        printf("%s\n", any ? "" : " none");
    }
    free(m);
}

typedef struct {
    int steps, ok;
    double unit, unit_idle;    /* unit model */
    double fwd, bwd, idle;     /* machine model, seconds; idle of fwd+bwd */
} sim_line;

static sim_line simulate(const sim_opts *o, dfa__sched_kind kind, int P, char *err, size_t errlen) {
    sim_line L = {0};
    const dfa__sched s = {kind, P, o->causal, o->rows, NULL};
    L.ok = dfa__sim_check(&s, 0, err, errlen) == 0 && dfa__sim_check(&s, 1, err, errlen) == 0;
    dfa__sim_result r;
    dfa__sim_model unit = o->m;
    unit.flops = 0.0;
    /* the unit model on a long chunk, so that a diagonal block is half a block */
    const dfa__sched su = {kind, P, o->causal, 1 << 20, NULL};
    if (dfa__sim_run(&su, &unit, &r) == 0) {
        L.unit = r.makespan;
        L.unit_idle = r.idle_fraction;
        L.steps = r.steps;
        dfa__sim_free(&r);
    }
    double work = 0.0;
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa__sim_model m = o->m;
        m.bwd = bwd;
        if (dfa__sim_run(&s, &m, &r) == 0) {
            if (bwd) L.bwd = r.makespan;
            else L.fwd = r.makespan;
            work += r.total_work;
            dfa__sim_free(&r);
        }
    }
    L.idle = 1.0 - work / (P * (L.fwd + L.bwd));
    return L;
}

/* One process on the whole sequence: all the FLOPs on one rank, no messages. */
static double one_process(const sim_opts *o, int P, int bwd) {
    const double N = (double)P * o->rows;
    const double pairs = o->causal ? N * (N + 1) / 2 : N * N;
    const double f = 4.0 * o->m.shape.batch * o->m.shape.heads * o->m.shape.head_dim * pairs;
    return (bwd ? 2.5 * f : f) / o->m.flops;
}

int cmd_simulate(int argc, char **argv) {
    sim_opts o;
    const int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : 2;
    char err[256];
    printf("model: %d rows/rank, batch %d, %d heads (%d kv), head_dim %d, %s; %.3g FLOP/s per rank, "
           "%.3g B/s per link direction, %.3g s latency; %s, overlap %s\n",
           o.rows, o.m.shape.batch, o.m.shape.heads, o.m.shape.kv_heads, o.m.shape.head_dim, o.dtype, o.m.flops,
           o.m.bandwidth, o.m.latency, o.causal ? "causal" : "non-causal", o.overlap ? "on" : "off");
    int all_ok = 1;
    if (o.p_lo == o.p_hi) {
        const int P = o.p_lo;
        const dfa__sched s = {o.show, P, o.causal, o.rows, NULL};
        printf("\n%s schedule, P = %d (R<r> = rank r, which owns chunk r; q<i>[a:b] = rows a..b-1 of chunk i):\n\n",
               dfa__sched_name(o.show), P);
        if (P <= 16 || o.table) print_table(&s);
        else printf("(table omitted for P > 16; --table prints it)\n");
        if (o.messages) {
            printf("\n");
            print_messages(&s, 0);
            print_messages(&s, 1);
        }
        printf("\n%-9s %5s %7s %7s %10s %10s %10s %7s %8s %8s\n", "schedule", "steps", "units", "idle", "fwd ms",
               "bwd ms", "f+b ms", "idle", "vs ring", "vs 1 rank");
        sim_line ring = {0};
        for (int i = 0; i < 3; i++) {
            const sim_line L = simulate(&o, all_kinds[i], P, err, sizeof err);
            if (i == 0) ring = L;
            const double single = one_process(&o, P, 0) + one_process(&o, P, 1);
            printf("%-9s %5d %7.2f %6.1f%% %10.3f %10.3f %10.3f %6.1f%% %7.3fx %7.2fx  %s\n",
                   dfa__sched_name(all_kinds[i]), L.steps, L.unit, 100 * L.unit_idle, 1e3 * L.fwd, 1e3 * L.bwd,
                   1e3 * (L.fwd + L.bwd), 100 * L.idle, (ring.fwd + ring.bwd) / (L.fwd + L.bwd),
                   single / (L.fwd + L.bwd), L.ok ? "check: ok" : err);
            all_ok &= L.ok;
        }
        printf("\nunits: makespan in chunk-by-chunk blocks (ideal P/2 = %.1f when causal); idle: of all rank-time.\n",
               o.causal ? P / 2.0 : (double)P);
        return all_ok ? 0 : 1;
    }
    printf("\n%5s | %-14s | %-20s | %-29s | %-20s | %s\n", "P", "steps r/p/ours", "units r/p/ours",
           "fwd+bwd ms ring/paper/ours", "idle% r/p/ours", "ours vs ring, vs paper");
    for (int P = o.p_lo; P <= o.p_hi; P++) {
        sim_line L[3];
        for (int i = 0; i < 3; i++) {
            L[i] = simulate(&o, all_kinds[i], P, err, sizeof err);
            if (!L[i].ok) {
                printf("P=%d %s: check failed: %s\n", P, dfa__sched_name(all_kinds[i]), err);
                all_ok = 0;
            }
        }
        printf("%5d | %4d %4d %4d | %6.1f %6.1f %6.1f | %9.3f %9.3f %9.3f | %6.1f %6.1f %6.1f | %.3fx %.3fx\n", P,
               L[0].steps, L[1].steps, L[2].steps, L[0].unit, L[1].unit, L[2].unit, 1e3 * (L[0].fwd + L[0].bwd),
               1e3 * (L[1].fwd + L[1].bwd), 1e3 * (L[2].fwd + L[2].bwd), 100 * L[0].idle, 100 * L[1].idle,
               100 * L[2].idle, (L[0].fwd + L[0].bwd) / (L[2].fwd + L[2].bwd),
               (L[1].fwd + L[1].bwd) / (L[2].fwd + L[2].bwd));
    }
    printf("\nall schedules %s the check (every causal pair once per query row, every receive matched)\n",
           all_ok ? "passed" : "did NOT pass");
    return all_ok ? 0 : 1;
}
