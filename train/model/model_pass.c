/* The forward and the hand-written backward of the model (see model.h for the equations
 * and acts.h for what each checkpoint policy keeps). */
#include <math.h>
#include <string.h>

#include "train/model/acts.h"
#include "train/model/attention.h"
#include "train/model/matmul.h"
#include "train/model/ops.h"

/* Where one layer's tensors start in the flat parameter (and gradient) array. */
typedef struct {
    size_t attn_norm, wq, wk, wv, wo, mlp_norm, w1, w3, w2;
} layer_offsets;

static layer_offsets layer_offsets_of(const dft_model_config *c, const dft_param_layout *p, int layer) {
    size_t l = (size_t)layer, d = (size_t)c->d_model, F = (size_t)c->ffn, hd = d / (size_t)c->n_heads;
    size_t qd = hd * (size_t)c->n_heads, kvd = hd * (size_t)c->n_kv_heads;
    return (layer_offsets){.attn_norm = p->attn_norm + l * d, .wq = p->wq + l * d * qd, .wk = p->wk + l * d * kvd,
                           .wv = p->wv + l * d * kvd, .wo = p->wo + l * qd * d, .mlp_norm = p->mlp_norm + l * d,
                           .w1 = p->w1 + l * d * F, .w3 = p->w3 + l * d * F, .w2 = p->w2 + l * F * d};
}

/* One layer's weights (read) and weight gradients (accumulated). */
typedef struct {
    const float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w1, *w3, *w2;
} layer_params;
typedef struct {
    float *attn_norm, *wq, *wk, *wv, *wo, *mlp_norm, *w1, *w3, *w2;
} layer_grads;

static layer_params layer_at(const dft_model_config *c, const dft_param_layout *p, const float *base, int l) {
    layer_offsets o = layer_offsets_of(c, p, l);
    return (layer_params){base + o.attn_norm, base + o.wq, base + o.wk, base + o.wv, base + o.wo,
                          base + o.mlp_norm, base + o.w1, base + o.w3, base + o.w2};
}

static layer_grads grads_at(const dft_model_config *c, const dft_param_layout *p, float *base, int l) {
    layer_offsets o = layer_offsets_of(c, p, l);
    return (layer_grads){base + o.attn_norm, base + o.wq, base + o.wk, base + o.wv, base + o.wo,
                         base + o.mlp_norm, base + o.w1, base + o.w3, base + o.w2};
}

/* The attention input of a layer: norm, projections, RoPE. */
static void attention_inputs(const dft_model_config *c, const layer_params *w, dft_acts *a, dft_layer_acts *la) {
    dft_rmsnorm_fwd(la->n1, la->rstd1, la->x, w->attn_norm, a->n, a->d, 1e-5f);
    dft_gemm_nn(la->q, la->n1, w->wq, a->n, a->d, a->qd, 0);
    dft_gemm_nn(la->k, la->n1, w->wk, a->n, a->d, a->kvd, 0);
    dft_gemm_nn(la->v, la->n1, w->wv, a->n, a->d, a->kvd, 0);
    dft_rope(la->q, a->cosv, a->sinv, a->batch, a->rows, c->n_heads, a->hd, 0);
    dft_rope(la->k, a->cosv, a->sinv, a->batch, a->rows, c->n_kv_heads, a->hd, 0);
}

/* Everything after attention: output projection, residual, MLP; writes x_next. */
static void attention_outputs(const layer_params *w, dft_acts *a, dft_layer_acts *la, float *x_next) {
    size_t nd = (size_t)a->n * a->d, nF = (size_t)a->n * a->F;
    memcpy(la->xmid, la->x, sizeof(float) * nd);
    dft_gemm_nn(la->xmid, la->o, w->wo, a->n, a->qd, a->d, 1);
    dft_rmsnorm_fwd(la->n2, la->rstd2, la->xmid, w->mlp_norm, a->n, a->d, 1e-5f);
    dft_gemm_nn(la->a, la->n2, w->w1, a->n, a->d, a->F, 0);
    dft_gemm_nn(la->b, la->n2, w->w3, a->n, a->d, a->F, 0);
    dft_swiglu_fwd(la->g, la->a, la->b, (long)nF);
    if (x_next) {
        memcpy(x_next, la->xmid, sizeof(float) * nd);
        dft_gemm_nn(x_next, la->g, w->w2, a->n, a->F, a->d, 1);
    }
}

double dft_model_forward(const dft_model_config *c, const float *params, dft_acts *a, dft_attention *attn,
                          const uint8_t *tokens, const uint8_t *targets, const float *weights, float grad_scale,
                          uint8_t *argmax, char *err, size_t errlen) {
    dft_param_layout p = dft_param_layout_of(c);
    const float *wte = params + p.wte;
    for (int r = 0; r < a->n; r++) memcpy(a->layer[0].x + (size_t)r * a->d, wte + (size_t)tokens[r] * a->d, sizeof(float) * a->d);
    for (int l = 0; l < c->n_layers; l++) {
        layer_params w = layer_at(c, &p, params, l);
        dft_layer_acts *la = &a->layer[l];
        attention_inputs(c, &w, a, la);
        if (dft_attention_fwd(attn, c, a->batch, a->rows, la->q, la->k, la->v, la->o, la->lse, err, errlen))
            return NAN;
        attention_outputs(&w, a, la, l + 1 < c->n_layers ? a->layer[l + 1].x : a->xfinal);
    }
    dft_rmsnorm_fwd(a->nf, a->rstdf, a->xfinal, params + p.final_norm, a->n, a->d, 1e-5f);
    dft_gemm_nn(a->logits, a->nf, params + p.wout, a->n, a->d, DFT_VOCAB, 0);
    return dft_cross_entropy(a->logits, targets, weights, grad_scale, a->n, DFT_VOCAB, argmax);
}

int dft_model_backward(const dft_model_config *c, const float *params, float *grads, dft_acts *a,
                        dft_attention *attn, const uint8_t *tokens, char *err, size_t errlen) {
    dft_param_layout p = dft_param_layout_of(c);
    int n = a->n, d = a->d, F = a->F, qd = a->qd, kvd = a->kvd;
    size_t nd = (size_t)n * d;

    /* head and final norm; dlogits is in a->logits */
    dft_gemm_tn_acc(grads + p.wout, a->nf, a->logits, n, d, DFT_VOCAB);
    dft_gemm_nt(a->dn, a->logits, params + p.wout, n, DFT_VOCAB, d, 0);
    memset(a->dres, 0, sizeof(float) * nd);
    dft_rmsnorm_bwd(a->dres, grads + p.final_norm, a->dn, a->xfinal, a->rstdf, params + p.final_norm, n, d);

    for (int l = c->n_layers - 1; l >= 0; l--) {
        layer_params w = layer_at(c, &p, params, l);
        layer_grads g = grads_at(c, &p, grads, l);
        dft_layer_acts *la = &a->layer[l];
        /* Rematerialise what the policy did not keep. Under `layer` this re-runs the
           attention forward; under `attn-output` the kept o and lse make that unnecessary. */
        if (a->policy != DFT_CKPT_NONE) {
            attention_inputs(c, &w, a, la);
            if (a->policy == DFT_CKPT_LAYER &&
                dft_attention_fwd(attn, c, a->batch, a->rows, la->q, la->k, la->v, la->o, la->lse, err, errlen))
                return -1;
            attention_outputs(&w, a, la, NULL);
        }
        /* MLP: x_next = xmid + g W2, g = silu(a) * b, a = n2 W1, b = n2 W3 */
        dft_gemm_tn_acc(g.w2, la->g, a->dres, n, F, d);
        dft_gemm_nt(a->dg, a->dres, w.w2, n, d, F, 0);
        dft_swiglu_bwd(a->dg, a->db, a->dg, la->a, la->b, (long)n * F); /* dg now holds da */
        dft_gemm_tn_acc(g.w1, la->n2, a->dg, n, d, F);
        dft_gemm_tn_acc(g.w3, la->n2, a->db, n, d, F);
        dft_gemm_nt(a->dn, a->dg, w.w1, n, F, d, 0);
        dft_gemm_nt(a->dn, a->db, w.w3, n, F, d, 1);
        dft_rmsnorm_bwd(a->dres, g.mlp_norm, a->dn, la->xmid, la->rstd2, w.mlp_norm, n, d);
        /* attention: xmid = x + o Wo */
        dft_gemm_tn_acc(g.wo, la->o, a->dres, n, qd, d);
        dft_gemm_nt(a->dout, a->dres, w.wo, n, d, qd, 0);
        if (dft_attention_bwd(attn, c, a->batch, a->rows, la->q, la->k, la->v, la->o, la->lse, a->dout, a->dq, a->dk,
                               a->dv, err, errlen))
            return -1;
        dft_rope(a->dq, a->cosv, a->sinv, a->batch, a->rows, c->n_heads, a->hd, 1);
        dft_rope(a->dk, a->cosv, a->sinv, a->batch, a->rows, c->n_kv_heads, a->hd, 1);
        dft_gemm_tn_acc(g.wq, la->n1, a->dq, n, d, qd);
        dft_gemm_tn_acc(g.wk, la->n1, a->dk, n, d, kvd);
        dft_gemm_tn_acc(g.wv, la->n1, a->dv, n, d, kvd);
        dft_gemm_nt(a->dn, a->dq, w.wq, n, qd, d, 0);
        dft_gemm_nt(a->dn, a->dk, w.wk, n, kvd, d, 1);
        dft_gemm_nt(a->dn, a->dv, w.wv, n, kvd, d, 1);
        dft_rmsnorm_bwd(a->dres, g.attn_norm, a->dn, la->x, la->rstd1, w.attn_norm, n, d);
    }
    /* embedding: rows in order, so repeated tokens sum deterministically */
    float *dwte = grads + p.wte;
    for (int r = 0; r < n; r++) {
        float *dst = dwte + (size_t)tokens[r] * d;
        const float *src = a->dres + (size_t)r * d;
        for (int i = 0; i < d; i++) dst[i] += src[i];
    }
    return 0;
}
