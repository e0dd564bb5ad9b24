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
    return 0;
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

/* Posts, at the ranks' clocks `post`, the inputs of compute step in_step and the results of
   compute step res_step (either may be out of range: none) and returns in done[p] when the
   last of rank p's messages completes. The bytes a rank sends (receives) share its link. */
static int exchange(const dfa__sched *s, const dfa__sim_model *m, int in_step, int res_step, const double *post,
                    double *done, dfa__msg *msgs, int cap, double *out_b, double *in_b) {
    const int P = s->nranks, T = dfa__sched_steps(s), unit = m->flops <= 0.0;
    for (int p = 0; p < P; p++) {
        done[p] = post[p];
        out_b[p] = in_b[p] = 0.0;
    }
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
                    if (pass == 0) {
                        out_b[r] += bytes;
                        in_b[x->peer] += bytes;
                        continue;
                    }
                    double t = fmax(post[r], post[x->peer]);
                    if (!unit) t += m->latency + fmax(out_b[r], in_b[x->peer]) / m->bandwidth;
                    done[r] = fmax(done[r], t);
                    done[x->peer] = fmax(done[x->peer], t);
                }
            }
        }
    return 0;
}

int dfa__sim_run(const dfa__sched *s, const dfa__sim_model *m, dfa__sim_result *r) {
    memset(r, 0, sizeof *r);
    if (!dfa__sched_valid(s) || !m || (m->flops > 0.0 && !(m->bandwidth > 0.0))) return -1;
    const int P = s->nranks, T = dfa__sched_steps(s), cap = dfa__sched_max_messages(s);
    const int unit = m->flops <= 0.0;
    r->nranks = P;
    r->steps = T;
    r->compute = calloc((size_t)P, sizeof(double));
    r->finish = calloc((size_t)P, sizeof(double));
    r->step_compute = calloc((size_t)P * (size_t)T, sizeof(double));
    r->step_wait = calloc((size_t)P * (size_t)T, sizeof(double));
    double *clock = calloc((size_t)P, sizeof(double)), *post = calloc((size_t)P, sizeof(double));
    double *done = calloc((size_t)P, sizeof(double));
    double *ob = calloc((size_t)P, sizeof(double)), *ib = calloc((size_t)P, sizeof(double));
    dfa__msg *msgs = malloc(sizeof *msgs * (size_t)cap);
    int rc = -1;
    if (!r->compute || !r->finish || !r->step_compute || !r->step_wait || !clock || !post || !done ||
        !ob || !ib || !msgs)
        goto done;

    /* inputs of step 0 (none in our schedules): posted and waited before the loop */
    if (exchange(s, m, 0, -1, clock, done, msgs, cap, ob, ib)) goto done;
    memcpy(clock, done, sizeof(double) * (size_t)P);

    for (int t = 0; t < T; t++) {
        memcpy(post, clock, sizeof(double) * (size_t)P);
        if (exchange(s, m, t + 1, t - 1, post, done, msgs, cap, ob, ib)) goto done;
        for (int p = 0; p < P; p++) {
            dfa__task tk;
            double c = 0.0;
            if (dfa__sched_task(s, p, t, &tk))
                c = unit ? (double)dfa__task_pairs(&tk, s->rows) / ((double)s->rows * s->rows)
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

/* Masked plans (schedule.h): every pair with visible keys (plan->work > 0) computed exactly
   once, as one whole-chunk task carrying its work and the call's causal flag; no other pair. */
int dfa__sim_check_masked_tasks(const dfa__sched *s, dfa__placed_task *all, int ntask, char *err, size_t len) {
    const int P = s->nranks, n = s->rows;
    const int64_t *work = s->plan->work;
    unsigned char *seen = calloc((size_t)P * (size_t)P, 1);
    if (!seen) return fail(err, len, "out of memory");
    int rc = 0;
    for (int i = 0; i < ntask && !rc; i++) {
        const dfa__task *t = &all[i].t;
        if (t->q_chunk < 0 || t->q_chunk >= P || t->k_chunk < 0 || t->k_chunk >= P || t->row0 != 0 || t->row1 != n)
            rc = fail(err, len, "rank %d step %d: malformed task q%d[%d:%d] k%d", all[i].rank, all[i].step,
                      t->q_chunk, t->row0, t->row1, t->k_chunk);
        else if (work[(size_t)t->q_chunk * P + t->k_chunk] <= 0)
            rc = fail(err, len, "rank %d step %d: q%d x k%d has no visible key (wasted work and messages)",
                      all[i].rank, all[i].step, t->q_chunk, t->k_chunk);
        else if (seen[(size_t)t->q_chunk * P + t->k_chunk]++)
            rc = fail(err, len, "q%d x k%d computed twice (rank %d step %d)", t->q_chunk, t->k_chunk, all[i].rank,
                      all[i].step);
        else if (t->causal_mask != s->causal || t->work != work[(size_t)t->q_chunk * P + t->k_chunk])
            rc = fail(err, len, "rank %d step %d: q%d x k%d carries causal_mask %d / work %lld, expected %d / %lld",
                      all[i].rank, all[i].step, t->q_chunk, t->k_chunk, t->causal_mask, (long long)t->work,
                      s->causal, (long long)work[(size_t)t->q_chunk * P + t->k_chunk]);
    }
    for (int x = 0; x < P * P && !rc; x++)
        if (work[x] > 0 && !seen[x]) rc = fail(err, len, "q%d x k%d computed by nobody", x / P, x % P);
    free(seen);
    return rc;
}
