/* The plan of a distributed pass: the messages of every step and their buffers, the
 * workspace's layout and its allocation, and the head groups the memory allows. */
#include "exec_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../common/dtype.h"
#include "../common/error.h"
#include "../common/mask.h"

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

void dfa__exec_free_plan(exec *e) {
    if (!e->steps) return;
    for (int t = 0; t < e->T; t++) free(e->steps[t].msgs);
    free(e->steps);
    e->steps = NULL;
}

/* The compute context depends on the storage type and the block sizes only. */
static int same_shapes(const dfa_attn_desc *a, const dfa_attn_desc *b) {
    return a->batch == b->batch && a->seqlen_q == b->seqlen_q && a->seqlen_k == b->seqlen_k &&
           a->num_heads == b->num_heads && a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
           a->head_dim_v == b->head_dim_v && a->dtype == b->dtype;
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
    const size_t no = (size_t)d->batch * e->n * d->num_heads * dv_of(e); /* o, dout */
    const size_t nv = (size_t)d->batch * e->n * d->num_kv_heads * dv_of(e);
    const size_t nl = (size_t)d->batch * d->num_heads * e->n;
    const size_t most = nq > nk ? nq : nk, most_v = no > nv ? no : nv;
    for (int i = 0; i < 3; i++) L.slot[i] = align_up(e->slot_bytes[i]);
    const size_t window = e->own_window ? window_bytes(e, e->own_window) : 0;
    const size_t results = (e->own_q_rows ? parts_total(msg_parts(e, DFA__MSG_QRESULT, e->own_q_rows, e->n)) : 0) +
                           (e->own_kv ? parts_total(msg_parts(e, DFA__MSG_KVRESULT, e->n, e->n)) : 0) +
                           align_up((size_t)d->batch * d->num_heads * e->own_lse * 4);
    L.window_results = align_up(window + results);
    L.acc[0] = e->bwd ? nq : no; /* bwd: dq, dk, dv; fwd: o, lse */
    L.acc[1] = e->bwd ? nk : nl;
    L.acc[2] = e->bwd ? nv : 0;
    L.ghost = e->async ? align_up((most > most_v ? most : most_v) * es) : 0;
    L.scratch = e->ops->scratch_bytes ? align_up(e->ops->scratch_bytes(d)) : 0;
    /* a group's packed inputs: q (and o, dout, lse in the backward), k, v */
    L.pack = e->G > 1 ? align_up(nq * es) + (e->bwd ? 2 * align_up(no * es) : 0) + align_up(nk * es) + align_up(nv * es) +
                            (e->bwd ? align_up(nl * 4) : 0)
                      : 0;
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
   accumulators twice the size of the chunk's queries (and, backward, of its keys), a large
   share of a masked call that leaves only a few percent of the pairs visible. Merging a first result into "nothing seen" (o = 0, lse = -inf; sums 0)
   gives that result, so the outputs keep their values. */
int dfa__exec_first_is_diagonal(const exec *e) {
    if (e->T < 1 || !e->steps || !e->steps[0].has_task) return 0;
    return own_diagonal_direct(e, &e->steps[0].task);
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
                dfa__exec_free_plan(&e);
                return 0;
            }
            const size_t t = layout_of(&e).total;
            if (t > total) total = t;
            dfa__exec_free_plan(&e);
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

/* Plans and allocates a pass over groups of heads: e->d becomes one group's descriptor. */
dfa_status dfa__exec_prepare(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups,
                             const char *fn) {
    dfa__exec_free_plan(e);
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
    dfa__exec_free_plan(&t);
    return bytes;
}

/* How many groups of heads a call runs in: 1, unless the workspace of a whole pass does not
   fit (device backends: in the device's free memory plus the workspace the communicator
   already holds, less a margin; or in the caller's workspace), then the fewest groups (a
   divisor of num_kv_heads) whose workspace fits. Each group is the same computation on its
   heads, so results are the same bits for any count; only the memory and the number of
   steps change. A test hook can force a count (dfa__dist_force_head_groups). */
int dfa__exec_choose_groups(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind) {
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
