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
    if (d->causal) {
        const long long off = (long long)(d->q_start - d->k_start); /* both < 2^62 in magnitude */
        if (off >= (long long)d->seqlen_k - 1) s.causal = 0;     /* row 0 already sees every key */
        else s.offset = off < -(long long)d->seqlen_q - 1 ? -(long long)d->seqlen_q - 1 : off;
    }
    return s;
}

/* Document ids are device memory on this device, 4-byte aligned (their order is the caller's
   promise on the device: distflash_cuda.h). */
static dfa_status check_docs(const dfa_attn_desc *d, const char *fn) {
    const dfa__dev_ptr ps[] = {{d->q_doc, "d->q_doc", 4}, {d->k_doc, "d->k_doc", 4}};
    return d->q_doc ? dfa__cuda_check_device_ptrs(ps, 2, fn) : DFA_OK;
}

dfa_status dfa_attn_fwd_cuda(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, void *o,
                             float *lse, cudaStream_t stream) {
    static const char fn[] = "dfa_attn_fwd_cuda";
    dfa__clear_error();
    dfa_attn_desc d;
    dfa_status st = dfa__check_fwd_args(user_d, dfa__cuda_check_dtype, &d, q, k, v, o, lse, fn);
    if (st) return st;
    const dfa__dev_ptr ps[] = {{q, "q", 16}, {k, "k", 16}, {v, "v", 16}, {o, "o", 16}, {lse, "lse", 4}};
    if ((st = dfa__cuda_check_device_ptrs(ps, 5, fn))) return st;
    if ((st = check_docs(&d, fn))) return st;
    dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    void *mbuf = NULL;
    if (s.masked && (st = dfa__cuda_mask_begin(&d, &s, &mbuf, stream, fn))) return st;
    st = dfa__cuda_fwd(&s, q, k, v, o, lse, stream, fn);
    return dfa__cuda_mask_end(mbuf, st, stream, fn);
}

dfa_status dfa_attn_bwd_cuda(const dfa_attn_desc *user_d, const void *q, const void *k, const void *v, const void *o,
                             const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t stream) {
    static const char fn[] = "dfa_attn_bwd_cuda";
    dfa__clear_error();
    dfa_attn_desc d;
    dfa_status st = dfa__check_bwd_args(user_d, dfa__cuda_check_dtype, &d, q, k, v, o, lse, dout, dq, dk, dv, fn);
    if (st) return st;
    const dfa__dev_ptr ps[] = {{q, "q", 16},       {k, "k", 16},   {v, "v", 16},   {o, "o", 16},  {lse, "lse", 4},
                          {dout, "dout", 16}, {dq, "dq", 16}, {dk, "dk", 16}, {dv, "dv", 16}};
    if ((st = dfa__cuda_check_device_ptrs(ps, 9, fn))) return st;
    if ((st = check_docs(&d, fn))) return st;
    dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    void *mbuf = NULL;
    if (s.masked && (st = dfa__cuda_mask_begin(&d, &s, &mbuf, stream, fn))) return st;
    st = dfa__cuda_bwd(&s, q, k, v, o, lse, dout, dq, dk, dv, NULL, NULL, stream, fn);
    return dfa__cuda_mask_end(mbuf, st, stream, fn);
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
    return dfa__cuda_merge((int)d.dtype, d.batch, d.seqlen_q, d.num_heads, d.head_dim, o_acc, lse_acc, o_part,
                           lse_part, stream, fn);
}

size_t dfa_attn_bwd_cuda_scratch_bytes(const dfa_attn_desc *user_d) {
    static const char fn[] = "dfa_attn_bwd_cuda_scratch_bytes";
    dfa_attn_desc d;
    if (dfa__attn_desc_import(user_d, &d, fn) != DFA_OK || dfa__check_desc(&d, DFA__DESC_FULL, fn) != DFA_OK)
        return 0;
    const dfa__cuda_shape s = dfa__cuda_shape_of(&d);
    return dfa__cuda_bwd_scratch(&s);
}
