/* Schedule checker and makespan model. See simulate.h. */
#include "simulate.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t len, const char *fmt, ...) {
    if (err && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int cmp_task(const void *a, const void *b) {
    const dfa__task *x = &((const dfa__placed_task *)a)->t, *y = &((const dfa__placed_task *)b)->t;
    if (x->q_chunk != y->q_chunk) return x->q_chunk < y->q_chunk ? -1 : 1;
    if (x->k_chunk != y->k_chunk) return x->k_chunk < y->k_chunk ? -1 : 1;
    if (x->row0 != y->row0) return x->row0 < y->row0 ? -1 : 1;
    return x->k_row0 < y->k_row0 ? -1 : x->k_row0 > y->k_row0;
}

/* A message as seen from outside: who sends what to whom for which step. */
typedef struct {
    int src, dst, kind, step;
    dfa__task t;
} wire_msg;

static int cmp_wire(const void *a, const void *b) {
    const wire_msg *x = a, *y = b;
    const int kx[] = {x->step, x->src, x->dst, x->kind, x->t.q_chunk, x->t.k_chunk, x->t.row0, x->t.row1};
    const int ky[] = {y->step, y->src, y->dst, y->kind, y->t.q_chunk, y->t.k_chunk, y->t.row0, y->t.row1};
    for (int i = 0; i < 8; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* Coverage: sorted by (q, k, row0), each needed pair's row intervals must tile [0, n). */
int dfa__sim_check_tasks(const dfa__sched *s, dfa__placed_task *all, int ntask, char *err, size_t len) {
    const int P = s->nranks, n = s->rows;
    for (int i = 0; i < ntask; i++) {
        const dfa__task *t = &all[i].t;
        if (t->q_chunk < 0 || t->q_chunk >= P || t->k_chunk < 0 || t->k_chunk >= P || t->row0 < 0 ||
            t->row1 > n || t->row0 >= t->row1)
            return fail(err, len, "rank %d step %d: malformed task q%d[%d:%d] k%d", all[i].rank, all[i].step,
                        t->q_chunk, t->row0, t->row1, t->k_chunk);
        if (s->causal && t->k_chunk > t->q_chunk)
            return fail(err, len, "rank %d step %d: q%d x k%d is entirely masked (wasted work)", all[i].rank,
                        all[i].step, t->q_chunk, t->k_chunk);
        const int want_mask = s->causal && t->q_chunk == t->k_chunk;
        if (t->causal_mask != want_mask)
            return fail(err, len, "rank %d step %d: q%d x k%d has causal_mask %d, expected %d", all[i].rank,
                        all[i].step, t->q_chunk, t->k_chunk, t->causal_mask, want_mask);
    }
    qsort(all, (size_t)ntask, sizeof *all, cmp_task);
    int idx = 0;
    for (int q = 0; q < P; q++)
        for (int k = 0; k < (s->causal ? q + 1 : P); k++) {
            int covered = 0; /* rows [0, covered) done exactly once so far */
            while (idx < ntask && all[idx].t.q_chunk == q && all[idx].t.k_chunk == k) {
                if (all[idx].t.row0 != covered)
                    return fail(err, len, "q%d x k%d: rows %d..%d computed %s (rank %d step %d)", q, k,
                                all[idx].t.row0 < covered ? all[idx].t.row0 : covered,
                                all[idx].t.row0 < covered ? covered : all[idx].t.row0,
                                all[idx].t.row0 < covered ? "twice" : "by nobody", all[idx].rank, all[idx].step);
                covered = all[idx].t.row1;
                idx++;
            }
            if (covered != n)
                return fail(err, len, "q%d x k%d: rows %d..%d computed by nobody", q, k, covered, n);
        }
    if (idx != ntask) return fail(err, len, "q%d x k%d computed but not needed", all[idx].t.q_chunk, all[idx].t.k_chunk);
    return 0;
}

int dfa__sim_check(const dfa__sched *s, int bwd, char *err, size_t errlen) {
    if (!dfa__sched_valid(s)) return fail(err, errlen, "invalid schedule description");
    const int P = s->nranks, T = dfa__sched_steps(s), cap = dfa__sched_max_messages(s);
    if (T < 1) return fail(err, errlen, "%d steps", T);
    dfa__placed_task *all = malloc(sizeof *all * (size_t)P * (size_t)T);
    dfa__msg *msgs = malloc(sizeof *msgs * (size_t)cap);
    wire_msg *sends = malloc(sizeof *sends * (size_t)cap * (size_t)P);
    wire_msg *recvs = malloc(sizeof *recvs * (size_t)cap * (size_t)P);
    int rc = -1;
    if (!all || !msgs || !sends || !recvs) {
        fail(err, errlen, "out of memory");
        goto done;
    }
    int ntask = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < P; r++) {
            dfa__task tk;
            if (dfa__sched_task(s, r, t, &tk)) all[ntask++] = (dfa__placed_task){t, r, tk};
        }
    for (int t = 0; t < T; t++) {
        int ns = 0, nr = 0;
        for (int r = 0; r < P; r++) {
            const int m = dfa__sched_messages(s, bwd, r, t, msgs, cap);
            if (m < 0) {
                fail(err, errlen, "rank %d step %d: more messages than the bound %d", r, t, cap);
                goto done;
            }
            for (int i = 0; i < m; i++) {
                const dfa__msg *x = &msgs[i];
                if (x->peer < 0 || x->peer >= P || x->peer == r || x->step != t) {
                    fail(err, errlen, "rank %d step %d: malformed message (peer %d, step %d)", r, t, x->peer, x->step);
                    goto done;
                }
                if (t == 0 && dfa__msg_is_input(x->kind)) {
                    /* the executor could post these in a pre-step, but none of our schedules should need it */
                    fail(err, errlen, "rank %d: step 0 needs a remote input (kind %d)", r, (int)x->kind);
                    goto done;
                }
                wire_msg w = {x->send ? r : x->peer, x->send ? x->peer : r, (int)x->kind, t, x->task};
                if (x->send) sends[ns++] = w;
                else recvs[nr++] = w;
            }
        }
        qsort(sends, (size_t)ns, sizeof *sends, cmp_wire);
        qsort(recvs, (size_t)nr, sizeof *recvs, cmp_wire);
        for (int i = 0; i < (ns > nr ? ns : nr); i++) {
            if (i >= ns || i >= nr || cmp_wire(&sends[i], &recvs[i]) != 0) {
                const wire_msg *w = i < nr && (i >= ns || cmp_wire(&recvs[i], &sends[i]) < 0) ? &recvs[i] : &sends[i];
                const int is_recv = w == &recvs[i];
                fail(err, errlen, "step %d: rank %d %s kind %d (q%d[%d:%d] k%d) %s rank %d, which has no match", t,
                     is_recv ? w->dst : w->src, is_recv ? "expects" : "sends", w->kind, w->t.q_chunk, w->t.row0,
                     w->t.row1, w->t.k_chunk, is_recv ? "from" : "to", is_recv ? w->src : w->dst);
                goto done;
            }
        }
    }
    rc = s->plan ? dfa__sim_check_masked_tasks(s, all, ntask, err, errlen)
                 : dfa__sim_check_tasks(s, all, ntask, err, errlen);
done:
    free(all);
    free(msgs);
    free(sends);
    free(recvs);
    return rc;
}

double dfa__task_flops(const dfa__task *t, int rows, const dfa__msg_shape *sh, int bwd) {
    const double f = 4.0 * sh->batch * sh->heads * sh->head_dim * (double)dfa__task_pairs(t, rows);
    return bwd ? 2.5 * f : f;
}

void dfa__sim_free(dfa__sim_result *r) {
    if (!r) return;
    free(r->compute);
    free(r->finish);
    free(r->step_compute);
    free(r->step_wait);
    memset(r, 0, sizeof *r);
}

/* Which link a message between ranks a and b takes: 0 inside a node, 1 between nodes. */
static int link_of(const dfa__sim_model *m, int a, int b) {
    return m->gpus_per_node > 0 && a / m->gpus_per_node != b / m->gpus_per_node;
}

/* Posts, at the ranks' clocks `post`, the inputs of compute step in_step and the results of
   compute step res_step (either may be out of range: none) and returns in done[p] when the
   last of rank p's messages completes. The bytes a rank sends (receives) over one kind of
   link in one step share that link: out_b/in_b are [2][P] (inside, between nodes). */
static int exchange(const dfa__sched *s, const dfa__sim_model *m, int in_step, int res_step, const double *post,
                    double *done, dfa__msg *msgs, int cap, double *out_b, double *in_b) {
    const int P = s->nranks, T = dfa__sched_steps(s), unit = m->flops <= 0.0 && !m->machine;
    for (int p = 0; p < P; p++) done[p] = post[p];
    for (int i = 0; i < 2 * P; i++) out_b[i] = in_b[i] = 0.0;
    for (int pass = 0; pass < 2; pass++) /* first the bytes per link end, then completion times */
        for (int g = 0; g < 2; g++) {
            const int of = g == 0 ? in_step : res_step;
            if (of < 0 || of >= T) continue;
            for (int r = 0; r < P; r++) {
                const int nm = dfa__sched_messages(s, m->bwd, r, of, msgs, cap);
                if (nm < 0) return -1;
                for (int i = 0; i < nm; i++) {
                    const dfa__msg *x = &msgs[i];
                    if (!x->send || dfa__msg_is_input(x->kind) != (g == 0)) continue;
                    const double bytes = (double)dfa__msg_bytes(x, m->bwd, &m->shape, s->rows);
                    const int l = link_of(m, r, x->peer);
                    if (pass == 0) {
                        out_b[l * P + r] += bytes;
                        in_b[l * P + x->peer] += bytes;
                        continue;
                    }
                    double t = fmax(post[r], post[x->peer]);
                    if (!unit)
                        t += (l ? m->inter_latency : m->latency) +
                             fmax(out_b[l * P + r], in_b[l * P + x->peer]) / (l ? m->inter_bandwidth : m->bandwidth);
                    done[r] = fmax(done[r], t);
                    done[x->peer] = fmax(done[x->peer], t);
                }
            }
        }
    return 0;
}

/* The calibrated machine's costs (seconds on a rank's compute stream), following what the
   executor enqueues (exec_steps.c, exec_io.c): element-wise passes at mc->hbm plus mc->launch each. */
static double elementwise(const dfa__sim_model *m, double bytes, int kernels) {
    return bytes / m->machine->hbm + kernels * m->machine->launch;
}

/* Row widths in elements and the batch. */
#define QROW(m) ((double)(m)->shape.heads * (m)->shape.head_dim)
#define KVROW(m) ((double)(m)->shape.kv_heads * (m)->shape.head_dim)
#define BATCH(m) ((double)(m)->shape.batch)

/* Folding a partial result of `rows` query rows into the float32 accumulators (fwd: merge
   of o and lse; bwd: dq added): read both, write one. */
static double fold_query_cost(const dfa__sim_model *m, int rows) {
    const double b = 3.0 * BATCH(m) * rows * QROW(m) * 4 + (m->bwd ? 0.0 : 3.0 * BATCH(m) * rows * m->shape.heads * 4);
    return elementwise(m, b, m->bwd ? m->shape.batch : 1);
}

/* Folding a key chunk's dk/dv partial (backward). */
static double fold_keys_cost(const dfa__sim_model *m, int n) {
    return elementwise(m, 2.0 * 3.0 * BATCH(m) * n * KVROW(m) * 4, 2);
}

/* Packing query rows into a contiguous buffer (fwd: q; bwd: q, o, dout, lse): read + write. */
static double pack_cost(const dfa__sim_model *m, int rows) {
    const double b = BATCH(m) * rows * QROW(m) * m->shape.elem * (m->bwd ? 3 : 1) +
                     (m->bwd ? BATCH(m) * m->shape.heads * rows * 4 : 0.0);
    return elementwise(m, 2.0 * b, m->bwd ? 4 : 1);
}

/* A rank's block at a step: its own query rows packed when it takes part of its chunk,
   the kernel at the calibrated rate of its shape, its own partials folded at once. */
static double task_cost(const dfa__sched *s, const dfa__sim_model *m, int rank, const dfa__task *t) {
    const int n = s->rows, rows = t->row1 - t->row0;
    const dfa__block_shape shape = t->causal_mask ? DFA__BLOCK_DIAG : rows == n ? DFA__BLOCK_FULL : DFA__BLOCK_PART;
    double c = dfa__task_flops(t, n, &m->shape, m->bwd) / dfa__sim_block_rate(m->machine, m->bwd, shape, n, m->bound);
    c += m->machine->launch;
    if (t->q_chunk == rank) {
        if (rows < n) c += pack_cost(m, rows);
        c += fold_query_cost(m, rows);
    }
    if (m->bwd && t->k_chunk == rank) c += fold_keys_cost(m, dfa__task_key_rows(t, n));
    return c;
}

/* What rank r does on its stream around the messages of the inputs of step in_step and
   the results of step res_step: packs the query rows it sends (before they can leave) and
   folds the results it receives (after they arrived). */
static int message_costs(const dfa__sched *s, const dfa__sim_model *m, int r, int in_step, int res_step,
                         dfa__msg *msgs, int cap, double *pack, double *fold) {
    const int T = dfa__sched_steps(s);
    *pack = *fold = 0.0;
    for (int g = 0; g < 2; g++) {
        const int of = g == 0 ? in_step : res_step;
        if (of < 0 || of >= T) continue;
        const int nm = dfa__sched_messages(s, m->bwd, r, of, msgs, cap);
        if (nm < 0) return -1;
        for (int i = 0; i < nm; i++) {
            const dfa__msg *x = &msgs[i];
            if (dfa__msg_is_input(x->kind) != (g == 0)) continue;
            const int rows = x->task.row1 - x->task.row0;
            if (x->send && x->kind == DFA__MSG_QUERY && rows < s->rows) *pack += pack_cost(m, rows);
            if (!x->send && x->kind == DFA__MSG_QRESULT) *fold += fold_query_cost(m, rows);
            if (!x->send && x->kind == DFA__MSG_KVRESULT) *fold += fold_keys_cost(m, dfa__task_key_rows(&x->task, s->rows));
        }
    }
    return 0;
}

/* Before the steps: the float32 accumulators filled; after them: rounded into the outputs. */
static double fill_cost(const dfa__sim_model *m, int n) {
    const double b = m->bwd ? BATCH(m) * n * (QROW(m) + 2 * KVROW(m)) * 4 : BATCH(m) * n * (QROW(m) + m->shape.heads) * 4;
    return elementwise(m, b, m->bwd ? 3 : 2);
}

static double store_cost(const dfa__sim_model *m, int n) {
    const double e = 4.0 + (double)m->shape.elem;
    const double b = m->bwd ? BATCH(m) * n * (QROW(m) + 2 * KVROW(m)) * e
                            : BATCH(m) * n * (QROW(m) * e + m->shape.heads * 8.0);
    return elementwise(m, b, m->bwd ? 3 : 2);
}

int dfa__sim_run(const dfa__sched *s, const dfa__sim_model *m, dfa__sim_result *r) {
    memset(r, 0, sizeof *r);
    if (!dfa__sched_valid(s) || !m) return -1;
    const int mach = m->machine != NULL, unit = m->flops <= 0.0 && !mach;
    if (!unit && !(m->bandwidth > 0.0)) return -1;
    if (!unit && m->gpus_per_node > 0 && !(m->inter_bandwidth > 0.0)) return -1;
    if (m->gpus_per_node < 0) return -1;
    const int P = s->nranks, T = dfa__sched_steps(s), cap = dfa__sched_max_messages(s);
    r->nranks = P;
    r->steps = T;
    r->compute = calloc((size_t)P, sizeof(double));
    r->finish = calloc((size_t)P, sizeof(double));
    r->step_compute = calloc((size_t)P * (size_t)T, sizeof(double));
    r->step_wait = calloc((size_t)P * (size_t)T, sizeof(double));
    double *clock = calloc((size_t)P, sizeof(double)), *post = calloc((size_t)P, sizeof(double));
    double *done = calloc((size_t)P, sizeof(double));
    double *ob = calloc(2 * (size_t)P, sizeof(double)), *ib = calloc(2 * (size_t)P, sizeof(double));
    dfa__msg *msgs = malloc(sizeof *msgs * (size_t)cap);
    int rc = -1;
    if (!r->compute || !r->finish || !r->step_compute || !r->step_wait || !clock || !post || !done ||
        !ob || !ib || !msgs)
        goto done;

    /* the calibrated machine: the call's setup and the accumulators' fill come first */
    if (mach)
        for (int p = 0; p < P; p++) clock[p] = m->machine->call + fill_cost(m, s->rows);
    /* inputs of step 0 (none in our schedules): posted and waited before the loop */
    if (exchange(s, m, 0, -1, clock, done, msgs, cap, ob, ib)) goto done;
    memcpy(clock, done, sizeof(double) * (size_t)P);

    for (int t = 0; t < T; t++) {
        memcpy(post, clock, sizeof(double) * (size_t)P);
        if (mach) /* query rows are packed on the stream before they can leave */
            for (int p = 0; p < P; p++) {
                double pk, fd;
                if (message_costs(s, m, p, t + 1, t - 1, msgs, cap, &pk, &fd)) goto done;
                post[p] += pk;
            }
        if (exchange(s, m, t + 1, t - 1, post, done, msgs, cap, ob, ib)) goto done;
        for (int p = 0; p < P; p++) {
            dfa__task tk;
            double c = 0.0;
            if (dfa__sched_task(s, p, t, &tk))
                c = unit ? (double)dfa__task_pairs(&tk, s->rows) / ((double)s->rows * s->rows)
                    : mach ? task_cost(s, m, p, &tk)
                           : dfa__task_flops(&tk, s->rows, &m->shape, m->bwd) /
                                 (m->rank_flops ? m->rank_flops[p] : m->flops);
            double wait;
            if (m->overlap) {
                const double end = post[p] + c;
                clock[p] = fmax(end, done[p]);
                wait = clock[p] - end;
            } else {
                wait = done[p] - post[p];
                clock[p] = done[p] + c;
            }
            if (mach) { /* the results that arrived are folded after the step's own block */
                double pk, fd;
                if (message_costs(s, m, p, -1, t - 1, msgs, cap, &pk, &fd)) goto done;
                clock[p] += fd;
            }
            r->step_compute[(size_t)t * P + p] = c;
            r->step_wait[(size_t)t * P + p] = wait;
            r->compute[p] += c;
        }
    }
    /* the last step's results travel after it */
    memcpy(post, clock, sizeof(double) * (size_t)P);
    if (exchange(s, m, -1, T - 1, post, done, msgs, cap, ob, ib)) goto done;
    r->makespan = 0.0;
    for (int p = 0; p < P; p++) {
        clock[p] = fmax(clock[p], done[p]);
        r->step_wait[(size_t)(T - 1) * P + p] += clock[p] - post[p];
        if (mach) {
            double pk, fd;
            if (message_costs(s, m, p, -1, T - 1, msgs, cap, &pk, &fd)) goto done;
            clock[p] += fd + store_cost(m, s->rows);
        }
        r->finish[p] = clock[p];
        r->makespan = fmax(r->makespan, clock[p]);
        r->total_work += r->compute[p];
    }
    r->idle_fraction = r->makespan > 0.0 ? 1.0 - r->total_work / (P * r->makespan) : 0.0;
    rc = 0;
done:
    free(clock);
    free(post);
    free(done);
    free(ob);
    free(ib);
    free(msgs);
    if (rc) dfa__sim_free(r);
    return rc;
}

int dfa__sim_two_level(dfa__sched_kind inner, int nodes, int rows, int causal, const dfa__sim_model *m,
                       double *seconds) {
    *seconds = 0.0;
    const int G = m->gpus_per_node;
    if (nodes < 1 || G < 1 || rows < 1 || m->shape.heads % nodes || m->shape.kv_heads % nodes) return -1;
    if (nodes > 1 && !(m->inter_bandwidth > 0.0)) return -1;
    dfa__sim_model mi = *m;
    mi.shape.heads /= nodes;
    mi.shape.kv_heads /= nodes;
    mi.gpus_per_node = 0; /* the inner schedule stays inside one node */
    const dfa__sched s = {inner, G, causal, rows * nodes, NULL};
    dfa__sim_result r;
    if (dfa__sim_run(&s, &mi, &r)) return -1;
    double t = r.makespan;
    dfa__sim_free(&r);
    if (nodes > 1) {
        /* bytes per GPU in each direction of one all-to-all (a GPU keeps 1/nodes of its data),
           plus packing before and unpacking after at the element-wise rate */
        const double B = m->shape.batch, es = (double)m->shape.elem;
        const double q = B * rows * m->shape.heads * m->shape.head_dim * es;
        const double kv = B * rows * m->shape.kv_heads * m->shape.head_dim * es;
        const double lse = B * rows * m->shape.heads * 4.0;
        const double in = m->bwd ? q : q + 2 * kv, out = m->bwd ? q + 2 * kv : q + lse;
        const double hbm = m->machine ? m->machine->hbm : 3e12;
        for (int k = 0; k < 2; k++) {
            const double b = k == 0 ? in : out;
            t += (nodes - 1) * m->inter_latency + b * (nodes - 1) / nodes / m->inter_bandwidth + 2.0 * b / hbm;
        }
    }
    *seconds = t;
    return 0;
}

/* Masked plans (schedule.h): every pair with visible keys (plan->work > 0) computed exactly
   once, carrying its work and the call's causal flag; no other pair. A causal diagonal may lend
   bands of its first rows: rows [x_{i-1}, x_i) against keys [0, x_i) (k_row1 = x_i), x_0 = 0, each
   on another rank, while rows [x_last, n) stay with all the keys on its own rank at step 0; their
   work adds up to the pair's. */
static int check_lent_diagonals(const dfa__sched *s, const dfa__placed_task *all, int ntask, char *err, size_t len) {
    const int P = s->nranks, n = s->rows;
    const int64_t *work = s->plan->work;
    for (int i = 0; i < ntask; i++) {
        const dfa__task *t = &all[i].t;
        if (!dfa__task_lent(t)) continue;
        const int q = t->q_chunk;
        if (!s->causal || t->k_row0 != 0 || t->row0 < 0 || t->row0 >= t->row1 || t->row1 != t->k_row1 ||
            t->k_row1 >= n || all[i].rank == q || t->work <= 0 || t->causal_mask != 1)
            return fail(err, len, "rank %d step %d: malformed lent rows q%d[%d:%d] x k%d[%d:%d]", all[i].rank,
                        all[i].step, q, t->row0, t->row1, t->k_chunk, t->k_row0, t->k_row1);
    }
    for (int q = 0; q < P; q++) { /* each diagonal's bands, in order from row 0 */
        int covered = 0, rest = -1, bands = 0;
        int64_t sum = 0;
        for (int j = 0; j < ntask; j++)
            if (all[j].t.q_chunk == q && all[j].t.k_chunk == q && !dfa__task_lent(&all[j].t)) rest = j;
        for (;;) {
            int next = -1, stray = -1; /* the band from `covered` on; one that starts elsewhere */
            for (int j = 0; j < ntask; j++) {
                const dfa__task *t = &all[j].t;
                if (t->q_chunk != q || !dfa__task_lent(t) || t->row1 <= covered) continue;
                if (t->row0 == covered && next < 0) next = j;
                else if (t->row0 != covered) stray = j;
            }
            if (next < 0 && stray >= 0) {
                const dfa__task *t = &all[stray].t;
                return fail(err, len, "q%d x k%d: lent rows [%d:%d] %s (rank %d step %d)", q, q, t->row0, t->row1,
                            t->row0 < covered ? "overlap rows lent before" : "leave a gap after those lent before",
                            all[stray].rank, all[stray].step);
            }
            if (next < 0) break;
            covered = all[next].t.row1;
            sum += all[next].t.work;
            bands++;
        }
        int listed = 0; /* every lent band was reached from row 0 (none doubled) */
        for (int j = 0; j < ntask; j++) listed += all[j].t.q_chunk == q && dfa__task_lent(&all[j].t);
        if (listed != bands) return fail(err, len, "q%d x k%d lends its first rows twice", q, q);
        if (!bands) continue;
        if (rest < 0 || all[rest].rank != q || all[rest].step != 0 || all[rest].t.row0 != covered ||
            all[rest].t.row1 != n || all[rest].t.work + sum != work[(size_t)q * P + q])
            return fail(err, len, "q%d x k%d: rows [0:%d] lent in %d band(s), but the rest is not rows [%d:%d] on rank %d "
                        "at step 0 with the remaining work", q, q, covered, bands, covered, n, q);
    }
    return 0;
}

int dfa__sim_check_masked_tasks(const dfa__sched *s, dfa__placed_task *all, int ntask, char *err, size_t len) {
    const int P = s->nranks, n = s->rows;
    const int64_t *work = s->plan->work;
    int rc = check_lent_diagonals(s, all, ntask, err, len);
    if (rc) return rc;
    unsigned char *seen = calloc((size_t)P * (size_t)P, 1);
    if (!seen) return fail(err, len, "out of memory");
    for (int i = 0; i < ntask && !rc; i++) {
        const dfa__task *t = &all[i].t;
        const int chunks_ok = t->q_chunk >= 0 && t->q_chunk < P && t->k_chunk >= 0 && t->k_chunk < P;
        if (chunks_ok && dfa__task_lent(t)) continue; /* lent rows: checked above */
        /* whole chunks, or off the diagonal within the pair's visible query rows (the plan's rows:
           all of them, or a piece of a split pair); a diagonal that lent its first rows keeps the rest */
        const int diag = chunks_ok && t->q_chunk == t->k_chunk;
        const int *want = chunks_ok && s->plan->rows && !diag
                              ? &s->plan->rows[2 * ((size_t)t->q_chunk * P + (size_t)t->k_chunk)]
                              : NULL;
        int lent = 0;
        for (int j = 0; j < ntask && diag; j++)
            if (dfa__task_lent(&all[j].t) && all[j].t.q_chunk == t->q_chunk && all[j].t.row1 > lent)
                lent = all[j].t.row1; /* the end of its lent bands */
        const int r0 = want ? want[0] : diag ? lent : 0, r1 = want ? want[1] : n;
        /* and their keys: the pair's visible key rows (the plan's keys), or all */
        const int *want_k = want && s->plan->keys ? &s->plan->keys[2 * ((size_t)t->q_chunk * P + (size_t)t->k_chunk)] : NULL;
        int k0 = 0, k1 = 0;
        if (want_k) dfa__plan_key_window(want_k[0], want_k[1], n, &k0, &k1);
        const int64_t want_work = chunks_ok ? work[(size_t)t->q_chunk * P + t->k_chunk] : 0;
        /* (off the diagonal a piece of a split pair may cover part of the rows or of the keys) */
        const int rows_ok = diag ? t->row0 == r0 && t->row1 == r1 : t->row0 >= r0 && t->row1 <= r1;
        const int keys_ok = diag || !want_k ? t->k_row0 == k0 && t->k_row1 == k1
                                            : t->k_row0 >= k0 && t->k_row1 <= k1 && t->k_row0 < t->k_row1;
        if (!chunks_ok || !rows_ok || !keys_ok || r0 < 0 || r1 > n || r0 >= r1 || t->row0 >= t->row1 ||
            (want_k && (k0 < 0 || k1 > n || k0 >= k1)))
            rc = fail(err, len, "rank %d step %d: malformed task q%d[%d:%d] k%d[%d:%d] (rows [%d:%d], keys [%d:%d] expected)",
                      all[i].rank, all[i].step, t->q_chunk, t->row0, t->row1, t->k_chunk, t->k_row0, t->k_row1, r0, r1,
                      k0, k1);
        else if (want_work <= 0)
            rc = fail(err, len, "rank %d step %d: q%d x k%d has no visible key (wasted work and messages)",
                      all[i].rank, all[i].step, t->q_chunk, t->k_chunk);
        else if (diag && seen[(size_t)t->q_chunk * P + t->k_chunk]++)
            rc = fail(err, len, "q%d x k%d computed twice (rank %d step %d)", t->q_chunk, t->k_chunk, all[i].rank,
                      all[i].step);
        else if (t->causal_mask != s->causal || (diag && !lent && t->work != want_work) || t->work <= 0)
            rc = fail(err, len, "rank %d step %d: q%d x k%d carries causal_mask %d / work %lld, expected %d / %lld",
                      all[i].rank, all[i].step, t->q_chunk, t->k_chunk, t->causal_mask, (long long)t->work,
                      s->causal, (long long)work[(size_t)t->q_chunk * P + t->k_chunk]);
    }
    /* Off the diagonal, a pair's tasks tile it and carry its work: its visible rows [r0, r1) with
       its key window [k0, k1), or pieces of a split pair (schedule.h): consecutive rows with the
       whole key window, or the whole rows with consecutive keys. Pieces need a dense pair (every
       visible row sees every visible key [v0, v1)): a piece of rows [a, b) and keys [c, d) carries
       (b - a) x |[c, d) n [v0, v1)|. */
    if (!rc) qsort(all, (size_t)ntask, sizeof *all, cmp_task);
    for (int i = 0; i < ntask && !rc;) {
        const int q = all[i].t.q_chunk, k = all[i].t.k_chunk;
        int j = i + 1;
        while (j < ntask && all[j].t.q_chunk == q && all[j].t.k_chunk == k) j++;
        if (q != k) {
            const size_t x = (size_t)q * P + k;
            const int r0 = s->plan->rows ? s->plan->rows[2 * x] : 0, r1 = s->plan->rows ? s->plan->rows[2 * x + 1] : n;
            const int *vk = s->plan->rows && s->plan->keys ? &s->plan->keys[2 * x] : NULL;
            int k0 = 0, k1 = 0;
            if (vk) dfa__plan_key_window(vk[0], vk[1], n, &k0, &k1);
            const int v0 = vk ? vk[0] : 0, v1 = vk ? vk[1] : 0;
            const int dense = vk && v1 > v0 && work[x] == (int64_t)(r1 - r0) * (v1 - v0);
            int by_keys = 0; /* the pieces split the keys: each covers all the rows */
            for (int m = i; m < j; m++) by_keys |= all[m].t.k_row0 != k0 || all[m].t.k_row1 != k1;
            int covered = by_keys ? k0 : r0;
            int64_t sum = 0;
            for (int m = i; m < j && !rc; m++) {
                const dfa__task *t = &all[m].t;
                const int from = by_keys ? t->k_row0 : t->row0;
                const int64_t want = dense ? (int64_t)(t->row1 - t->row0) *
                                                 ((t->k_row1 < v1 ? t->k_row1 : v1) - (t->k_row0 > v0 ? t->k_row0 : v0))
                                           : work[x];
                if (by_keys && (t->row0 != r0 || t->row1 != r1))
                    rc = fail(err, len, "q%d x k%d: pieces split both its rows and its keys (q%d[%d:%d] k%d[%d:%d], "
                              "rank %d step %d)", q, k, q, t->row0, t->row1, k, t->k_row0, t->k_row1, all[m].rank,
                              all[m].step);
                else if (from != covered)
                    rc = fail(err, len, "q%d x k%d: %s %d..%d computed %s (rank %d step %d)", q, k,
                              by_keys ? "keys" : "rows", from < covered ? from : covered, from < covered ? covered : from,
                              from < covered ? "twice" : "by nobody", all[m].rank, all[m].step);
                else if (j - i > 1 && (!dense || t->work != want || want <= 0))
                    rc = fail(err, len, "q%d x k%d: a piece q%d[%d:%d] k%d[%d:%d] of a pair that is %s carries work "
                              "%lld (rank %d step %d)", q, k, q, t->row0, t->row1, k, t->k_row0, t->k_row1,
                              dense ? "dense" : "not dense (it cannot be split)", (long long)t->work, all[m].rank,
                              all[m].step);
                covered = by_keys ? t->k_row1 : t->row1;
                sum += t->work;
            }
            if (!rc && covered != (by_keys ? k1 : r1))
                rc = fail(err, len, "q%d x k%d: %s %d..%d computed by nobody", q, k, by_keys ? "keys" : "rows", covered,
                          by_keys ? k1 : r1);
            else if (!rc && sum != work[x])
                rc = fail(err, len, "q%d x k%d: its tasks carry %lld pairs, expected %lld", q, k, (long long)sum,
                          (long long)work[x]);
            else if (!rc)
                seen[x] = 1;
        }
        i = j;
    }
    for (int x = 0; x < P * P && !rc; x++)
        if (work[x] > 0 && !seen[x]) rc = fail(err, len, "q%d x k%d computed by nobody", x / P, x % P);
    free(seen);
    return rc;
}
