/* The matmul micro-kernel for AVX2 + FMA (this file is compiled with -mavx2 -mfma). */
#include "train/model/matmul_impl.h"

#if defined(DFA_MM_HAVE_AVX2)
#define DFA_MM_KERNEL dft_mm_kernel_avx2
#include "train/model/matmul_block.h"
#endif
