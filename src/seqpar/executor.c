/* The backend-neutral executor of sequence-parallel attention. See executor.h. */
#include "executor.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/dtype.h"
#include "../common/error.h"
#include "../common/mask.h"

#define MSG_CAPACITY 512
#define PART_ALIGN 256 /* every part, and the kernels' scratch, on a 256-byte boundary */
#define NO_BUFFER SIZE_MAX

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dfa__dist_set_stats(dfa_comm *c, dfa__dist_stats *s) {
    if (c) c->stats = s;
}

void dfa__dist_force_direct(dfa_comm *c, int on) {
    if (c) c->force_direct = on > 0 ? 1 : on < 0 ? -1 : 0;
}

void dfa__dist_set_fold_cost(dfa_comm *c, int per_row) {
    if (c) c->fold_cost = per_row >= 0 ? per_row + 1 : 0; /* stored + 1: a zeroed communicator has the default */
}

void dfa__dist_set_split_pairs(dfa_comm *c, int on) {
    if (c) c->split_mode = on >= 0 && on <= 2 ? on - 1 : 0; /* stored - 1: a zeroed communicator has the default */
}

void dfa__dist_force_head_groups(dfa_comm *c, int groups) {
    if (c) c->force_groups = groups > 0 ? groups : 0;
}

/* The tensors of one message, in buffer order:
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

static size_t align_up(size_t x) { return (x + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN; }

/* The parts of a message of `rows` query rows and `krows` key rows. */
static parts msg_parts(const exec *e, dfa__msg_kind kind, int rows, int krows) {
    const dfa_attn_desc *d = &e->d;
    const size_t B = (size_t)d->batch, H = (size_t)d->num_heads, D = (size_t)d->head_dim;
    const size_t es = dfa__dtype_size(d->dtype), n = (size_t)krows, r = (size_t)rows;
    const size_t q = B * r * H * D * es, lse = B * H * r * 4, q32 = B * r * H * D * 4;
    const size_t kv = B * n * (size_t)d->num_kv_heads * D * es, kv32 = kv / es * 4;
    parts p = {0, {0, 0, 0, 0}};
    switch (kind) {
    case DFA__MSG_KV: p = (parts){2, {kv, kv, 0, 0}}; break;
    case DFA__MSG_QUERY: p = e->bwd ? (parts){4, {q, q, q, lse}} : (parts){1, {q, 0, 0, 0}}; break;
    case DFA__MSG_QRESULT: p = e->bwd ? (parts){1, {q32, 0, 0, 0}} : (parts){2, {q32, lse, 0, 0}}; break;
    case DFA__MSG_KVRESULT: p = (parts){2, {kv32, kv32, 0, 0}}; break;
    }
    return p;
}

static size_t parts_total(parts p) {
    size_t t = 0;
    for (int i = 0; i < p.n; i++) t += align_up(p.bytes[i]);
    return t;
}

static void parts_at(parts p, char *base, void *out[4]) {
    for (int i = 0; i < p.n; i++) {
        out[i] = base;
        base += align_up(p.bytes[i]);
    }
}

static int rows_of(const dfa__task *t) { return t->row1 - t->row0; }

/* Where task t's key rows start in this rank's k and v (one batch row when not all). */
static size_t key_rows_offset(const exec *e, const dfa__task *t) {
    return (size_t)t->k_row0 * e->d.num_kv_heads * e->d.head_dim * dfa__dtype_size(e->d.dtype);
}

/* The parts of a message that serves task t. */
static parts task_parts(const exec *e, dfa__msg_kind kind, const dfa__task *t) {
    return msg_parts(e, kind, rows_of(t), dfa__task_key_rows(t, e->n));
}

/* Records the first failure on this rank, with its message. */
static void record(exec *e, dfa_status st) {
    if (e->local != DFA_OK || st == DFA_OK) return;
    e->local = st;
    snprintf(e->msg, sizeof e->msg, "%s", dfa_last_error());
}

/* A window of query rows [r0, r0 + rows) of one batch row is a contiguous slice of q, o and
   dout ([1, n, heads, D]): it is used in place, and only its lse ([heads, n]: strided) is packed.
   With more batch rows every part is packed. */
static int window_in_place(const exec *e) { return e->d.batch == 1; }

/* Bytes of packed buffer a window of `rows` query rows needs. */
static size_t window_bytes(const exec *e, int rows) {
    const parts p = msg_parts(e, DFA__MSG_QUERY, rows, e->n);
    if (!window_in_place(e)) return parts_total(p);
    return e->bwd ? align_up(p.bytes[3]) : 0; /* the lse part */
}

/* A task that is this rank's own diagonal against all its keys, every row or (one batch row: the
   rows are then contiguous) the rows after those it lent (schedule.h, busy diagonals): at step 0
   its block writes the accumulators itself (first_is_diagonal). */
static int own_diagonal_direct(const exec *e, const dfa__task *t) {
    return t->q_chunk == e->rank && t->k_chunk == e->rank && t->row1 == e->n && !t->k_row1 && !t->k_row0 &&
           (t->row0 == 0 || e->d.batch == 1);
}

/* Messages that need a buffer of their own: everything received, and whatever is sent from
   something other than the caller's contiguous rows (packed windows, partial results). */
static int needs_buffer(const exec *e, const dfa__msg *m) {
    if (!m->send) return 1;
    if (m->kind == DFA__MSG_KV) return 0; /* the chunk, or its first rows (lent diagonals: one batch row) */
    if (m->kind == DFA__MSG_QUERY) return rows_of(&m->task) != e->n && window_bytes(e, rows_of(&m->task)) > 0;
    return 1;
}

/* Bytes of a message's buffer (needs_buffer): a sent window only what window_bytes packs. */
static size_t buffer_bytes(const exec *e, const dfa__msg *m) {
    if (m->send && m->kind == DFA__MSG_QUERY) return window_bytes(e, rows_of(&m->task));
    return parts_total(task_parts(e, m->kind, &m->task));
}

/* Narrows the direct parts (see exec) by one contribution to this rank's rows: query rows
   [row0, row1) of a result for them (results come for a prefix: a document's or a window's
   first rows, which see earlier chunks, or rows lent away), or its keys [k0, k1) (a suffix that
   later chunks' queries read, or the prefix a lent block reads): the direct keys keep the
   larger side. */
static void narrow_direct(exec *e, const dfa__task *t, int queries, int keys) {
    if (queries && t->row1 > e->q_direct) e->q_direct = t->row1;
    if (keys) {
        const int k0 = t->k_row0, k1 = dfa__task_key_end(t, e->n);
        if (k1 <= e->k_direct0 || k0 >= e->k_direct1) return; /* outside the direct keys already */
        const int below = k0 - e->k_direct0, above = e->k_direct1 - k1; /* direct keys left on each side */
        if (below >= above) e->k_direct1 = k0 > e->k_direct0 ? k0 : e->k_direct0;
        else e->k_direct0 = k1 < e->k_direct1 ? k1 : e->k_direct1;
    }
}

static dfa_status plan(exec *e, const char *fn) {
    const int cap = dfa__sched_max_messages(&e->s);
    dfa__msg *tmp = malloc(sizeof *tmp * (size_t)cap);
    e->steps = calloc((size_t)e->T, sizeof *e->steps);
    if (!tmp || !e->steps) {
        free(tmp);
        return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the schedule's plan");
    }
    for (int i = 0; i < 3; i++) e->slot_bytes[i] = 0;
    e->own_window = e->own_q_rows = e->own_kv = e->own_lse = 0;
    e->q_direct = 0;
    e->k_direct0 = 0;
    e->k_direct1 = e->n;
    for (int t = 0; t < e->T; t++) {
        planned_step *ps = &e->steps[t];
        ps->has_task = dfa__sched_task(&e->s, e->rank, t, &ps->task);
        if (ps->has_task) {
            const dfa__task *tk = &ps->task;
            const int rows = rows_of(tk), qmine = tk->q_chunk == e->rank, kmine = tk->k_chunk == e->rank;
            const int direct = t == 0 && own_diagonal_direct(e, tk); /* first_is_diagonal */
            if (qmine && rows != e->n && rows > e->own_window) e->own_window = rows;
            if (qmine && !direct && rows > e->own_q_rows) e->own_q_rows = rows;
            if (direct && rows != e->n && !e->bwd) e->own_lse = rows; /* its lse, before it goes in */
            if (kmine && !direct && e->bwd) e->own_kv = 1;
            if (direct) narrow_direct(e, &(dfa__task){.row1 = tk->row0}, 1, 0);
            else narrow_direct(e, tk, qmine, kmine);
        }
        const int nm = dfa__sched_messages(&e->s, e->bwd, e->rank, t, tmp, cap);
        if (nm < 0) {
            free(tmp);
            return dfa__fail(DFA_ERR_INTERNAL, fn, "schedule %s: too many messages at step %d",
                             dfa__sched_name(e->s.kind), t);
        }
        ps->msgs = malloc(sizeof *ps->msgs * (size_t)(nm > 0 ? nm : 1));
        if (!ps->msgs) {
            free(tmp);
            return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the schedule's plan");
        }
        ps->nmsg = nm;
        size_t off = 0;
        for (int i = 0; i < nm; i++) {
            ps->msgs[i].m = tmp[i];
            if (!tmp[i].send) /* results for this rank's rows or keys, computed elsewhere */
                narrow_direct(e, &tmp[i].task, tmp[i].kind == DFA__MSG_QRESULT, tmp[i].kind == DFA__MSG_KVRESULT);
            if (needs_buffer(e, &tmp[i])) {
                ps->msgs[i].off = off;
                off += buffer_bytes(e, &tmp[i]);
            } else {
                ps->msgs[i].off = NO_BUFFER;
            }
        }
        if (off > e->slot_bytes[t % 3]) e->slot_bytes[t % 3] = off;
    }
    /* a block's direct rows are contiguous in the caller's o for one batch row, or all of them */
    if (e->d.batch > 1 && e->q_direct > 0) e->q_direct = e->n;
    free(tmp);
    return DFA_OK;
}

static void free_plan(exec *e) {
    if (!e->steps) return;
    for (int t = 0; t < e->T; t++) free(e->steps[t].msgs);
    free(e->steps);
    e->steps = NULL;
}

/* The tasks of plan p (every rank's) that compute a piece of a split pair, and its lent bands of
   diagonals (schedule.h). */
static void count_pieces(const dfa__sched_plan *p, int n, int *pieces, int *bands) {
    *pieces = *bands = 0;
    for (int i = 0; i < p->steps * p->nranks; i++) {
        *bands += p->tasks[i].q_chunk >= 0 && dfa__task_lent(&p->tasks[i]);
        *pieces += dfa__task_is_piece(p, &p->tasks[i], n);
    }
}

/* Forgets the last masked plan's counts (mask_counts). */
static void mask_cache_clear(dfa_comm *c) {
    dfa__pair_counts_free(&c->mask_cache);
    free(c->mask_key_ids);
    c->mask_key_ids = NULL;
    c->mask_key_bytes = 0;
}

void dfa__comm_drop_cache(dfa_comm *c) {
    if (!c) return;
    if (c->ws && !c->ws_external) c->compute->release(c->ctx, c->ws);
    if (c->mask_ids) c->compute->release(c->ctx, c->mask_ids);
    c->mask_ids = NULL;
    c->mask_ids_bytes = 0;
    mask_cache_clear(c);
    if (c->ctx) c->compute->ctx_destroy(c->ctx);
    if (!c->ws_external) {
        c->ws = NULL;
        c->ws_bytes = 0;
    }
    c->ctx = NULL;
}

/* The compute context depends on the storage type and the block sizes only. */
static int same_shapes(const dfa_attn_desc *a, const dfa_attn_desc *b) {
    return a->batch == b->batch && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           a->num_heads == b->num_heads && a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
           a->dtype == b->dtype;
}

/* Bytes of the workspace one pass needs, and the sizes of its parts. */
typedef struct {
    size_t slot[3], window_results, acc[3], ghost, scratch, pack, total;
} layout;

static layout layout_of(const exec *e) {
    const dfa_attn_desc *d = &e->d;
    layout L;
    const size_t es = dfa__dtype_size(d->dtype);
    const size_t nq = (size_t)d->batch * e->n * d->num_heads * d->head_dim;
    const size_t nk = (size_t)d->batch * e->n * d->num_kv_heads * d->head_dim;
    const size_t nl = (size_t)d->batch * d->num_heads * e->n;
    for (int i = 0; i < 3; i++) L.slot[i] = align_up(e->slot_bytes[i]);
    const size_t window = e->own_window ? window_bytes(e, e->own_window) : 0;
    const size_t results = (e->own_q_rows ? parts_total(msg_parts(e, DFA__MSG_QRESULT, e->own_q_rows, e->n)) : 0) +
                           (e->own_kv ? parts_total(msg_parts(e, DFA__MSG_KVRESULT, e->n, e->n)) : 0) +
                           align_up((size_t)d->batch * d->num_heads * e->own_lse * 4);
    L.window_results = align_up(window + results);
    L.acc[0] = nq; /* bwd: dq, dk, dv; fwd: o, lse */
    L.acc[1] = e->bwd ? nk : nl;
    L.acc[2] = e->bwd ? nk : 0;
    L.ghost = e->async ? align_up((nq > nk ? nq : nk) * es) : 0;
    L.scratch = e->ops->scratch_bytes ? align_up(e->ops->scratch_bytes(d)) : 0;
    /* a group's packed inputs: q (and o, dout, lse in the backward), k, v */
    L.pack = e->G > 1 ? align_up(nq * es) * (e->bwd ? 3 : 1) + 2 * align_up(nk * es) + (e->bwd ? align_up(nl * 4) : 0) : 0;
    L.total = L.slot[0] + L.slot[1] + L.slot[2] + L.window_results + L.ghost + L.scratch + L.pack;
    for (int i = 0; i < 3; i++) L.acc[i] = sizeof(float) * L.acc[i], L.total += align_up(L.acc[i]);
    return L;
}

/* Carves the pass's buffers out of the communicator's cached workspace (grown when too small;
   the caller's workspace when it gave one). */
static dfa_status allocate(exec *e, const char *fn) {
    dfa_comm *c = e->c;
    const dfa_attn_desc *d = &e->d;
    const int frozen = e->async && c->ops->capturing(c);
    if (c->ctx && !same_shapes(&c->ctx_key, d)) {
        if (frozen)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "this shape is new on this communicator and a CUDA graph capture is in progress: "
                             "make one uncaptured call with it first (its scratch is allocated then)");
        dfa__comm_drop_cache(c);
    }
    if (!c->ctx) {
        if (frozen)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "the first call on this communicator is being captured into a CUDA graph: make "
                             "one uncaptured call first (its scratch is allocated then)");
        dfa_status st = e->ops->ctx_create(d, &c->ctx);
        if (st) {
            c->ctx = NULL;
            return st;
        }
        c->ctx_key = *d;
    }
    e->ctx = c->ctx;
    const layout L = layout_of(e);
    const size_t total = L.total, slots = L.slot[0] + L.slot[1] + L.slot[2];
    if (c->ws_external && c->ws_bytes < total)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "the workspace given to this communicator has %zu bytes; this call needs %zu "
                         "(dfa_dist_attn_cuda_workspace_bytes)",
                         c->ws_bytes, total);
    if (c->ws_bytes < total) {
        if (frozen)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "this call needs more scratch than earlier ones and a CUDA graph capture is in "
                             "progress: make one uncaptured call with this shape first");
        if (c->ws) e->ops->release(c->ctx, c->ws);
        c->ws = e->ops->alloc(c->ctx, total);
        c->ws_bytes = c->ws ? total : 0;
        if (!c->ws)
            return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn,
                             "cannot allocate %zu bytes for the distributed pass (%zu of message slots, "
                             "float32 accumulators, partial results)",
                             total, slots);
    }
    char *p = c->ws;
    for (int i = 0; i < 3; i++) {
        e->arena[i] = p;
        p += L.slot[i];
    }
    e->work_results = e->own_window ? window_bytes(e, e->own_window) : 0;
    e->work = p;
    p += L.window_results;
    for (int i = 0; i < 3; i++) {
        e->acc[i] = L.acc[i] ? (float *)p : NULL;
        p += align_up(L.acc[i]);
    }
    e->ghost_buf = L.ghost ? p : NULL;
    p += L.ghost;
    e->pack = L.pack ? p : NULL;
    p += L.pack;
    if (e->ops->bind) e->ops->bind(e->ctx, c->stream, L.scratch ? p : NULL);
    return DFA_OK;
}

/* Whether this rank's step-0 block is its own whole diagonal (its query and key chunk, every
   row). Its results are then the accumulators' first contribution: the block writes them there
   itself, with no fill before and no fold after. Each of those is a pass over float32
   accumulators twice the size of the chunk's queries (and, backward, of its keys): 3-6 ms of a
   128k-token call on an H200, which at a few percent of the pairs visible (documents) is a
   large share of it. Merging a first result into "nothing seen" (o = 0, lse = -inf; sums 0)
   gives that result, so the outputs keep their values. */
static int first_is_diagonal(const exec *e) {
    if (e->T < 1 || !e->steps || !e->steps[0].has_task) return 0;
    return own_diagonal_direct(e, &e->steps[0].task);
}

/* The float32 accumulators before a group's steps: nothing seen yet (unless step 0 writes them
   whole: first_is_diagonal). */
static void reset_acc(exec *e) {
    const dfa_attn_desc *d = &e->d;
    if (first_is_diagonal(e)) {
        /* rows it lent (one batch row): nothing seen there yet; the forward's lse rows are not
           contiguous, so all of them start empty and the block's go in after it */
        const int lent = e->steps[0].task.row0;
        if (lent) {
            e->ops->fill_f32(e->ctx, e->acc[0], (int64_t)lent * d->num_heads * d->head_dim, 0.0f);
            if (!e->bwd) e->ops->fill_f32(e->ctx, e->acc[1], (int64_t)d->batch * d->num_heads * e->n, -INFINITY);
        }
        return;
    }
    const int64_t nq = (int64_t)d->batch * e->n * d->num_heads * d->head_dim;
    const int64_t nk = (int64_t)d->batch * e->n * d->num_kv_heads * d->head_dim;
    if (e->bwd) {
        e->ops->fill_f32(e->ctx, e->acc[0], nq, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[1], nk, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[2], nk, 0.0f);
    } else {
        e->ops->fill_f32(e->ctx, e->acc[0], nq, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[1], (int64_t)d->batch * d->num_heads * e->n, -INFINITY);
    }
}

/* The workspace stays with the communicator; only the plan goes. */
static void release(exec *e) {
    free_plan(e);
    dfa__sched_plan_free(&e->mplan);
    dfa__pair_counts_free(&e->mc);
    free(e->ids);
    e->ids = NULL;
    e->ids_b = NULL;
    e->masked = 0;
}

/* The parts of a window of this rank's query rows [r0, r0 + rows) (fwd: q; bwd: q, o, dout,
   lse): in the caller's tensors where window_in_place, else in buf (window_bytes of it). */
static void window_parts(exec *e, int r0, int rows, char *buf, void *out[4]) {
    if (!window_in_place(e)) {
        parts_at(msg_parts(e, DFA__MSG_QUERY, rows, e->n), buf, out);
        return;
    }
    const size_t row = (size_t)e->d.num_heads * e->d.head_dim * dfa__dtype_size(e->d.dtype), off = (size_t)r0 * row;
    out[0] = (char *)(void *)e->io->q + off;
    out[1] = e->bwd ? (char *)(void *)e->io->o + off : NULL;
    out[2] = e->bwd ? (char *)(void *)e->io->dout + off : NULL;
    out[3] = e->bwd ? buf : NULL;
}

/* Copies what window_parts keeps in its buffer: every part, or (in place) the lse rows. */
static void pack_query(exec *e, int r0, int rows, void *dst[4]) {
    const dfa_attn_desc *d = &e->d;
    const size_t row = (size_t)d->num_heads * d->head_dim * dfa__dtype_size(d->dtype);
    const size_t n = (size_t)e->n, r = (size_t)rows, B = (size_t)d->batch;
    const void *src[3] = {e->io->q, e->io->o, e->io->dout};
    for (int i = 0; i < (e->bwd ? 3 : 1) && !window_in_place(e); i++)
        e->ops->copy2d(e->ctx, dst[i], r * row, (const char *)src[i] + (size_t)r0 * row, n * row, r * row, B);
    if (e->bwd)
        e->ops->copy2d(e->ctx, dst[3], r * 4, e->io->lse + r0, n * 4, r * 4, B * (size_t)d->num_heads);
}

static planned_msg *find(planned_step *ps, dfa__msg_kind kind, int send) {
    for (int i = 0; i < ps->nmsg; i++)
        if (ps->msgs[i].m.kind == kind && ps->msgs[i].m.send == send) return &ps->msgs[i];
    return NULL;
}

/* Tag of part i of a message of compute step `step`: unique among one step's messages
   between two ranks (one task per rank per step); steps wrap, order keeps them apart. */
static int tag_of(int step, dfa__msg_kind kind, int part) { return ((step & 1023) << 4) | ((kind - 1) << 2) | part; }

/* The buffers of a message's parts. */
static void msg_buffers(exec *e, int step, planned_msg *pm, void *out[4]) {
    const parts p = task_parts(e, pm->m.kind, &pm->m.task);
    /* a window of this rank's rows: in place or packed (window_parts); a ghost's from ghost_buf */
    const int window_send = pm->m.send && pm->m.kind == DFA__MSG_QUERY && rows_of(&pm->m.task) != e->n;
    if (window_send && !e->ghost) {
        window_parts(e, pm->m.task.row0, rows_of(&pm->m.task),
                     pm->off != NO_BUFFER ? e->arena[step % 3] + pm->off : NULL, out);
        return;
    }
    if (pm->off != NO_BUFFER && !window_send) {
        parts_at(p, e->arena[step % 3] + pm->off, out);
        return;
    }
    /* sent straight from the caller's memory (a ghost sends its own scratch instead) */
    if (e->ghost) {
        for (int i = 0; i < 4; i++) out[i] = e->ghost_buf;
        return;
    }
    if (pm->m.kind == DFA__MSG_KV) { /* the chunk, or its rows [k_row0, k_row1) (one batch row) */
        const size_t off = key_rows_offset(e, &pm->m.task);
        out[0] = (char *)(void *)e->io->k + off;
        out[1] = (char *)(void *)e->io->v + off;
    } else { /* a whole query chunk */
        out[0] = (void *)e->io->q;
        out[1] = (void *)e->io->o;
        out[2] = (void *)e->io->dout;
        out[3] = (void *)e->io->lse;
    }
}

/* Starts the inputs of compute step in_step and the results of compute step res_step. */
static dfa_status post(exec *e, int in_step, int res_step, void **pending) {
    *pending = NULL;
    int count = 0;
    for (int g = 0; g < 2; g++) {
        const int of = g == 0 ? in_step : res_step;
        if (of < 0 || of >= e->T) continue;
        for (int i = 0; i < e->steps[of].nmsg; i++)
            if (dfa__msg_is_input(e->steps[of].msgs[i].m.kind) == (g == 0)) count += 4;
    }
    if (count == 0) return DFA_OK;
    dfa__xfer *x = malloc(sizeof *x * (size_t)count);
    if (!x) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "post", "cannot allocate %d transfer records", count);
    int nx = 0;
    for (int g = 0; g < 2; g++) {
        const int of = g == 0 ? in_step : res_step;
        if (of < 0 || of >= e->T) continue;
        planned_step *ps = &e->steps[of];
        for (int i = 0; i < ps->nmsg; i++) {
            planned_msg *pm = &ps->msgs[i];
            if (dfa__msg_is_input(pm->m.kind) != (g == 0)) continue;
            const dfa__task *t = &pm->m.task;
            const parts p = task_parts(e, pm->m.kind, t);
            void *buf[4];
            msg_buffers(e, of, pm, buf);
            if (pm->m.send && pm->m.kind == DFA__MSG_QUERY && pm->off != NO_BUFFER && !e->ghost)
                pack_query(e, t->row0, rows_of(t), buf);
            for (int j = 0; j < p.n; j++) {
                x[nx++] = (dfa__xfer){buf[j], p.bytes[j], pm->m.peer, tag_of(of, pm->m.kind, j), pm->m.send};
                if (pm->m.send) e->sent += (int64_t)p.bytes[j];
                else e->received += (int64_t)p.bytes[j];
            }
        }
    }
    dfa_status st = e->c->ops->start(e->c, x, nx, pending);
    free(x);
    return st;
}

/* Adds a packed float32 window [batch, rows, width] into rows [r0, r0+rows) of [batch, n, width]. */
static void add_rows(exec *e, float *acc, const float *part, int r0, int rows, int64_t width) {
    for (int b = 0; b < e->d.batch; b++)
        e->ops->add_f32(e->ctx, acc + ((int64_t)b * e->n + r0) * width, part + (int64_t)b * rows * width,
                        (int64_t)rows * width);
}

/* Folds a partial result of query rows [r0, r0+rows) (and of this rank's keys) into the accumulators. */
static void fold_query(exec *e, const dfa__task *t, void *res[2]) {
    const int rows = rows_of(t);
    if (e->bwd)
        add_rows(e, e->acc[0], res[0], t->row0, rows, (int64_t)e->d.num_heads * e->d.head_dim);
    else
        e->ops->merge_rows(e->ctx, e->d.batch, e->d.num_heads, e->d.head_dim, e->n, t->row0, rows, e->acc[0],
                           e->acc[1], res[0], res[1]);
}

/* Folds a partial dk, dv of this rank's keys (all, or the rows [k_row0, k_row1) the task read). */
static void fold_keys(exec *e, const dfa__task *t, void *res[2]) {
    const int kr = dfa__task_key_rows(t, e->n);
    const int64_t width = (int64_t)e->d.num_kv_heads * e->d.head_dim;
    for (int i = 0; i < 2; i++)
        if (kr == e->n) e->ops->add_f32(e->ctx, e->acc[1 + i], res[i], (int64_t)e->d.batch * e->n * width);
        else add_rows(e, e->acc[1 + i], res[i], t->k_row0, kr, width);
}

/* Folds the results of compute step s that other ranks sent here. */
static void consume(exec *e, int s) {
    if (s < 0 || s >= e->T || e->local) return;
    planned_step *ps = &e->steps[s];
    for (int i = 0; i < ps->nmsg; i++) {
        planned_msg *pm = &ps->msgs[i];
        if (pm->m.send || dfa__msg_is_input(pm->m.kind)) continue;
        void *buf[4];
        msg_buffers(e, s, pm, buf);
        if (pm->m.kind == DFA__MSG_QRESULT) fold_query(e, &pm->m.task, buf);
        else fold_keys(e, &pm->m.task, buf);
    }
}

/* After this rank has failed during the steps (not a ghost: its peers do not know), the
   partial results it still sends are NaN, so that the failure shows in the peers' outputs
   instead of leaving them silently wrong. */
static void poison_results(exec *e, int t) {
    planned_step *ps = &e->steps[t];
    for (int i = 0; i < ps->nmsg; i++) {
        planned_msg *pm = &ps->msgs[i];
        if (!pm->m.send || dfa__msg_is_input(pm->m.kind) || pm->off == NO_BUFFER) continue;
        const parts p = task_parts(e, pm->m.kind, &pm->m.task);
        e->ops->fill_f32(e->ctx, (float *)(void *)(e->arena[t % 3] + pm->off), (int64_t)(parts_total(p) / sizeof(float)),
                         NAN);
    }
}

/* This rank's block at step t. */
static void compute(exec *e, int t) {
    planned_step *ps = &e->steps[t];
    if (e->local && !e->ghost && e->ready) poison_results(e, t);
    if (!ps->has_task || e->local) return;
    const dfa__task *tk = &ps->task;
    const int rows = rows_of(tk), qmine = tk->q_chunk == e->rank, kmine = tk->k_chunk == e->rank;
    const int direct = t == 0 && first_is_diagonal(e); /* into the accumulators themselves */
    void *qs[4], *kv[2], *qres[2], *kres[2];
    if (qmine && rows == e->n) {
        qs[0] = (void *)e->io->q;
        qs[1] = (void *)e->io->o;
        qs[2] = (void *)e->io->dout;
        qs[3] = (void *)e->io->lse;
    } else if (qmine) {
        window_parts(e, tk->row0, rows, e->work, qs);
        pack_query(e, tk->row0, rows, qs);
    } else {
        planned_msg *pm = find(ps, DFA__MSG_QUERY, 0);
        if (!pm) {
            record(e, dfa__fail(DFA_ERR_INTERNAL, "executor", "step %d: no query message", t));
            return;
        }
        msg_buffers(e, t, pm, qs);
    }
    if (kmine) { /* the task's key rows (one batch row when not all) */
        const size_t off = key_rows_offset(e, tk);
        kv[0] = (char *)(void *)e->io->k + off;
        kv[1] = (char *)(void *)e->io->v + off;
    } else {
        planned_msg *pm = find(ps, DFA__MSG_KV, 0);
        if (!pm) {
            record(e, dfa__fail(DFA_ERR_INTERNAL, "executor", "step %d: no key/value message", t));
            return;
        }
        void *b[4];
        msg_buffers(e, t, pm, b);
        kv[0] = b[0];
        kv[1] = b[1];
    }
    /* own partial results go to scratch and are folded at once; others' into the send slot */
    char *own = e->work + e->work_results;
    const parts pq = task_parts(e, DFA__MSG_QRESULT, tk);
    void *b4[4];
    if (direct) { /* (rows after lent ones: one batch row, so the rows are contiguous; the lse is not) */
        b4[0] = e->acc[0] + (size_t)tk->row0 * e->d.num_heads * e->d.head_dim;
        b4[1] = e->bwd ? NULL : tk->row0 ? (void *)own : e->acc[1];
    } else if (qmine) {
        parts_at(pq, own, b4);
    } else {
        msg_buffers(e, t, find(ps, DFA__MSG_QRESULT, 1), b4);
    }
    qres[0] = b4[0];
    qres[1] = b4[1];
    if (e->bwd) {
        if (direct) b4[0] = e->acc[1], b4[1] = e->acc[2];
        else if (kmine) parts_at(task_parts(e, DFA__MSG_KVRESULT, tk), own + (qmine ? parts_total(pq) : 0), b4);
        else msg_buffers(e, t, find(ps, DFA__MSG_KVRESULT, 1), b4);
        kres[0] = b4[0];
        kres[1] = b4[1];
    }

    /* the step-0 diagonal's direct parts: o16 from the block's first row (its row0) on */
    dfa__direct dr = {0};
    if (direct && e->direct) {
        const size_t qrow = (size_t)e->d.num_heads * e->d.head_dim * dfa__dtype_size(e->d.dtype);
        if (!e->bwd && e->q_direct < e->n) {
            dr.o = (char *)e->io->o_out + (size_t)tk->row0 * qrow;
            dr.o_from = e->q_direct - tk->row0;
        }
        if (e->bwd && e->k_direct1 > e->k_direct0) {
            dr.dk = e->io->dk;
            dr.dv = e->io->dv;
            dr.dkv_from = e->k_direct0;
            dr.dkv_to = e->k_direct1;
        }
    }
    const dfa__direct *drp = dr.o || dr.dk ? &dr : NULL;

    dfa_attn_desc bd = e->d;
    bd.seqlen_q = rows;
    bd.seqlen_k = dfa__task_key_rows(tk, e->n);
    bd.causal = tk->causal_mask;
    bd.q_start = (int64_t)tk->q_chunk * e->n + tk->row0;
    bd.k_start = (int64_t)tk->k_chunk * e->n + tk->k_row0;
    if (e->masked) { /* the chunks' document ids; a window of query rows has them from row0 on
                           (masked plans make windows with documents only for one batch row) */
        const size_t chunk = (size_t)e->d.batch * (size_t)e->n;
        bd.q_doc = e->ids_b ? e->ids_b + (size_t)tk->q_chunk * chunk + (size_t)tk->row0 : NULL;
        bd.k_doc = e->ids_b ? e->ids_b + (size_t)tk->k_chunk * chunk + (size_t)tk->k_row0 : NULL;
    }
    dfa_status st;
    if (e->bwd)
        st = e->ops->bwd(e->ctx, &bd, qs[0], kv[0], kv[1], qs[1], qs[3], qs[2], qres[0], kres[0], kres[1], drp);
    else
        st = e->ops->fwd(e->ctx, &bd, qs[0], kv[0], kv[1], qres[0], qres[1], drp);
    if (st) {
        record(e, st);
        poison_results(e, t);
        return;
    }
    if (direct) {
        if (!e->bwd && tk->row0) /* the lse rows [row0, n) of each head */
            e->ops->copy2d(e->ctx, e->acc[1] + tk->row0, (size_t)e->n * 4, own, (size_t)rows * 4, (size_t)rows * 4,
                           (size_t)e->d.batch * e->d.num_heads);
        return;
    }
    if (qmine) fold_query(e, tk, qres);
    if (e->bwd && kmine) fold_keys(e, tk, kres);
}

static dfa_status wait_timed(exec *e, void *pending) {
    const double t0 = now();
    dfa_status st = e->c->ops->wait(e->c, pending);
    e->t_wait += now() - t0;
    return st;
}

/* The steps. Returns only communication failures (the protocol cannot continue after one);
   compute failures are recorded in e->local and the messages keep flowing. */
static dfa_status run_steps(exec *e, dfa__dist_stats *stats) {
    void *pending;
    dfa_status st = post(e, 0, -1, &pending); /* step 0's inputs: none in our schedules */
    if (!st) st = wait_timed(e, pending);
    for (int t = 0; t < e->T && !st; t++) {
        const double w0 = e->t_wait, t0 = now();
        if ((st = post(e, t + 1, t - 1, &pending))) break;
        /* device timing points: 0/1 around the block, 2/3 around the wait */
        const int marks = stats && e->ops->mark && t < DFA__STATS_MAX_STEPS;
        if (!e->overlap) {
            if (marks) e->ops->mark(e->ctx, t, 2);
            if ((st = wait_timed(e, pending))) break;
            if (marks) e->ops->mark(e->ctx, t, 3);
            pending = NULL;
        }
        if (marks) e->ops->mark(e->ctx, t, 0);
        const double c0 = now(), u0 = stats ? cpu_now() : 0.0;
        compute(e, t);
        const double c1 = now();
        if (marks) e->ops->mark(e->ctx, t, 1);
        if (stats) stats->compute_cpu_s += cpu_now() - u0;
        if (e->overlap) {
            if (marks) e->ops->mark(e->ctx, t, 2);
            if ((st = wait_timed(e, pending))) break;
            if (marks) e->ops->mark(e->ctx, t, 3);
        }
        /* after this step's own block in both modes: the same order of sums, the same bits */
        consume(e, t - 1);
        double t1 = now();
        if (t == e->T - 1) { /* the last step's results travel after it */
            if ((st = post(e, -1, t, &pending)) || (st = wait_timed(e, pending))) break;
            consume(e, t);
            t1 = now();
        }
        if (stats && t < DFA__STATS_MAX_STEPS) {
            stats->compute_s[t] = c1 - c0;
            stats->wait_s[t] = e->t_wait - w0;
            stats->post_s[t] = (t1 - t0) - (c1 - c0) - (e->t_wait - w0);
        }
    }
    return st;
}

/* Strips "fn: " from the front of a message that is about to be prefixed again. */
static const char *unprefixed(const char *msg, const char *fn) {
    const size_t n = strlen(fn);
    return strncmp(msg, fn, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

/* Collective: combines every rank's status (and, when nf > 0, checks that the fields agree).
   On failure every rank returns the status of the lowest failing rank, with its message. */
static dfa_status agree(exec *e, const int64_t *fields, const char *const *names, int nf, int64_t *most,
                        const char *fn) {
    dfa_comm *c = e->c;
    int64_t v[2 + 2 * 16];
    v[0] = e->local ? -((int64_t)c->rank * 16 + (int64_t)e->local) : INT64_MIN;
    for (int i = 0; i < nf; i++) {
        v[1 + i] = fields[i];
        v[1 + nf + i] = -fields[i];
    }
    if (most) v[1 + 2 * nf] = *most; /* a value the ranks take the largest of (head groups) */
    dfa_status st = c->ops->allreduce_max(c, v, 1 + 2 * nf + (most != NULL));
    if (st) return st;
    if (most) *most = v[1 + 2 * nf];
    if (v[0] != INT64_MIN) {
        const int root = (int)(-v[0] / 16);
        const dfa_status rs = (dfa_status)(-v[0] % 16);
        char text[MSG_CAPACITY];
        memset(text, 0, sizeof text);
        if (c->rank == root) snprintf(text, sizeof text, "%s", e->msg);
        if ((st = c->ops->bcast(c, text, sizeof text, root))) return st;
        text[sizeof text - 1] = '\0';
        if (c->rank == root) return dfa__fail(rs, fn, "%s", unprefixed(text, fn));
        return dfa__fail(rs, fn, "rank %d failed: %s", root, unprefixed(text, fn));
    }
    for (int i = 0; i < nf; i++)
        if (v[1 + i] != -v[1 + nf + i])
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "the descriptor differs across ranks: %s is %lld on some ranks and %lld on others "
                             "(every rank must pass the same d)",
                             names[i], (long long)-v[1 + nf + i], (long long)v[1 + i]);
    return DFA_OK;
}

/* Returns a communication failure with the call's name in front of the backend's message. */
static dfa_status backend_failure(dfa_status st, const char *fn) {
    char text[MSG_CAPACITY];
    snprintf(text, sizeof text, "%s", dfa_last_error());
    return dfa__fail(st, fn, "%s", unprefixed(text, fn));
}

/* The shape of a pass of dd on nranks ranks in `groups` head groups: the group's descriptor,
   the chunk, the schedule and its steps (the plan is not touched). */
static void shape_pass(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int nranks, int groups) {
    e->G = groups;
    e->full = dd->attn;
    e->d = dd->attn;
    e->d.num_heads /= groups;
    e->d.num_kv_heads /= groups;
    e->n = dd->attn.seqlen_q;
    e->overlap = dd->overlap;
    e->s = (dfa__sched){kind, nranks, dd->attn.causal, e->n, e->masked ? &e->mplan : NULL};
    e->T = dfa__sched_valid(&e->s) ? dfa__sched_steps(&e->s) : 0;
}

size_t dfa__dist_workspace_bytes(int nranks, const dfa_dist_desc *d, const dfa__compute_ops *ops, int async) {
    if (!d || nranks < 1 || d->attn.seqlen_q < 1 || d->attn.seqlen_q != d->attn.seqlen_k) return 0;
    size_t most = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        exec e;
        memset(&e, 0, sizeof e);
        e.ops = ops;
        e.async = async;
        e.bwd = bwd;
        shape_pass(&e, d, (dfa__sched_kind)d->schedule, nranks, 1);
        if (!e.T) return 0;
        size_t total = 0;
        for (e.rank = 0; e.rank < nranks; e.rank++) { /* ranks differ in their windows */
            if (plan(&e, "dfa_dist_attn_cuda_workspace_bytes")) {
                free_plan(&e);
                return 0;
            }
            const size_t t = layout_of(&e).total;
            if (t > total) total = t;
            free_plan(&e);
        }
        if (dfa__has_mask(&d->attn)) {
            /* A masked plan's steps follow the document ids, unknown here: bound a step's
               buffers. A rank computes one whole-chunk pair a step (one input: the other
               chunk's keys or queries; one result it sends), each peer's pair may send it one
               result, and each peer computing rows of this rank's chunk gets them from a window
               this rank packs (window_bytes: all of it with several batch rows, else its lse).
               A diagonal's lent rows (lend_rows, schedule.h) take both inputs and send both
               results, together at most one whole chunk's: within the same bound, but for the
               rounding of their parts (the slack). */
            const size_t q_in = parts_total(msg_parts(&e, DFA__MSG_QUERY, e.n, e.n));
            const size_t kv_in = parts_total(msg_parts(&e, DFA__MSG_KV, e.n, e.n));
            const size_t qr = parts_total(msg_parts(&e, DFA__MSG_QRESULT, e.n, e.n));
            const size_t kr = bwd ? parts_total(msg_parts(&e, DFA__MSG_KVRESULT, e.n, e.n)) : 0;
            e.rank = 0;
            /* own tasks: a window of up to a chunk of this rank's rows (pairs off the diagonal
               cover only their visible rows), its partial results, a partial dk / dv */
            e.own_window = e.own_q_rows = e.n;
            e.own_kv = bwd;
            e.own_lse = bwd ? 0 : e.n;
            const size_t step = (q_in > kv_in ? q_in : kv_in) + (size_t)nranks * (qr > kr ? qr : kr) +
                                (size_t)(nranks - 1) * window_bytes(&e, e.n) + (size_t)(nranks + 1) * 8 * PART_ALIGN;
            for (int i = 0; i < 3; i++) e.slot_bytes[i] = step;
            const size_t t = layout_of(&e).total;
            if (t > total) total = t;
        }
        if (total > most) most = total;
    }
    dfa__clear_error();
    return most;
}

static int agreed_find(const dfa_comm *c, const int64_t *f) {
    for (int i = 0; i < c->n_agreed; i++)
        if (!memcmp(c->agreed[i], f, sizeof c->agreed[i])) return i;
    return -1;
}

/* Remembers f as agreed, with the head groups of one pass (the other pass's, if known, stays),
   most recent first (the oldest falls off a full list). */
static void agreed_insert(dfa_comm *c, const int64_t *f, int bwd, int groups) {
    int i = agreed_find(c, f);
    int keep[2] = {0, 0};
    if (i >= 0) memcpy(keep, c->agreed_groups[i], sizeof keep);
    else i = c->n_agreed < DFA__AGREED_MAX ? c->n_agreed++ : DFA__AGREED_MAX - 1;
    memmove(c->agreed[1], c->agreed[0], sizeof c->agreed[0] * (size_t)i);
    memmove(c->agreed_groups[1], c->agreed_groups[0], sizeof c->agreed_groups[0] * (size_t)i);
    memcpy(c->agreed[0], f, sizeof c->agreed[0]);
    keep[bwd] = groups;
    memcpy(c->agreed_groups[0], keep, sizeof keep);
}

/* The head groups agreed for f and this pass, or 0 when this pass has not been agreed yet. */
static int agreed_groups_of(const dfa_comm *c, const int64_t *f, int bwd) {
    const int i = agreed_find(c, f);
    return i < 0 ? 0 : c->agreed_groups[i][bwd];
}

/* The agreement of a device backend. The first call with a descriptor agrees on the host, as
   the host backends do on every call (same statuses, same messages on every rank), and the
   communicator remembers the descriptor. Later calls with it agree on the device only: the
   same vector is reduced on the backend's stream, and the outputs are written only where the
   result says every rank passed and the fields agree. A rank whose buffers failed its checks
   then runs as a ghost (it sends scratch, computes nothing, writes nothing) and returns its
   failure; its peers return DFA_OK with their outputs untouched and learn of the failure at
   their next call (check_async). desc_ok: the descriptor itself passed this rank's checks. */
static dfa_status agree_device(exec *e, int desc_ok, const int64_t *f, const char *const *names, int nf,
                               int64_t *groups, const char *fn) {
    dfa_comm *c = e->c;
    dfa_status st = c->ops->check_async(c, fn);
    if (st) return st;
    if (desc_ok && e->ready && agreed_groups_of(c, f, e->bwd) > 0) {
        int64_t v[1 + 2 * DFA__AGREED_FIELDS];
        v[0] = e->local ? -((int64_t)c->rank * 16 + (int64_t)e->local) : INT64_MIN;
        for (int i = 0; i < nf; i++) {
            v[1 + i] = f[i];
            v[1 + nf + i] = -f[i];
        }
        e->ghost = e->local != DFA_OK;
        return c->ops->agree_async(c, v, nf, &e->gate, fn);
    }
    if (c->ops->capturing(c))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "the first call with this descriptor on this communicator is being captured into a "
                         "CUDA graph, but it agrees with the other ranks on the host: make one uncaptured call "
                         "with it first");
    if ((st = agree(e, f, names, nf, groups, fn))) return st;
    agreed_insert(c, f, e->bwd, (int)*groups);
    return DFA_OK;
}

/* The agreement of a masked call on a device backend: always on the host, as on host
   backends (the plan depends on the document ids, which the call may bring new, and is
   built on the host), and so never while the stream is being captured. Peers whose
   descriptor has no mask may be on the device path then (a descriptor that differs across
   ranks in q_doc or the window): as with any descriptor some ranks remember and others do
   not, that is the caller's error and ends in the communicator's timeout at worst. */
static dfa_status agree_masked_device(exec *e, const int64_t *f, const char *const *names, int nf, int64_t *groups,
                                      const char *fn) {
    dfa_comm *c = e->c;
    dfa_status st = c->ops->check_async(c, fn);
    if (st) return st;
    if (c->ops->capturing(c))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "a call with documents or a window (d->attn.q_doc, DFA_FLAG_WINDOW) is being captured into a "
                         "CUDA graph, but it agrees with the other ranks and plans on the host: make masked calls "
                         "outside the capture");
    return agree(e, f, names, nf, groups, fn);
}

/* Plans and allocates a pass over groups of heads: e->d becomes one group's descriptor. */
static dfa_status prepare(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups, const char *fn) {
    free_plan(e);
    shape_pass(e, dd, kind, e->c->size, groups);
    dfa_status st = plan(e, fn);
    if (!st) st = allocate(e, fn);
    e->ready = st == DFA_OK;
    return st;
}

/* Bytes one pass in `groups` groups takes on this rank (0 when it cannot be planned). */
static size_t workspace_for(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups) {
    exec t = *e;
    t.steps = NULL;
    shape_pass(&t, dd, kind, e->c->size, groups);
    const size_t bytes = plan(&t, "workspace") ? 0 : layout_of(&t).total;
    free_plan(&t);
    return bytes;
}

/* How many groups of heads a call runs in: 1, unless the workspace of a whole pass does not
   fit (device backends: in the device's free memory plus the workspace the communicator
   already holds, less a margin; or in the caller's workspace), then the fewest groups (a
   divisor of num_kv_heads) whose workspace fits. Each group is the same computation on its
   heads, so results are the same bits for any count; only the memory and the number of
   steps change. A test hook can force a count (dfa__dist_force_head_groups). */
static int choose_groups(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind) {
    dfa_comm *c = e->c;
    const int hkv = dd->attn.num_kv_heads;
    if (c->force_groups > 0 && hkv % c->force_groups == 0) return c->force_groups;
    if (!e->async || !e->ops->free_memory) return 1;
    size_t budget;
    if (c->ws_external) {
        budget = c->ws_bytes;
    } else {
        const size_t free_b = e->ops->free_memory() + c->ws_bytes, margin = free_b / 50 + ((size_t)256 << 20);
        budget = free_b > margin ? free_b - margin : 0;
    }
    for (int g = 1; g <= hkv; g++) {
        if (hkv % g) continue;
        const size_t need = workspace_for(e, dd, kind, g);
        if (need && need <= budget) return g;
    }
    return hkv; /* the smallest workspace; its allocation reports what is missing */
}

/* Copies group g's heads of the caller's inputs into the packed buffers the pass reads. */
static void pack_group(exec *e, const dfa__dist_io *io, int g) {
    const dfa_attn_desc *d = &e->d, *f = &e->full;
    const size_t es = dfa__dtype_size(d->dtype), B = (size_t)d->batch, n = (size_t)e->n, D = (size_t)d->head_dim;
    const size_t hq = (size_t)d->num_heads, hk = (size_t)d->num_kv_heads;
    const size_t qrow = hq * D * es, krow = hk * D * es;
    const size_t qb = align_up(B * n * qrow), kb = align_up(B * n * krow);
    char *p = e->pack;
    e->gio = (dfa__dist_io){0};
    const void *qsrc[3] = {io->q, io->o, io->dout};
    const void **qdst[3] = {&e->gio.q, &e->gio.o, &e->gio.dout};
    for (int i = 0; i < (e->bwd ? 3 : 1); i++, p += qb) {
        *qdst[i] = p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, qrow, (const char *)qsrc[i] + (size_t)g * qrow, (size_t)f->num_heads * D * es,
                           qrow, B * n);
    }
    const void *ksrc[2] = {io->k, io->v};
    const void **kdst[2] = {&e->gio.k, &e->gio.v};
    for (int i = 0; i < 2; i++, p += kb) {
        *kdst[i] = p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, krow, (const char *)ksrc[i] + (size_t)g * krow,
                           (size_t)f->num_kv_heads * D * es, krow, B * n);
    }
    if (e->bwd) {
        e->gio.lse = (const float *)(void *)p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, hq * n * 4, (const char *)io->lse + (size_t)g * hq * n * 4,
                           (size_t)f->num_heads * n * 4, hq * n * 4, B);
    }
}

/* Whether this call's step-0 diagonal writes its direct parts (see exec) into the caller's
   outputs. Only where a failure after it cannot break a promise: device backends, once every
   rank has passed the agreement on the host (e->gate NULL: masked calls always, others on
   their first call), in one group of heads (the caller's rows, not packed ones). A host
   backend writes no output before its closing agreement, so that a rank failing midway leaves
   every rank's outputs untouched (test_dist_errors); tests force the direct parts there
   (dfa__dist_force_direct) to check them against the accumulators, bit for bit. */
static int use_direct(const exec *e) {
    const int force = e->c->force_direct;
    if (force < 0 || !(e->async || force > 0) || e->gate || e->G != 1 || e->ghost || !first_is_diagonal(e)) return 0;
    return e->bwd ? e->io->dk && e->io->dv && e->k_direct1 > e->k_direct0 : e->io->o_out && e->q_direct < e->n;
}

/* Rows [r0, r1) of each batch row of a float32 accumulator ([batch, n, width]) rounded into dst
   ([batch, n] rows of pitch elements, the group's heads). */
static void store_rows(exec *e, dfa_dtype t, const float *acc, char *dst, int64_t width, int64_t pitch, int r0, int r1) {
    const size_t es = dfa__dtype_size(t);
    if (r0 >= r1) return;
    if (r0 == 0 && r1 == e->n) {
        e->ops->store(e->ctx, t, acc, dst, (int64_t)e->d.batch * e->n, width, pitch, e->gate);
        return;
    }
    for (int b = 0; b < e->d.batch; b++) {
        const int64_t row = (int64_t)b * e->n + r0;
        e->ops->store(e->ctx, t, acc + row * width, dst + (size_t)(row * pitch) * es, r1 - r0, width, pitch, e->gate);
    }
}

/* Group g's float32 accumulators, rounded into its heads of the caller's outputs (all but the
   direct parts the diagonal wrote itself). */
static void store_group(exec *e, const dfa__dist_io *io, int g) {
    const dfa_attn_desc *d = &e->d, *f = &e->full;
    const size_t es = dfa__dtype_size(d->dtype);
    const int64_t D = d->head_dim;
    const int64_t wq = d->num_heads * D, wk = d->num_kv_heads * D;
    const int64_t pq = (int64_t)f->num_heads * D, pk = (int64_t)f->num_kv_heads * D;
    const int q_end = e->direct && !e->bwd ? e->q_direct : e->n;
    if (e->bwd) {
        /* dk, dv: the keys below and above the direct ones (all of them without) */
        const int k0 = e->direct ? e->k_direct0 : e->n, k1 = e->direct ? e->k_direct1 : e->n;
        store_rows(e, d->dtype, e->acc[0], (char *)io->dq + (size_t)(g * wq) * es, wq, pq, 0, e->n);
        for (int i = 1; i < 3; i++) {
            char *dst = (char *)(i == 1 ? io->dk : io->dv) + (size_t)(g * wk) * es;
            store_rows(e, d->dtype, e->acc[i], dst, wk, pk, 0, k0);
            store_rows(e, d->dtype, e->acc[i], dst, wk, pk, k1, e->n);
        }
    } else {
        store_rows(e, d->dtype, e->acc[0], (char *)io->o_out + (size_t)(g * wq) * es, wq, pq, 0, q_end);
        if (io->lse_out)
            e->ops->store(e->ctx, DFA_F32, e->acc[1], io->lse_out + (size_t)g * d->num_heads * e->n, d->batch,
                          (int64_t)d->num_heads * e->n, (int64_t)f->num_heads * e->n, e->gate);
    }
}

/* The mask fields of two descriptors (and the rows they cover) are the same. */
static int same_mask(const dfa_attn_desc *a, const dfa_attn_desc *b) {
    const int wa = (a->flags & DFA_FLAG_WINDOW) != 0, wb = (b->flags & DFA_FLAG_WINDOW) != 0;
    return a->batch == b->batch && a->seqlen_q == b->seqlen_q && a->causal == b->causal && wa == wb &&
           (!wa || (a->window_left == b->window_left && a->window_right == b->window_right)) &&
           (a->q_doc != NULL) == (b->q_doc != NULL);
}

/* The chunk pairs' counts (dfa__mask_pair_work) into m, or the communicator's copy from the last
   masked call when its mask and every rank's ids (`bytes` of them, 0 without documents) are the
   same: the count walks every row, about a millisecond per call at 128k tokens, while the GPU
   waits for the plan. Every rank holds the same ids, so every rank hits or misses alike. On a
   failure to keep the copy the count stands and the next call counts again. */
static void mask_counts(dfa_comm *c, const dfa_attn_desc *d, const int32_t *ids, size_t bytes, dfa__pair_counts *m) {
    dfa__pair_counts *cache = &c->mask_cache;
    if (cache->work && same_mask(&c->mask_key, d) && c->mask_key_bytes == bytes &&
        (!bytes || memcmp(c->mask_key_ids, ids, bytes) == 0) && (cache->prefix != NULL) == (m->prefix != NULL)) {
        dfa__pair_counts_copy(m, cache, c->size);
        return;
    }
    dfa__mask_pair_work(d, c->size, ids, m->work, m->rows, m->keys, m->cost, m->prefix);
    mask_cache_clear(c);
    c->mask_key_ids = bytes ? malloc(bytes) : NULL;
    if (dfa__pair_counts_alloc(cache, c->size, m->prefix != NULL) || (bytes && !c->mask_key_ids)) {
        mask_cache_clear(c);
        return;
    }
    dfa__pair_counts_copy(cache, m, c->size);
    if (bytes) memcpy(c->mask_key_ids, ids, bytes);
    c->mask_key = *d;
    c->mask_key_bytes = bytes;
}

/* Masks, after the ranks agreed on the descriptor (collective; every backend): every rank's
   document ids to every rank (one allgather: 4 bytes a token, next to kilobytes of k and v),
   the chunk pairs' visible work, the masked plan, and the pass re-planned on it. A failure on
   any rank (allocation, a copy, bad ids) fails every rank.
   On a device backend the caller's ids are device memory: they are gathered on the device
   into the communicator's mask_ids (the blocks read them there), then copied to the host
   (which synchronises the call's stream) to be checked and to build the plan, the same
   function as on the host. Host backends checked their ids before the agreement
   (dist_api.c); device ones can only check them here.
   With DFA_FLAG_SAME_DOCS (the caller's promise that the ids are those of the last call with
   documents) nothing is exchanged or read: the ids come from the communicator's copies (the
   host one mask_counts keeps, the device one in mask_ids, which the code below keeps equal),
   provided every rank has them for this mask (one more value in the first agreement). */
static dfa_status setup_mask(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups, const char *fn) {
    dfa_comm *c = e->c;
    const int P = c->size, n = dd->attn.seqlen_q, docs = dd->attn.q_doc != NULL, device = e->ops->to_host != NULL;
    const size_t chunk = (size_t)dd->attn.batch * (size_t)n, bytes = sizeof(int32_t) * chunk * (size_t)P;
    dfa_status st;
    /* a busy diagonal may lend its first rows, and pairs split (schedule.h) */
    const int lend = dfa__plan_lends(&dd->attn, kind);
    const int counts_failed = dfa__pair_counts_alloc(&e->mc, P, lend);
    if (docs) e->ids = malloc(bytes);
    if (counts_failed || (docs && !e->ids))
        record(e, dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the masked plan"));
    /* DFA_FLAG_SAME_DOCS: every rank's ids as the communicator kept them (mask_counts), when every
       rank kept them for this mask; one rank without them makes every rank read the ids */
    int64_t read_ids = docs && !((dd->attn.flags & DFA_FLAG_SAME_DOCS) && c->mask_key_ids &&
                                 c->mask_key_bytes == bytes && same_mask(&c->mask_key, &dd->attn));
    if (docs && device && c->mask_ids_bytes < bytes) {
        /* (the context exists: the pass was prepared before this, with the same shapes; the kept
           ids described the old buffer) */
        mask_cache_clear(c);
        read_ids = 1;
        if (c->mask_ids) e->ops->release(c->ctx, c->mask_ids);
        c->mask_ids = e->ops->alloc(c->ctx, bytes);
        c->mask_ids_bytes = c->mask_ids ? bytes : 0;
        if (!c->mask_ids)
            record(e, dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn,
                                "cannot allocate %zu bytes of device memory for every rank's document ids", bytes));
    }
    if ((st = agree(e, NULL, NULL, 0, docs ? &read_ids : NULL, fn))) return st; /* docs: the same on every rank */
    const double t_ids = now();
    if (docs && !read_ids) {
        memcpy(e->ids, c->mask_key_ids, bytes); /* (allocated: a failed malloc fails the agreement above) */
        e->ids_b = device ? (const int32_t *)c->mask_ids : e->ids;
    } else if (docs) {
        int32_t *gathered = device ? (int32_t *)c->mask_ids : e->ids;
        st = c->ops->allgather(c, dd->attn.q_doc, gathered, sizeof(int32_t) * chunk);
        e->ids_b = gathered;
        if (!st && device) {
            record(e, e->ops->to_host(e->ctx, e->ids, gathered, bytes));
            if (!e->local) { /* this rank's own ids, with the rule of the host calls */
                dfa_attn_desc own = dd->attn;
                own.q_doc = own.k_doc = e->ids + (size_t)c->rank * chunk;
                record(e, dfa__check_docs_host(&own, fn));
            }
        }
        /* on the device the kept ids must stay those in mask_ids, which now holds these: a call
           that does not count them (mask_counts) forgets the old ones */
        if (device && (st || e->local)) mask_cache_clear(c);
        if (st) return st;
    }
    const double t_plan = now();
    if (c->stats) c->stats->setup_ids_s = t_plan - t_ids;
    if (!e->local) {
        mask_counts(c, &dd->attn, e->ids, docs ? bytes : 0, &e->mc);
        const dfa__sched s = {kind, P, dd->attn.causal, n, NULL};
        const dfa__plan_counts in = dfa__plan_inputs(&dd->attn, &e->mc, kind,
                                                     c->fold_cost > 0 ? c->fold_cost - 1 : DFA__PLAN_FOLD_COST,
                                                     c->split_mode + 1 /* dfa__dist_set_split_pairs */);
        if (dfa__sched_plan_build(&s, &in, &e->mplan)) {
            record(e, dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the masked plan"));
        } else {
            e->masked = 1;
            if (c->stats) count_pieces(&e->mplan, n, &c->stats->pieces, &c->stats->bands);
        }
    }
    if (!e->local) record(e, prepare(e, dd, kind, groups, fn));
    if (c->stats) c->stats->setup_mask_plan_s = now() - t_plan;
    return agree(e, NULL, NULL, 0, NULL, fn);
}

dfa_status dfa__dist_reserve(dfa_comm *c, const dfa_dist_desc *dd, dfa__pass pass, int *groups) {
    exec e;
    memset(&e, 0, sizeof e);
    e.c = c;
    e.ops = c->compute;
    e.rank = c->rank;
    e.bwd = pass == DFA__PASS_BWD;
    e.async = c->ops->agree_async != NULL;
    const dfa__sched_kind kind = (dfa__sched_kind)dd->schedule;
    const int g = choose_groups(&e, dd, kind);
    const dfa_status st = prepare(&e, dd, kind, g, "dfa__dist_reserve");
    release(&e);
    if (!st && groups) *groups = g;
    return st;
}

dfa_status dfa__dist_run(dfa_comm *c, const dfa_dist_desc *dd, dfa__sched_kind kind, dfa__pass pass,
                         const dfa__dist_io *io, dfa_status local, const char *fn) {
    const double start = now();
    exec e;
    memset(&e, 0, sizeof e);
    e.c = c;
    e.ops = c->compute;
    e.io = io;
    e.rank = c->rank;
    e.bwd = pass == DFA__PASS_BWD;
    e.local = DFA_OK;
    e.async = c->ops->agree_async != NULL;
    e.G = 1;
    record(&e, local);

    /* Every field the ranks must share (q_start/k_start are ignored by contract). */
    static const char *const names[] = {"d->attn.batch",        "d->attn.seqlen_q", "d->attn.seqlen_k",
                                        "d->attn.num_heads",    "d->attn.num_kv_heads", "d->attn.head_dim",
                                        "d->attn.dtype",        "d->attn.causal",   "d->attn.softmax_scale (bits)",
                                        "d->attn.flags",        "d->schedule",      "d->overlap",
                                        "d->attn.window_left",  "d->attn.window_right",
                                        "d->attn.q_doc (set or NULL)"};
    int64_t f[DFA__AGREED_FIELDS] = {0};
    if (dd) {
        const dfa_attn_desc *a = &dd->attn;
        uint32_t bits;
        memcpy(&bits, &a->softmax_scale, 4);
        const int64_t vals[DFA__AGREED_FIELDS] = {a->batch, a->seqlen_q, a->seqlen_k, a->num_heads, a->num_kv_heads,
                                                  a->head_dim, (int64_t)a->dtype, a->causal, (int64_t)bits,
                                                  (int64_t)a->flags, (int64_t)kind, dd->overlap, a->window_left,
                                                  a->window_right, a->q_doc != NULL};
        memcpy(f, vals, sizeof f);
    }
    /* Device backends pass dd only when the descriptor itself is valid: a rank whose buffers
       failed may then run as a ghost (see agree_device), so it plans and allocates too. A
       descriptor agreed before keeps the head groups agreed then. */
    int64_t groups = 1;
    const int masked = dd && dfa__has_mask(&dd->attn);
    if (c->stats) memset(c->stats, 0, sizeof *c->stats); /* the setup's parts are timed into it as it goes */
    if (!e.local || (e.async && dd)) {
        const int known = e.async ? agreed_groups_of(c, f, e.bwd) : 0;
        groups = known > 0 ? known : choose_groups(&e, dd, kind);
        record(&e, prepare(&e, dd, kind, (int)groups, fn));
    }
    const double t_agree = now();
    dfa_status st = e.async && masked ? agree_masked_device(&e, f, names, DFA__AGREED_FIELDS, &groups, fn)
                    : e.async         ? agree_device(&e, dd != NULL, f, names, DFA__AGREED_FIELDS, &groups, fn)
                                      : agree(&e, f, names, DFA__AGREED_FIELDS, NULL, fn);
    if (c->stats) {
        c->stats->setup_plan_s = t_agree - start;
        c->stats->setup_agree_s = now() - t_agree;
    }
    if (!st && groups != e.G && (st = prepare(&e, dd, kind, (int)groups, fn))) /* another rank needs more groups */
        st = dfa__fail(DFA_ERR_INTERNAL, fn, "could not re-plan in %lld head groups: %s", (long long)groups,
                       dfa_last_error());
    if (!st && masked) st = setup_mask(&e, dd, kind, (int)groups, fn);
    if (st) {
        release(&e);
        return st == DFA_ERR_BACKEND ? backend_failure(st, fn) : st;
    }

    dfa__dist_stats *stats = c->stats;
    if (stats) {
        stats->steps = e.T;
        stats->setup_s = now() - start;
    }
    e.direct = use_direct(&e);
    double fin = now();
    for (int g = 0; g < e.G && !st; g++) {
        if (e.G > 1) {
            pack_group(&e, io, g);
            e.io = &e.gio;
        }
        if (!e.ghost) reset_acc(&e);
        st = run_steps(&e, stats);
        if (!st && e.ops->take_error) record(&e, e.ops->take_error(e.ctx, fn));
        if (st) { /* a communication failure: peers may be stuck; nothing more can be exchanged safely */
            st = backend_failure(st, fn);
            release(&e);
            return st;
        }
        fin = now();
        if (e.async) {
            /* No closing round trip on the device: a rank that failed before the steps ran as a
               ghost (its peers' outputs are gated off on the device); a launch failure during the
               steps is this rank's own (its later results are NaN: poison_results). */
            if (e.local) {
                if (g + 1 < e.G) continue; /* the peers still expect every group's messages */
                const dfa_status ls = e.local;
                char text[MSG_CAPACITY];
                snprintf(text, sizeof text, "%s", e.msg);
                release(&e);
                return dfa__fail(ls, fn, "%s", unprefixed(text, fn));
            }
        } else if ((st = agree(&e, NULL, NULL, 0, NULL, fn))) {
            /* (with head groups on the host, the groups before a failure have been written) */
            release(&e);
            return st == DFA_ERR_BACKEND ? backend_failure(st, fn) : st;
        }
        /* Everyone succeeded: round the accumulators into the caller's outputs. */
        store_group(&e, io, g);
    }
    if (e.ops->take_error && (st = e.ops->take_error(e.ctx, fn))) {
        release(&e);
        return st;
    }
    if (stats && e.ops->read_marks) {
        const int n = e.T < DFA__STATS_MAX_STEPS ? e.T : DFA__STATS_MAX_STEPS;
        if ((st = e.ops->read_marks(e.ctx, n, stats->compute_s, stats->wait_s))) {
            release(&e);
            return st;
        }
        for (int t = 0; t < n; t++) stats->post_s[t] = 0.0; /* on the device, posting is part of the wait */
    }
    if (stats) {
        stats->finish_s = now() - fin;
        stats->total_s = now() - start;
        stats->bytes_sent = e.sent;
        stats->bytes_recv = e.received;
    }
    release(&e);
    dfa__clear_error();
    return DFA_OK;
}
