/* The model's weights as a safetensors file (https://huggingface.co/docs/safetensors), named
 * and shaped like Hugging Face's LLaMA so that PyTorch users load them directly:
 *   model.embed_tokens.weight                         [256, d]
 *   model.layers.{l}.input_layernorm.weight           [d]
 *   model.layers.{l}.self_attn.{q,k,v,o}_proj.weight  [out, in]   (q: [H*hd, d], k/v: [KV*hd, d], o: [d, H*hd])
 *   model.layers.{l}.post_attention_layernorm.weight  [d]
 *   model.layers.{l}.mlp.{gate,up,down}_proj.weight   [out, in]   (gate = W1, up = W3, down = W2)
 *   model.norm.weight                                 [d]
 *   lm_head.weight                                    [256, d]
 * torch's Linear stores [out, in] while the model's matrices are [in, out] (y = x W): the
 * export transposes them. RoPE is the "rotate half" form Hugging Face's LLaMA uses (pairs i and
 * i + head_dim/2 of each head); the metadata (__metadata__) records it with the model's shape.
 *
 * File layout: u64 little-endian header length N, N bytes of JSON (padded with spaces so the
 * data starts 8-byte aligned), then the tensors' bytes back to back in the header's order. */
#ifndef DFT_TRAIN_SAFETENSORS_H
#define DFT_TRAIN_SAFETENSORS_H

#include <stddef.h>

#include "train/model/model.h"

/* One exported tensor: where it comes from in the flat parameter array. */
typedef struct {
    char name[80];
    size_t offset;     /* in floats, into the parameters */
    long rows, cols;   /* the export's shape [rows, cols]; cols = 0 for a vector [rows] */
    int transpose;     /* the source is [cols, rows] row-major (an [in, out] matrix) */
} dft_export_tensor;

/* The exported tensors of a configuration in file order; returns their number (9 L + 3). */
int dft_export_tensor_count(const dft_model_config *c);
/* Fills t with tensor i (0 <= i < count); -1 if i is out of range. */
int dft_export_tensor_at(const dft_model_config *c, int i, dft_export_tensor *t);

/* A metadata entry (both strings; any bytes but NUL: they are escaped as JSON). */
typedef struct {
    const char *key, *value;
} dft_export_meta;

/* Writes params (dft_param_layout_of(c).total floats) to path as float32 or, with bf16 != 0,
   bfloat16 (rounded to nearest even). The metadata holds the model's shape and conventions
   plus `extra` (e.g. the training step; a key that repeats another, or one of the shape's, is
   refused). Written under a fresh temporary name and renamed (train/outfile.h). 0, or -1
   with the reason in err. */
int dft_export_safetensors(const char *path, const dft_model_config *c, const float *params, int bf16,
                           const dft_export_meta *extra, int nextra, char *err, size_t errlen);

#endif
