/* Matmuls through cuBLASLt, in the CPU model's row-major convention (y = x W with W [in, out]).
 * bf16 operands, float32 accumulation (CUBLAS_COMPUTE_32F); the output is bf16 (activations)
 * or float32 (weight gradients, accumulated with beta = 1). One handle, workspace and stream
 * per dft_blas; the algorithm of each shape is chosen once (cuBLASLt's heuristic) and kept. */
#ifndef DFT_TRAIN_CUDA_GEMM_H
#define DFT_TRAIN_CUDA_GEMM_H

#include <cuda_runtime_api.h>
#include <stddef.h>

typedef struct dft_blas dft_blas;

typedef enum { DFT_OUT_BF16 = 0, DFT_OUT_F32 = 1 } dft_out_type;

/* 0, or -1 with the reason in err. */
int dft_blas_create(dft_blas **out, cudaStream_t stream, size_t workspace_bytes, char *err, size_t errlen);
void dft_blas_destroy(dft_blas *b);

/* Row-major C[M, N] = beta * Cin[M, N] + op(A)[M, K] op(B)[K, N]:
   A is stored [M, K] (trans_a = 0) or [K, M] (trans_a = 1), B [K, N] or [N, K] (trans_b = 1), both bf16;
   C and Cin are of type `out` (Cin may be C, or NULL for C; beta 0 ignores it).
   So: y = x W is (M n, N out, K in, 0, 0); dx = dy W^T is (n, in, out, 0, 1); dW += x^T dy is
   (in, out, n, 1, 0) with an f32 output and beta 1. 0, or -1 with the reason in err. */
int dft_blas_gemm(dft_blas *b, int M, int N, int K, const void *A, int trans_a, const void *B, int trans_b, void *C,
                  const void *Cin, dft_out_type out, float beta, char *err, size_t errlen);

#endif
