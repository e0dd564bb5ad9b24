/* Dense float32 matrix products for the model's linear layers, row-major throughout.
 * Each output element is summed by one thread in a fixed order, so results do not
 * depend on the thread count. */
#ifndef DFT_MODEL_MATMUL_H
#define DFT_MODEL_MATMUL_H

/* C[M,N] (+)= A[M,K] B[K,N]; accumulate = 0 overwrites C. (Forward: y = x W.) */
void dft_gemm_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate);

/* C[K,N] += A[M,K]^T B[M,N]. (Weight gradient: dW += x^T dy.) */
void dft_gemm_tn_acc(float *C, const float *A, const float *B, int M, int K, int N);

/* C[M,K] (+)= A[M,N] B[K,N]^T. (Input gradient: dx = dy W^T.) */
void dft_gemm_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate);

#endif
