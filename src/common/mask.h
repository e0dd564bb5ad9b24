/* Internal: the document / sliding-window mask of a descriptor (the rule is in distflash.h,
 * "Masks"), on the host. Under every mask the keys visible to one query row form one interval
 * (causal, window and "same document" each give an interval, as document ids are
 * non-decreasing), so the kernels work with per-row key intervals: a tile is skipped when no
 * row's interval meets it, and masked element by element only where some interval ends
 * inside it. src/cuda/mask.cuh is the device twin of these helpers. */
#ifndef DFA_COMMON_MASK_H
#define DFA_COMMON_MASK_H

#include <stdbool.h>
#include <stdint.h>

#include "distflash.h"

/* True when d masks beyond causal: documents or a window. */
static inline bool dfa__has_mask(const dfa_attn_desc *d) {
    return d->q_doc != NULL || (d->flags & DFA_FLAG_WINDOW) != 0;
}

/* Keys [*lo, *hi) of batch row b visible to query row i (empty when *hi <= *lo; then both
   are clamped into [0, seqlen_k]). Causal, documents (binary search in k_doc) and window.
   The descriptor must have passed dfa__check_desc. */
void dfa__row_keys(const dfa_attn_desc *d, int b, int i, int *lo, int *hi);

/* Checks that q_doc and k_doc (host memory) are non-decreasing along each batch row;
   a no-op without documents. */
dfa_status dfa__check_docs_host(const dfa_attn_desc *d, const char *fn);

/* The number of visible (query, key) pairs of one head, summed over the batch: the
   work a mask leaves (benchmarks count FLOPs over these). */
int64_t dfa__visible_pairs(const dfa_attn_desc *d);

/* The same, and in [*row_lo, *row_hi) the query rows that have a visible key in some batch row
   (0, 0 when none has). */
int64_t dfa__visible_pairs_rows(const dfa_attn_desc *d, int *row_lo, int *row_hi);

/* The visible pairs of the query rows below each of samples + 1 sample rows: cum[j] counts rows
   [0, x_j) with x_j = j seqlen_q / samples (integer division; cum[0] = 0, cum[samples] the
   total). On a causal block with q_start == k_start (a diagonal block) a row sees no key at or
   after itself, so cum[j] is also the work of rows [0, x_j) against keys [0, x_j): what the
   masked plans delegate of a busy diagonal (mask_plan.c). Returns the total and the rows as
   dfa__visible_pairs_rows does. */
int64_t dfa__visible_pairs_prefix(const dfa_attn_desc *d, int samples, int64_t *cum, int *row_lo, int *row_hi);

#endif
