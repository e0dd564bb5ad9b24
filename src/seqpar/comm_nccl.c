/* The NCCL backend of dfa_comm: DistFlashAttn's transfers between GPUs.
 *
 * The communicator owns a private non-blocking NCCL communicator (split from the caller's,
 * or made from an MPI_Comm), a stream for the transfers and two events that order that
 * stream against the stream of the call in progress: start() makes the transfer stream wait
 * for everything enqueued on the call's stream so far and enqueues one NCCL group of sends
 * and receives; wait() makes the call's stream wait for the transfers. Nothing waits on the
 * host, except the host agreement (allreduce_max, bcast) that the executor runs for a new
 * descriptor, which waits for a small allreduce with a deadline.
 *
 * A watchdog thread follows the transfers: start() records an event after each group, and
 * when the oldest event has not completed after the timeout the thread aborts the NCCL
 * communicator (the device work then ends) and keeps a message naming the waiting step;
 * check_async returns it. One mutex guards the NCCL communicator (every NCCL call, the
 * abort) and the watch list.
 *
 * The per-call device agreement (agree_async) reduces the status vector on the transfer
 * stream into one of a ring of slots, computes the gate flag there, and copies both to
 * pinned host memory with an event, so that a later call can report a peer's failure
 * without waiting (check_async inspects the slots whose events have completed). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "../common/error.h"
#include "comm.h"
#include "comm_nccl.h"
#include "distflash_nccl.h"
#include "kernels.cuh"
#ifdef DFA_HAVE_MPI
#include "mpi_error.h" /* dfa_comm_set_timeout also sets the MPI communicators' */
#endif

#define WATCH_MAX 1024  /* transfers watched at once (more in flight go unwatched) */
#define SLOTS 256       /* per-call agreement slots */
#define MSG 512
#define STAGE_BYTES 4096 /* host agreement: the vector or a message */

typedef struct {
    cudaEvent_t ev;
    char what[160];
} watch;

typedef struct {
    int64_t v0; /* the reduced status word */
    int gate;
    int pad;
} slot_host;

typedef struct {
    ncclComm_t comm; /* NULL once aborted */
    int device;
    double timeout;
    cudaStream_t xs;        /* the transfer stream */
    cudaEvent_t fork, join; /* call stream -> xs, xs -> call stream */
    cudaEvent_t agree_ev;   /* host agreement */
    void *dev_stage;        /* host agreement: device side */
    char *host_stage;       /* pinned */
    int64_t *slot_vec;      /* [SLOTS][DFA__SP_AGREE_MAX] on the device */
    int *slot_gate;         /* [SLOTS] on the device */
    slot_host *slot_host;   /* [SLOTS] pinned */
    cudaEvent_t slot_ev[SLOTS];
    int slot_pending[SLOTS];
    int next_slot, oldest_slot;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_started, stop;
    watch ring[WATCH_MAX];
    int head, count;
    double head_since;
    int aborted;
    char abort_msg[MSG];
} nccl_impl;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static nccl_impl *impl_of(dfa_comm *c) { return c->impl; }

dfa_status dfa__nccl_fail(const char *fn, const char *call, ncclResult_t r, ncclComm_t comm) {
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    return dfa__fail(DFA_ERR_BACKEND, fn, "%s failed: NCCL error %d: %s%s%s", call, (int)r, ncclGetErrorString(r),
                     last && *last ? ": " : "", last && *last ? last : "");
}

static dfa_status cuda_failed(const char *fn, const char *call, cudaError_t e) {
    return dfa__fail(e == cudaErrorMemoryAllocation ? DFA_ERR_OUT_OF_MEMORY : DFA_ERR_BACKEND, fn, "%s failed: %s (%s)",
                     call, cudaGetErrorString(e), cudaGetErrorName(e));
}

dfa_status dfa__nccl_settle(ncclComm_t *comm, ncclResult_t r, double timeout, const char *fn, const char *call) {
    if (r != ncclSuccess && r != ncclInProgress) return dfa__nccl_fail(fn, call, r, *comm);
    const double deadline = now() + timeout;
    while (r == ncclInProgress) {
        const ncclResult_t q = ncclCommGetAsyncError(*comm, &r);
        if (q != ncclSuccess) return dfa__nccl_fail(fn, "ncclCommGetAsyncError", q, *comm);
        if (r == ncclInProgress) {
            if (now() > deadline) {
                ncclCommAbort(*comm);
                *comm = NULL;
                return dfa__fail(DFA_ERR_BACKEND, fn,
                                 "timed out after %g s in %s (a peer did not make the same call, or died); "
                                 "the NCCL communicator was aborted",
                                 timeout, call);
            }
            pause_us(20);
        }
    }
    if (r != ncclSuccess) return dfa__nccl_fail(fn, call, r, *comm);
    return DFA_OK;
}

/* Under mu: aborts the NCCL communicator and keeps the reason. */
static void abort_locked(nccl_impl *m, const char *why) {
    if (m->comm) ncclCommAbort(m->comm);
    m->comm = NULL;
    if (!m->aborted) snprintf(m->abort_msg, sizeof m->abort_msg, "%s", why);
    m->aborted = 1;
    m->count = 0;
}

/* Under mu: the failure behind an aborted communicator. */
static dfa_status aborted_failure(const nccl_impl *m, const char *fn) {
    return dfa__fail(DFA_ERR_BACKEND, fn, "%s; the communicator was aborted: destroy it and create another",
                     m->abort_msg);
}

/* Under mu: waits for ev on the host with the communicator's deadline; aborts on a timeout. */
static dfa_status wait_event_locked(nccl_impl *m, cudaEvent_t ev, const char *what, const char *fn) {
    const double deadline = now() + m->timeout;
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return DFA_OK;
        if (e != cudaErrorNotReady) return cuda_failed(fn, what, e);
        if (now() > deadline) {
            char why[MSG];
            snprintf(why, sizeof why, "timed out after %g s in %s (a peer did not make the same call, or died)",
                     m->timeout, what);
            abort_locked(m, why);
            return aborted_failure(m, fn);
        }
        pause_us(20);
    }
}

/* Under mu: watch the work enqueued on the transfer stream so far. */
static void watch_locked(nccl_impl *m, const char *what) {
    if (m->count == WATCH_MAX) return;
    watch *w = &m->ring[(m->head + m->count) % WATCH_MAX];
    if (cudaEventRecord(w->ev, m->xs) != cudaSuccess) return;
    snprintf(w->what, sizeof w->what, "%s", what);
    if (m->count++ == 0) m->head_since = now();
    pthread_cond_signal(&m->cv);
}

static void *watchdog(void *arg) {
    nccl_impl *m = arg;
    cudaSetDevice(m->device);
    /* queries from this thread must stay legal while the application captures a graph */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (m->count == 0) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        watch *w = &m->ring[m->head];
        const cudaError_t e = cudaEventQuery(w->ev);
        if (e != cudaErrorNotReady) { /* done (or an error the calls will report): next */
            if (e != cudaSuccess) (void)cudaGetLastError();
            m->head = (m->head + 1) % WATCH_MAX;
            m->count--;
            m->head_since = now();
            continue;
        }
        if (now() - m->head_since > m->timeout) {
            char why[MSG];
            snprintf(why, sizeof why, "timed out after %g s waiting for %s (a peer died, hangs, or did not make the "
                     "same call)", m->timeout, w->what);
            abort_locked(m, why);
            continue;
        }
        pthread_mutex_unlock(&m->mu);
        pause_us(2000);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static int is_capturing(cudaStream_t s) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return st == cudaStreamCaptureStatusActive;
}

static int nccl_capturing(dfa_comm *c) { return is_capturing((cudaStream_t)c->stream); }

/* Under mu: the transfer stream waits for the call's stream. */
static dfa_status fork_locked(nccl_impl *m, cudaStream_t s, const char *fn) {
    cudaError_t e = cudaEventRecord(m->fork, s);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(m->xs, m->fork, 0);
    return e == cudaSuccess ? DFA_OK : cuda_failed(fn, "ordering the transfer stream after the call's stream", e);
}

/* Under mu: the call's stream waits for the transfer stream. */
static dfa_status join_locked(nccl_impl *m, cudaStream_t s, const char *fn) {
    cudaError_t e = cudaEventRecord(m->join, m->xs);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(s, m->join, 0);
    return e == cudaSuccess ? DFA_OK : cuda_failed(fn, "ordering the call's stream after the transfers", e);
}

static dfa_status nccl_start(dfa_comm *c, const dfa__xfer *x, int n, void **pending) {
    static const char fn[] = "ncclSend/ncclRecv";
    nccl_impl *m = impl_of(c);
    *pending = NULL;
    if (n == 0) return DFA_OK;
    const cudaStream_t s = (cudaStream_t)c->stream;
    pthread_mutex_lock(&m->mu);
    dfa_status st = m->aborted ? aborted_failure(m, fn) : fork_locked(m, s, fn);
    if (!st) {
        ncclResult_t r = ncclGroupStart();
        for (int i = 0; i < n && r == ncclSuccess; i++)
            r = x[i].is_send ? ncclSend(x[i].buf, x[i].bytes, ncclUint8, x[i].peer, m->comm, m->xs)
                             : ncclRecv(x[i].buf, x[i].bytes, ncclUint8, x[i].peer, m->comm, m->xs);
        const ncclResult_t g = ncclGroupEnd();
        if (r != ncclSuccess) st = dfa__nccl_fail(fn, "ncclSend/ncclRecv", r, m->comm);
        else st = dfa__nccl_settle(&m->comm, g, m->timeout, fn, "ncclGroupEnd");
        if (!m->comm) abort_locked(m, "the transfers of a step did not start in time");
    }
    if (!st && !is_capturing(s)) {
        /* the step of these transfers is in their tags (exec_steps.c tag_of) */
        char what[160], peers[96] = "";
        int len = 0;
        for (int i = 0; i < n && len < (int)sizeof peers - 8; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= x[j].peer == x[i].peer;
            if (!seen) len += snprintf(peers + len, sizeof peers - (size_t)len, "%s%d", len ? ", " : "", x[i].peer);
        }
        snprintf(what, sizeof what, "the transfers of %s at step %d with rank(s) %s", c->call ? c->call : "a call",
                 x[0].tag >> 4, peers);
        watch_locked(m, what);
    }
    pthread_mutex_unlock(&m->mu);
    if (!st) *pending = m; /* any non-NULL handle: wait() only orders streams */
    return st;
}

static dfa_status nccl_wait(dfa_comm *c, void *pending) {
    if (!pending) return DFA_OK;
    nccl_impl *m = impl_of(c);
    pthread_mutex_lock(&m->mu);
    const dfa_status st = join_locked(m, (cudaStream_t)c->stream, "dfa_dist (wait)");
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* The host agreement: n int64 values (or, for bcast, raw bytes) through the staging buffers. */
static dfa_status host_collective(dfa_comm *c, void *buf, size_t bytes, int root, int reduce) {
    const char *fn = c->call ? c->call : "dfa_dist";
    nccl_impl *m = impl_of(c);
    if (bytes > STAGE_BYTES) return dfa__fail(DFA_ERR_INTERNAL, fn, "agreement of %zu bytes is too large", bytes);
    pthread_mutex_lock(&m->mu);
    dfa_status st = m->aborted ? aborted_failure(m, fn) : DFA_OK;
    if (!st) {
        memcpy(m->host_stage, buf, bytes);
        cudaError_t e = cudaMemcpyAsync(m->dev_stage, m->host_stage, bytes, cudaMemcpyHostToDevice, m->xs);
        if (e != cudaSuccess) st = cuda_failed(fn, "cudaMemcpyAsync (agreement)", e);
    }
    if (!st) {
        const ncclResult_t r = reduce ? ncclAllReduce(m->dev_stage, m->dev_stage, bytes / 8, ncclInt64, ncclMax, m->comm, m->xs)
                                      : ncclBroadcast(m->dev_stage, m->dev_stage, bytes, ncclUint8, root, m->comm, m->xs);
        st = dfa__nccl_settle(&m->comm, r, m->timeout, fn, reduce ? "ncclAllReduce (agreement)" : "ncclBroadcast (agreement)");
        if (!m->comm) abort_locked(m, "the argument agreement did not start in time");
    }
    if (!st) {
        cudaError_t e = cudaMemcpyAsync(m->host_stage, m->dev_stage, bytes, cudaMemcpyDeviceToHost, m->xs);
        if (e == cudaSuccess) e = cudaEventRecord(m->agree_ev, m->xs);
        st = e == cudaSuccess ? wait_event_locked(m, m->agree_ev, "the argument agreement", fn)
                              : cuda_failed(fn, "cudaMemcpyAsync (agreement)", e);
    }
    if (!st) memcpy(buf, m->host_stage, bytes);
    pthread_mutex_unlock(&m->mu);
    return st;
}

static dfa_status nccl_allreduce_max(dfa_comm *c, int64_t *v, int n) {
    return host_collective(c, v, sizeof(int64_t) * (size_t)n, 0, 1);
}

static dfa_status nccl_bcast(dfa_comm *c, void *buf, size_t bytes, int root) {
    return host_collective(c, buf, bytes, root, 0);
}

/* Device memory to device memory on the transfer stream, after the call's stream and before
   its next work; the host waits for it with the deadline (masked calls synchronise anyway:
   their plan is built on the host), so a peer that never comes aborts instead of hanging. */
static dfa_status nccl_allgather(dfa_comm *c, const void *send, void *recv, size_t bytes) {
    const char *fn = c->call ? c->call : "dfa_dist";
    nccl_impl *m = impl_of(c);
    const cudaStream_t s = (cudaStream_t)c->stream;
    pthread_mutex_lock(&m->mu);
    dfa_status st = m->aborted ? aborted_failure(m, fn) : fork_locked(m, s, fn);
    if (!st) {
        const ncclResult_t r = ncclAllGather(send, recv, bytes, ncclUint8, m->comm, m->xs);
        st = dfa__nccl_settle(&m->comm, r, m->timeout, fn, "ncclAllGather (document ids)");
        if (!m->comm) abort_locked(m, "the exchange of document ids did not start in time");
    }
    if (!st) {
        const cudaError_t e = cudaEventRecord(m->agree_ev, m->xs);
        st = e == cudaSuccess ? wait_event_locked(m, m->agree_ev, "the exchange of document ids", fn)
                              : cuda_failed(fn, "cudaEventRecord (document ids)", e);
    }
    if (!st) st = join_locked(m, s, fn);
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* Under mu: the failure recorded in completed slots, if any (each reported once). */
static dfa_status inspect_slots_locked(dfa_comm *c, nccl_impl *m, const char *fn) {
    while (m->oldest_slot != m->next_slot) {
        const int i = m->oldest_slot;
        if (m->slot_pending[i]) {
            const cudaError_t e = cudaEventQuery(m->slot_ev[i]);
            if (e == cudaErrorNotReady) break;
            m->slot_pending[i] = 0;
            if (e != cudaSuccess) return cuda_failed(fn, "the agreement of an earlier call", e);
            const slot_host h = m->slot_host[i];
            m->oldest_slot = (i + 1) % SLOTS;
            if (h.v0 != INT64_MIN) {
                const int rank = (int)(-h.v0 / 16);
                const dfa_status rs = (dfa_status)(-h.v0 % 16);
                if (rank != c->rank)
                    return dfa__fail(rs, fn,
                                     "rank %d failed in an earlier call on this communicator (%s; its message is on "
                                     "that rank); that call's outputs were left untouched on every rank",
                                     rank, dfa_status_string(rs));
            } else if (!h.gate) {
                return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                                 "the descriptor differed across ranks in an earlier call on this communicator; that "
                                 "call's outputs were left untouched on every rank");
            }
            continue;
        }
        m->oldest_slot = (i + 1) % SLOTS;
    }
    return DFA_OK;
}

static dfa_status nccl_check_async(dfa_comm *c, const char *fn) {
    nccl_impl *m = impl_of(c);
    /* while the call's stream is captured, events may not be queried: look next time */
    const int capturing = c->stream && is_capturing((cudaStream_t)c->stream);
    pthread_mutex_lock(&m->mu);
    const dfa_status st = m->aborted ? aborted_failure(m, fn) : capturing ? DFA_OK : inspect_slots_locked(c, m, fn);
    pthread_mutex_unlock(&m->mu);
    return st;
}

static dfa_status nccl_agree_async(dfa_comm *c, const int64_t *v, int nf, const int **gate, const char *fn) {
    nccl_impl *m = impl_of(c);
    const cudaStream_t s = (cudaStream_t)c->stream;
    const int nv = 1 + 2 * nf;
    if (nv > DFA__SP_AGREE_MAX) return dfa__fail(DFA_ERR_INTERNAL, fn, "agreement vector of %d values is too long", nv);
    dfa__sp_vec vec;
    memset(&vec, 0, sizeof vec);
    memcpy(vec.v, v, sizeof(int64_t) * (size_t)nv);
    const int capturing = is_capturing(s);
    pthread_mutex_lock(&m->mu);
    dfa_status st = m->aborted ? aborted_failure(m, fn) : DFA_OK;
    const int i = m->next_slot;
    if (!st && !capturing && (m->next_slot + 1) % SLOTS == m->oldest_slot) {
        /* the ring is full of calls whose results nobody has looked at yet: look (waiting for the oldest) */
        if (m->slot_pending[m->oldest_slot])
            st = wait_event_locked(m, m->slot_ev[m->oldest_slot], "the agreement of an earlier call", fn);
        if (!st) st = inspect_slots_locked(c, m, fn);
        if (!st && (m->next_slot + 1) % SLOTS == m->oldest_slot) m->oldest_slot = (m->oldest_slot + 1) % SLOTS;
    }
    int64_t *dv = m->slot_vec + (size_t)i * DFA__SP_AGREE_MAX;
    if (!st) st = fork_locked(m, s, fn);
    cudaError_t e = cudaSuccess;
    if (!st && (e = dfa__sp_set_vec(dv, vec, nv, m->xs)) != cudaSuccess) st = cuda_failed(fn, "agreement kernel launch", e);
    if (!st) {
        st = dfa__nccl_settle(&m->comm, ncclAllReduce(dv, dv, (size_t)nv, ncclInt64, ncclMax, m->comm, m->xs),
                              m->timeout, fn, "ncclAllReduce (agreement)");
        if (!m->comm) abort_locked(m, "the per-call agreement did not start in time");
    }
    if (!st && (e = dfa__sp_gate(dv, nf, &m->slot_gate[i], m->xs)) != cudaSuccess)
        st = cuda_failed(fn, "agreement kernel launch", e);
    if (!st && !capturing) {
        e = cudaMemcpyAsync(&m->slot_host[i].v0, dv, sizeof(int64_t), cudaMemcpyDeviceToHost, m->xs);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(&m->slot_host[i].gate, &m->slot_gate[i], sizeof(int), cudaMemcpyDeviceToHost, m->xs);
        if (e == cudaSuccess) e = cudaEventRecord(m->slot_ev[i], m->xs);
        if (e != cudaSuccess) st = cuda_failed(fn, "cudaMemcpyAsync (agreement)", e);
        else m->slot_pending[i] = 1;
    }
    if (!st) {
        m->next_slot = (i + 1) % SLOTS;
        if (!capturing) {
            char what[160];
            snprintf(what, sizeof what, "the argument agreement of %s", fn);
            watch_locked(m, what);
        }
        st = join_locked(m, s, fn);
    }
    pthread_mutex_unlock(&m->mu);
    if (!st) *gate = &m->slot_gate[i];
    return st;
}

static void free_impl(nccl_impl *m) {
    if (!m) return;
    if (m->thread_started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    if (m->comm) {
        /* flush what is in flight; a peer that never completes it ends in an abort */
        ncclResult_t r = ncclCommFinalize(m->comm);
        if (dfa__nccl_settle(&m->comm, r, m->timeout, "dfa_comm_destroy", "ncclCommFinalize") == DFA_OK && m->comm)
            ncclCommDestroy(m->comm);
        else if (m->comm)
            ncclCommAbort(m->comm);
    }
    if (m->xs) cudaStreamSynchronize(m->xs);
    for (int i = 0; i < WATCH_MAX; i++)
        if (m->ring[i].ev) cudaEventDestroy(m->ring[i].ev);
    for (int i = 0; i < SLOTS; i++)
        if (m->slot_ev[i]) cudaEventDestroy(m->slot_ev[i]);
    if (m->fork) cudaEventDestroy(m->fork);
    if (m->join) cudaEventDestroy(m->join);
    if (m->agree_ev) cudaEventDestroy(m->agree_ev);
    cudaFree(m->dev_stage);
    cudaFree(m->slot_vec);
    cudaFree(m->slot_gate);
    cudaFreeHost(m->host_stage);
    cudaFreeHost(m->slot_host);
    if (m->xs) cudaStreamDestroy(m->xs);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

static void nccl_destroy(dfa_comm *c) {
    free_impl(c->impl);
    free(c);
}

static const dfa__comm_ops nccl_ops = {
    .name = "nccl",
    .start = nccl_start,
    .wait = nccl_wait,
    .allreduce_max = nccl_allreduce_max,
    .bcast = nccl_bcast,
    .allgather = nccl_allgather,
    .destroy = nccl_destroy,
    .check_async = nccl_check_async,
    .agree_async = nccl_agree_async,
    .capturing = nccl_capturing,
};

dfa_status dfa__comm_from_nccl(ncclComm_t own, dfa_comm **out, const char *fn) {
    dfa_comm *c = calloc(1, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        ncclCommAbort(own);
        return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate the communicator");
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->comm = own;
    m->timeout = DFA__NCCL_DEFAULT_TIMEOUT;
    dfa_status st = DFA_OK;
    ncclResult_t r;
    if ((r = ncclCommCuDevice(own, &m->device)) != ncclSuccess || (r = ncclCommUserRank(own, &c->rank)) != ncclSuccess ||
        (r = ncclCommCount(own, &c->size)) != ncclSuccess)
        st = dfa__nccl_fail(fn, "ncclCommCuDevice/UserRank/Count", r, own);
    cudaError_t e = cudaSuccess;
#define DFA__TRY(call)                                      \
    do {                                                    \
        if (!st && (e = (call)) != cudaSuccess) st = cuda_failed(fn, #call, e); \
    } while (0)
    DFA__TRY(cudaStreamCreateWithFlags(&m->xs, cudaStreamNonBlocking));
    DFA__TRY(cudaEventCreateWithFlags(&m->fork, cudaEventDisableTiming));
    DFA__TRY(cudaEventCreateWithFlags(&m->join, cudaEventDisableTiming));
    DFA__TRY(cudaEventCreateWithFlags(&m->agree_ev, cudaEventDisableTiming));
    for (int i = 0; i < WATCH_MAX; i++) DFA__TRY(cudaEventCreateWithFlags(&m->ring[i].ev, cudaEventDisableTiming));
    for (int i = 0; i < SLOTS; i++) DFA__TRY(cudaEventCreateWithFlags(&m->slot_ev[i], cudaEventDisableTiming));
    DFA__TRY(cudaMalloc(&m->dev_stage, STAGE_BYTES));
    DFA__TRY(cudaMalloc((void **)&m->slot_vec, sizeof(int64_t) * SLOTS * DFA__SP_AGREE_MAX));
    DFA__TRY(cudaMalloc((void **)&m->slot_gate, sizeof(int) * SLOTS));
    DFA__TRY(cudaMallocHost((void **)&m->host_stage, STAGE_BYTES));
    DFA__TRY(cudaMallocHost((void **)&m->slot_host, sizeof(slot_host) * SLOTS));
#undef DFA__TRY
    if (!st) {
        if (pthread_create(&m->thread, NULL, watchdog, m) != 0)
            st = dfa__fail(DFA_ERR_BACKEND, fn, "cannot start the communicator's watchdog thread");
        else
            m->thread_started = 1;
    }
    if (st) {
        ncclCommAbort(m->comm); /* it never carried anything of the caller's */
        m->comm = NULL;
        free_impl(m);
        free(c);
        return st;
    }
    c->ops = &nccl_ops;
    c->compute = dfa__compute_cuda();
    c->impl = m;
    *out = c;
    return DFA_OK;
}

dfa_status dfa_comm_create_nccl(ncclComm_t comm, dfa_comm **out) {
    static const char fn[] = "dfa_comm_create_nccl";
    dfa__clear_error();
    if (!out) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "out is NULL");
    if (!comm) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "comm is NULL");
    int rank = 0, device = 0, current = 0;
    ncclResult_t r = ncclCommUserRank(comm, &rank);
    if (r == ncclSuccess) r = ncclCommCuDevice(comm, &device);
    if (r != ncclSuccess) return dfa__nccl_fail(fn, "ncclCommUserRank/ncclCommCuDevice", r, comm);
    const cudaError_t e = cudaGetDevice(&current);
    if (e != cudaSuccess) return cuda_failed(fn, "cudaGetDevice", e);
    if (current != device)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "the current device is %d but comm's is %d (cudaSetDevice first)",
                         current, device);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t own = NULL;
    r = ncclCommSplit(comm, 0, rank, &own, &cfg); /* collective over comm */
    if (r != ncclSuccess && r != ncclInProgress) return dfa__nccl_fail(fn, "ncclCommSplit", r, comm);
    dfa_status st = dfa__nccl_settle(&own, r, DFA__NCCL_DEFAULT_TIMEOUT, fn, "ncclCommSplit");
    if (st) {
        if (own) ncclCommAbort(own);
        return st;
    }
    return dfa__comm_from_nccl(own, out, fn);
}

/* The NCCL implementation behind c, or NULL (with a message) when c is not an NCCL communicator. */
static nccl_impl *nccl_of(dfa_comm *c, const char *fn) {
    if (!c) {
        dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
        return NULL;
    }
    if (c->ops != &nccl_ops) {
        dfa__fail(DFA_ERR_UNSUPPORTED, fn, "c is a %s communicator; this needs an NCCL one (dfa_comm_create_nccl)",
                  c->ops->name);
        return NULL;
    }
    return c->impl;
}

int dfa__comm_is_nccl(const dfa_comm *c) { return c && c->ops == &nccl_ops; }

int dfa__comm_nccl_device(const dfa_comm *c) { return ((const nccl_impl *)c->impl)->device; }

dfa_status dfa_comm_set_timeout(dfa_comm *c, double seconds) {
    static const char fn[] = "dfa_comm_set_timeout";
    dfa__clear_error();
#ifdef DFA_HAVE_MPI
    if (dfa__comm_is_mpi(c)) return dfa__mpi_set_timeout(c, seconds, fn);
#endif
    nccl_impl *m = nccl_of(c, fn);
    if (!m) return c ? DFA_ERR_UNSUPPORTED : DFA_ERR_INVALID_ARGUMENT;
    if (!(seconds > 0.0) || !isfinite(seconds))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "seconds = %g; it must be finite and > 0", seconds);
    pthread_mutex_lock(&m->mu);
    m->timeout = seconds;
    pthread_mutex_unlock(&m->mu);
    return DFA_OK;
}

dfa_status dfa_comm_check(dfa_comm *c) {
    static const char fn[] = "dfa_comm_check";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    if (!c->ops->check_async) return DFA_OK; /* host backends report every failure in the call itself */
    /* Outside a call there is no stream: the last call's may have been destroyed since. */
    c->stream = NULL;
    return c->ops->check_async(c, fn);
}
