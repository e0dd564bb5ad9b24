/* The named model shapes. tiny is the CLI's default (dft_train_defaults); bench756m is the GPU
 * benchmark's model (the PyTorch peer's defaults in /work/shared/peers/train_peer.py, at a
 * 65536-position context); 1b is TinyLlama-1.1B's shape (22 layers, d 2048, 32 heads of 64,
 * 4 kv heads, ffn 5632) over our 256-byte vocabulary. */
#include "train/model/preset.h"

#include <string.h>

#define SHAPE(L, D, H, KV, F, T) {.n_layers = L, .d_model = D, .n_heads = H, .n_kv_heads = KV, .ffn = F, .context = T, \
                                  .rope_base = 10000.0f, .init_std = 0.02f}

static const dft_model_preset presets[] = {
    {"tiny", "the default: passkey retrieval on 2 CPU ranks in about 7 minutes (scripts/demo)",
     SHAPE(2, 64, 4, 4, 256, 2048)},
    {"small", "a few minutes per thousand steps on a few CPU cores", SHAPE(4, 128, 4, 2, 512, 1024)},
    {"bench756m", "the GPU benchmark's model (the PyTorch peer's), 64K positions", SHAPE(16, 2048, 16, 8, 5632, 65536)},
    {"1b", "TinyLlama-1.1B's shape over bytes", SHAPE(22, 2048, 32, 4, 5632, 2048)},
};

const dft_model_preset *dft_model_presets(int *n) {
    if (n) *n = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

const dft_model_preset *dft_model_preset_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(name, presets[i].name)) return &presets[i];
    return NULL;
}
