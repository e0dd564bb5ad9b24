/* The CUDA lab's own rows (lab_variants.h). Most are the library's Hopper kernels with one named
 * member of a configuration (src/cuda/heuristics.h) changed: a struct derived from the library's
 * one, passed to the library's own launchers (dfa__fwd_wgmma, dfa__bwd_kv_ws), so that the lab
 * measures exactly the code a promotion would ship. A member's other value is tried where the
 * library ships both (at another head dim or mask); a change that a kernel's static_asserts tie
 * to another member changes both. */
#include "cuda/launch_bwd.cuh"
#include "cuda/launch_fwd.cuh"
#include "lab_bwd_wgmma.cuh"
#include "lab_variants.h"

/* ---- forward configurations ---- */
typedef dfa__fwd_wgmma_config<64> F64;
typedef dfa__fwd_wgmma_config<128> F128;
typedef dfa__fwd_wgmma_config<256> F256;
struct F64_exp2f : F64 { static constexpr bool FAST_EXP = false; };
struct F128_exp2f : F128 { static constexpr bool FAST_EXP = false; };
struct F256_ex2 : F256 { static constexpr bool FAST_EXP = true; };
struct F64_no_pingpong : F64 { static constexpr bool PINGPONG = false; };
/* the persistent kernel's owed P V cannot take turns: one tile per CTA */
struct F128_pingpong : F128 { static constexpr bool PINGPONG = true, PERSISTENT = false; };
struct F256_pingpong : F256 { static constexpr bool PINGPONG = true; };
struct F64_keep_max : F64 { static constexpr bool KEEP_MAX = true; };
struct F128_rescale_always : F128 { static constexpr bool KEEP_MAX = false; };
struct F128_q_smem : F128 { static constexpr bool Q_IN_REGS = false; };
struct F64_tma_o : F64 { static constexpr bool TMA_O = true; };
/* the persistent kernel stores o by TMA only: one tile per CTA */
struct F128_direct_o : F128 { static constexpr bool TMA_O = false, PERSISTENT = false; };
struct F128_one_tile : F128 { static constexpr bool PERSISTENT = false; };
struct F64_persistent : F64 { static constexpr bool PINGPONG = false, TMA_O = true, PERSISTENT = true; };
/* head dim 64 in 128-row tiles: two consumers at 232 registers */
struct F64_m128 : F64 { static constexpr int NCW = 2; };

/* ---- backward configurations ---- */
typedef dfa__bwd_ws_config<64, false> B64;
typedef dfa__bwd_ws_config<64, true> B64M;
typedef dfa__bwd_ws_config<128, false> B128;
typedef dfa__bwd_ws_config<128, true> B128M;
struct B64_ex2 : B64 { static constexpr bool FAST_EXP = true; };
struct B64M_ex2 : B64M { static constexpr bool FAST_EXP = true; };
struct B128_exp2f : B128 { static constexpr bool FAST_EXP = false; };
struct B128M_exp2f : B128M { static constexpr bool FAST_EXP = false; };
/* dQ right behind dV/dK (a whole-tile dQ needs the deferred order) */
struct B64_dq_behind : B64 { static constexpr bool DEFER_DQ = false; };
struct B128_dq_behind : B128 { static constexpr bool DEFER_DQ = false, DQ_WHOLE_TILE = false; };
struct B128M_dq_behind : B128M { static constexpr bool DEFER_DQ = false, DQ_WHOLE_TILE = false; };
struct B64M_defer : B64M { static constexpr bool DEFER_DQ = true; };
struct B128_dq_halves : B128 { static constexpr bool DQ_WHOLE_TILE = false; };
struct B128M_dq_halves : B128M { static constexpr bool DQ_WHOLE_TILE = false; };
/* dK, dV by TMA on every walk, and never */
struct B64_tma_dkv : B64 { static constexpr bool TMA_DKV = true; };
struct B64M_tma_dkv : B64M { static constexpr bool TMA_DKV = true; };
struct B128_tma_dkv : B128 { static constexpr bool TMA_DKV = true, TMA_DKV_SHORT_WALKS = false; };
struct B128_direct_dkv : B128 { static constexpr bool TMA_DKV_SHORT_WALKS = false; };
struct B128M_direct_dkv : B128M { static constexpr bool TMA_DKV = false; };

/* The library's Hopper backward with configurations P64, M64 (unmasked, masked at d = 64), P128,
   M128; dq added as it comes. */
template <class P64, class M64, class P128, class M128, int BF16>
static dfa_status lab_bwd_ws(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                             const char *fn) {
    return dfa__bwd_kv_ws<1, BF16, 0, P64, M64, P128, M128>(p, dkv16, st, fn);
}

/* Deterministic without the in-order dQ: the Hopper kernel computes no dq, the dq pass does. */
template <int BF16>
static dfa_status lab_bwd_ws_dq_pass(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    if (p.sh.head_dim == 64)
        return p.sh.masked ? dfa__launch_bwd_ws<B64M, 0, BF16, 0>(p, dkv16, st, fn)
                           : dfa__launch_bwd_ws<B64, 0, BF16, 0>(p, dkv16, st, fn);
    return p.sh.masked ? dfa__launch_bwd_ws<B128M, 0, BF16, 0>(p, dkv16, st, fn)
                       : dfa__launch_bwd_ws<B128, 0, BF16, 0>(p, dkv16, st, fn);
}

/* The experimental two-warpgroup backward (lab_bwd_wgmma.cuh). */
template <int D, int BM, int ATOMIC, bool FUSED, bool BULK, int BF16>
static dfa_status lab_launch_bwd_2wg(const dfa__bwd_params &p, cudaStream_t st, const char *fn) {
    typedef dfa__bwd_wgmma_cfg<D, BM> C;
    const long long ctas = (long long)((p.sh.seqlen_k + C::BN - 1) / C::BN) * p.sh.batch * p.sh.num_kv_heads;
    CUtensorMap tq, tk, tv, tdo;
    if (!dfa__tmap(&tq, p.q, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tdo, p.dout, BF16, D, p.sh.num_heads, p.sh.seqlen_q, p.sh.batch, BM) ||
        !dfa__tmap(&tk, p.k, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN) ||
        !dfa__tmap(&tv, p.v, BF16, D, p.sh.num_kv_heads, p.sh.seqlen_k, p.sh.batch, C::BN))
        return dfa__fail(DFA_ERR_BACKEND, fn, "cuTensorMapEncodeTiled failed (or is unavailable)");
    return dfa__launch(dfa__bwd_wgmma_kernel<D, BM, ATOMIC, FUSED, BULK, BF16, 0>, ctas, C::NT, C::SMEM, st, fn,
                       "key tiles", "backward key-block kernel launch", tq, tk, tv, tdo, p);
}
template <int ATOMIC, bool FUSED, bool BULK, int BF16>
static dfa_status lab_bwd_2wg(const dfa__bwd_params &p, const dfa__cuda_dkv16 &, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim == 64) return lab_launch_bwd_2wg<64, 128, ATOMIC, FUSED, BULK, BF16>(p, st, fn);
    return lab_launch_bwd_2wg<128, 64, ATOMIC, FUSED, BULK, BF16>(p, st, fn);
}

/* ---- the rows ---- */
enum { L2_LIBRARY = 0, L2_ALL_HEADS, L2_HALF, L2_DOUBLE }; /* the forward grid's L2 sections */

typedef struct {
    lab_variant v;
    dfa__fwd_launcher fwd[2];   /* [bf16] forward rows */
    int l2;                     /* forward rows: the L2 sections (dfa__fwd_tile_order) */
    dfa__bwd_launcher kv[2];    /* [bf16] backward rows: the key-block kernel */
    int kv_dq;                  /* its dq mode (dfa__cuda_bwd_with) */
} lab_row;

#define FWD(name, K64, K128, K256, check_min)                                                                   \
    {{name, 0, 0, check_min}, {dfa__fwd_wgmma<0, 0, K64, K128, K256>, dfa__fwd_wgmma<1, 0, K64, K128, K256>}, \
     L2_LIBRARY, {NULL, NULL}, 0}
#define FWD_L2(name, l2) {{name, 0, 0, 8192}, {dfa__fwd_wgmma<0, 0>, dfa__fwd_wgmma<1, 0>}, l2, {NULL, NULL}, 0}
#define BWD_WS(name, P64, M64, P128, M128)                                                                       \
    {{name, 1, 0, 0}, {NULL, NULL}, 0,                                                                          \
     {lab_bwd_ws<P64, M64, P128, M128, 0>, lab_bwd_ws<P64, M64, P128, M128, 1>}, 1}
#define BWD(name, det, F, dq) {{name, 1, det, 0}, {NULL, NULL}, 0, {F<0>, F<1>}, dq}

#define BWD_2WG(name, atomic, fused, bulk)                                                                       \
    {{name, 1, !(atomic), 0}, {NULL, NULL}, 0,                                                                  \
     {lab_bwd_2wg<atomic, fused, bulk, 0>, lab_bwd_2wg<atomic, fused, bulk, 1>}, atomic}

static const lab_row rows[] = {
    /* the forward: one member of one head dim's configuration */
    FWD("fwd wgmma exp2f", F64_exp2f, F128_exp2f, F256, 8192),
    FWD("fwd wgmma ex2 d256", F64, F128, F256_ex2, 0),
    FWD("fwd wgmma no pingpong d64", F64_no_pingpong, F128, F256, 0),
    FWD("fwd wgmma pingpong", F64, F128_pingpong, F256_pingpong, 0),
    FWD("fwd wgmma keep max d64", F64_keep_max, F128, F256, 0),
    FWD("fwd wgmma rescale always d128", F64, F128_rescale_always, F256, 8192),
    FWD("fwd wgmma q smem d128", F64, F128_q_smem, F256, 8192),
    FWD("fwd wgmma tma o d64", F64_tma_o, F128, F256, 0),
    FWD("fwd wgmma direct o d128", F64, F128_direct_o, F256, 0),
    FWD("fwd wgmma one tile d128", F64, F128_one_tile, F256, 0),
    FWD("fwd wgmma persistent d64", F64_persistent, F128, F256, 8192),
    FWD("fwd wgmma m128 d64", F64_m128, F128, F256, 0),
    /* the forward grid's order: every head in one section, sections of half or twice the heads */
    FWD_L2("fwd wgmma heads order", L2_ALL_HEADS),
    FWD_L2("fwd wgmma l2 half", L2_HALF),
    FWD_L2("fwd wgmma l2 double", L2_DOUBLE),
    /* the backward (dq added as it comes): one member of the configurations */
    BWD_WS("bwd ws ex2 d64", B64_ex2, B64M_ex2, B128, B128M),
    BWD_WS("bwd ws exp2f d128", B64, B64M, B128_exp2f, B128M_exp2f),
    BWD_WS("bwd ws dq behind", B64_dq_behind, B64M, B128_dq_behind, B128M_dq_behind),
    BWD_WS("bwd ws defer dq masked d64", B64, B64M_defer, B128, B128M),
    BWD_WS("bwd ws dq halves d128", B64, B64M, B128_dq_halves, B128M_dq_halves),
    BWD_WS("bwd ws tma dkv", B64_tma_dkv, B64M_tma_dkv, B128_tma_dkv, B128M),
    BWD_WS("bwd ws direct dkv d128", B64, B64M, B128_direct_dkv, B128M_direct_dkv),
    /* deterministic: no dq in the Hopper kernel, the dq pass after it */
    BWD("bwd ws + dq pass determ.", 1, lab_bwd_ws_dq_pass, 0),
    /* the experimental two-warpgroup backward: dq by atomics, fused behind dV/dK, by bulk
       reduce-adds, both; and with the dq pass */
    BWD_2WG("bwd 2wg atomic dq", 1, false, false),
    BWD_2WG("bwd 2wg atomic fused", 1, true, false),
    BWD_2WG("bwd 2wg bulk-red dq", 1, false, true),
    BWD_2WG("bwd 2wg bulk fused", 1, true, true),
    BWD_2WG("bwd 2wg + dq pass determ.", 0, false, false),
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

extern "C" int lab_variant_count(void) { return NROWS; }

extern "C" const lab_variant *lab_variant_at(int i) { return i >= 0 && i < NROWS ? &rows[i].v : NULL; }

static dfa_status lab_fwd_shape(const lab_row *r, const dfa__cuda_shape &s, const void *q, const void *k,
                                const void *v, void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "lab_fwd";
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, &wgmma, fn);
    if (st) return st;
    const int l2 = dfa__cuda_device_attr(cudaDevAttrL2CacheSize, fn, &st);
    if (l2 < 0) return st;
    dfa__fwd_params p = dfa__fwd_params_of(&s, q, k, v, o, lse, l2);
    const int heads = s.batch * s.num_heads, group = s.num_heads / s.num_kv_heads;
    if (r->l2 == L2_ALL_HEADS) p.l2_heads = heads;
    if (r->l2 == L2_HALF) p.l2_heads = p.l2_heads / 2 < group ? group : p.l2_heads / 2;
    if (r->l2 == L2_DOUBLE) p.l2_heads = 2 * p.l2_heads > heads ? heads : 2 * p.l2_heads;
    return r->fwd[s.bf16 != 0](p, stream, fn);
}

/* Masked calls (documents, windows) get their intervals first, as the library's calls do. */
extern "C" dfa_status lab_fwd(int i, const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o,
                              float *lse, cudaStream_t stream) {
    static const char fn[] = "lab_fwd";
    if (i < 0 || i >= NROWS || rows[i].v.bwd) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no forward row %d", i);
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    void *buf = NULL;
    dfa_status st = s.masked ? dfa__cuda_mask_begin(d, &s, &buf, stream, fn) : DFA_OK;
    if (st) return st;
    return dfa__cuda_mask_end(buf, lab_fwd_shape(&rows[i], s, q, k, v, o, lse, stream), stream, fn);
}

extern "C" dfa_status lab_bwd(int i, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                              cudaStream_t stream) {
    static const char fn[] = "lab_bwd";
    if (i < 0 || i >= NROWS || !rows[i].v.bwd) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no backward row %d", i);
    const lab_row *r = &rows[i];
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, &wgmma, fn);
    if (st) return st;
    if ((r->kv_dq == 1) != !(s.flags & DFA_FLAG_DETERMINISTIC))
        return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "row \"%s\" does not take this dq path", r->v.name);
    void *buf = NULL; /* masked: the intervals first, as the library's calls do */
    if (s.masked && (st = dfa__cuda_mask_begin(d, &s, &buf, stream, fn))) return st;
    st = dfa__cuda_bwd_with(&s, q, k, v, o, lse, dout, dq, dk, dv, NULL, NULL, r->kv[s.bf16 != 0], r->kv_dq, stream,
                            fn);
    return dfa__cuda_mask_end(buf, st, stream, fn);
}
