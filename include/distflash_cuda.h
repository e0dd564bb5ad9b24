/*
 * distflash on one CUDA device: the single-device calls of distflash.h on
 * device memory, with a trailing cudaStream_t.
 *
 * Semantics, layouts, argument checks and statuses are those of dfa_attn_fwd,
 * dfa_attn_bwd and dfa_attn_merge (distflash.h): same descriptor, same causal
 * rule with q_start/k_start, GQA/MQA, fully masked rows give o = 0 and
 * lse = -inf (lse = the sink with sinks), lse in natural log, dq/dk/dv overwritten. In addition:
 *
 *  - Pointers are device pointers (cudaMalloc, cudaMallocAsync, managed or
 *    mapped memory) on the current device; host memory is refused with
 *    DFA_ERR_INVALID_ARGUMENT naming the argument. q, k, v, o, dout, dq, dk,
 *    dv must be 16-byte aligned and lse 4-byte aligned (cudaMalloc gives 256).
 *  - Storage: DFA_BF16 and DFA_F16, accumulation in float32. DFA_F32 storage is
 *    not implemented for fwd/bwd on the device: DFA_ERR_UNSUPPORTED (use the
 *    CPU calls). The merge supports all three types.
 *  - Devices: compute capability 8.0 or newer (DFA_ERR_UNSUPPORTED otherwise).
 *    On sm_90 (H100/H200), head_dim 64, 128 and 256, and 192 with
 *    head_dim_v 128, run the Hopper kernels (wgmma with TMA loads,
 *    warp-specialised); every other case runs the mma.sync kernels (any
 *    multiple of 8 up to 256).
 *  - Stream ordering: every call only enqueues work on `stream` (0 is the
 *    legacy default stream) and returns without synchronising. Inputs must be
 *    ready in stream order, and outputs are ready when the stream reaches that
 *    point; the caller keeps the buffers alive until then. Argument errors are
 *    found before anything is enqueued (outputs untouched). A CUDA failure is
 *    reported as DFA_ERR_BACKEND (DFA_ERR_OUT_OF_MEMORY for scratch) with
 *    CUDA's message; an asynchronous fault surfaces at the caller's next
 *    synchronisation, as with any kernel.
 *  - Scratch: the backward takes dfa_attn_bwd_cuda_scratch_bytes() of device
 *    memory with cudaMallocAsync on `stream` from the device's current memory
 *    pool and gives it back with cudaFreeAsync on the same stream, so the
 *    memory is reused in stream order. The merge takes no scratch. The forward
 *    takes none either, except (a) on sm_90 at head dim 128 with more query
 *    tiles (batch x num_heads x ceil(seqlen_q / 128)) than the device has SMs:
 *    256 bytes, the counter of its persistent kernel's tile scheduler; (b) under
 *    a mask (documents or a window, see "Masks" in distflash.h), where both the
 *    forward and the backward also take 8 bytes per query row and per key row
 *    (the visible interval of each, computed by a small kernel first). Both in
 *    the same way. With the pool's default release threshold (0) the driver
 *    may unmap that memory at every synchronisation and map it again at the
 *    next call, which adds host time to each call's enqueue and shows as idle
 *    GPU time whenever the GPU waits for the call. The library leaves pool
 *    settings alone; callers that call often either raise the threshold
 *    (cudaMemPoolAttrReleaseThreshold) or pass scratch of their own to the
 *    _with_scratch calls below (the Python binding passes PyTorch's cached
 *    memory).
 *  - Masks: d->q_doc and d->k_doc are device pointers (4-byte aligned) on the
 *    current device, read in stream order. That they are non-decreasing along
 *    each batch row is the caller's promise here (the CPU calls check it; the
 *    device calls do not, and ids out of order give an unspecified result, not
 *    a fault). Blocks that no query of a block sees are never loaded, so the
 *    time follows the visible pairs. The distributed device calls take masks
 *    too (distflash_nccl.h, "Masks").
 *  - Determinism: forward and merge are bitwise reproducible, and so are the
 *    backward's dk and dv. By default the backward's key-block kernel adds its
 *    dq contributions into a float32 accumulator in whatever order they finish
 *    (float32 atomics, or TMA reduce-adds on the Hopper kernel), so dq may
 *    differ in its last bits from run to run. With d->flags |=
 *    DFA_FLAG_DETERMINISTIC dq has the same bits on every run, at some cost in
 *    time, in one of two ways:
 *      - the Hopper backward (sm_90, head_dim 64 or 128, no mask) adds the dq
 *        tiles of each query block in key-block order, waiting on one counter
 *        per tile in the scratch; it keeps the float32 dq accumulator;
 *      - everywhere else (the mma.sync kernels, and every masked call) the
 *        key-block kernel computes no dq, and a separate query-block kernel
 *        after it computes each dq row in a fixed order; there is no float32
 *        dq accumulator in the scratch.
 *    dfa_attn_bwd_cuda_scratch_bytes gives the scratch of either.
 *  - Sinks (distflash.h, "Logits, softcap and sinks"): d->sinks and d->dsinks are device
 *    pointers on the current device, 4-byte aligned ([num_heads] float32 each), read and
 *    written in stream order; that every sink is finite is the caller's promise (reading
 *    them would synchronise). The forward's kernels add each row's sink to its normaliser as
 *    they finish the row (o is rounded once; no pass and no scratch more). The backward's
 *    kernels need nothing more
 *    (lse holds the sinks); with dsinks one more launch sums dsinks from the D pass's sums in
 *    a fixed order, without atomics: dsinks has the same bits on every run, with or without
 *    DFA_FLAG_DETERMINISTIC.
 *  - Softcap (d->softcap > 0): the forward and the backward cap the scores on the kernels
 *    above (docs/kernels.md). With a
 *    head_dim_v other than head_dim it is refused (DFA_ERR_UNSUPPORTED naming d->softcap).
 *  - Thread safety: calls are reentrant and may be made from several host
 *    threads at once, on the same or on different streams; calls on one
 *    stream run in their order. Concurrent calls must not write the same
 *    outputs.
 *
 * Kernel choice: fixed by the shape and the device as above; the library reads
 * no environment variables. The GPU tests and the kernel lab (lab/) force a
 * kernel family through an internal hook, and the lab also runs the kernel
 * variants the library does not ship.
 */
#ifndef DISTFLASH_CUDA_H
#define DISTFLASH_CUDA_H

#include <cuda_runtime_api.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward: o = softmax(scale q k^T + mask) v and lse (may be NULL), as dfa_attn_fwd. */
DFA_API dfa_status dfa_attn_fwd_cuda(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o,
                                     float *lse, cudaStream_t stream);

/* Backward: dq, dk, dv from o and lse of the forward (or of a merge), as dfa_attn_bwd. */
DFA_API dfa_status dfa_attn_bwd_cuda(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                                     const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t stream);

/* Fold a partial result into an accumulated one in place, as dfa_attn_merge (f32/bf16/f16). */
DFA_API dfa_status dfa_attn_merge_cuda(const dfa_attn_desc *d, void *o_acc, float *lse_acc, const void *o_part,
                                       const float *lse_part, cudaStream_t stream);

/* Device scratch bytes one backward with this descriptor takes on the current device (0 if d
   is invalid): 8 bytes per (batch, head, query row); plus the float32 dq accumulator
   (4 x head_dim bytes per (batch, head, query row)) except where DFA_FLAG_DETERMINISTIC runs the
   separate dq kernel; plus, where DFA_FLAG_DETERMINISTIC runs the Hopper backward, 4 bytes per
   (batch, head, 64 query rows) of tile counters; plus under a mask 8 bytes per (batch, query
   row) and per (batch, key row); with the parts aligned to 256 bytes (see "Determinism" above
   for which kernel runs). What dfa_attn_bwd_cuda_with_scratch needs. */
DFA_API size_t dfa_attn_bwd_cuda_scratch_bytes(const dfa_attn_desc *d);

/* Device scratch bytes dfa_attn_fwd_cuda_with_scratch needs with this descriptor (0 if d is
   invalid): 256 bytes, plus under a mask 8 bytes per (batch, query row) and per (batch, key
   row), rounded up to 256 bytes. */
DFA_API size_t dfa_attn_fwd_cuda_scratch_bytes(const dfa_attn_desc *d);

/* The same calls as dfa_attn_fwd_cuda and dfa_attn_bwd_cuda, with the caller's scratch in
   place of the library's stream-ordered allocations (for callers with a caching allocator of
   their own: no allocation, no pool, no host work beyond the launches). scratch: device memory
   on the current device, 256-byte aligned, at least dfa_attn_{fwd,bwd}_cuda_scratch_bytes(d)
   bytes (scratch_bytes says how many there are); its contents on entry do not matter, and it
   must not overlap any input or output. The call writes it in stream order on `stream`; the
   caller keeps it, and does not touch it, until that work has finished (reusing it for the
   next call on the same stream is fine). Errors as the plain calls', plus
   DFA_ERR_INVALID_ARGUMENT naming scratch (NULL, misaligned, not device memory, overlapping a
   tensor of the call, the document ids or the sinks) or scratch_bytes (too few). Thread safety: as the plain calls, with scratch an output. */
DFA_API dfa_status dfa_attn_fwd_cuda_with_scratch(const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                                  void *o, float *lse, void *scratch, size_t scratch_bytes,
                                                  cudaStream_t stream);
DFA_API dfa_status dfa_attn_bwd_cuda_with_scratch(const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                                  const void *o, const float *lse, const void *dout, void *dq, void *dk,
                                                  void *dv, void *scratch, size_t scratch_bytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLASH_CUDA_H */
