/* Forward launchers: picks the Hopper (wgmma/TMA) kernel or the mma.sync kernel
 * and launches it on the caller's stream. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "fwd_mma.cuh"
#include "fwd_wgmma.cuh"
#include "launch.h"
#include "tmap.h"

extern "C" {
#include "../common/error.h"
}

/* cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda). */
typedef CUresult (*dfa__encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static dfa__encode_fn dfa__lookup_encode(void) {
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return (dfa__encode_fn)f;
}

static dfa__encode_fn dfa__get_encode(void) {
    static const dfa__encode_fn fn = dfa__lookup_encode(); /* initialised once, thread-safely */
    return fn;
}

/* Tensor map over a [batch, seqlen, heads, D] tensor: boxes of 64 columns x rows rows of one head. */
int dfa__tmap(CUtensorMap *m, const void *ptr, int bf16, int D, int heads, int seqlen, int batch, int rows) {
    dfa__encode_fn enc = dfa__get_encode();
    if (!enc) return 0;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)heads, (cuuint64_t)seqlen, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)heads * D * 2, (cuuint64_t)seqlen * heads * D * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1}, estr[4] = {1, 1, 1, 1};
    return enc(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)ptr, dims,
               strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename K> static cudaError_t dfa__prepare(K kernel, int smem) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
}

template <int DP, int NW, int BN, int BF16>
static dfa_status dfa__launch_fwd_mma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_mma_cfg<DP, NW, BN> C;
    const long long tiles = (long long)p.batch * p.num_heads * ((p.seqlen_q + C::BM - 1) / C::BM);
    if (tiles > 0x7fffffffLL)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld) for one launch", tiles);
    cudaError_t e = dfa__prepare(dfa__fwd_mma_kernel<DP, NW, BN, BF16>, C::SMEM);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    dfa__fwd_mma_kernel<DP, NW, BN, BF16><<<(unsigned)tiles, C::NT, C::SMEM, st>>>(p);
    e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, "forward kernel launch");
}

template <int D, int BN, int BF16, int PP>
static dfa_status dfa__launch_fwd_wgmma(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__fwd_wgmma_cfg<D, BN> C;
    const long long tiles = (long long)p.batch * p.num_heads * ((p.seqlen_q + C::BM - 1) / C::BM);
    if (tiles > 0x7fffffffLL)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "too many query tiles (%lld) for one launch", tiles);
    CUtensorMap tq, tk, tv;
    if (!dfa__tmap(&tq, p.q, BF16, D, p.num_heads, p.seqlen_q, p.batch, C::BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.num_kv_heads, p.seqlen_k, p.batch, BN) ||
        !dfa__tmap(&tv, p.v, BF16, D, p.num_kv_heads, p.seqlen_k, p.batch, BN))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    cudaError_t e = dfa__prepare(dfa__fwd_wgmma_kernel<D, BN, BF16, PP>, C::SMEM);
    if (e != cudaSuccess) return dfa__cuda_fail(e, fn, "cudaFuncSetAttribute");
    dfa__fwd_wgmma_kernel<D, BN, BF16, PP><<<(unsigned)tiles, C::NT, C::SMEM, st>>>(tq, tk, tv, p);
    e = cudaGetLastError();
    return e == cudaSuccess ? DFA_OK : dfa__cuda_fail(e, fn, "forward kernel launch");
}

template <int BF16> static dfa_status dfa__fwd_mma_any(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.head_dim <= 64) return dfa__launch_fwd_mma<64, 4, 128, BF16>(p, st, fn);
    if (p.head_dim <= 128) return dfa__launch_fwd_mma<128, 4, 64, BF16>(p, st, fn);
    return dfa__launch_fwd_mma<256, 4, 32, BF16>(p, st, fn);
}

/* Variants for the kernel lab: DFA_CUDA_FWD_VARIANT=0 plain consumers, 1 (the default)
   ping-pong consumers. */
template <int BF16>
static dfa_status dfa__fwd_wgmma_any(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    const char *v = getenv("DFA_CUDA_FWD_VARIANT");
    const int pp = !(v && *v == '0');
    if (p.head_dim == 64)
        return pp ? dfa__launch_fwd_wgmma<64, 128, BF16, 1>(p, st, fn) : dfa__launch_fwd_wgmma<64, 128, BF16, 0>(p, st, fn);
    return pp ? dfa__launch_fwd_wgmma<128, 128, BF16, 1>(p, st, fn) : dfa__launch_fwd_wgmma<128, 128, BF16, 0>(p, st, fn);
}

extern "C" dfa_status dfa__cuda_fwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, void *o,
                                    float *lse, dfa__fwd_kernel which, cudaStream_t stream, const char *fn) {
    dfa_status st = DFA_OK;
    const int cc = dfa__cuda_device_cc(fn, &st);
    if (cc < 0) return st;
    if (cc < 80)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the current device has compute capability %d.%d; 8.0 or newer is needed",
                         cc / 10, cc % 10);
    dfa__fwd_params p;
    p.q = (const uint16_t *)q;
    p.k = (const uint16_t *)k;
    p.v = (const uint16_t *)v;
    p.o = (uint16_t *)o;
    p.lse = lse;
    p.batch = s->batch;
    p.seqlen_q = s->seqlen_q;
    p.seqlen_k = s->seqlen_k;
    p.num_heads = s->num_heads;
    p.num_kv_heads = s->num_kv_heads;
    p.head_dim = s->head_dim;
    p.causal = s->causal;
    p.offset = s->offset;
    p.scale_log2 = s->scale * DFA__LOG2E;

    const int wgmma_ok = cc == 90 && (s->head_dim == 64 || s->head_dim == 128);
    if (which == DFA__FWD_WGMMA && !wgmma_ok)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the wgmma forward needs an sm_90 device and head_dim 64 or 128");
    if (which == DFA__FWD_WGMMA || (which == DFA__FWD_AUTO && wgmma_ok))
        return s->bf16 ? dfa__fwd_wgmma_any<1>(p, stream, fn) : dfa__fwd_wgmma_any<0>(p, stream, fn);
    return s->bf16 ? dfa__fwd_mma_any<1>(p, stream, fn) : dfa__fwd_mma_any<0>(p, stream, fn);
}
