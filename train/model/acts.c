#include <stdio.h>
#include <stdlib.h>

#include "train/model/acts.h"
#include "train/model/ops.h"

static float *take(dft_acts *a, size_t floats, int *failed) {
    if (*failed) return NULL;
    if (a->nblocks == a->capblocks) {
        int cap = a->capblocks ? 2 * a->capblocks : 64;
        void **nb = realloc(a->blocks, sizeof(void *) * (size_t)cap);
        if (!nb) return (*failed = 1, NULL);
        a->blocks = nb, a->capblocks = cap;
    }
    float *p = malloc(sizeof(float) * (floats ? floats : 1));
    if (!p) return (*failed = 1, NULL);
    a->blocks[a->nblocks++] = p;
    a->bytes += sizeof(float) * floats;
    return p;
}

dft_acts *dft_acts_create(const dft_model_config *c, dft_ckpt_policy policy, int batch, int rows,
                            const int64_t *pos, char *err, size_t errlen) {
    if (policy < DFT_CKPT_NONE || policy > DFT_CKPT_ATTN_OUTPUT || batch < 1 || rows < 1 || !pos) {
        snprintf(err, errlen, "bad activation request (policy %d, batch %d, rows %d)", (int)policy, batch, rows);
        return NULL;
    }
    dft_acts *a = calloc(1, sizeof *a);
    if (!a) return (snprintf(err, errlen, "out of memory for the activations"), NULL);
    a->policy = policy, a->batch = batch, a->rows = rows, a->n = batch * rows;
    a->d = c->d_model, a->hd = c->d_model / c->n_heads;
    a->qd = a->hd * c->n_heads, a->kvd = a->hd * c->n_kv_heads, a->F = c->ffn;
    size_t n = (size_t)a->n, d = (size_t)a->d, qd = (size_t)a->qd, kvd = (size_t)a->kvd, F = (size_t)a->F;
    size_t nlse = (size_t)batch * c->n_heads * rows;
    int failed = 0;
    a->layer = calloc((size_t)c->n_layers, sizeof *a->layer);
    if (!a->layer) failed = 1;

    dft_layer_acts shared = {0};
    if (!failed && policy != DFT_CKPT_NONE) {
        shared.n1 = take(a, n * d, &failed), shared.rstd1 = take(a, n, &failed);
        shared.q = take(a, n * qd, &failed), shared.k = take(a, n * kvd, &failed), shared.v = take(a, n * kvd, &failed);
        if (policy == DFT_CKPT_LAYER) shared.o = take(a, n * qd, &failed), shared.lse = take(a, nlse, &failed);
        shared.xmid = take(a, n * d, &failed);
        shared.n2 = take(a, n * d, &failed), shared.rstd2 = take(a, n, &failed);
        shared.a = take(a, n * F, &failed), shared.b = take(a, n * F, &failed), shared.g = take(a, n * F, &failed);
    }
    for (int l = 0; !failed && l < c->n_layers; l++) {
        dft_layer_acts *la = &a->layer[l];
        if (policy == DFT_CKPT_NONE) {
            la->n1 = take(a, n * d, &failed), la->rstd1 = take(a, n, &failed);
            la->q = take(a, n * qd, &failed), la->k = take(a, n * kvd, &failed), la->v = take(a, n * kvd, &failed);
            la->o = take(a, n * qd, &failed), la->lse = take(a, nlse, &failed);
            la->xmid = take(a, n * d, &failed);
            la->n2 = take(a, n * d, &failed), la->rstd2 = take(a, n, &failed);
            la->a = take(a, n * F, &failed), la->b = take(a, n * F, &failed), la->g = take(a, n * F, &failed);
        } else {
            *la = shared;
            if (policy == DFT_CKPT_ATTN_OUTPUT) la->o = take(a, n * qd, &failed), la->lse = take(a, nlse, &failed);
        }
        la->x = take(a, n * d, &failed);
    }
    a->xfinal = take(a, n * d, &failed), a->nf = take(a, n * d, &failed), a->rstdf = take(a, n, &failed);
    a->logits = take(a, n * DFT_VOCAB, &failed);
    a->cosv = take(a, (size_t)rows * (a->hd / 2), &failed), a->sinv = take(a, (size_t)rows * (a->hd / 2), &failed);
    a->dres = take(a, n * d, &failed), a->dn = take(a, n * d, &failed);
    a->dg = take(a, n * F, &failed), a->db = take(a, n * F, &failed);
    a->dout = take(a, n * qd, &failed);
    a->dq = take(a, n * qd, &failed), a->dk = take(a, n * kvd, &failed), a->dv = take(a, n * kvd, &failed);
    if (failed) {
        snprintf(err, errlen, "out of memory for the activations (%d sequences x %d positions, policy %s)", batch,
                 rows, dft_ckpt_policy_name(policy));
        dft_acts_free(a);
        return NULL;
    }
    dft_rope_tables(a->cosv, a->sinv, pos, rows, a->hd, c->rope_base);
    return a;
}

void dft_acts_free(dft_acts *a) {
    if (!a) return;
    for (int i = 0; i < a->nblocks; i++) free(a->blocks[i]);
    free(a->blocks);
    free(a->layer);
    free(a);
}

size_t dft_acts_bytes(const dft_acts *a) { return a ? a->bytes : 0; }
