/* Dense float32 matrix products for the model's linear layers, row-major throughout.
 *
 * Two backends compute them (chosen at build time with the CMake option DFA_WITH_CBLAS, and at
 * run time with DFA_MM_BACKEND=own|blas for measurements):
 *   own   our register-blocked micro-kernel (matmul.c): each output element is summed by one
 *         thread in a fixed order, so results do not depend on the thread count;
 *   blas  OpenBLAS's cblas_sgemm (matmul_cblas.c). OpenBLAS's own threading is not the same
 *         bits for every thread count, so it is pinned to one thread and the output is cut into
 *         chunks fixed by the shape, spread over OpenMP's threads: again the same bits for any
 *         thread count (tests/train/test_matmul.c checks both backends at 1-4 threads).
 *         Its results differ from the own backend's in the last bits, so a checkpoint resumes
 *         bitwise only with the backend that wrote it.
 * Both are deterministic run to run. */
#ifndef DFT_TRAIN_MODEL_MATMUL_H
#define DFT_TRAIN_MODEL_MATMUL_H

/* C[M,N] (+)= A[M,K] B[K,N]; accumulate = 0 overwrites C. (Forward: y = x W.) */
void dft_gemm_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate);

/* C[K,N] += A[M,K]^T B[M,N]. (Weight gradient: dW += x^T dy.) */
void dft_gemm_tn_acc(float *C, const float *A, const float *B, int M, int K, int N);

/* C[M,K] (+)= A[M,N] B[K,N]^T. (Input gradient: dx = dy W^T.) */
void dft_gemm_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate);

typedef enum { DFT_MM_OWN = 0, DFT_MM_BLAS = 1 } dft_mm_backend;

/* The backend dft_gemm_* use now: the build's default, or DFA_MM_BACKEND's when it names one
   this build has (read once). */
dft_mm_backend dft_gemm_backend(void);
/* Makes dft_gemm_* use b; -1 if this build lacks it (DFA_WITH_CBLAS=OFF or OpenBLAS not found). */
int dft_gemm_use(dft_mm_backend b);
/* 1 if this build has OpenBLAS. */
int dft_gemm_have_blas(void);
/* A short description for reports, e.g. "OpenBLAS 0.3.21 (Zen), one thread per call, ..." or
   "own micro-kernel (AVX2+FMA)". */
const char *dft_gemm_describe(void);

/* The backends themselves (for the tests and the kernel lab); same contracts as above.
   The blas ones exist only when dft_gemm_have_blas(). */
void dft_mm_own_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate);
void dft_mm_own_tn_acc(float *C, const float *A, const float *B, int M, int K, int N);
void dft_mm_own_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate);
#ifdef DFT_HAVE_CBLAS
void dft_mm_blas_nn(float *C, const float *A, const float *B, int M, int K, int N, int accumulate);
void dft_mm_blas_tn_acc(float *C, const float *A, const float *B, int M, int K, int N);
void dft_mm_blas_nt(float *C, const float *A, const float *B, int M, int N, int K, int accumulate);
#endif
/* The own kernel's instruction set: "AVX2+FMA" or "portable". */
const char *dft_mm_own_isa(void);

#endif
