/* The collective agreements of a distributed pass: every rank's status and descriptor on
 * the host, and on device backends the cached agreement that runs on the stream. */
#include "exec_internal.h"

#include <string.h>

#include "../common/error.h"

/* Strips "fn: " from the front of a message that is about to be prefixed again. */
const char *dfa__exec_unprefixed(const char *msg, const char *fn) {
    const size_t n = strlen(fn);
    return strncmp(msg, fn, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ' ? msg + n + 2 : msg;
}

/* Collective: combines every rank's status (and, when nf > 0, checks that the fields agree).
   On failure every rank returns the status of the lowest failing rank, with its message. */
dfa_status dfa__exec_agree(exec *e, const int64_t *fields, const char *const *names, int nf, int64_t *most,
                           const char *fn) {
    dfa_comm *c = e->c;
    int64_t v[2 + 2 * DFA__AGREED_FIELDS];
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
        if (c->rank == root) return dfa__fail(rs, fn, "%s", dfa__exec_unprefixed(text, fn));
        return dfa__fail(rs, fn, "rank %d failed: %s", root, dfa__exec_unprefixed(text, fn));
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
dfa_status dfa__exec_backend_failure(dfa_status st, const char *fn) {
    char text[MSG_CAPACITY];
    snprintf(text, sizeof text, "%s", dfa_last_error());
    return dfa__fail(st, fn, "%s", dfa__exec_unprefixed(text, fn));
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
int dfa__exec_agreed_groups_of(const dfa_comm *c, const int64_t *f, int bwd) {
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
dfa_status dfa__exec_agree_device(exec *e, int desc_ok, const int64_t *f, const char *const *names, int nf,
                                  int64_t *groups, const char *fn) {
    dfa_comm *c = e->c;
    dfa_status st = c->ops->check_async(c, fn);
    if (st) return st;
    if (desc_ok && e->ready && dfa__exec_agreed_groups_of(c, f, e->bwd) > 0) {
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
    if ((st = dfa__exec_agree(e, f, names, nf, groups, fn))) return st;
    agreed_insert(c, f, e->bwd, (int)*groups);
    return DFA_OK;
}

/* The agreement of a masked call on a device backend: always on the host, as on host
   backends (the plan depends on the document ids, which the call may bring new, and is
   built on the host), and so never while the stream is being captured. Peers whose
   descriptor has no mask may be on the device path then (a descriptor that differs across
   ranks in q_doc or the window): as with any descriptor some ranks remember and others do
   not, that is the caller's error and ends in the communicator's timeout at worst. */
dfa_status dfa__exec_agree_masked_device(exec *e, const int64_t *f, const char *const *names, int nf,
                                         int64_t *groups, const char *fn) {
    dfa_comm *c = e->c;
    dfa_status st = c->ops->check_async(c, fn);
    if (st) return st;
    if (c->ops->capturing(c))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "a call with documents or a window (d->attn.q_doc, DFA_FLAG_WINDOW) is being captured into a "
                         "CUDA graph, but it agrees with the other ranks and plans on the host: make masked calls "
                         "outside the capture");
    return dfa__exec_agree(e, f, names, nf, groups, fn);
}
