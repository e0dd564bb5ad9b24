#include "desc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* ---- Descriptors that can grow (the rules are in distflash.h) ------------------------- */

#define DESC_MAX_SIZE 4096u
#define HEADER_BYTES 16u /* struct_size, magic, version, reserved_header */

/* How a descriptor is named in messages: "d" and "d->" or "d->attn" and "d->attn.". */
typedef struct {
    const char *obj, *field;
} desc_name;

static const desc_name TOP = {"d", "d->"}, NESTED = {"d->attn", "d->attn."};

/* Checks the versioning header at p (the caller's bytes); *size gets the caller's
   descriptor size (v1_size for a zero-initialised one). The size is one this library has
   known (v1_size or my_size, the sizes of the first and of this version): the library reads
   that many bytes of the caller's, and a larger claim cannot be checked against the caller's
   memory, so a descriptor from a newer header that grew is refused before any byte past
   my_size is read. */
static dfa_status read_header(const unsigned char *p, uint32_t v1_size, uint32_t my_size, desc_name n,
                              uint32_t *size, uint32_t *version, const char *fn) {
    uint32_t h[4]; /* struct_size, magic, version, reserved_header */
    memcpy(h, p, sizeof h);
    if (h[0] == 0) { /* zero-initialised: the whole header is 0 */
        if (h[1] != 0)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%smagic = 0x%08x but %sstruct_size = 0; a zero-initialised descriptor has magic 0 "
                             "(or set struct_size, magic and version: dfa_attn_desc_init does)",
                             n.field, h[1], n.field);
        if (h[2] != 0)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%sversion = %u but %sstruct_size = 0; a zero-initialised descriptor has version 0",
                             n.field, h[2], n.field);
        *size = v1_size;
    } else {
        if (h[0] < v1_size || h[0] > DESC_MAX_SIZE || h[0] % 8 != 0)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%sstruct_size = %u is not a descriptor size: 0 (zero-initialised) or the caller's "
                             "sizeof, a multiple of 8 from %u to %u (uninitialised memory?)",
                             n.field, h[0], v1_size, DESC_MAX_SIZE);
        if (h[0] > my_size)
            return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                             "%sstruct_size = %u is larger than any descriptor this library knows (%u bytes, "
                             "descriptor version %u): the caller was built against a newer distflash.h with a "
                             "larger descriptor, which this library cannot read",
                             n.field, h[0], my_size, DFA_DESC_VERSION);
        if (h[0] != v1_size && h[0] != my_size)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%sstruct_size = %u is not the size of any descriptor version (%u or %u bytes)",
                             n.field, h[0], v1_size, my_size);
        if (h[1] != DFA_DESC_MAGIC)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%smagic = 0x%08x, expected DFA_DESC_MAGIC (0x%08x) with %sstruct_size = %u "
                             "(uninitialised memory? use dfa_attn_desc_init or zero-initialise)",
                             n.field, h[1], DFA_DESC_MAGIC, n.field, h[0]);
        if (h[2] == 0)
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                             "%sversion = 0 with %sstruct_size = %u; it must be the caller's DFA_DESC_VERSION "
                             "(%u in this library)",
                             n.field, n.field, h[0], DFA_DESC_VERSION);
        *size = h[0];
    }
    if (h[3] != 0)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "%sreserved_header = %u; it must be 0", n.field, h[3]);
    *version = h[2] ? h[2] : DFA_DESC_VERSION; /* zero-initialised: the layout of the caller's header, ours */
    return DFA_OK;
}

/* Bytes [from, to) of the caller's descriptor must be zero: this library knows no field there. */
static dfa_status check_zero(const unsigned char *p, size_t from, size_t to, desc_name n, const char *where,
                             const char *fn) {
    size_t first = from;
    while (first < to && p[first] == 0) first++;
    if (first >= to) return DFA_OK;
    size_t last = to - 1;
    while (p[last] == 0) last--;
    return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                     "bytes %zu..%zu of %s (%s) are not zero, and this library (descriptor version %u) knows no "
                     "field there: the caller was built against a newer distflash.h and sets fields this library "
                     "does not have, or did not zero-initialise the descriptor (= {0}, memset or dfa_attn_desc_init)",
                     first, last, n.obj, where, DFA_DESC_VERSION);
}

/* The caller's attention descriptor of `size` bytes at p (header already checked) in this
   library's layout. Fields keep their offsets from version to version, so the common prefix
   is copied as is; fields the caller's (older, shorter) layout lacks stay 0, their default. */
static dfa_status import_attn(const unsigned char *p, uint32_t size, uint32_t version, desc_name n,
                              dfa_attn_desc *out, const char *fn) {
    /* An older caller had reserved bytes where later versions put fields (version 2:
       q_doc..window_right, version 3: softcap..dsinks): they must still be zero for it (so
       its garbage is refused as before, not read as a mask or a sink). */
    const size_t known = version >= 3   ? offsetof(dfa_attn_desc, reserved)
                         : version == 2 ? offsetof(dfa_attn_desc, softcap)
                                        : offsetof(dfa_attn_desc, q_doc);
    const size_t mine = sizeof(dfa_attn_desc);
    char where[112];
    snprintf(where, sizeof where, "%sreserved%s", n.field,
             version >= 3   ? ""
             : version == 2 ? " of a version-2 descriptor, which includes the version-3 fields"
                            : " of a version-1 descriptor, which includes the version-2 and 3 fields");
    dfa_status st = check_zero(p, known, size < mine ? size : mine, n, where, fn);
    if (!st) st = check_zero(p, mine, size, n, "beyond the fields of this library's version", fn);
    if (st) return st;
    dfa_attn_desc a;
    memset(&a, 0, sizeof a);
    memcpy(&a, p, known < size ? known : size);
    a.struct_size = (uint32_t)sizeof a;
    a.magic = DFA_DESC_MAGIC;
    a.version = DFA_DESC_VERSION;
    a.reserved_header = 0;
    *out = a;
    return DFA_OK;
}

dfa_status dfa__attn_desc_import(const dfa_attn_desc *user, dfa_attn_desc *out, const char *fn) {
    if (!user) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d (the descriptor) is NULL");
    const unsigned char *p = (const unsigned char *)user;
    uint32_t size, version;
    dfa_status st = read_header(p, DFA_ATTN_DESC_SIZE_V1, sizeof(dfa_attn_desc), TOP, &size, &version, fn);
    return st ? st : import_attn(p, size, version, TOP, out, fn);
}

dfa_status dfa__dist_desc_import(const dfa_dist_desc *user, dfa_dist_desc *out, const char *fn) {
    if (!user) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d (the descriptor) is NULL");
    const unsigned char *p = (const unsigned char *)user;
    uint32_t size, attn_size, version, attn_version;
    dfa_status st = read_header(p, DFA_DIST_DESC_SIZE_V1, sizeof(dfa_dist_desc), TOP, &size, &version, fn);
    if (!st)
        st = read_header(p + HEADER_BYTES, DFA_ATTN_DESC_SIZE_V1, sizeof(dfa_attn_desc), NESTED, &attn_size,
                         &attn_version, fn);
    if (st) return st;
    /* The caller's attn has its own size; the distributed fields follow it (8-byte aligned). */
    const size_t at = offsetof(dfa_dist_desc, attn);
    const size_t tail = at + ((size_t)attn_size + 7) / 8 * 8; /* the caller's offset of schedule */
    const size_t known = offsetof(dfa_dist_desc, reserved) - offsetof(dfa_dist_desc, schedule);
    const size_t mine = sizeof(dfa_dist_desc) - offsetof(dfa_dist_desc, schedule);
    if (tail + known > size)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->attn.struct_size = %u does not fit in d->struct_size = %u (the distributed fields "
                         "follow d->attn)",
                         attn_size, size);
    dfa_dist_desc x;
    memset(&x, 0, sizeof x);
    (void)version; /* the distributed fields are the same in versions 1 to 3 */
    if ((st = import_attn(p + at, attn_size, attn_version, NESTED, &x.attn, fn))) return st;
    const size_t have = size - tail; /* the caller's bytes from schedule on */
    st = check_zero(p, tail + known, tail + (have < mine ? have : mine), TOP, "d->reserved", fn);
    if (!st) st = check_zero(p, tail + mine, size, TOP, "beyond the fields of this library's version", fn);
    if (st) return st;
    memcpy((unsigned char *)&x + offsetof(dfa_dist_desc, schedule), p + tail, known);
    x.struct_size = (uint32_t)sizeof x;
    x.magic = DFA_DESC_MAGIC;
    x.version = DFA_DESC_VERSION;
    x.reserved_header = 0;
    *out = x;
    return DFA_OK;
}

/* ---- Contents -------------------------------------------------------------------------- */

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

/* The version-3 fields: softcap (full use), head_dim_v (every use: merge reads the width of
   o), sinks and dsinks (full use; the values of the sinks are the backend's check). */
static dfa_status check_v3_fields(const dfa_attn_desc *d, dfa__desc_use use, const char *fn) {
    const bool full = use == DFA__DESC_FULL;
    if (d->head_dim_v < 0)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->head_dim_v = %d; it must be >= 1 (or 0 for head_dim)", (int)d->head_dim_v);
    if (d->head_dim_v % 8 != 0 || d->head_dim_v > DFA__MAX_HEAD_DIM)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                         "d->head_dim_v = %d is unsupported; it must be a multiple of 8 up to %d (or 0 for "
                         "head_dim)",
                         (int)d->head_dim_v, DFA__MAX_HEAD_DIM);
    if (!full) return DFA_OK;
    if (!(isfinite(d->softcap) && d->softcap >= 0.0f))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->softcap = %g; it must be finite and > 0 (or 0 for no softcapping)", (double)d->softcap);
    if (d->softcap > 0.0f && !isfinite(dfa__softmax_scale(d) / d->softcap))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->softcap = %g is too small: the scale over it, %g / %g, overflows float32",
                         (double)d->softcap, (double)dfa__softmax_scale(d), (double)d->softcap);
    if (d->dsinks && !d->sinks)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->dsinks is set but d->sinks is NULL (dsinks is the gradient of the sinks; there are "
                         "none)");
    return DFA_OK;
}

dfa_status dfa__check_desc(const dfa_attn_desc *d, dfa__desc_use use, const char *fn) {
    dfa_status st;
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
    /* Every backend works with the relative offset q_start - k_start (plus a row or a key
       index): bounding it keeps those sums exact in int64. Both within 2^62 alone would
       still let it reach 2^63. */
    if (full && (d->q_start - d->k_start <= -DFA__MAX_OFFSET || d->q_start - d->k_start >= DFA__MAX_OFFSET))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->q_start - d->k_start = %lld - (%lld) is out of range (|q_start - k_start| < 2^62)",
                         (long long)d->q_start, (long long)d->k_start);
    if (d->flags & ~(DFA_FLAG_DETERMINISTIC | DFA_FLAG_WINDOW | DFA_FLAG_SAME_DOCS))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->flags = 0x%x has unknown bits", d->flags);
    if (full && (d->flags & DFA_FLAG_SAME_DOCS) && !d->q_doc)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->flags has DFA_FLAG_SAME_DOCS but d->q_doc is NULL (the flag says the document ids "
                         "did not change; there are none)");
    if (full && !(d->flags & DFA_FLAG_WINDOW) && (d->window_left != 0 || d->window_right != 0))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->window_left = %d, d->window_right = %d but DFA_FLAG_WINDOW is not set in d->flags "
                         "(without it both must be 0)",
                         (int)d->window_left, (int)d->window_right);
    if (full && (d->flags & DFA_FLAG_WINDOW) && d->window_left < -1)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->window_left = %d; it must be >= 0 (keys that far behind) or -1 (unlimited)",
                         (int)d->window_left);
    if (full && (d->flags & DFA_FLAG_WINDOW) && d->window_right < -1)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->window_right = %d; it must be >= 0 (keys that far ahead) or -1 (unlimited)",
                         (int)d->window_right);
    if (full && (d->q_doc == NULL) != (d->k_doc == NULL))
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "%s is NULL but %s is set; document ids go together (both set, or both NULL for one "
                         "document)",
                         d->q_doc ? "d->k_doc" : "d->q_doc", d->q_doc ? "d->q_doc" : "d->k_doc");

    if ((st = check_v3_fields(d, use, fn))) return st;

    const int dmax = d->head_dim > dfa__head_dim_v(d) ? d->head_dim : dfa__head_dim_v(d);
    if ((int64_t)d->num_heads * dmax > INT32_MAX)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "d->num_heads * d->%s = %lld is too large (row stride must fit in int)",
                         dmax == d->head_dim ? "head_dim" : "head_dim_v", (long long)d->num_heads * dmax);
    /* Element and byte counts must fit, with room for float32 scratch of the same shape. */
    int64_t nq, nkv = 0;
    const int64_t limit = INT64_MAX / 8 < (int64_t)(SIZE_MAX / 8) ? INT64_MAX / 8 : (int64_t)(SIZE_MAX / 8);
    bool ok = mul4(d->batch, d->seqlen_q, d->num_heads, dmax, &nq) && nq <= limit;
    if (ok && full) ok = mul4(d->batch, d->seqlen_k, d->num_kv_heads, dmax, &nkv) && nkv <= limit;
    if (!ok)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "the sizes overflow: batch * seqlen * heads * head_dim does not fit in memory "
                         "(batch=%d seqlen_q=%d seqlen_k=%d num_heads=%d num_kv_heads=%d head_dim=%d head_dim_v=%d)",
                         d->batch, d->seqlen_q, d->seqlen_k, d->num_heads, d->num_kv_heads, d->head_dim,
                         dfa__head_dim_v(d));
    return DFA_OK;
}

dfa_status dfa__refuse_v3_fields(const dfa_attn_desc *d, const char *prefix, const char *who, const char *fn) {
    const char *field = d->softcap != 0.0f                                   ? "softcap"
                        : d->head_dim_v != 0 && d->head_dim_v != d->head_dim ? "head_dim_v"
                        : d->sinks                                           ? "sinks"
                        : d->dsinks                                          ? "dsinks"
                                                                             : NULL;
    if (!field) return DFA_OK;
    return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                     "%s%s is set, and %s do not implement it (softcap, head_dim_v other than head_dim, sinks "
                     "and dsinks: the CPU calls dfa_attn_fwd/bwd do)",
                     prefix, field, who);
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
int64_t dfa__o_elems(const dfa_attn_desc *d) {
    return (int64_t)d->batch * d->seqlen_q * d->num_heads * dfa__head_dim_v(d);
}
int64_t dfa__v_elems(const dfa_attn_desc *d) {
    return (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * dfa__head_dim_v(d);
}

int dfa__head_dim_v(const dfa_attn_desc *d) { return d->head_dim_v > 0 ? d->head_dim_v : d->head_dim; }

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
