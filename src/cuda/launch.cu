/* What every CUDA launcher shares: error mapping, the device's compute
 * capability, the choice of kernel family (and its test-only override), and
 * TMA tensor maps. */
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>

#include "heuristics.h"
#include "launch.h"
#include "tmap.h"

extern "C" {
#include "../common/error.h"
}

extern "C" dfa_status dfa__cuda_fail(cudaError_t e, const char *fn, const char *what) {
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
    return dfa__fail(e == cudaErrorMemoryAllocation ? DFA_ERR_OUT_OF_MEMORY : DFA_ERR_BACKEND, fn, "%s failed: %s (%s)",
                     what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" int dfa__cuda_device_cc(const char *fn, dfa_status *st) {
    int dev = 0, major = 0, minor = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e != cudaSuccess) {
        *st = dfa__cuda_fail(e, fn, "querying the current CUDA device");
        return -1;
    }
    return major * 10 + minor;
}

extern "C" int dfa__cuda_device_attr(enum cudaDeviceAttr attr, const char *fn, dfa_status *st) {
    int dev = 0, value = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&value, attr, dev);
    if (e != cudaSuccess) {
        *st = dfa__cuda_fail(e, fn, "querying the current CUDA device");
        return -1;
    }
    return value;
}

/* Written by tests only (dfa__cuda_force_family); an atomic so that reading it on every call
   is a plain load and never a data race. */
static std::atomic<int> dfa__forced_family(DFA__FAMILY_AUTO);

extern "C" void dfa__cuda_force_family(int family) { dfa__forced_family.store(family, std::memory_order_relaxed); }

extern "C" int dfa__cuda_forced_family(void) { return dfa__forced_family.load(std::memory_order_relaxed); }

static std::atomic<int> dfa__forced_l2_heads(0);

extern "C" void dfa__cuda_force_l2_heads(int n) { dfa__forced_l2_heads.store(n, std::memory_order_relaxed); }

extern "C" int dfa__cuda_forced_l2_heads(void) { return dfa__forced_l2_heads.load(std::memory_order_relaxed); }

static std::atomic<int> dfa__forced_bwd_qsplit(0);

extern "C" void dfa__cuda_force_bwd_qsplit(int n) { dfa__forced_bwd_qsplit.store(n, std::memory_order_relaxed); }

extern "C" int dfa__cuda_forced_bwd_qsplit(void) { return dfa__forced_bwd_qsplit.load(std::memory_order_relaxed); }

static std::atomic<int> dfa__forced_bwd_sections(0);

extern "C" void dfa__cuda_force_bwd_sections(int n) { dfa__forced_bwd_sections.store(n, std::memory_order_relaxed); }

extern "C" int dfa__cuda_forced_bwd_sections(void) { return dfa__forced_bwd_sections.load(std::memory_order_relaxed); }

static std::atomic<int> dfa__forced_bwd_dkv_tma(0);

extern "C" void dfa__cuda_force_bwd_dkv_tma(int mode) { dfa__forced_bwd_dkv_tma.store(mode, std::memory_order_relaxed); }

extern "C" int dfa__cuda_forced_bwd_dkv_tma(void) { return dfa__forced_bwd_dkv_tma.load(std::memory_order_relaxed); }

extern "C" dfa_status dfa__cuda_fail_head_dim_v(int head_dim, int head_dim_v, const char *fn) {
    return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                     "d->head_dim_v = %d with d->head_dim = %d: the CUDA kernels take a value head dim other than "
                     "head_dim for head_dim <= 128 with head_dim_v <= 64, and head_dim <= 192 with head_dim_v <= 128 "
                     "(the CPU calls take any)",
                     head_dim_v, head_dim);
}

extern "C" dfa_status dfa__cuda_check_head_dim_v(int head_dim, int head_dim_v, const char *fn) {
    return head_dim_v == head_dim || dfa__mma_v_pair_for(head_dim, head_dim_v)
               ? DFA_OK
               : dfa__cuda_fail_head_dim_v(head_dim, head_dim_v, fn);
}

extern "C" dfa_status dfa__cuda_check_softcap(float softcap, int head_dim, int head_dim_v, const char *fn) {
    if (!(softcap > 0.0f) || head_dim_v == head_dim) return DFA_OK;
    return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                     "d->softcap = %g with d->head_dim_v = %d other than d->head_dim = %d: the CUDA kernels cap "
                     "logits only where the value head dim is the head dim (the CPU calls take both)",
                     (double)softcap, head_dim_v, head_dim);
}

extern "C" dfa_status dfa__cuda_pick_family(const dfa__cuda_shape *s, int family, int *wgmma, const char *fn) {
    dfa_status st = DFA_OK;
    const int cc = dfa__cuda_device_cc(fn, &st);
    if (cc < 0) return st;
    if (cc < 80)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the current device has compute capability %d.%d; 8.0 or newer is needed",
                         cc / 10, cc % 10);
    /* a value head dim of its own: the pairs the mma.sync kernels take, and of those the Hopper
       forward's 192 / 128 (heuristics.h) */
    if (s->head_dim_v != s->head_dim && (st = dfa__cuda_check_head_dim_v(s->head_dim, s->head_dim_v, fn))) return st;
    if ((st = dfa__cuda_check_softcap(s->softcap, s->head_dim, s->head_dim_v, fn))) return st;
    const int wgmma_ok = dfa__hopper_kernels_for(cc, s->head_dim, s->head_dim_v);
    if (family == DFA__FAMILY_WGMMA && !wgmma_ok && s->head_dim_v != s->head_dim)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn,
                         "the wgmma kernels need d->head_dim_v = d->head_dim, or head dims 192 / 128, on sm_90 (here "
                         "%d and %d)",
                         s->head_dim_v, s->head_dim);
    if (family == DFA__FAMILY_WGMMA && !wgmma_ok)
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the wgmma kernels need an sm_90 device and head_dim 64, 128 or 256");
    *wgmma = family == DFA__FAMILY_WGMMA || (family == DFA__FAMILY_AUTO && wgmma_ok);
    return DFA_OK;
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

int dfa__tmap_f32(CUtensorMap *m, float *ptr, int D, int heads, int seqlen, int batch, int rows) {
    dfa__encode_fn enc = dfa__get_encode();
    if (!enc) return 0;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)heads, (cuuint64_t)seqlen, (cuuint64_t)batch};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 4, (cuuint64_t)heads * D * 4, (cuuint64_t)seqlen * heads * D * 4};
    const cuuint32_t box[4] = {32, 1, (cuuint32_t)rows, 1}, estr[4] = {1, 1, 1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void *)ptr, dims, strides, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
