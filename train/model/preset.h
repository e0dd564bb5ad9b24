/* Named model shapes for `distflash train --preset NAME` (the options after it override). */
#ifndef DFT_TRAIN_MODEL_PRESET_H
#define DFT_TRAIN_MODEL_PRESET_H

#include "train/model/model.h"

typedef struct {
    const char *name;
    const char *what; /* one line for --help */
    dft_model_config model;
} dft_model_preset;

/* The presets in the order --help lists them; *n gets their number. */
const dft_model_preset *dft_model_presets(int *n);
/* The preset called name, or NULL. */
const dft_model_preset *dft_model_preset_find(const char *name);

#endif
