/* Internal: the warp-specialised Hopper backward key-block kernel (FlashAttention-3's
 * structure, sm_90a only) for head dims 64 and 128.
 *
 * A CTA owns BN = 128 keys of one (kv head, batch) and walks every query block (BM
 * rows) of every query head of its group; each consumer warpgroup owns 64 of the keys
 * and keeps their dK and dV in registers:
 *
 *   S^T  = K Q^T,  dP^T = V dO^T                (SS: both operands in shared memory)
 *   P^T  = exp2(S^T scale log2e - lse log2e),  dS^T = P^T (dP^T - D)
 *   dV  += P^T dO,  dK += dS^T Q                (RS: P^T / dS^T straight from registers)
 *   dQ   = dS K  over all 128 keys              (SS, dS^T written to shared memory)
 *
 * Each consumer computes a 64 x 64 part of the dQ tile, or (VARIANT bit 18, DQ_ALT: the library's
 * d = 128 kernels) the consumers take turns, block J's whole 64 x 128 tile being consumer J & 1's,
 * one m64n128 product that reads dS and K once. With DQ_MODE 0 there is no dQ
 * here (the dq pass of bwd_mma.cuh follows; the kernel lab measures that path). Compared with the kernel lab's
 * two-warpgroup version (bench/gpu/lab_bwd_wgmma.cuh, the library's until 2026-12-01),
 * the work that sat on the consumers' critical path is moved off it:
 *
 *  - a producer warpgroup (setmaxnreg 24; the consumers get 240): its warp 0 issues
 *    the TMA copies of K, V and of each query block's Q and dO into a two-stage ring,
 *    and copies the block's base-2 lse and D into shared memory beside them, so the
 *    consumers read those from shared memory instead of waiting on global loads;
 *  - its warp 1 adds each dQ tile into the float32 accumulator with TMA tensor
 *    reduce-adds (cp.reduce.async.bulk.tensor) from one of two staged shared-memory
 *    tiles, so the consumers write 32 KB to shared memory instead of issuing 8192 float
 *    atomics; in the deterministic mode it adds the tiles of each query block in
 *    key-block order (a counter per tile in global memory), so dq has the same bits on
 *    every run;
 *  - S^T and dP^T are committed as two wgmma groups and P is computed while dP^T is
 *    still in flight;
 *  - the two consumer warpgroups no longer run in lockstep: each publishes its half of
 *    dS^T with an mbarrier and waits for the other's only before the dQ product that
 *    reads both halves (per-buffer mbarriers, so neither can lap the other).
 *
 * Shared memory: K, V (BN x D), a two-stage ring of Q, dO (BM x D) and lse2/D (BM
 * floats each), two dS^T buffers (BN x BM), and two dQ staging tiles (BM x D float32 as
 * D/32 boxes of 32 floats x BM rows, 128-byte swizzle, the layout the dq tensor map
 * reads; one tile at D = 64). The dq tensor map is over the caller's f32 accumulator ([batch, seqlen_q,
 * heads, D]; with OUT32 the caller's dq, scale applied by the consumers). */
#ifndef DFA_CUDA_BWD_WS_CUH
#define DFA_CUDA_BWD_WS_CUH

#include "bwd_mma.cuh"
#include "fwd_wgmma.cuh"
#include "mask.cuh"

template <int D, int BM> struct dfa__bwd_ws_cfg {
    static constexpr int BN = 128, STAGES = 2, NT = 384;
    static constexpr int KVBYTES = BN * D * 2, QBYTES = BM * D * 2, DSBYTES = BN * BM * 2, DQBYTES = BM * D * 4;
    static constexpr int OFF_V = KVBYTES, OFF_Q = 2 * KVBYTES, OFF_DO = OFF_Q + STAGES * QBYTES;
    static constexpr int OFF_DS = OFF_DO + STAGES * QBYTES, OFF_DQ = OFF_DS + 2 * DSBYTES;
    /* two dQ staging tiles where they fit (D = 128); one at D = 64, whose 128-row tiles leave no room */
    static constexpr int NDQ = D == 128 ? 2 : 1;
    static constexpr int OFF_LD = OFF_DQ + NDQ * DQBYTES; /* per stage: lse2[BM] then D[BM] */
    static constexpr int OFF_BAR = OFF_LD + STAGES * 2 * BM * 4;
    static constexpr int SMEM = OFF_BAR + 128 + 1024;
    static_assert(SMEM <= 232448, "over the 227 KB of shared memory a CTA may have");
};

/* In-order dQ (DQ_MODE 2): the writer of key block nb adds its tile of query block m after
   the writers of the key blocks above it (which reach m first: each CTA walks its query
   blocks upwards from its diagonal), so every element of dq_acc sums in the same order on
   every run. The count of tiles already added sits in sem[batch, head, m]. The order is
   derived from the causal/offset structure, so masked calls (documents, windows) take the
   dq pass instead (attn_bwd.cu). */
static __device__ __forceinline__ void dfa__sem_wait(const int *sem, int value) {
    int v;
    do {
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(sem) : "memory");
    } while (v != value);
}
static __device__ __forceinline__ void dfa__sem_post(int *sem) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(sem) : "memory");
}

/* Stamps (VARIANT bit 13; the kernel lab only: bench/gpu/lab_variants.cu defines
   DFA_LAB_BWD_STAMPS, the number of CTAs stamped, before it includes this header): per CTA the
   global timer at the entry, when K and V have landed, after the first query block, at the walk's
   end and at the exit, then the SM, the blocks walked and those with the element test, into
   dfa__lab_bwd_stamps[8 * CTA]. bench/gpu/bwd_stamps.py reads them: where a CTA's time goes
   besides its blocks (the fixed cost of the fifteenth session, bench/gpu/NOTES.md). */
#ifdef DFA_LAB_BWD_STAMPS
__device__ unsigned long long dfa__lab_bwd_stamps[DFA_LAB_BWD_STAMPS * 8];
#endif
static __device__ __forceinline__ void dfa__bwd_stamp(int slot, unsigned long long v) {
#ifdef DFA_LAB_BWD_STAMPS
    if (blockIdx.x < DFA_LAB_BWD_STAMPS) dfa__lab_bwd_stamps[blockIdx.x * 8u + slot] = v;
#else
    (void)slot;
    (void)v;
#endif
}

/* DQ_MODE: 0 no dQ here (the deterministic dq pass follows), 1 dQ tiles added as they come,
   2 dQ tiles added in key-block order (deterministic). MASKED: documents or a window (mask.cuh);
   the unmasked kernel keeps the plain causal rule, whose code was measured faster (the mask
   helpers' interval tests cost the unmasked blocks too: BENCHMARKS.md, issue 11).
   VARIANT (with dQ here; the library's is DFA__BWD_WS_LIBRARY, the kernel lab measures the
   others): bit 0 issues the dQ product right behind dV/dK, so the tensor pipe does not drain
   between them (+2-4% at d = 128, +3-7% at d = 64; 2026-12-01 runs 14, 15); bit 2 writes the
   dQ staging tile without bank conflicts (below), which measured 4% slower (run 15: the
   selects and addressing cost more than the conflicts). A bit 1 that added dQ from registers
   with red.global.add.v2.f32 instead of staging it lost 20% (run 14) and was removed. Bit 3
   recomputes P with ex2.approx.ftz alone (dfa__exp2_ftz): exp2f adds a denormal fix-up (a
   compare and two multiplies) for results below 2^-126, which no softmax weight needs. Unlike
   the forward's (+2-5% at d = 128, +11-16% at d = 64), it did not pay here (run 18, S = 32k:
   -2.4% at d = 128, +2.7% at d = 64; mixed at 8k): the library's was 1 then, the lab's "bwd ws ex2" 9.
   Bit 8 stores dK and dV by TMA from shared memory (16-bit outputs; TMA_DKV below): +2.5% on a
   4k window at 32k and 128k (short CTAs: 66 query blocks each), -1.9% on plain causal 32k (the
   main loop scheduled differently, 849 SASS instructions against 815); at d = 64 level on the
   window at 128k, -4% at 32k (run 45). The masked instances at d = 128 take it
   (DFA__BWD_WS_LIBRARY_MASKED), the others not (2026-12-01, runs 44 and 45); their float32
   instances (the executor's blocks) too, for key tiles handed whole to 16-bit outputs. Since
   session 18 the unmasked d = 128 instance with 16-bit outputs and dQ added as it comes takes it
   too when its CTAs walk few query blocks (launch_bwd.cuh DFA__BWD_TMA_DKV_MAX_ROWS). Bit 10
   walks a CTA's query blocks in runs (MASK_SPLIT below): the blocks every row of which sees
   every key of the CTA run a copy of the step with no element test at all. Masked instances,
   2026-12-02 run 1 (session 12), 3 interleaved rounds against 257: d = 128 4k window +6.3% at
   32k, +3.8% at 128k; documents +0.3-4.5% at 32k, +3.8% at 128k; a window as long as the
   sequence (causal's work) +5.2%, 522 TFLOP/s, the unmasked kernel's level; d = 64 +2-7%.
   Unmasked instances (the blocks below the causal diagonal), run 2, 5 rounds against 1: d = 128
   +4.5% at 2k x 16, +6% at 8k x 4, +3.7% at 32k; d = 64 +3.4% at 8k, +6.9% at 32k. The lab's
   "bwd ws tma dkv" (257) and "bwd ws direct dkv" (1) are the kernels before it. On the kernel in
   runs DEFER (bit 4) pays again for the unmasked instances (run 6, 5 rounds, d = 128 causal: +3.3%
   at 2k, +7% at 8k, +3.6% at 32k; the bench's forward+backward +1.3 to +5%, with the builds
   alternated in one call); d = 64 level (run 5), a 4k window -6% (run 5, spread 7.5%). Measured
   again with 5 rounds (session 13, run 1), DEFER on the masked d = 128 instance (1297 against
   1281): 4k window +4.6% at 32k (spreads 8-9%), +1.7% at 128k (0.9%); documents at 128k +2.1%
   (0.5%); so the masked d = 128 instances take it too. ex2 (bit 3) on the kernels in runs with
   DEFER (session 14, run 5, 5 rounds; the lab's "bwd ws runs defer ex2"): masked d = 128 (1305
   against 1297) 4k window +7% at 32k (spreads 5-8%), +2.2% at 128k (1%), documents +5% / +2.3%
   (under 1% at 128k); unmasked d = 128 (1049 against 1041) causal 8k +10% (spreads 9%), 32k +2.4%
   (1%). Promoted at d = 128 (session 15, run 1: the GPU suite and memcheck pass on it; the masks
   bench, alternated with the build before, forward+backward +1.5-2% with documents, +0.5-1.8% with
   the window). At d = 64 ex2 lost 1-2% (run 1, causal 8k and 32k), so d = 64's unmasked instances
   keep DFA__BWD_WS_LIBRARY (1041) and its masked ones 1025.
   Bits 15-17 (session 18) cut the instructions ncu counted in the main loop (808 per consumer
   warp and block at causal 2k, against cuDNN's kernel issuing 27% fewer in all; bench/gpu/NOTES.md):
   bit 15 (DESC_ADD) builds the wgmma descriptors as a base plus a constant, where ptxas masked,
   shifted and moved every k-step's address into uniform registers again (a third of the loop);
   bit 16 (SCALE_DS, bf16) puts the softmax scale into dS^T once instead of into every dQ tile
   and dK; bit 17 (STSM) stores dS^T by stmatrix. With all three the kernel issues 31% fewer
   instructions (1.02 G -> 0.71 G at causal 2k, ncu). Run 2, 3 interleaved rounds: bit 15 on
   1049 +2.4% causal 2k, +2.2% causal 32k, +2.5-2.9% non-causal 2k-32k (spreads under 2%; 8k
   causal noisy), on the masked 1305 +2.1% (4k window and documents at 128k); bits 16 and 17 on
   top of it +1.5% more masked (505.5 / 506.5 TFLOP/s against 488.1 / 488.7 for 1305), but 0 to
   -1.4% unmasked, so the unmasked instances take bit 15 alone. At d = 64 bit 15 on 1049 +2.1%
   (causal 2k, 32k).
   Bit 18 (DQ_ALT, session 20, run 1, 3 interleaved rounds against the library): each block's whole
   dQ tile by one consumer, taking turns, as one m64n128 product (48 KB of shared-memory operands
   where the two m64n64 halves read 64 KB). Unmasked d = 128: causal 32k +2.3%, non-causal 32k +2.1%,
   8k +1.4 to +2%, causal 2k +5% with dK, dV by TMA (the short walks' form); promoted (33817 ->
   295961). On the masked kernel (230681) bit 18 gained only 0.3-0.7% (runs 1 and 2: 4k window and
   documents at 128k), and the masks bench moved level; without bits 16 and 17 (run 2, "bwd ws dq
   alt m1", 296217) +1.0% (window) and +1.4% (documents) against 230681, with 16 alone +0.6 / +1.2%,
   with 17 alone +0.4 / 0%. So the masked d = 128 instances take 296217: bit 18 where bits 16-17
   were (their stmatrix stores and scaled dS^T gained 1.5% on the two-halves dQ, session 18, and
   nothing on top of the whole-tile one). */
#ifndef DFA__BWD_WS_LIBRARY /* -DDFA__BWD_WS_LIBRARY=1025: a build with another kernel, for A/B runs */
#define DFA__BWD_WS_LIBRARY 33809 /* 1041 + 32768 */
#endif
#ifndef DFA__BWD_WS_LIBRARY128 /* the unmasked instances at d = 128 (ex2); DFA__BWD_WS_LIBRARY serves d = 64 */
#define DFA__BWD_WS_LIBRARY128 295961 /* 1049 + 32768 + 262144 (DQ_ALT, session 20) */
#endif
#define DFA__BWD_WS_LIBRARY_UNMASKED(D) ((D) == 128 ? DFA__BWD_WS_LIBRARY128 : DFA__BWD_WS_LIBRARY)
#ifndef DFA__BWD_WS_LIBRARY_MASKED128
#define DFA__BWD_WS_LIBRARY_MASKED128 296217 /* 1305 + 32768 + 262144 (DQ_ALT, session 20; before: 230681) */
#endif
#ifndef DFA__BWD_WS_LIBRARY_MASKED64
#define DFA__BWD_WS_LIBRARY_MASKED64 33793 /* 1025 + 32768 */
#endif
#define DFA__BWD_WS_LIBRARY_MASKED(D) ((D) == 128 ? DFA__BWD_WS_LIBRARY_MASKED128 : DFA__BWD_WS_LIBRARY_MASKED64)
template <int D, int BM, int DQ_MODE, int BF16, int OUT32, int MASKED, int VARIANT>
__global__ void __launch_bounds__(384, 1)
    dfa__bwd_ws_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                       const __grid_constant__ CUtensorMap tv, const __grid_constant__ CUtensorMap tdo,
                       const __grid_constant__ CUtensorMap tdq, const __grid_constant__ CUtensorMap tdk,
                       const __grid_constant__ CUtensorMap tdv, const dfa__bwd_params p,
                       const __grid_constant__ dfa__cuda_dkv16 dkv16) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef typename dfa__out_type<OUT32>::type OutT;
    typedef dfa__bwd_ws_cfg<D, BM> C;
    constexpr int BN = C::BN, STAGES = C::STAGES, NCB = D / 64, Q8 = BM / 8, D8 = D / 8;
    constexpr int DQ_ATOMIC = DQ_MODE != 0, NDQ = C::NDQ;
    constexpr int CHAIN = DQ_ATOMIC && (VARIANT & 1), SWZ = (VARIANT & 4) != 0, FAST_EXP = (VARIANT & 8) != 0;
    /* DEFER: block it's dQ product goes in with block it + 1's S^T, so that its staging stores
       run under S^T and nothing is in flight across iterations (see the loop) */
    constexpr int DEFER = CHAIN && (VARIANT & 16) != 0;
    /* PP: the two consumer warpgroups take turns issuing their products (named barriers 1 and 2,
       consumer 0 first), so that one's softmax and stores run under the other's products instead
       of both waiting at once; DP_EARLY: dP^T goes in with dQ and S^T (two turns per block, not
       three) */
    constexpr int PP = DEFER && (VARIANT & 32) != 0, DP_EARLY = DEFER && (VARIANT & 64) != 0;
    /* MASK_SKIP (masked instances): the per-element visibility test only in blocks where some
       lane of the warp holds a key that not every query row of the block sees; inside a window
       or a long document (most blocks) the warp skips it */
    constexpr int MASK_SKIP = MASKED && (VARIANT & 128) != 0;
    /* MASK_UNI (masked instances): whether a block needs the element test is decided per warp by
       two scalar compares (the warp's keys' intervals reduced once per CTA), and the test is one
       unsigned compare, as the unmasked kernel's causal test is written */
    constexpr int MASK_UNI = MASKED && !MASK_SKIP && (VARIANT & 512) != 0;
    /* MASK_SPLIT: the CTA's query blocks in runs (FlashAttention-3's masking and non-masking
       steps): the blocks every row of which sees all of the CTA's keys (inside a long document or
       a window; below the causal diagonal) run a copy of the step without the element test */
    constexpr int MASK_SPLIT = !MASK_SKIP && !MASK_UNI && (VARIANT & 1024) != 0;
    /* TMA_DKV (16-bit dk, dv): dK and dV leave through the copy engine, staged over the K and V
       tiles once both consumers' products have retired (see the end) */
    constexpr int TMA_DKV = (VARIANT & 256) != 0 && !OUT32;
    /* float32 instances (the executor's blocks) with bit 8: a key tile handed whole to 16-bit
       outputs (dkv16, launch.h) leaves the same way, through the tensor maps tdk, tdv over them */
    constexpr int TMA_DKV16 = (VARIANT & 256) != 0 && OUT32;
    /* Q_FIRST: the producer issues a query block's Q and dO copies before it reads the block's lse
       and D from global memory, so that the read's latency runs under the copies'. Level (session
       15, run 5, 3 rounds at d = 128: -0.4 to +0.7% at 2k and 32k, causal or not, and a 4k window
       at 128k): the two-stage ring already hides that read, so the library does not take it. */
    constexpr int Q_FIRST = (VARIANT & 4096) != 0;
    constexpr int STAMPS = (VARIANT & 8192) != 0; /* the kernel lab's timing (above) */
    /* QSPLIT (float32 dK, dV, dQ added as it comes): with p.qsplit > 1 the grid holds qsplit CTAs
       per key tile, each walking its share of the tile's query blocks and adding its partial dK, dV
       into outputs the launcher zeroed (launch_bwd.cuh, dfa__bwd_qsplit_for) */
    constexpr int QSPLIT = OUT32 && DQ_MODE == 1;
    /* EARLY: the first thread prefetches the tensor maps, initialises the barriers and issues the
       K and V copies at the kernel's entry, before every thread reads the mask intervals or causal
       bounds of its walk (a dependent global read, then a CTA-wide barrier, that used to come
       first). Not with QSPLIT, whose CTAs may leave before any barrier. */
    constexpr int EARLY = (VARIANT & 16384) != 0 && !QSPLIT;
    /* DESC_ADD: the wgmma descriptors as a base per tile plus a constant per k-step
       (dfa__wgmma_desc_at), the consumer warpgroup's index broadcast from lane 0 so that ptxas
       keeps it (and the bases) in uniform registers */
    constexpr int DESC_ADD = (VARIANT & 32768) != 0;
    /* SCALE_DS (bf16): dS^T carries the softmax scale (dP^T times it, less D times it, which the
       loading warp scales), so that neither the dQ tiles nor dK are multiplied by it again: 32
       multiplies a block per consumer thread fewer. bf16 keeps float32's exponent range, so the
       scaled dS^T rounds as precisely; with fp16 smaller values would reach its subnormals. */
    constexpr int SCALE_DS = (VARIANT & 65536) != 0 && BF16;
    /* STSM: dS^T into shared memory by stmatrix (four 8 x 8 blocks an instruction) instead of a
       32-bit store per pair */
    constexpr int STSM = (VARIANT & 131072) != 0;
    /* DQ_ALT (D = 128, BM = 64, with DEFER): block J's whole 64 x 128 dQ tile by consumer J & 1
       (one m64n128 product reading dS once and all of K: 48 KB of shared-memory operands where the
       two m64n64 halves read 64 KB), staged into that consumer's own staging tile; the other
       consumer has no dQ work in that block and waits for nothing. Session 20 (bench/gpu/NOTES.md). */
    constexpr int DQ_ALT = DEFER && !PP && !DP_EARLY && D == 128 && BM == 64 && (VARIANT & 262144) != 0;
    constexpr int DQN = DQ_ALT ? D : 64; /* the dQ product's N: columns of the tile per consumer */
    extern __shared__ __align__(128) unsigned char dfa__smem[];
    const uint32_t base = (dfa__smem_addr(dfa__smem) + 1023u) & ~1023u;
    unsigned char *const gbase = dfa__smem + (base - dfa__smem_addr(dfa__smem)); /* base, as a generic pointer */
    const uint32_t sK = base, sV = base + C::OFF_V, sQ = base + C::OFF_Q, sO = base + C::OFF_DO, sS = base + C::OFF_DS;
    const uint32_t sDQ = base + C::OFF_DQ;
    float *const sLD = (float *)(gbase + C::OFF_LD);
    /* barriers: kv_full, full[S], empty[S], dq_full[2], dq_empty[2], ds[warpgroup][buffer] */
    const uint32_t bar = base + C::OFF_BAR;
#define KV_FULL (bar)
#define FULL(s) (bar + 8u * (1 + (s)))
#define EMPTY(s) (bar + 8u * (1 + STAGES + (s)))
#define DQ_FULL(i) (bar + 8u * (1 + 2 * STAGES + (i)))
#define DQ_EMPTY(i) (bar + 8u * (3 + 2 * STAGES + (i)))
#define DS_READY(c, buf) (bar + 8u * (5 + 2 * STAGES + 2 * (c) + (buf)))

    const int tid = threadIdx.x;
    if (STAMPS && tid == 0) dfa__bwd_stamp(0, dfa__globaltimer());
    const int nn = (p.sh.seqlen_k + BN - 1) / BN;
    const uint32_t tiles = (uint32_t)nn * (uint32_t)(p.sh.batch * p.sh.num_kv_heads);
    const uint32_t unit = QSPLIT ? blockIdx.x % tiles : blockIdx.x;
    const int split = QSPLIT ? (int)(blockIdx.x / tiles) : 0;
    /* in-order dQ: a CTA waits only on CTAs of higher key blocks, so those are launched first
       (a CTA never waits on one that may not be resident yet) */
    const int nb_ = DQ_MODE == 2 ? nn - 1 - (int)(unit % nn) : (int)(unit % nn), bg = (int)(unit / nn);
    const int b = bg / p.sh.num_kv_heads, kvh = bg % p.sh.num_kv_heads;
    const int group = p.sh.num_heads / p.sh.num_kv_heads, n0 = nb_ * BN;
    const long long kstride = (long long)p.sh.num_kv_heads * p.sh.head_dim;
    auto init_barriers = [&] {
        dfa__mbar_init(KV_FULL, 1);
        for (int s = 0; s < STAGES; s++) {
            dfa__mbar_init(FULL(s), 32);   /* the loading warp's lanes (lane 0's arrival carries the bytes) */
            dfa__mbar_init(EMPTY(s), 256); /* every consumer thread */
        }
        for (int i = 0; i < 2; i++) {
            dfa__mbar_init(DQ_FULL(i), DQ_ALT ? 128 : 256); /* the consumers that stage a tile */
            dfa__mbar_init(DQ_EMPTY(i), 1);
        }
        for (int i = 0; i < 4; i++) dfa__mbar_init(DS_READY(i >> 1, i & 1), 128);
        dfa__fence_barrier_init();
    };
    auto load_kv = [&] {
        dfa__mbar_expect_tx(KV_FULL, 2 * C::KVBYTES);
#pragma unroll
        for (int cb = 0; cb < NCB; cb++) {
            dfa__tma_load_4d(sK + cb * BN * 128, &tk, KV_FULL, cb * 64, kvh, n0, b);
            dfa__tma_load_4d(sV + cb * BN * 128, &tv, KV_FULL, cb * 64, kvh, n0, b);
        }
    };
    if (EARLY && tid == 0) { /* K and V on their way before the walk's bounds are read */
        dfa__prefetch_tmap(&tk);
        dfa__prefetch_tmap(&tv);
        dfa__prefetch_tmap(&tq);
        dfa__prefetch_tmap(&tdo);
        if (DQ_ATOMIC) dfa__prefetch_tmap(&tdq);
        init_barriers();
        load_kv();
    }
    int mb_begin = 0, mb_end = (p.sh.seqlen_q + BM - 1) / BM; /* the query blocks that see this key block */
    if (MASKED) {
        dfa__mask_query_blocks<BM>(p.sh, b, n0, BN, &mb_begin, &mb_end);
    } else if (p.sh.causal) {
        const long long first = (long long)n0 - p.sh.offset;
        mb_begin = first <= 0 ? 0 : (first >= p.sh.seqlen_q ? mb_end : (int)(first / BM));
    }
    const int nmb = mb_end - mb_begin;
    int it0 = 0, total = nmb * group; /* this CTA's iterations: it0 .. it0 + total - 1 of the tile's */
    if (QSPLIT && p.qsplit > 1) {
        const int all = total;
        it0 = (int)((long long)all * split / p.qsplit);
        total = (int)((long long)all * (split + 1) / p.qsplit) - it0;
        if (total == 0) return; /* nothing to add (the whole CTA leaves before any barrier) */
    }

    if (tid == 0 && !EARLY) init_barriers();
    __syncthreads();

    if (tid < 128) {
        dfa__setmaxnreg_dec<24>();
        const int warp = tid >> 5, lane = tid & 31;
        if (warp == 0) {
            if (lane == 0 && !EARLY) load_kv();
            for (int it = 0; it < total; it++) {
                const int s = it % STAGES, h = kvh * group + (it0 + it) / nmb, m0 = (mb_begin + (it0 + it) % nmb) * BM;
                dfa__mbar_wait(EMPTY(s), ((uint32_t)(it / STAGES) & 1u) ^ 1u);
                auto copy_q_do = [&] {
                    for (int cb = 0; cb < NCB; cb++) {
                        dfa__tma_load_4d(sQ + s * C::QBYTES + cb * BM * 128, &tq, FULL(s), cb * 64, h, m0, b);
                        dfa__tma_load_4d(sO + s * C::QBYTES + cb * BM * 128, &tdo, FULL(s), cb * 64, h, m0, b);
                    }
                };
                if (Q_FIRST && lane == 0) { /* the copies first; every lane arrives below */
                    dfa__mbar_expect_tx_only(FULL(s), 2 * C::QBYTES);
                    copy_q_do();
                }
                float *ld = sLD + s * 2 * BM;
                const long long lrow = ((long long)b * p.sh.num_heads + h) * p.sh.seqlen_q;
                for (int i = lane; i < BM; i += 32) {
                    const int q = m0 + i;
                    ld[i] = q < p.sh.seqlen_q ? __ldg(p.lse2 + lrow + q) : INFINITY; /* rows past the end see nothing */
                    ld[BM + i] = q < p.sh.seqlen_q ? __ldg(p.dsum + lrow + q) * (SCALE_DS ? p.sh.scale : 1.0f) : 0.0f;
                }
                if (Q_FIRST) {
                    dfa__mbar_arrive(FULL(s));
                } else if (lane == 0) {
                    dfa__mbar_expect_tx(FULL(s), 2 * C::QBYTES);
                    copy_q_do();
                } else {
                    dfa__mbar_arrive(FULL(s));
                }
            }
        } else if (warp == 1 && DQ_ATOMIC && lane == 0) {
            const int nm = (p.sh.seqlen_q + BM - 1) / BM;
            for (int it = 0; it < total; it++) {
                const int i = it % NDQ, h = kvh * group + (it0 + it) / nmb, mi = mb_begin + (it0 + it) % nmb, m0 = mi * BM;
                int *sem = (int *)0;
                int order = 0;
                if (DQ_MODE == 2) {
                    /* the key blocks that add into query block mi are 0 .. last; the higher go first */
                    int last = nn - 1;
                    if (p.sh.causal) {
                        const long long rows_end = (long long)(mi + 1) * BM < p.sh.seqlen_q ? (long long)(mi + 1) * BM
                                                                                             : p.sh.seqlen_q;
                        const long long kmax = (rows_end - 1 + p.sh.offset) / BN; /* >= nb: this block adds here */
                        last = kmax < last ? (int)kmax : last;
                    }
                    order = last - nb_;
                    sem = p.dq_sem + ((long long)b * p.sh.num_heads + h) * nm + mi;
                }
                dfa__mbar_wait(DQ_FULL(i), (uint32_t)(it / NDQ) & 1u);
                if (DQ_MODE == 2) {
                    dfa__sem_wait(sem, order);
                    asm volatile("fence.proxy.async.global;" ::: "memory"); /* the reduce after the acquire */
                }
#pragma unroll
                for (int cb = 0; cb < D / 32; cb++)
                    dfa__tma_reduce_add_4d(&tdq, sDQ + i * C::DQBYTES + cb * BM * 128, cb * 32, h, m0, b);
                dfa__bulk_commit();
                if (DQ_MODE == 2) {
                    dfa__bulk_wait();
                    asm volatile("fence.proxy.async.global;" ::: "memory"); /* the sums before the release */
                    dfa__sem_post(sem);
                } else {
                    dfa__bulk_wait_read();
                }
                dfa__mbar_arrive(DQ_EMPTY(i));
            }
            dfa__bulk_wait();
        }
        return;
    }

    dfa__setmaxnreg_inc<240>();
    const int c = (DESC_ADD ? __shfl_sync(0xffffffffu, tid / 128, 0) : tid / 128) - 1;
    const int wt = tid & 127, warp = wt >> 5, lane = wt & 31, g = lane >> 2, t = lane & 3;
    /* DESC_ADD: this warpgroup's K and V rows (S^T, dP^T) and dQ's K columns and dS^T rows */
    const uint32_t k_lo = dfa__wgmma_desc_lo(sK + c * 64 * 128, 16), v_lo = dfa__wgmma_desc_lo(sV + c * 64 * 128, 16);
    const int key0 = c * 64 + warp * 16 + g; /* this lane's keys: key0 and key0 + 8 (within the block) */
    int qmin[2], qmax[2]; /* the query rows [qmin, qmax) that see this lane's two keys (qmax: MASKED only) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (MASKED) {
            dfa__mask_key_interval(p.sh, b, n0 + key0 + 8 * r, &qmin[r], &qmax[r]);
        } else {
            const int key = n0 + key0 + 8 * r;
            long long qm = p.sh.causal ? (long long)key - p.sh.offset : 0;
            qm = qm < 0 ? 0 : qm;
            qmin[r] = key >= p.sh.seqlen_k || qm > p.sh.seqlen_q ? 0x7fffffff : (int)qm;
            qmax[r] = 0x7fffffff;
        }
    }
    /* MASK_UNI: every row of [m0, m0 + BM) sees all of the warp's 16 keys iff m0 >= lo_max and
       m0 + BM <= hi_min; keys past the end have empty intervals, so their blocks are tested */
    int lo_max = 0, hi_min = 0;
    unsigned qlen[2] = {0u, 0u};
    if (MASK_UNI) {
        lo_max = __reduce_max_sync(0xffffffffu, qmin[0] > qmin[1] ? qmin[0] : qmin[1]);
        hi_min = __reduce_min_sync(0xffffffffu, qmax[0] < qmax[1] ? qmax[0] : qmax[1]);
        qlen[0] = (unsigned)(qmax[0] - qmin[0]);
        qlen[1] = (unsigned)(qmax[1] - qmin[1]);
    }
    /* MASK_SPLIT: the query blocks [in_lo, in_hi) see every key of the CTA. Masked: both ends of
       the keys' row intervals are non-decreasing (mask.cuh), so every key's interval holds
       [lo(last key), hi(first key)). Unmasked: the rows from the last key's diagonal on (rows past
       the end need no test: their lse is +inf). A block past the keys' end has none. */
    int in_lo = mb_end, in_hi = mb_end;
    if (MASK_SPLIT && n0 + BN <= p.sh.seqlen_k) {
        long long lo_all = 0, hi_all = p.sh.seqlen_q;
        if (MASKED) {
            lo_all = dfa__mask_key(p.sh, b, n0 + BN - 1).x;
            hi_all = dfa__mask_key(p.sh, b, n0).y;
        } else {
            lo_all = p.sh.causal ? (long long)n0 + BN - 1 - p.sh.offset : 0;
            lo_all = lo_all < 0 ? 0 : lo_all;
            hi_all = (long long)mb_end * BM;
        }
        const int a = (int)((lo_all + BM - 1) / BM), z = (int)(hi_all / BM);
        if (a < z) {
            in_lo = a > mb_begin ? a : mb_begin;
            in_hi = z < mb_end ? z : mb_end;
            if (in_hi < in_lo) in_lo = in_hi = mb_end;
        }
    }
    /* which part of the BM x D dQ tile this warpgroup computes (64 x 64 either way; DQ_ALT: all of it, every other block) */
    const int dq_row0 = BM == 64 ? 0 : 64 * c, dq_col0 = BM == 64 && !DQ_ALT ? 64 * c : 0;

    float dk[D8 * 4], dv[D8 * 4];
#pragma unroll
    for (int i = 0; i < D8 * 4; i++) dk[i] = dv[i] = 0.0f;

    /* dQ of block J: dS K over both warpgroups' halves of dS^T (buffer J & 1), after the other
       warpgroup published its half (WAIT) */
#define DFA__BWD_ISSUE_DQ(J, WAIT)                                                                              \
    do {                                                                                                        \
        _Pragma("unroll") for (int i = 0; i < DQN / 2; i++) dq[i] = 0.0f;                                       \
        if (WAIT) dfa__mbar_wait(DS_READY(1 - c, (J) & 1), (uint32_t)((J) >> 1) & 1u);                          \
        dfa__wgmma_fence();                                                                                     \
        const uint32_t ds_j = sS + ((J) & 1) * C::DSBYTES;                                                      \
        const uint32_t ds_lo = dfa__wgmma_desc_lo(ds_j + (dq_row0 / 64) * BN * 128, 16);                        \
        /* K's two 64-column blocks lie BN * 128 bytes apart (the LBO of an N = 128 MN-major B) */             \
        const uint32_t kq_lo = dfa__wgmma_desc_lo(sK + (dq_col0 / 64) * BN * 128, DQN > 64 ? BN * 128 : 16);  \
        _Pragma("unroll") for (int kk = 0; kk < BN / 16; kk++) {                                               \
            const uint64_t da = DESC_ADD ? dfa__wgmma_desc_at(ds_lo, kk * 16 * 128)                             \
                                         : dfa__wgmma_desc(ds_j + (dq_row0 / 64) * BN * 128 + kk * 16 * 128, 16); \
            const uint64_t db = DESC_ADD ? dfa__wgmma_desc_at(kq_lo, kk * 16 * 128)                             \
                                         : dfa__wgmma_desc(sK + (dq_col0 / 64) * BN * 128 + kk * 16 * 128,      \
                                                           DQN > 64 ? BN * 128 : 16);                           \
            dfa__wgmma_ss_tt<DQN, BF16>(dq, da, db, kk > 0);                                                    \
        }                                                                                                       \
        dfa__wgmma_commit();                                                                                    \
    } while (0)
    /* The dQ tile of block J (its product retired) into staging tile J % NDQ for the writer warp.
       8-byte stores go out a half-warp (rows g = 0..3 or 4..7, lanes t = 0..3) at a time. In the
       tile's 128-byte swizzle a lane's pair of columns 8j + 2t lands in 16-byte chunk
       (2j + t / 2) ^ g, so with every lane at the same j the half-warp's 8 pairs of lanes share 4
       chunks: 2-way conflicts, half the store bandwidth (ncu, run 14). With SWZ the lanes of odd
       rows store column block j ^ 2 when the others store j: chunk bits (t / 2 ^ g0, j0 ^ g1,
       j1 ^ g0 ^ g2) then differ across the half-warp. */
#define DFA__BWD_STAGE_DQ(J)                                                                                    \
    do {                                                                                                        \
        _Pragma("unroll") for (int i = 0; i < DQN / 2; i++) dfa__reg_fence(dq[i]);                              \
        /* staging tile J % NDQ is free once the writer has read what it held NDQ tiles ago */                  \
        const int di = (J) % NDQ;                                                                               \
        if ((J) >= NDQ) dfa__mbar_wait(DQ_EMPTY(di), (uint32_t)(((J) - NDQ) / NDQ) & 1u);                       \
        const int odd = SWZ ? (g & 1) : 0;                                                                      \
        _Pragma("unroll") for (int r = 0; r < 2; r++) {                                                        \
            const int row = dq_row0 + warp * 16 + g + 8 * r;                                                    \
            _Pragma("unroll") for (int i = 0; i < DQN / 8; i++) {                                              \
                const int j = odd ? i ^ 2 : i;                                                                  \
                const float x = odd ? dq[4 * (i ^ 2) + 2 * r] : dq[4 * i + 2 * r];                              \
                const float y = odd ? dq[4 * (i ^ 2) + 2 * r + 1] : dq[4 * i + 2 * r + 1];                      \
                const int col = dq_col0 + 8 * j + 2 * t, box = col >> 5, cc = col & 31;                         \
                const uint32_t a = sDQ + di * C::DQBYTES + box * BM * 128 + row * 128 +                         \
                                   ((((cc >> 2) ^ (row & 7))) << 4) + (cc & 3) * 4;                             \
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(a), "f"(SCALE_DS ? x : x * p.sh.scale),  \
                             "f"(SCALE_DS ? y : y * p.sh.scale)                                                 \
                             : "memory");                                                                       \
            }                                                                                                   \
        }                                                                                                       \
        dfa__fence_proxy_async();                                                                               \
        dfa__mbar_arrive(DQ_FULL(di));                                                                          \
    } while (0)

    dfa__mbar_wait(KV_FULL, 0);
    if (STAMPS && tid == 128) {
        dfa__bwd_stamp(1, dfa__globaltimer());
        dfa__bwd_stamp(5, dfa__smid());
        dfa__bwd_stamp(6, (unsigned long long)total);
        const int inner = MASK_SPLIT && !(QSPLIT && p.qsplit > 1) ? group * (in_hi - in_lo) : 0;
        dfa__bwd_stamp(7, (unsigned long long)(total - inner));
    }
    if (PP && c == 1) dfa__named_arrive(1, 256); /* consumer 0 goes first */
    float dq[DQN / 2];
    /* One query block of the walk. TEST (a compile-time tag): whether the block may need the
       element test (the mask's, or the causal one); MASK_SPLIT walks the blocks every row of which
       sees every key of this CTA with TEST 0, so their softmax carries no test at all (see the
       walk below). */
    auto step = [&](const int it, auto test_tag, auto dq_tag) {
        constexpr int TEST = decltype(test_tag)::value;
        constexpr int ISSUE = decltype(dq_tag)::value; /* DEFER: block it - 1's dQ is this consumer's */
        constexpr int ELEM = !MASK_SPLIT || TEST; /* this block may hold an invisible pair */
        const int s = it % STAGES, m0 = (mb_begin + (it0 + it) % nmb) * BM;
        const uint32_t ph = (uint32_t)(it / STAGES) & 1u;
        float st[Q8 * 4], dp[Q8 * 4];
        dfa__mbar_wait(FULL(s), ph);
        const uint32_t q_s = sQ + s * C::QBYTES, o_s = sO + s * C::QBYTES;
        const uint32_t q_lo = dfa__wgmma_desc_lo(q_s, 16), o_lo = dfa__wgmma_desc_lo(o_s, 16);
        const float *ld = sLD + s * 2 * BM;
        /* DEFER: the previous block's dQ first (at it = 0 a product on an unwritten buffer whose
           result is dropped: a wgmma under a data-dependent branch makes ptxas serialise them),
           then S^T, under which the previous dQ tile is staged */
        if (PP) dfa__named_sync(1 + c, 256);
        if (DEFER && ISSUE) DFA__BWD_ISSUE_DQ(it - 1, it > 0);
        if (DQ_ALT && ISSUE) { /* the tile out before S^T: its 64 registers and S^T's 32 would not fit beside dK, dV */
            dfa__wgmma_wait<0>();
            if (it > 0) DFA__BWD_STAGE_DQ(it - 1);
        }
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, koff = kc + c * 64 * 128;
            const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
            if (DESC_ADD)
                dfa__wgmma_ss<BM, BF16>(st, dfa__wgmma_desc_at(k_lo, kc), dfa__wgmma_desc_at(q_lo, qoff),
                                        kk > 0);
            else
                dfa__wgmma_ss<BM, BF16>(st, dfa__wgmma_desc(sK + koff, 16), dfa__wgmma_desc(q_s + qoff, 16), kk > 0);
        }
        dfa__wgmma_commit();
        if (DEFER && !DP_EARLY && ISSUE && !DQ_ALT) {
            if (PP) dfa__named_arrive(2 - c, 256);
            dfa__wgmma_wait<1>();
            if (it > 0) DFA__BWD_STAGE_DQ(it - 1);
            if (PP) dfa__named_sync(1 + c, 256);
            dfa__wgmma_fence();
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const uint32_t kc = (kk / 4) * BN * 128 + (kk % 4) * 32, koff = kc + c * 64 * 128;
            const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
            if (DESC_ADD)
                dfa__wgmma_ss<BM, BF16>(dp, dfa__wgmma_desc_at(v_lo, kc), dfa__wgmma_desc_at(o_lo, qoff),
                                        kk > 0);
            else
                dfa__wgmma_ss<BM, BF16>(dp, dfa__wgmma_desc(sV + koff, 16), dfa__wgmma_desc(o_s + qoff, 16), kk > 0);
        }
        dfa__wgmma_commit();
        if (PP) dfa__named_arrive(2 - c, 256);
        if (DP_EARLY) {
            dfa__wgmma_wait<2>();
            if (it > 0) DFA__BWD_STAGE_DQ(it - 1);
        }
        const bool need_mask = !ELEM ? false : MASK_UNI ? (m0 < lo_max || m0 + BM > hi_min) :
                               n0 + BN > p.sh.seqlen_k || (MASKED && !MASK_SKIP) ||
                               (MASK_SKIP && !__all_sync(0xffffffffu, m0 >= qmin[0] && m0 >= qmin[1] &&
                                                                         m0 + BM <= qmax[0] && m0 + BM <= qmax[1])) ||
                               (p.sh.causal && (long long)m0 + p.sh.offset < (long long)n0 + BN - 1);
        /* P^T while dP^T is still being computed */
        dfa__wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) dfa__reg_fence(st[i]);
#pragma unroll
        for (int j = 0; j < Q8; j++) {
            const float2 L = *(const float2 *)(ld + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = fmaf(st[4 * j + e], p.scale_log2, -((e & 1) ? L.y : L.x));
                float pv = FAST_EXP ? dfa__exp2_ftz(x) : exp2f(x);
                const int q = m0 + 8 * j + 2 * t + (e & 1);
                if (!ELEM ? false : MASK_UNI ? need_mask && (unsigned)(q - qmin[e >> 1]) >= qlen[e >> 1] :
                    MASKED ? (!MASK_SKIP || need_mask) && !dfa__mask_query_visible(q, qmin[e >> 1], qmax[e >> 1])
                           : need_mask && q < qmin[e >> 1])
                    pv = 0.0f;
                st[4 * j + e] = pv;
            }
        }
        dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < Q8 * 4; i++) dfa__reg_fence(dp[i]);
#pragma unroll
        for (int j = 0; j < Q8; j++) {
            const float2 Dq = *(const float2 *)(ld + BM + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; e++)
                dp[4 * j + e] = st[4 * j + e] * (SCALE_DS ? fmaf(dp[4 * j + e], p.sh.scale, -((e & 1) ? Dq.y : Dq.x))
                                                          : dp[4 * j + e] - ((e & 1) ? Dq.y : Dq.x));
        }
        uint32_t pf[BM / 16][4], sf[BM / 16][4];
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            dfa__pack_a<BF16>(pf[kk], st + 8 * kk, st + 8 * kk + 4);
            dfa__pack_a<BF16>(sf[kk], dp + 8 * kk, dp + 8 * kk + 4);
        }
        const int buf = it & 1;
        const uint32_t ds_s = sS + buf * C::DSBYTES;
        if (DQ_ATOMIC) {
            /* dS^T [key][query] into shared memory (64-query column blocks, 128-byte swizzle); the
               other warpgroup finished reading this buffer before it published its dS^T of the
               previous iteration, which this warpgroup waited for */
            if (STSM) {
                /* matrix i = 2 half + r: keys key0 - g + 8 r + (lane % 8), queries kk 16 + 8 half */
                const int key = key0 - g + 8 * ((lane >> 3) & 1) + (lane & 7), hq = 8 * (lane >> 4);
#pragma unroll
                for (int kk = 0; kk < BM / 16; kk++) {
                    const int qc = kk * 16 + hq, blk = qc / 64, col = qc % 64;
                    dfa__stmatrix_x4(ds_s + blk * BN * 128 + key * 128 + (((col >> 3) ^ (key & 7)) << 4), sf[kk]);
                }
            } else
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int qc = kk * 16 + half * 8 + 2 * t, blk = qc / 64, col = qc % 64;
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const int key = key0 + 8 * r;
                        const uint32_t a = ds_s + blk * BN * 128 + key * 128 + ((((col >> 3) ^ (key & 7))) << 4) + (col & 7) * 2;
                        asm volatile("st.shared.b32 [%0], %1;" ::"r"(a), "r"(sf[kk][2 * half + r]));
                    }
                }
            dfa__fence_proxy_async();
            dfa__mbar_arrive(DS_READY(c, buf));
        }
        if (PP) dfa__named_sync(1 + c, 256);
        dfa__wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            if (DESC_ADD) { /* the same bases with LBO BM * 128 (MN-major, D > 64 columns) */
                constexpr uint32_t LBO = ((BM * 128 >> 4) - 1) << 16;
                dfa__wgmma_rs<D, BF16>(dv, pf[kk], dfa__wgmma_desc_at(o_lo + LBO, kk * 16 * 128), 1);
                dfa__wgmma_rs<D, BF16>(dk, sf[kk], dfa__wgmma_desc_at(q_lo + LBO, kk * 16 * 128), 1);
            } else {
                dfa__wgmma_rs<D, BF16>(dv, pf[kk], dfa__wgmma_desc(o_s + kk * 16 * 128, BM * 128), 1);
                dfa__wgmma_rs<D, BF16>(dk, sf[kk], dfa__wgmma_desc(q_s + kk * 16 * 128, BM * 128), 1);
            }
        }
        dfa__wgmma_commit();
        if (PP) dfa__named_arrive(2 - c, 256);
        if (CHAIN && !DEFER) DFA__BWD_ISSUE_DQ(it, 1); /* behind dV/dK: the pipe does not drain in between */
        if (CHAIN && !DEFER) dfa__wgmma_wait<1>();
        else dfa__wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < D8 * 4; i++) {
            dfa__reg_fence(dk[i]);
            dfa__reg_fence(dv[i]);
        }
        dfa__mbar_arrive(EMPTY(s)); /* Q, dO, lse and D of this stage are no longer read */
        if (DQ_ATOMIC && !DEFER) {
            if (!CHAIN) DFA__BWD_ISSUE_DQ(it, 1);
            dfa__wgmma_wait<0>();
            DFA__BWD_STAGE_DQ(it);
        }
        if (STAMPS && it == 0 && tid == 128) dfa__bwd_stamp(2, dfa__globaltimer());
    };
    /* DQ_ALT: whether this consumer has block it - 1's dQ decides between two copies of the step
       (no wgmma under a data-dependent branch inside one: ptxas would serialise them) */
    auto step_of = [&](const int it, auto test_tag) {
        if (DQ_ALT && ((it - 1) & 1) != c)
            step(it, test_tag, dfa__ctag<0>());
        else
            step(it, test_tag, dfa__ctag<1>());
    };
    if constexpr (MASK_SPLIT) {
        /* The walk in runs of blocks alike: before in_lo and from in_hi on, blocks that may need the
           element test; in between, blocks that do not (a query block's position repeats per head
           of the group, so the runs do too) */
        for (int it = 0; it < total;) {
            const int mi = mb_begin + (it0 + it) % nmb;
            const int run_end = mi < in_lo ? in_lo : (mi < in_hi ? in_hi : mb_end);
            const int e = it + (run_end - mi) < total ? it + (run_end - mi) : total;
            if (mi >= in_lo && mi < in_hi)
                for (; it < e; it++) step_of(it, dfa__ctag<0>());
            else
                for (; it < e; it++) step_of(it, dfa__ctag<1>());
        }
    } else {
        for (int it = 0; it < total; it++) step_of(it, dfa__ctag<1>());
    }
    /* the last block's dQ (none: a dropped product, as at it = 0); DQ_ALT: its consumer's */
    if (DEFER && (!DQ_ALT || ((total - 1) & 1) == c)) {
        DFA__BWD_ISSUE_DQ(total - 1, total > 0);
        dfa__wgmma_wait<0>();
        if (total > 0) DFA__BWD_STAGE_DQ(total - 1);
    }
    if (STAMPS && tid == 128) dfa__bwd_stamp(3, dfa__globaltimer());

    const float dk_scale = SCALE_DS ? 1.0f : p.sh.scale; /* SCALE_DS: dS^T carried it */
    if (TMA_DKV || (TMA_DKV16 && n0 >= dkv16.from && n0 + BN <= dkv16.to)) {
        /* Every product of both consumers has retired (barrier 3: the other's last dQ reads all
           of K), so each warpgroup writes its 64 keys' dK and dV, rounded, over its own rows of
           the K and V tiles in their 128-byte swizzle, and one thread stores them by TMA (boxes
           of 64 rows; keys past seqlen_k are dropped). */
        dfa__named_sync(3, 256);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int key = key0 + 8 * r;
#pragma unroll
            for (int j = 0; j < D8; j++) {
                dfa__st_swz128_pair<BF16>(sK, BN, key, j, t, dk[4 * j + 2 * r] * dk_scale,
                                          dk[4 * j + 2 * r + 1] * dk_scale);
                dfa__st_swz128_pair<BF16>(sV, BN, key, j, t, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
            }
        }
        dfa__fence_proxy_async();
        dfa__named_sync(4 + c, 128);
        if (wt == 0) {
            dfa__tma_store_rows64<D>(&tdk, sK, BN, c * 64, kvh, n0 + c * 64, b);
            dfa__tma_store_rows64<D>(&tdv, sV, BN, c * 64, kvh, n0 + c * 64, b);
            dfa__bulk_commit();
            dfa__bulk_wait_read();
            if (STAMPS && tid == 128) dfa__bwd_stamp(4, dfa__globaltimer());
        }
        return;
    }
    OutT *dkg = (OutT *)p.dk + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
    OutT *dvg = (OutT *)p.dv + (long long)b * p.sh.seqlen_k * kstride + (long long)kvh * p.sh.head_dim;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = n0 + key0 + 8 * r;
        if (key >= p.sh.seqlen_k) continue;
        if constexpr (OUT32 != 0) /* keys handed to 16-bit outputs (launch.h, dfa__cuda_dkv16) */
            if ((unsigned)(key - dkv16.from) < (unsigned)(dkv16.to - dkv16.from)) {
                const long long at = ((long long)b * p.sh.seqlen_k + key) * kstride + (long long)kvh * p.sh.head_dim;
#pragma unroll
                for (int j = 0; j < D8; j++) {
                    const int col = 8 * j + 2 * t;
                    dfa__store2<BF16>((uint16_t *)dkv16.dk + at + col, dk[4 * j + 2 * r] * dk_scale,
                                      dk[4 * j + 2 * r + 1] * dk_scale);
                    dfa__store2<BF16>((uint16_t *)dkv16.dv + at + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
                }
                continue;
            }
        if (QSPLIT && p.qsplit > 1) { /* a share of the query blocks: added (float32 only) */
#pragma unroll
            for (int j = 0; j < D8; j++) {
                const int col = 8 * j + 2 * t;
                dfa__red_add2((float *)dkg + (long long)key * kstride + col, dk[4 * j + 2 * r] * dk_scale,
                              dk[4 * j + 2 * r + 1] * dk_scale);
                dfa__red_add2((float *)dvg + (long long)key * kstride + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
            }
            continue;
        }
#pragma unroll
        for (int j = 0; j < D8; j++) {
            const int col = 8 * j + 2 * t;
            dfa__store2<BF16>(dkg + (long long)key * kstride + col, dk[4 * j + 2 * r] * dk_scale,
                              dk[4 * j + 2 * r + 1] * dk_scale);
            dfa__store2<BF16>(dvg + (long long)key * kstride + col, dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
    }
    if (STAMPS && tid == 128) dfa__bwd_stamp(4, dfa__globaltimer());
#undef DFA__BWD_ISSUE_DQ
#undef DFA__BWD_STAGE_DQ
#undef KV_FULL
#undef FULL
#undef EMPTY
#undef DQ_FULL
#undef DQ_EMPTY
#undef DS_READY
#else
    (void)tq; (void)tk; (void)tv; (void)tdo; (void)tdq; (void)tdk; (void)tdv; (void)p; (void)dkv16;
    __trap();
#endif
}

#endif
