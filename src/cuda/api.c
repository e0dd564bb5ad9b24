/* The public CUDA entry points: the CPU calls' argument checks (src/common/args.h, with
 * the device's storage types as an extra descriptor rule), then the device-specific ones
 * (alignment, device memory), then the launchers. Nothing is enqueued before every check
 * has passed, and only the normalised copy of the caller's descriptor is used. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distflash_cuda.h"

#include "../common/args.h"
#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "devcheck.h"
#include "launch.h"

dfa__cuda_shape dfa__cuda_shape_of(const dfa_attn_desc *d) {
    dfa__cuda_shape s;
    s.batch = d->batch;
    s.seqlen_q = d->seqlen_q;
    s.seqlen_k = d->seqlen_k;
    s.num_heads = d->num_heads;
    s.num_kv_heads = d->num_kv_heads;
    s.head_dim = d->head_dim;
    s.bf16 = d->dtype == DFA_BF16;
    s.causal = d->causal;
    s.offset = 0;
    s.scale = dfa__softmax_scale(d);
    s.flags = d->flags;
    s.out_f32 = 0;
    s.masked = d->q_doc != NULL || (d->flags & DFA_FLAG_WINDOW) != 0;
    s.mask_rows = s.mask_keys = NULL;
    s.fwd_counter = NULL;
    s.softcap = d->softcap;
    s.head_dim_v = d->head_dim_v ? d->head_dim_v : d->head_dim;
    s.sinks = d->sinks;
    s.dsinks = d->dsinks;
    s.fwd_sinks = 0;
    if (d->causal) {
        const long long off = (long long)(d->q_start - d->k_start); /* both < 2^62 in magnitude */
        if (off >= (long long)d->seqlen_k - 1) s.causal = 0;     /* row 0 already sees every key */
        else s.offset = off < -(long long)d->seqlen_q - 1 ? -(long long)d->seqlen_q - 1 : off;
    }
    return s;
}

/* The version-3 fields the CUDA calls implement: sinks and dsinks (sinks.cu), a value head dim
   of its own at the pairs the kernels are built for, and a softcap where the value head dim is
   the head dim (launch.h). */
static dfa_status refuse_v3(const dfa_attn_desc *d, const char *fn) {
    dfa_attn_desc x = *d;
    x.sinks = NULL;
    x.dsinks = NULL;
    x.head_dim_v = 0;
    x.softcap = 0.0f;
    dfa_status st = dfa__refuse_v3_fields(&x, "d->", "the CUDA calls", fn);
    if (!st) st = dfa__cuda_check_head_dim_v(d->head_dim, dfa__head_dim_v(d), fn);
    return st ? st : dfa__cuda_check_softcap(d->softcap, d->head_dim, dfa__head_dim_v(d), fn);
}

/* The descriptor rule of every CUDA call: the device's storage types, and the version-3 fields
   (refuse_v3). */
static dfa_status cuda_rule(const dfa_attn_desc *d, const char *fn) {
    const dfa_status st = refuse_v3(d, fn);
    return st ? st : dfa__cuda_check_dtype(d, fn);
}

/* Sinks and dsinks are device memory on this device, 4-byte aligned (that the sinks are finite
   is the caller's promise on the device: distflash_cuda.h). */
static dfa_status check_sinks(const dfa_attn_desc *d, const char *fn) {
    const dfa__dev_ptr ps[] = {{d->sinks, "d->sinks", 4}, {d->dsinks, "d->dsinks", 4}};
    return dfa__cuda_check_device_ptrs(ps, 2, fn);
}

/* Document ids are device memory on this device, 4-byte aligned (their order is the caller's
   promise on the device: distflash_cuda.h). */
static dfa_status check_docs(const dfa_attn_desc *d, const char *fn) {
    const dfa__dev_ptr ps[] = {{d->q_doc, "d->q_doc", 4}, {d->k_doc, "d->k_doc", 4}};
    return d->q_doc ? dfa__cuda_check_device_ptrs(ps, 2, fn) : DFA_OK;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Bytes of a validated descriptor's mask intervals (0 without a mask; a multiple of 256). */
static size_t mask_bytes_of(const dfa_attn_desc *d) {
    if (!d->q_doc && !(d->flags & DFA_FLAG_WINDOW)) return 0;
    const dfa__cuda_mask m = dfa__cuda_mask_of(d);
    return dfa__cuda_mask_bytes(&m);
}

/* A caller's scratch: the forward's holds the mask intervals, then the persistent kernel's tile
   counter; the backward's the dq accumulator, D and lse2 (dfa__cuda_bwd_scratch), then the mask
   intervals. */
static size_t fwd_scratch_of(const dfa_attn_desc *d) { return mask_bytes_of(d) + 256; }
/* *own: the kernels' part, where the mask's starts (s: d's shape, before its mask is prepared) */
static size_t bwd_scratch_of(const dfa_attn_desc *d, const dfa__cuda_shape *s, size_t *own) {
    *own = align256(dfa__cuda_bwd_scratch(s));
    return *own + mask_bytes_of(d);
}

/* The caller's scratch: there, large enough, device memory, and apart from every tensor of the
   call (ts: n of them, NULL entries skipped), the document ids and the sinks, since the call
   writes it. */
static dfa_status check_scratch(const dfa_attn_desc *d, const void *scratch, size_t bytes, size_t need,
                                const dfa__buffer *ts, int n, const char *fn) {
    if (!scratch) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "scratch is NULL");
    if (bytes < need)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "scratch_bytes = %zu is less than the %zu bytes the call needs",
                         bytes, need);
    const dfa__dev_ptr ps[] = {{scratch, "scratch", 256}};
    const dfa_status st = dfa__cuda_check_device_ptrs(ps, 1, fn);
    if (st) return st;
    const size_t heads = (size_t)d->num_heads * sizeof(float);
    const dfa__buffer ids[] = {{d->q_doc, (size_t)d->batch * d->seqlen_q * sizeof(int32_t), "d->q_doc"},
                               {d->k_doc, (size_t)d->batch * d->seqlen_k * sizeof(int32_t), "d->k_doc"},
                               {d->sinks, heads, "d->sinks"}, {d->dsinks, heads, "d->dsinks"}};
    for (int i = 0; i < n + 4; i++) {
        const dfa__buffer *b = i < n ? &ts[i] : &ids[i - n];
        if (dfa__overlap(scratch, need, b->ptr, b->bytes))
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "scratch overlaps %s", b->name);
    }
    return DFA_OK;
}

/* The call's tensors, for check_scratch: q-shaped, o-shaped (head_dim_v wide), k-shaped,
   v-shaped and lse-shaped extents. */
static dfa__buffer tensor(const dfa_attn_desc *d, const void *p, char shape, const char *name) {
    const size_t es = dfa__dtype_size(d->dtype);
    const size_t n = shape == 'q'   ? (size_t)dfa__q_elems(d) * es
                     : shape == 'o' ? (size_t)dfa__o_elems(d) * es
                     : shape == 'k' ? (size_t)dfa__kv_elems(d) * es
                     : shape == 'v' ? (size_t)dfa__v_elems(d) * es
                                    : (size_t)dfa__lse_elems(d) * sizeof(float);
    const dfa__buffer b = {p, n, name};
    return b;
}

/* The mask intervals of a masked call: at `in` in the caller's scratch (the _with_scratch
   calls), else in stream-ordered scratch of their own (*owned, given back by dfa__cuda_mask_end). */
static dfa_status mask_begin(const dfa_attn_desc *d, dfa__cuda_shape *s, void *in, void **owned, cudaStream_t stream,
                             const char *fn) {
    *owned = NULL;
    if (!s->masked) return DFA_OK;
    if (!in) return dfa__cuda_mask_begin(d, s, owned, stream, fn);
    const dfa__cuda_mask m = dfa__cuda_mask_of(d);
    return dfa__cuda_mask_prepare(&m, in, s, stream, fn);
}

static dfa_status fwd_call(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, void *o,
                           float *lse, int with_scratch, void *scratch, size_t scratch_bytes, cudaStream_t stream,
                           const char *fn) {
    dfa__clear_error();
    dfa_attn_desc d;
    dfa_status st = dfa__check_fwd_args(user_d, cuda_rule, &d, q, k, v, o, lse, fn);
    if (st) return st;
    const dfa__dev_ptr ps[] = {{q, "q", 16}, {k, "k", 16}, {v, "v", 16}, {o, "o", 16}, {lse, "lse", 4}};
    if ((st = dfa__cuda_check_device_ptrs(ps, 5, fn))) return st;
    if ((st = check_docs(&d, fn)) || (st = check_sinks(&d, fn))) return st;
    dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    s.fwd_sinks = d.sinks != NULL; /* the kernels add them to each row's normaliser */
    if (with_scratch) {
        const dfa__buffer ts[] = {tensor(&d, q, 'q', "q"), tensor(&d, k, 'k', "k"), tensor(&d, v, 'v', "v"),
                                  tensor(&d, o, 'o', "o"), tensor(&d, lse, 'l', "lse")};
        if ((st = check_scratch(&d, scratch, scratch_bytes, fwd_scratch_of(&d), ts, 5, fn))) return st;
        s.fwd_counter = (unsigned int *)((char *)scratch + mask_bytes_of(&d)); /* after the intervals */
    }
    void *owned = NULL;
    if ((st = mask_begin(&d, &s, with_scratch ? scratch : NULL, &owned, stream, fn))) return st;
    st = dfa__cuda_fwd(&s, q, k, v, o, lse, stream, fn);
    return dfa__cuda_mask_end(owned, st, stream, fn);
}

static dfa_status bwd_call(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, const void *o,
                           const float *lse, const void *dout, void *dq, void *dk, void *dv, int with_scratch,
                           void *scratch, size_t scratch_bytes, cudaStream_t stream, const char *fn) {
    dfa__clear_error();
    dfa_attn_desc d;
    dfa_status st = dfa__check_bwd_args(user_d, cuda_rule, &d, q, k, v, o, lse, dout, dq, dk, dv, fn);
    if (st) return st;
    const dfa__dev_ptr ps[] = {{q, "q", 16},       {k, "k", 16},   {v, "v", 16},   {o, "o", 16},  {lse, "lse", 4},
                          {dout, "dout", 16}, {dq, "dq", 16}, {dk, "dk", 16}, {dv, "dv", 16}};
    if ((st = dfa__cuda_check_device_ptrs(ps, 9, fn))) return st;
    if ((st = check_docs(&d, fn)) || (st = check_sinks(&d, fn))) return st;
    dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    size_t own = 0; /* the caller's scratch: the kernels' part, then the mask's */
    if (with_scratch) {
        const dfa__buffer ts[] = {tensor(&d, q, 'q', "q"),       tensor(&d, k, 'k', "k"),   tensor(&d, v, 'v', "v"),
                                  tensor(&d, o, 'o', "o"),       tensor(&d, lse, 'l', "lse"),
                                  tensor(&d, dout, 'o', "dout"), tensor(&d, dq, 'q', "dq"),
                                  tensor(&d, dk, 'k', "dk"),     tensor(&d, dv, 'v', "dv")};
        if ((st = check_scratch(&d, scratch, scratch_bytes, bwd_scratch_of(&d, &s, &own), ts, 9, fn))) return st;
    }
    void *owned = NULL;
    if ((st = mask_begin(&d, &s, with_scratch ? (char *)scratch + own : NULL, &owned, stream, fn))) return st;
    st = dfa__cuda_bwd(&s, q, k, v, o, lse, dout, dq, dk, dv, with_scratch ? scratch : NULL, NULL, stream, fn);
    return dfa__cuda_mask_end(owned, st, stream, fn);
}

dfa_status dfa_attn_fwd_cuda(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o, float *lse,
                             cudaStream_t stream) {
    return fwd_call(d, q, k, v, o, lse, 0, NULL, 0, stream, "dfa_attn_fwd_cuda");
}

dfa_status dfa_attn_fwd_cuda_with_scratch(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o,
                                          float *lse, void *scratch, size_t scratch_bytes, cudaStream_t stream) {
    return fwd_call(d, q, k, v, o, lse, 1, scratch, scratch_bytes, stream, "dfa_attn_fwd_cuda_with_scratch");
}

dfa_status dfa_attn_bwd_cuda(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                             const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t stream) {
    return bwd_call(d, q, k, v, o, lse, dout, dq, dk, dv, 0, NULL, 0, stream, "dfa_attn_bwd_cuda");
}

dfa_status dfa_attn_bwd_cuda_with_scratch(const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                          const void *o, const float *lse, const void *dout, void *dq, void *dk,
                                          void *dv, void *scratch, size_t scratch_bytes, cudaStream_t stream) {
    return bwd_call(d, q, k, v, o, lse, dout, dq, dk, dv, 1, scratch, scratch_bytes, stream,
                    "dfa_attn_bwd_cuda_with_scratch");
}

dfa_status dfa_attn_merge_cuda(const dfa_attn_desc *user_d, void *o_acc, float *lse_acc, const void *o_part,
                               const float *lse_part, cudaStream_t stream) {
    static const char fn[] = "dfa_attn_merge_cuda";
    dfa__clear_error();
    dfa_attn_desc d;
    dfa_status st = dfa__check_merge_args(user_d, &d, o_acc, lse_acc, o_part, lse_part, fn);
    if (st) return st;
    const size_t es = dfa__dtype_size(d.dtype);
    const dfa__dev_ptr ps[] = {{o_acc, "o_acc", es}, {lse_acc, "lse_acc", 4}, {o_part, "o_part", es}, {lse_part, "lse_part", 4}};
    if ((st = dfa__cuda_check_device_ptrs(ps, 4, fn))) return st;
    /* o is head_dim_v wide (any width: the merge kernel walks a row's elements one by one) */
    return dfa__cuda_merge((int)d.dtype, d.batch, d.seqlen_q, d.num_heads, dfa__head_dim_v(&d), o_acc, lse_acc, o_part,
                           lse_part, stream, fn);
}

/* The scratch queries answer 0 for an invalid descriptor (dfa_last_error says why). */
static int import_desc(const dfa_attn_desc *user_d, dfa_attn_desc *d, const char *fn) {
    return dfa__attn_desc_import(user_d, d, fn) == DFA_OK && dfa__check_desc(d, DFA__DESC_FULL, fn) == DFA_OK &&
           refuse_v3(d, fn) == DFA_OK;
}

size_t dfa_attn_fwd_cuda_scratch_bytes(const dfa_attn_desc *user_d) {
    dfa_attn_desc d;
    return import_desc(user_d, &d, "dfa_attn_fwd_cuda_scratch_bytes") ? fwd_scratch_of(&d) : 0;
}

size_t dfa_attn_bwd_cuda_scratch_bytes(const dfa_attn_desc *user_d) {
    dfa_attn_desc d;
    if (!import_desc(user_d, &d, "dfa_attn_bwd_cuda_scratch_bytes")) return 0;
    const dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    size_t own;
    return bwd_scratch_of(&d, &s, &own);
}
