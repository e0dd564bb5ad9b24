/* Merge of partial results on the device. */
#include <cuda_runtime.h>
#include <math.h>

#include "launch.cuh"
#include "ptx.cuh"

template <int T> static __device__ __forceinline__ float dfa__ld(const void *p, long long i) {
    if (T == DFA_F32) return ((const float *)p)[i];
    const unsigned short h = ((const unsigned short *)p)[i];
    if (T == DFA_BF16) return __uint_as_float((uint32_t)h << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
template <int T> static __device__ __forceinline__ void dfa__st(void *p, long long i, float x) {
    if (T == DFA_F32) {
        ((float *)p)[i] = x;
        return;
    }
    unsigned short h;
    if (T == DFA_BF16)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    ((unsigned short *)p)[i] = h;
}

/* One warp per (batch, row, head), in the memory order of o. */
template <int T>
__global__ void dfa__merge_kernel(int seqlen_q, int num_heads, int head_dim, long long rows, void *o_acc, float *lse_acc,
                                  const void *o_part, const float *lse_part) {
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const long long h = r % num_heads, bi = r / num_heads, b = bi / seqlen_q, i = bi % seqlen_q;
    const long long li = (b * num_heads + h) * seqlen_q + i;
    const float la = lse_acc[li], lb = lse_part[li];
    const long long first = r * head_dim;
    if (lb == -INFINITY) {
        if (la == -INFINITY)
            for (int c = lane; c < head_dim; c += 32) dfa__st<T>(o_acc, first + c, 0.0f);
        return;
    }
    if (la == -INFINITY) {
        for (int c = lane; c < head_dim; c += 32) dfa__st<T>(o_acc, first + c, dfa__ld<T>(o_part, first + c));
    } else {
        const float mx = la > lb ? la : lb;
        const float lse = mx + logf(expf(la - mx) + expf(lb - mx));
        const float wa = expf(la - lse), wb = expf(lb - lse);
        for (int c = lane; c < head_dim; c += 32)
            dfa__st<T>(o_acc, first + c, wa * dfa__ld<T>(o_acc, first + c) + wb * dfa__ld<T>(o_part, first + c));
        __syncwarp();
        if (lane == 0) lse_acc[li] = lse;
        return;
    }
    __syncwarp();
    if (lane == 0) lse_acc[li] = lb;
}

extern "C" dfa_status dfa__cuda_merge(int dtype, int batch, int seqlen_q, int num_heads, int head_dim, void *o_acc,
                                      float *lse_acc, const void *o_part, const float *lse_part, cudaStream_t stream,
                                      const char *fn) {
    dfa_status st = DFA_OK;
    if (dfa__cuda_device_cc(fn, &st) < 0) return st;
    const long long rows = (long long)batch * seqlen_q * num_heads;
    void (*kernel)(int, int, int, long long, void *, float *, const void *, const float *) =
        dtype == DFA_F32 ? dfa__merge_kernel<DFA_F32> : dtype == DFA_BF16 ? dfa__merge_kernel<DFA_BF16> : dfa__merge_kernel<DFA_F16>;
    return dfa__launch(kernel, (rows + 7) / 8, 256, 0, stream, fn, "rows", "merge kernel launch", seqlen_q, num_heads,
                       head_dim, rows, o_acc, lse_acc, o_part, lse_part);
}
