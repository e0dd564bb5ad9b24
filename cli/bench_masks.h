/* Masks for dist-bench (--docs MEAN, --window W), on the CPU and the CUDA device path alike:
 * packed documents with log-normal lengths (sigma 1, a fixed seed: the distribution
 * bench/gpu/masks_bench.py draws), a sliding window, and the visible pairs that the FLOP
 * counts of masked runs use (FLOPs over visible pairs only). */
#ifndef DFA_CLI_BENCH_MASKS_H
#define DFA_CLI_BENCH_MASKS_H

#include <stdint.h>

#include "distflash.h"

typedef struct {
    double doc_mean; /* > 0: documents of this mean length; 0: none */
    int window;      /* >= 0: DFA_FLAG_WINDOW, keys at most this far behind (and ahead when not causal); -1: none */
} bench_mask;

/* 1 when m masks anything. */
int bench_mask_on(const bench_mask *m);

/* Parses --docs / --window at argv[*i] (advancing *i past the value): 1 when it was one of
   them, 0 when not, -1 on a bad or missing value. */
int bench_mask_arg(int argc, char **argv, int *i, bench_mask *m);

/* Document ids of `batch` rows of S tokens ([batch][S], non-decreasing in each row; every row
   the same layout), log-normal lengths of mean m->doc_mean and sigma 1, seed fixed; NULL
   without documents or memory. *ndocs gets the documents of a row. */
int32_t *bench_docs(const bench_mask *m, int batch, int64_t S, int *ndocs);

/* Sets m on a descriptor: ids (NULL: no documents) as q_doc and k_doc, the window. */
void bench_mask_apply(const bench_mask *m, dfa_attn_desc *d, const int32_t *ids);

/* Rows [r0, r0 + n) of every batch row of ids [batch][S]: [batch][n] (malloc). */
int32_t *bench_docs_slice(const int32_t *ids, int batch, int64_t S, int64_t r0, int64_t n);

/* Forward FLOPs of a call with d over its visible pairs: 4 H D per visible pair (masks,
   causal and windows counted exactly; d's document ids on the host). */
double bench_visible_flops(const dfa_attn_desc *d);

/* "docs mean 4096 (33 per row), window 4096" (or "no mask") into buf. */
void bench_mask_describe(const bench_mask *m, int ndocs, char *buf, int len);

#endif
