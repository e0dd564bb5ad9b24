/* Attention sinks on the device (the math is in distflash.h, "Logits, softcap and sinks"),
 * outside the attention kernels. The single-device forward's kernels add the sinks themselves
 * (tile.cuh, dfa__row_finish); the sequence-parallel executor's blocks run without them, and
 * one element-wise pass here adds them to the merged float32 accumulators (o and lse), before
 * their only rounding. The backward's kernels need nothing (their P = exp(s - lse) with an lse
 * that holds the sink), and one reduction here gives dsinks. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "launch.cuh"

/* Element i of a 16-bit (T: DFA_BF16 or DFA_F16) o or dout, as float. */
template <int T> static __device__ __forceinline__ float dfa__sink_ld(const void *p, long long i) {
    const unsigned short h = ((const unsigned short *)p)[i];
    if (T == DFA_BF16) return __uint_as_float((uint32_t)h << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* The host's dfa__lse_add_sink (src/common/sinks.h), on the device: the row's lse with the sink
   in its normaliser, and in *scale the factor its o takes (0 for a row that saw no key). */
static __device__ __forceinline__ float dfa__lse_with_sink(float lse, float sink, float *scale) {
    if (lse == -INFINITY) {
        *scale = 0.0f;
        return sink;
    }
    const float e = expf(sink - lse);
    *scale = 1.0f / (1.0f + e);
    return lse >= sink ? lse + log1pf(e) : sink + log1pf(expf(lse - sink));
}

/* One warp per (batch, row, head) in o's memory order ([batch, seqlen, heads, dv], float32); lse
   is [batch, heads, seqlen]. Every lane computes the row's factor (the same bits), lane 0 writes
   the new lse once the row's o has been read. */
__global__ void dfa__add_sinks_kernel(int seqlen, int heads, int dv, long long rows, float *o, float *lse,
                                      const float *sinks) {
    const long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const long long h = r % heads, bi = r / heads, b = bi / seqlen, i = bi % seqlen;
    const long long li = (b * heads + h) * seqlen + i;
    float scale;
    const float l = dfa__lse_with_sink(lse[li], sinks[h], &scale);
    const long long first = r * dv;
    for (int c = lane; c < dv; c += 32) o[first + c] *= scale;
    __syncwarp();
    if (lane == 0) lse[li] = l;
}

extern "C" dfa_status dfa__cuda_add_sinks(int batch, int seqlen, int heads, int dv, float *o, float *lse,
                                          const float *sinks, cudaStream_t stream, const char *fn) {
    const long long rows = (long long)batch * seqlen * heads;
    return dfa__launch(dfa__add_sinks_kernel, (rows + 7) / 8, 256, 0, stream, fn, "rows", "sink kernel launch", seqlen,
                       heads, dv, rows, o, lse, sinks);
}

#define DFA__DSINK_THREADS 256

/* One CTA per head: dsinks[h] = -sum over (b, i) of exp(sinks[h] - lse) D, in a fixed order
   for a fixed launch (every thread sums its own rows in order, in float64, then a tree over
   the CTA's threads), so the bits never depend on timing; no atomics. D is dsum[b][h][i] (the
   backward's D pass) or, with dsum NULL, dout_i . o_i from the 16-bit o and dout (T: their
   type), one warp per row with a butterfly sum over its lanes. With gate non-NULL dsinks is
   written only when *gate == 1 (the device-side agreement of the distributed calls). */
template <int T>
__global__ void __launch_bounds__(DFA__DSINK_THREADS)
    dfa__dsinks_kernel(int batch, int seqlen, int heads, int dv, const void *o, const void *dout, const float *dsum,
                       const float *lse, const float *sinks, float *dsinks, const int *gate) {
    __shared__ double part[DFA__DSINK_THREADS];
    const int h = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const long long rows = (long long)batch * seqlen;
    const float sink = sinks[h];
    double acc = 0.0;
    if (dsum) {
        for (long long r = t; r < rows; r += DFA__DSINK_THREADS) {
            const long long li = ((r / seqlen) * heads + h) * seqlen + r % seqlen;
            const float l = lse[li];
            if (l != -INFINITY) acc += (double)expf(sink - l) * (double)dsum[li];
        }
    } else {
        for (long long r = warp; r < rows; r += DFA__DSINK_THREADS / 32) {
            const long long b = r / seqlen, i = r % seqlen, at = ((b * seqlen + i) * heads + h) * dv;
            float d = 0.0f;
            for (int c = lane; c < dv; c += 32) d = fmaf(dfa__sink_ld<T>(o, at + c), dfa__sink_ld<T>(dout, at + c), d);
#pragma unroll
            for (int s = 16; s > 0; s >>= 1) d += __shfl_xor_sync(0xffffffffu, d, s);
            const float l = lse[(b * heads + h) * seqlen + i];
            if (lane == 0 && l != -INFINITY) acc += (double)expf(sink - l) * (double)d;
        }
    }
    part[t] = acc;
    __syncthreads();
    for (int s = DFA__DSINK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        __syncthreads();
    }
    if (t == 0 && (!gate || *gate == 1)) dsinks[h] = (float)-part[0];
}

extern "C" dfa_status dfa__cuda_dsinks(int bf16, int batch, int seqlen, int heads, int dv, const void *o,
                                       const void *dout, const float *dsum, const float *lse, const float *sinks,
                                       float *dsinks, const int *gate, cudaStream_t stream, const char *fn) {
    void (*kernel)(int, int, int, int, const void *, const void *, const float *, const float *, const float *,
                   float *, const int *) = bf16 ? dfa__dsinks_kernel<DFA_BF16> : dfa__dsinks_kernel<DFA_F16>;
    return dfa__launch(kernel, heads, DFA__DSINK_THREADS, 0, stream, fn, "heads", "dsinks kernel launch", batch,
                       seqlen, heads, dv, o, dout, dsum, lse, sinks, dsinks, gate);
}
