/* Internal to the model: the activation buffers and what each checkpoint policy keeps.
 *
 * Every layer has a full set of pointers; a policy decides which of them are the layer's
 * own storage (kept from the forward to the backward) and which point into one shared
 * working set (overwritten by the next layer, recomputed in the backward):
 *   none:         everything is the layer's own
 *   layer:        x (the layer's input) is its own
 *   attn-output:  x, o and lse are its own
 * The forward writes through the pointers the same way under every policy. */
#ifndef DFT_TRAIN_MODEL_ACTS_H
#define DFT_TRAIN_MODEL_ACTS_H

#include "train/model/model.h"

typedef struct {
    float *x;            /* [n, d]   layer input (residual stream) */
    float *n1, *rstd1;   /* [n, d], [n]  attention-norm output and its 1/rms */
    float *q, *k, *v;    /* [n, qd], [n, kvd], [n, kvd]  after RoPE (q, k) */
    float *o, *lse;      /* [n, qd], [batch, H, rows]  attention output and log-sum-exp */
    float *xmid;         /* [n, d]   x + o Wo */
    float *n2, *rstd2;   /* [n, d], [n] */
    float *a, *b, *g;    /* [n, F]   n2 W1, n2 W3, silu(a) * b */
} dft_layer_acts;

struct dft_acts {
    dft_ckpt_policy policy;
    int batch, rows, n; /* n = batch * rows: the local token rows */
    int d, qd, kvd, F, hd;
    dft_layer_acts *layer; /* [n_layers] */
    float *xfinal, *nf, *rstdf; /* final norm input, output, 1/rms */
    float *logits;              /* [n, VOCAB]; holds d loss / d logits after the forward */
    float *cosv, *sinv;         /* [rows, hd/2] RoPE tables at this rank's positions */
    /* backward work */
    float *dres;       /* [n, d] gradient of the residual stream */
    float *dn;         /* [n, d] gradient of a norm's output */
    float *dg, *db;    /* [n, F] */
    float *dout;       /* [n, qd] gradient of the attention output */
    float *dq, *dk, *dv;
    void **blocks;     /* every allocation, for dft_acts_free */
    int nblocks, capblocks;
    size_t bytes;
};

#endif
