/* The public sequence-parallel calls: argument checks on this rank, then the collective
 * executor (which makes a failure on any rank a failure on every rank). */
#include <stdlib.h>

#include "../common/args.h"
#include "../common/desc.h"
#include "../common/error.h"
#include "../common/mask.h"
#include "../common/sinks.h"
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

dfa_status dfa__check_dist_desc(const dfa_dist_desc *d, dfa__sched_kind kind, const char *fn) {
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
    if (d->attn.q_doc != d->attn.k_doc)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->attn.k_doc differs from d->attn.q_doc; a rank's rows are its queries and its keys, "
                         "so both point to its document ids");

    return DFA_OK;
}

/* The public calls take the schedule from the descriptor (after its import). */
#define KIND_FROM_DESC ((dfa__sched_kind)-1)

/* The public enum's values are the internal kinds' (schedule.h); anything else, the paper's
   internal kind included, is refused by check_dist. */
static dfa__sched_kind public_kind(const dfa_dist_desc *d) {
    return d->schedule == DFA_SCHEDULE_BALANCED || d->schedule == DFA_SCHEDULE_RING ? (dfa__sched_kind)d->schedule
                                                                                    : (dfa__sched_kind)-1;
}

/* The caller's buffers of a forward (q, k, v, o, lse) or backward (all of them). */
typedef struct {
    const void *q, *k, *v, *o;
    const float *lse;
    const void *dout, *dq, *dk, *dv;
} dist_bufs;

/* A distributed call's local checks: the caller's descriptor is imported into *nd (the
   normalised copy every later step uses, including the executor's agreement on fields
   across ranks); *used is nd, or NULL when the import failed. *kind = KIND_FROM_DESC on
   entry: take the schedule from the descriptor (the public calls). The status goes to the
   executor, which makes a failure on any rank a failure on every rank. */

static dfa_status check_local(const dfa_dist_desc *user, int bwd, dfa__sched_kind *kind, const dist_bufs *b,
                              dfa_dist_desc *nd, const dfa_dist_desc **used, const char *fn) {
    *used = NULL;
    dfa_status st = dfa__dist_desc_import(user, nd, fn);
    if (st) return st;
    *used = nd;
    if (*kind == KIND_FROM_DESC) *kind = public_kind(nd);
    st = bwd ? dfa__check_bwd_args(&nd->attn, NULL, &nd->attn, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq,
                                   b->dk, b->dv, fn)
             : dfa__check_fwd_args(&nd->attn, NULL, &nd->attn, b->q, b->k, b->v, b->o, b->lse, fn);
    if (!st) st = dfa__check_docs_host(&nd->attn, fn); /* this rank's ids (host memory), non-decreasing */
    if (!st) st = dfa__check_sinks_host(&nd->attn, fn); /* host memory, finite */
    return st ? st : dfa__check_dist_desc(nd, *kind, fn);
}

dfa_status dfa__dist_fwd(dfa_comm *c, const dfa_dist_desc *user, dfa__sched_kind kind, const void *q,
                         const void *k, const void *v, void *o, float *lse) {
    static const char fn[] = "dfa_dist_attn_fwd";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    const dist_bufs b = {.q = q, .k = k, .v = v, .o = o, .lse = lse};
    dfa_dist_desc nd;
    const dfa_dist_desc *d;
    const dfa_status st = check_local(user, 0, &kind, &b, &nd, &d, fn);
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
    return dfa__dist_run(c, d, kind, DFA__PASS_FWD, &io, st, fn);
}

dfa_status dfa__dist_bwd(dfa_comm *c, const dfa_dist_desc *user, dfa__sched_kind kind, const void *q,
                         const void *k, const void *v, const void *o, const float *lse, const void *dout, void *dq,
                         void *dk, void *dv) {
    static const char fn[] = "dfa_dist_attn_bwd";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    const dist_bufs b = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
    dfa_dist_desc nd;
    const dfa_dist_desc *d;
    const dfa_status st = check_local(user, 1, &kind, &b, &nd, &d, fn);
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
    return dfa__dist_run(c, d, kind, DFA__PASS_BWD, &io, st, fn);
}

dfa_status dfa_dist_attn_fwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                             void *o, float *lse) {
    return dfa__dist_fwd(c, d, KIND_FROM_DESC, q, k, v, o, lse);
}

dfa_status dfa_dist_attn_bwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                             const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv) {
    return dfa__dist_bwd(c, d, KIND_FROM_DESC, q, k, v, o, lse, dout, dq, dk, dv);
}
