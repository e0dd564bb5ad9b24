/* The MPI backend of dfa_comm: nonblocking point-to-point with MPI_BYTE on a duplicate of
 * the caller's communicator, MPI_ERRORS_RETURN, every failure mapped to DFA_ERR_BACKEND
 * with MPI's own text. Buffers are host memory (compute_cpu.c).
 *
 * Every wait has a deadline (dfa_comm_set_timeout): transfers and collectives are all
 * nonblocking (MPI_Isend/Irecv, MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather) and polled with
 * MPI_Testall, so that a rank whose peer never makes the same call gets DFA_ERR_BACKEND
 * instead of waiting forever. After a timeout the communicator only reports it. MPI cannot
 * take back an unfinished collective, nor reliably a send: the collectives work on buffers
 * of the communicator's own, and whatever MPI may still touch after a timeout stays
 * allocated (receives are cancelled), so that a late peer never writes into the caller's
 * memory or into memory given back. */
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/error.h"
#include "comm.h"
#include "distflash_mpi.h"
#include "mpi_error.h"

/* MPI counts are int: larger transfers go as several messages with the same tag
   (they match in order). */
#define PIECE ((size_t)1 << 30)

/* Requests MPI may still complete after a timeout, with the buffer they use. */
typedef struct abandoned {
    struct abandoned *next;
    void *buf; /* owned by the communicator (collectives), or NULL (point-to-point: the executor's) */
    int n;
    MPI_Request req[];
} abandoned;

typedef struct {
    MPI_Comm comm;
    double timeout;      /* seconds a wait may take */
    char failed[256];    /* after a timeout: what timed out ("" while usable) */
    abandoned *left;     /* kept until destroy */
} mpi_impl;

typedef struct {
    int n;
    MPI_Request req[];
} mpi_pending;

static MPI_Comm comm_of(dfa_comm *c) { return ((mpi_impl *)c->impl)->comm; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dfa_status dfa__mpi_failed(const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return dfa__fail(DFA_ERR_BACKEND, call, "MPI error %d: %s", code, len ? text : "(no text)");
}

/* A communicator that timed out refuses everything after, naming what timed out. */
static dfa_status check_usable(const mpi_impl *m, const char *call) {
    if (!m->failed[0]) return DFA_OK;
    return dfa__fail(DFA_ERR_BACKEND, call,
                     "this communicator is unusable since an earlier call timed out (%s); destroy it",
                     m->failed);
}

/* Keeps the requests of req[0..n) that MPI has not completed, with buf (freed at destroy, and
   only there); frees buf now when none is left. Point-to-point receives are cancelled first
   (an unmatched one then completes at once); collectives cannot be. */
static void abandon_requests(mpi_impl *m, MPI_Request *req, int n, void *buf, int cancel) {
    int live = 0;
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        if (cancel) {
            MPI_Cancel(&req[i]);
            int done = 0;
            MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
            if (done) continue;
        }
        req[live++] = req[i];
    }
    if (live == 0) {
        free(buf);
        return;
    }
    abandoned *a = malloc(sizeof *a + sizeof(MPI_Request) * (size_t)live);
    if (!a) return; /* the requests and buf stay unreachable: leaked, never reused */
    a->buf = buf;
    a->n = live;
    memcpy(a->req, req, sizeof(MPI_Request) * (size_t)live);
    a->next = m->left;
    m->left = a;
}

/* Waits until req[0..n) complete or the communicator's timeout has passed since the call.
   On a timeout the communicator becomes unusable and the requests are abandoned with buf;
   otherwise buf is left to the caller. */
static dfa_status settle(mpi_impl *m, MPI_Request *req, int n, void *buf, int cancel, const char *call) {
    const double t0 = now(), deadline = t0 + m->timeout;
    for (long spin = 0;; spin++) {
        int done = 0;
        const int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            abandon_requests(m, req, n, buf, cancel);
            return dfa__mpi_failed(call, rc);
        }
        if (done) return DFA_OK;
        if (spin >= 64) sched_yield(); /* on an oversubscribed machine the peer needs the core */
        if (now() > deadline) break;
    }
    snprintf(m->failed, sizeof m->failed, "%s waited %g s, the communicator's timeout", call, m->timeout);
    abandon_requests(m, req, n, buf, cancel);
    return dfa__fail(DFA_ERR_BACKEND, call,
                     "timed out after %g s waiting for the other ranks (dfa_comm_set_timeout): a rank did not "
                     "make the same call, or is far behind; the communicator is unusable now (destroy it)",
                     m->timeout);
}

static size_t pieces(size_t bytes) { return bytes == 0 ? 1 : (bytes + PIECE - 1) / PIECE; }

/* Cancels and frees what a failed start had begun (best effort, the failure is reported anyway). */
static void abandon(mpi_pending *p) {
    for (int i = 0; i < p->n; i++) {
        if (p->req[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&p->req[i]);
        MPI_Request_free(&p->req[i]);
    }
    free(p);
}

static dfa_status mpi_start(dfa_comm *c, const dfa__xfer *x, int n, void **pending) {
    *pending = NULL;
    dfa_status st = check_usable(c->impl, x && n ? (x[0].is_send ? "MPI_Isend" : "MPI_Irecv") : "MPI_Isend");
    if (st) return st;
    if (n == 0) return DFA_OK;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += pieces(x[i].bytes);
    if (total > (size_t)INT_MAX)
        return dfa__fail(DFA_ERR_UNSUPPORTED, "MPI_Isend", "too many transfers in one step (%zu)", total);
    mpi_pending *p = malloc(sizeof *p + sizeof(MPI_Request) * total);
    if (!p) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "MPI_Isend", "cannot allocate %zu requests", total);
    p->n = 0;
    MPI_Comm comm = comm_of(c);
    for (int i = 0; i < n; i++) {
        const size_t np = pieces(x[i].bytes);
        for (size_t k = 0; k < np; k++) {
            char *buf = (char *)x[i].buf + k * PIECE;
            const size_t left = x[i].bytes - k * PIECE;
            const int count = (int)(left < PIECE ? left : PIECE);
            MPI_Request *r = &p->req[p->n];
            const int rc = x[i].is_send ? MPI_Isend(buf, count, MPI_BYTE, x[i].peer, x[i].tag, comm, r)
                                        : MPI_Irecv(buf, count, MPI_BYTE, x[i].peer, x[i].tag, comm, r);
            if (rc != MPI_SUCCESS) {
                abandon(p);
                return dfa__mpi_failed(x[i].is_send ? "MPI_Isend" : "MPI_Irecv", rc);
            }
            p->n++;
        }
    }
    *pending = p;
    return DFA_OK;
}

static dfa_status mpi_wait(dfa_comm *c, void *pending) {
    mpi_pending *p = pending;
    if (!p) return DFA_OK;
    const dfa_status st = settle(c->impl, p->req, p->n, NULL, 1, "MPI_Waitall");
    free(p);
    return st;
}

/* A collective on a buffer of the communicator's own: the bytes at `in` are copied in, the
   result is copied out to `out` once every rank has taken part. */
typedef int (*start_fn)(void *buf, size_t bytes, const void *arg, MPI_Comm comm, MPI_Request *r);

static dfa_status collective(dfa_comm *c, const void *in, void *out, size_t bytes, start_fn start, const void *arg,
                             const char *call) {
    mpi_impl *m = c->impl;
    dfa_status st = check_usable(m, call);
    if (st) return st;
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, call, "cannot allocate %zu bytes", bytes);
    memcpy(buf, in, bytes);
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = start(buf, bytes, arg, m->comm, &r);
    if (rc != MPI_SUCCESS) {
        free(buf);
        return dfa__mpi_failed(call, rc);
    }
    if ((st = settle(m, &r, 1, buf, 0, call))) return st; /* buf went with the request */
    memcpy(out, buf, bytes);
    free(buf);
    return DFA_OK;
}

static int start_allreduce_max(void *buf, size_t bytes, const void *arg, MPI_Comm comm, MPI_Request *r) {
    (void)arg;
    return MPI_Iallreduce(MPI_IN_PLACE, buf, (int)(bytes / sizeof(int64_t)), MPI_INT64_T, MPI_MAX, comm, r);
}

static dfa_status mpi_allreduce_max(dfa_comm *c, int64_t *v, int n) {
    return collective(c, v, v, sizeof(int64_t) * (size_t)(n > 0 ? n : 0), start_allreduce_max, NULL, "MPI_Allreduce");
}

static int start_bcast(void *buf, size_t bytes, const void *arg, MPI_Comm comm, MPI_Request *r) {
    return MPI_Ibcast(buf, (int)bytes, MPI_BYTE, *(const int *)arg, comm, r);
}

static dfa_status mpi_bcast(dfa_comm *c, void *buf, size_t bytes, int root) {
    if (bytes > (size_t)INT_MAX) return dfa__fail(DFA_ERR_UNSUPPORTED, "MPI_Bcast", "%zu bytes is too many", bytes);
    return collective(c, buf, buf, bytes, start_bcast, &root, "MPI_Bcast");
}

static dfa_status mpi_allgather(dfa_comm *c, const void *send, void *recv, size_t bytes) {
    static const char call[] = "MPI_Allgather";
    const size_t all = bytes * (size_t)c->size;
    if (bytes > (size_t)INT_MAX || (c->size > 0 && all / (size_t)c->size != bytes) || all > SIZE_MAX - bytes)
        return dfa__fail(DFA_ERR_UNSUPPORTED, call, "%zu bytes from each of %d ranks is too many", bytes, c->size);
    mpi_impl *m = c->impl;
    dfa_status st = check_usable(m, call);
    if (st) return st;
    char *buf = malloc(all + bytes ? all + bytes : 1); /* every rank's block, then this rank's own */
    if (!buf) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, call, "cannot allocate %zu bytes", all + bytes);
    memcpy(buf + all, send, bytes);
    MPI_Request r = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgather(buf + all, (int)bytes, MPI_BYTE, buf, (int)bytes, MPI_BYTE, m->comm, &r);
    if (rc != MPI_SUCCESS) {
        free(buf);
        return dfa__mpi_failed(call, rc);
    }
    if ((st = settle(m, &r, 1, buf, 0, call))) return st;
    memcpy(recv, buf, all);
    free(buf);
    return DFA_OK;
}

static void mpi_destroy(dfa_comm *c) {
    mpi_impl *m = c->impl;
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* Abandoned requests that have completed by now go with their buffers; the others and
       theirs are left to MPI (it may still use them). */
    while (m->left) {
        abandoned *a = m->left;
        m->left = a->next;
        int done = 0;
        if (!finalized) MPI_Testall(a->n, a->req, &done, MPI_STATUSES_IGNORE);
        if (done) free(a->buf);
        free(a);
    }
    if (!finalized && m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
    free(m);
    free(c);
}

static const dfa__comm_ops mpi_ops = {
    .name = "mpi",
    .start = mpi_start,
    .wait = mpi_wait,
    .allreduce_max = mpi_allreduce_max,
    .bcast = mpi_bcast,
    .allgather = mpi_allgather,
    .destroy = mpi_destroy,
};

dfa_status dfa__mpi_check_comm(MPI_Comm comm, void *out, const char *fn) {
    if (!out) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "out is NULL");
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (!up || down)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "MPI is %s (call MPI_Init first, MPI_Finalize last)",
                         down ? "finalised" : "not initialised");
    if (comm == MPI_COMM_NULL) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "comm is MPI_COMM_NULL");
    int inter = 0;
    const int rc = MPI_Comm_test_inter(comm, &inter);
    if (rc != MPI_SUCCESS) return dfa__mpi_failed(fn, rc);
    if (inter) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "comm is an intercommunicator; use an intracommunicator");
    return DFA_OK;
}

dfa_status dfa_comm_create_mpi(MPI_Comm comm, dfa_comm **out) {
    static const char fn[] = "dfa_comm_create_mpi";
    dfa__clear_error();
    dfa_status st = dfa__mpi_check_comm(comm, out, fn);
    if (st) return st;
    int rc;

    dfa_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the communicator");
    }
    m->comm = MPI_COMM_NULL;
    m->timeout = DFA__MPI_DEFAULT_TIMEOUT;
    rc = MPI_Comm_dup(comm, &m->comm); /* collective */
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(m->comm, &c->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(m->comm, &c->size);
    if (rc != MPI_SUCCESS) {
        dfa_status st = dfa__mpi_failed(fn, rc);
        if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
        free(c);
        free(m);
        return st;
    }
    c->ops = &mpi_ops;
    c->compute = dfa__compute_cpu();
    c->impl = m;
    *out = c;
    return DFA_OK;
}

int dfa__comm_is_mpi(const dfa_comm *c) { return c && c->ops == &mpi_ops; }

dfa_status dfa__mpi_set_timeout(dfa_comm *c, double seconds, const char *fn) {
    if (!(seconds > 0.0) || !isfinite(seconds))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "seconds = %g; it must be finite and > 0", seconds);
    ((mpi_impl *)c->impl)->timeout = seconds;
    return DFA_OK;
}

#ifndef DFA_HAVE_NCCL
/* Built without NCCL: every communicator is an MPI one (comm_nccl.c has this function
   otherwise, and hands MPI communicators to dfa__mpi_set_timeout). */
dfa_status dfa_comm_set_timeout(dfa_comm *c, double seconds) {
    static const char fn[] = "dfa_comm_set_timeout";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    if (!dfa__comm_is_mpi(c))
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "c is a %s communicator, which has no timeout", c->ops->name);
    return dfa__mpi_set_timeout(c, seconds, fn);
}

/* Built without NCCL: the NCCL communicator does not exist here. */
dfa_status dfa_comm_create_nccl_mpi(MPI_Comm comm, int device, dfa_comm **out) {
    (void)comm;
    (void)device;
    (void)out;
    dfa__clear_error();
    return dfa__fail(DFA_ERR_UNSUPPORTED, "dfa_comm_create_nccl_mpi",
                     "this libdistflash was built without NCCL (cmake -DDFA_WITH_NCCL=ON with NCCL installed)");
}
#endif
