/*
 * distflash over NCCL: DistFlashAttn on GPUs. A communicator for the sequence-parallel
 * calls made from an NCCL communicator (one rank per GPU), and the distributed forward and
 * backward on device memory, enqueued on a CUDA stream.
 *
 *   ncclComm_t nc;  ... ncclCommInitRank(&nc, nranks, id, rank) on this rank's GPU ...
 *   dfa_comm *c;
 *   dfa_comm_create_nccl(nc, &c);                 // collective over nc
 *   dfa_dist_desc d = dfa_dist_desc_init(batch, n, heads, kv_heads, head_dim);
 *   d.attn.dtype = DFA_BF16; d.attn.causal = 1; d.overlap = 1;
 *   dfa_dist_attn_fwd_cuda(c, &d, q, k, v, o, lse, stream);   // every rank, its own n rows
 *   dfa_dist_attn_bwd_cuda(c, &d, q, k, v, o, lse, dout, dq, dk, dv, stream);
 *   dfa_comm_destroy(c);                          // before ncclCommDestroy(nc)
 *
 * (distflash_mpi.h's dfa_comm_create_nccl_mpi makes the NCCL communicator from an MPI_Comm.)
 *
 * Semantics, layouts and statuses are those of dfa_dist_attn_fwd/bwd (distflash.h) with the
 * device rules of dfa_attn_fwd_cuda/bwd_cuda (distflash_cuda.h): rank r holds rows
 * [r n, (r + 1) n) of the sequence (dfa_dist_position); q, k, v, o, dout, dq, dk, dv are
 * device pointers on this rank's GPU, bf16 or f16, 16-byte aligned, lse float32; balanced
 * and ring schedules; GQA moves only the kv heads; any P, any n >= 1. Partial results move,
 * merge and sum in float32; the outputs are rounded to the storage type once at the end.
 *
 * Streams. Every call only enqueues work and returns. The blocks run on `stream` (the
 * caller's); the transfers run on the communicator's own stream, ordered against `stream`
 * by events only; the call's inputs must be ready in `stream`'s order, and its outputs are
 * ready when `stream` reaches the end of the call. No call synchronises the host with the
 * device, except (a) the first call with a given descriptor on a communicator, which agrees
 * on the arguments with the other ranks on the host (one small allreduce and a wait for
 * it; the communicator remembers the 16 most recent descriptors), (b) a call whose shape
 * needs more scratch than the communicator holds (it allocates it with cudaMalloc), and (c)
 * masked calls (below). So a training step that repeats its shapes can be captured into a
 * CUDA graph and replayed after one uncaptured call; a capture that would need (a), (b) or
 * (c) fails with DFA_ERR_INVALID_ARGUMENT and says so.
 *
 * Sinks (distflash_mpi.h, "Sinks"): d->attn.sinks and d->attn.dsinks are device pointers on
 * this rank's GPU, 4-byte aligned, finite sinks the caller's promise; dsinks receives this
 * rank's own rows' sum, for the trainer to reduce across the group like any replicated
 * weight's gradient. softcap passes to the blocks (the single-device kernels); a head_dim_v
 * other than head_dim is refused here (DFA_ERR_UNSUPPORTED naming the field).
 *
 * Masks (documents and sliding windows: distflash.h, "Masks", and dfa_dist_attn_fwd). The
 * window works as in the host calls. d->attn.q_doc (== d->attn.k_doc) is a DEVICE pointer on
 * this rank's GPU, 4-byte aligned: this rank's ids [batch, n], read in `stream`'s order. A
 * masked call plans on the host, as the host calls do, so it is never enqueue-only: it
 * agrees with the other ranks on the host on every call (nothing is remembered: the plan
 * follows the ids), and with documents it gathers every rank's ids on the device and copies
 * them to the host, which synchronises `stream` once (the caller's earlier work on it
 * included). There the ids are checked (non-decreasing in each batch row, as the host calls
 * check them; a rank with bad ids fails every rank, DFA_ERR_INVALID_ARGUMENT, message naming
 * d->q_doc) and the masked plan is built; then the pass is enqueued like any other, the
 * blocks reading every rank's ids from a device copy that the communicator keeps (4 bytes
 * a token of the whole sequence, apart from the workspace). With DFA_FLAG_SAME_DOCS
 * (distflash.h, dfa_dist_attn_fwd: the ids are those of the communicator's last call with
 * documents) the call reuses that device copy and the plan's counts: nothing is gathered or
 * copied, `stream` is not synchronised, and the host work is the agreement (it waits for the
 * communicator's earlier transfers, not for `stream`) and the plan. A training step sets it
 * on every call after its first. Either way a masked call cannot be
 * captured into a CUDA graph (refused, DFA_ERR_INVALID_ARGUMENT, before anything is
 * enqueued or exchanged). dfa_dist_attn_cuda_workspace_bytes bounds the workspace of any
 * masked plan.
 *
 * Errors across ranks. Arguments are checked on each rank. With a new descriptor the host
 * agreement makes any rank's failure (a bad pointer, descriptors that differ across ranks)
 * every rank's failure, with the same status and message, before anything is enqueued. With
 * a remembered descriptor the agreement runs on the device: a rank whose buffers fail its
 * checks returns its error at once but still takes part in the transfers (from scratch) so
 * that no peer waits forever; every rank's outputs are left untouched; the peers return
 * DFA_OK from the enqueue and report the failure at their next call on the communicator (or
 * dfa_comm_check): "rank r failed in an earlier call". CUDA and NCCL failures are
 * DFA_ERR_BACKEND with their own message; after one during the transfers and kernels (not an
 * argument: those fail before anything is enqueued) the outputs' contents are unspecified:
 * a rank's own block writes the rows no other rank adds to straight into its outputs.
 *
 * Timeouts. A peer that dies or never calls would leave the others waiting on the device.
 * Each communicator watches its transfers from a background thread: when one has not
 * completed after the timeout (dfa_comm_set_timeout; default 600 s) the communicator is
 * aborted (ncclCommAbort on its private NCCL communicator, so the device work ends), and the
 * next call, or dfa_comm_check, returns DFA_ERR_BACKEND naming the call and the step that
 * waited. The host-side waits of (a) above time out the same way. An aborted communicator
 * only reports that; destroy it and create another. Transfers inside a captured CUDA graph
 * are not watched.
 *
 * Determinism. The forward is bitwise reproducible. The backward adds dq, and in blocks whose
 * key tiles it shares among several CTAs also dk and dv, in float32 in whatever order the
 * additions finish, unless d->attn.flags has DFA_FLAG_DETERMINISTIC (distflash_cuda.h,
 * "Determinism"); with it every output has the same bits on every run, and overlap on and off
 * give the same bits.
 *
 * Memory. A call needs a workspace of a few chunks (message slots for three consecutive steps,
 * each as large as the steps it serves: at two ranks one step's messages; float32
 * accumulators, partial results: dfa_dist_attn_cuda_workspace_bytes). The communicator
 * allocates it on first use and keeps it between calls (grown when a larger shape comes);
 * or the caller hands it one with dfa_comm_set_workspace.
 *
 * Thread safety: one call at a time per communicator; different communicators may be used
 * from different threads. The current device must be the communicator's.
 */
#ifndef DISTFLASH_NCCL_H
#define DISTFLASH_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over comm: every rank of comm calls it, with its GPU current. The library makes
 * its own non-blocking NCCL communicator from comm (ncclCommSplit), so its traffic never
 * mixes with the caller's and a timeout can abort it without touching comm. The caller owns
 * comm and keeps it alive until dfa_comm_destroy(*out) (also collective). Rank order of comm
 * is the sequence order. Errors: out NULL or comm NULL (DFA_ERR_INVALID_ARGUMENT), NCCL or
 * CUDA failures (DFA_ERR_BACKEND), memory (DFA_ERR_OUT_OF_MEMORY); *out is set only on success.
 */
DFA_API dfa_status dfa_comm_create_nccl(ncclComm_t comm, dfa_comm **out);

/* The distributed forward on device memory: o, lse (lse may be NULL) for this rank's rows.
   With documents, d->attn.q_doc / k_doc are device pointers (see "Masks" above). */
DFA_API dfa_status dfa_dist_attn_fwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  void *o, float *lse, cudaStream_t stream);

/* The distributed backward on device memory: dq, dk, dv for this rank's rows, from the o and
   lse of the distributed forward (with the same mask; document ids on the device). */
DFA_API dfa_status dfa_dist_attn_bwd_cuda(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k, const void *v,
                                  const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                  cudaStream_t stream);

/* Seconds a transfer (or a host-side agreement) may wait before the communicator is aborted:
   > 0 and finite. Default 600. Not collective; set the same value on every rank. MPI
   communicators take it too (distflash_mpi.h, which declares it as well). */
DFA_API dfa_status dfa_comm_set_timeout(dfa_comm *c, double seconds);

/* DFA_OK, or a failure that earlier calls on c left behind and that has come to light by
   now (a peer's failed call, a timeout); never waits. After the caller has synchronised
   the streams of its calls, every such failure has come to light. */
DFA_API dfa_status dfa_comm_check(dfa_comm *c);

/* Bytes of workspace one call with descriptor d on nranks ranks needs (the larger of the
   forward and the backward); 0 if d is invalid or nranks < 1. */
DFA_API size_t dfa_dist_attn_cuda_workspace_bytes(int nranks, const dfa_dist_desc *d);

/* Hands c a device buffer of `bytes` bytes (256-byte aligned) for its workspace, instead of
   the one it allocates itself (freed now); ws NULL goes back to the communicator's own.
   The caller keeps ws alive and unused by anything else until c is destroyed or given
   another; calls whose workspace would be larger fail with DFA_ERR_INVALID_ARGUMENT. Not
   while calls on c are in flight on a stream (synchronise first). */
DFA_API dfa_status dfa_comm_set_workspace(dfa_comm *c, void *ws, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLASH_NCCL_H */
