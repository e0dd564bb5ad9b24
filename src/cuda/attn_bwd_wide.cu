/* The Hopper backward's key-block kernels for the wide head dims (launch_bwd.cuh,
 * dfa__bwd_kv_wide): 256 (bwd_ws_wide.cuh), and 192 with a value head dim of 128 (bwd_ws.cuh,
 * in a translation unit apart from the other head dims' so that the two build side by side). */
#include "launch_bwd.cuh"

template <int DQ_MODE, int BF16, int OUT32>
dfa_status dfa__bwd_kv_wide(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st, const char *fn) {
    if (p.sh.head_dim == 256 && p.sh.head_dim_v == 256)
        return dfa__bwd_wide_of<256, DQ_MODE, BF16, OUT32>(p, dkv16, st, fn);
    if (p.sh.head_dim == 192 && p.sh.head_dim_v == 128) {
        if (p.sh.softcap > 0.0f) return dfa__cuda_check_softcap(p.sh.softcap, 192, 128, fn);
        return dfa__bwd_ws_of<dfa__bwd_ws_config<192, false>, dfa__bwd_ws_config<192, true>, DQ_MODE, BF16, OUT32>(
            p, dkv16, st, fn);
    }
    return dfa__fail(DFA_ERR_INTERNAL, fn, "the wide Hopper backward at head dims %d / %d", p.sh.head_dim,
                     p.sh.head_dim_v);
}

#define DFA__INSTANCE(M, B, O)                                                                                   \
    template dfa_status dfa__bwd_kv_wide<M, B, O>(const dfa__bwd_params &, const dfa__cuda_dkv16 &, cudaStream_t, \
                                                  const char *);
DFA__INSTANCE(0, 0, 0) DFA__INSTANCE(0, 0, 1) DFA__INSTANCE(0, 1, 0) DFA__INSTANCE(0, 1, 1)
DFA__INSTANCE(1, 0, 0) DFA__INSTANCE(1, 0, 1) DFA__INSTANCE(1, 1, 0) DFA__INSTANCE(1, 1, 1)
DFA__INSTANCE(2, 0, 0) DFA__INSTANCE(2, 0, 1) DFA__INSTANCE(2, 1, 0) DFA__INSTANCE(2, 1, 1)
#undef DFA__INSTANCE
