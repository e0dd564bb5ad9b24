/* Internal: what is behind the opaque dfa_comm.
 *
 * The executor (executor.c) talks to the other ranks only through this small
 * table, and touches buffers only through a compute table (compute.h), so
 * that one executor serves every backend: MPI with host memory now
 * (comm_mpi.c + compute_cpu.c), NCCL with device memory and streams later.
 *
 * A communicator is used by one call at a time (the library's traffic on it
 * is matched by order and tag, so two concurrent calls could cross-match).
 */
#ifndef DFA_DIST_COMM_H
#define DFA_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "compute.h"
#include "distflash.h"

/* One point-to-point transfer of raw bytes. */
typedef struct {
    void *buf; /* send: read from it; receive: written into it */
    size_t bytes;
    int peer;
    int tag; /* 0 .. 32767 (the smallest upper bound MPI guarantees) */
    int is_send;
} dfa__xfer;

struct dfa__dist_stats;

typedef struct {
    const char *name; /* "mpi", ... */
    /* Starts every transfer without blocking; *pending gets a handle for wait (may be NULL when
       n == 0). Messages between two ranks with one tag match in the order they were started. */
    dfa_status (*start)(dfa_comm *c, const dfa__xfer *x, int n, void **pending);
    /* Blocks until everything `pending` started has completed, and releases it. NULL is a no-op. */
    dfa_status (*wait)(dfa_comm *c, void *pending);
    /* Element-wise maximum over all ranks of n int64 values, in place (collective). */
    dfa_status (*allreduce_max)(dfa_comm *c, int64_t *v, int n);
    /* Copies `bytes` bytes from rank root's buf into every other rank's buf (collective). */
    dfa_status (*bcast)(dfa_comm *c, void *buf, size_t bytes, int root);
    /* Frees the backend's state and c itself. */
    void (*destroy)(dfa_comm *c);
} dfa__comm_ops;

struct dfa_comm {
    const dfa__comm_ops *ops;
    const dfa__compute_ops *compute; /* where this communicator's buffers live */
    int rank, size;
    void *impl;                    /* the backend's own state */
    struct dfa__dist_stats *stats; /* optional timing of the next calls (executor.h) */
    /* Scratch kept between calls (a training step calls with the same shapes layer after
       layer; fresh buffers would be page-faulted in every time): the compute context for
       the shapes of ctx_key, and the executor's workspace. Freed by dfa__comm_drop_cache. */
    void *ctx;
    dfa_attn_desc ctx_key;
    void *ws;
    size_t ws_bytes;
};

/* Frees the cached scratch (dfa_comm_destroy calls it before the backend's destroy). */
void dfa__comm_drop_cache(dfa_comm *c);

#endif
