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

/* What dfa__visible_pairs_counts counts besides the visible pairs; each pointer may be NULL.
   Samples: x_j = j seqlen_q / samples (integer division), j = 0..samples.
   Tile cost: a kernel computes whole tiles, so a block costs about the rows x keys of every
   (query tile, key tile) that some visible pair falls in, not its visible pairs: short
   documents leave most of each tile masked. The masked plans balance on it (mask_plan.c). */
typedef struct {
    int samples;       /* > 0 for cum and cost_cum */
    int64_t *cum;      /* [samples + 1]: the visible pairs of rows [0, x_j) */
    int tile;          /* > 0 for cost and cost_cum: tiles of tile query rows x tile keys */
    int64_t *cost;     /* the tile cost of the block */
    int64_t *cost_cum; /* [samples + 1]: the tile cost of rows [0, x_j) (each row a share of its tile's) */
    int *keys;         /* [2]: the keys some query row sees, [keys[0], keys[1]) over every batch row (0, 0: none) */
} dfa__mask_counts;

/* dfa__visible_pairs_rows, and what mc asks for. On a causal block with q_start == k_start (a
   diagonal block) a row sees no key at or after itself, so cum[j] is also the work of rows
   [0, x_j) against keys [0, x_j): what the masked plans lend of a busy diagonal. */
int64_t dfa__visible_pairs_counts(const dfa_attn_desc *d, int *row_lo, int *row_hi, dfa__mask_counts *mc);

#endif
