/* The training loop: data -> forward -> backward -> gradient sum over ranks -> clip ->
 * AdamW, with evaluation, logs and checkpoint files. Every rank holds the same parameters
 * and optimiser state and one chunk of each sequence (the rows dfa_dist_position gives it). */
#ifndef DFT_TRAIN_TRAINER_H
#define DFT_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "train/checkpoint.h"
#include "train/model/model.h"
#include "train/device.h"
#include "train/group.h"

typedef struct {
    dft_model_config model;
    int batch;                   /* sequences per step */
    int steps;                   /* length of the schedule (warm-up + cosine) */
    int stop_after;              /* 0: run to `steps`; else stop (and save) after this step */
    float lr, lr_min;
    int warmup;
    float beta1, beta2, weight_decay, clip;
    uint64_t seed;               /* weights and data */
    dft_ckpt_policy policy;
    dfa_schedule schedule;       /* sequence-parallel schedule of the attention */
    int overlap;
    const char *data_path;       /* NULL: the built-in passkey task */
    float answer_weight;         /* passkey: loss weight of the key's digits */
    float length_warmup;         /* fraction of the steps, in [0, 1), that train on shorter sequences
                                    (from 256 positions, doubling) before the whole context; 0: off */
    int eval_every, eval_seqs;   /* 0: evaluate only at the end; eval_seqs at most DFT_EVAL_SEQS_MAX */
    const char *csv_path, *plot_path;
    const char *save_path;       /* checkpoint written at the end (and every save_every steps) */
    int save_every;
    const char *resume_path;
    int progress;                /* rank 0's progress: 0 none; DFT_PROGRESS_AUTO (1) a live line when `out` is
                                    a terminal, else plain lines; DFT_PROGRESS_LINES (2) plain lines always
                                    (under mpirun the ranks' stdout is a pseudo-terminal even when mpirun's
                                    own is a file); DFT_PROGRESS_LIVE (3) the live line always */
    int device;                  /* dft_device_kind (train/device.h): DFT_DEVICE_CPU or DFT_DEVICE_CUDA */
    int deterministic;           /* cuda: bitwise reproducible steps (attention dq without atomics) */
    int profile;                 /* cuda: per-phase time breakdown in the report (CUDA events) */
    FILE *out;                   /* rank 0's report stream (NULL: silent) */
} dft_train_config;

enum { DFT_PROGRESS_NONE = 0, DFT_PROGRESS_AUTO = 1, DFT_PROGRESS_LINES = 2, DFT_PROGRESS_LIVE = 3 };

#define DFT_EVAL_SEQS_MAX (1 << 24) /* held-out sequences an evaluation may take (more is refused) */

/* Defaults of the CLI: a tiny model on passkey retrieval. */
dft_train_config dft_train_defaults(void);

typedef struct {
    int first_step, steps_done;       /* steps run by this call: [first_step, steps_done) */
    double loss;                      /* last step's training loss */
    double eval_loss, eval_acc;       /* last evaluation (NaN if none) */
    double eval_digit_acc;            /* passkey: fraction of key digits predicted (NaN otherwise) */
    double seconds, median_step_seconds, tokens_per_second;
    double attn_fwd_calls_per_step, attn_bwd_calls_per_step;
    double attn_seconds_per_step;     /* forward + backward attention time, rank 0 */
    double acts_mib;                  /* activation buffers of one rank */
    double peak_rss_mib;              /* largest peak resident set over the ranks */
    double peak_device_mib;           /* cuda: largest device memory in use at a step's end, over the ranks */
    double phase_seconds_per_step[5]; /* cuda with profile: matmul, attention, communication, element-wise,
                                         optimizer (rank 0; dft_device_phase_name) */
    size_t params;
} dft_train_report;

/* The configuration a checkpoint's fields describe (dft_ckpt_read_any), validated as a resume
   would: exactly the fields this trainer writes, in its order; integers where it writes
   integers (of the int range), float32 values where floats, the seed an integer below 2^53;
   the configuration then passes the same checks as a run's (one rank), and step lies in
   0..steps. 0 with *out set, or -1 with the reason in err (naming the field). */
int dft_train_config_of_fields(const dft_ckpt_named *f, int nf, int64_t step, dft_train_config *out, char *err,
                               size_t errlen);

/* Runs the training. final_params (optional) receives a malloc'd copy of the parameters
   at the end (the caller frees it). 0, or -1 with a message in err (the same on every
   rank for configuration errors). */
int dft_train(const dft_train_config *cfg, dft_group *g, dft_train_report *rep, float **final_params, char *err,
               size_t errlen);

#endif
