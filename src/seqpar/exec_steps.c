/* The steps of a distributed pass: posting each step's transfers, this rank's block, folding
 * the partial results into the accumulators, and the overlap of transfers with blocks. */
#include "exec_internal.h"

#include <math.h>
#include <stdlib.h>

#include "../common/dtype.h"
#include "../common/error.h"

/* The parts of a window of this rank's query rows [r0, r0 + rows) (fwd: q; bwd: q, o, dout,
   lse): in the caller's tensors where window_in_place, else in buf (window_bytes of it). */
static void window_parts(exec *e, int r0, int rows, char *buf, void *out[4]) {
    if (!window_in_place(e)) {
        parts_at(msg_parts(e, DFA__MSG_QUERY, rows, e->n), buf, out);
        return;
    }
    const size_t es = dfa__dtype_size(e->d.dtype), H = (size_t)e->d.num_heads;
    const size_t off = (size_t)r0 * H * e->d.head_dim * es, voff = (size_t)r0 * H * dv_of(e) * es;
    out[0] = (char *)(void *)e->io->q + off;
    out[1] = e->bwd ? (char *)(void *)e->io->o + voff : NULL;
    out[2] = e->bwd ? (char *)(void *)e->io->dout + voff : NULL;
    out[3] = e->bwd ? buf : NULL;
}

/* Copies what window_parts keeps in its buffer: every part, or (in place) the lse rows. */
static void pack_query(exec *e, int r0, int rows, void *dst[4]) {
    const dfa_attn_desc *d = &e->d;
    const size_t es = dfa__dtype_size(d->dtype), H = (size_t)d->num_heads;
    const size_t rows_of_part[3] = {H * d->head_dim * es, H * dv_of(e) * es, H * dv_of(e) * es}; /* q; o, dout */
    const size_t n = (size_t)e->n, r = (size_t)rows, B = (size_t)d->batch;
    const void *src[3] = {e->io->q, e->io->o, e->io->dout};
    for (int i = 0; i < (e->bwd ? 3 : 1) && !window_in_place(e); i++) {
        const size_t row = rows_of_part[i];
        e->ops->copy2d(e->ctx, dst[i], r * row, (const char *)src[i] + (size_t)r0 * row, n * row, r * row, B);
    }
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
        out[0] = (char *)(void *)e->io->k + key_rows_offset(e, &pm->m.task, 0);
        out[1] = (char *)(void *)e->io->v + key_rows_offset(e, &pm->m.task, 1);
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
        e->ops->merge_rows(e->ctx, e->d.batch, e->d.num_heads, dv_of(e), e->n, t->row0, rows, e->acc[0],
                           e->acc[1], res[0], res[1]);
}

/* Folds a partial dk, dv of this rank's keys (all, or the rows [k_row0, k_row1) the task read). */
static void fold_keys(exec *e, const dfa__task *t, void *res[2]) {
    const int kr = dfa__task_key_rows(t, e->n);
    for (int i = 0; i < 2; i++) { /* dk, dv */
        const int64_t width = (int64_t)e->d.num_kv_heads * (i ? dv_of(e) : e->d.head_dim);
        if (kr == e->n) e->ops->add_f32(e->ctx, e->acc[1 + i], res[i], (int64_t)e->d.batch * e->n * width);
        else add_rows(e, e->acc[1 + i], res[i], t->k_row0, kr, width);
    }
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
    const int direct = t == 0 && dfa__exec_first_is_diagonal(e); /* into the accumulators themselves */
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
        kv[0] = (char *)(void *)e->io->k + key_rows_offset(e, tk, 0);
        kv[1] = (char *)(void *)e->io->v + key_rows_offset(e, tk, 1);
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
    void *b4[4] = {NULL, NULL, NULL, NULL}; /* (a backward query result has one part) */
    if (direct) { /* (rows after lent ones: one batch row, so the rows are contiguous; the lse is not) */
        b4[0] = e->acc[0] + (size_t)tk->row0 * e->d.num_heads * (e->bwd ? e->d.head_dim : dv_of(e)); /* dq; o */
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
        const size_t qrow = (size_t)e->d.num_heads * dv_of(e) * dfa__dtype_size(e->d.dtype); /* of o */
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
    /* partial results merge without the sinks; the forward adds them once to the merged rows and
       the backward's lse holds them already (dfa__exec_store_group gives dsinks) */
    bd.sinks = NULL;
    bd.dsinks = NULL;
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
dfa_status dfa__exec_run_steps(exec *e, dfa__dist_stats *stats) {
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
