/* Internal to matmul.c: the micro-kernel's signature and its builds. */
#ifndef DFT_TRAIN_MODEL_MATMUL_IMPL_H
#define DFT_TRAIN_MODEL_MATMUL_IMPL_H

typedef void (*dft_mm_block_fn)(float *C, int ldc, const float *A, long ars, long aks, const float *B, int ldb,
                                 int K, int rows, int cols, int accumulate);

/* A kernel computes blocks of up to rows x cols outputs; full blocks take its fast path. */
typedef struct {
    dft_mm_block_fn fn;
    int rows, cols;
} dft_mm_kernel;

extern const dft_mm_kernel dft_mm_kernel_portable;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DFA_MM_HAVE_AVX2 1
extern const dft_mm_kernel dft_mm_kernel_avx2;
#endif

#endif
