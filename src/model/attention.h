/* The model's attention calls: causal attention of one layer through the library's public
 * API, single-process (dfa_attn_*) or sequence-parallel (dfa_dist_attn_*), counted and timed. */
#ifndef DFA_MODEL_ATTENTION_H
#define DFA_MODEL_ATTENTION_H

#include <stddef.h>

#include "model/model.h"

/* q, o: [batch, rows, H, hd]; k, v: [batch, rows, KV, hd]; lse: [batch, H, rows]. */
int dfa__attention_fwd(dfa__attention *at, const dfa__model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, float *o, float *lse, char *err, size_t errlen);
int dfa__attention_bwd(dfa__attention *at, const dfa__model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, const float *o, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, char *err, size_t errlen);

#endif
