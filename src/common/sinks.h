/* Internal: attention sinks (the math is in distflash.h, "Logits, softcap and sinks"), on the
 * host. A sink joins a row's normaliser once: the single-device kernels start each row's
 * online softmax from it (running max = sink, sum = 1, no value), while passes that combine
 * partial results over disjoint key sets (merge, the distributed schedules) combine them
 * without sinks and add the sink to the final lse with dfa__lse_add_sink. */
#ifndef DFA_COMMON_SINKS_H
#define DFA_COMMON_SINKS_H

#include <math.h>
#include <stdint.h>

#include "distflash.h"

/* The lse of a row after its sink joins the normaliser, lse' = log(exp(lse) + exp(sink)),
   and in *o_scale the factor its o takes, exp(lse - lse') (0 for a row that saw no key, whose
   lse is -inf: then lse' = sink exactly). NaN in lse propagates to both. */
static inline float dfa__lse_add_sink(float lse, float sink, float *o_scale) {
    if (lse == -INFINITY) {
        *o_scale = 0.0f;
        return sink;
    }
    const float e = expf(sink - lse); /* the sink's weight relative to the keys' */
    *o_scale = 1.0f / (1.0f + e);
    return lse >= sink ? lse + log1pf(e) : sink + log1pf(expf(lse - sink));
}

/* Every sink of d (host memory, num_heads of them) is finite; a no-op without sinks. */
dfa_status dfa__check_sinks_host(const dfa_attn_desc *d, const char *fn);

/* dsinks[h] = - sum over b, i of exp(sinks[h] - lse[b][h][i]) * dsum[b][h][i] ([batch][heads]
   [rows] each, host memory; rows with lse = -inf add nothing), summed in float64 in a fixed
   order (the same bits for any thread count), for the heads [h0, h1). */
void dfa__dsinks_host(int batch, int heads, int rows, const float *sinks, const float *lse, const float *dsum,
                      float *dsinks, int h0, int h1);

#endif
