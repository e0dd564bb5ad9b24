/* The element-wise kernels of the CUDA compute table. Memory-bound and simple: grid-stride
 * loops, 16-byte accesses where the pointers allow them. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels.cuh"

namespace {

constexpr int THREADS = 256;

/* Enough blocks to fill the device a few times over; the loops stride over the rest. */
unsigned blocks_for(int64_t n) {
    const int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

__global__ void fill_kernel(float *p, int64_t n, float value) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = value;
}

__global__ void add4_kernel(float4 *acc, const float4 *x, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 a = acc[i];
        const float4 b = x[i];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        acc[i] = a;
    }
}

__global__ void add_kernel(float *acc, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] += x[i];
}

template <int DTYPE> __device__ __forceinline__ void put(void *dst, int64_t i, float x) {
    if (DTYPE == 0) ((float *)dst)[i] = x;
    else if (DTYPE == 1) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(x);
    else ((__half *)dst)[i] = __float2half_rn(x);
}

/* width == dst_pitch is the common, contiguous case; otherwise a group of heads of each row */
template <int DTYPE>
__global__ void store_kernel(const float *src, void *dst, int64_t rows, int64_t width, int64_t pitch, const int *gate) {
    if (gate && *gate != 1) return;
    const int64_t n = rows * width;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        put<DTYPE>(dst, width == pitch ? i : i / width * pitch + i % width, src[i]);
}

/* store_kernel four elements at a time (width and pitch multiples of 4, src 16-byte and dst
   4-element aligned): one 16-byte load and one 8-byte (16-bit types) or 16-byte store each,
   where the scalar loop stays well below the memory's bandwidth; rounding the outputs is a
   fixed cost of every distributed call. */
template <int DTYPE>
__global__ void store4_kernel(const float4 *src, void *dst, int64_t rows, int64_t width, int64_t pitch,
                              const int *gate) {
    if (gate && *gate != 1) return;
    const int64_t n4 = rows * width / 4;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 x = src[i];
        const int64_t e = 4 * i, at = width == pitch ? e : e / width * pitch + e % width;
        if (DTYPE == 0) {
            *(float4 *)((float *)dst + at) = x;
        } else if (DTYPE == 1) {
            const __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
            *(uint2 *)((__nv_bfloat16 *)dst + at) = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
        } else {
            const __half2 a = __floats2half2_rn(x.x, x.y), b = __floats2half2_rn(x.z, x.w);
            *(uint2 *)((__half *)dst + at) = make_uint2(*(const uint32_t *)&a, *(const uint32_t *)&b);
        }
    }
}

/* One warp per (batch, row, head): the lanes share the head's D columns. */
__global__ void merge_rows_kernel(int batch, int heads, int D, int n, int r0, int r, float *o_acc, float *lse_acc,
                                  const float *o_part, const float *lse_part) {
    const int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (w >= (int64_t)batch * r * heads) return;
    const int h = (int)(w % heads), i = (int)(w / heads % r), b = (int)(w / heads / r);
    float *la = &lse_acc[((int64_t)b * heads + h) * n + r0 + i];
    const float lb = lse_part[((int64_t)b * heads + h) * r + i];
    float *oa = o_acc + (((int64_t)b * n + r0 + i) * heads + h) * D;
    const float *ob = o_part + (((int64_t)b * r + i) * heads + h) * D;
    const float l0 = *la;
    __syncwarp();
    if (lb == -INFINITY) return; /* the partial saw no key: nothing to add */
    if (l0 == -INFINITY) {
        for (int c = lane; c < D; c += 32) oa[c] = ob[c];
        if (lane == 0) *la = lb;
        return;
    }
    const float mx = l0 > lb ? l0 : lb;
    const float lse = mx + logf(expf(l0 - mx) + expf(lb - mx));
    const float wa = expf(l0 - lse), wb = expf(lb - lse);
    for (int c = lane; c < D; c += 32) oa[c] = wa * oa[c] + wb * ob[c];
    if (lane == 0) *la = lse;
}

__global__ void set_vec_kernel(int64_t *dst, dfa__sp_vec v, int n) {
    if (threadIdx.x < n) dst[threadIdx.x] = v.v[threadIdx.x];
}

__global__ void gate_kernel(const int64_t *v, int nf, int *gate) {
    int ok = v[0] == INT64_MIN;
    for (int i = 0; i < nf; i++) ok &= v[1 + i] == -v[1 + nf + i];
    *gate = ok;
}

} // namespace

extern "C" cudaError_t dfa__sp_fill_f32(float *p, int64_t n, float value, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    fill_kernel<<<blocks_for(n), THREADS, 0, stream>>>(p, n, value);
    return cudaGetLastError();
}

extern "C" cudaError_t dfa__sp_add_f32(float *acc, const float *x, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (n % 4 == 0 && aligned16(acc) && aligned16(x))
        add4_kernel<<<blocks_for(n / 4), THREADS, 0, stream>>>((float4 *)acc, (const float4 *)x, n / 4);
    else
        add_kernel<<<blocks_for(n), THREADS, 0, stream>>>(acc, x, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dfa__sp_store(int dtype, const float *src, void *dst, int64_t rows, int64_t width,
                                     int64_t dst_pitch, const int *gate, cudaStream_t stream) {
    const int64_t n = rows * width;
    if (n <= 0) return cudaSuccess;
    const size_t es = dtype == 0 ? 4 : 2;
    if (width % 4 == 0 && dst_pitch % 4 == 0 && aligned16(src) && ((uintptr_t)dst & (4 * es - 1)) == 0) {
        const unsigned g4 = blocks_for(n / 4);
        const float4 *s4 = (const float4 *)src;
        if (dtype == 1) store4_kernel<1><<<g4, THREADS, 0, stream>>>(s4, dst, rows, width, dst_pitch, gate);
        else if (dtype == 2) store4_kernel<2><<<g4, THREADS, 0, stream>>>(s4, dst, rows, width, dst_pitch, gate);
        else store4_kernel<0><<<g4, THREADS, 0, stream>>>(s4, dst, rows, width, dst_pitch, gate);
        return cudaGetLastError();
    }
    const unsigned g = blocks_for(n);
    if (dtype == 1) store_kernel<1><<<g, THREADS, 0, stream>>>(src, dst, rows, width, dst_pitch, gate);
    else if (dtype == 2) store_kernel<2><<<g, THREADS, 0, stream>>>(src, dst, rows, width, dst_pitch, gate);
    else store_kernel<0><<<g, THREADS, 0, stream>>>(src, dst, rows, width, dst_pitch, gate);
    return cudaGetLastError();
}

extern "C" cudaError_t dfa__sp_merge_rows(int batch, int heads, int head_dim, int n, int r0, int r, float *o_acc,
                                          float *lse_acc, const float *o_part, const float *lse_part,
                                          cudaStream_t stream) {
    const int64_t warps = (int64_t)batch * r * heads;
    if (warps <= 0) return cudaSuccess;
    const int64_t blocks = (warps * 32 + THREADS - 1) / THREADS;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    merge_rows_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(batch, heads, head_dim, n, r0, r, o_acc, lse_acc,
                                                                o_part, lse_part);
    return cudaGetLastError();
}

extern "C" cudaError_t dfa__sp_set_vec(int64_t *dst, dfa__sp_vec v, int n, cudaStream_t stream) {
    set_vec_kernel<<<1, 32, 0, stream>>>(dst, v, n);
    return cudaGetLastError();
}

extern "C" cudaError_t dfa__sp_gate(const int64_t *v, int nf, int *gate, cudaStream_t stream) {
    gate_kernel<<<1, 1, 0, stream>>>(v, nf, gate);
    return cudaGetLastError();
}
