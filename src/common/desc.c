#include "desc.h"

#include <math.h>
#include <stdint.h>

#include "dtype.h"
#include "error.h"

dfa_attn_desc dfa_attn_desc_init(int batch, int seqlen_q, int seqlen_k, int num_heads,
                                 int num_kv_heads, int head_dim) {
    dfa_attn_desc d = {0};
    d.struct_size = (uint32_t)sizeof d;
    d.magic = DFA_DESC_MAGIC;
    d.version = DFA_DESC_VERSION;
    d.batch = batch;
    d.seqlen_q = seqlen_q;
    d.seqlen_k = seqlen_k;
    d.num_heads = num_heads;
    d.num_kv_heads = num_kv_heads;
    d.head_dim = head_dim;
    d.dtype = DFA_F32;
    return d;
}

dfa_dist_desc dfa_dist_desc_init(int batch, int local_rows, int num_heads, int num_kv_heads, int head_dim) {
    dfa_dist_desc d = {0};
    d.struct_size = (uint32_t)sizeof d;
    d.magic = DFA_DESC_MAGIC;
    d.version = DFA_DESC_VERSION;
    d.attn = dfa_attn_desc_init(batch, local_rows, local_rows, num_heads, num_kv_heads, head_dim);
    d.schedule = DFA_SCHEDULE_BALANCED;
    return d;
}

/* a * b * c * e without overflowing int64; false on overflow. */
static bool mul4(int64_t a, int64_t b, int64_t c, int64_t e, int64_t *out) {
    int64_t r = a;
    const int64_t f[3] = {b, c, e};
    for (int i = 0; i < 3; i++) {
        if (f[i] != 0 && r > INT64_MAX / f[i]) return false;
        r *= f[i];
    }
    *out = r;
    return true;
}

dfa_status dfa__check_desc(const dfa_attn_desc *d, dfa__desc_use use, const char *fn) {
    if (!d) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d (the descriptor) is NULL");
    const bool full = use == DFA__DESC_FULL;
    const struct { int value; const char *name; bool used; } sizes[] = {
        {d->batch, "batch", true},
        {d->seqlen_q, "seqlen_q", true},
        {d->seqlen_k, "seqlen_k", full},
        {d->num_heads, "num_heads", true},
        {d->num_kv_heads, "num_kv_heads", full},
        {d->head_dim, "head_dim", true},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].used && sizes[i].value <= 0)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->%s = %d; it must be >= 1",
                             sizes[i].name, sizes[i].value);
    if (d->dtype != DFA_F32 && d->dtype != DFA_BF16 && d->dtype != DFA_F16)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->dtype = %d is not a dfa_dtype (DFA_F32, DFA_BF16 or DFA_F16)",
                         (int)d->dtype);
    if (d->head_dim % 8 != 0 || d->head_dim > DFA__MAX_HEAD_DIM)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                         "d->head_dim = %d is unsupported; it must be a multiple of 8 up to %d",
                         d->head_dim, DFA__MAX_HEAD_DIM);
    if (full && d->num_heads % d->num_kv_heads != 0)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->num_heads = %d is not a multiple of d->num_kv_heads = %d",
                         d->num_heads, d->num_kv_heads);
    if (full && d->causal != 0 && d->causal != 1)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->causal = %d; it must be 0 or 1",
                         d->causal);
    if (full && !(isfinite(d->softmax_scale) && d->softmax_scale >= 0.0f))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->softmax_scale = %g; it must be finite and > 0 (or 0 for 1/sqrt(head_dim))",
                         (double)d->softmax_scale);
    if (full && (d->q_start <= -DFA__MAX_OFFSET || d->q_start >= DFA__MAX_OFFSET))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->q_start = %lld is out of range (|q_start| < 2^62)",
                         (long long)d->q_start);
    if (full && (d->k_start <= -DFA__MAX_OFFSET || d->k_start >= DFA__MAX_OFFSET))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->k_start = %lld is out of range (|k_start| < 2^62)",
                         (long long)d->k_start);
    if (d->flags & ~DFA_FLAG_DETERMINISTIC)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->flags = 0x%x has unknown bits", d->flags);

    if ((int64_t)d->num_heads * d->head_dim > INT32_MAX)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->num_heads * d->head_dim = %lld is too large (row stride must fit in int)",
                         (long long)d->num_heads * d->head_dim);
    /* Element and byte counts must fit, with room for float32 scratch of the same shape. */
    int64_t nq, nkv = 0;
    const int64_t limit = INT64_MAX / 8 < (int64_t)(SIZE_MAX / 8) ? INT64_MAX / 8 : (int64_t)(SIZE_MAX / 8);
    bool ok = mul4(d->batch, d->seqlen_q, d->num_heads, d->head_dim, &nq) && nq <= limit;
    if (ok && full) ok = mul4(d->batch, d->seqlen_k, d->num_kv_heads, d->head_dim, &nkv) && nkv <= limit;
    if (!ok)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "the sizes overflow: batch * seqlen * heads * head_dim does not fit in memory "
                         "(batch=%d seqlen_q=%d seqlen_k=%d num_heads=%d num_kv_heads=%d head_dim=%d)",
                         d->batch, d->seqlen_q, d->seqlen_k, d->num_heads, d->num_kv_heads, d->head_dim);
    return DFA_OK;
}

dfa_status dfa__check_ptr(const void *p, const char *name, const char *fn) {
    if (p) return DFA_OK;
    return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%s is NULL", name);
}

bool dfa__overlap(const void *a, size_t na, const void *b, size_t nb) {
    if (!a || !b || na == 0 || nb == 0) return false;
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + nb && y < x + na;
}

dfa_status dfa__check_no_overlap(const dfa__buffer *outs, int nout, const dfa__buffer *ins, int nin,
                                 const char *fn) {
    for (int i = 0; i < nout; i++) {
        for (int j = i + 1; j < nout; j++)
            if (dfa__overlap(outs[i].ptr, outs[i].bytes, outs[j].ptr, outs[j].bytes))
                return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "outputs %s and %s overlap", outs[i].name,
                                 outs[j].name);
        for (int j = 0; j < nin; j++)
            if (dfa__overlap(outs[i].ptr, outs[i].bytes, ins[j].ptr, ins[j].bytes))
                return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "output %s overlaps input %s", outs[i].name,
                                 ins[j].name);
    }
    return DFA_OK;
}

int64_t dfa__q_elems(const dfa_attn_desc *d) {
    return (int64_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim;
}
int64_t dfa__kv_elems(const dfa_attn_desc *d) {
    return (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim;
}
int64_t dfa__lse_elems(const dfa_attn_desc *d) { return (int64_t)d->batch * d->num_heads * d->seqlen_q; }

float dfa__softmax_scale(const dfa_attn_desc *d) {
    return d->softmax_scale > 0.0f ? d->softmax_scale : 1.0f / sqrtf((float)d->head_dim);
}

int dfa__visible_keys(const dfa_attn_desc *d, int64_t i) {
    if (!d->causal) return d->seqlen_k;
    int64_t n = d->q_start + i - d->k_start + 1; /* keys j < n are visible */
    if (n < 0) return 0;
    if (n > d->seqlen_k) return d->seqlen_k;
    return (int)n;
}
