/* The forward as the library ships it: the Hopper kernels (wgmma/TMA; fwd_wgmma.cuh and
 * fwd_wgmma_persistent.cuh, configured per head dim in heuristics.h) for head dims 64, 128 and
 * 256 on sm_90, the mma.sync kernel otherwise, each for bf16/f16 storage and 16-bit or float32
 * output. */
#include "launch_fwd.cuh"

/* [wgmma][bf16][out_f32] */
static const dfa__fwd_launcher dfa__fwd_kernels[2][2][2] = {
    {{dfa__fwd_mma<0, 0>, dfa__fwd_mma<0, 1>}, {dfa__fwd_mma<1, 0>, dfa__fwd_mma<1, 1>}},
    {{dfa__fwd_wgmma<0, 0>, dfa__fwd_wgmma<0, 1>}, {dfa__fwd_wgmma<1, 0>, dfa__fwd_wgmma<1, 1>}},
};

extern "C" dfa_status dfa__cuda_fwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, void *o,
                                    float *lse, cudaStream_t stream, const char *fn) {
    int wgmma = 0;
    dfa_status st = dfa__cuda_pick_family(s, dfa__cuda_forced_family(), &wgmma, fn);
    if (st) return st;
    const int l2 = dfa__cuda_device_attr(cudaDevAttrL2CacheSize, fn, &st);
    if (l2 < 0) return st;
    return dfa__fwd_kernels[wgmma][s->bf16 != 0][s->out_f32 != 0](dfa__fwd_params_of(s, q, k, v, o, lse, l2), stream,
                                                                   fn);
}
