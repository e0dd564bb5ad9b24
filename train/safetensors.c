/* The safetensors export (format and names in safetensors.h). The JSON header is built in
 * memory, then the tensors stream through a small buffer, transposed where torch wants
 * [out, in]. */
#include "train/safetensors.h"
#include "train/outfile.h"
#include "train/text.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dft_export_tensor_count(const dft_model_config *c) { return 9 * c->n_layers + 3; }

int dft_export_tensor_at(const dft_model_config *c, int i, dft_export_tensor *t) {
    if (i < 0 || i >= dft_export_tensor_count(c)) return -1;
    dft_param_layout p = dft_param_layout_of(c);
    long d = c->d_model, hd = c->d_model / c->n_heads, qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, F = c->ffn;
    memset(t, 0, sizeof *t);
    int last = dft_export_tensor_count(c) - 1;
    if (i == 0) {
        snprintf(t->name, sizeof t->name, "model.embed_tokens.weight");
        t->offset = p.wte, t->rows = DFT_VOCAB, t->cols = d; /* [VOCAB, d] as stored */
        return 0;
    }
    if (i == last - 1) {
        snprintf(t->name, sizeof t->name, "model.norm.weight");
        t->offset = p.final_norm, t->rows = d;
        return 0;
    }
    if (i == last) {
        snprintf(t->name, sizeof t->name, "lm_head.weight");
        t->offset = p.wout, t->rows = DFT_VOCAB, t->cols = d, t->transpose = 1; /* stored [d, VOCAB] */
        return 0;
    }
    int l = (i - 1) / 9, k = (i - 1) % 9;
    /* per layer: name, base offset, [in, out] of the stored matrix (in = 0: a norm of d) */
    const struct {
        const char *name;
        size_t base;
        long in, out;
    } per[9] = {{"input_layernorm.weight", p.attn_norm, 0, d},
                {"self_attn.q_proj.weight", p.wq, d, qd},
                {"self_attn.k_proj.weight", p.wk, d, kvd},
                {"self_attn.v_proj.weight", p.wv, d, kvd},
                {"self_attn.o_proj.weight", p.wo, qd, d},
                {"post_attention_layernorm.weight", p.mlp_norm, 0, d},
                {"mlp.gate_proj.weight", p.w1, d, F},
                {"mlp.up_proj.weight", p.w3, d, F},
                {"mlp.down_proj.weight", p.w2, F, d}};
    snprintf(t->name, sizeof t->name, "model.layers.%d.%s", l, per[k].name);
    if (per[k].in == 0) {
        t->offset = per[k].base + (size_t)l * d, t->rows = d;
    } else {
        t->offset = per[k].base + (size_t)l * per[k].in * per[k].out;
        t->rows = per[k].out, t->cols = per[k].in, t->transpose = 1;
    }
    return 0;
}

/* ---- a growing string for the JSON header ---- */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *bigger = realloc(b->s, cap);
        if (!bigger) {
            b->failed = 1;
            return;
        }
        b->s = bigger, b->cap = cap;
    }
}

/* 1 if s is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
static int valid_utf8(const unsigned char *s) {
    while (*s) {
        unsigned c = *s, n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
        if (n == 9) return 0;
        unsigned long cp = n == 0 ? c : n == 1 ? c & 0x1f : n == 2 ? c & 0x0f : c & 0x07;
        for (unsigned i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        static const unsigned long least[4] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        s += n + 1;
    }
    return 1;
}

/* s as a JSON string: quotes, backslashes and control bytes escaped. The header must be UTF-8:
   a string that is not (a file name in another encoding) has its bytes >= 0x80 written as
   \u00XX, which keeps the file valid and every byte visible. */
static void put_json_string(sbuf *b, const char *s) {
    int utf8 = valid_utf8((const unsigned char *)s);
    put(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') put(b, "\\%c", *p);
        else if (*p < 0x20 || (*p >= 0x80 && !utf8)) put(b, "\\u%04x", *p);
        else put(b, "%c", *p);
    }
    put(b, "\"");
}

static void put_meta(sbuf *b, int *first, const char *key, const char *value) {
    put(b, "%s", *first ? "" : ",");
    *first = 0;
    put_json_string(b, key);
    put(b, ":");
    put_json_string(b, value);
}

static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* round to nearest even */
    return (uint16_t)(u >> 16);
}

int dft_export_safetensors(const char *path, const dft_model_config *c, const float *params, int bf16,
                           const dft_export_meta *extra, int nextra, char *err, size_t errlen) {
    if (!path || !c || !params) {
        dft_train_msg(err, errlen, "export: %s is NULL", !path ? "path" : !c ? "config" : "params");
        return -1;
    }
    char why[256];
    if (dft_model_config_check(c, 1, why, sizeof why)) {
        dft_train_msg(err, errlen, "export %s: %s", path, why);
        return -1;
    }
    if (nextra < 0 || (nextra > 0 && !extra)) {
        dft_train_msg(err, errlen, "export %s: invalid metadata list", path);
        return -1;
    }
    /* JSON leaves duplicate keys undefined (readers keep the first or the last): refuse them */
    static const char *const builtin[] = {"format", "producer", "architecture", "vocab_size", "num_hidden_layers",
                                          "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                          "intermediate_size", "max_position_embeddings", "rope_theta",
                                          "rms_norm_eps", "hidden_act", "rope", "layout"};
    for (int i = 0; i < nextra; i++) {
        if (!extra[i].key || !extra[i].value) continue;
        int dup = 0;
        for (size_t b = 0; b < sizeof builtin / sizeof builtin[0]; b++) dup |= !strcmp(extra[i].key, builtin[b]);
        for (int j = 0; j < i; j++) dup |= extra[j].key && extra[j].value && !strcmp(extra[i].key, extra[j].key);
        if (dup) {
            dft_train_msg(err, errlen, "export %s: metadata key \"%s\" appears twice", path, extra[i].key);
            return -1;
        }
    }
    const size_t esize = bf16 ? 2 : 4;
    const char *dtype = bf16 ? "BF16" : "F32";
    int n = dft_export_tensor_count(c);

    /* the header */
    sbuf h = {0};
    char v[64];
    int first = 1;
    put(&h, "{\"__metadata__\":{");
    put_meta(&h, &first, "format", "pt");
    put_meta(&h, &first, "producer", "distflash train");
    put_meta(&h, &first, "architecture", "LlamaForCausalLM (byte vocabulary, untied lm_head, no biases)");
#define META_INT(key, x) (snprintf(v, sizeof v, "%ld", (long)(x)), put_meta(&h, &first, key, v))
    META_INT("vocab_size", DFT_VOCAB);
    META_INT("num_hidden_layers", c->n_layers);
    META_INT("hidden_size", c->d_model);
    META_INT("num_attention_heads", c->n_heads);
    META_INT("num_key_value_heads", c->n_kv_heads);
    META_INT("head_dim", c->d_model / c->n_heads);
    META_INT("intermediate_size", c->ffn);
    META_INT("max_position_embeddings", c->context);
#undef META_INT
    snprintf(v, sizeof v, "%.9g", (double)c->rope_base);
    put_meta(&h, &first, "rope_theta", v);
    put_meta(&h, &first, "rms_norm_eps", "1e-05");
    put_meta(&h, &first, "hidden_act", "silu");
    put_meta(&h, &first, "rope",
             "rotate_half (Hugging Face LLaMA): within each head, dims i and i + head_dim/2 form a pair rotated by "
             "angle pos * rope_theta^(-2i/head_dim), i < head_dim/2; positions are global (0-based over the whole "
             "sequence)");
    put_meta(&h, &first, "layout",
             "Linear weights are torch's [out, in] (distflash stores [in, out] and the export transposes); heads are "
             "contiguous blocks of head_dim in q/k/v_proj's rows; mlp = down(silu(gate(x)) * up(x)); RMSNorm "
             "x * rsqrt(mean(x^2) + eps) * weight; attention causal with scale 1/sqrt(head_dim), GQA: query head h "
             "uses kv head h / (heads / kv_heads)");
    for (int i = 0; i < nextra; i++)
        if (extra[i].key && extra[i].value) put_meta(&h, &first, extra[i].key, extra[i].value);
    put(&h, "}");
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        dft_export_tensor t;
        dft_export_tensor_at(c, i, &t);
        size_t bytes = (size_t)t.rows * (t.cols ? (size_t)t.cols : 1) * esize;
        put(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%ld", t.name, dtype, t.rows);
        if (t.cols) put(&h, ",%ld", t.cols);
        put(&h, "],\"data_offsets\":[%zu,%zu]}", at, at + bytes);
        at += bytes;
    }
    put(&h, "}");
    while (!h.failed && (8 + h.len) % 8) put(&h, " "); /* the data starts 8-byte aligned */
    if (h.failed) {
        free(h.s);
        dft_train_msg(err, errlen, "export %s: out of memory", path);
        return -1;
    }

    dft_outfile out;
    if (dft_outfile_open(&out, path, "export", err, errlen)) {
        free(h.s);
        return -1;
    }
    FILE *f = out.f;
    int bad = 0;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    bad |= fwrite(len8, 1, 8, f) != 8;
    bad |= fwrite(h.s, 1, h.len, f) != h.len;
    free(h.s);

    enum { CHUNK = 4096 };
    uint8_t buf[CHUNK * 4];
    for (int i = 0; i < n && !bad; i++) {
        dft_export_tensor t;
        dft_export_tensor_at(c, i, &t);
        long rows = t.rows, cols = t.cols ? t.cols : 1;
        size_t count = (size_t)rows * cols, k = 0;
        for (size_t e = 0; e < count && !bad; e++) {
            long r = (long)(e / cols), col = (long)(e % cols);
            /* element (r, col) of the export; a transposed source is [cols, rows] */
            float x = params[t.offset + (t.transpose ? (size_t)col * rows + r : e)];
            if (bf16) {
                uint16_t b = bf16_of(x);
                buf[k++] = (uint8_t)b, buf[k++] = (uint8_t)(b >> 8);
            } else {
                uint32_t u;
                memcpy(&u, &x, 4);
                for (int j = 0; j < 4; j++) buf[k++] = (uint8_t)(u >> (8 * j));
            }
            if (k == sizeof buf || e + 1 == count) {
                bad |= fwrite(buf, 1, k, f) != k;
                k = 0;
            }
        }
    }
    return dft_outfile_commit(&out, bad ? (errno ? errno : -1) : 0, "export", err, errlen);
}

