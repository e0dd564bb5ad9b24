/* The distributed calls on device memory (distflash_nccl.h): this rank's checks (the host
 * calls' plus the device rules), then the executor on the communicator's NCCL transfers and
 * the CUDA compute table. */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "comm.h"
#include "dist_internal.h"
#include "distflash_nccl.h"
#include "executor.h"

int dfa__comm_is_nccl(const dfa_comm *c);
int dfa__comm_nccl_device(const dfa_comm *c);

typedef struct {
    const void *ptr;
    const char *name;
    size_t align;
} dev_ptr;

/* The descriptor: what the host calls check, then device-only rules. */
static dfa_status check_desc(const dfa_dist_desc *d, dfa__sched_kind kind, const char *fn) {
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
    if (d->attn.dtype == DFA_F32)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                         "d->attn.dtype = DFA_F32 is not supported on the device; use DFA_BF16 or DFA_F16");
    return DFA_OK;
}

/* NULL, alignment and residency on this rank's device, then overlaps. */
static dfa_status check_buffers(const dev_ptr *ps, int n, const dfa__buffer *outs, int nout, const dfa__buffer *ins,
                                int nin, const char *fn) {
    for (int i = 0; i < n; i++) {
        dfa_status st = dfa__check_ptr(ps[i].ptr, ps[i].name, fn);
        if (st) return st;
        if ((uintptr_t)ps[i].ptr % ps[i].align)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%s = %p is not %zu-byte aligned", ps[i].name, ps[i].ptr,
                             ps[i].align);
        struct cudaPointerAttributes a;
        memset(&a, 0, sizeof a);
        const cudaError_t e = cudaPointerGetAttributes(&a, ps[i].ptr);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return dfa__fail(DFA_ERR_BACKEND, fn, "cudaPointerGetAttributes(%s) failed: %s", ps[i].name,
                             cudaGetErrorString(e));
        }
        const int on_device = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ||
                              (a.type == cudaMemoryTypeHost && a.devicePointer == ps[i].ptr);
        if (!on_device)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%s = %p is not device memory (host pointer?)", ps[i].name,
                             ps[i].ptr);
    }
    return dfa__check_no_overlap(outs, nout, ins, nin, fn);
}

/* The communicator: an NCCL one, used from its own device. */
static dfa_status check_comm(dfa_comm *c, const char *fn) {
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    if (!dfa__comm_is_nccl(c))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "c is a %s communicator; the device calls need an NCCL one (dfa_comm_create_nccl)",
                         c->ops->name);
    int dev = -1;
    const cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return dfa__fail(DFA_ERR_BACKEND, fn, "cudaGetDevice failed: %s", cudaGetErrorString(e));
    if (dev != dfa__comm_nccl_device(c))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "the current device is %d but the communicator's is %d", dev,
                         dfa__comm_nccl_device(c));
    return DFA_OK;
}

dfa_status dfa__dist_fwd_cuda(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                              const void *v, void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "dfa_dist_attn_fwd_cuda";
    dfa__clear_error();
    dfa_status st = check_comm(c, fn);
    if (st) return st; /* no communicator to agree on */
    st = check_desc(d, kind, fn);
    const int desc_ok = st == DFA_OK;
    if (desc_ok) {
        const size_t es = dfa__dtype_size(d->attn.dtype);
        const size_t qb = (size_t)dfa__q_elems(&d->attn) * es, kb = (size_t)dfa__kv_elems(&d->attn) * es;
        const dfa__buffer ob[] = {{o, qb, "o"}, {lse, (size_t)dfa__lse_elems(&d->attn) * 4, "lse"}};
        const dfa__buffer ib[] = {{q, qb, "q"}, {k, kb, "k"}, {v, kb, "v"}};
        const dev_ptr ps[] = {{q, "q", 16}, {k, "k", 16}, {v, "v", 16}, {o, "o", 16}};
        st = check_buffers(ps, 4, ob, 2, ib, 3, fn);
        if (!st && lse) {
            const dev_ptr pl[] = {{lse, "lse", 4}};
            st = check_buffers(pl, 1, NULL, 0, NULL, 0, fn);
        }
    }
    c->stream = stream;
    c->call = fn;
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
    return dfa__dist_run(c, desc_ok ? d : NULL, kind, DFA__PASS_FWD, &io, st, fn);
}

dfa_status dfa__dist_bwd_cuda(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                              const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
                              void *dv, cudaStream_t stream) {
    static const char fn[] = "dfa_dist_attn_bwd_cuda";
    dfa__clear_error();
    dfa_status st = check_comm(c, fn);
    if (st) return st;
    st = check_desc(d, kind, fn);
    const int desc_ok = st == DFA_OK;
    if (desc_ok) {
        const size_t es = dfa__dtype_size(d->attn.dtype);
        const size_t qb = (size_t)dfa__q_elems(&d->attn) * es, kb = (size_t)dfa__kv_elems(&d->attn) * es;
        const dfa__buffer ob[] = {{dq, qb, "dq"}, {dk, kb, "dk"}, {dv, kb, "dv"}};
        const dfa__buffer ib[] = {{q, qb, "q"}, {k, kb, "k"}, {v, kb, "v"}, {o, qb, "o"}, {dout, qb, "dout"},
                                  {lse, (size_t)dfa__lse_elems(&d->attn) * 4, "lse"}};
        const dev_ptr ps[] = {{q, "q", 16},       {k, "k", 16},   {v, "v", 16},   {o, "o", 16},  {lse, "lse", 4},
                              {dout, "dout", 16}, {dq, "dq", 16}, {dk, "dk", 16}, {dv, "dv", 16}};
        st = check_buffers(ps, 9, ob, 3, ib, 6, fn);
    }
    c->stream = stream;
    c->call = fn;
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
    return dfa__dist_run(c, desc_ok ? d : NULL, kind, DFA__PASS_BWD, &io, st, fn);
}

/* The public enum's values are the internal kinds' (schedule.h); anything else is refused by check_desc. */
static dfa__sched_kind public_kind(const dfa_dist_desc *d) {
    if (!d) return DFA__SCHED_BALANCED;
    return d->schedule == DFA_SCHEDULE_BALANCED || d->schedule == DFA_SCHEDULE_RING ? (dfa__sched_kind)d->schedule
                                                                                    : (dfa__sched_kind)-1;
}

dfa_status dfa_dist_attn_fwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  void *o, float *lse, cudaStream_t stream) {
    return dfa__dist_fwd_cuda(c, d, public_kind(d), q, k, v, o, lse, stream);
}

dfa_status dfa_dist_attn_bwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                  cudaStream_t stream) {
    return dfa__dist_bwd_cuda(c, d, public_kind(d), q, k, v, o, lse, dout, dq, dk, dv, stream);
}

size_t dfa_dist_attn_cuda_workspace_bytes(int nranks, const dfa_dist_desc *d) {
    static const char fn[] = "dfa_dist_attn_cuda_workspace_bytes";
    if (check_desc(d, public_kind(d), fn) != DFA_OK) return 0;
    return dfa__dist_workspace_bytes(nranks, d, dfa__compute_cuda(), 1);
}

dfa_status dfa_comm_set_workspace(dfa_comm *c, void *ws, size_t bytes) {
    static const char fn[] = "dfa_comm_set_workspace";
    dfa__clear_error();
    if (!c) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "c (the communicator) is NULL");
    if (!dfa__comm_is_nccl(c))
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "c is a %s communicator; workspaces are for NCCL ones", c->ops->name);
    if (ws && ((uintptr_t)ws % 256))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "ws = %p is not 256-byte aligned", ws);
    if (ws && bytes == 0) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "bytes is 0");
    if (ws) {
        const dev_ptr p[] = {{ws, "ws", 256}};
        dfa_status st = check_buffers(p, 1, NULL, 0, NULL, 0, fn);
        if (st) return st;
    }
    /* the old workspace goes (freed if it was the communicator's own), and with it the cached context */
    if (c->ws_external) {
        c->ws = NULL;
        c->ws_bytes = 0;
        c->ws_external = 0;
    }
    dfa__comm_drop_cache(c);
    c->ws = ws;
    c->ws_bytes = ws ? bytes : 0;
    c->ws_external = ws != NULL;
    return DFA_OK;
}
