/* The distributed calls on device memory (distflash_nccl.h): this rank's checks (the host
 * calls' plus the device rules), then the executor on the communicator's NCCL transfers and
 * the CUDA compute table. */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/args.h"
#include "../common/desc.h"
#include "../common/error.h"
#include "../cuda/devcheck.h"
#include "comm.h"
#include "comm_nccl.h"
#include "dist_internal.h"
#include "distflash_nccl.h"
#include "executor.h"

/* The public calls take the schedule from the descriptor (after its import). */
#define KIND_FROM_DESC ((dfa__sched_kind)-1)

/* The public enum's values are the internal kinds' (schedule.h); anything else is refused. */
static dfa__sched_kind public_kind(const dfa_dist_desc *d) {
    return d->schedule == DFA_SCHEDULE_BALANCED || d->schedule == DFA_SCHEDULE_RING ? (dfa__sched_kind)d->schedule
                                                                                    : (dfa__sched_kind)-1;
}

/* The version-3 field the distributed device calls do not take: a value head dim of its own
   (the executor passes it to its blocks, but the device path is not verified with it). Sinks
   and dsinks the executor implements itself; softcap its blocks' kernels apply. */
static dfa_status refuse_v3(const dfa_attn_desc *d, const char *fn) {
    dfa_attn_desc t = *d;
    t.sinks = NULL;
    t.dsinks = NULL;
    t.softcap = 0.0f;
    return dfa__refuse_v3_fields(&t, "d->attn.", "the distributed device calls", fn);
}

/* The descriptor alone: imported into *nd, then the common rules, the device's storage types
   and the distributed rules. A rank whose descriptor passes may run as a ghost when only its
   buffers fail (executor.h). */
static dfa_status check_desc(const dfa_dist_desc *user, dfa__sched_kind *kind, dfa_dist_desc *nd, const char *fn) {
    dfa_status st = dfa__dist_desc_import(user, nd, fn);
    if (st) return st;
    if (*kind == KIND_FROM_DESC) *kind = public_kind(nd);
    if ((st = dfa__check_desc(&nd->attn, DFA__DESC_FULL, fn)) || (st = dfa__cuda_check_dtype(&nd->attn, fn)) ||
        (st = refuse_v3(&nd->attn, fn)))
        return st;
    return dfa__check_dist_desc(nd, *kind, fn);
}

/* Document ids are device memory on this device, 4-byte aligned, like the buffers (whether
   they are non-decreasing is checked on the host once the executor has copied them there:
   exec_mask.c, setup_mask). */
static dfa_status check_docs(const dfa_dist_desc *nd, const char *fn) {
    const dfa__dev_ptr p[] = {{nd->attn.q_doc, "d->attn.q_doc", 4}};
    return nd->attn.q_doc ? dfa__cuda_check_device_ptrs(p, 1, fn) : DFA_OK;
}

/* Sinks and dsinks: device memory on this device, 4-byte aligned (finite sinks are the caller's
   promise, as in distflash_cuda.h). */
static dfa_status check_sinks(const dfa_dist_desc *nd, const char *fn) {
    const dfa__dev_ptr p[] = {{nd->attn.sinks, "d->attn.sinks", 4}, {nd->attn.dsinks, "d->attn.dsinks", 4}};
    return dfa__cuda_check_device_ptrs(p, 2, fn);
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

dfa_status dfa__dist_fwd_cuda(dfa_comm *c, const dfa_dist_desc *user, dfa__sched_kind kind, const void *q,
                              const void *k, const void *v, void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "dfa_dist_attn_fwd_cuda";
    dfa__clear_error();
    dfa_status st = check_comm(c, fn);
    if (st) return st; /* no communicator to agree on */
    dfa_dist_desc nd;
    st = check_desc(user, &kind, &nd, fn);
    const int desc_ok = st == DFA_OK;
    if (desc_ok && !(st = dfa__check_fwd_args(&nd.attn, NULL, &nd.attn, q, k, v, o, lse, fn))) {
        const dfa__dev_ptr ps[] = {{q, "q", 16}, {k, "k", 16}, {v, "v", 16}, {o, "o", 16}, {lse, "lse", 4}};
        st = dfa__cuda_check_device_ptrs(ps, 5, fn);
        if (!st) st = check_docs(&nd, fn);
        if (!st) st = check_sinks(&nd, fn);
    }
    c->stream = stream;
    c->call = fn;
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o_out = o, .lse_out = lse};
    return dfa__dist_run(c, desc_ok ? &nd : NULL, kind, DFA__PASS_FWD, &io, st, fn);
}

dfa_status dfa__dist_bwd_cuda(dfa_comm *c, const dfa_dist_desc *user, dfa__sched_kind kind, const void *q,
                              const void *k, const void *v, const void *o, const float *lse, const void *dout,
                              void *dq, void *dk, void *dv, cudaStream_t stream) {
    static const char fn[] = "dfa_dist_attn_bwd_cuda";
    dfa__clear_error();
    dfa_status st = check_comm(c, fn);
    if (st) return st;
    dfa_dist_desc nd;
    st = check_desc(user, &kind, &nd, fn);
    const int desc_ok = st == DFA_OK;
    if (desc_ok && !(st = dfa__check_bwd_args(&nd.attn, NULL, &nd.attn, q, k, v, o, lse, dout, dq, dk, dv, fn))) {
        const dfa__dev_ptr ps[] = {{q, "q", 16},       {k, "k", 16},   {v, "v", 16},   {o, "o", 16},  {lse, "lse", 4},
                                   {dout, "dout", 16}, {dq, "dq", 16}, {dk, "dk", 16}, {dv, "dv", 16}};
        st = dfa__cuda_check_device_ptrs(ps, 9, fn);
        if (!st) st = check_docs(&nd, fn);
        if (!st) st = check_sinks(&nd, fn);
    }
    c->stream = stream;
    c->call = fn;
    const dfa__dist_io io = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq, .dk = dk, .dv = dv};
    return dfa__dist_run(c, desc_ok ? &nd : NULL, kind, DFA__PASS_BWD, &io, st, fn);
}

dfa_status dfa_dist_attn_fwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  void *o, float *lse, cudaStream_t stream) {
    return dfa__dist_fwd_cuda(c, d, KIND_FROM_DESC, q, k, v, o, lse, stream);
}

dfa_status dfa_dist_attn_bwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                  cudaStream_t stream) {
    return dfa__dist_bwd_cuda(c, d, KIND_FROM_DESC, q, k, v, o, lse, dout, dq, dk, dv, stream);
}

size_t dfa_dist_attn_cuda_workspace_bytes(int nranks, const dfa_dist_desc *d) {
    static const char fn[] = "dfa_dist_attn_cuda_workspace_bytes";
    dfa_dist_desc nd;
    dfa__sched_kind kind = KIND_FROM_DESC;
    const size_t bytes = check_desc(d, &kind, &nd, fn) ? 0 : dfa__dist_workspace_bytes(nranks, &nd, dfa__compute_cuda(), 1);
    dfa__clear_error();
    return bytes;
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
        const dfa__dev_ptr p[] = {{ws, "ws", 256}};
        const dfa_status st = dfa__cuda_check_device_ptrs(p, 1, fn);
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
