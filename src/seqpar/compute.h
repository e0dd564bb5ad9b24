/* Internal: the compute side of the distributed executor, as a table.
 *
 * The executor never computes or copies itself: it asks this table, so that a
 * device backend can supply kernels and device copies (with its stream in the
 * context) while the schedule, the message routing and the bookkeeping stay
 * shared. Partial results are float32 whatever the storage type: partial
 * outputs are merged, and partial gradients summed, in float32, and rounded
 * to the storage type once at the end.
 *
 * Layouts (n = local rows per rank, r = rows of a block's query window; Dv the value head
 * dim, of v, o, dout, dv, and D of q, k, dq, dk):
 *   a chunk's q, o, dout    [batch, n, heads, D / Dv]     storage type
 *   a chunk's k, v          [batch, n, kv_heads, D / Dv]  storage type
 *   a chunk's lse           [batch, heads, n]        float32
 *   a window's packed rows  [batch, r, heads, D] and lse [batch, heads, r]
 */
#ifndef DFA_SEQPAR_COMPUTE_H
#define DFA_SEQPAR_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

/* Results a block writes in the storage type straight into the caller's outputs, same layouts
   as its float32 ones ([batch, rows, heads, D] from the block's first row): the rows no other
   block adds to, which then need no float32 accumulator and no rounding pass (exec_plan.c
   narrow_direct, exec_io.c use_direct). The float32 outputs' elements there are undefined afterwards. */
typedef struct {
    void *o;       /* fwd: rows [o_from, seqlen_q) of every (batch, head); NULL: none */
    int o_from;
    void *dk, *dv; /* bwd: keys [dkv_from, dkv_to) of every (batch, kv head); NULL: none */
    int dkv_from, dkv_to;
} dfa__direct;

typedef struct {
    const char *name; /* "cpu", ... */

    /* Per-call context sized for blocks of the per-rank descriptor d (scratch, streams). */
    dfa_status (*ctx_create)(const dfa_attn_desc *d, void **ctx);
    void (*ctx_destroy)(void *ctx);

    /* Buffers in the backend's memory (NULL on failure); release(NULL) is a no-op. */
    void *(*alloc)(void *ctx, size_t bytes);
    void (*release)(void *ctx, void *p);

    /* height rows of width bytes, rows dpitch / spitch bytes apart (packing row windows). */
    void (*copy2d)(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                   size_t height);
    /* p[i] = value for i < n */
    void (*fill_f32)(void *ctx, float *p, int64_t n, float value);
    /* acc[i] += x[i] for i < n */
    void (*add_f32)(void *ctx, float *acc, const float *x, int64_t n);
    /* dst (storage type t) = src rounded (t = DFA_F32 copies): rows of width elements, src
       packed, dst rows dst_pitch elements apart (a group of heads inside the caller's rows).
       With gate non-NULL (device backends, see comm.h agree_async) only when the device flag
       *gate is 1. */
    void (*store)(void *ctx, dfa_dtype t, const float *src, void *dst, int64_t rows, int64_t width,
                  int64_t dst_pitch, const int *gate);
    /* Merges a packed float32 partial (o_part [batch, r, heads, D], lse_part [batch, heads, r])
       into rows [r0, r0 + r) of float32 accumulators (o_acc [batch, n, heads, D], lse_acc
       [batch, heads, n]) with the rule of dfa_attn_merge. */
    void (*merge_rows)(void *ctx, int batch, int heads, int head_dim, int n, int r0, int r, float *o_acc,
                       float *lse_acc, const float *o_part, const float *lse_part);

    /* Sinks (d->attn.sinks): adds them to merged float32 rows in place, o_acc [batch, n, heads,
       Dv] and lse_acc [batch, heads, n], with the rule of dfa__lse_add_sink (src/common/sinks.h);
       sinks [heads] in the backend's memory. */
    void (*add_sinks)(void *ctx, int batch, int heads, int Dv, int n, float *o_acc, float *lse_acc,
                      const float *sinks);
    /* dsinks[h] = -sum over this rank's rows of exp(sinks[h] - lse) (dout . o), overwritten, from
       the caller's o, dout (storage type) and lse of the per-rank descriptor d (d->sinks,
       seqlen_q = n). gate as in store. */
    void (*dsinks)(void *ctx, const dfa_attn_desc *d, const void *o, const void *dout, const float *lse,
                   float *dsinks, const int *gate);

    /* One block: d describes it (seqlen_q = window rows, seqlen_k = n, dtype = storage type of
       q/k/v/o/dout, q_start/k_start/causal set, softcap and head_dim_v the call's, no sinks).
       Outputs are float32, packed, overwritten; direct (NULL: none) hands some of them to the
       caller's outputs instead. */
    dfa_status (*fwd)(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v, float *o,
                      float *lse, const dfa__direct *direct);
    dfa_status (*bwd)(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                      const void *o, const float *lse, const void *dout, float *dq, float *dk, float *dv,
                      const dfa__direct *direct);

    /* --- optional (NULL: not needed) --- */
    /* Bytes of memory free for a workspace now (device backends: the device's free memory),
       which decides how many head groups a call runs in (exec_plan.c). */
    size_t (*free_memory)(void);
    /* Device scratch the blocks of per-rank descriptor d need (the backward's per-row sums;
       under a mask, the visible intervals of a block's rows and keys). */
    size_t (*scratch_bytes)(const dfa_attn_desc *d);
    /* Binds the context to the call in progress: its stream (device backends) and the
       scratch carved out of the workspace (scratch_bytes of it). */
    void (*bind)(void *ctx, void *stream, void *scratch);
    /* The first failure of an operation that returns nothing (a kernel launch, an
       asynchronous copy) since the last call, as a status with its message; DFA_OK if none. */
    dfa_status (*take_error)(void *ctx, const char *fn);
    /* Copies `bytes` bytes of the backend's memory at src into host memory at dst and waits
       for them (device backends: in the order of the call's stream, which it synchronises);
       NULL when the backend's memory is the host's. Masked calls read every rank's document
       ids on the host with it to plan (exec_mask.c, setup_mask). */
    dfa_status (*to_host)(void *ctx, void *dst, const void *src, size_t bytes);
    /* Timing on the device: mark(ctx, step, point) records point 0 / 1 before / after the
       step's block and 2 / 3 before / after its wait; read_marks waits for the call and fills
       compute_s[t] (0 -> 1) and wait_s[t] (2 -> 3) for t < steps. Host backends time with the
       wall clock instead. */
    void (*mark)(void *ctx, int step, int point);
    dfa_status (*read_marks)(void *ctx, int steps, double *compute_s, double *wait_s);
} dfa__compute_ops;

/* Host memory and the CPU kernels (compute_cpu.c). */
const dfa__compute_ops *dfa__compute_cpu(void);

/* Device memory, the CUDA kernels and the call's stream (compute_cuda.c). */
const dfa__compute_ops *dfa__compute_cuda(void);

#endif
