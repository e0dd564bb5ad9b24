/* Internal: checking a schedule and predicting its makespan.
 *
 * dfa__sim_check proves a schedule correct for one (kind, P, causal, n):
 * every needed (query chunk, key chunk) pair — k <= q when causal, the
 * diagonal masked — is computed exactly once for every query row, and every
 * message one rank expects has its counterpart on the peer at the same step.
 *
 * dfa__sim_run replays the schedule under a simple machine model, following
 * the executor's timing (schedule.h): at each step a rank posts its messages,
 * computes its task (FLOPs / rate) and waits for the messages; a message
 * completes once both ends have posted it, plus latency plus its bytes over
 * the bandwidth (the bytes a rank sends, or receives, in one step share its
 * link). With overlap off the wait comes before the compute. With
 * flops == 0 the model counts work in full blocks (a diagonal block is about
 * half of one) and communication is free: the schedule's ideal makespan.
 *
 * With a calibrated machine (model.machine, sim_machine.c) a block takes its
 * FLOPs over the measured kernel rate of its shape (diagonal, full, half-rows) at its chunk
 * length, and the executor's element-wise passes take their bytes over the effective HBM
 * bandwidth: the accumulators' fill before the steps, packing query rows that leave (before
 * they can), folding the rank's own partials (inside its block) and received ones (after the
 * step's wait), rounding into the outputs at the end. With gpus_per_node > 0 the network has
 * two levels: messages between nodes take inter_latency and share the rank's inter_bandwidth.
 */
#ifndef DFA_CLI_SIM_SIMULATE_H
#define DFA_CLI_SIM_SIMULATE_H

#include <stddef.h>

#include "seqpar/schedule.h"

/* A calibrated machine (sim_machine.c): the attention kernel's rate per block shape and
   chunk length, the executor's element-wise passes, and a two-level network. */
typedef enum { DFA__BLOCK_DIAG = 0, DFA__BLOCK_FULL = 1, DFA__BLOCK_PART = 2 } dfa__block_shape;

#define DFA__SIM_KNOTS 8
typedef struct {
    int n;              /* chunk rows (the block's key length) */
    double rate[2][3];  /* [bwd][shape] FLOP/s of one block kernel (float32 partial outputs) */
    double err[2][3];   /* its relative uncertainty (half the spread measured, or assumed) */
} dfa__sim_knot;

typedef struct {
    const char *name, *about;
    int nknots;
    dfa__sim_knot knots[DFA__SIM_KNOTS]; /* ascending n; log-linear between, clamped outside */
    int nwhole;
    struct {
        int64_t seqlen;
        double rate[2]; /* FLOP/s of the single-GPU call on the whole causal sequence */
    } whole[DFA__SIM_KNOTS];
    double whole_err;      /* relative uncertainty of the whole-sequence rates (more past the last) */
    double hbm;            /* bytes/s of the executor's element-wise passes (fill, fold, pack, store) */
    double launch;         /* seconds per kernel the executor enqueues */
    double call;           /* seconds per distributed call (host setup, device agreement) */
    int gpus_per_node;     /* ranks r and q share a node iff r / g == q / g */
    double intra_bw[3];    /* bytes/s per GPU and direction inside a node: central, low, high */
    double intra_lat;      /* seconds per message inside a node */
    double inter_bw[3];    /* bytes/s per GPU and direction between nodes: central, low, high */
    double inter_lat;      /* seconds per message between nodes */
} dfa__sim_machine;

/* The presets by name ("h200-nvlink": 2 x H200 on NVLink, fitted to its runs; "h200-cluster": its
   kernels in nodes of 8 on NVSwitch with 400 Gb/s per GPU between nodes, assumed links);
   NULL if unknown. dfa__sim_machine_names lists them, NULL-terminated. */
const dfa__sim_machine *dfa__sim_machine_preset(const char *name);
extern const char *const dfa__sim_machine_names[];

/* The kernel rate of a block (bound -1/0/+1: the low end, the centre, the high end). */
double dfa__sim_block_rate(const dfa__sim_machine *mc, int bwd, dfa__block_shape shape, int n, int bound);

/* Seconds of the single-GPU call on the whole causal sequence of S tokens. */
double dfa__sim_whole_seconds(const dfa__sim_machine *mc, const dfa__msg_shape *sh, int64_t S, int bwd, int bound);

/* The 2-GPU runs the presets were calibrated on (dist-bench medians, sim_machine.c). */
typedef struct {
    int seqlen;                  /* total tokens; 2 ranks */
    dfa__sched_kind kind;        /* ring or balanced */
    int overlap;
    double fwd_s, fb_s;          /* medians */
    double single_fwd_s, single_fb_s;
} dfa__sim_measured;
extern const dfa__sim_measured dfa__sim_measured_2gpu[];
extern const int dfa__sim_measured_2gpu_count;

typedef struct {
    int bwd;           /* the backward pass: 2.5x the forward's FLOPs and its messages */
    int overlap;       /* 1: post, compute, wait; 0: post, wait, compute */
    double flops;      /* FLOP/s per rank; 0 for the unit model */
    double bandwidth;  /* bytes/s per rank per direction (ignored by the unit model) */
    double latency;    /* seconds per message (ignored by the unit model) */
    dfa__msg_shape shape;
    const double *rank_flops; /* optional [nranks] FLOP/s of each rank (replaces flops; e.g. measured) */
    /* Optional, after the fields above (so older initialisers keep their meaning): */
    const dfa__sim_machine *machine; /* calibrated: replaces flops (per block shape) and adds the
                                        executor's element-wise passes; bandwidth/latency stay
                                        the intra-node link, the next four the rest */
    int bound;                       /* -1, 0, +1: the machine's low, central, high figures */
    int gpus_per_node;               /* 0: one node (every message on bandwidth/latency) */
    double inter_bandwidth;          /* bytes/s per rank and direction between nodes */
    double inter_latency;            /* seconds per message between nodes */
} dfa__sim_model;

/* A model from a machine preset: kernels, element-wise passes, both links (at `bound`). */
dfa__sim_model dfa__sim_model_of(const dfa__sim_machine *mc, const dfa__msg_shape *sh, int bwd, int overlap,
                                 int bound);

typedef struct {
    int nranks, steps;
    double makespan;      /* seconds, or block units under the unit model */
    double total_work;    /* compute summed over ranks, same unit */
    double idle_fraction; /* 1 - total_work / (nranks * makespan) */
    double *compute;      /* [nranks] compute per rank */
    double *finish;       /* [nranks] when each rank finishes */
    double *step_compute; /* [steps][nranks] */
    double *step_wait;    /* [steps][nranks] blocked in waits (the last step includes the tail) */
} dfa__sim_result;

/* 0 when the schedule is correct; otherwise -1 and a reason in err. */
int dfa__sim_check(const dfa__sched *s, int bwd, char *err, size_t errlen);

/* The coverage part of the check on an explicit list of tasks (sorted in place), so that
   the checker itself can be tested on broken schedules. */
typedef struct {
    int step, rank;
    dfa__task t;
} dfa__placed_task;
int dfa__sim_check_tasks(const dfa__sched *s, dfa__placed_task *tasks, int n, char *err, size_t errlen);

/* The coverage check of a masked plan (s->plan set; dfa__sim_check uses it for such
   schedules): every chunk pair with visible keys (plan->work > 0) exactly once and no pair
   without: a diagonal whole or as lent rows and the rest; a pair off the diagonal as its visible
   rows, or as pieces that tile them when it is dense (split pairs, schedule.h), with the work of
   the pieces adding up to the pair's. */
int dfa__sim_check_masked_tasks(const dfa__sched *s, dfa__placed_task *tasks, int n, char *err, size_t errlen);

/* Fills *r (allocating its arrays; free with dfa__sim_free). 0 on success, -1 on a bad
   schedule or allocation failure. */
int dfa__sim_run(const dfa__sched *s, const dfa__sim_model *m, dfa__sim_result *r);
void dfa__sim_free(dfa__sim_result *r);

/* Head-parallel across nodes, a schedule inside each node (Ulysses-style): an all-to-all
   over the inter-node links turns each GPU's `rows` tokens x all heads into nodes x rows
   tokens x heads/nodes heads; the inner schedule runs on the node's gpus_per_node ranks;
   the outputs go back by another all-to-all. Forward: q, k, v in, o and lse out; backward:
   dout in (q, k, v, o, lse kept in head layout from the forward), dq, dk, dv out. The
   all-to-alls are not overlapped with compute. heads and kv_heads must divide by nodes.
   Fills *seconds; 0 on success, -1 on a bad shape. */
int dfa__sim_two_level(dfa__sched_kind inner, int nodes, int rows, int causal, const dfa__sim_model *m,
                       double *seconds);

/* FLOPs of a task: 4 * batch * heads * head_dim per visible pair, 2.5x that for the backward. */
double dfa__task_flops(const dfa__task *t, int rows, const dfa__msg_shape *sh, int bwd);

#endif
