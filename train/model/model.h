/* A small LLaMA-style decoder over bytes, with a hand-written backward.
 *
 *   x_0 = wte[token]
 *   per layer l:  x_mid = x_l + Attn(RMSNorm(x_l)) Wo        (RoPE at global positions, GQA)
 *                 x_l+1 = x_mid + (silu(n W1) * (n W3)) W2    with n = RMSNorm(x_mid)
 *   logits = RMSNorm(x_L) Wout
 *
 * Backend-neutral: the model is a struct of parameters plus a forward and a backward over
 * explicit activation buffers (dft_acts); attention goes through dft_attention, which
 * calls the library's single-process or sequence-parallel entry points. Each rank holds
 * `rows` consecutive positions of each of `batch` sequences; everything but attention is
 * token-local. All float32 on the CPU. */
#ifndef DFT_TRAIN_MODEL_MODEL_H
#define DFT_TRAIN_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

#define DFT_VOCAB 256

typedef struct {
    int n_layers, d_model, n_heads, n_kv_heads, ffn;
    int context;       /* global positions per sequence (all ranks together) */
    float rope_base;   /* RoPE theta base */
    float init_std;    /* N(0, std) for the matrices; Wo and W2 get std / sqrt(2 n_layers) */
} dft_model_config;

/* Checks a configuration for nranks ranks; 0, or -1 with the reason in err
   (e.g. "n_heads = 6 does not divide d_model = 64"). */
int dft_model_config_check(const dft_model_config *c, int nranks, char *err, size_t errlen);

/* Where each parameter tensor lives inside one flat float array (offsets in floats).
   Matrices are [in, out] row-major: y = x W. Per-layer tensors are stacked over layers. */
typedef struct {
    size_t wte;        /* [VOCAB, d] */
    size_t attn_norm;  /* [L, d] */
    size_t wq;         /* [L, d, H*hd] */
    size_t wk, wv;     /* [L, d, KV*hd] */
    size_t wo;         /* [L, H*hd, d] */
    size_t mlp_norm;   /* [L, d] */
    size_t w1, w3;     /* [L, d, F] */
    size_t w2;         /* [L, F, d] */
    size_t final_norm; /* [d] */
    size_t wout;       /* [d, VOCAB] */
    size_t total;
} dft_param_layout;

/* One parameter tensor as a named span of the flat array (for the optimiser and tests). */
typedef struct {
    const char *name;
    size_t offset, count;
    int is_matrix; /* weight decay applies to matrices only */
} dft_param_tensor;

dft_param_layout dft_param_layout_of(const dft_model_config *c);
/* The tensors in layout order; returns their number (at most 11) and fills out. */
int dft_param_tensors(const dft_model_config *c, dft_param_tensor out[16]);

/* Fills params (layout.total floats) with the initial values, a pure function of seed. */
void dft_model_init(const dft_model_config *c, float *params, uint64_t seed);

/* ---- attention behind the library's calls ---- */
typedef struct {
    dfa_comm *comm;        /* NULL: one process (dfa_attn_*); else dfa_dist_attn_* */
    dfa_schedule schedule;
    int overlap;
    long fwd_calls, bwd_calls;      /* counted per layer call */
    double fwd_seconds, bwd_seconds;
} dft_attention;

/* ---- activation checkpointing ---- */
typedef enum {
    DFT_CKPT_NONE = 0,        /* keep every activation */
    DFT_CKPT_LAYER = 1,       /* keep each layer's input; the backward re-runs the whole layer,
                                  attention forward (and its communication) included */
    DFT_CKPT_ATTN_OUTPUT = 2  /* DistFlashAttn: keep each layer's input and its attention output
                                  and LSE; the backward recomputes only token-local work, so the
                                  attention forward runs once per step */
} dft_ckpt_policy;

const char *dft_ckpt_policy_name(dft_ckpt_policy p);
/* "none", "layer", "attn-output"; -1 if unknown. */
int dft_ckpt_policy_parse(const char *s);

typedef struct dft_acts dft_acts;

/* Activation buffers for `batch` sequences of `rows` local positions at global positions
   pos[0..rows-1] (from dfa_dist_position). NULL with a message if memory runs out. */
dft_acts *dft_acts_create(const dft_model_config *c, dft_ckpt_policy policy, int batch, int rows,
                            const int64_t *pos, char *err, size_t errlen);
void dft_acts_free(dft_acts *a);
/* Bytes the buffers take (for reports). */
size_t dft_acts_bytes(const dft_acts *a);

/* Forward over tokens[batch*rows] with targets[batch*rows] and weights[batch*rows].
   Returns sum(weight * nll) over this rank's rows (double) and leaves in the buffers the
   gradient of loss = that sum * grad_scale with respect to the logits (grad_scale is
   1 / the global sum of weights, so the loss is a mean over all ranks' tokens).
   argmax (optional, batch*rows) receives the predicted byte of each position.
   Returns NaN if an attention call fails (err says why). */
double dft_model_forward(const dft_model_config *c, const float *params, dft_acts *a, dft_attention *attn,
                          const uint8_t *tokens, const uint8_t *targets, const float *weights, float grad_scale,
                          uint8_t *argmax, char *err, size_t errlen);

/* Backward of the last forward: adds this rank's parameter gradients into grads
   (layout.total floats; the caller zeroes them and sums them over ranks).
   Returns 0, or -1 with a message if an attention call fails. */
int dft_model_backward(const dft_model_config *c, const float *params, float *grads, dft_acts *a,
                        dft_attention *attn, const uint8_t *tokens, char *err, size_t errlen);

#endif
