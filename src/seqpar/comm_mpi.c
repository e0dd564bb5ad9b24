/* The MPI backend of dfa_comm: nonblocking point-to-point with MPI_BYTE on a duplicate of
 * the caller's communicator, MPI_ERRORS_RETURN, every failure mapped to DFA_ERR_BACKEND
 * with MPI's own text. Buffers are host memory (compute_cpu.c). */
#include <limits.h>
#include <stdlib.h>

#include "../common/error.h"
#include "comm.h"
#include "distflash_mpi.h"
#include "mpi_error.h"

/* MPI counts are int: larger transfers go as several messages with the same tag
   (they match in order). */
#define PIECE ((size_t)1 << 30)

typedef struct {
    MPI_Comm comm;
} mpi_impl;

typedef struct {
    int n;
    MPI_Request req[];
} mpi_pending;

static MPI_Comm comm_of(dfa_comm *c) { return ((mpi_impl *)c->impl)->comm; }

dfa_status dfa__mpi_failed(const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
    text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    return dfa__fail(DFA_ERR_BACKEND, call, "MPI error %d: %s", code, len ? text : "(no text)");
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
    (void)c;
    mpi_pending *p = pending;
    if (!p) return DFA_OK;
    const int rc = MPI_Waitall(p->n, p->req, MPI_STATUSES_IGNORE);
    free(p);
    return rc == MPI_SUCCESS ? DFA_OK : dfa__mpi_failed("MPI_Waitall", rc);
}

static dfa_status mpi_allreduce_max(dfa_comm *c, int64_t *v, int n) {
    const int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comm_of(c));
    return rc == MPI_SUCCESS ? DFA_OK : dfa__mpi_failed("MPI_Allreduce", rc);
}

static dfa_status mpi_bcast(dfa_comm *c, void *buf, size_t bytes, int root) {
    if (bytes > (size_t)INT_MAX) return dfa__fail(DFA_ERR_UNSUPPORTED, "MPI_Bcast", "%zu bytes is too many", bytes);
    const int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, comm_of(c));
    return rc == MPI_SUCCESS ? DFA_OK : dfa__mpi_failed("MPI_Bcast", rc);
}

static dfa_status mpi_allgather(dfa_comm *c, const void *send, void *recv, size_t bytes) {
    if (bytes > (size_t)INT_MAX) return dfa__fail(DFA_ERR_UNSUPPORTED, "MPI_Allgather", "%zu bytes is too many", bytes);
    const int rc = MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(c));
    return rc == MPI_SUCCESS ? DFA_OK : dfa__mpi_failed("MPI_Allgather", rc);
}

static void mpi_destroy(dfa_comm *c) {
    mpi_impl *m = c->impl;
    int finalized = 0;
    MPI_Finalized(&finalized);
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

#ifndef DFA_HAVE_NCCL
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
