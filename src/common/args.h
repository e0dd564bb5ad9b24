/* Internal: the argument checks of each call shape (forward, backward, merge), shared by
 * the CPU, CUDA and distributed entry points. Each one imports the caller's descriptor
 * (dfa__attn_desc_import), validates it, checks the pointers for NULL and the outputs for
 * overlap, and on success writes the normalised descriptor to *d, which the entry point
 * uses from then on. Backends add their own checks after these (device memory, alignment,
 * of the descriptor's document ids, sinks and dsinks too; the values of host sinks with
 * dfa__check_sinks_host, src/common/sinks.h; seqlen/schedule of the distributed calls). */
#ifndef DFA_COMMON_ARGS_H
#define DFA_COMMON_ARGS_H

#include "distflash.h"

/* An extra rule on a (valid, normalised) descriptor, checked right after the common
   descriptor checks and before the pointers: what a backend does not support (the device's
   storage types). NULL for none. */
typedef dfa_status (*dfa__desc_rule)(const dfa_attn_desc *d, const char *fn);

/* q, k, v, o non-NULL (lse may be NULL); o and lse overlap no input (d->q_doc, d->k_doc and
   d->sinks included) nor each other. */
dfa_status dfa__check_fwd_args(const dfa_attn_desc *user, dfa__desc_rule rule, dfa_attn_desc *d, const void *q,
                               const void *k, const void *v, const void *o, const float *lse, const char *fn);

/* Every pointer non-NULL; dq, dk, dv and d->dsinks (when set) overlap no input (d->sinks
   included) nor each other. */
dfa_status dfa__check_bwd_args(const dfa_attn_desc *user, dfa__desc_rule rule, dfa_attn_desc *d, const void *q,
                               const void *k, const void *v, const void *o, const float *lse, const void *dout,
                               const void *dq, const void *dk, const void *dv, const char *fn);

/* Query-side descriptor only (the key side is not read); every pointer non-NULL;
   o_part/lse_part overlap neither o_acc nor lse_acc, and those two not each other. */
dfa_status dfa__check_merge_args(const dfa_attn_desc *user, dfa_attn_desc *d, const void *o_acc,
                                 const float *lse_acc, const void *o_part, const float *lse_part, const char *fn);

#endif
