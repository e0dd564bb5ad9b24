/* The executor's compute table on a CUDA device: device memory, the attention kernels of
 * src/cuda with float32 outputs, and the element-wise kernels of kernels.cu, all enqueued
 * on the stream of the call in progress (bind). Nothing here waits for the device, except
 * read_marks (timing, on request) and release (freeing memory). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "../cuda/launch.h"
#include "compute.h"
#include "executor.h"
#include "kernels.cuh"

typedef struct {
    cudaStream_t stream;
    void *scratch;                /* the backward's per-row sums, from the workspace */
    cudaError_t error;            /* first failure of a void operation since take_error */
    const char *error_what;
    dfa_status failed;            /* ... or of a library launcher (its message in failed_msg) */
    char failed_msg[256];
    cudaEvent_t (*marks)[4];      /* timing events, made on first use */
} cuda_ctx;

static void note(cuda_ctx *c, cudaError_t e, const char *what) {
    if (e != cudaSuccess && c->error == cudaSuccess) {
        c->error = e;
        c->error_what = what;
    }
}

/* A launcher's failure in a void operation (its message is the last error). */
static void note_status(cuda_ctx *c, dfa_status st) {
    if (st == DFA_OK || c->error != cudaSuccess || c->failed != DFA_OK) return;
    c->failed = st;
    snprintf(c->failed_msg, sizeof c->failed_msg, "%s", dfa_last_error());
}

static dfa_status cuda_ctx_create(const dfa_attn_desc *d, void **out) {
    (void)d;
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "dfa__compute_cuda", "cannot allocate a context");
    *out = c;
    return DFA_OK;
}

static void cuda_ctx_destroy(void *ctx) {
    cuda_ctx *c = ctx;
    if (!c) return;
    if (c->marks) {
        for (int i = 0; i < DFA__STATS_MAX_STEPS; i++)
            for (int j = 0; j < 4; j++)
                if (c->marks[i][j]) cudaEventDestroy(c->marks[i][j]);
        free(c->marks);
    }
    free(c);
}

static void *cuda_alloc(void *ctx, size_t bytes) {
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    (void)ctx;
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky; the executor reports DFA_ERR_OUT_OF_MEMORY */
        return NULL;
    }
    return p;
}

/* cudaFree waits for the work in flight on the device, so memory the stream still reads is
   not taken away; this happens only when the shape grows or the communicator goes. */
static void cuda_release(void *ctx, void *p) {
    (void)ctx;
    if (p) cudaFree(p);
}

static void cuda_copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t height) {
    cuda_ctx *c = ctx;
    note(c, cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, c->stream),
         "cudaMemcpy2DAsync");
}

static void cuda_fill_f32(void *ctx, float *p, int64_t n, float value) {
    cuda_ctx *c = ctx;
    note(c, dfa__sp_fill_f32(p, n, value, c->stream), "fill kernel launch");
}

static void cuda_add_f32(void *ctx, float *acc, const float *x, int64_t n) {
    cuda_ctx *c = ctx;
    note(c, dfa__sp_add_f32(acc, x, n, c->stream), "add kernel launch");
}

static void cuda_store(void *ctx, dfa_dtype t, const float *src, void *dst, int64_t rows, int64_t width,
                       int64_t dst_pitch, const int *gate) {
    cuda_ctx *c = ctx;
    note(c, dfa__sp_store((int)t, src, dst, rows, width, dst_pitch, gate, c->stream), "store kernel launch");
}

static size_t cuda_free_memory(void) {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return free_b;
}

static void cuda_merge_rows(void *ctx, int batch, int heads, int D, int n, int r0, int r, float *o_acc,
                            float *lse_acc, const float *o_part, const float *lse_part) {
    cuda_ctx *c = ctx;
    note(c, dfa__sp_merge_rows(batch, heads, D, n, r0, r, o_acc, lse_acc, o_part, lse_part, c->stream),
         "merge kernel launch");
}

static void cuda_add_sinks(void *ctx, int batch, int heads, int Dv, int n, float *o_acc, float *lse_acc,
                           const float *sinks) {
    cuda_ctx *c = ctx;
    note_status(c, dfa__cuda_add_sinks(batch, n, heads, Dv, o_acc, lse_acc, sinks, c->stream,
                                       "dfa__compute_cuda add_sinks"));
}

static void cuda_dsinks(void *ctx, const dfa_attn_desc *d, const void *o, const void *dout, const float *lse,
                        float *dsinks, const int *gate) {
    cuda_ctx *c = ctx;
    note_status(c, dfa__cuda_dsinks(d->dtype == DFA_BF16, d->batch, d->seqlen_q, d->num_heads, dfa__head_dim_v(d), o,
                                    dout, NULL, lse, d->sinks, dsinks, gate, c->stream, "dfa__compute_cuda dsinks"));
}

/* A block's shape with float32 outputs (partial results are merged and summed in float32). */
static dfa__cuda_shape block_shape(const dfa_attn_desc *d) {
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    s.out_f32 = 1;
    return s;
}

/* Masks. The scratch starts with the visible intervals of a block's rows and keys (its own
   seqlen_q and seqlen_k: a window of query rows against a window of keys has fewer keys than
   rows), and the backward's scratch follows; sized for n rows against n keys, which every
   block of a masked plan fits in. The executor hands the blocks device pointers into every
   rank's document ids (the descriptor's q_doc / k_doc). Blocks run one after another on the
   call's stream, so one interval buffer serves them all. */
static size_t mask_scratch(const dfa_attn_desc *d) {
    if (!d->q_doc && !(d->flags & DFA_FLAG_WINDOW)) return 0;
    const dfa__cuda_mask m = {d->batch, d->seqlen_q, d->seqlen_k, NULL, NULL, 0, 0, 0, -1, -1};
    return dfa__cuda_mask_bytes(&m); /* already a multiple of 256 */
}

/* The block's shape, with its mask's intervals computed into the scratch (on the stream). */
static dfa_status block_prepare(cuda_ctx *c, const dfa_attn_desc *d, dfa__cuda_shape *s, const char *fn) {
    *s = block_shape(d);
    if (!s->masked) return DFA_OK;
    const dfa__cuda_mask m = dfa__cuda_mask_of(d);
    return dfa__cuda_mask_prepare(&m, c->scratch, s, c->stream, fn);
}

/* A block's direct rows of o (compute.h, dfa__direct): a second launch with 16-bit o over rows
   [from, rows) of the block, into the caller's o, after the float32 one over rows [0, from);
   the forward's cost follows its query tiles, so two launches cost what one does (and the
   16-bit one runs persistent: launch_fwd.cuh). Their lse go to the scratch behind the mask's
   intervals (the backward's per-row sums, twice as large), then into the block's packed lse.
   Rounding in the kernel's epilogue or in the store pass is the same rounding: the same bits.
   The rows are contiguous only for one batch row, or when all of them are direct. */
static dfa_status cuda_fwd_direct(cuda_ctx *c, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                  float *o, float *lse, const dfa__direct *direct, const char *fn) {
    const int rows = d->seqlen_q, from = direct->o_from < 0 ? 0 : direct->o_from;
    if (from > 0 && d->batch != 1)
        return dfa__fail(DFA_ERR_INTERNAL, fn, "direct rows from %d of %d in a block of %d batch rows", from, rows,
                         d->batch);
    const size_t es = dfa__dtype_size(d->dtype), hd = (size_t)d->num_heads * d->head_dim;
    const size_t hdv = (size_t)d->num_heads * dfa__head_dim_v(d); /* o's rows */
    float *lse_parts = (float *)(void *)((char *)c->scratch + mask_scratch(d));
    dfa_status st = DFA_OK;
    for (int part = 0; part < 2 && !st; part++) {
        const int r0 = part ? from : 0, r1 = part ? rows : from;
        if (r0 >= r1) continue;
        dfa_attn_desc pd = *d;
        pd.seqlen_q = r1 - r0;
        pd.q_start += r0;
        if (pd.q_doc) pd.q_doc += r0;
        dfa__cuda_shape s;
        if ((st = block_prepare(c, &pd, &s, fn))) break;
        if (part) s.out_f32 = 0; /* 16 bits, into the caller's rows */
        const size_t lse_at = (size_t)d->batch * d->num_heads * r0;
        st = dfa__cuda_fwd(&s, (const char *)q + (size_t)r0 * hd * es, k, v,
                           part ? (void *)((char *)direct->o + (size_t)r0 * hdv * es) : (void *)o,
                           lse ? lse_parts + lse_at : NULL, c->stream, fn);
        if (!st && lse) /* [heads][r1 - r0] into [heads][rows] from r0 */
            note(c, cudaMemcpy2DAsync(lse + r0, (size_t)rows * 4, lse_parts + lse_at, (size_t)(r1 - r0) * 4,
                                      (size_t)(r1 - r0) * 4, (size_t)d->batch * d->num_heads, cudaMemcpyDeviceToDevice,
                                      c->stream),
                 "cudaMemcpy2DAsync (direct rows' lse)");
    }
    return st;
}

static dfa_status cuda_fwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v, float *o,
                           float *lse, const dfa__direct *direct) {
    static const char fn[] = "dfa__compute_cuda fwd";
    cuda_ctx *c = ctx;
    if (direct && direct->o) return cuda_fwd_direct(c, d, q, k, v, o, lse, direct, fn);
    dfa__cuda_shape s;
    const dfa_status st = block_prepare(c, d, &s, fn);
    return st ? st : dfa__cuda_fwd(&s, q, k, v, o, lse, c->stream, fn);
}

/* A block's direct keys of dk, dv (compute.h): the kernels write them in 16 bits from their
   registers instead of the float32 ones (launch.h, dfa__cuda_dkv16). */
static dfa_status cuda_bwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                           const void *o, const float *lse, const void *dout, float *dq, float *dk, float *dv,
                           const dfa__direct *direct) {
    static const char fn[] = "dfa__compute_cuda bwd";
    cuda_ctx *c = ctx;
    dfa__cuda_shape s;
    const dfa__cuda_dkv16 dkv16 = {direct ? direct->dk : NULL, direct ? direct->dv : NULL, direct ? direct->dkv_from : 0,
                                   direct ? direct->dkv_to : 0};
    const dfa_status st = block_prepare(c, d, &s, fn);
    return st ? st
              : dfa__cuda_bwd(&s, q, k, v, o, lse, dout, dq, dk, dv, (char *)c->scratch + mask_scratch(d), &dkv16,
                              c->stream, fn);
}

/* The largest block has all n rows of a chunk against all n keys: its scratch bounds every other. */
static size_t cuda_scratch_bytes(const dfa_attn_desc *d) {
    const dfa__cuda_shape s = block_shape(d);
    return mask_scratch(d) + dfa__cuda_bwd_scratch(&s);
}

/* Synchronises the call's stream: masked calls plan on the host (distflash_nccl.h says so). */
static dfa_status cuda_to_host(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_ctx *c = ctx;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, "dfa__compute_cuda", "copying the document ids to the host");
}

static void cuda_bind(void *ctx, void *stream, void *scratch) {
    cuda_ctx *c = ctx;
    c->stream = (cudaStream_t)stream;
    c->scratch = scratch;
}

static dfa_status cuda_take_error(void *ctx, const char *fn) {
    cuda_ctx *c = ctx;
    const cudaError_t e = c->error;
    if (e == cudaSuccess && c->failed != DFA_OK) {
        const dfa_status st = c->failed;
        c->failed = DFA_OK;
        return dfa__fail(st, fn, "%s", c->failed_msg);
    }
    if (e == cudaSuccess) return DFA_OK;
    c->error = cudaSuccess;
    return dfa__fail(e == cudaErrorMemoryAllocation ? DFA_ERR_OUT_OF_MEMORY : DFA_ERR_BACKEND, fn, "%s failed: %s (%s)",
                     c->error_what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static void cuda_mark(void *ctx, int step, int point) {
    cuda_ctx *c = ctx;
    if (!c->marks && !(c->marks = calloc(DFA__STATS_MAX_STEPS, sizeof *c->marks))) return;
    cudaEvent_t *ev = &c->marks[step][point];
    if (!*ev && cudaEventCreate(ev) != cudaSuccess) {
        *ev = NULL;
        return;
    }
    note(c, cudaEventRecord(*ev, c->stream), "cudaEventRecord (timing)");
}

static dfa_status cuda_read_marks(void *ctx, int steps, double *compute_s, double *wait_s) {
    cuda_ctx *c = ctx;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) return dfa__fail(DFA_ERR_BACKEND, "dfa__compute_cuda", "cudaStreamSynchronize: %s", cudaGetErrorString(e));
    for (int t = 0; t < steps; t++) {
        float a = 0.0f, b = 0.0f;
        cudaEvent_t *m = c->marks ? c->marks[t] : NULL;
        if (m && m[0] && m[1] && cudaEventElapsedTime(&a, m[0], m[1]) != cudaSuccess) a = 0.0f;
        if (m && m[2] && m[3] && cudaEventElapsedTime(&b, m[2], m[3]) != cudaSuccess) b = 0.0f;
        compute_s[t] = 1e-3 * a;
        wait_s[t] = 1e-3 * b;
    }
    (void)cudaGetLastError();
    return DFA_OK;
}

static const dfa__compute_ops cuda_ops = {
    .name = "cuda",
    .ctx_create = cuda_ctx_create,
    .ctx_destroy = cuda_ctx_destroy,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy2d = cuda_copy2d,
    .fill_f32 = cuda_fill_f32,
    .add_f32 = cuda_add_f32,
    .store = cuda_store,
    .merge_rows = cuda_merge_rows,
    .add_sinks = cuda_add_sinks,
    .dsinks = cuda_dsinks,
    .fwd = cuda_fwd,
    .bwd = cuda_bwd,
    .free_memory = cuda_free_memory,
    .scratch_bytes = cuda_scratch_bytes,
    .bind = cuda_bind,
    .take_error = cuda_take_error,
    .to_host = cuda_to_host,
    .mark = cuda_mark,
    .read_marks = cuda_read_marks,
};

const dfa__compute_ops *dfa__compute_cuda(void) { return &cuda_ops; }
