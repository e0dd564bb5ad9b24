/* Internal: the few PTX instructions the kernels are built from, as inline
 * functions. Tensor cores (mma.sync m16n8k16, wgmma), ldmatrix, cp.async,
 * mbarrier and the bulk tensor copy (TMA). Everything else is plain CUDA C.
 *
 * Fragment layouts of mma.sync m16n8k16 (g = lane / 4, t = lane % 4):
 *   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B (16x8) : b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
 *   C (16x8) : c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
 * Two adjacent C tiles (n 0-7 and 8-15) are, once rounded to 16 bits, exactly
 * the A fragment of the next product: P never leaves registers. The wgmma
 * accumulator of a warp (16 rows of the 64) repeats the C layout every 8 columns. */
#ifndef DFA_CUDA_PTX_CUH
#define DFA_CUDA_PTX_CUH

#include <stdint.h>

#define DFA__LOG2E 1.4426950408889634f
#define DFA__LN2 0.6931471805599453f

/* A compile-time int as a value (a tag for the generic lambdas of a kernel's loop). */
template <int V> struct dfa__ctag {
    static constexpr int value = V;
};

static __device__ __forceinline__ uint32_t dfa__smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Two floats rounded to nearest into one register of two 16-bit values, x in the low half. */
template <int BF16> static __device__ __forceinline__ uint32_t dfa__pack2(float x, float y) {
    uint32_t r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(y), "f"(x));
    return r;
}

/* The two 16-bit values of a register as floats (low half first). */
template <int BF16> static __device__ __forceinline__ float2 dfa__unpack2(uint32_t v) {
    float2 f;
    if (BF16) {
        f.x = __uint_as_float(v << 16);
        f.y = __uint_as_float(v & 0xffff0000u);
    } else {
        unsigned short lo = (unsigned short)(v & 0xffffu), hi = (unsigned short)(v >> 16);
        asm("cvt.f32.f16 %0, %1;" : "=f"(f.x) : "h"(lo));
        asm("cvt.f32.f16 %0, %1;" : "=f"(f.y) : "h"(hi));
    }
    return f;
}

/* c += a * b on the tensor cores, 16-bit inputs, f32 accumulators. */
template <int BF16>
static __device__ __forceinline__ void dfa__mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x on the MUFU unit alone: ex2.approx.ftz (relative error about 2^-22; results under 2^-126
   flushed to 0; 2^-inf = 0). exp2f without --use_fast_math wraps the same instruction in a range
   check and two scalings that keep denormal results (5 more instructions per call in the SASS),
   and a probability under 2^-126 of its row's maximum changes no sum. */
static __device__ __forceinline__ float dfa__exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* tanh(x) on the MUFU unit: tanh.approx.f32 (sm_75 and later; relative error about 2^-11, well
   under the 2^-8 to which a 16-bit score is known; tanh(+-inf) = +-1). */
static __device__ __forceinline__ float dfa__tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* log2(x) on the MUFU unit: lg2.approx.ftz (absolute error about 2^-22 for x in (0, 1]; log2(0)
   and log2 of a denormal are -inf). */
static __device__ __forceinline__ float dfa__lg2_approx(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Two adjacent floats added into global memory (sm_90's vector reduction, no return value). */
static __device__ __forceinline__ void dfa__red_add2(float *dst, float x, float y) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(x), "f"(y) : "memory");
}
static __device__ __forceinline__ void dfa__ldmatrix_x4(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void dfa__ldmatrix_x4_trans(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* 16 bytes global -> shared, asynchronously; src_bytes = 0 writes zeros (padding rows/columns). */
static __device__ __forceinline__ void dfa__cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
static __device__ __forceinline__ void dfa__cp_async_commit(void) {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void dfa__cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* ---- Hopper: mbarrier, TMA, wgmma, register reallocation (sm_90a) ---- */

static __device__ __forceinline__ void dfa__mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void dfa__mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void dfa__mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
/* Waits until the phase of the given parity has completed. A fresh barrier counts
   its phase "-1" (parity 1) as complete, so producers start waiting on parity 1. */
static __device__ __forceinline__ void dfa__mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    const long long t0 = clock64();
    do {
        /* a wait of ~10 s means a lost copy or arrival: fail the launch instead of hanging, by a
           store to address 0 (an illegal-address fault) rather than a trap instruction: with a
           trap in a setmaxnreg region, ptxas 13.0 allocates that region's registers at the
           kernel's even share and ignores the reallocation */
        if (clock64() - t0 > 20000000000LL)
            asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(0ull), "r"(1u) : "memory");
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
static __device__ __forceinline__ void dfa__fence_barrier_init(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* A 4-d box of a tensor map into shared memory; completion is counted on bar. */
static __device__ __forceinline__ void dfa__tma_load_4d(uint32_t dst, const void *tmap, uint32_t bar, int c0, int c1,
                                                        int c2, int c3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];"
                 ::"r"(dst), "l"((uint64_t)tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
#else
    (void)dst; (void)tmap; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3;
#endif
}

/* A 4-d box of shared memory into a tensor map's tensor (elements outside the tensor are
   dropped), as one bulk group: dfa__bulk_commit, then dfa__bulk_wait_read before the shared
   memory is written again or the CTA exits. */
static __device__ __forceinline__ void dfa__tma_store_4d(const void *tmap, uint32_t src, int c0, int c1, int c2, int c3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
                 ::"l"((uint64_t)tmap), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#else
    (void)tmap; (void)src; (void)c0; (void)c1; (void)c2; (void)c3;
#endif
}
/* A 4-d box of shared memory added into a tensor map's tensor (float32 add), as one bulk group. */
static __device__ __forceinline__ void dfa__tma_reduce_add_4d(const void *tmap, uint32_t src, int c0, int c1, int c2,
                                                              int c3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
                 ::"l"((uint64_t)tmap), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
#else
    (void)tmap; (void)src; (void)c0; (void)c1; (void)c2; (void)c3;
#endif
}
static __device__ __forceinline__ void dfa__bulk_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#endif
}
/* This thread's bulk groups have read their shared memory (the writes may still be in flight). */
static __device__ __forceinline__ void dfa__bulk_wait_read(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}
/* This thread's bulk groups are complete (their writes visible). */
static __device__ __forceinline__ void dfa__bulk_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
}

/* A thread's pair of 16-bit accumulator columns (8 j + 2 t, + 1) of row `row` into a tile in
   shared memory in the 128-byte swizzle that TMA and wgmma use: 64-column blocks of `rows` rows
   of 128 bytes, whose 16-byte chunk j % 8 sits at (j % 8) ^ (row % 8) (the tile 1024-byte
   aligned). The four lanes t of eight consecutive rows fill all 32 banks. */
template <int BF16>
static __device__ __forceinline__ void dfa__st_swz128_pair(uint32_t tile, int rows, int row, int j, int t, float x,
                                                           float y) {
    const uint32_t a = tile + (j / 8) * rows * 128 + row * 128 + (((j % 8) ^ (row & 7)) << 4) + t * 4;
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(dfa__pack2<BF16>(x, y)) : "memory");
}
/* Rows [row0, row0 + 64) of such a tile, D columns, to (0, c1, c2, c3) of a tensor map with boxes
   of 64 columns x 64 rows; the caller commits and waits (dfa__bulk_commit, dfa__bulk_wait_read). */
template <int D>
static __device__ __forceinline__ void dfa__tma_store_rows64(const void *tmap, uint32_t tile, int rows, int row0, int c1,
                                                             int c2, int c3) {
#pragma unroll
    for (int cb = 0; cb < D / 64; cb++) dfa__tma_store_4d(tmap, tile + cb * rows * 128 + row0 * 128, cb * 64, c1, c2, c3);
}

static __device__ __forceinline__ void dfa__wgmma_fence(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
static __device__ __forceinline__ void dfa__wgmma_commit(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void dfa__wgmma_wait(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}
/* Keeps the compiler from touching accumulators while an asynchronous wgmma owns them. */
static __device__ __forceinline__ void dfa__reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* Shared-memory matrix descriptor, 128-byte swizzle: rows of 128 bytes, 8-row groups
   1024 bytes apart (SBO); LBO is the distance between 64-element column blocks (only
   read for MN-major operands wider than 64). */
static __device__ __forceinline__ uint64_t dfa__wgmma_desc(uint32_t addr, uint32_t lbo_bytes) {
    uint64_t d = 0;
    d |= (uint64_t)((addr & 0x3ffffu) >> 4);
    d |= (uint64_t)((lbo_bytes >> 4) & 0x3fffu) << 16;
    d |= (uint64_t)(1024u >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}
/* The same descriptor in halves: the low word (start address / 16 in 14 bits, LBO / 16 in the
   next 14) and the constant high word (SBO 1024, 128-byte swizzle). Every shared address of an
   sm_90 CTA is under 256 KB, so the descriptor of addr + off (off a multiple of 16) is
   dfa__wgmma_desc_at(dfa__wgmma_desc_lo(addr, lbo), off): one add on a base computed once,
   where ptxas masks, shifts and ors every address again (10-13 instructions per wgmma). */
static __device__ __forceinline__ uint32_t dfa__wgmma_desc_lo(uint32_t addr, uint32_t lbo_bytes) {
    return ((addr & 0x3ffffu) >> 4) | (((lbo_bytes >> 4) & 0x3fffu) << 16);
}
static __device__ __forceinline__ uint64_t dfa__wgmma_desc_at(uint32_t lo, uint32_t off_bytes) {
    return ((uint64_t)((1024u >> 4) | (1u << 30)) << 32) | (uint64_t)(lo + (off_bytes >> 4));
}

template <int N> static __device__ __forceinline__ void dfa__setmaxnreg_inc(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
#endif
}
template <int N> static __device__ __forceinline__ void dfa__setmaxnreg_dec(void) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#endif
}

/* Orders this thread's ordinary shared-memory stores before later reads by the tensor
   cores or the copy engine (the async proxy); a barrier must follow. */
static __device__ __forceinline__ void dfa__fence_proxy_async(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

static __device__ __forceinline__ void dfa__named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
static __device__ __forceinline__ void dfa__named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

#endif
