/* The model of train/model/model.h on one CUDA device: the same architecture, parameter layout
 * (one flat float32 array in dft_param_layout order, so checkpoints are the same file), checkpoint
 * policies and attention call counting. Matmul inputs and activations are bf16 (a bf16 mirror of the
 * weights is kept beside the float32 master copy), accumulation float32, gradients float32.
 * Attention runs through dfa_attn_*_cuda (one rank) or dfa_dist_attn_*_cuda (at->comm, an NCCL
 * communicator). Everything is enqueued on the model's stream; the forward synchronises once to
 * return the loss. */
#ifndef DFT_TRAIN_CUDA_MODEL_CUDA_H
#define DFT_TRAIN_CUDA_MODEL_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "train/cuda/gemm.h"
#include "train/cuda/kernels.h"
#include "train/model/model.h"
#include "train/optim.h"

/* Phases of the time breakdown (dft_gpu_model.prof). */
typedef enum { DFT_PH_MATMUL, DFT_PH_ATTN, DFT_PH_COMM, DFT_PH_ELEM, DFT_PH_OPTIM, DFT_PH_COUNT } dft_phase;
const char *dft_phase_name(dft_phase p);

/* CUDA events at phase changes: the time from one mark to the next counts to the first's phase. */
#define DFT_PROF_MARKS 8192
typedef struct {
    int on, count;
    cudaEvent_t ev[DFT_PROF_MARKS];
    int phase[DFT_PROF_MARKS];
    double seconds[DFT_PH_COUNT]; /* summed by dft_prof_collect */
} dft_prof;

typedef struct {
    dft_model_config cfg;
    dft_param_layout lay;
    size_t total;
    int deterministic;         /* attention backward with DFA_FLAG_DETERMINISTIC */
    cudaStream_t stream;       /* owned */
    dft_blas *blas;
    float *params, *grads, *m, *v; /* device, layout.total floats each */
    dft_bf16 *wbf;             /* bf16 mirror of params */
    double *partial, *sum;     /* DFTK_SUM_BLOCKS + 1 doubles */
    float *factor;             /* the clip factor of the last update */
    dft_prof *prof;            /* NULL: no breakdown */
    int ranks;                 /* ranks of the attention communicator (1 after init; set it before
                                  creating activations for several) */
    int attn_groups;           /* 0 (after init): the fewest head groups per attention call with which
                                  the run fits the device; else this many (a divisor of the kv heads) */
    int dn_rows;               /* rows per chunk of the float32 norm gradients in the backward: 0 (after
                                  init) 65536; tests take a few, to run the chunks' edges */
} dft_gpu_model;

/* On the current device. 0, or -1 with a message (e.g. "ffn = 100: the GPU model needs a multiple of 8"). */
int dft_gpu_model_init(dft_gpu_model *m, const dft_model_config *c, int deterministic, int profile, char *err,
                       size_t errlen);
void dft_gpu_model_free(dft_gpu_model *m);
/* The configuration checks the GPU adds to dft_model_config_check. */
int dft_gpu_config_check(const dft_model_config *c, char *err, size_t errlen);

/* Host <-> device copies of the parameters and the AdamW moments (mom1/mom2 NULL: zeros on upload,
   skipped on download); the bf16 mirror follows an upload. These synchronise. */
int dft_gpu_model_upload(dft_gpu_model *m, const float *params, const float *mom1, const float *mom2, char *err,
                         size_t errlen);
int dft_gpu_model_download(dft_gpu_model *m, float *params, float *mom1, float *mom2, char *err, size_t errlen);
int dft_gpu_grads_download(dft_gpu_model *m, float *grads, char *err, size_t errlen);
int dft_gpu_zero_grads(dft_gpu_model *m, char *err, size_t errlen);

typedef struct dft_gpu_acts dft_gpu_acts;
dft_gpu_acts *dft_gpu_acts_create(dft_gpu_model *m, dft_ckpt_policy policy, int batch, int rows, const int64_t *pos,
                                  char *err, size_t errlen);
void dft_gpu_acts_free(dft_gpu_acts *a);
size_t dft_gpu_acts_bytes(const dft_gpu_acts *a);
/* Head groups the attention calls of these activations are split into (1: one call per layer). */
int dft_gpu_acts_groups(const dft_gpu_acts *a);

/* As dft_model_forward, with host tokens/targets/weights/argmax (copied in and out). Returns
   sum(weight * nll) of this rank's rows, or NaN with err. */
double dft_gpu_forward(dft_gpu_model *m, dft_gpu_acts *a, dft_attention *at, const uint8_t *tokens,
                       const uint8_t *targets, const float *weights, float grad_scale, uint8_t *argmax, char *err,
                       size_t errlen);
/* As dft_model_backward: adds this rank's gradients into m->grads (device). */
int dft_gpu_backward(dft_gpu_model *m, dft_gpu_acts *a, dft_attention *at, char *err, size_t errlen);

/* Global-norm clip (max_norm 0: none) and AdamW (optim.h's formulas) on the device; t is the
   1-based update count. Refreshes the bf16 mirror. */
int dft_gpu_update(dft_gpu_model *m, float max_norm, float lr, const dft_adamw *h, long t, char *err,
                   size_t errlen);

/* The breakdown: marks a phase change (no-op without m->prof), and sums the marks of the step
   into prof->seconds (synchronises). */
void dft_prof_mark(dft_gpu_model *m, dft_phase p);
int dft_prof_collect(dft_gpu_model *m, char *err, size_t errlen);

#endif
