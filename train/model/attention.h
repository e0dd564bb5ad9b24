/* The model's attention calls: causal attention of one layer through the library's public
 * API, single-process (dfa_attn_*) or sequence-parallel (dfa_dist_attn_*), counted and timed. */
#ifndef DFT_TRAIN_MODEL_ATTENTION_H
#define DFT_TRAIN_MODEL_ATTENTION_H

#include <stddef.h>

#include "train/model/model.h"

/* q, o: [batch, rows, H, hd]; k, v: [batch, rows, KV, hd]; lse: [batch, H, rows]. */
int dft_attention_fwd(dft_attention *at, const dft_model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, float *o, float *lse, char *err, size_t errlen);
int dft_attention_bwd(dft_attention *at, const dft_model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, const float *o, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, char *err, size_t errlen);

#endif
