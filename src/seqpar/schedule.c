/* Sequence-parallel schedules: pure functions of (schedule, P, rank, step). See schedule.h. */
#include "schedule.h"

const char *dfa__sched_name(dfa__sched_kind k) {
    switch (k) {
    case DFA__SCHED_BALANCED: return "balanced";
    case DFA__SCHED_RING: return "ring";
    case DFA__SCHED_PAPER: return "paper";
    }
    return "?";
}

int dfa__sched_valid(const dfa__sched *s) {
    return s && (s->kind == DFA__SCHED_BALANCED || s->kind == DFA__SCHED_RING || s->kind == DFA__SCHED_PAPER) &&
           s->nranks >= 1 && s->rows >= 1 && (s->causal == 0 || s->causal == 1);
}

/* Causal schedules other than the ring fold the far half of the key distances onto helpers. */
static int folded(const dfa__sched *s) { return s->causal && s->kind != DFA__SCHED_RING; }

int dfa__sched_steps(const dfa__sched *s) {
    if (s->plan) return s->plan->steps;
    if (s->nranks == 1) return 1;
    return folded(s) ? s->nranks / 2 + 1 : s->nranks;
}

static int set_task(dfa__task *out, int qc, int r0, int r1, int kc, int mask) {
    if (r0 >= r1) return 0; /* an empty share (a 1-row chunk split in two) */
    out->q_chunk = qc;
    out->row0 = r0;
    out->row1 = r1;
    out->k_chunk = kc;
    out->causal_mask = mask;
    out->work = 0;
    out->k_row0 = out->k_row1 = 0;
    return 1;
}

int dfa__sched_task(const dfa__sched *s, int rank, int step, dfa__task *out) {
    const int P = s->nranks, n = s->rows, p = rank, t = step;
    if (p < 0 || p >= P || t < 0 || t >= dfa__sched_steps(s)) return 0;
    if (s->plan) {
        const dfa__task *x = &s->plan->tasks[(size_t)t * (size_t)P + (size_t)p];
        if (x->q_chunk < 0) return 0;
        *out = *x;
        return 1;
    }
    if (!s->causal) /* every pair is needed: rank p sees k_{p-t} (mod P) at step t */
        return set_task(out, p, 0, n, (p - t + P) % P, 0);
    if (t == 0) return set_task(out, p, 0, n, p, 1); /* the diagonal block, local */
    if (!folded(s)) return p >= t ? set_task(out, p, 0, n, p - t, 0) : 0;

    /* The balanced family. At the last step of an even P the owner and the helper
       would both cover key distance P/2 = t. */
    const int contested = P % 2 == 0 && t == P / 2;
    const int owner_rows = (n + 1) / 2; /* the owner also merges, so it keeps the larger half */
    if (p >= t) /* own queries against an earlier key chunk */
        return set_task(out, p, 0, contested && s->kind == DFA__SCHED_BALANCED ? owner_rows : n, p - t, 0);
    /* helper: a late chunk's queries against this rank's own keys (key distance P - t) */
    if (!contested) return set_task(out, p - t + P, 0, n, p, 0);
    if (s->kind == DFA__SCHED_PAPER) return 0; /* the paper's idle half */
    return set_task(out, p - t + P, owner_rows, n, p, 0);
}

int dfa__sched_max_messages(const dfa__sched *s) {
    /* Each other rank's single task can name this rank as its key owner and as its query
       owner (an input and a result each); plus this rank's own task's four. */
    return 4 * s->nranks + 4;
}

static int push(dfa__msg *out, int *n, int cap, dfa__msg_kind kind, int send, int peer, int step,
                const dfa__task *t) {
    if (*n >= cap) return -1;
    dfa__msg *m = &out[(*n)++];
    m->kind = kind;
    m->send = send;
    m->peer = peer;
    m->step = step;
    m->task = *t;
    return 0;
}

int dfa__sched_messages(const dfa__sched *s, int bwd, int rank, int step, dfa__msg *out, int cap) {
    int n = 0;
    for (int x = 0; x < s->nranks; x++) {
        dfa__task t;
        if (!dfa__sched_task(s, x, step, &t)) continue;
        const int qo = t.q_chunk, ko = t.k_chunk; /* owners: chunk c lives on rank c */
        int bad = 0;
        if (x == rank) {
            if (ko != rank) {
                bad |= push(out, &n, cap, DFA__MSG_KV, 0, ko, step, &t);
                if (bwd) bad |= push(out, &n, cap, DFA__MSG_KVRESULT, 1, ko, step, &t);
            }
            if (qo != rank) {
                bad |= push(out, &n, cap, DFA__MSG_QUERY, 0, qo, step, &t);
                bad |= push(out, &n, cap, DFA__MSG_QRESULT, 1, qo, step, &t);
            }
        } else {
            if (ko == rank) {
                bad |= push(out, &n, cap, DFA__MSG_KV, 1, x, step, &t);
                if (bwd) bad |= push(out, &n, cap, DFA__MSG_KVRESULT, 0, x, step, &t);
            }
            if (qo == rank) {
                bad |= push(out, &n, cap, DFA__MSG_QUERY, 1, x, step, &t);
                bad |= push(out, &n, cap, DFA__MSG_QRESULT, 0, x, step, &t);
            }
        }
        if (bad) return -1;
    }
    return n;
}

int64_t dfa__msg_bytes(const dfa__msg *m, int bwd, const dfa__msg_shape *sh, int rows) {
    const int64_t r = m->task.row1 - m->task.row0;
    const int64_t qrow = (int64_t)sh->heads * sh->head_dim, kvrow = (int64_t)sh->kv_heads * sh->head_dim;
    const int64_t B = sh->batch, es = (int64_t)sh->elem, kr = dfa__task_key_rows(&m->task, rows);
    switch (m->kind) {
    case DFA__MSG_KV: return 2 * B * kr * kvrow * es;
    case DFA__MSG_QUERY: /* fwd: q; bwd: q, o, dout and the lse rows */
        return bwd ? 3 * B * r * qrow * es + B * sh->heads * r * 4 : B * r * qrow * es;
    case DFA__MSG_QRESULT: /* fwd: o and lse; bwd: dq; float32 */
        return bwd ? B * r * qrow * 4 : B * r * qrow * 4 + B * sh->heads * r * 4;
    case DFA__MSG_KVRESULT: return 2 * B * kr * kvrow * 4;
    }
    return 0;
}

int64_t dfa__task_pairs(const dfa__task *t, int rows) {
    if (t->work > 0) return t->work; /* a masked plan's block */
    if (!t->causal_mask) return (int64_t)(t->row1 - t->row0) * rows;
    /* diagonal block: row i sees keys 0..i */
    const int64_t a = t->row0, b = t->row1;
    return (b * (b + 1) - a * (a + 1)) / 2;
}
