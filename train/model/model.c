/* The model's shape, parameters and initialisation. The forward and backward passes are
 * in model_pass.c, the activation buffers in acts.c. */
#include "train/model/model.h"
#include "train/rng.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int dft_model_config_check(const dft_model_config *c, int nranks, char *err, size_t errlen) {
#define BAD(...) return (snprintf(err, errlen, __VA_ARGS__), -1)
    if (!c) BAD("no model configuration");
    if (c->n_layers < 1 || c->n_layers > 1024) BAD("layers = %d; it must be in 1..1024", c->n_layers);
    if (c->d_model < 8 || c->d_model > 16384) BAD("d_model = %d; it must be in 8..16384", c->d_model);
    if (c->n_heads < 1) BAD("heads = %d; it must be >= 1", c->n_heads);
    if (c->d_model % c->n_heads)
        BAD("heads = %d does not divide d_model = %d (head_dim = d_model / heads)", c->n_heads, c->d_model);
    if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads)
        BAD("kv-heads = %d must be >= 1 and divide heads = %d (grouped-query attention)", c->n_kv_heads,
            c->n_heads);
    int hd = c->d_model / c->n_heads;
    if (hd % 8 || hd > 256)
        BAD("head_dim = d_model / heads = %d; the attention kernels take multiples of 8 up to 256", hd);
    if (c->ffn < 1 || c->ffn > 65536) BAD("ffn = %d; it must be in 1..65536", c->ffn);
    if (nranks < 1) BAD("ranks = %d; it must be >= 1", nranks);
    if (c->context < nranks || c->context % nranks)
        BAD("context = %d is not divisible by the %d ranks (each rank holds context / ranks positions)",
            c->context, nranks);
    if (!(c->rope_base > 1.0f) || !isfinite(c->rope_base)) BAD("rope-base = %g; it must be finite and > 1", c->rope_base);
    if (!(c->init_std > 0.0f) || !isfinite(c->init_std)) BAD("init-std = %g; it must be finite and > 0", c->init_std);
    return 0;
#undef BAD
}

dft_param_layout dft_param_layout_of(const dft_model_config *c) {
    size_t d = (size_t)c->d_model, L = (size_t)c->n_layers, F = (size_t)c->ffn;
    size_t hd = d / (size_t)c->n_heads, qd = hd * (size_t)c->n_heads, kvd = hd * (size_t)c->n_kv_heads;
    dft_param_layout p;
    size_t at = 0;
    p.wte = at, at += DFT_VOCAB * d;
    p.attn_norm = at, at += L * d;
    p.wq = at, at += L * d * qd;
    p.wk = at, at += L * d * kvd;
    p.wv = at, at += L * d * kvd;
    p.wo = at, at += L * qd * d;
    p.mlp_norm = at, at += L * d;
    p.w1 = at, at += L * d * F;
    p.w3 = at, at += L * d * F;
    p.w2 = at, at += L * F * d;
    p.final_norm = at, at += d;
    p.wout = at, at += d * DFT_VOCAB;
    p.total = at;
    return p;
}

int dft_param_tensors(const dft_model_config *c, dft_param_tensor out[16]) {
    dft_param_layout p = dft_param_layout_of(c);
    const struct {
        const char *name;
        size_t offset;
        int is_matrix;
    } t[] = {{"wte", p.wte, 1},          {"attn_norm", p.attn_norm, 0}, {"wq", p.wq, 1}, {"wk", p.wk, 1},
             {"wv", p.wv, 1},            {"wo", p.wo, 1},               {"mlp_norm", p.mlp_norm, 0},
             {"w1", p.w1, 1},            {"w3", p.w3, 1},               {"w2", p.w2, 1},
             {"final_norm", p.final_norm, 0}, {"wout", p.wout, 1}};
    int n = (int)(sizeof t / sizeof t[0]);
    for (int i = 0; i < n; i++) {
        size_t end = i + 1 < n ? t[i + 1].offset : p.total;
        out[i] = (dft_param_tensor){t[i].name, t[i].offset, end - t[i].offset, t[i].is_matrix};
    }
    return n;
}


/* The initial weights are a pure function of (seed, index). */
static double normal_at(uint64_t seed, uint64_t i) {
    /* Box-Muller from two uniforms in (0, 1] */
    double u1 = ((dft_rng_hash(seed ^ dft_rng_hash(2 * i)) >> 11) + 1) * 0x1.0p-53;
    double u2 = ((dft_rng_hash(seed ^ dft_rng_hash(2 * i + 1)) >> 11) + 1) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void dft_model_init(const dft_model_config *c, float *params, uint64_t seed) {
    dft_param_tensor t[16];
    int n = dft_param_tensors(c, t);
    double residual_std = c->init_std / sqrt(2.0 * c->n_layers); /* GPT-2: keep the residual stream's scale */
    for (int i = 0; i < n; i++) {
        float *p = params + t[i].offset;
        if (!t[i].is_matrix) {
            for (size_t j = 0; j < t[i].count; j++) p[j] = 1.0f;
            continue;
        }
        int out_proj = !strcmp(t[i].name, "wo") || !strcmp(t[i].name, "w2");
        double std = out_proj ? residual_std : c->init_std;
        /* each value is a function of its index alone: the threads change the time, not the bits
           (756M parameters take ~40 s on one core) */
        long count = (long)t[i].count;
#pragma omp parallel for schedule(static)
        for (long j = 0; j < count; j++) p[j] = (float)(std * normal_at(seed, t[i].offset + (size_t)j));
    }
}

const char *dft_ckpt_policy_name(dft_ckpt_policy p) {
    switch (p) {
    case DFT_CKPT_NONE: return "none";
    case DFT_CKPT_LAYER: return "layer";
    case DFT_CKPT_ATTN_OUTPUT: return "attn-output";
    }
    return "?";
}

int dft_ckpt_policy_parse(const char *s) {
    for (int p = DFT_CKPT_NONE; p <= DFT_CKPT_ATTN_OUTPUT; p++)
        if (s && !strcmp(s, dft_ckpt_policy_name((dft_ckpt_policy)p))) return p;
    return -1;
}
