/* The kernel lab's variants (lab_variants.h): the launcher templates of the library
 * instantiated for the kernels it does not ship. */
#include "cuda/launch_bwd.cuh"
#include "cuda/launch_fwd.cuh"
#include "lab_variants.h"

extern "C" dfa_status lab_fwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              void *o, float *lse, cudaStream_t stream) {
    static const char fn[] = "lab_fwd";
    const dfa__cuda_shape s = dfa__cuda_shape_of(d);
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, "forward", &wgmma, fn);
    if (st) return st;
    if (variant != LAB_FWD_WGMMA_PLAIN) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no forward variant %d", variant);
    const dfa__fwd_params p = dfa__fwd_params_of(&s, q, k, v, o, lse);
    return s.bf16 ? dfa__fwd_wgmma<1, 0, 0>(p, stream, fn) : dfa__fwd_wgmma<0, 0, 0>(p, stream, fn);
}

/* [variant - LAB_BWD_WGMMA_FUSED][atomic dq][bf16]: the Hopper key-block kernel with VARIANT
   1, 2, 3 (atomic dq only: NULL in the deterministic column), then the warp-specialised one */
static const dfa__bwd_launcher lab_kv[5][2][2] = {
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 1>, dfa__bwd_kv_wgmma<1, 1, 0, 1>}},
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 2>, dfa__bwd_kv_wgmma<1, 1, 0, 2>}},
    {{NULL, NULL}, {dfa__bwd_kv_wgmma<1, 0, 0, 3>, dfa__bwd_kv_wgmma<1, 1, 0, 3>}},
    {{dfa__bwd_kv_ws<0, 0, 0>, dfa__bwd_kv_ws<0, 1, 0>}, {dfa__bwd_kv_ws<1, 0, 0>, dfa__bwd_kv_ws<1, 1, 0>}},
    {{dfa__bwd_kv_ws<0, 0, 0, 64>, dfa__bwd_kv_ws<0, 1, 0, 64>},
     {dfa__bwd_kv_ws<1, 0, 0, 64>, dfa__bwd_kv_ws<1, 1, 0, 64>}},
};

extern "C" dfa_status lab_bwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv,
                              cudaStream_t stream) {
    static const char fn[] = "lab_bwd";
    const dfa__cuda_shape s = dfa__cuda_shape_of(d);
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(&s, DFA__FAMILY_WGMMA, "backward", &wgmma, fn);
    if (st) return st;
    if (variant < LAB_BWD_WGMMA_FUSED || variant > LAB_BWD_WS_BM64)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "no backward variant %d", variant);
    const int atomic = !(s.flags & DFA_FLAG_DETERMINISTIC);
    const dfa__bwd_launcher kv = lab_kv[variant - LAB_BWD_WGMMA_FUSED][atomic][s.bf16 != 0];
    if (!kv) return dfa__fail(DFA_ERR_UNSUPPORTED, fn, "backward variant %d changes the atomic dq path only", variant);
    return dfa__cuda_bwd_with(&s, q, k, v, o, lse, dout, dq, dk, dv, NULL, kv, stream, fn);
}
