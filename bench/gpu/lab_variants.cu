/* The kernel lab's variants (lab_variants.h): the launcher templates of the library
 * instantiated for the kernels it does not ship. */
/* per-CTA stamps of the backward's lab row "bwd ws stamps" (src/cuda/bwd_ws.cuh, VARIANT bit 13) */
#define DFA_LAB_BWD_STAMPS 65536
#include <stdio.h>
#include <stdlib.h>
#include "cuda/launch_bwd.cuh"
#include "cuda/launch_fwd.cuh"
#include "lab_bwd_wgmma.cuh"
#include "lab_variants.h"

template <int D, int BM, int ATOMIC, int VARIANT, int BF16, int OUT32>
static dfa_status dfa__launch_bwd_wgmma(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_wgmma_cfg<D, BM> C;
    const long long ctas = (long long)((p.sh.seqlen_k + C::BN - 1) / C::BN) * p.sh.batch * p.sh.num_kv_heads;
    CUtensorMap tq, tk, tv, tdo;
    if (!dfa__tmap(&tq, p.q, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    return dfa__launch(dfa__bwd_wgmma_kernel<D, BM, ATOMIC, VARIANT, BF16, OUT32>, ctas, C::NT, C::SMEM, st, fn,
                       "key tiles", "backward key-block kernel launch", tq, tk, tv, tdo, p);
}

/* The two-warpgroup Hopper key-block kernel, head dims 64 and 128 (VARIANT 0: the library's
   until the warp-specialised kernel replaced it; 1-3 atomic dq only; bench/gpu/NOTES.md). */
template <int ATOMIC, int BF16, int OUT32, int VARIANT = 0>
static dfa_status dfa__bwd_kv_wgmma(const dfa__bwd_params &p, const dfa__cuda_dkv16 &, cudaStream_t st,
                                    const char *fn) {
    if (p.sh.head_dim == 64) return dfa__launch_bwd_wgmma<64, 128, ATOMIC, VARIANT, BF16, OUT32>(p, st, fn);
    return dfa__launch_bwd_wgmma<128, 64, ATOMIC, VARIANT, BF16, OUT32>(p, st, fn);
}


/* A head-dim-64-only forward variant. */
template <int BF16, int PP, int NCW>
static dfa_status lab_fwd_d64(const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim != 64) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "this variant is for head dim 64 only");
    return dfa__launch_fwd_wgmma<64, 128, BF16, PP, 0, NCW>(p, st, fn);
}

/* Head dim 256 on the Hopper forward with another PP than the library's: sm_90 and head dim
   256 only. */
template <int BF16, int PP>
static dfa_status lab_fwd_d256(const dfa__cuda_shape &s, const dfa__fwd_params &p, cudaStream_t st, const char *fn) {
    if (s.head_dim != 256) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "this variant is for head dim 256 only");
    dfa_status cc_st = DFA_OK;
    const int cc = dfa__cuda_device_cc(fn, &cc_st);
    if (cc < 0) return cc_st;
    if (cc != 90) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "the Hopper forward needs an sm_90 device");
    return dfa__launch_fwd_wgmma<256, 64, BF16, PP, 0>(p, st, fn);
}

static dfa_status lab_fwd_shape(int variant, const dfa__cuda_shape &s, const void *q, const void *k, const void *v,
                                void *o, float *lse, cudaStream_t stream);

/* Masked calls (documents, windows) get their intervals first, as the library's calls do. */
extern "C" dfa_status lab_fwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "lab_fwd";
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    void *buf = NULL;
    dfa_status st = s.masked ? dfa__cuda_mask_begin(d, &s, &buf, stream, fn) : DFA_OK;
    if (st) return st;
    return dfa__cuda_mask_end(buf, lab_fwd_shape(variant, s, q, k, v, o, lse, stream), stream, fn);
}

static dfa_status lab_fwd_shape(int variant, const dfa__cuda_shape &s, const void *q, const void *k, const void *v,
                                void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "lab_fwd";
    dfa_status l2_st = DFA_OK;
    const int l2 = dfa__cuda_device_attr(cudaDevAttrL2CacheSize, fn, &l2_st);
    if (l2 < 0) return l2_st;
    dfa__fwd_params p = dfa__fwd_params_of(&s, q, k, v, o, lse, l2);
    const int heads = s.batch * s.num_heads, group = s.num_heads / s.num_kv_heads;
    if (variant == LAB_FWD_WGMMA_HEADS_ORDER) p.l2_heads = heads; /* one section: every head */
    if (variant == LAB_FWD_WGMMA_L2_HALF) p.l2_heads = p.l2_heads / 2 < group ? group : p.l2_heads / 2;
    if (variant == LAB_FWD_WGMMA_L2_DOUBLE) p.l2_heads = 2 * p.l2_heads > heads ? heads : 2 * p.l2_heads;
    if (variant == LAB_FWD_WGMMA_D256_PP)
        return s.bf16 ? lab_fwd_d256<1, 3>(s, p, stream, fn) : lab_fwd_d256<0, 3>(s, p, stream, fn);
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, 0, &wgmma, fn);
    if (st) return st;
    switch (variant) {
    case LAB_FWD_WGMMA_HEADS_ORDER:
    case LAB_FWD_WGMMA_L2_HALF:
    case LAB_FWD_WGMMA_L2_DOUBLE:
        return s.bf16 ? dfa__fwd_wgmma<1, 0>(p, stream, fn) : dfa__fwd_wgmma<0, 0>(p, stream, fn);
    case LAB_FWD_WGMMA_PLAIN:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 0, 0>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 0, 0>(p, stream, fn);
    case LAB_FWD_WGMMA_PINGPONG:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 1, 1>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 1, 1>(p, stream, fn);
    case LAB_FWD_WGMMA_PIPE:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 3, 3>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 3, 3>(p, stream, fn);
    case LAB_FWD_WGMMA_PIPE_ONLY:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 2, 2>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 2, 2>(p, stream, fn);
    case LAB_FWD_WGMMA_LATE:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 7, 6>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 7, 6>(p, stream, fn);
    case LAB_FWD_WGMMA_M128:
        return s.bf16 ? lab_fwd_d64<1, 3, 2>(p, stream, fn) : lab_fwd_d64<0, 3, 2>(p, stream, fn);
    case LAB_FWD_WGMMA_PERSIST:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 43, 42>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 43, 42>(p, stream, fn);
    case LAB_FWD_WGMMA_EXP2F:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 3, 2>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 3, 2>(p, stream, fn);
    case LAB_FWD_WGMMA_PERSIST_PP:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 59>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 59>(p, stream, fn);
    case LAB_FWD_WGMMA_EX2_PP:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 11>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 11>(p, stream, fn);
    case LAB_FWD_WGMMA_TMA_O:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 27, 26>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 27, 26>(p, stream, fn);
    case LAB_FWD_WGMMA_DIRECT_O:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 10>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 10>(p, stream, fn);
    case LAB_FWD_WGMMA_KEEP_MAX:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 75, 122>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 75, 122>(p, stream, fn);
    case LAB_FWD_WGMMA_RESCALE_ALWAYS:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 58>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 58>(p, stream, fn);
    case LAB_FWD_WGMMA_Q_REGS:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 250>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 250>(p, stream, fn);
    case LAB_FWD_WGMMA_OWED_PV:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 11, 506>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 11, 506>(p, stream, fn);
    case LAB_FWD_WGMMA_DESC_ADD:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 523, 1018>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 523, 1018>(p, stream, fn);
    case LAB_FWD_WGMMA_CLUSTER:
        return s.bf16 ? dfa__fwd_wgmma<1, 0, 3, 2, 3, 2>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 3, 2, 3, 2>(p, stream, fn);
    default: return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no forward variant %d", variant);
    }
}

template <int BF16>
static dfa_status lab_bwd_mask_uni(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                   const char *fn) {
    if (p.sh.head_dim == 64) return dfa__launch_bwd_ws<64, 128, 1, BF16, 0, 1, 513>(p, dkv16, st, fn);
    return dfa__launch_bwd_ws<128, 64, 1, BF16, 0, 1, 769>(p, dkv16, st, fn);
}

/* unmasked VU, masked VM (d = 128; d = 64 takes VU for both) */
template <int VU, int VM, int BF16>
static dfa_status lab_bwd_pair(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                               const char *fn) {
    if (p.sh.head_dim == 64) return dfa__launch_bwd_ws<64, 128, 1, BF16, 0, VU, VU>(p, dkv16, st, fn);
    return dfa__launch_bwd_ws<128, 64, 1, BF16, 0, VU, VM>(p, dkv16, st, fn);
}

/* VARIANT V unmasked, V + 256 masked at d = 128 (the masked instances' TMA stores of dK, dV). */
template <int V, int BF16>
static dfa_status lab_bwd_runs(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                               const char *fn) {
    return lab_bwd_pair<V, V | 256, BF16>(p, dkv16, st, fn);
}

/* [row of the variant][atomic dq][bf16]: the two-warpgroup Hopper key-block kernel
   with VARIANT 1, 2, 3 (atomic dq only: NULL in the deterministic column), then VARIANT 0, then
   the warp-specialised kernel without dq followed by the dq pass (deterministic only) */
static const dfa__bwd_launcher lab_kv[36][2][2] = {
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 1>, dfa__bwd_kv_wgmma<1, 1, 0, 1>}},
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 2>, dfa__bwd_kv_wgmma<1, 1, 0, 2>}},
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 3>, dfa__bwd_kv_wgmma<1, 1, 0, 3>}},
    {{dfa__bwd_kv_wgmma<0, 0, 0>, dfa__bwd_kv_wgmma<0, 1, 0>}, {dfa__bwd_kv_wgmma<1, 0, 0>, dfa__bwd_kv_wgmma<1, 1, 0>}},
    {{dfa__bwd_kv_ws<0, 0, 0>, dfa__bwd_kv_ws<0, 1, 0>}, {NULL, NULL}}, /* deterministic only: dq by the dq pass */
    /* the warp-specialised kernel's variants (bwd_ws.cuh VARIANT 0: the library's until run 14;
       5: the library's (dQ chained) with the conflict-free staging stores), atomic dq only */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 0>, dfa__bwd_kv_ws<1, 1, 0, 0>}},
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 5>, dfa__bwd_kv_ws<1, 1, 0, 5>}},
    /* 9: the library's with P recomputed by ex2.approx.ftz alone */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 9>, dfa__bwd_kv_ws<1, 1, 0, 9>}},
    /* 17: each block's dQ issued with the next block's S^T (DEFER); 25: and ex2 */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 17>, dfa__bwd_kv_ws<1, 1, 0, 17>}},
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 25>, dfa__bwd_kv_ws<1, 1, 0, 25>}},
    /* 49, 57: DEFER with the consumers taking turns (PP); 57 with ex2 */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 49>, dfa__bwd_kv_ws<1, 1, 0, 49>}},
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 57>, dfa__bwd_kv_ws<1, 1, 0, 57>}},
    /* 129: the library's, masked calls testing elements only in blocks that need it */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 129>, dfa__bwd_kv_ws<1, 1, 0, 129>}},
    /* 257: the library's with dK, dV stored by TMA */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 257>, dfa__bwd_kv_ws<1, 1, 0, 257>}},
    /* the library's before run 44: VARIANT 1 for masked calls too */
    {{NULL, NULL}, {dfa__bwd_kv_ws<1, 0, 0, 1, 1>, dfa__bwd_kv_ws<1, 1, 0, 1, 1>}},
    /* masked calls: VARIANT 769 at d = 128 (the library's 257 + 512), 513 at 64 (1 + 512) */
    {{NULL, NULL}, {lab_bwd_mask_uni<0>, lab_bwd_mask_uni<1>}},
    {{NULL, NULL}, {lab_bwd_runs<1033, 0>, lab_bwd_runs<1033, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<1041, 0>, lab_bwd_runs<1041, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<1073, 0>, lab_bwd_runs<1073, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<1105, 0>, lab_bwd_runs<1105, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<1281, 0>, lab_bwd_runs<1281, 1>}},
    /* 1049: 1041 with ex2, masked 1305 (1297 + ex2): the library's d = 128 kernels in sessions 15-17 */
    {{NULL, NULL}, {lab_bwd_runs<1049, 0>, lab_bwd_runs<1049, 1>}},
    /* 5145: 1049 with Q and dO copied before the lse and D reads (bit 12), masked 5401 */
    {{NULL, NULL}, {lab_bwd_runs<5145, 0>, lab_bwd_runs<5145, 1>}},
    /* 9241: the d = 128 kernels of sessions 15-17 (1049, masked 9497 = 1305 + stamps) with the per-CTA stamps */
    {{NULL, NULL}, {lab_bwd_runs<9241, 0>, lab_bwd_runs<9241, 1>}},
    /* 17433: 1049 with K and V issued at the entry, the tensor maps prefetched (bit 14; masked 17689);
       25625: the same with the stamps */
    {{NULL, NULL}, {lab_bwd_runs<17433, 0>, lab_bwd_runs<17433, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<25625, 0>, lab_bwd_runs<25625, 1>}},
    /* 1305 unmasked too: the library's d = 128 kernel with dK, dV stored by TMA (bit 8), as its
       masked one has them (the stamps put the direct stores' epilogue at 10% of causal 2k) */
    {{NULL, NULL}, {lab_bwd_runs<1305, 0>, lab_bwd_runs<1305, 1>}},
    /* 33817: 1049 (masked 1305) with the wgmma descriptors as a base plus a constant (bit 15; the
       k-steps' masks and shifts were a third of the main loop's instructions, ncu session 18);
       230425: and dS^T scaled (bit 16) and stored by stmatrix (bit 17); 230681: and dK, dV by TMA */
    {{NULL, NULL}, {lab_bwd_runs<33817, 0>, lab_bwd_runs<33817, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<230425, 0>, lab_bwd_runs<230425, 1>}},
    {{NULL, NULL}, {lab_bwd_runs<230681, 0>, lab_bwd_runs<230681, 1>}},
    /* 295961 / 492825: session 19's library kernels at d = 128 (33817 unmasked, 230681 masked) with
       block J's whole dQ tile by consumer J & 1 as one m64n128 product (bit 18, DQ_ALT); d = 64
       unchanged. The library took 295961 (short walks 296217) and, masked, 296217 ("m1") */
    {{NULL, NULL}, {lab_bwd_pair<295961, 492825, 0>, lab_bwd_pair<295961, 492825, 1>}},
    {{NULL, NULL}, {lab_bwd_pair<296217, 492825, 0>, lab_bwd_pair<296217, 492825, 1>}},
    /* the masked kernel's bit 18 forms without bits 16 and 17, with 16 alone, with 17 alone (run 1:
       492825 gained 0.3-0.6% on the masks where the unmasked 295961 gained 2-5%) */
    {{NULL, NULL}, {lab_bwd_pair<296217, 296217, 0>, lab_bwd_pair<296217, 296217, 1>}},
    {{NULL, NULL}, {lab_bwd_pair<296217, 361753, 0>, lab_bwd_pair<296217, 361753, 1>}},
    {{NULL, NULL}, {lab_bwd_pair<296217, 427289, 0>, lab_bwd_pair<296217, 427289, 1>}},
    /* 304153 / 304409: the library's d = 128 kernels since session 20 (295961 unmasked, 296217
       masked) with the per-CTA stamps (bit 13; --stamps DIR) */
    {{NULL, NULL}, {lab_bwd_pair<304153, 304409, 0>, lab_bwd_pair<304153, 304409, 1>}},
};

extern "C" dfa_status lab_bwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                              cudaStream_t stream) {
    static const char fn[] = "lab_bwd";
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, 1, &wgmma, fn);
    if (st) return st;
    int row;
    switch (variant) {
    case LAB_BWD_WGMMA_FUSED: row = 0; break;
    case LAB_BWD_WGMMA_BULK: row = 1; break;
    case LAB_BWD_WGMMA_BULK_FUSED: row = 2; break;
    case LAB_BWD_WGMMA_V0: row = 3; break;
    case LAB_BWD_WS_DQ_PASS: row = 4; break;
    case LAB_BWD_WS_PLAIN: row = 5; break;
    case LAB_BWD_WS_CHAIN_SWZ: row = 6; break;
    case LAB_BWD_WS_EX2: row = 7; break;
    case LAB_BWD_WS_DEFER: row = 8; break;
    case LAB_BWD_WS_DEFER_EX2: row = 9; break;
    case LAB_BWD_WS_DEFER_PP: row = 10; break;
    case LAB_BWD_WS_DEFER_PP_EX2: row = 11; break;
    case LAB_BWD_WS_MASK_SKIP: row = 12; break;
    case LAB_BWD_WS_TMA_DKV: row = 13; break;
    case LAB_BWD_WS_DIRECT_DKV: row = 14; break;
    case LAB_BWD_WS_MASK_UNI: row = 15; break;
    case LAB_BWD_WS_RUNS_EX2: row = 16; break;
    case LAB_BWD_WS_RUNS_DEFER: row = 17; break;
    case LAB_BWD_WS_RUNS_DEFER_PP: row = 18; break;
    case LAB_BWD_WS_RUNS_DEFER_EARLY: row = 19; break;
    case LAB_BWD_WS_RUNS_TMA_DKV: row = 20; break;
    case LAB_BWD_WS_RUNS_DEFER_EX2: row = 21; break;
    case LAB_BWD_WS_Q_FIRST: row = 22; break;
    case LAB_BWD_WS_STAMPS: row = 23; break;
    case LAB_BWD_WS_EARLY_KV: row = 24; break;
    case LAB_BWD_WS_EARLY_KV_STAMPS: row = 25; break;
    case LAB_BWD_WS_TMA_DKV_ALL: row = 26; break;
    case LAB_BWD_WS_DESC_ADD: row = 27; break;
    case LAB_BWD_WS_DESC_SCALE_STSM: row = 28; break;
    case LAB_BWD_WS_DESC_SCALE_STSM_TMA: row = 29; break;
    case LAB_BWD_WS_DQ_ALT: row = 30; break;
    case LAB_BWD_WS_DQ_ALT_TMA: row = 31; break;
    case LAB_BWD_WS_DQ_ALT_M1: row = 32; break;
    case LAB_BWD_WS_DQ_ALT_M2: row = 33; break;
    case LAB_BWD_WS_DQ_ALT_M3: row = 34; break;
    case LAB_BWD_WS_DQ_ALT_STAMPS: row = 35; break;
    default: return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no backward variant %d", variant);
    }
    const int atomic = !(s.flags & DFA_FLAG_DETERMINISTIC);
    const dfa__bwd_launcher kv = lab_kv[row][atomic][s.bf16 != 0];
    if (!kv) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "backward variant %d does not take this dq path", variant);
    void *buf = NULL; /* masked: the intervals first, as the library's calls do */
    if (s.masked && (st = dfa__cuda_mask_begin(d, &s, &buf, stream, fn))) return st;
    st = dfa__cuda_bwd_with(&s, q, k, v, o, lse, dout, dq, dk, dv, NULL, NULL, kv, atomic, stream, fn);
    return dfa__cuda_mask_end(buf, st, stream, fn);
}

extern "C" int lab_bwd_stamps_clear(void) {
    static unsigned long long zero[8192];
    for (int i = 0; i < DFA_LAB_BWD_STAMPS * 8; i += 8192)
        if (cudaMemcpyToSymbol(dfa__lab_bwd_stamps, zero, sizeof zero, (size_t)i * 8u) != cudaSuccess) return -1;
    return 0;
}

extern "C" int lab_bwd_stamps_dump(const char *path) {
    const size_t n = (size_t)DFA_LAB_BWD_STAMPS * 8;
    unsigned long long *h = (unsigned long long *)malloc(n * 8);
    FILE *f = h ? fopen(path, "wb") : NULL;
    int ok = f && cudaMemcpyFromSymbol(h, dfa__lab_bwd_stamps, n * 8) == cudaSuccess && fwrite(h, 8, n, f) == n;
    if (f && fclose(f)) ok = 0;
    free(h);
    return ok ? 0 : -1;
}
