/* The executor's compute table on the host: the CPU kernels and plain memory.
 *
 * Blocks run through the public dfa_attn_fwd/bwd with a float32 descriptor, so
 * partial results come out in float32. For bf16/f16 storage the inputs are
 * widened into the context's scratch first: the CPU kernels widen every tile
 * to float32 anyway, so this computes the same sums; it only skips the
 * rounding of each partial to the storage type. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "../common/sinks.h"
#include "compute.h"

typedef struct {
    dfa_dtype dtype;
    float *q, *o, *dout; /* widened query-side rows, [batch, n, heads, D or Dv] at most */
    float *k, *v;        /* widened key chunk */
} cpu_ctx;

static dfa_status cpu_ctx_create(const dfa_attn_desc *d, void **out) {
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "dfa__compute_cpu", "cannot allocate a context");
    c->dtype = d->dtype;
    if (d->dtype != DFA_F32) {
        const size_t nq = (size_t)dfa__q_elems(d), no = (size_t)dfa__o_elems(d);
        const size_t nk = (size_t)dfa__kv_elems(d), nv = (size_t)dfa__v_elems(d);
        const size_t total = nq + 2 * no + nk + nv;
        c->q = malloc(sizeof(float) * total);
        if (!c->q) {
            free(c);
            return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "dfa__compute_cpu", "cannot allocate %zu bytes of scratch",
                             sizeof(float) * total);
        }
        c->o = c->q + nq;
        c->dout = c->o + no;
        c->k = c->dout + no;
        c->v = c->k + nk;
    }
    *out = c;
    return DFA_OK;
}

static void cpu_ctx_destroy(void *ctx) {
    cpu_ctx *c = ctx;
    if (!c) return;
    free(c->q);
    free(c);
}

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return malloc(bytes ? bytes : 1);
}

static void cpu_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static void cpu_copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height) {
    (void)ctx;
    if (dpitch == width && spitch == width) {
        memcpy(dst, src, width * height);
        return;
    }
    for (size_t r = 0; r < height; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void cpu_fill_f32(void *ctx, float *p, int64_t n, float value) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) p[i] = value;
}

static void cpu_add_f32(void *ctx, float *acc, const float *x, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) acc[i] += x[i];
}

static void cpu_store(void *ctx, dfa_dtype t, const float *src, void *dst, int64_t rows, int64_t width,
                      int64_t dst_pitch, const int *gate) {
    (void)ctx;
    (void)gate; /* host backends agree on the host: never gated */
    const size_t es = dfa__dtype_size(t);
    for (int64_t r = 0; r < rows; r++) {
        char *out = (char *)dst + (size_t)(r * dst_pitch) * es;
        if (t == DFA_F32) memcpy(out, src + r * width, sizeof(float) * (size_t)width);
        else dfa__store_f32(t, src + r * width, out, width);
    }
}

/* dfa_attn_merge's rule on float32 rows of a window; it cannot be called here because the
   window's lse rows are strided inside the accumulator's [batch, heads, n]. */
static void cpu_merge_rows(void *ctx, int batch, int heads, int D, int n, int r0, int r, float *o_acc,
                           float *lse_acc, const float *o_part, const float *lse_part) {
    (void)ctx;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < r; i++)
            for (int h = 0; h < heads; h++) {
                float *la = &lse_acc[((int64_t)b * heads + h) * n + r0 + i];
                const float lb = lse_part[((int64_t)b * heads + h) * r + i];
                float *oa = o_acc + (((int64_t)b * n + r0 + i) * heads + h) * D;
                const float *ob = o_part + (((int64_t)b * r + i) * heads + h) * D;
                if (lb == -INFINITY) continue; /* the partial saw no key: nothing to add */
                if (*la == -INFINITY) {
                    memcpy(oa, ob, sizeof(float) * (size_t)D);
                    *la = lb;
                    continue;
                }
                const float mx = *la > lb ? *la : lb;
                const float lse = mx + logf(expf(*la - mx) + expf(lb - mx));
                const float wa = expf(*la - lse), wb = expf(lb - lse);
                for (int c = 0; c < D; c++) oa[c] = wa * oa[c] + wb * ob[c];
                *la = lse;
            }
}

static void cpu_add_sinks(void *ctx, int batch, int heads, int Dv, int n, float *o_acc, float *lse_acc,
                          const float *sinks) {
    (void)ctx;
    for (int b = 0; b < batch; b++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < n; i++) {
                float *l = &lse_acc[((int64_t)b * heads + h) * n + i], f;
                *l = dfa__lse_add_sink(*l, sinks[h], &f);
                float *o = o_acc + (((int64_t)b * n + i) * heads + h) * Dv;
                for (int c = 0; c < Dv; c++) o[c] *= f;
            }
}

/* dsinks as dfa__dsinks_host sums it (float64, heads outside, then batch rows, then rows), with
   each row's D = dout . o from the widened values. */
static void cpu_dsinks(void *ctx, const dfa_attn_desc *d, const void *o, const void *dout, const float *lse,
                       float *dsinks, const int *gate) {
    (void)ctx;
    (void)gate; /* host backends agree on the host: never gated */
    const int B = d->batch, H = d->num_heads, n = d->seqlen_q, Dv = dfa__head_dim_v(d);
    const size_t es = dfa__dtype_size(d->dtype);
    float ro[DFA__MAX_HEAD_DIM], rd[DFA__MAX_HEAD_DIM];
    for (int h = 0; h < H; h++) {
        double acc = 0.0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++) {
                const float l = lse[((int64_t)b * H + h) * n + i];
                if (l == -INFINITY) continue;
                const size_t at = (((size_t)b * n + i) * H + h) * (size_t)Dv * es;
                dfa__load_f32(d->dtype, (const char *)o + at, ro, Dv);
                dfa__load_f32(d->dtype, (const char *)dout + at, rd, Dv);
                double D = 0.0;
                for (int c = 0; c < Dv; c++) D += (double)ro[c] * (double)rd[c];
                acc += exp((double)d->sinks[h] - (double)l) * D;
            }
        dsinks[h] = (float)-acc;
    }
}

/* The descriptor and inputs as float32: widened into scratch unless already float32. */
static const void *widen(const cpu_ctx *c, const void *src, float *buf, int64_t n) {
    if (c->dtype == DFA_F32) return src;
    dfa__load_f32(c->dtype, src, buf, n);
    return buf;
}

/* Rows [r0, r1) of each of `batch` float32 [rows, width] matrices, rounded into the same rows
   of dst (storage type t, same layout) by the store pass's own code. The CPU kernels compute
   in float32 either way: a direct part (compute.h) is its rounding, written after the block. */
static void store_rows(dfa_dtype t, const float *src, void *dst, int batch, int rows, int64_t width, int r0, int r1) {
    const size_t es = dfa__dtype_size(t);
    if (r0 >= r1) return;
    for (int b = 0; b < batch; b++) {
        const int64_t off = ((int64_t)b * rows + r0) * width;
        cpu_store(NULL, t, src + off, (char *)dst + (size_t)off * es, r1 - r0, width, width, NULL);
    }
}

static dfa_status cpu_fwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v, float *o,
                          float *lse, const dfa__direct *direct) {
    const cpu_ctx *c = ctx;
    dfa_attn_desc d32 = *d;
    d32.dtype = DFA_F32;
    const dfa_status st = dfa_attn_fwd(&d32, widen(c, q, c->q, dfa__q_elems(d)), widen(c, k, c->k, dfa__kv_elems(d)),
                                       widen(c, v, c->v, dfa__v_elems(d)), o, lse);
    if (!st && direct && direct->o)
        store_rows(c->dtype, o, direct->o, d->batch, d->seqlen_q, (int64_t)d->num_heads * dfa__head_dim_v(d),
                   direct->o_from < 0 ? 0 : direct->o_from, d->seqlen_q);
    return st;
}

static dfa_status cpu_bwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                          const void *o, const float *lse, const void *dout, float *dq, float *dk, float *dv,
                          const dfa__direct *direct) {
    const cpu_ctx *c = ctx;
    dfa_attn_desc d32 = *d;
    d32.dtype = DFA_F32;
    const int64_t no = dfa__o_elems(d);
    const dfa_status st = dfa_attn_bwd(&d32, widen(c, q, c->q, dfa__q_elems(d)), widen(c, k, c->k, dfa__kv_elems(d)),
                                       widen(c, v, c->v, dfa__v_elems(d)), widen(c, o, c->o, no), lse,
                                       widen(c, dout, c->dout, no), dq, dk, dv);
    if (!st && direct && direct->dk && direct->dv && direct->dkv_to > direct->dkv_from) {
        const int64_t w = (int64_t)d->num_kv_heads * d->head_dim, wv = (int64_t)d->num_kv_heads * dfa__head_dim_v(d);
        const int from = direct->dkv_from > 0 ? direct->dkv_from : 0;
        const int to = direct->dkv_to < d->seqlen_k ? direct->dkv_to : d->seqlen_k;
        store_rows(c->dtype, dk, direct->dk, d->batch, d->seqlen_k, w, from, to);
        store_rows(c->dtype, dv, direct->dv, d->batch, d->seqlen_k, wv, from, to);
    }
    return st;
}

static const dfa__compute_ops cpu_ops = {
    .name = "cpu",
    .ctx_create = cpu_ctx_create,
    .ctx_destroy = cpu_ctx_destroy,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .copy2d = cpu_copy2d,
    .fill_f32 = cpu_fill_f32,
    .add_f32 = cpu_add_f32,
    .store = cpu_store,
    .merge_rows = cpu_merge_rows,
    .add_sinks = cpu_add_sinks,
    .dsinks = cpu_dsinks,
    .fwd = cpu_fwd,
    .bwd = cpu_bwd,
};

const dfa__compute_ops *dfa__compute_cpu(void) { return &cpu_ops; }
