/* Backward launcher: D and base-2 lse, the key-block kernel (dK, dV and, by
 * default, dQ through f32 atomics), then either the dq conversion or, under
 * DFA_FLAG_DETERMINISTIC, the separate query-block dq kernel. Scratch memory
 * is taken and given back in stream order (cudaMallocAsync / cudaFreeAsync). */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "bwd_wgmma.cuh"
#include "launch.h"
#include "tmap.h"

extern "C" {
#include "../common/error.h"
}

extern "C" size_t dfa__cuda_bwd_scratch(const dfa__cuda_shape *s) {
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    size_t bytes = 2 * rows * sizeof(float); /* D and lse * log2(e) */
    bytes = (bytes + 255) & ~(size_t)255;
    if (!(s->flags & DFA_FLAG_DETERMINISTIC)) bytes += rows * (size_t)s->head_dim * sizeof(float); /* dq_acc */
    return bytes;
}

static dfa_status dfa__launched(const char *fn, const char *what) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, what);
}

template <int DP, int BN, int BM, int DSPLIT, int ATOMIC, int BF16>
static dfa_status dfa__launch_bwd_kv(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_kv_cfg<DP, BN, BM, DSPLIT, ATOMIC> C;
    const long long ctas = (long long)((p.seqlen_k + BN - 1) / BN) * p.batch * p.num_kv_heads;
    if (ctas > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many key tiles (%lld) for one launch", ctas);
    cudaError_t e = cudaFuncSetAttribute(dfa__bwd_kv_kernel<DP, BN, BM, DSPLIT, ATOMIC, BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    dfa__bwd_kv_kernel<DP, BN, BM, DSPLIT, ATOMIC, BF16><<<(unsigned)ctas, C::NT, C::SMEM, st>>>(p);
    return dfa__launched(fn, "backward key-block kernel launch");
}

template <int DP, int NW, int BN, int BF16>
static dfa_status dfa__launch_bwd_dq(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_dq_cfg<DP, NW, BN> C;
    const long long ctas = (long long)p.batch * p.num_heads * ((p.seqlen_q + C::BM - 1) / C::BM);
    if (ctas > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld) for one launch", ctas);
    cudaError_t e = cudaFuncSetAttribute(dfa__bwd_dq_kernel<DP, NW, BN, BF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         C::SMEM);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    dfa__bwd_dq_kernel<DP, NW, BN, BF16><<<(unsigned)ctas, C::NT, C::SMEM, st>>>(p);
    return dfa__launched(fn, "backward dq kernel launch");
}

template <int ATOMIC, int BF16> static dfa_status dfa__bwd_kv_any(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    if (p.head_dim <= 64) return dfa__launch_bwd_kv<64, 128, 64, 1, ATOMIC, BF16>(p, st, fn);
    if (p.head_dim <= 128) return dfa__launch_bwd_kv<128, 128, 64, 1, ATOMIC, BF16>(p, st, fn);
    return dfa__launch_bwd_kv<256, 64, 32, 2, ATOMIC, BF16>(p, st, fn);
}

template <int BF16> static dfa_status dfa__bwd_dq_any(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    if (p.head_dim <= 64) return dfa__launch_bwd_dq<64, 4, 64, BF16>(p, st, fn);
    if (p.head_dim <= 128) return dfa__launch_bwd_dq<128, 4, 64, BF16>(p, st, fn);
    return dfa__launch_bwd_dq<256, 4, 32, BF16>(p, st, fn);
}

template <int D, int BM, int ATOMIC, int VARIANT, int BF16>
static dfa_status dfa__launch_bwd_wgmma(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_wgmma_cfg<D, BM> C;
    const long long ctas = (long long)((p.seqlen_k + C::BN - 1) / C::BN) * p.batch * p.num_kv_heads;
    if (ctas > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many key tiles (%lld) for one launch", ctas);
    CUtensorMap tq, tk, tv, tdo;
    if (!dfa__tmap(&tq, p.q, BF16, D, p.num_heads, p.seqlen_q, p.batch, BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, D, p.num_heads, p.seqlen_q, p.batch, BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.num_kv_heads, p.seqlen_k, p.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, D, p.num_kv_heads, p.seqlen_k, p.batch, C::BN))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    cudaError_t e = cudaFuncSetAttribute(dfa__bwd_wgmma_kernel<D, BM, ATOMIC, VARIANT, BF16>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    dfa__bwd_wgmma_kernel<D, BM, ATOMIC, VARIANT, BF16><<<(unsigned)ctas, C::NT, C::SMEM, st>>>(tq, tk, tv, tdo, p);
    return dfa__launched(fn, "backward key-block kernel launch");
}

/* The key-block kernel: Hopper's for head dims 64 and 128 on sm_90, mma.sync otherwise. */
template <int ATOMIC, int BF16>
static dfa_status dfa__bwd_kv_pick(const dfa__bwd_params &p, int wgmma, cudaStream_t st, const char *fn) {
    if (wgmma) {
        /* DFA_CUDA_BWD_VARIANT (kernel lab): bit 0 issues dQ behind dV/dK under one wait,
           bit 1 adds dq with bulk reduce-adds from shared memory instead of f32 atomics */
        const char *v = getenv("DFA_CUDA_BWD_VARIANT");
        const int var = ATOMIC && v && *v >= '0' && *v <= '3' ? *v - '0' : 0;
#define DFA__BWD_WG(V)                                                                           \
    return p.head_dim == 64 ? dfa__launch_bwd_wgmma<64, 128, ATOMIC, ATOMIC ? V : 0, BF16>(p, st, fn) \
                            : dfa__launch_bwd_wgmma<128, 64, ATOMIC, ATOMIC ? V : 0, BF16>(p, st, fn)
        switch (var) {
        case 1: DFA__BWD_WG(1);
        case 2: DFA__BWD_WG(2);
        case 3: DFA__BWD_WG(3);
        default: DFA__BWD_WG(0);
        }
#undef DFA__BWD_WG
    }
    return dfa__bwd_kv_any<ATOMIC, BF16>(p, st, fn);
}

template <int BF16>
static dfa_status dfa__bwd_run(const dfa__bwd_params &p, int deterministic, int wgmma, cudaStream_t st,
                               const char *fn) {
    const long long rows = (long long)p.batch * p.seqlen_q * p.num_heads;
    const long long dsum_blocks = (rows + 7) / 8;
    if (dsum_blocks > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many rows for one launch");
    dfa__bwd_dsum_kernel<BF16><<<(unsigned)dsum_blocks, 256, 0, st>>>(p);
    dfa_status s = dfa__launched(fn, "backward D kernel launch");
    if (s) return s;
    if (deterministic) {
        if ((s = dfa__bwd_kv_pick<0, BF16>(p, wgmma, st, fn))) return s;
        return dfa__bwd_dq_any<BF16>(p, st, fn);
    }
    if ((s = dfa__bwd_kv_pick<1, BF16>(p, wgmma, st, fn))) return s;
    const long long n8 = rows * p.head_dim / 8;
    const long long blocks = (n8 + 255) / 256;
    if (blocks > 0x7fffffffLL) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many elements for one launch");
    dfa__bwd_dq_convert<BF16><<<(unsigned)blocks, 256, 0, st>>>(p, n8);
    return dfa__launched(fn, "dq conversion kernel launch");
}

extern "C" dfa_status dfa__cuda_bwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v,
                                    const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                                    dfa__kernel_choice which, cudaStream_t stream, const char *fn) {
    dfa_status st = DFA_OK;
    const int cc = dfa__cuda_device_cc(fn, &st);
    if (cc < 0) return st;
    if (cc < 80)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the current device has compute capability %d.%d; 8.0 or newer is needed",
                         cc / 10, cc % 10);
    const int deterministic = (s->flags & DFA_FLAG_DETERMINISTIC) != 0;
    const int wgmma_ok = cc == 90 && (s->head_dim == 64 || s->head_dim == 128);
    if (which == DFA__FWD_WGMMA && !wgmma_ok)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the wgmma backward needs an sm_90 device and head_dim 64 or 128");
    const int wgmma = which == DFA__FWD_WGMMA || (which == DFA__FWD_AUTO && wgmma_ok);
    const size_t rows = (size_t)s->batch * s->num_heads * s->seqlen_q;
    const size_t bytes = dfa__cuda_bwd_scratch(s);
    void *scratch = NULL;
    cudaError_t e = cudaMallocAsync(&scratch, bytes, stream);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaMallocAsync of the backward scratch");

    dfa__bwd_params p;
    p.q = (const uint16_t *)q;
    p.k = (const uint16_t *)k;
    p.v = (const uint16_t *)v;
    p.o = (const uint16_t *)o;
    p.dout = (const uint16_t *)dout;
    p.lse = lse;
    p.dsum = (float *)scratch;
    p.lse2 = p.dsum + rows;
    p.dq_acc = deterministic ? (float *)0 : (float *)((char *)scratch + ((2 * rows * sizeof(float) + 255) & ~(size_t)255));
    p.dq = (uint16_t *)dq;
    p.dk = (uint16_t *)dk;
    p.dv = (uint16_t *)dv;
    p.batch = s->batch;
    p.seqlen_q = s->seqlen_q;
    p.seqlen_k = s->seqlen_k;
    p.num_heads = s->num_heads;
    p.num_kv_heads = s->num_kv_heads;
    p.head_dim = s->head_dim;
    p.causal = s->causal;
    p.offset = s->offset;
    p.scale = s->scale;
    p.scale_log2 = s->scale * DFA__LOG2E;

    if (!deterministic) {
        e = cudaMemsetAsync(p.dq_acc, 0, rows * (size_t)s->head_dim * sizeof(float), stream);
        if (e != cudaSuccess) st = dfa__cuda_fail(e, fn, "cudaMemsetAsync of the dq accumulator");
    }
    if (!st)
        st = s->bf16 ? dfa__bwd_run<1>(p, deterministic, wgmma, stream, fn) : dfa__bwd_run<0>(p, deterministic, wgmma, stream, fn);
    e = cudaFreeAsync(scratch, stream);
    if (!st && e != cudaSuccess) st = dfa__cuda_fail(e, fn, "cudaFreeAsync of the backward scratch");
    return st;
}
