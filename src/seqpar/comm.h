/* Internal: what is behind the opaque dfa_comm.
 *
 * The executor (executor.h) talks to the other ranks only through this small
 * table, and touches buffers only through a compute table (compute.h), so
 * that one executor serves every backend: MPI with host memory
 * (comm_mpi.c + compute_cpu.c) and NCCL with device memory and streams
 * (comm_nccl.c + compute_cuda.c).
 *
 * A communicator is used by one call at a time (the library's traffic on it
 * is matched by order and tag, so two concurrent calls could cross-match).
 *
 * Device backends are asynchronous: start and wait only order streams (the
 * call's compute stream and the backend's own), so the executor enqueues a
 * whole pass without waiting for the device. They add the `async` operations
 * below, which the executor uses instead of a host agreement on every call.
 */
#ifndef DFA_SEQPAR_COMM_H
#define DFA_SEQPAR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "compute.h"
#include "distflash.h"
#include "schedule.h"

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
    /* Every rank's `bytes` bytes at send into recv + r * bytes, on every rank (collective), in
       the memory of the communicator's compute table (host memory for MPI, the device for
       NCCL: send is read in the call stream's order, and recv is complete in that order when
       this returns; the host waits for it, with the communicator's deadline). The masked
       calls exchange their document ids with it (exec_mask.c, setup_mask). */
    dfa_status (*allgather)(dfa_comm *c, const void *send, void *recv, size_t bytes);
    /* Frees the backend's state and c itself. */
    void (*destroy)(dfa_comm *c);

    /* --- asynchronous (device) backends only; NULL for host backends --- */
    /* Before a call: DFA_OK, or the failure that an earlier call left behind (a peer's failed
       call, a timeout that aborted the communicator), reported once, with its message. */
    dfa_status (*check_async)(dfa_comm *c, const char *fn);
    /* Enqueues the per-call agreement without waiting for it: an element-wise maximum over
       all ranks of n int64 values (the same layout as the host agreement: v[0] the encoded
       status, then the fields and their negations, nf of each), and a device flag that is 1
       when no rank failed and the fields agree. *gate gets the flag's device address; the
       outputs of the call are written only where it is 1. */
    dfa_status (*agree_async)(dfa_comm *c, const int64_t *v, int nf, const int **gate, const char *fn);
    /* 1 while the call's stream is being captured into a CUDA graph (nothing may wait on the
       host then: no host agreement, no allocation). */
    int (*capturing)(dfa_comm *c);
} dfa__comm_ops;

/* Descriptors a communicator has agreed on (host agreement), so that later calls with one of
   them agree on the device only. A small most-recently-used list; a miss costs one host
   round trip. */
#define DFA__AGREED_MAX 16
#define DFA__AGREED_FIELDS 18

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
    int ws_external; /* ws is the caller's workspace (never freed by the library) */
    /* Masked calls on a device backend: every rank's document ids in the backend's memory
       ([P][batch][n] int32, the kernels read them), kept and grown like ws (never the
       caller's workspace). */
    void *mask_ids;
    size_t mask_ids_bytes;
    /* Masked calls: the last plan's chunk-pair counts (schedule.h) and what they were counted
       from (the mask's fields of the descriptor, every rank's ids on the host). A training step
       repeats one mask in every layer and in the backward: a match skips the count (exec_mask.c). */
    dfa__pair_counts mask_cache; /* all NULL until a masked call (prefix: NULL when its plan did not need it) */
    dfa_attn_desc mask_key;
    int32_t *mask_key_ids;
    size_t mask_key_bytes;
    /* Device backends: the stream (cudaStream_t) and the name of the call in progress, set by
       the entry point. */
    void *stream;
    const char *call;
    /* Device backends: descriptors agreed on this communicator (most recent first). */
    int64_t agreed[DFA__AGREED_MAX][DFA__AGREED_FIELDS];
    int agreed_groups[DFA__AGREED_MAX][2]; /* the head groups of each, per pass (0: not agreed yet) */
    int n_agreed;
    int force_groups; /* tests: run every call in this many head groups (0: choose) */
    int fold_cost;    /* tests: the masked plans' fold cost per row plus 1 (0: DFA__PLAN_FOLD_COST) */
    int split_mode;   /* tests, benchmarks: dfa__dist_set_split_pairs's on, less 1 (0: the default) */
    int force_direct; /* tests: 1 host backends write the diagonal's direct parts too, -1 no backend does
                         (exec_io.c, use_direct); 0 the default */
};

/* Frees the cached scratch (dfa_comm_destroy calls it before the backend's destroy). */
void dfa__comm_drop_cache(dfa_comm *c);

#endif
