/* The GPU model's element-wise, normalisation, loss and optimiser kernels (kernels.h).
 * Grid-stride loops over 64-bit indices (n x ffn passes 2^31 at long contexts). */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "kernels.h"

namespace {

constexpr int THREADS = 256;

unsigned blocks_for(long n) {
    long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

__device__ __forceinline__ float ld(const dft_bf16 *p, long i) {
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}
__device__ __forceinline__ void st(dft_bf16 *p, long i, float x) { ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x); }

/* Sum over the block in a fixed tree (the same bits for the same inputs). */
template <typename T> __device__ T block_sum(T x, T *sh) {
    sh[threadIdx.x] = x;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

/* 8 bf16 values: one 16-byte access */
union bf8 {
    uint4 v;
    __nv_bfloat16 h[8];
};

#define GRID_LOOP(i, n) for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

__global__ void embed_fwd_k(dft_bf16 *x, const float *wte, const uint8_t *tokens, long n, int d) {
    GRID_LOOP(i, n * d) {
        long r = i / d;
        st(x, i, wte[(long)tokens[r] * d + i % d]);
    }
}

/* block (v, 32 columns), 8 warps: warp w sums the rows j = w, w + 8, ... of token v's list (ascending
   rows) over its lane's column, then warp 0 adds the 8 sums in order: a fixed order whatever the
   timing, and 8 rows in flight per column for a byte that fills much of the sequence (spaces). */
#define EMBED_WARPS 8
__global__ void embed_bwd_k(float *dwte, const float *dres, const int *rows, const int *offsets, int d) {
    __shared__ float part[EMBED_WARPS][32];
    int v = blockIdx.x, lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.y * 32 + lane;
    int begin = offsets[v], end = offsets[v + 1];
    if (begin == end) return; /* the whole block: a byte that does not occur */
    float acc = 0.0f;
    if (c < d) {
#pragma unroll 4
        for (int j = begin + w; j < end; j += EMBED_WARPS) acc += dres[(long)rows[j] * d + c];
    }
    part[w][lane] = acc;
    __syncthreads();
    if (w == 0 && c < d) {
        float sum = 0.0f;
        for (int k = 0; k < EMBED_WARPS; k++) sum += part[k][lane];
        dwte[(long)v * d + c] += sum;
    }
}

__global__ void rmsnorm_fwd_k(dft_bf16 *out, float *rstd, const dft_bf16 *x, const float *gain, int d, float eps) {
    __shared__ float sh[THREADS];
    long r = blockIdx.x;
    const dft_bf16 *xr = x + r * d;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = ld(xr, i);
        ss += v * v;
    }
    ss = block_sum(ss, sh);
    float s = rsqrtf(ss / d + eps);
    if (threadIdx.x == 0) rstd[r] = s;
    for (int i = threadIdx.x; i < d; i += blockDim.x) st(out + r * d, i, ld(xr, i) * s * gain[i]);
}

__global__ void rmsnorm_bwd_k(float *dx, dft_bf16 *dxb, float *partial, const float *dout, const dft_bf16 *x,
                              const float *rstd, const float *gain, long n, int d, long per_block) {
    extern __shared__ float dg[]; /* this block's dgain, d floats; thread t owns columns t + k*blockDim */
    __shared__ float sh[THREADS];
    for (int i = threadIdx.x; i < d; i += blockDim.x) dg[i] = 0.0f;
    long r0 = blockIdx.x * per_block, r1 = r0 + per_block < n ? r0 + per_block : n;
    for (long r = r0; r < r1; r++) {
        const float *dr = dout + r * d;
        const dft_bf16 *xr = x + r * d;
        float s = rstd[r], dot = 0.0f;
        for (int i = threadIdx.x; i < d; i += blockDim.x) dot += dr[i] * gain[i] * ld(xr, i);
        dot = block_sum(dot, sh);
        float c = dot * s * s * s / d;
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float xi = ld(xr, i), di = dr[i];
            float nx = dx[r * d + i] + (s * gain[i] * di - xi * c);
            dx[r * d + i] = nx;
            if (dxb) st(dxb + r * d, i, nx);
            dg[i] += di * xi * s;
        }
    }
    for (int i = threadIdx.x; i < d; i += blockDim.x) partial[(long)blockIdx.x * d + i] = dg[i];
}

/* The same two with 16-byte accesses (d % 8 == 0 and aligned rows: every row of the model). */
__global__ void rmsnorm_fwd8_k(dft_bf16 *out, float *rstd, const dft_bf16 *x, const float *gain, int d, float eps) {
    __shared__ float sh[THREADS];
    long r = blockIdx.x;
    int d8 = d / 8;
    const uint4 *xr = (const uint4 *)(x + r * d);
    const float4 *g4 = (const float4 *)gain;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < d8; i += blockDim.x) {
        bf8 v;
        v.v = xr[i];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float f = __bfloat162float(v.h[k]);
            ss += f * f;
        }
    }
    ss = block_sum(ss, sh);
    float s = rsqrtf(ss / d + eps);
    if (threadIdx.x == 0) rstd[r] = s;
    uint4 *orow = (uint4 *)(out + r * d);
    for (int i = threadIdx.x; i < d8; i += blockDim.x) {
        bf8 v, o;
        v.v = xr[i];
        float4 ga = g4[2 * i], gb = g4[2 * i + 1];
        float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
        for (int k = 0; k < 8; k++) o.h[k] = __float2bfloat16_rn(__bfloat162float(v.h[k]) * s * g[k]);
        orow[i] = o.v;
    }
}

__global__ void rmsnorm_bwd8_k(float *dx, dft_bf16 *dxb, float *partial, const float *dout, const dft_bf16 *x,
                               const float *rstd, const float *gain, long n, int d, long per_block) {
    extern __shared__ float dg[];
    __shared__ float sh[THREADS];
    int d8 = d / 8;
    const float4 *g4 = (const float4 *)gain;
    for (int i = threadIdx.x; i < d; i += blockDim.x) dg[i] = 0.0f;
    __syncthreads();
    long r0 = blockIdx.x * per_block, r1 = r0 + per_block < n ? r0 + per_block : n;
    for (long r = r0; r < r1; r++) {
        const float4 *dr = (const float4 *)(dout + r * d);
        const uint4 *xr = (const uint4 *)(x + r * d);
        float4 *dxr = (float4 *)(dx + r * d);
        float s = rstd[r], dot = 0.0f;
        for (int i = threadIdx.x; i < d8; i += blockDim.x) {
            bf8 v;
            v.v = xr[i];
            float4 da = dr[2 * i], db = dr[2 * i + 1], ga = g4[2 * i], gb = g4[2 * i + 1];
            float dd[8] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w};
            float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
#pragma unroll
            for (int k = 0; k < 8; k++) dot += dd[k] * g[k] * __bfloat162float(v.h[k]);
        }
        dot = block_sum(dot, sh);
        float c = dot * s * s * s / d;
        for (int i = threadIdx.x; i < d8; i += blockDim.x) {
            bf8 v, o;
            v.v = xr[i];
            float4 da = dr[2 * i], db = dr[2 * i + 1], ga = g4[2 * i], gb = g4[2 * i + 1];
            float4 xa = dxr[2 * i], xb = dxr[2 * i + 1];
            float dd[8] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w};
            float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
            float acc[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
            for (int k = 0; k < 8; k++) {
                float xi = __bfloat162float(v.h[k]);
                acc[k] += s * g[k] * dd[k] - xi * c;
                o.h[k] = __float2bfloat16_rn(acc[k]);
                dg[8 * i + k] += dd[k] * xi * s;
            }
            dxr[2 * i] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            dxr[2 * i + 1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            if (dxb) ((uint4 *)(dxb + r * d))[i] = o.v;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < d; i += blockDim.x) partial[(long)blockIdx.x * d + i] = dg[i];
}

__global__ void colsum_k(float *dgain, const float *partial, int blocks, int d) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= d) return;
    float acc = 0.0f;
    for (int b = 0; b < blocks; b++) acc += partial[(long)b * d + c];
    dgain[c] += acc;
}

__global__ void rope_k(dft_bf16 *x, const float *cosv, const float *sinv, long n, int rows, int heads, int hd,
                       float sign) {
    int half = hd / 2;
    GRID_LOOP(t, n * heads * half) {
        int i = (int)(t % half);
        long rh = t / half; /* (row, head) */
        long r = (rh / heads) % rows;
        long base = rh * hd;
        float c = cosv[r * half + i], sn = sign * sinv[r * half + i];
        float x1 = ld(x, base + i), x2 = ld(x, base + i + half);
        st(x, base + i, x1 * c - x2 * sn);
        st(x, base + i + half, x2 * c + x1 * sn);
    }
}

__device__ __forceinline__ float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

__global__ void swiglu_fwd_k(dft_bf16 *g, const dft_bf16 *a, const dft_bf16 *b, long n) {
    GRID_LOOP(i, n) {
        float av = ld(a, i);
        st(g, i, av * sigmoid(av) * ld(b, i));
    }
}

__global__ void swiglu_bwd_k(dft_bf16 *da, dft_bf16 *db, const dft_bf16 *dg, const dft_bf16 *a, const dft_bf16 *b,
                             long n) {
    GRID_LOOP(i, n) {
        float av = ld(a, i), bv = ld(b, i), d = ld(dg, i);
        float sg = sigmoid(av), silu = av * sg;
        st(db, i, d * silu);
        st(da, i, d * bv * (sg + silu * (1.0f - sg)));
    }
}

/* The same two, 8 values (16 bytes) per access: the MLP's tensors are the largest element-wise
   traffic (n x ffn). Each thread reads all its inputs before it writes, so in place is safe. */

__global__ void swiglu_fwd8_k(uint4 *g, const uint4 *a, const uint4 *b, long n8) {
    GRID_LOOP(i, n8) {
        bf8 av, bv, out;
        av.v = a[i], bv.v = b[i];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float x = __bfloat162float(av.h[k]);
            out.h[k] = __float2bfloat16_rn(x * sigmoid(x) * __bfloat162float(bv.h[k]));
        }
        g[i] = out.v;
    }
}

__global__ void swiglu_bwd8_k(uint4 *da, uint4 *db, const uint4 *dg, const uint4 *a, const uint4 *b, long n8) {
    GRID_LOOP(i, n8) {
        bf8 av, bv, gv, oa, ob;
        av.v = a[i], bv.v = b[i], gv.v = dg[i];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float x = __bfloat162float(av.h[k]), y = __bfloat162float(bv.h[k]), d = __bfloat162float(gv.h[k]);
            float sg = sigmoid(x), silu = x * sg;
            ob.h[k] = __float2bfloat16_rn(d * silu);
            oa.h[k] = __float2bfloat16_rn(d * y * (sg + silu * (1.0f - sg)));
        }
        db[i] = ob.v, da[i] = oa.v;
    }
}

bool vec8(long n, const void *p, const void *q, const void *r, const void *t, const void *u) {
    const void *ps[5] = {p, q, r, t, u};
    for (int i = 0; i < 5; i++)
        if (ps[i] && ((uintptr_t)ps[i] & 15u)) return false;
    return n % 8 == 0;
}

/* one warp per row; lane j holds logits j, j+32, ..., j+224 */
__global__ void cross_entropy_k(dft_bf16 *dl, double *wnll, uint8_t *argmax, const float *logits,
                                const uint8_t *targets, const float *weights, float scale, long rows) {
    long r = blockIdx.x * (long)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *l = logits + r * 256;
    float v[8];
    float best = -INFINITY;
    int besti = 256;
    for (int k = 0; k < 8; k++) {
        v[k] = l[lane + 32 * k];
        if (v[k] > best) best = v[k], besti = lane + 32 * k;
    }
    for (int o = 16; o > 0; o /= 2) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, besti, o);
        if (ob > best || (ob == best && oi < besti)) best = ob, besti = oi;
    }
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) sum += expf(v[k] - best);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float lse = best + logf(sum);
    int t = targets[r];
    float w = weights[r], ws = w * scale;
    float lt = __shfl_sync(0xffffffffu, v[t / 32], t % 32);
    for (int k = 0; k < 8; k++) {
        int i = lane + 32 * k;
        float g = ws * expf(v[k] - lse) - (i == t ? ws : 0.0f);
        st(dl + r * 256, i, g);
    }
    if (lane == 0) {
        wnll[r] = (double)w * (double)(lse - lt);
        if (argmax) argmax[r] = (uint8_t)besti;
    }
}

template <typename T> __global__ void sum_partial_k(double *partial, const T *x, size_t n, int square) {
    __shared__ double sh[THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        acc += square ? v * v : v;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_final_k(double *out, const double *partial, int n) {
    __shared__ double sh[DFTK_SUM_BLOCKS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

__global__ void clip_factor_k(float *factor, const double *sumsq, float max_norm) {
    double s = *sumsq;
    float f = 1.0f;
    if (max_norm > 0 && s != 0) {
        if (isnan(s)) f = (float)s;
        else {
            double norm = sqrt(s);
            if (norm > (double)max_norm) f = (float)((double)max_norm / norm);
        }
    }
    *factor = f;
}

/* The arithmetic of dft_adamw_update written with explicitly rounded operations: no fused
   multiply-adds, so a step gives the bits of the CPU optimiser (built without -mfma). */
__global__ void adamw_k(float *p, dft_bf16 *pb, const float *g, float *m, float *v, size_t n, const float *factor,
                        double b1, double b2, double eps, double wd, double rate, double c1, double c2) {
    float f = *factor;
    const double a1 = 1.0 - b1, a2 = 1.0 - b2;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gf = g[i];
        if (f != 1.0f) gf = __fmul_rn(gf, f);
        double gi = gf;
        double mi = __dadd_rn(__dmul_rn(b1, (double)m[i]), __dmul_rn(a1, gi));
        double vi = __dadd_rn(__dmul_rn(b2, (double)v[i]), __dmul_rn(__dmul_rn(a2, gi), gi));
        float mf = (float)mi, vf = (float)vi;
        m[i] = mf, v[i] = vf;
        double mhat = __ddiv_rn((double)mf, c1), vhat = __ddiv_rn((double)vf, c2);
        double p_old = p[i];
        double upd = __dadd_rn(__ddiv_rn(mhat, __dadd_rn(__dsqrt_rn(vhat), eps)), __dmul_rn(wd, p_old));
        float np = (float)__dsub_rn(p_old, __dmul_rn(rate, upd));
        p[i] = np;
        st(pb, (long)i, np);
    }
}

__global__ void to_bf16_k(dft_bf16 *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(out, (long)i, in[i]);
}

} // namespace

/* Each wrapper below clears the runtime's last error before its launch and returns the launch's
   own: libraries (NCCL's kernel probes) may leave a harmless error behind, which would otherwise
   be reported as this launch's. A sticky error (a device fault) survives the clearing. */
extern "C" {

cudaError_t dftk_embed_fwd(dft_bf16 *x, const float *wte, const uint8_t *tokens, long n, int d, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    embed_fwd_k<<<blocks_for(n * d), THREADS, 0, s>>>(x, wte, tokens, n, d);
    return cudaGetLastError();
}

cudaError_t dftk_embed_bwd(float *dwte, const float *dres, const int *rows, const int *offsets, int d, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    dim3 grid(256, (unsigned)((d + 31) / 32));
    embed_bwd_k<<<grid, 32 * EMBED_WARPS, 0, s>>>(dwte, dres, rows, offsets, d);
    return cudaGetLastError();
}

cudaError_t dftk_rmsnorm_fwd(dft_bf16 *out, float *rstd, const dft_bf16 *x, const float *gain, long n, int d,
                             float eps, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (n < 1) return cudaSuccess;
    if (d % 8 == 0 && !(((uintptr_t)out | (uintptr_t)x | (uintptr_t)gain) & 15u))
        rmsnorm_fwd8_k<<<(unsigned)n, THREADS, 0, s>>>(out, rstd, x, gain, d, eps);
    else rmsnorm_fwd_k<<<(unsigned)n, THREADS, 0, s>>>(out, rstd, x, gain, d, eps);
    return cudaGetLastError();
}

int dftk_rmsnorm_bwd_blocks(long n) { return n < 1 ? 1 : n < 1024 ? (int)n : 1024; }

cudaError_t dftk_rmsnorm_bwd(float *dx, dft_bf16 *dx_bf16, float *dgain, float *partial, const float *dout,
                             const dft_bf16 *x, const float *rstd, const float *gain, long n, int d, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (n < 1) return cudaSuccess;
    int blocks = dftk_rmsnorm_bwd_blocks(n);
    long per = (n + blocks - 1) / blocks;
    size_t smem = sizeof(float) * (size_t)d;
    int vec = d % 8 == 0 && !(((uintptr_t)dx | (uintptr_t)dx_bf16 | (uintptr_t)dout | (uintptr_t)x | (uintptr_t)gain) & 15u);
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(vec ? rmsnorm_bwd8_k : rmsnorm_bwd_k,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    if (vec) rmsnorm_bwd8_k<<<blocks, THREADS, smem, s>>>(dx, dx_bf16, partial, dout, x, rstd, gain, n, d, per);
    else rmsnorm_bwd_k<<<blocks, THREADS, smem, s>>>(dx, dx_bf16, partial, dout, x, rstd, gain, n, d, per);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_k<<<(d + THREADS - 1) / THREADS, THREADS, 0, s>>>(dgain, partial, blocks, d);
    return cudaGetLastError();
}

cudaError_t dftk_rope(dft_bf16 *x, const float *cosv, const float *sinv, long n, int rows, int heads, int hd,
                      int inverse, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    rope_k<<<blocks_for(n * heads * (hd / 2)), THREADS, 0, s>>>(x, cosv, sinv, n, rows, heads, hd,
                                                                inverse ? -1.0f : 1.0f);
    return cudaGetLastError();
}

cudaError_t dftk_swiglu_fwd(dft_bf16 *g, const dft_bf16 *a, const dft_bf16 *b, long n, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (vec8(n, g, a, b, NULL, NULL))
        swiglu_fwd8_k<<<blocks_for(n / 8), THREADS, 0, s>>>((uint4 *)g, (const uint4 *)a, (const uint4 *)b, n / 8);
    else swiglu_fwd_k<<<blocks_for(n), THREADS, 0, s>>>(g, a, b, n);
    return cudaGetLastError();
}

cudaError_t dftk_swiglu_bwd(dft_bf16 *da, dft_bf16 *db, const dft_bf16 *dg, const dft_bf16 *a, const dft_bf16 *b,
                            long n, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (vec8(n, da, db, dg, a, b))
        swiglu_bwd8_k<<<blocks_for(n / 8), THREADS, 0, s>>>((uint4 *)da, (uint4 *)db, (const uint4 *)dg,
                                                             (const uint4 *)a, (const uint4 *)b, n / 8);
    else swiglu_bwd_k<<<blocks_for(n), THREADS, 0, s>>>(da, db, dg, a, b, n);
    return cudaGetLastError();
}

cudaError_t dftk_cross_entropy(dft_bf16 *dlogits, double *wnll, uint8_t *argmax, const float *logits,
                               const uint8_t *targets, const float *weights, float scale, long rows, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (rows < 1) return cudaSuccess;
    long blocks = (rows + 7) / 8; /* 8 warps per block */
    cross_entropy_k<<<(unsigned)blocks, THREADS, 0, s>>>(dlogits, wnll, argmax, logits, targets, weights, scale, rows);
    return cudaGetLastError();
}

cudaError_t dftk_sum_f32(double *out, const float *x, size_t n, int square, double *partial, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    sum_partial_k<float><<<DFTK_SUM_BLOCKS, THREADS, 0, s>>>(partial, x, n, square);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sum_final_k<<<1, DFTK_SUM_BLOCKS, 0, s>>>(out, partial, DFTK_SUM_BLOCKS);
    return cudaGetLastError();
}

cudaError_t dftk_sum_f64(double *out, const double *x, size_t n, double *partial, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    sum_partial_k<double><<<DFTK_SUM_BLOCKS, THREADS, 0, s>>>(partial, x, n, 0);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sum_final_k<<<1, DFTK_SUM_BLOCKS, 0, s>>>(out, partial, DFTK_SUM_BLOCKS);
    return cudaGetLastError();
}

cudaError_t dftk_clip_factor(float *factor, const double *sumsq, float max_norm, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    clip_factor_k<<<1, 1, 0, s>>>(factor, sumsq, max_norm);
    return cudaGetLastError();
}

cudaError_t dftk_adamw(float *p, dft_bf16 *pb, const float *g, float *m, float *v, size_t n, const float *factor,
                       double b1, double b2, double eps, double wd, double lr, double c1, double c2, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (n == 0) return cudaSuccess;
    adamw_k<<<blocks_for((long)n), THREADS, 0, s>>>(p, pb, g, m, v, n, factor, b1, b2, eps, wd, lr, c1, c2);
    return cudaGetLastError();
}

cudaError_t dftk_to_bf16(dft_bf16 *out, const float *in, size_t n, cudaStream_t s) {
    cudaGetLastError(); /* a stale error of an earlier, already checked call is not this launch\'s */
    if (n == 0) return cudaSuccess;
    to_bf16_k<<<blocks_for((long)n), THREADS, 0, s>>>(out, in, n);
    return cudaGetLastError();
}

} // extern "C"
