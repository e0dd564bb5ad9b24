/* The backend-neutral executor of sequence-parallel attention: its entry points and test
 * hooks. See executor.h; exec_internal.h lists the files of its parts. */
#include "exec_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/mask.h"

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

/* The workspace stays with the communicator; only the plan goes. */
static void release(exec *e) {
    dfa__exec_free_plan(e);
    dfa__sched_plan_free(&e->mplan);
    dfa__pair_counts_free(&e->mc);
    free(e->ids);
    e->ids = NULL;
    e->ids_b = NULL;
    e->masked = 0;
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
    const int g = dfa__exec_choose_groups(&e, dd, kind);
    const dfa_status st = dfa__exec_prepare(&e, dd, kind, g, "dfa__dist_reserve");
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
                                        "d->attn.q_doc (set or NULL)", "d->attn.head_dim_v",
                                        "d->attn.softcap (bits)", "d->attn.sinks and dsinks (set or NULL)"};
    int64_t f[DFA__AGREED_FIELDS] = {0};
    if (dd) {
        const dfa_attn_desc *a = &dd->attn;
        uint32_t bits, cap;
        memcpy(&bits, &a->softmax_scale, 4);
        memcpy(&cap, &a->softcap, 4);
        const int64_t vals[DFA__AGREED_FIELDS] = {a->batch, a->seqlen_q, a->seqlen_k, a->num_heads, a->num_kv_heads,
                                                  a->head_dim, (int64_t)a->dtype, a->causal, (int64_t)bits,
                                                  (int64_t)a->flags, (int64_t)kind, dd->overlap, a->window_left,
                                                  a->window_right, a->q_doc != NULL,
                                                  a->head_dim_v ? a->head_dim_v : a->head_dim, (int64_t)cap,
                                                  (a->sinks != NULL) + 2 * (a->dsinks != NULL)};
        memcpy(f, vals, sizeof f);
    }
    /* Device backends pass dd only when the descriptor itself is valid: a rank whose buffers
       failed may then run as a ghost (see agree_device), so it plans and allocates too. A
       descriptor agreed before keeps the head groups agreed then. */
    int64_t groups = 1;
    const int masked = dd && dfa__has_mask(&dd->attn);
    if (c->stats) memset(c->stats, 0, sizeof *c->stats); /* the setup's parts are timed into it as it goes */
    if (!e.local || (e.async && dd)) {
        const int known = e.async ? dfa__exec_agreed_groups_of(c, f, e.bwd) : 0;
        groups = known > 0 ? known : dfa__exec_choose_groups(&e, dd, kind);
        record(&e, dfa__exec_prepare(&e, dd, kind, (int)groups, fn));
    }
    const double t_agree = now();
    const int nf = DFA__AGREED_FIELDS;
    dfa_status st = e.async && masked ? dfa__exec_agree_masked_device(&e, f, names, nf, &groups, fn)
                    : e.async         ? dfa__exec_agree_device(&e, dd != NULL, f, names, nf, &groups, fn)
                                      : dfa__exec_agree(&e, f, names, nf, NULL, fn);
    if (c->stats) {
        c->stats->setup_plan_s = t_agree - start;
        c->stats->setup_agree_s = now() - t_agree;
    }
    /* another rank needs more groups */
    if (!st && groups != e.G && (st = dfa__exec_prepare(&e, dd, kind, (int)groups, fn)))
        st = dfa__fail(DFA_ERR_INTERNAL, fn, "could not re-plan in %lld head groups: %s", (long long)groups,
                       dfa_last_error());
    if (!st && masked) st = dfa__exec_setup_mask(&e, dd, kind, (int)groups, fn);
    if (st) {
        release(&e);
        return st == DFA_ERR_BACKEND ? dfa__exec_backend_failure(st, fn) : st;
    }

    dfa__dist_stats *stats = c->stats;
    if (stats) {
        stats->steps = e.T;
        stats->setup_s = now() - start;
    }
    e.direct = dfa__exec_use_direct(&e);
    double fin = now();
    for (int g = 0; g < e.G && !st; g++) {
        if (e.G > 1) {
            dfa__exec_pack_group(&e, io, g);
            e.io = &e.gio;
        }
        if (!e.ghost) dfa__exec_reset_acc(&e);
        st = dfa__exec_run_steps(&e, stats);
        if (!st && e.ops->take_error) record(&e, e.ops->take_error(e.ctx, fn));
        if (st) { /* a communication failure: peers may be stuck; nothing more can be exchanged safely */
            st = dfa__exec_backend_failure(st, fn);
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
                return dfa__fail(ls, fn, "%s", dfa__exec_unprefixed(text, fn));
            }
        } else if ((st = dfa__exec_agree(&e, NULL, NULL, 0, NULL, fn))) {
            /* (with head groups on the host, the groups before a failure have been written) */
            release(&e);
            return st == DFA_ERR_BACKEND ? dfa__exec_backend_failure(st, fn) : st;
        }
        /* Everyone succeeded: round the accumulators into the caller's outputs. */
        dfa__exec_store_group(&e, io, g);
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
