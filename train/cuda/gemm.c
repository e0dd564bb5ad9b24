/* cuBLASLt behind dft_blas_gemm (gemm.h). cuBLASLt is column-major: a row-major [r, c]
 * matrix is a column-major [c, r] one, so the row-major C = op(A) op(B) is computed as the
 * column-major C^T = op(B)^T op(A)^T, i.e. cuBLASLt's A is our B and its B our A. */
#include "gemm.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE 128

typedef struct {
    int M, N, K, ta, tb, out, beta_zero, used;
    unsigned align; /* the operands' smallest address alignment the algorithm was chosen for */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} plan;

struct dft_blas {
    cublasLtHandle_t h;
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
    plan plans[CACHE];
    int next; /* round-robin eviction */
};

static int lt_fail(cublasStatus_t st, const char *what, char *err, size_t errlen) {
    snprintf(err, errlen, "%s failed: cuBLAS status %d (%s)", what, (int)st, cublasLtGetStatusString(st));
    return -1;
}

int dft_blas_create(dft_blas **out, cudaStream_t stream, size_t workspace_bytes, char *err, size_t errlen) {
    dft_blas *b = calloc(1, sizeof *b);
    if (!b) return (snprintf(err, errlen, "out of memory"), -1);
    cublasStatus_t st = cublasLtCreate(&b->h);
    if (st != CUBLAS_STATUS_SUCCESS) return free(b), lt_fail(st, "cublasLtCreate", err, errlen);
    cudaError_t e = cudaMalloc(&b->ws, workspace_bytes ? workspace_bytes : 1);
    if (e != cudaSuccess) {
        cublasLtDestroy(b->h), free(b);
        snprintf(err, errlen, "cudaMalloc of the cuBLASLt workspace: %s", cudaGetErrorString(e));
        return -1;
    }
    b->stream = stream, b->ws_bytes = workspace_bytes;
    *out = b;
    return 0;
}

static void plan_free(plan *p) {
    if (!p->used) return;
    cublasLtMatmulDescDestroy(p->op);
    cublasLtMatrixLayoutDestroy(p->la), cublasLtMatrixLayoutDestroy(p->lb), cublasLtMatrixLayoutDestroy(p->lc);
    p->used = 0;
}

void dft_blas_destroy(dft_blas *b) {
    if (!b) return;
    for (int i = 0; i < CACHE; i++) plan_free(&b->plans[i]);
    cudaFree(b->ws);
    cublasLtDestroy(b->h);
    free(b);
}

/* The largest power of two (at most 256) dividing every address: cuBLASLt's heuristic assumes
   256-byte aligned operands unless told otherwise, and a weight inside the flat parameter array
   is only 16-byte aligned. */
static unsigned alignment_of(const void *const *ptrs, int n) {
    unsigned a = 256;
    for (int i = 0; i < n; i++)
        if (ptrs[i])
            while (a > 1 && ((uintptr_t)ptrs[i] & (a - 1))) a /= 2;
    return a;
}

static int make_plan(dft_blas *b, plan *p, int M, int N, int K, int ta, int tb, int out, int beta_zero,
                     unsigned align, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    cublasStatus_t st = cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(st, "cublasLtMatmulDescCreate", err, errlen);
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    /* column-major view: cuBLAS A = our B (stored N x K if op N, K x N if op T), B = our A */
    cudaDataType_t ct = out == DFT_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    st = cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, tb ? K : N, tb ? N : K, tb ? K : N);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, ta ? M : K, ta ? K : M, ta ? M : K);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&p->lc, ct, N, M, N);
    p->used = 1;
    if (st != CUBLAS_STATUS_SUCCESS) return plan_free(p), lt_fail(st, "cublasLtMatrixLayoutCreate", err, errlen);
    cublasLtMatmulPreference_t pref;
    st = cublasLtMatmulPreferenceCreate(&pref);
    if (st != CUBLAS_STATUS_SUCCESS) return plan_free(p), lt_fail(st, "cublasLtMatmulPreferenceCreate", err, errlen);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &b->ws_bytes,
                                         sizeof b->ws_bytes);
    uint32_t al = align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    /* split-K partial sums reduced in float32 or not at all, never in the bf16 output type (a
       bf16 reduction of partials cost the residual adds a few percent of accuracy) */
    uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                         sizeof reductions);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(b->h, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        plan_free(p);
        if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(st, "cublasLtMatmulAlgoGetHeuristic", err, errlen);
        snprintf(err, errlen, "cuBLASLt has no algorithm for a %d x %d x %d matmul (%s output)", M, N, K,
                 out == DFT_OUT_F32 ? "f32" : "bf16");
        return -1;
    }
    p->algo = res.algo;
    p->M = M, p->N = N, p->K = K, p->ta = ta, p->tb = tb, p->out = out, p->beta_zero = beta_zero, p->align = align;
    return 0;
}

int dft_blas_gemm(dft_blas *b, int M, int N, int K, const void *A, int trans_a, const void *B, int trans_b, void *C,
                  const void *Cin, dft_out_type out, float beta, char *err, size_t errlen) {
    if (M < 1 || N < 1 || K < 1) {
        snprintf(err, errlen, "bad matmul shape %d x %d x %d", M, N, K);
        return -1;
    }
    int bz = beta == 0.0f;
    const void *ptrs[4] = {A, B, C, bz ? NULL : Cin};
    unsigned align = alignment_of(ptrs, 4);
    plan *p = NULL;
    for (int i = 0; i < CACHE && !p; i++) {
        plan *q = &b->plans[i];
        if (q->used && q->M == M && q->N == N && q->K == K && q->ta == trans_a && q->tb == trans_b && q->out == (int)out &&
            q->beta_zero == bz && q->align == align)
            p = q;
    }
    if (!p) {
        p = &b->plans[b->next];
        b->next = (b->next + 1) % CACHE;
        plan_free(p);
        if (make_plan(b, p, M, N, K, trans_a, trans_b, out, bz, align, err, errlen)) return -1;
    }
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(b->h, p->op, &alpha, B, p->la, A, p->lb, &beta, Cin ? Cin : C, p->lc, C, p->lc,
                                       &p->algo, b->ws, b->ws_bytes, b->stream);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(st, "cublasLtMatmul", err, errlen);
    return 0;
}
