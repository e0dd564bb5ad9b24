/* The GPU model (model_cuda.h): parameters, activations, forward, backward, optimiser.
 * The structure follows train/model/model_pass.c line for line so that the two stay
 * comparable: same order of operations, same policies, same attention calls. */
#include "train/cuda/model_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflash_cuda.h"
#ifdef DFA_HAVE_NCCL
#include "distflash_nccl.h"
#endif
#include "train/model/ops.h"

#define EPS 1e-5f
#define LOGIT_CHUNK 32768 /* rows of float32 logits at a time: 32 MiB */
/* The MLP runs over chunks of this many rows (it is token-local): with the policies that
   recompute it, its n2, a, b, g (3 ffn + d values a row) exist for one chunk only, which at
   long contexts is most of the activation memory. Every policy uses the same chunks, so all
   three compute the same sums in the same order. */
#define MLP_CHUNK 65536
#define DN_CHUNK MLP_CHUNK /* rows of dn at a time (the MLP's chunks use it whole) */
_Static_assert(MLP_CHUNK <= DN_CHUNK, "mlp_backward uses dn for a whole MLP chunk of rows");

static int cuda_fail(cudaError_t e, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s failed: %s", what, cudaGetErrorString(e));
    return -1;
}
#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call, err, errlen);                                           \
    } while (0)
#define OK(call)                                                                                                   \
    do {                                                                                                           \
        if ((call) != 0) return -1;                                                                                \
    } while (0)

const char *dft_phase_name(dft_phase p) {
    static const char *const names[] = {"matmul", "attention", "communication", "element-wise", "optimizer"};
    return p >= 0 && p < DFT_PH_COUNT ? names[p] : "?";
}

void dft_prof_mark(dft_gpu_model *m, dft_phase p) {
    dft_prof *pr = m->prof;
    if (!pr || !pr->on) return;
    if (pr->count > 0 && pr->phase[pr->count - 1] == (int)p) return;
    if (pr->count == DFT_PROF_MARKS) return; /* full: the rest counts to the last phase */
    if (cudaEventRecord(pr->ev[pr->count], m->stream) != cudaSuccess) {
        cudaGetLastError(); /* the breakdown is best effort; the launches' checks must not see this */
        return;
    }
    pr->phase[pr->count++] = (int)p;
}

int dft_prof_collect(dft_gpu_model *m, char *err, size_t errlen) {
    dft_prof *pr = m->prof;
    if (!pr || !pr->on || pr->count == 0) return 0;
    if (pr->count == DFT_PROF_MARKS) pr->count--; /* room for the closing mark */
    dft_prof_mark(m, DFT_PH_COUNT);               /* closes the last phase */
    CK(cudaEventSynchronize(pr->ev[pr->count - 1]));
    for (int i = 0; i + 1 < pr->count; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, pr->ev[i], pr->ev[i + 1]));
        if (pr->phase[i] < DFT_PH_COUNT) pr->seconds[pr->phase[i]] += ms * 1e-3;
    }
    pr->count = 0;
    return 0;
}

int dft_gpu_config_check(const dft_model_config *c, char *err, size_t errlen) {
    int hd = c->d_model / c->n_heads;
    /* 16-byte aligned bf16 rows and weight offsets for cuBLASLt and the attention kernels */
    if (c->ffn % 8)
        return snprintf(err, errlen, "ffn = %d: the GPU model needs a multiple of 8 (16-byte aligned rows)", c->ffn), -1;
    if (c->d_model > 16384)
        return snprintf(err, errlen, "d_model = %d: the GPU model takes at most 16384", c->d_model), -1;
    if (hd % 8 || hd > 256)
        return snprintf(err, errlen, "head_dim = %d: the CUDA attention takes multiples of 8 up to 256", hd), -1;
    return 0;
}

int dft_gpu_model_init(dft_gpu_model *m, const dft_model_config *c, int deterministic, int profile, char *err,
                       size_t errlen) {
    memset(m, 0, sizeof *m);
    OK(dft_gpu_config_check(c, err, errlen));
    m->cfg = *c, m->lay = dft_param_layout_of(c), m->total = m->lay.total, m->deterministic = deterministic;
    m->ranks = 1;
    CK(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking));
    size_t t = m->total;
    cudaError_t e = cudaSuccess;
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->params, sizeof(float) * t);
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->grads, sizeof(float) * t);
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->m, sizeof(float) * t);
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->v, sizeof(float) * t);
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->wbf, sizeof(dft_bf16) * t);
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->partial, sizeof(double) * (DFTK_SUM_BLOCKS + 1));
    if (e == cudaSuccess) e = cudaMalloc((void **)&m->factor, sizeof(float));
    if (e != cudaSuccess) {
        cudaGetLastError(); /* a failed allocation must not surface at the next launch's check */
        dft_gpu_model_free(m);
        snprintf(err, errlen, "out of device memory for %zu parameters and their gradients and AdamW moments (%s)", t,
                 cudaGetErrorString(e));
        return -1;
    }
    m->sum = m->partial + DFTK_SUM_BLOCKS;
    /* the attention backward takes its scratch from the pool: keep it there between calls */
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    cudaGetLastError(); /* best effort: a failure above only costs speed, and must not be reported later */
    if (dft_blas_create(&m->blas, m->stream, (size_t)64 << 20, err, errlen)) return dft_gpu_model_free(m), -1;
    if (profile) {
        m->prof = calloc(1, sizeof *m->prof);
        if (!m->prof) return dft_gpu_model_free(m), snprintf(err, errlen, "out of memory"), -1;
        for (int i = 0; i < DFT_PROF_MARKS; i++)
            if ((e = cudaEventCreate(&m->prof->ev[i])) != cudaSuccess) {
                for (int j = 0; j < i; j++) cudaEventDestroy(m->prof->ev[j]);
                free(m->prof), m->prof = NULL;
                dft_gpu_model_free(m);
                return cuda_fail(e, "cudaEventCreate", err, errlen);
            }
        m->prof->on = 1;
    }
    CK(cudaMemsetAsync(m->m, 0, sizeof(float) * t, m->stream));
    CK(cudaMemsetAsync(m->v, 0, sizeof(float) * t, m->stream));
    CK(cudaMemsetAsync(m->grads, 0, sizeof(float) * t, m->stream));
    CK(cudaStreamSynchronize(m->stream));
    return 0;
}

void dft_gpu_model_free(dft_gpu_model *m) {
    if (!m) return;
    if (m->stream) cudaStreamSynchronize(m->stream);
    dft_blas_destroy(m->blas);
    cudaFree(m->params), cudaFree(m->grads), cudaFree(m->m), cudaFree(m->v), cudaFree(m->wbf);
    cudaFree(m->partial), cudaFree(m->factor);
    if (m->prof) {
        for (int i = 0; i < DFT_PROF_MARKS; i++) cudaEventDestroy(m->prof->ev[i]);
        free(m->prof);
    }
    if (m->stream) cudaStreamDestroy(m->stream);
    memset(m, 0, sizeof *m);
}

int dft_gpu_model_upload(dft_gpu_model *m, const float *params, const float *mom1, const float *mom2, char *err,
                         size_t errlen) {
    size_t bytes = sizeof(float) * m->total;
    CK(cudaMemcpyAsync(m->params, params, bytes, cudaMemcpyHostToDevice, m->stream));
    if (mom1) CK(cudaMemcpyAsync(m->m, mom1, bytes, cudaMemcpyHostToDevice, m->stream));
    else CK(cudaMemsetAsync(m->m, 0, bytes, m->stream));
    if (mom2) CK(cudaMemcpyAsync(m->v, mom2, bytes, cudaMemcpyHostToDevice, m->stream));
    else CK(cudaMemsetAsync(m->v, 0, bytes, m->stream));
    CK(dftk_to_bf16(m->wbf, m->params, m->total, m->stream));
    CK(cudaStreamSynchronize(m->stream));
    return 0;
}

int dft_gpu_model_download(dft_gpu_model *m, float *params, float *mom1, float *mom2, char *err, size_t errlen) {
    size_t bytes = sizeof(float) * m->total;
    if (params) CK(cudaMemcpyAsync(params, m->params, bytes, cudaMemcpyDeviceToHost, m->stream));
    if (mom1) CK(cudaMemcpyAsync(mom1, m->m, bytes, cudaMemcpyDeviceToHost, m->stream));
    if (mom2) CK(cudaMemcpyAsync(mom2, m->v, bytes, cudaMemcpyDeviceToHost, m->stream));
    CK(cudaStreamSynchronize(m->stream));
    return 0;
}

int dft_gpu_grads_download(dft_gpu_model *m, float *grads, char *err, size_t errlen) {
    CK(cudaMemcpyAsync(grads, m->grads, sizeof(float) * m->total, cudaMemcpyDeviceToHost, m->stream));
    CK(cudaStreamSynchronize(m->stream));
    return 0;
}

int dft_gpu_zero_grads(dft_gpu_model *m, char *err, size_t errlen) {
    CK(cudaMemsetAsync(m->grads, 0, sizeof(float) * m->total, m->stream));
    return 0;
}

/* ---- activations ---- */

typedef struct {
    dft_bf16 *x, *n1, *q, *k, *v, *o, *xmid, *n2, *a, *b, *g;
    float *rstd1, *rstd2, *lse;
} gpu_layer;

struct dft_gpu_acts {
    dft_ckpt_policy policy;
    int batch, rows, d, qd, kvd, F, hd;
    long n;
    gpu_layer *layer;
    dft_bf16 *xfinal, *nf, *dlogits;
    float *rstdf, *logits; /* logits: LOGIT_CHUNK rows of float32 */
    double *wnll;
    uint8_t *tokens, *targets, *argmax;
    float *weights;
    int *sorted, *offsets, *h_sorted; /* the embedding backward's counting sort (device, host) */
    int h_offsets[DFT_VOCAB + 1];
    float *cosv, *sinv;
    float *dres, *dn, *norm_partial;
    dft_bf16 *dres_bf, *dout, *dq, *dk, *dv; /* (the MLP's gradients reuse a, b and g) */
    int groups;                              /* attention calls per layer and pass: head groups */
    long dn_chunk;                           /* rows of dn per step of the head's and attention's backward */
    dft_bf16 *gq, *gk, *gv, *go, *gdo, *gdq, *gdk, *gdv; /* one head group's tensors (groups > 1) */
    float *glse;
    void **blocks;
    int nblocks, capblocks;
    size_t bytes;
};

static void *take(dft_gpu_acts *a, size_t bytes, int *failed) {
    if (*failed) return NULL;
    if (a->nblocks == a->capblocks) {
        int cap = a->capblocks ? 2 * a->capblocks : 128;
        void **nb = realloc(a->blocks, sizeof(void *) * (size_t)cap);
        if (!nb) return (*failed = 1, NULL);
        a->blocks = nb, a->capblocks = cap;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error so later calls see their own */
        return (*failed = 1, NULL);
    }
    a->blocks[a->nblocks++] = p;
    a->bytes += bytes;
    return p;
}

/* Head groups per attention call: m->attn_groups when set, else the fewest (a divisor of the kv
   heads) with which the whole run fits the device: parameters, optimiser state, activations, one
   call's workspace (the distributed call's and the backward's scratch, both proportional to the
   heads of the call), the group buffers, and a margin for the CUDA context, NCCL and cuBLASLt.
   Every term is a function of the shapes and the device's total memory, so all ranks (identical
   GPUs) choose the same; one group is fastest, so more are used only where memory needs them
   (e.g. 1M positions on 2 H200: 4 groups). */
#define GROUPS_MARGIN ((size_t)6 << 30)
static int attention_groups(const dft_gpu_model *m, const dft_gpu_acts *a) {
    const int KV = m->cfg.n_kv_heads, H = m->cfg.n_heads;
    if (m->attn_groups > 0) return m->attn_groups;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return cudaGetLastError(), 1;
    size_t fixed = m->total * (4 * sizeof(float) + sizeof(dft_bf16)) + a->bytes + GROUPS_MARGIN;
    size_t n = (size_t)a->n, nlse = (size_t)a->batch * H * a->rows;
    for (int g = 1; g <= KV; g++) {
        if (KV % g) continue;
        dfa_dist_desc d = dfa_dist_desc_init(a->batch, a->rows, H / g, KV / g, a->hd);
        d.attn.causal = 1, d.attn.dtype = DFA_BF16;
        size_t need = dfa_attn_bwd_cuda_scratch_bytes(&d.attn);
#ifdef DFA_HAVE_NCCL
        if (m->ranks > 1) need += dfa_dist_attn_cuda_workspace_bytes(m->ranks, &d);
#endif
        if (g > 1) need += n * (4 * (size_t)a->qd + 4 * (size_t)a->kvd) / g * sizeof(dft_bf16) + nlse / g * sizeof(float);
        if (fixed + need <= total_b) return g;
    }
    return KV; /* does not fit even so: the allocations will say where */
}

dft_gpu_acts *dft_gpu_acts_create(dft_gpu_model *m, dft_ckpt_policy policy, int batch, int rows, const int64_t *pos,
                                  char *err, size_t errlen) {
    const dft_model_config *c = &m->cfg;
    if (policy < DFT_CKPT_NONE || policy > DFT_CKPT_ATTN_OUTPUT || batch < 1 || rows < 1 || !pos) {
        snprintf(err, errlen, "bad activation request (policy %d, batch %d, rows %d)", (int)policy, batch, rows);
        return NULL;
    }
    dft_gpu_acts *a = calloc(1, sizeof *a);
    if (!a) return (snprintf(err, errlen, "out of memory for the activations"), NULL);
    a->policy = policy, a->batch = batch, a->rows = rows, a->n = (long)batch * rows;
    a->d = c->d_model, a->hd = c->d_model / c->n_heads;
    a->qd = a->hd * c->n_heads, a->kvd = a->hd * c->n_kv_heads, a->F = c->ffn;
    size_t n = (size_t)a->n, d = (size_t)a->d, qd = (size_t)a->qd, kvd = (size_t)a->kvd, F = (size_t)a->F;
    size_t nlse = (size_t)batch * c->n_heads * rows, B = sizeof(dft_bf16), S = sizeof(float);
    int failed = 0;
    a->layer = calloc((size_t)c->n_layers, sizeof *a->layer);
    a->h_sorted = malloc(sizeof(int) * n);
    if (!a->layer || !a->h_sorted) failed = 1;
    gpu_layer shared = {0};
    if (!failed && policy != DFT_CKPT_NONE) {
        shared.n1 = take(a, n * d * B, &failed), shared.rstd1 = take(a, n * S, &failed);
        shared.q = take(a, n * qd * B, &failed), shared.k = take(a, n * kvd * B, &failed);
        shared.v = take(a, n * kvd * B, &failed);
        if (policy == DFT_CKPT_LAYER) shared.o = take(a, n * qd * B, &failed), shared.lse = take(a, nlse * S, &failed);
        shared.xmid = take(a, n * d * B, &failed);
        size_t ch = n < MLP_CHUNK ? n : MLP_CHUNK;
        shared.n2 = take(a, ch * d * B, &failed), shared.rstd2 = take(a, ch * S, &failed);
        shared.a = take(a, ch * F * B, &failed), shared.b = take(a, ch * F * B, &failed);
        shared.g = take(a, ch * F * B, &failed);
    }
    for (int l = 0; !failed && l < c->n_layers; l++) {
        gpu_layer *la = &a->layer[l];
        if (policy == DFT_CKPT_NONE) {
            la->n1 = take(a, n * d * B, &failed), la->rstd1 = take(a, n * S, &failed);
            la->q = take(a, n * qd * B, &failed), la->k = take(a, n * kvd * B, &failed);
            la->v = take(a, n * kvd * B, &failed);
            la->o = take(a, n * qd * B, &failed), la->lse = take(a, nlse * S, &failed);
            la->xmid = take(a, n * d * B, &failed);
            la->n2 = take(a, n * d * B, &failed), la->rstd2 = take(a, n * S, &failed);
            la->a = take(a, n * F * B, &failed), la->b = take(a, n * F * B, &failed);
            la->g = take(a, n * F * B, &failed);
        } else {
            *la = shared;
            if (policy == DFT_CKPT_ATTN_OUTPUT) la->o = take(a, n * qd * B, &failed), la->lse = take(a, nlse * S, &failed);
        }
        la->x = take(a, n * d * B, &failed);
    }
    size_t chunk = n < LOGIT_CHUNK ? n : LOGIT_CHUNK;
    a->xfinal = take(a, n * d * B, &failed), a->nf = take(a, n * d * B, &failed);
    a->rstdf = take(a, n * S, &failed);
    a->logits = take(a, chunk * DFT_VOCAB * S, &failed), a->dlogits = take(a, n * DFT_VOCAB * B, &failed);
    a->wnll = take(a, n * sizeof(double), &failed);
    a->tokens = take(a, n, &failed), a->targets = take(a, n, &failed), a->argmax = take(a, n, &failed);
    a->weights = take(a, n * S, &failed);
    a->sorted = take(a, n * sizeof(int), &failed), a->offsets = take(a, (DFT_VOCAB + 1) * sizeof(int), &failed);
    a->cosv = take(a, (size_t)rows * (a->hd / 2) * S, &failed), a->sinv = take(a, (size_t)rows * (a->hd / 2) * S, &failed);
    /* dn, the float32 gradient into a norm, is consumed by the norm's backward row by row: it is
       computed and consumed one chunk of rows at a time (8 KiB a row less at d = 2048) */
    a->dn_chunk = m->dn_rows > 0 && m->dn_rows < DN_CHUNK ? m->dn_rows : DN_CHUNK;
    a->dres = take(a, n * d * S, &failed), a->dn = take(a, (n < DN_CHUNK ? n : DN_CHUNK) * d * S, &failed);
    a->norm_partial = take(a, (size_t)dftk_rmsnorm_bwd_blocks((long)n) * d * S, &failed);
    a->dres_bf = take(a, n * d * B, &failed);
    a->dout = take(a, n * qd * B, &failed);
    a->dq = take(a, n * qd * B, &failed), a->dk = take(a, n * kvd * B, &failed), a->dv = take(a, n * kvd * B, &failed);
    a->groups = attention_groups(m, a);
    if (a->groups < 1 || c->n_kv_heads % a->groups) {
        snprintf(err, errlen, "attention head groups = %d; it must divide kv-heads = %d", a->groups, c->n_kv_heads);
        dft_gpu_acts_free(a);
        return NULL;
    }
    if (a->groups > 1) {
        size_t gqd = qd / (size_t)a->groups, gkvd = kvd / (size_t)a->groups;
        a->gq = take(a, n * gqd * B, &failed), a->go = take(a, n * gqd * B, &failed);
        a->gdo = take(a, n * gqd * B, &failed), a->gdq = take(a, n * gqd * B, &failed);
        a->gk = take(a, n * gkvd * B, &failed), a->gv = take(a, n * gkvd * B, &failed);
        a->gdk = take(a, n * gkvd * B, &failed), a->gdv = take(a, n * gkvd * B, &failed);
        a->glse = take(a, nlse / (size_t)a->groups * S, &failed);
    }
    if (failed) {
        snprintf(err, errlen,
                 "out of device memory for the activations (%d sequences x %d positions, policy %s: %.2f GiB taken "
                 "before the failure)",
                 batch, rows, dft_ckpt_policy_name(policy), a->bytes / 1073741824.0);
        dft_gpu_acts_free(a);
        return NULL;
    }
    /* the RoPE tables as the CPU model makes them (angles in double), copied once */
    size_t tab = (size_t)rows * (a->hd / 2);
    float *hc = malloc(S * tab), *hs = malloc(S * tab);
    cudaError_t e = cudaErrorMemoryAllocation;
    if (hc && hs) {
        dft_rope_tables(hc, hs, pos, rows, a->hd, c->rope_base);
        /* on the model's stream, complete before the host buffers go */
        e = cudaMemcpyAsync(a->cosv, hc, S * tab, cudaMemcpyHostToDevice, m->stream);
        if (e == cudaSuccess) e = cudaMemcpyAsync(a->sinv, hs, S * tab, cudaMemcpyHostToDevice, m->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m->stream);
    }
    free(hc), free(hs);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "copying the RoPE tables: %s", cudaGetErrorString(e));
        dft_gpu_acts_free(a);
        return NULL;
    }
    return a;
}

void dft_gpu_acts_free(dft_gpu_acts *a) {
    if (!a) return;
    cudaDeviceSynchronize(); /* nothing in flight may still use the buffers */
    for (int i = 0; i < a->nblocks; i++) cudaFree(a->blocks[i]);
    free(a->blocks), free(a->layer), free(a->h_sorted);
    free(a);
}

size_t dft_gpu_acts_bytes(const dft_gpu_acts *a) { return a ? a->bytes : 0; }

/* ---- the passes ---- */

typedef struct {
    size_t attn_norm, wq, wk, wv, wo, mlp_norm, w1, w3, w2;
} layer_offsets;

static layer_offsets offsets_of(const dft_gpu_model *m, int layer) {
    const dft_model_config *c = &m->cfg;
    const dft_param_layout *p = &m->lay;
    size_t l = (size_t)layer, d = (size_t)c->d_model, F = (size_t)c->ffn, hd = d / (size_t)c->n_heads;
    size_t qd = hd * (size_t)c->n_heads, kvd = hd * (size_t)c->n_kv_heads;
    return (layer_offsets){.attn_norm = p->attn_norm + l * d, .wq = p->wq + l * d * qd, .wk = p->wk + l * d * kvd,
                           .wv = p->wv + l * d * kvd, .wo = p->wo + l * qd * d, .mlp_norm = p->mlp_norm + l * d,
                           .w1 = p->w1 + l * d * F, .w3 = p->w3 + l * d * F, .w2 = p->w2 + l * F * d};
}

/* y[n, out] = x[n, in] W[in, out] (bf16 out), with an optional residual r: y = r + x W */
static int mm(dft_gpu_model *m, dft_bf16 *y, const dft_bf16 *x, size_t w, long n, int in, int out,
              const dft_bf16 *residual, char *err, size_t errlen) {
    dft_prof_mark(m, DFT_PH_MATMUL);
    return dft_blas_gemm(m->blas, (int)n, out, in, x, 0, m->wbf + w, 0, y, residual, DFT_OUT_BF16,
                         residual ? 1.0f : 0.0f, err, errlen);
}
/* dx[n, in] (=|+=) dy[n, out] W^T, float32 or bf16 */
static int mm_dx(dft_gpu_model *m, void *dx, dft_out_type t, const dft_bf16 *dy, size_t w, long n, int in, int out,
                 int accumulate, char *err, size_t errlen) {
    dft_prof_mark(m, DFT_PH_MATMUL);
    return dft_blas_gemm(m->blas, (int)n, in, out, dy, 0, m->wbf + w, 1, dx, NULL, t, accumulate ? 1.0f : 0.0f, err,
                         errlen);
}
/* dW[in, out] += x[n, in]^T dy[n, out] in float32 */
static int mm_dw(dft_gpu_model *m, size_t w, const dft_bf16 *x, const dft_bf16 *dy, long n, int in, int out, char *err,
                 size_t errlen) {
    dft_prof_mark(m, DFT_PH_MATMUL);
    return dft_blas_gemm(m->blas, in, out, (int)n, x, 1, dy, 0, m->grads + w, NULL, DFT_OUT_F32, 1.0f, err, errlen);
}

/* A descriptor for `heads` query heads and `kv_heads` kv heads (all, or one head group's). */
static dfa_dist_desc describe(const dft_gpu_model *m, const dft_attention *at, const dft_gpu_acts *a, int heads,
                              int kv_heads) {
    dfa_dist_desc d = dfa_dist_desc_init(a->batch, a->rows, heads, kv_heads, a->hd);
    d.attn.causal = 1;
    d.attn.dtype = DFA_BF16;
    if (m->deterministic) d.attn.flags |= DFA_FLAG_DETERMINISTIC;
    d.schedule = at->schedule;
    d.overlap = at->overlap;
    return d;
}

static int attn_report(dfa_status st, const char *what, char *err, size_t errlen) {
    if (st == DFA_OK) return 0;
    snprintf(err, errlen, "%s failed: %s: %s", what, dfa_status_string(st), dfa_last_error());
    return -1;
}

static int call_fwd(dft_gpu_model *m, dft_attention *at, const dfa_dist_desc *d, const void *q, const void *k,
                    const void *v, void *o, float *lse, char *err, size_t errlen) {
    if (at->comm) {
#ifdef DFA_HAVE_NCCL
        return attn_report(dfa_dist_attn_fwd_cuda(at->comm, d, q, k, v, o, lse, m->stream), "dfa_dist_attn_fwd_cuda",
                           err, errlen);
#else
        return snprintf(err, errlen, "several GPU ranks need a distflash built with NCCL"), -1;
#endif
    }
    return attn_report(dfa_attn_fwd_cuda(&d->attn, q, k, v, o, lse, m->stream), "dfa_attn_fwd_cuda", err, errlen);
}

static int call_bwd(dft_gpu_model *m, dft_attention *at, const dfa_dist_desc *d, const void *q, const void *k,
                    const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                    char *err, size_t errlen) {
    if (at->comm) {
#ifdef DFA_HAVE_NCCL
        return attn_report(dfa_dist_attn_bwd_cuda(at->comm, d, q, k, v, o, lse, dout, dq, dk, dv, m->stream),
                           "dfa_dist_attn_bwd_cuda", err, errlen);
#else
        return snprintf(err, errlen, "several GPU ranks need a distflash built with NCCL"), -1;
#endif
    }
    return attn_report(dfa_attn_bwd_cuda(&d->attn, q, k, v, o, lse, dout, dq, dk, dv, m->stream), "dfa_attn_bwd_cuda",
                       err, errlen);
}

/* Head group g of a [n, heads, hd] tensor to or from a contiguous [n, heads / G, hd] one
   (to_group: full -> group), and the same for the lse [batch, heads, rows]. */
static int group_copy(dft_gpu_model *m, dft_gpu_acts *a, void *full, void *group, int heads, int g, int to_group,
                      char *err, size_t errlen) {
    size_t wg = (size_t)(heads / a->groups) * a->hd * sizeof(dft_bf16), wf = (size_t)heads * a->hd * sizeof(dft_bf16);
    char *f = (char *)full + (size_t)g * wg;
    if (to_group) CK(cudaMemcpy2DAsync(group, wg, f, wf, wg, (size_t)a->n, cudaMemcpyDeviceToDevice, m->stream));
    else CK(cudaMemcpy2DAsync(f, wf, group, wg, wg, (size_t)a->n, cudaMemcpyDeviceToDevice, m->stream));
    return 0;
}
static int group_lse(dft_gpu_model *m, dft_gpu_acts *a, float *full, float *group, int g, int to_group, char *err,
                     size_t errlen) {
    size_t wg = (size_t)(m->cfg.n_heads / a->groups) * a->rows * sizeof(float);
    size_t wf = (size_t)m->cfg.n_heads * a->rows * sizeof(float);
    char *f = (char *)full + (size_t)g * wg;
    if (to_group) CK(cudaMemcpy2DAsync(group, wg, f, wf, wg, (size_t)a->batch, cudaMemcpyDeviceToDevice, m->stream));
    else CK(cudaMemcpy2DAsync(f, wf, group, wg, wg, (size_t)a->batch, cudaMemcpyDeviceToDevice, m->stream));
    return 0;
}

/* Attention over all heads at once, or head group by head group (a->groups > 1: the distributed
   workspace scales with the heads of one call; every head is independent, so the results are the
   same bits). */
static int attention_fwd(dft_gpu_model *m, dft_attention *at, dft_gpu_acts *a, gpu_layer *la, char *err,
                         size_t errlen) {
    const int H = m->cfg.n_heads, KV = m->cfg.n_kv_heads, G = a->groups;
    dft_prof_mark(m, DFT_PH_ATTN);
    at->fwd_calls++;
    dfa_dist_desc d = describe(m, at, a, H / G, KV / G);
    if (G == 1) return call_fwd(m, at, &d, la->q, la->k, la->v, la->o, la->lse, err, errlen);
    for (int g = 0; g < G; g++) {
        OK(group_copy(m, a, la->q, a->gq, H, g, 1, err, errlen));
        OK(group_copy(m, a, la->k, a->gk, KV, g, 1, err, errlen));
        OK(group_copy(m, a, la->v, a->gv, KV, g, 1, err, errlen));
        OK(call_fwd(m, at, &d, a->gq, a->gk, a->gv, a->go, a->glse, err, errlen));
        OK(group_copy(m, a, la->o, a->go, H, g, 0, err, errlen));
        OK(group_lse(m, a, la->lse, a->glse, g, 0, err, errlen));
    }
    return 0;
}

static int attention_bwd(dft_gpu_model *m, dft_attention *at, dft_gpu_acts *a, gpu_layer *la, char *err,
                         size_t errlen) {
    const int H = m->cfg.n_heads, KV = m->cfg.n_kv_heads, G = a->groups;
    dft_prof_mark(m, DFT_PH_ATTN);
    at->bwd_calls++;
    dfa_dist_desc d = describe(m, at, a, H / G, KV / G);
    if (G == 1)
        return call_bwd(m, at, &d, la->q, la->k, la->v, la->o, la->lse, a->dout, a->dq, a->dk, a->dv, err, errlen);
    for (int g = 0; g < G; g++) {
        OK(group_copy(m, a, la->q, a->gq, H, g, 1, err, errlen));
        OK(group_copy(m, a, la->k, a->gk, KV, g, 1, err, errlen));
        OK(group_copy(m, a, la->v, a->gv, KV, g, 1, err, errlen));
        OK(group_copy(m, a, la->o, a->go, H, g, 1, err, errlen));
        OK(group_copy(m, a, a->dout, a->gdo, H, g, 1, err, errlen));
        OK(group_lse(m, a, la->lse, a->glse, g, 1, err, errlen));
        OK(call_bwd(m, at, &d, a->gq, a->gk, a->gv, a->go, a->glse, a->gdo, a->gdq, a->gdk, a->gdv, err, errlen));
        OK(group_copy(m, a, a->dq, a->gdq, H, g, 0, err, errlen));
        OK(group_copy(m, a, a->dk, a->gdk, KV, g, 0, err, errlen));
        OK(group_copy(m, a, a->dv, a->gdv, KV, g, 0, err, errlen));
    }
    return 0;
}

/* norm, projections, RoPE */
static int attention_inputs(dft_gpu_model *m, const layer_offsets *w, dft_gpu_acts *a, gpu_layer *la, char *err,
                            size_t errlen) {
    const dft_model_config *c = &m->cfg;
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_rmsnorm_fwd(la->n1, la->rstd1, la->x, m->params + w->attn_norm, a->n, a->d, EPS, m->stream));
    OK(mm(m, la->q, la->n1, w->wq, a->n, a->d, a->qd, NULL, err, errlen));
    OK(mm(m, la->k, la->n1, w->wk, a->n, a->d, a->kvd, NULL, err, errlen));
    OK(mm(m, la->v, la->n1, w->wv, a->n, a->d, a->kvd, NULL, err, errlen));
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_rope(la->q, a->cosv, a->sinv, a->n, a->rows, c->n_heads, a->hd, 0, m->stream));
    CK(dftk_rope(la->k, a->cosv, a->sinv, a->n, a->rows, c->n_kv_heads, a->hd, 0, m->stream));
    return 0;
}

/* The MLP's buffers at row r0 of a chunk: the layer's own (policy none: all n rows) or the
   chunk-sized shared ones. */
static dft_bf16 *mlp_rows(const dft_gpu_acts *a, dft_bf16 *base, long r0, int width) {
    return a->policy == DFT_CKPT_NONE ? base + r0 * width : base;
}
static float *mlp_rstd(const dft_gpu_acts *a, float *base, long r0) { return a->policy == DFT_CKPT_NONE ? base + r0 : base; }

/* The MLP forward of rows [r0, r0 + rows); x_next (may be NULL) = xmid + g W2 there. */
static int mlp_forward(dft_gpu_model *m, const layer_offsets *w, dft_gpu_acts *a, gpu_layer *la, long r0, long rows,
                       dft_bf16 *x_next, char *err, size_t errlen) {
    int d = a->d, F = a->F;
    dft_bf16 *n2 = mlp_rows(a, la->n2, r0, d), *ga = mlp_rows(a, la->a, r0, F), *gb = mlp_rows(a, la->b, r0, F);
    dft_bf16 *gg = mlp_rows(a, la->g, r0, F), *xmid = la->xmid + r0 * d;
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_rmsnorm_fwd(n2, mlp_rstd(a, la->rstd2, r0), xmid, m->params + w->mlp_norm, rows, d, EPS, m->stream));
    OK(mm(m, ga, n2, w->w1, rows, d, F, NULL, err, errlen));
    OK(mm(m, gb, n2, w->w3, rows, d, F, NULL, err, errlen));
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_swiglu_fwd(gg, ga, gb, rows * F, m->stream));
    if (x_next) OK(mm(m, x_next + r0 * d, gg, w->w2, rows, F, d, xmid, err, errlen));
    return 0;
}

/* output projection and residual (all rows), then the MLP chunk by chunk into x_next */
static int attention_outputs(dft_gpu_model *m, const layer_offsets *w, dft_gpu_acts *a, gpu_layer *la,
                             dft_bf16 *x_next, char *err, size_t errlen) {
    OK(mm(m, la->xmid, la->o, w->wo, a->n, a->qd, a->d, la->x, err, errlen));
    for (long r0 = 0; r0 < a->n; r0 += MLP_CHUNK)
        OK(mlp_forward(m, w, a, la, r0, a->n - r0 < MLP_CHUNK ? a->n - r0 : MLP_CHUNK, x_next, err, errlen));
    return 0;
}

/* The MLP backward of rows [r0, r0 + rows): weight gradients, and dres += the gradient through
   the MLP norm. Its gradients overwrite the chunk's a, b and g, which it reads last: dg goes
   where g was (after dW2), da and db where a and b were. */
static int mlp_backward(dft_gpu_model *m, const layer_offsets *w, dft_gpu_acts *a, gpu_layer *la, long r0, long rows,
                        char *err, size_t errlen) {
    int d = a->d, F = a->F;
    dft_bf16 *n2 = mlp_rows(a, la->n2, r0, d), *da = mlp_rows(a, la->a, r0, F), *db = mlp_rows(a, la->b, r0, F);
    dft_bf16 *dg = mlp_rows(a, la->g, r0, F), *dres_bf = a->dres_bf + r0 * d;
    float *dn = a->dn; /* rows <= MLP_CHUNK = DN_CHUNK */
    OK(mm_dw(m, w->w2, dg, dres_bf, rows, F, d, err, errlen)); /* g, before dg takes its place */
    OK(mm_dx(m, dg, DFT_OUT_BF16, dres_bf, w->w2, rows, F, d, 0, err, errlen));
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_swiglu_bwd(da, db, dg, da, db, rows * F, m->stream)); /* element by element: in place is safe */
    OK(mm_dw(m, w->w1, n2, da, rows, d, F, err, errlen));
    OK(mm_dw(m, w->w3, n2, db, rows, d, F, err, errlen));
    OK(mm_dx(m, dn, DFT_OUT_F32, da, w->w1, rows, d, F, 0, err, errlen));
    OK(mm_dx(m, dn, DFT_OUT_F32, db, w->w3, rows, d, F, 1, err, errlen));
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_rmsnorm_bwd(a->dres + r0 * d, dres_bf, m->grads + w->mlp_norm, a->norm_partial, dn, la->xmid + r0 * d,
                        mlp_rstd(a, la->rstd2, r0), m->params + w->mlp_norm, rows, d, m->stream));
    return 0;
}

static int forward(dft_gpu_model *m, dft_gpu_acts *a, dft_attention *at, const uint8_t *tokens,
                   const uint8_t *targets, const float *weights, float grad_scale, uint8_t *argmax, double *loss,
                   char *err, size_t errlen) {
    const dft_model_config *c = &m->cfg;
    size_t n = (size_t)a->n;
    cudaStream_t s = m->stream;
    /* inputs, and the counting sort of the rows by token for the embedding backward */
    CK(cudaMemcpyAsync(a->tokens, tokens, n, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(a->targets, targets, n, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(a->weights, weights, sizeof(float) * n, cudaMemcpyHostToDevice, s));
    int count[DFT_VOCAB] = {0};
    for (size_t r = 0; r < n; r++) count[tokens[r]]++;
    a->h_offsets[0] = 0;
    for (int v = 0; v < DFT_VOCAB; v++) a->h_offsets[v + 1] = a->h_offsets[v] + count[v];
    int at_v[DFT_VOCAB];
    memcpy(at_v, a->h_offsets, sizeof at_v);
    for (size_t r = 0; r < n; r++) a->h_sorted[at_v[tokens[r]]++] = (int)r;
    CK(cudaMemcpyAsync(a->sorted, a->h_sorted, sizeof(int) * n, cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(a->offsets, a->h_offsets, sizeof a->h_offsets, cudaMemcpyHostToDevice, s));

    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_embed_fwd(a->layer[0].x, m->params + m->lay.wte, a->tokens, a->n, a->d, s));
    for (int l = 0; l < c->n_layers; l++) {
        layer_offsets w = offsets_of(m, l);
        gpu_layer *la = &a->layer[l];
        OK(attention_inputs(m, &w, a, la, err, errlen));
        OK(attention_fwd(m, at, a, la, err, errlen));
        OK(attention_outputs(m, &w, a, la, l + 1 < c->n_layers ? a->layer[l + 1].x : a->xfinal, err, errlen));
    }
    dft_prof_mark(m, DFT_PH_ELEM);
    CK(dftk_rmsnorm_fwd(a->nf, a->rstdf, a->xfinal, m->params + m->lay.final_norm, a->n, a->d, EPS, s));
    /* the head and the loss in chunks of rows: never all the float32 logits at once */
    for (size_t r0 = 0; r0 < n; r0 += LOGIT_CHUNK) {
        long rows = (long)(n - r0 < LOGIT_CHUNK ? n - r0 : LOGIT_CHUNK);
        dft_prof_mark(m, DFT_PH_MATMUL);
        OK(dft_blas_gemm(m->blas, (int)rows, DFT_VOCAB, a->d, a->nf + r0 * a->d, 0, m->wbf + m->lay.wout, 0, a->logits,
                         NULL, DFT_OUT_F32, 0.0f, err, errlen));
        dft_prof_mark(m, DFT_PH_ELEM);
        CK(dftk_cross_entropy(a->dlogits + r0 * DFT_VOCAB, a->wnll + r0, argmax ? a->argmax + r0 : NULL, a->logits,
                              a->targets + r0, a->weights + r0, grad_scale, rows, s));
    }
    CK(dftk_sum_f64(m->sum, a->wnll, n, m->partial, s));
    CK(cudaMemcpyAsync(loss, m->sum, sizeof(double), cudaMemcpyDeviceToHost, s));
    if (argmax) CK(cudaMemcpyAsync(argmax, a->argmax, n, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    return 0;
}

double dft_gpu_forward(dft_gpu_model *m, dft_gpu_acts *a, dft_attention *at, const uint8_t *tokens,
                       const uint8_t *targets, const float *weights, float grad_scale, uint8_t *argmax, char *err,
                       size_t errlen) {
    double loss = NAN;
    if (forward(m, a, at, tokens, targets, weights, grad_scale, argmax, &loss, err, errlen)) return NAN;
    return loss;
}

int dft_gpu_backward(dft_gpu_model *m, dft_gpu_acts *a, dft_attention *at, char *err, size_t errlen) {
    const dft_model_config *c = &m->cfg;
    const dft_param_layout *p = &m->lay;
    cudaStream_t s = m->stream;
    long n = a->n;
    int d = a->d, qd = a->qd, kvd = a->kvd;

    /* head and final norm; dlogits from the forward; dn a chunk of rows at a time */
    OK(mm_dw(m, p->wout, a->nf, a->dlogits, n, d, DFT_VOCAB, err, errlen));
    CK(cudaMemsetAsync(a->dres, 0, sizeof(float) * (size_t)n * d, s));
    for (long r0 = 0; r0 < n; r0 += a->dn_chunk) {
        long rows = n - r0 < a->dn_chunk ? n - r0 : a->dn_chunk;
        OK(mm_dx(m, a->dn, DFT_OUT_F32, a->dlogits + r0 * DFT_VOCAB, p->wout, rows, d, DFT_VOCAB, 0, err, errlen));
        dft_prof_mark(m, DFT_PH_ELEM);
        CK(dftk_rmsnorm_bwd(a->dres + r0 * d, a->dres_bf + r0 * d, m->grads + p->final_norm, a->norm_partial, a->dn,
                            a->xfinal + r0 * d, a->rstdf + r0, m->params + p->final_norm, rows, d, s));
    }

    for (int l = c->n_layers - 1; l >= 0; l--) {
        layer_offsets w = offsets_of(m, l);
        gpu_layer *la = &a->layer[l];
        int recompute = a->policy != DFT_CKPT_NONE;
        if (recompute) { /* rematerialise; only `layer` re-runs the attention forward */
            OK(attention_inputs(m, &w, a, la, err, errlen));
            if (a->policy == DFT_CKPT_LAYER) OK(attention_fwd(m, at, a, la, err, errlen));
            OK(mm(m, la->xmid, la->o, w.wo, n, qd, d, la->x, err, errlen));
        }
        for (long r0 = 0; r0 < n; r0 += MLP_CHUNK) { /* the MLP chunk by chunk (recomputed first if not kept) */
            long rows = n - r0 < MLP_CHUNK ? n - r0 : MLP_CHUNK;
            if (recompute) OK(mlp_forward(m, &w, a, la, r0, rows, NULL, err, errlen));
            OK(mlp_backward(m, &w, a, la, r0, rows, err, errlen));
        }
        /* attention: xmid = x + o Wo */
        OK(mm_dw(m, w.wo, la->o, a->dres_bf, n, qd, d, err, errlen));
        OK(mm_dx(m, a->dout, DFT_OUT_BF16, a->dres_bf, w.wo, n, qd, d, 0, err, errlen));
        OK(attention_bwd(m, at, a, la, err, errlen));
        dft_prof_mark(m, DFT_PH_ELEM);
        CK(dftk_rope(a->dq, a->cosv, a->sinv, n, a->rows, c->n_heads, a->hd, 1, s));
        CK(dftk_rope(a->dk, a->cosv, a->sinv, n, a->rows, c->n_kv_heads, a->hd, 1, s));
        OK(mm_dw(m, w.wq, la->n1, a->dq, n, d, qd, err, errlen));
        OK(mm_dw(m, w.wk, la->n1, a->dk, n, d, kvd, err, errlen));
        OK(mm_dw(m, w.wv, la->n1, a->dv, n, d, kvd, err, errlen));
        for (long r0 = 0; r0 < n; r0 += a->dn_chunk) {
            long rows = n - r0 < a->dn_chunk ? n - r0 : a->dn_chunk;
            OK(mm_dx(m, a->dn, DFT_OUT_F32, a->dq + r0 * qd, w.wq, rows, d, qd, 0, err, errlen));
            OK(mm_dx(m, a->dn, DFT_OUT_F32, a->dk + r0 * kvd, w.wk, rows, d, kvd, 1, err, errlen));
            OK(mm_dx(m, a->dn, DFT_OUT_F32, a->dv + r0 * kvd, w.wv, rows, d, kvd, 1, err, errlen));
            dft_prof_mark(m, DFT_PH_ELEM);
            CK(dftk_rmsnorm_bwd(a->dres + r0 * d, a->dres_bf + r0 * d, m->grads + w.attn_norm, a->norm_partial, a->dn,
                                la->x + r0 * d, la->rstd1 + r0, m->params + w.attn_norm, rows, d, s));
        }
    }
    CK(dftk_embed_bwd(m->grads + p->wte, a->dres, a->sorted, a->offsets, d, s));
    return 0;
}

int dft_gpu_update(dft_gpu_model *m, float max_norm, float lr, const dft_adamw *h, long t, char *err,
                   size_t errlen) {
    cudaStream_t s = m->stream;
    dft_prof_mark(m, DFT_PH_OPTIM);
    CK(dftk_sum_f32(m->sum, m->grads, m->total, 1, m->partial, s));
    CK(dftk_clip_factor(m->factor, m->sum, max_norm, s));
    const double b1 = h->beta1, b2 = h->beta2, tt = t < 1 ? 1.0 : (double)t;
    const double c1 = 1.0 - pow(b1, tt), c2 = 1.0 - pow(b2, tt);
    dft_param_tensor ts[16];
    int nt = dft_param_tensors(&m->cfg, ts);
    for (int i = 0; i < nt; i++) {
        size_t o = ts[i].offset;
        CK(dftk_adamw(m->params + o, m->wbf + o, m->grads + o, m->m + o, m->v + o, ts[i].count, m->factor, b1, b2,
                      h->eps, ts[i].is_matrix ? (double)h->weight_decay : 0.0, (double)lr, c1, c2, s));
    }
    return 0;
}

int dft_gpu_acts_groups(const dft_gpu_acts *a) { return a ? a->groups : 0; }
