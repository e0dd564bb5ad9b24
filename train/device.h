/* The GPU side of a training run (--device cuda), behind an opaque handle so that the trainer
 * compiles without CUDA: train/cuda/device_cuda.c implements it when CUDA is built, and
 * device_none.c otherwise (every call refuses with a message saying so). One rank per GPU:
 * rank r takes GPU (local rank) % (GPUs on the node). The parameters and AdamW moments live on
 * the device during the run; the trainer copies them to and from its host arrays for
 * checkpoints, so the files are those of the CPU trainer. */
#ifndef DFT_TRAIN_DEVICE_H
#define DFT_TRAIN_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "train/group.h"
#include "train/model/model.h"
#include "train/optim.h"

typedef enum { DFT_DEVICE_CPU = 0, DFT_DEVICE_CUDA = 1 } dft_device_kind;
const char *dft_device_name(dft_device_kind k);
int dft_device_parse(const char *s); /* "cpu", "cuda"; -1 otherwise */

typedef struct dft_device dft_device;

#define DFT_DEVICE_PHASES 5 /* matmul, attention, communication, element-wise, optimizer */
const char *dft_device_phase_name(int phase);

/* Collective over g. Picks this rank's GPU, checks the configuration for the GPU model, and with
   several ranks builds the NCCL communicators (attention: attn->comm is set to it; gradients:
   one of its own). profile: keep the per-phase time breakdown. 0, or -1 with a message. */
int dft_device_open(dft_device **out, const dft_model_config *c, dft_group *g, int deterministic, int profile,
                    dft_attention *attn, char *err, size_t errlen);
void dft_device_close(dft_device *dv);

/* Activation buffers for `batch` sequences of `rows` local positions (frees the previous ones). */
int dft_device_set_span(dft_device *dv, dft_ckpt_policy policy, int batch, int rows, const int64_t *pos, char *err,
                        size_t errlen);
size_t dft_device_acts_bytes(const dft_device *dv);
/* Head groups each attention call is split into (1: one call per layer and pass; 0: no activations). */
int dft_device_attn_groups(const dft_device *dv);

int dft_device_upload(dft_device *dv, const float *params, const float *m, const float *v, char *err, size_t errlen);
int dft_device_download(dft_device *dv, float *params, float *m, float *v, char *err, size_t errlen);

/* A training step's passes: zero the gradients, forward (the loss of this rank, as
   dft_model_forward), backward, gradient sum over the ranks (NCCL), clip + AdamW. */
int dft_device_zero_grads(dft_device *dv, char *err, size_t errlen);
double dft_device_forward(dft_device *dv, dft_attention *at, const uint8_t *tokens, const uint8_t *targets,
                          const float *weights, float grad_scale, uint8_t *argmax, char *err, size_t errlen);
int dft_device_backward(dft_device *dv, dft_attention *at, char *err, size_t errlen);
int dft_device_sum_grads(dft_device *dv, char *err, size_t errlen);
int dft_device_update(dft_device *dv, float clip, float lr, const dft_adamw *h, long t, char *err, size_t errlen);

/* Ends the step: samples the device memory in use (for the peak) and, with profile, adds the
   step's phase times. Synchronises. */
int dft_device_end_step(dft_device *dv, char *err, size_t errlen);
/* Largest device memory in use seen at the end of a step (MiB, cudaMemGetInfo), and the summed
   phase seconds (zeros without profile). */
double dft_device_peak_mib(const dft_device *dv);
void dft_device_phase_seconds(const dft_device *dv, double out[DFT_DEVICE_PHASES]);

#endif
