/* The GPU side of a training run (train/device.h): device choice, NCCL communicators, and
 * the GPU model's passes behind the trainer's interface. */
#include "train/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cuda/model_cuda.h"
#ifdef DFA_HAVE_NCCL
#include <nccl.h>

#include "distflash_nccl.h"
#endif
#if defined(DFA_HAVE_MPI) && defined(DFA_HAVE_NCCL)
#include <mpi.h>

#include "distflash_mpi.h"
#endif

struct dft_device {
    int device, ranks;
    dft_gpu_model m;
    dft_gpu_acts *acts;
    dfa_comm *attn_comm; /* NCCL-backed, for the distributed attention */
#ifdef DFA_HAVE_NCCL
    ncclComm_t grads_comm; /* the gradient sums */
#endif
    double peak_mib;
};

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s failed: %s", what, cudaGetErrorString(e));
    return -1;
}

const char *dft_device_phase_name(int phase) { return dft_phase_name((dft_phase)phase); }

/* The rank's index among the ranks of its node, from the launcher (the global rank otherwise). */
static int local_rank(int rank) {
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return rank;
}

static int open_comms(dft_device *dv, dft_group *g, dft_attention *attn, char *err, size_t errlen) {
    if (g->size == 1) return 0;
#if defined(DFA_HAVE_MPI) && defined(DFA_HAVE_NCCL)
    dfa_status st = dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, dv->device, &dv->attn_comm);
    if (st != DFA_OK) return snprintf(err, errlen, "dfa_comm_create_nccl_mpi: %s", dfa_last_error()), -1;
    attn->comm = dv->attn_comm;
    ncclUniqueId id;
    if (g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) memset(&id, 0, sizeof id); /* the others fail in ncclCommInitRank below */
    }
    if (MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return snprintf(err, errlen, "MPI_Bcast of the NCCL id failed"), -1;
    ncclResult_t r = ncclCommInitRank(&dv->grads_comm, g->size, id, g->rank);
    if (r != ncclSuccess) {
        dv->grads_comm = NULL;
        return snprintf(err, errlen, "ncclCommInitRank (gradient sums): %s", ncclGetErrorString(r)), -1;
    }
    return 0;
#else
    (void)dv, (void)attn;
    snprintf(err, errlen, "--device cuda on %d ranks needs a distflash built with MPI and NCCL", g->size);
    return -1;
#endif
}

int dft_device_open(dft_device **out, const dft_model_config *c, dft_group *g, int deterministic, int profile,
                    dft_attention *attn, char *err, size_t errlen) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1) {
        snprintf(err, errlen, "--device cuda: no usable CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return -1;
    }
    if (dft_gpu_config_check(c, err, errlen)) return -1;
    dft_device *dv = calloc(1, sizeof *dv);
    if (!dv) return snprintf(err, errlen, "out of memory"), -1;
    dv->ranks = g->size;
    dv->device = local_rank(g->rank) % count;
    if ((e = cudaSetDevice(dv->device)) != cudaSuccess) return free(dv), cuda_fail(e, "cudaSetDevice", err, errlen);
    if (open_comms(dv, g, attn, err, errlen) ||
        dft_gpu_model_init(&dv->m, c, deterministic, profile, err, errlen)) {
        attn->comm = g->attn;
        dft_device_close(dv);
        return -1;
    }
    dv->m.ranks = g->size;
    *out = dv;
    return 0;
}

void dft_device_close(dft_device *dv) {
    if (!dv) return;
    dft_gpu_acts_free(dv->acts);
    dft_gpu_model_free(&dv->m);
#ifdef DFA_HAVE_NCCL
    if (dv->grads_comm) ncclCommDestroy(dv->grads_comm);
#endif
    dfa_comm_destroy(dv->attn_comm);
    free(dv);
}

int dft_device_set_span(dft_device *dv, dft_ckpt_policy policy, int batch, int rows, const int64_t *pos, char *err,
                        size_t errlen) {
    dft_gpu_acts_free(dv->acts);
    dv->acts = dft_gpu_acts_create(&dv->m, policy, batch, rows, pos, err, errlen);
    return dv->acts ? 0 : -1;
}

size_t dft_device_acts_bytes(const dft_device *dv) { return dv ? dft_gpu_acts_bytes(dv->acts) : 0; }
int dft_device_attn_groups(const dft_device *dv) { return dv ? dft_gpu_acts_groups(dv->acts) : 0; }

int dft_device_upload(dft_device *dv, const float *params, const float *m, const float *v, char *err, size_t errlen) {
    return dft_gpu_model_upload(&dv->m, params, m, v, err, errlen);
}

int dft_device_download(dft_device *dv, float *params, float *m, float *v, char *err, size_t errlen) {
    return dft_gpu_model_download(&dv->m, params, m, v, err, errlen);
}

int dft_device_zero_grads(dft_device *dv, char *err, size_t errlen) { return dft_gpu_zero_grads(&dv->m, err, errlen); }

double dft_device_forward(dft_device *dv, dft_attention *at, const uint8_t *tokens, const uint8_t *targets,
                          const float *weights, float grad_scale, uint8_t *argmax, char *err, size_t errlen) {
    return dft_gpu_forward(&dv->m, dv->acts, at, tokens, targets, weights, grad_scale, argmax, err, errlen);
}

int dft_device_backward(dft_device *dv, dft_attention *at, char *err, size_t errlen) {
    return dft_gpu_backward(&dv->m, dv->acts, at, err, errlen);
}

int dft_device_sum_grads(dft_device *dv, char *err, size_t errlen) {
    if (dv->ranks == 1) return 0;
#ifdef DFA_HAVE_NCCL
    /* NCCL's ring and tree sums hand every rank the same bits, so the ranks stay in step */
    dft_prof_mark(&dv->m, DFT_PH_COMM);
    ncclResult_t r = ncclAllReduce(dv->m.grads, dv->m.grads, dv->m.total, ncclFloat, ncclSum, dv->grads_comm,
                                   dv->m.stream);
    if (r != ncclSuccess) return snprintf(err, errlen, "ncclAllReduce of the gradients: %s", ncclGetErrorString(r)), -1;
    return 0;
#else
    return snprintf(err, errlen, "several GPU ranks need NCCL"), -1;
#endif
}

int dft_device_update(dft_device *dv, float clip, float lr, const dft_adamw *h, long t, char *err, size_t errlen) {
    return dft_gpu_update(&dv->m, clip, lr, h, t, err, errlen);
}

int dft_device_end_step(dft_device *dv, char *err, size_t errlen) {
    cudaError_t e = cudaStreamSynchronize(dv->m.stream);
    if (e != cudaSuccess) return cuda_fail(e, "the training step", err, errlen);
#ifdef DFA_HAVE_NCCL
    if (dv->attn_comm && dfa_comm_check(dv->attn_comm) != DFA_OK)
        return snprintf(err, errlen, "distributed attention: %s", dfa_last_error()), -1;
#endif
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        double used = (double)(total_b - free_b) / 1048576.0;
        if (used > dv->peak_mib) dv->peak_mib = used;
    }
    return dft_prof_collect(&dv->m, err, errlen);
}

double dft_device_peak_mib(const dft_device *dv) { return dv ? dv->peak_mib : 0; }

void dft_device_phase_seconds(const dft_device *dv, double out[DFT_DEVICE_PHASES]) {
    for (int i = 0; i < DFT_DEVICE_PHASES; i++) out[i] = dv && dv->m.prof ? dv->m.prof->seconds[i] : 0;
}
