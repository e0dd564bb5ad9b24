/* Masked distributed passes (documents, a window): every rank's document ids, the chunk
 * pairs' counts (cached on the communicator), and the masked plan the pass is planned on. */
#include "exec_internal.h"

#include <stdlib.h>
#include <string.h>

#include "../common/error.h"
#include "../common/mask.h"

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
dfa_status dfa__exec_setup_mask(exec *e, const dfa_dist_desc *dd, dfa__sched_kind kind, int groups,
                                const char *fn) {
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
    /* docs: read_ids the same on every rank */
    if ((st = dfa__exec_agree(e, NULL, NULL, 0, docs ? &read_ids : NULL, fn))) return st;
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
    if (!e->local) record(e, dfa__exec_prepare(e, dd, kind, groups, fn));
    if (c->stats) c->stats->setup_mask_plan_s = now() - t_plan;
    return dfa__exec_agree(e, NULL, NULL, 0, NULL, fn);
}
