/* Internal: the backend-neutral executor of sequence-parallel attention.
 *
 * It runs a schedule (schedule.h) over a communicator's message table
 * (comm.h) and compute table (compute.h):
 *   1. checks collectively: every rank contributes its own validation status
 *      (NULL pointers, bad sizes, failed allocations) and its descriptor; one
 *      allreduce later every rank knows whether any rank failed and whether
 *      the descriptors agree, so a bad argument on one rank fails all ranks
 *      with the same status instead of leaving the others hanging;
 *   2. runs the steps: post the next step's inputs and the previous step's
 *      results (nonblocking), compute this step's block, wait (overlap = 1);
 *      or post, wait, compute (overlap = 0); after the last step, the last
 *      results. A rank whose block fails keeps exchanging messages so that
 *      no peer hangs, and stops computing;
 *   3. agrees on the outcome (one more allreduce), and only then writes the
 *      caller's outputs from the float32 accumulators, so outputs are
 *      untouched on every rank when any rank failed.
 * Device backends have no closing agreement (step 3 happens on the device, gating the
 * stores): there, once every rank has passed the agreement on the host, the step-0 diagonal
 * writes the rows no other block adds to straight into the outputs (exec_io.c, use_direct),
 * and a rank whose kernels fail midway returns its failure with those rows written.
 */
#ifndef DFA_SEQPAR_EXECUTOR_H
#define DFA_SEQPAR_EXECUTOR_H

#include <stdint.h>

#include "comm.h"
#include "schedule.h"

#define DFA__STATS_MAX_STEPS 256

/* Timing of the most recent call on a communicator (wall clock, seconds). */
typedef struct dfa__dist_stats {
    int steps;                                /* of the schedule (only the first 256 are itemised) */
    double compute_s[DFA__STATS_MAX_STEPS];   /* the step's block(s) */
    double wait_s[DFA__STATS_MAX_STEPS];      /* blocked in waits; the last step includes the tail */
    double post_s[DFA__STATS_MAX_STEPS];      /* posting (packing, starting transfers), merging results */
    double compute_cpu_s;                     /* process CPU time during the blocks (all threads): against
                                                 compute_s x threads it shows how much of the cores this
                                                 rank actually got */
    double setup_s;                           /* validation, allocation, the collective check */
    double setup_plan_s;                      /* of which: the pass planned and allocated (choose_groups,
                                                 prepare) before the agreement */
    double setup_agree_s;                     /* the agreement (host: a round trip of the ranks) */
    double setup_ids_s;                       /* masked calls: every rank's ids gathered and copied to the
                                                 host (synchronising the stream) and checked */
    double setup_mask_plan_s;                 /* masked calls: counts (or their cached copy), the masked
                                                 plan, the pass planned and allocated again on it */
    double finish_s;                          /* the closing agreement and writing the outputs */
    double total_s;
    int64_t bytes_sent, bytes_recv;
    int pieces;                               /* masked calls: tasks of every rank that compute a piece of a
                                                 split pair (schedule.h); 0 otherwise */
    int bands;                                /* masked calls: bands of diagonals lent, over every rank */
} dfa__dist_stats;

/* Tests: run the following calls on c in `groups` groups of heads (a divisor of num_kv_heads;
   0 goes back to choosing by memory). The results are the same bits for any count. */
void dfa__dist_force_head_groups(dfa_comm *c, int groups);

/* Tests: build the following masked plans on c with this fold cost per row (schedule.h,
   DFA__PLAN_FOLD_COST); a negative value goes back to the default. Small test chunks need a
   lower one for busy diagonals to lend their rows. */
void dfa__dist_set_fold_cost(dfa_comm *c, int per_row);

/* Benchmarks and tests: the following masked plans on c, with on = 0, split no pair off the
   diagonal over ranks and lend one band of a diagonal at most (schedule.h: the plans before split
   pairs; rank-sim measures what splitting buys); 1: split and lend (the default); 2: split, and
   lend nothing (so that small test layouts split pairs for certain). */
void dfa__dist_set_split_pairs(dfa_comm *c, int on);

/* Tests: on = 1: the following calls on c write the step-0 diagonal's direct parts straight into
   the outputs on host backends too, as device backends do (exec_io.c, use_direct); -1: no
   backend does; 0 goes back. The results are the same bits either way. */
void dfa__dist_force_direct(dfa_comm *c, int on);

/* Collect timings of the following calls on c into *s (NULL stops). */
void dfa__dist_set_stats(dfa_comm *c, dfa__dist_stats *s);

typedef enum { DFA__PASS_FWD = 0, DFA__PASS_BWD = 1 } dfa__pass;

/* The caller's buffers of one call (per-rank chunk layouts as in distflash.h). */
typedef struct {
    const void *q, *k, *v;
    const void *o;      /* bwd: the forward's output */
    const float *lse;   /* bwd: the forward's lse */
    const void *dout;   /* bwd */
    void *o_out;        /* fwd */
    float *lse_out;     /* fwd, may be NULL */
    void *dq, *dk, *dv; /* bwd */
} dfa__dist_io;

/* Bytes of workspace one call with d on nranks ranks takes on a communicator whose compute
   table is ops (the larger of the two passes); 0 if d does not describe a valid call. */
size_t dfa__dist_workspace_bytes(int nranks, const dfa_dist_desc *d, const dfa__compute_ops *ops, int async);

/* Plans a call with d on c and allocates its workspace (in the head groups the memory
   allows, *groups), without running it or talking to other ranks: for memory planning
   (dist-bench --fit). d must be valid. */
dfa_status dfa__dist_reserve(dfa_comm *c, const dfa_dist_desc *d, dfa__pass pass, int *groups);

/*
 * Runs one distributed pass. `local` is this rank's own validation result (its message in
 * dfa_last_error()); d may be NULL when local != DFA_OK. Collective: every rank of c calls
 * it, whatever its local status; fn names the public call in messages. Device backends
 * (asynchronous communicators) pass d only when the descriptor itself passed this rank's
 * checks: then a failure in the buffers alone lets the rank run as a ghost (exec_agree.c,
 * agree_device) when the descriptor was agreed before.
 */
dfa_status dfa__dist_run(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, dfa__pass pass,
                         const dfa__dist_io *io, dfa_status local, const char *fn);

#endif
