/* Internal: validation and sizes of attention descriptors, shared by every backend. */
#ifndef DFA_COMMON_DESC_H
#define DFA_COMMON_DESC_H

#include <stdbool.h>
#include <stddef.h>

#include "distflash.h"

#define DFA__MAX_HEAD_DIM 256
#define DFA__MAX_OFFSET ((int64_t)1 << 62)

/* Reads the caller's descriptor by its versioning header (the rules of "Descriptors that can
   grow" in distflash.h) and writes a normalised copy in this library's layout to *out: header
   set to this version (struct_size = sizeof, magic, version), fields the caller's layout lacks
   at their defaults (0). Reads no byte past the caller's struct_size. Refuses a bad header
   (DFA_ERR_INVALID_ARGUMENT, naming d->struct_size, d->magic, ..., d->attn.struct_size) and
   non-zero bytes where this library knows no field (DFA_ERR_UNSUPPORTED, naming the bytes).
   *out is written only on success; the contents (sizes, dtype, ...) are not checked here
   (dfa__check_desc does that). Entry points import first and then use only the copy. */
dfa_status dfa__attn_desc_import(const dfa_attn_desc *user, dfa_attn_desc *out, const char *fn);
dfa_status dfa__dist_desc_import(const dfa_dist_desc *user, dfa_dist_desc *out, const char *fn);

/* Which fields a call reads: merge ignores the key side. */
typedef enum { DFA__DESC_FULL, DFA__DESC_QUERY_SIDE } dfa__desc_use;

/* Validates the contents of a normalised descriptor (dfa__attn_desc_import) for a call named
   fn; on failure records the message and returns the status. */
dfa_status dfa__check_desc(const dfa_attn_desc *d, dfa__desc_use use, const char *fn);

/* Fails with "fn: <name> is NULL" when p is NULL. */
dfa_status dfa__check_ptr(const void *p, const char *name, const char *fn);

/* True when byte ranges [a, a+na) and [b, b+nb) share a byte. */
bool dfa__overlap(const void *a, size_t na, const void *b, size_t nb);

/* A named buffer for dfa__check_no_overlap. */
typedef struct {
    const void *ptr;
    size_t bytes;
    const char *name;
} dfa__buffer;

/* Fails when any of the nout outputs overlaps another output or any input. NULL entries are skipped. */
dfa_status dfa__check_no_overlap(const dfa__buffer *outs, int nout, const dfa__buffer *ins, int nin,
                                 const char *fn);

/* Element counts of each tensor (descriptor must have passed dfa__check_desc). */
int64_t dfa__q_elems(const dfa_attn_desc *d);   /* batch * seqlen_q * num_heads * head_dim */
int64_t dfa__kv_elems(const dfa_attn_desc *d);  /* batch * seqlen_k * num_kv_heads * head_dim */
int64_t dfa__lse_elems(const dfa_attn_desc *d); /* batch * num_heads * seqlen_q */

/* The value head dim Dv (resolves head_dim_v = 0 to head_dim) and the element counts of the
   tensors that have it. */
int dfa__head_dim_v(const dfa_attn_desc *d);
int64_t dfa__o_elems(const dfa_attn_desc *d); /* batch * seqlen_q * num_heads * Dv: o, dout */
int64_t dfa__v_elems(const dfa_attn_desc *d); /* batch * seqlen_k * num_kv_heads * Dv: v, dv */

/* A backend that does not implement the version-3 fields (softcap, a head_dim_v other than
   head_dim, sinks, dsinks) refuses a descriptor that sets one: DFA_ERR_UNSUPPORTED naming
   the field as prefix + name ("d->" or "d->attn."), and who ("the CUDA calls"). */
dfa_status dfa__refuse_v3_fields(const dfa_attn_desc *d, const char *prefix, const char *who, const char *fn);

/* The scale actually applied to q.k (resolves 0 to 1/sqrt(head_dim)). */
float dfa__softmax_scale(const dfa_attn_desc *d);

/* Number of keys visible to query row i: keys [0, n) (causal: k_start + j <= q_start + i),
   clamped to [0, seqlen_k]. */
int dfa__visible_keys(const dfa_attn_desc *d, int64_t i);

#endif
