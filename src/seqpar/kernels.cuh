/* Internal: the element-wise device kernels of the CUDA compute table (compute_cuda.c).
 * Each launcher enqueues one kernel on `stream` and returns the launch's status. */
#ifndef DFA_SEQPAR_KERNELS_CUH
#define DFA_SEQPAR_KERNELS_CUH

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* p[i] = value, i < n */
cudaError_t dfa__sp_fill_f32(float *p, int64_t n, float value, cudaStream_t stream);
/* acc[i] += x[i], i < n */
cudaError_t dfa__sp_add_f32(float *acc, const float *x, int64_t n, cudaStream_t stream);
/* dst = src rounded to nearest even in dtype (0 f32, 1 bf16, 2 f16): rows of width values,
   src packed, dst rows dst_pitch values apart; nothing when gate is non-NULL and *gate != 1 */
cudaError_t dfa__sp_store(int dtype, const float *src, void *dst, int64_t rows, int64_t width, int64_t dst_pitch,
                          const int *gate, cudaStream_t stream);
/* dfa_attn_merge's rule for a packed window of r rows into rows [r0, r0 + r) of float32
   accumulators (layouts of compute.h merge_rows) */
cudaError_t dfa__sp_merge_rows(int batch, int heads, int head_dim, int n, int r0, int r, float *o_acc,
                               float *lse_acc, const float *o_part, const float *lse_part, cudaStream_t stream);

/* The per-call agreement vector (comm_nccl.c): at most this many int64 values. */
#define DFA__SP_AGREE_MAX 40
typedef struct {
    int64_t v[DFA__SP_AGREE_MAX];
} dfa__sp_vec;
/* dst[i] = v.v[i], i < n */
cudaError_t dfa__sp_set_vec(int64_t *dst, dfa__sp_vec v, int n, cudaStream_t stream);
/* *gate = 1 when the reduced vector says no rank failed (v[0] == INT64_MIN) and the nf
   fields agree (v[1 + i] == -v[1 + nf + i]), else 0 */
cudaError_t dfa__sp_gate(const int64_t *v, int nf, int *gate, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
