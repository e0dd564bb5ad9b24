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
 */
#ifndef DFA_DIST_SIMULATE_H
#define DFA_DIST_SIMULATE_H

#include <stddef.h>

#include "schedule.h"

typedef struct {
    int bwd;           /* the backward pass: 2.5x the forward's FLOPs and its messages */
    int overlap;       /* 1: post, compute, wait; 0: post, wait, compute */
    double flops;      /* FLOP/s per rank; 0 for the unit model */
    double bandwidth;  /* bytes/s per rank per direction (ignored by the unit model) */
    double latency;    /* seconds per message (ignored by the unit model) */
    dfa__msg_shape shape;
    const double *rank_flops; /* optional [nranks] FLOP/s of each rank (replaces flops; e.g. measured) */
} dfa__sim_model;

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
   schedules): every chunk pair with visible keys (plan->work > 0) exactly once, as a whole
   chunk, and no pair without. */
int dfa__sim_check_masked_tasks(const dfa__sched *s, dfa__placed_task *tasks, int n, char *err, size_t errlen);

/* Fills *r (allocating its arrays; free with dfa__sim_free). 0 on success, -1 on a bad
   schedule or allocation failure. */
int dfa__sim_run(const dfa__sched *s, const dfa__sim_model *m, dfa__sim_result *r);
void dfa__sim_free(dfa__sim_result *r);

/* FLOPs of a task: 4 * batch * heads * head_dim per visible pair, 2.5x that for the backward. */
double dfa__task_flops(const dfa__task *t, int rows, const dfa__msg_shape *sh, int bwd);

#endif
