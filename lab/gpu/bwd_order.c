/* The backward's key-block grid order, timed: each case's backward with its key tiles in the
 * (batch, kv head) pairs' order, in the sections heuristics.h chooses, and in sections of a
 * fixed number of pairs (dfa__bwd_tile_order), interleaved round after round on one stream;
 * medians of CUDA event timings, as TFLOP/s of the backward (visible pairs, 2.5x the forward).
 *
 *   dfa_lab_bwd_order [--rounds 7]
 *
 * The bits of dk and dv do not depend on the order (test_gpu_attn checks it); this measures only
 * the tail the order leaves at the grid's end and what it does to the L2's reuse of Q and dO. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/launch.h"
#include "distflash_cuda.h"
#include "lab_cuda.h"
#include "testlib.h"

typedef struct {
    const char *name;
    int batch, seqlen, heads, kv_heads, head_dim, causal, window;
} lab_case;

static const lab_case cases[] = {
    {"d128 8k x4 causal GQA 32/4", 4, 8192, 32, 4, 128, 1, 0}, {"d128 32k x1 causal GQA 32/8", 1, 32768, 32, 8, 128, 1, 0},
    {"d128 4k x2 causal MQA 32/1", 2, 4096, 32, 1, 128, 1, 0}, {"d64 8k x4 causal GQA 64/8", 4, 8192, 64, 8, 64, 1, 0},
    {"d128 2k x16 causal", 16, 2048, 32, 32, 128, 1, 0},       {"d128 8k x4 causal", 4, 8192, 32, 32, 128, 1, 0},
    {"d128 32k x1 causal", 1, 32768, 32, 32, 128, 1, 0},       {"d64 8k x4 causal", 4, 8192, 64, 64, 64, 1, 0},
    {"d128 128k x1 window 4096", 1, 131072, 16, 16, 128, 1, 4096},
};
/* the forced sizes: -1 the pairs' order, 0 the heuristic's, else pairs per section */
static const int sizes[] = {-1, 0, 1, 2, 4, 8, 16, 32};
#define NSIZES ((int)(sizeof sizes / sizeof *sizes))

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void *dev_random(size_t n) {
    void *h = tl_alloc(DFA_BF16, (int64_t)n), *d;
    tl_fill_normal(DFA_BF16, h, (int64_t)n, 1.0);
    LAB_CUDA(cudaMalloc(&d, n * 2));
    LAB_CUDA(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

int main(int argc, char **argv) {
    int rounds = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: dfa_lab_bwd_order [--rounds R]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 64) rounds = 7;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bwd_order: no CUDA device\n");
        return 77;
    }
    tl_init("bwd_order");
    cudaEvent_t e0, e1;
    LAB_CUDA(cudaEventCreate(&e0));
    LAB_CUDA(cudaEventCreate(&e1));
    printf("%-30s", "case (bwd TFLOP/s)");
    for (int i = 0; i < NSIZES; i++) {
        if (sizes[i] < 0) printf(" %7s", "pairs");
        else if (sizes[i] == 0) printf(" %7s", "chosen");
        else printf(" %7d", sizes[i]);
    }
    printf("\n");
    float *t = malloc(sizeof(float) * (size_t)NSIZES * (size_t)rounds);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const lab_case *k = &cases[c];
        dfa_attn_desc d = dfa_attn_desc_init(k->batch, k->seqlen, k->seqlen, k->heads, k->kv_heads, k->head_dim);
        d.dtype = DFA_BF16;
        d.causal = k->causal;
        if (k->window) d.flags |= DFA_FLAG_WINDOW, d.window_left = k->window, d.window_right = 0;
        const size_t nq = (size_t)k->batch * k->seqlen * k->heads * k->head_dim;
        const size_t nk = (size_t)k->batch * k->seqlen * k->kv_heads * k->head_dim;
        void *q = dev_random(nq), *kk = dev_random(nk), *v = dev_random(nk), *dout = dev_random(nq);
        void *o, *dq, *dk, *dv;
        float *lse;
        LAB_CUDA(cudaMalloc(&o, nq * 2));
        LAB_CUDA(cudaMalloc(&dq, nq * 2));
        LAB_CUDA(cudaMalloc(&dk, nk * 2));
        LAB_CUDA(cudaMalloc(&dv, nk * 2));
        LAB_CUDA(cudaMalloc((void **)&lse, sizeof(float) * (size_t)k->batch * k->heads * k->seqlen));
        LAB_OK(dfa_attn_fwd_cuda(&d, q, kk, v, o, lse, 0));
        /* visible pairs: the causal triangle, or a window's band (rows past its start see w + 1) */
        const double s = k->seqlen, vis = k->window ? s * (k->window + 1) - 0.5 * k->window * (k->window + 1)
                                                    : (k->causal ? 0.5 * s * (s + 1) : s * s);
        const double flops = 2.5 * 4.0 * k->batch * k->heads * vis * k->head_dim;
        for (int w = 0; w < 2; w++) LAB_OK(dfa_attn_bwd_cuda(&d, q, kk, v, o, lse, dout, dq, dk, dv, 0));
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < NSIZES; i++) {
                dfa__cuda_force_bwd_sections(sizes[i]);
                LAB_CUDA(cudaEventRecord(e0, 0));
                for (int x = 0; x < 3; x++) LAB_OK(dfa_attn_bwd_cuda(&d, q, kk, v, o, lse, dout, dq, dk, dv, 0));
                LAB_CUDA(cudaEventRecord(e1, 0));
                LAB_CUDA(cudaEventSynchronize(e1));
                LAB_CUDA(cudaEventElapsedTime(&t[i * rounds + r], e0, e1));
            }
        dfa__cuda_force_bwd_sections(0);
        printf("%-30s", k->name);
        for (int i = 0; i < NSIZES; i++) {
            qsort(t + i * rounds, (size_t)rounds, sizeof(float), cmp_float);
            printf(" %7.1f", flops / (t[i * rounds + rounds / 2] / 3 * 1e-3) / 1e12);
        }
        printf("\n");
        fflush(stdout);
        void *bufs[] = {q, kk, v, dout, o, dq, dk, dv, lse};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) LAB_CUDA(cudaFree(bufs[i]));
    }
    free(t);
    return 0;
}
