/* The public sequence-parallel calls: argument checks on this rank, then the collective
 * executor (which makes a failure on any rank a failure on every rank). */
#include <stdlib.h>

#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "comm.h"
#include "dist_internal.h"
#include "executor.h"

void dfa_comm_destroy(dfa_comm *c) {
    if (!c) return;
    dfa__comm_drop_cache(c);
    c->ops->destroy(c);
}

int dfa_comm_rank(const dfa_comm *c) { return c ? c->rank : -1; }

int dfa_comm_size(const dfa_comm *c) { return c ? c->size : 0; }

int64_t dfa_dist_position(dfa_schedule s, int rank, int nranks, int local_rows, int i) {
    if ((s != DFA_SCHEDULE_BALANCED && s != DFA_SCHEDULE_RING) || nranks < 1 || rank < 0 || rank >= nranks ||
        local_rows < 1 || i < 0 || i >= local_rows)
        return -1;
    /* Both schedules use contiguous chunks: rank r holds rows [r n, (r + 1) n). */
    return (int64_t)rank * local_rows + i;
}

/* This rank's own checks of a distributed call (the descriptor and its buffers). */
static dfa_status check_local(const dfa_dist_desc *d, dfa__sched_kind kind, const void *const *ins,
                              const char *const *in_names, int nin, void *const *outs, const char *const *out_names,
                              int nout, const char *fn) {
    if (!d) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d (the descriptor) is NULL");
    dfa_status st = dfa__check_desc(&d->attn, DFA__DESC_FULL, fn);
    if (st) return st;
    if (d->attn.seqlen_q != d->attn.seqlen_k)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->attn.seqlen_q = %d and d->attn.seqlen_k = %d differ; both are this rank's local rows",
                         d->attn.seqlen_q, d->attn.seqlen_k);
    if (kind != DFA__SCHED_BALANCED && kind != DFA__SCHED_RING && kind != DFA__SCHED_PAPER)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->schedule = %d is not a dfa_schedule (DFA_SCHEDULE_BALANCED or DFA_SCHEDULE_RING)",
                         (int)d->schedule);
    if (d->overlap != 0 && d->overlap != 1)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->overlap = %d; it must be 0 or 1", d->overlap);
    for (int i = 0; i < nin; i++)
        if ((st = dfa__check_ptr(ins[i], in_names[i], fn))) return st;
    for (int i = 0; i < nout; i++)
        if (out_names[i] && (st = dfa__check_ptr(outs[i], out_names[i], fn))) return st;
    return DFA_OK;
}

dfa_status dfa__dist_fwd(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                         const void *v, void *o, float *lse) {
    static const char fn[] = "dfa_dist_attn_fwd";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    const void *ins[] = {q, k, v};
    static const char *const in_names[] = {"q", "k", "v"};
    void *outs[] = {o};
    static const char *const out_names[] = {"o"};
    dfa_status st = check_local(d, kind, ins, in_names, 3, outs, out_names, 1, fn);
    if (!st) {
        const size_t es = dfa__dtype_size(d->attn.dtype);
        const size_t qb = (size_t)dfa__q_elems(&d->attn) * es, kb = (size_t)dfa__kv_elems(&d->attn) * es;
        const dfa__buffer ob[] = {{o, qb, "o"}, {lse, (size_t)dfa__lse_elems(&d->attn) * 4, "lse"}};
        const dfa__buffer ib[] = {{q, qb, "q"}, {k, kb, "k"}, {v, kb, "v"}};
        st = dfa__check_no_overlap(ob, 2, ib, 3, fn);
    }
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
    return dfa__dist_run(c, d, kind, DFA__PASS_FWD, &io, st, fn);
}

dfa_status dfa__dist_bwd(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                         const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
                         void *dv) {
    static const char fn[] = "dfa_dist_attn_bwd";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    const void *ins[] = {q, k, v, o, lse, dout};
    static const char *const in_names[] = {"q", "k", "v", "o", "lse", "dout"};
    void *outs[] = {dq, dk, dv};
    static const char *const out_names[] = {"dq", "dk", "dv"};
    dfa_status st = check_local(d, kind, ins, in_names, 6, outs, out_names, 3, fn);
    if (!st) {
        const size_t es = dfa__dtype_size(d->attn.dtype);
        const size_t qb = (size_t)dfa__q_elems(&d->attn) * es, kb = (size_t)dfa__kv_elems(&d->attn) * es;
        const dfa__buffer ob[] = {{dq, qb, "dq"}, {dk, kb, "dk"}, {dv, kb, "dv"}};
        const dfa__buffer ib[] = {{q, qb, "q"}, {k, kb, "k"}, {v, kb, "v"}, {o, qb, "o"}, {dout, qb, "dout"},
                                  {lse, (size_t)dfa__lse_elems(&d->attn) * 4, "lse"}};
        st = dfa__check_no_overlap(ob, 3, ib, 6, fn);
    }
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
    return dfa__dist_run(c, d, kind, DFA__PASS_BWD, &io, st, fn);
}

/* The public enum's values are the internal kinds' (schedule.h); anything else, the paper's
   internal kind included, is refused by check_local. */
static dfa__sched_kind public_kind(const dfa_dist_desc *d) {
    if (!d) return DFA__SCHED_BALANCED;
    return d->schedule == DFA_SCHEDULE_BALANCED || d->schedule == DFA_SCHEDULE_RING ? (dfa__sched_kind)d->schedule
                                                                                    : (dfa__sched_kind)-1;
}

dfa_status dfa_dist_attn_fwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                             void *o, float *lse) {
    return dfa__dist_fwd(c, d, public_kind(d), q, k, v, o, lse);
}

dfa_status dfa_dist_attn_bwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                             const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv) {
    return dfa__dist_bwd(c, d, public_kind(d), q, k, v, o, lse, dout, dq, dk, dv);
}
