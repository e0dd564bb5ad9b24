/* `distflash simulate`: a sequence-parallel schedule as a table (steps x ranks), its check
 * (every causal pair once, every receive matched), and the predicted makespans of the ring,
 * the paper's balanced schedule and ours under a unit model and a compute/bandwidth model,
 * or a calibrated machine (--machine: kernel rate per block shape, the executor's
 * element-wise passes, two-level network). --calibration compares the calibrated model with
 * the 2-GPU runs it was fitted to; --predict prints the scaling table (P x S, with error bars).
 * Pure arithmetic: no MPI, no kernels. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_values.h"
#include "commands.h"
#include "common/dtype.h"
#include "seqpar/schedule.h"
#include "sim/simulate.h"

#define MAX_LIST 16

typedef struct {
    int p_lo, p_hi, table, messages, causal, overlap;
    dfa__sched_kind show;
    int rows;
    dfa__sim_model m; /* bwd is set per pass */
    const char *dtype;
    const dfa__sim_machine *machine; /* --machine, or NULL */
    int64_t seqlen;                  /* --seqlen: total tokens (rows = seqlen / P), 0 = --rows */
    int calibration, predict;        /* the two report modes */
    int nranks_list, ranks_list[MAX_LIST];
    int nseq_list;
    int64_t seq_list[MAX_LIST];
    const char *tsv;                 /* --tsv FILE: the --predict rows for plotting */
    /* overrides of the machine's network (0: keep) */
    int gpus_per_node;
    double bandwidth, latency, inter_bandwidth, inter_latency;
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
            "  --messages           also list each step's messages\n\n"
            "calibrated machines (constants and their sources in cli/sim/sim_machine.c):\n"
            "  --machine NAME       h200-nvlink: 2 x H200 on NVLink, fitted (kernel rate per block shape and\n"
            "                       chunk length, element-wise passes of the executor, NCCL 306 GB/s);\n"
            "                       h200-cluster: the same kernels in nodes of 8 on NVSwitch (370 GB/s assumed)\n"
            "                       with 400 Gb/s (45 GB/s achieved, assumed) per GPU between nodes.\n"
            "                       Replaces --flops; --bandwidth/--latency then override the intra-node link\n"
            "  --gpus-per-node G    ranks r, q share a node iff r/G == q/G (0: one node)   [machine's]\n"
            "  --inter-bandwidth BW bytes/s per GPU and direction between nodes            [machine's]\n"
            "  --inter-latency L    seconds per message between nodes                      [machine's]\n"
            "  --seqlen S           total tokens (rows per rank = S / P; k and M suffixes)\n"
            "  --calibration        the machine (default h200-nvlink) against every measured 2-GPU run\n"
            "                       (fwd, bwd, f+b; ring and balanced; overlap on/off): error in %%\n"
            "  --predict            the scaling table (default machine h200-cluster): for each P of --ranks\n"
            "                       (a list, default 1,2,4,8,16,32,64) and S of --seqlens (default\n"
            "                       128k,512k,1M): fwd+bwd time and scaling efficiency against one GPU of\n"
            "                       flat ring, flat balanced and two-level (heads split across nodes by an\n"
            "                       all-to-all, balanced inside each node), each [low, high]: the machine's\n"
            "                       low/high kernel rates and link figures, widened by the calibration's\n"
            "                       largest error\n"
            "  --seqlens LIST       for --predict (k and M suffixes: 128k,512k,1M)\n"
            "  --tsv FILE           with --predict: also write its rows as tab-separated values\n");
}

/* "128k", "1M", "4096": tokens. 0 on success. */
static int parse_tokens(const char *v, int64_t *out) {
    char *end;
    const long long x = strtoll(v, &end, 10);
    long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'm' || *end == 'M') mul = 1024 * 1024, end++;
    if (*end || x < 1 || x > (1LL << 40) / mul) return -1;
    *out = x * mul;
    return 0;
}

/* A comma-separated list through one of the parsers above; the count or -1. */
static int parse_list(const char *v, int64_t *out, int max) {
    char buf[256];
    if (strlen(v) >= sizeof buf) return -1;
    strcpy(buf, v);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || parse_tokens(tok, &out[n])) return -1;
        n++;
    }
    return n ? n : -1;
}

static int parse(int argc, char **argv, sim_opts *o) {
    memset(o, 0, sizeof *o);
    o->causal = o->overlap = 1;
    o->show = DFA__SCHED_BALANCED;
    o->rows = 4096;
    o->m = (dfa__sim_model){0, 1, 4e14, 3e11, 1e-5, {1, 32, 8, 128, 2}, NULL, NULL, 0, 0, 0.0, 0.0};
    o->dtype = "bf16";
    o->gpus_per_node = -1;
    const char *machine = NULL;
    int heads_set = 0;
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
            o->nranks_list = 0;
            if (*end == ',') { /* a list (for --predict) */
                int64_t l[MAX_LIST];
                const int c = parse_list(v, l, MAX_LIST);
                for (int j = 0; j < c; j++) {
                    if (l[j] > 4096) o->nranks_list = -1;
                    if (o->nranks_list >= 0) o->ranks_list[o->nranks_list++] = (int)l[j];
                }
                if (c < 0 || o->nranks_list < 0) {
                    fprintf(stderr, "distflash simulate: --ranks wants P, A-B or a list P1,P2,.. (1..4096)\n");
                    return -1;
                }
                o->p_lo = o->p_hi = o->ranks_list[0];
                end = (char *)"";
            }
            if (*end || o->p_lo < 1 || o->p_hi < o->p_lo || o->p_hi > 4096) {
                fprintf(stderr, "distflash simulate: --ranks wants P, A-B or a list P1,P2,.. (1..4096)\n");
                return -1;
            }
            if (!o->nranks_list)
                for (int P = o->p_lo; P <= o->p_hi && o->nranks_list < MAX_LIST; P++) o->ranks_list[o->nranks_list++] = P;
        } else if (!strcmp(a, "--machine")) {
            NEXT();
            machine = v;
            if (!dfa__sim_machine_preset(v)) {
                fprintf(stderr, "distflash simulate: --machine is one of:");
                for (int j = 0; dfa__sim_machine_names[j]; j++) fprintf(stderr, " %s", dfa__sim_machine_names[j]);
                fprintf(stderr, "\n");
                return -1;
            }
        } else if (!strcmp(a, "--seqlen")) {
            NEXT();
            if (parse_tokens(v, &o->seqlen)) {
                fprintf(stderr, "distflash simulate: --seqlen wants a token count (k, M suffixes)\n");
                return -1;
            }
        } else if (!strcmp(a, "--seqlens")) {
            NEXT();
            if ((o->nseq_list = parse_list(v, o->seq_list, MAX_LIST)) < 0) {
                fprintf(stderr, "distflash simulate: --seqlens wants a list of token counts (128k,512k,1M)\n");
                return -1;
            }
        } else if (!strcmp(a, "--gpus-per-node")) {
            NEXT();
            char *end;
            const long g = strtol(v, &end, 10);
            if (*end || g < 0 || g > 4096) {
                fprintf(stderr, "distflash simulate: --gpus-per-node must be 0..4096\n");
                return -1;
            }
            o->gpus_per_node = (int)g;
        } else if (!strcmp(a, "--inter-bandwidth") || !strcmp(a, "--inter-latency")) {
            NEXT();
            const double x = strtod(v, NULL);
            if (!(x > 0.0) && !(x == 0.0 && !strcmp(a, "--inter-latency"))) {
                fprintf(stderr, "distflash simulate: %s must be > 0\n", a);
                return -1;
            }
            if (!strcmp(a, "--inter-bandwidth")) o->inter_bandwidth = x;
            else o->inter_latency = x > 0.0 ? x : -1.0; /* -1: explicitly zero */
        } else if (!strcmp(a, "--calibration")) {
            o->calibration = 1;
        } else if (!strcmp(a, "--predict")) {
            o->predict = 1;
        } else if (!strcmp(a, "--tsv")) {
            NEXT();
            o->tsv = v;
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
            else if (!strcmp(a, "--heads")) o->m.shape.heads = x, heads_set |= 1;
            else if (!strcmp(a, "--kv-heads")) o->m.shape.kv_heads = x, heads_set |= 2;
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
            else if (!strcmp(a, "--bandwidth")) o->m.bandwidth = o->bandwidth = x;
            else o->m.latency = x, o->latency = x > 0.0 ? x : -1.0;
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
    if (o->calibration && o->predict) {
        fprintf(stderr, "distflash simulate: --calibration or --predict, not both\n");
        return -1;
    }
    if (!machine && (o->calibration || o->predict)) machine = o->calibration ? "h200-nvlink" : "h200-cluster";
    if ((o->calibration || o->predict) && !(heads_set & 2)) o->m.shape.kv_heads = o->m.shape.heads; /* MHA, as calibrated */
    if (o->predict && !o->nranks_list) {
        static const int dflt[] = {1, 2, 4, 8, 16, 32, 64};
        for (int j = 0; j < 7; j++) o->ranks_list[o->nranks_list++] = dflt[j];
        o->p_lo = o->p_hi = 1;
    }
    if (o->predict && !o->nseq_list) {
        o->seq_list[0] = 128 << 10, o->seq_list[1] = 512 << 10, o->seq_list[2] = 1 << 20;
        o->nseq_list = 3;
    }
    if (!o->p_lo && !o->calibration) {
        usage(stderr);
        return -1;
    }
    if (machine) {
        o->machine = dfa__sim_machine_preset(machine);
        if (o->gpus_per_node < 0) o->gpus_per_node = o->machine->gpus_per_node;
    } else if (o->gpus_per_node < 0) {
        o->gpus_per_node = 0;
    }
    if (o->gpus_per_node > 0 && !o->machine && !(o->inter_bandwidth > 0.0)) {
        fprintf(stderr, "distflash simulate: --gpus-per-node without --machine needs --inter-bandwidth\n");
        return -1;
    }
    if (o->seqlen && !o->predict) {
        if (o->p_lo != o->p_hi || o->seqlen % o->p_lo || o->seqlen / o->p_lo > (1 << 30)) {
            fprintf(stderr, "distflash simulate: --seqlen needs one P that divides it\n");
            return -1;
        }
        o->rows = (int)(o->seqlen / o->p_lo);
    }
    if (o->m.shape.heads % o->m.shape.kv_heads) {
        fprintf(stderr, "distflash simulate: --heads must be a multiple of --kv-heads\n");
        return -1;
    }
    o->m.overlap = o->overlap;
    o->m.gpus_per_node = o->gpus_per_node;
    if (o->inter_bandwidth > 0.0) o->m.inter_bandwidth = o->inter_bandwidth;
    if (o->inter_latency) o->m.inter_latency = o->inter_latency > 0.0 ? o->inter_latency : 0.0;
    return 0;
}

/* The model of a pass: the calibrated machine at (rate bound, link bound) with the
   command line's overrides, or the plain model of --flops/--bandwidth/--latency. */
static dfa__sim_model model_of(const sim_opts *o, int bwd, int rate_bound, int link_bound) {
    dfa__sim_model m = o->m;
    if (o->machine) {
        const dfa__sim_model l = dfa__sim_model_of(o->machine, &o->m.shape, bwd, o->overlap, link_bound);
        m = dfa__sim_model_of(o->machine, &o->m.shape, bwd, o->overlap, rate_bound);
        m.bandwidth = l.bandwidth;
        m.inter_bandwidth = l.inter_bandwidth;
        if (o->bandwidth > 0.0) m.bandwidth = o->bandwidth;
        if (o->latency) m.latency = o->latency > 0.0 ? o->latency : 0.0;
        m.gpus_per_node = o->gpus_per_node;
        if (o->inter_bandwidth > 0.0) m.inter_bandwidth = o->inter_bandwidth;
        if (o->inter_latency) m.inter_latency = o->inter_latency > 0.0 ? o->inter_latency : 0.0;
    }
    m.bwd = bwd;
    return m;
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

/* Makespan of one pass of a schedule with rows per rank under model_of(rate_bound, link_bound). */
static double pass_seconds(const sim_opts *o, dfa__sched_kind kind, int P, int rows, int bwd, int rate_bound,
                           int link_bound, double *work) {
    const dfa__sched s = {kind, P, o->causal, rows, NULL};
    const dfa__sim_model m = model_of(o, bwd, rate_bound, link_bound);
    dfa__sim_result r;
    if (dfa__sim_run(&s, &m, &r)) return -1.0;
    const double t = r.makespan;
    if (work) *work += r.total_work;
    dfa__sim_free(&r);
    return t;
}

static sim_line simulate(const sim_opts *o, dfa__sched_kind kind, int P, char *err, size_t errlen) {
    sim_line L = {0};
    const dfa__sched s = {kind, P, o->causal, o->rows, NULL};
    L.ok = dfa__sim_check(&s, 0, err, errlen) == 0 && dfa__sim_check(&s, 1, err, errlen) == 0;
    dfa__sim_result r;
    dfa__sim_model unit = o->m;
    unit.flops = 0.0;
    unit.machine = NULL;
    unit.gpus_per_node = 0;
    /* the unit model on a long chunk, so that a diagonal block is half a block */
    const dfa__sched su = {kind, P, o->causal, 1 << 20, NULL};
    if (dfa__sim_run(&su, &unit, &r) == 0) {
        L.unit = r.makespan;
        L.unit_idle = r.idle_fraction;
        L.steps = r.steps;
        dfa__sim_free(&r);
    }
    double work = 0.0;
    L.fwd = pass_seconds(o, kind, P, o->rows, 0, 0, 0, &work);
    L.bwd = pass_seconds(o, kind, P, o->rows, 1, 0, 0, &work);
    L.idle = 1.0 - work / (P * (L.fwd + L.bwd));
    return L;
}

/* One process on the whole sequence: all the FLOPs on one rank, no messages (the calibrated
   machine: its measured single-GPU rates). */
static double one_process_at(const sim_opts *o, int64_t N, int bwd, int bound) {
    if (o->machine && o->causal) return dfa__sim_whole_seconds(o->machine, &o->m.shape, N, bwd, bound);
    const double pairs = o->causal ? (double)N * (N + 1) / 2 : (double)N * N;
    const double f = 4.0 * o->m.shape.batch * o->m.shape.heads * o->m.shape.head_dim * pairs;
    return (bwd ? 2.5 * f : f) / o->m.flops;
}

static double one_process(const sim_opts *o, int P, int bwd) { return one_process_at(o, (int64_t)P * o->rows, bwd, 0); }

/* --calibration: the machine against every measured 2-GPU run. Returns the largest |error|. */
static double calibration(const sim_opts *o, int print) {
    double worst = 0.0;
    if (print) {
        printf("\ncalibration: machine %s against the 2-GPU medians it was fitted to\n", o->machine->name);
        printf("%8s %-9s %-7s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %6s %6s\n", "S", "schedule", "overlap",
               "fwd ms", "model", "err%", "bwd ms", "model", "err%", "f+b ms", "model", "err%", "eff", "model");
    }
    int64_t last_S = 0;
    for (int i = 0; i < dfa__sim_measured_2gpu_count; i++) {
        const dfa__sim_measured *x = &dfa__sim_measured_2gpu[i];
        sim_opts c = *o;
        c.overlap = x->overlap;
        c.causal = 1;
        const int rows = x->seqlen / 2;
        if (x->seqlen != last_S) { /* the single-GPU line of this S */
            last_S = x->seqlen;
            const double f1 = one_process_at(&c, x->seqlen, 0, 0), b1 = one_process_at(&c, x->seqlen, 1, 0);
            const double e[3] = {f1 / x->single_fwd_s - 1, b1 / (x->single_fb_s - x->single_fwd_s) - 1,
                                 (f1 + b1) / x->single_fb_s - 1};
            if (print)
                printf("%8d %-9s %-7s | %8.2f %8.2f %+6.1f | %8.2f %8.2f %+6.1f | %8.2f %8.2f %+6.1f |\n", x->seqlen,
                       "1 GPU", "-", 1e3 * x->single_fwd_s, 1e3 * f1, 100 * e[0],
                       1e3 * (x->single_fb_s - x->single_fwd_s), 1e3 * b1, 100 * e[1], 1e3 * x->single_fb_s,
                       1e3 * (f1 + b1), 100 * e[2]);
        }
        const double f = pass_seconds(&c, x->kind, 2, rows, 0, 0, 0, NULL);
        const double b = pass_seconds(&c, x->kind, 2, rows, 1, 0, 0, NULL);
        const double mb = x->fb_s - x->fwd_s;
        const double e[3] = {f / x->fwd_s - 1, b / mb - 1, (f + b) / x->fb_s - 1};
        for (int k = 0; k < 3; k++) worst = fmax(worst, fabs(e[k]));
        if (print)
            printf("%8d %-9s %-7s | %8.2f %8.2f %+6.1f | %8.2f %8.2f %+6.1f | %8.2f %8.2f %+6.1f | %6.3f %6.3f\n",
                   x->seqlen, dfa__sched_name(x->kind), x->overlap ? "on" : "off", 1e3 * x->fwd_s, 1e3 * f, 100 * e[0],
                   1e3 * mb, 1e3 * b, 100 * e[1], 1e3 * x->fb_s, 1e3 * (f + b), 100 * e[2],
                   x->single_fb_s / (2 * x->fb_s), (one_process_at(&c, x->seqlen, 0, 0) +
                                                    one_process_at(&c, x->seqlen, 1, 0)) / (2 * (f + b)));
    }
    if (print)
        printf("\nlargest |error| over the distributed runs: %.1f%% (err%% = model / measured - 1; eff = T1 / (2 T2))\n",
               100 * worst);
    return worst;
}

/* The schedules --predict compares: flat ring, flat balanced, two-level (heads across nodes). */
enum { PR_RING, PR_BALANCED, PR_TWO_LEVEL, PR_N };
static const char *const pr_names[PR_N] = {"ring", "balanced", "heads x balanced"};

/* fwd+bwd seconds of one of them at (rate bound, link bound); < 0 where it does not apply. */
static double predict_one(const sim_opts *o, int which, int P, int64_t S, int rb, int lb) {
    if (S % P) return -1.0;
    const int rows = (int)(S / P);
    if (which != PR_TWO_LEVEL) {
        const dfa__sched_kind k = which == PR_RING ? DFA__SCHED_RING : DFA__SCHED_BALANCED;
        const double f = pass_seconds(o, k, P, rows, 0, rb, lb, NULL), b = pass_seconds(o, k, P, rows, 1, rb, lb, NULL);
        return f < 0 || b < 0 ? -1.0 : f + b;
    }
    const int G = o->gpus_per_node;
    if (G < 1 || P <= G || P % G) return -1.0;
    double t = 0.0;
    for (int bwd = 0; bwd <= 1; bwd++) {
        const dfa__sim_model m = model_of(o, bwd, rb, lb);
        double x;
        if (dfa__sim_two_level(DFA__SCHED_BALANCED, P / G, rows, o->causal, &m, &x)) return -1.0;
        t += x;
    }
    return t;
}

static int predict(const sim_opts *o) {
    /* the residual of the preset that was calibrated (the 2-GPU machine, its own link) */
    sim_opts co = *o;
    co.machine = dfa__sim_machine_preset("h200-nvlink");
    co.gpus_per_node = co.machine->gpus_per_node;
    co.bandwidth = co.latency = co.inter_bandwidth = co.inter_latency = 0.0;
    co.m.shape = (dfa__msg_shape){1, 32, 32, 128, 2};
    const double resid = calibration(&co, 0);
    FILE *tsv = NULL;
    if (o->tsv && !(tsv = fopen(o->tsv, "w"))) {
        fprintf(stderr, "distflash simulate: cannot write %s\n", o->tsv);
        return 2;
    }
    if (tsv) fprintf(tsv, "S\tP\tschedule\tfb_ms\tfb_lo_ms\tfb_hi_ms\teff\teff_lo\teff_hi\n");
    printf("\npredictions, fwd+bwd (%s, overlap %s); [low, high] = the machine's low/high kernel rates x low/high "
           "links, widened by the calibration's largest error (%.1f%%); efficiency = T1 / (P TP), T1 the single-GPU "
           "call on the whole sequence (beyond 256k extrapolated)\n",
           o->causal ? "causal" : "non-causal", o->overlap ? "on" : "off", 100 * resid);
    printf("\n%8s %4s  %-16s | %10s  %-21s | %6s  %-15s | %8s\n", "S", "P", "schedule", "f+b ms", "[low, high]", "eff",
           "[low, high]", "idle ms");
    for (int si = 0; si < o->nseq_list; si++)
        for (int pi = 0; pi < o->nranks_list; pi++) {
            const int P = o->ranks_list[pi];
            const int64_t S = o->seq_list[si];
            for (int w = 0; w < PR_N; w++) {
                if (P == 1 && w != PR_BALANCED) continue;
                if (P == 1) { /* the baseline itself: the single-GPU call on the whole sequence */
                    const double t1 = one_process_at(o, S, 0, 0) + one_process_at(o, S, 1, 0);
                    const double lo = one_process_at(o, S, 0, 1) + one_process_at(o, S, 1, 1);
                    const double hi = one_process_at(o, S, 0, -1) + one_process_at(o, S, 1, -1);
                    char sl[64];
                    snprintf(sl, sizeof sl, "[%.1f, %.1f]", 1e3 * lo, 1e3 * hi);
                    printf("%8lld %4d  %-16s | %10.1f  %-21s | %6.3f  %-15s | %8.1f\n", (long long)S, 1, "1 GPU", 1e3 * t1,
                           sl, 1.0, "", 0.0);
                    if (tsv)
                        fprintf(tsv, "%lld\t1\t1 GPU\t%.4f\t%.4f\t%.4f\t1\t1\t1\n", (long long)S, 1e3 * t1, 1e3 * lo,
                                1e3 * hi);
                    continue;
                }
                const double t = predict_one(o, w, P, S, 0, 0);
                if (t < 0) continue;
                double tlo = t, thi = t, elo = 1e30, ehi = 0.0;
                const double t1 = one_process_at(o, S, 0, 0) + one_process_at(o, S, 1, 0);
                for (int rb = -1; rb <= 1; rb += 2)
                    for (int lb = -1; lb <= 1; lb += 2) {
                        const double x = predict_one(o, w, P, S, rb, lb);
                        const double x1 = one_process_at(o, S, 0, rb) + one_process_at(o, S, 1, rb);
                        tlo = fmin(tlo, x);
                        thi = fmax(thi, x);
                        elo = fmin(elo, x1 / (P * x));
                        ehi = fmax(ehi, x1 / (P * x));
                    }
                tlo *= 1 - resid, thi *= 1 + resid, elo *= 1 - resid, ehi *= 1 + resid;
                const double eff = t1 / (P * t);
                char sl[64], el[48];
                snprintf(sl, sizeof sl, "[%.1f, %.1f]", 1e3 * tlo, 1e3 * thi);
                snprintf(el, sizeof el, "[%.3f, %.3f]", elo, ehi);
                printf("%8lld %4d  %-16s | %10.1f  %-21s | %6.3f  %-15s | %8.1f\n", (long long)S, P, pr_names[w],
                       1e3 * t, sl, eff, el, 1e3 * (t - t1 / P));
                if (tsv)
                    fprintf(tsv, "%lld\t%d\t%s\t%.4f\t%.4f\t%.4f\t%.5f\t%.5f\t%.5f\n", (long long)S, P, pr_names[w],
                            1e3 * t, 1e3 * tlo, 1e3 * thi, eff, elo, ehi);
            }
        }
    printf("\nidle ms = f+b - T1/P: the time lost against a perfect split of the single-GPU call.\n");
    if (tsv) fclose(tsv);
    return 0;
}

static void print_model(const sim_opts *o) {
    if (!o->machine) {
        printf("model: %d rows/rank, batch %d, %d heads (%d kv), head_dim %d, %s; %.3g FLOP/s per rank, "
               "%.3g B/s per link direction, %.3g s latency; %s, overlap %s",
               o->rows, o->m.shape.batch, o->m.shape.heads, o->m.shape.kv_heads, o->m.shape.head_dim, o->dtype, o->m.flops,
               o->m.bandwidth, o->m.latency, o->causal ? "causal" : "non-causal", o->overlap ? "on" : "off");
        if (o->gpus_per_node > 0)
            printf("; %d ranks per node, %.3g B/s and %.3g s between nodes", o->gpus_per_node, o->m.inter_bandwidth,
                   o->m.inter_latency);
        printf("\n");
        return;
    }
    const dfa__sim_model m = model_of(o, 0, 0, 0);
    printf("model: machine %s (%s)\n", o->machine->name, o->machine->about);
    if (!o->calibration && !o->predict) printf("       %d rows/rank, ", o->rows);
    else printf("       ");
    printf("batch %d, %d heads (%d kv), head_dim %d, %s, %s, overlap %s; kernels per block shape and chunk "
           "length; element-wise passes at %.3g B/s + %.0f us each, %.0f us per call;\n"
           "       inside a node %.3g B/s per direction (low %.3g, high %.3g), %.0f us per message",
           o->m.shape.batch, o->m.shape.heads, o->m.shape.kv_heads, o->m.shape.head_dim, o->dtype,
           o->causal ? "causal" : "non-causal", o->overlap ? "on" : "off", o->machine->hbm, 1e6 * o->machine->launch,
           1e6 * o->machine->call, m.bandwidth, o->machine->intra_bw[1], o->machine->intra_bw[2], 1e6 * m.latency);
    if (m.gpus_per_node > 0)
        printf(";\n       %d GPUs per node; between nodes %.3g B/s per GPU and direction (low %.3g, high %.3g), "
               "%.0f us per message",
               m.gpus_per_node, m.inter_bandwidth, o->machine->inter_bw[1], o->machine->inter_bw[2],
               1e6 * m.inter_latency);
    printf("\n");
}

int cmd_simulate(int argc, char **argv) {
    sim_opts o;
    const int rc = parse(argc, argv, &o);
    if (rc) return rc > 0 ? 0 : 2;
    char err[256];
    print_model(&o);
    if (o.calibration) {
        calibration(&o, 1);
        return 0;
    }
    if (o.predict) return predict(&o);
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
        printf("\n%-16s %5s %7s %7s %10s %10s %10s %7s %8s %8s\n", "schedule", "steps", "units", "idle", "fwd ms",
               "bwd ms", "f+b ms", "idle", "vs ring", "vs 1 rank");
        sim_line ring = {0};
        const double single = one_process(&o, P, 0) + one_process(&o, P, 1);
        for (int i = 0; i < 3; i++) {
            const sim_line L = simulate(&o, all_kinds[i], P, err, sizeof err);
            if (i == 0) ring = L;
            printf("%-16s %5d %7.2f %6.1f%% %10.3f %10.3f %10.3f %6.1f%% %7.3fx %7.2fx  %s\n",
                   dfa__sched_name(all_kinds[i]), L.steps, L.unit, 100 * L.unit_idle, 1e3 * L.fwd, 1e3 * L.bwd,
                   1e3 * (L.fwd + L.bwd), 100 * L.idle, (ring.fwd + ring.bwd) / (L.fwd + L.bwd),
                   single / (L.fwd + L.bwd), L.ok ? "check: ok" : err);
            all_ok &= L.ok;
        }
        const int G = o.gpus_per_node;
        if (G > 0 && P > G && P % G == 0 && o.m.shape.heads % (P / G) == 0 && o.m.shape.kv_heads % (P / G) == 0) {
            double t[2];
            for (int bwd = 0; bwd <= 1; bwd++) {
                const dfa__sim_model m = model_of(&o, bwd, 0, 0);
                if (dfa__sim_two_level(DFA__SCHED_BALANCED, P / G, o.rows, o.causal, &m, &t[bwd])) t[bwd] = NAN;
            }
            printf("%-16s %5s %7s %7s %10.3f %10.3f %10.3f %7s %7.3fx %7.2fx  (%d nodes x %d heads, balanced inside)\n",
                   "heads x balanced", "-", "-", "-", 1e3 * t[0], 1e3 * t[1], 1e3 * (t[0] + t[1]), "-",
                   (ring.fwd + ring.bwd) / (t[0] + t[1]), single / (t[0] + t[1]), P / G, o.m.shape.heads / (P / G));
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
