/* The run that fuzz_ckpt.c loads checkpoints into and make_ckpt_seeds.c writes them for:
 * the configuration fields the trainer records (train/trainer.c, fields_of) with the values
 * of a tiny model, and small sections, so that the seeds stay a few hundred bytes. */
#ifndef DFA_FUZZ_CKPT_CONFIG_H
#define DFA_FUZZ_CKPT_CONFIG_H

#include "train/checkpoint.h"

enum { FUZZ_CKPT_SECTIONS = 3, FUZZ_CKPT_FLOATS = 16 }; /* params, adam m, adam v */

/* float settings are recorded as the double of the float, as the trainer does */
static const dft_ckpt_field fuzz_ckpt_fields[] = {
    {"layers", 1},        {"d_model", 8},           {"heads", 1},          {"kv_heads", 1},
    {"ffn", 8},           {"context", 16},          {"rope_base", 10000},  {"init_std", (double)0.02f},
    {"batch", 1},         {"steps", 4},             {"lr", (double)3e-3f}, {"lr_min", (double)3e-4f},
    {"warmup", 1},        {"beta1", (double)0.9f},  {"beta2", (double)0.95f},
    {"weight_decay", (double)0.1f},                 {"clip", 1},           {"seed", 1234},
    {"data", 0},          {"answer_weight", 1000},  {"length_warmup", 0}};
enum { FUZZ_CKPT_NFIELDS = (int)(sizeof fuzz_ckpt_fields / sizeof fuzz_ckpt_fields[0]) };

#endif
