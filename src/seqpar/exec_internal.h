/* Internal to the executor (executor.h): the state of one distributed pass and the functions
 * its files share. One file per job:
 *   executor.c     the entry points (dfa__dist_run, dfa__dist_reserve) and the test hooks
 *   exec_plan.c    the plan of a pass: its messages, their buffers, the workspace layout, head groups
 *   exec_agree.c   the collective agreements: statuses, descriptors, cached device agreements
 *   exec_mask.c    masks: every rank's document ids, the chunk pairs' counts, the masked plan
 *   exec_steps.c   the steps: posting transfers, each rank's block, folding results, the overlap
 *   exec_io.c      the caller's buffers: head groups packed, accumulators reset and stored
 */
#ifndef DFA_SEQPAR_EXEC_INTERNAL_H
#define DFA_SEQPAR_EXEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../common/dtype.h"
#include "executor.h"

#define MSG_CAPACITY 512
#define PART_ALIGN 256 /* every part, and the kernels' scratch, on a 256-byte boundary */
#define NO_BUFFER SIZE_MAX

/* The tensors of one message, in buffer order (v, o, dout, dv with the value head dim):
     KV        k, v                    storage type, the whole chunk
     QUERY     fwd: q; bwd: q, o, dout (storage type) and lse (float32), the task's rows
     QRESULT   fwd: o, lse; bwd: dq    float32, the task's rows
     KVRESULT  dk, dv                  float32, the whole chunk */
typedef struct {
    int n;
    size_t bytes[4];
} parts;

typedef struct {
    dfa__msg m;
    size_t off; /* offset of its parts in the step's arena slot, or NO_BUFFER (caller's memory) */
} planned_msg;

typedef struct {
    planned_msg *msgs;
    int nmsg;
    int has_task;
    dfa__task task;
} planned_step;

typedef struct {
    dfa_comm *c;
    const dfa__compute_ops *ops;
    void *ctx;
    dfa__sched s;
    int T, bwd, overlap, rank, n;
    dfa_attn_desc d; /* per rank: seqlen_q = seqlen_k = n, storage dtype */
    const dfa__dist_io *io;
    planned_step *steps;
    /* A buffer belongs to the compute step s it serves: inputs are received during step s-1,
       results sent during step s+1; three slots (s mod 3) never overlap in time. Each slot is
       as large as the largest step it serves: with two steps (P = 2) only step 1 moves
       anything, so one slot holds all the messages and the other two take no memory. */
    char *arena[3];
    size_t slot_bytes[3];
    char *work;          /* this rank's own packed window and own partial results */
    size_t work_results; /* offset of the partial results in work */
    /* What the own tasks need in work (plan): the packed query rows of a window of this rank's
       rows (own_window: its most rows), the partial query results of own tasks that do not write
       the accumulators themselves (own_q_rows: their most rows), a partial dk/dv (own_kv). */
    int own_window, own_q_rows, own_kv;
    int own_lse;         /* forward: the rows of an own diagonal that lent its first rows (its lse is
                            written here, then into the accumulator's rows) */
    /* Direct parts (narrow_direct, use_direct): the rows of this rank's queries [q_direct, n) and its keys
       [k_direct0, k_direct1) that no block but the step-0 diagonal adds to; with `direct` on, that
       block writes them in the storage type straight into the caller's outputs. */
    int q_direct, k_direct0, k_direct1;
    int direct;
    float *acc[3];       /* fwd: o, lse; bwd: dq, dk, dv (float32) */
    char *ghost_buf;     /* device backends: what a ghost sends instead of the caller's memory */
    int async;           /* the communicator agrees on the device (comm.h agree_async) */
    int ghost;           /* this rank's buffers failed its checks after a cached agreement: it still
                            sends and receives every message (from ghost_buf) so that no peer hangs,
                            computes nothing and writes no output */
    const int *gate;     /* device flag: 1 when every rank passed its checks (agree_async) */
    int ready;           /* planned and allocated: the steps can run */
    /* Head groups: the pass runs G times, once per group of num_kv_heads / G kv heads and
       their query heads, on packed copies of the group's rows; d is the group's descriptor,
       full the caller's. G = 1 runs on the caller's buffers directly. */
    int G;
    dfa_attn_desc full;
    char *pack;          /* packed inputs of one group (G > 1) */
    dfa__dist_io gio;    /* the group's buffers */
    /* Masks (documents, window): the schedule follows a masked plan (schedule.h), built
       after the agreement from every rank's document ids (setup_mask). */
    int masked;
    dfa__sched_plan mplan;
    dfa__pair_counts mc; /* the chunk pairs' counts the plan is built from (prefix: only when lending) */
    int32_t *ids;        /* [P][batch][n] every rank's document ids (host); NULL without documents */
    const int32_t *ids_b; /* the same in the backend's memory (what the blocks read): ids itself
                             on host backends, the communicator's mask_ids on device ones */
    dfa_status local;    /* the first failure on this rank */
    char msg[MSG_CAPACITY];
    double t_wait;
    int64_t sent, received;
} exec;

static inline size_t align_up(size_t x) { return (x + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN; }

/* The value head dim Dv of the pass (v, o, dout, dv and the forward's o accumulator have it; q, k,
   dq, dk have head_dim). */
static inline int dv_of(const exec *e) { return e->d.head_dim_v > 0 ? e->d.head_dim_v : e->d.head_dim; }

static inline int rows_of(const dfa__task *t) { return t->row1 - t->row0; }

/* A window of query rows [r0, r0 + rows) of one batch row is a contiguous slice of q, o and
   dout ([1, n, heads, D]): it is used in place, and only its lse ([heads, n]: strided) is packed.
   With more batch rows every part is packed. */
static inline int window_in_place(const exec *e) { return e->d.batch == 1; }

/* The parts of a message of `rows` query rows and `krows` key rows. */
static inline parts msg_parts(const exec *e, dfa__msg_kind kind, int rows, int krows) {
    const dfa_attn_desc *d = &e->d;
    const size_t B = (size_t)d->batch, H = (size_t)d->num_heads, D = (size_t)d->head_dim, Dv = (size_t)dv_of(e);
    const size_t es = dfa__dtype_size(d->dtype), n = (size_t)krows, r = (size_t)rows;
    const size_t q = B * r * H * D * es, o = B * r * H * Dv * es, lse = B * H * r * 4;
    const size_t q32 = B * r * H * D * 4, o32 = B * r * H * Dv * 4;
    const size_t k = B * n * (size_t)d->num_kv_heads * D * es, v = B * n * (size_t)d->num_kv_heads * Dv * es;
    const size_t k32 = k / es * 4, v32 = v / es * 4;
    parts p = {0, {0, 0, 0, 0}};
    switch (kind) {
    case DFA__MSG_KV: p = (parts){2, {k, v, 0, 0}}; break;
    case DFA__MSG_QUERY: p = e->bwd ? (parts){4, {q, o, o, lse}} : (parts){1, {q, 0, 0, 0}}; break;
    case DFA__MSG_QRESULT: p = e->bwd ? (parts){1, {q32, 0, 0, 0}} : (parts){2, {o32, lse, 0, 0}}; break;
    case DFA__MSG_KVRESULT: p = (parts){2, {k32, v32, 0, 0}}; break;
    }
    return p;
}

static inline size_t parts_total(parts p) {
    size_t t = 0;
    for (int i = 0; i < p.n; i++) t += align_up(p.bytes[i]);
    return t;
}

static inline void parts_at(parts p, char *base, void *out[4]) {
    for (int i = 0; i < p.n; i++) {
        out[i] = base;
        base += align_up(p.bytes[i]);
    }
}

/* Where task t's key rows start in this rank's k (value = 0) or v (value = 1; one batch row when
   not all). */
static inline size_t key_rows_offset(const exec *e, const dfa__task *t, int value) {
    return (size_t)t->k_row0 * e->d.num_kv_heads * (value ? dv_of(e) : e->d.head_dim) * dfa__dtype_size(e->d.dtype);
}

/* The parts of a message that serves task t. */
static inline parts task_parts(const exec *e, dfa__msg_kind kind, const dfa__task *t) {
    return msg_parts(e, kind, rows_of(t), dfa__task_key_rows(t, e->n));
}

static inline double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Records the first failure on this rank, with its message. */
static inline void record(exec *e, dfa_status st) {
    if (e->local != DFA_OK || st == DFA_OK) return;
    e->local = st;
    snprintf(e->msg, sizeof e->msg, "%s", dfa_last_error());
}

/* The functions one file of the executor calls in another; each one's contract is at its definition. */

/* exec_plan.c */
int dfa__exec_first_is_diagonal(const exec *e);
dfa_status dfa__exec_prepare(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups, const char *fn);
void dfa__exec_free_plan(exec *e);
int dfa__exec_choose_groups(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind);

/* exec_agree.c */
const char *dfa__exec_unprefixed(const char *msg, const char *fn);
dfa_status dfa__exec_agree(exec *e, const int64_t *fields, const char *const *names, int nf, int64_t *most,
                           const char *fn);
dfa_status dfa__exec_backend_failure(dfa_status st, const char *fn);
int dfa__exec_agreed_groups_of(const dfa_comm *c, const int64_t *f, int bwd);
dfa_status dfa__exec_agree_device(exec *e, int desc_ok, const int64_t *f, const char *const *names, int nf,
                                  int64_t *groups, const char *fn);
dfa_status dfa__exec_agree_masked_device(exec *e, const int64_t *f, const char *const *names, int nf,
                                         int64_t *groups, const char *fn);

/* exec_mask.c */
dfa_status dfa__exec_setup_mask(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups, const char *fn);

/* exec_steps.c */
dfa_status dfa__exec_run_steps(exec *e, dfa__dist_stats *stats);

/* exec_io.c */
void dfa__exec_reset_acc(exec *e);
void dfa__exec_pack_group(exec *e, const dfa__dist_io *io, int g);
int dfa__exec_use_direct(const exec *e);
void dfa__exec_store_group(exec *e, const dfa__dist_io *io, int g);

#endif
