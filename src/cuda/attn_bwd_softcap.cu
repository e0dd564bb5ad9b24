/* The Hopper backward's key-block kernels for calls with a softcap (launch_bwd.cuh,
 * dfa__bwd_kv_ws_softcapped): the configurations of heuristics.h with SOFTCAP set. */
#include "launch_bwd.cuh"

template <int DQ_MODE, int BF16, int OUT32>
dfa_status dfa__bwd_kv_ws_softcapped(const dfa__bwd_params &p, const dfa__cuda_dkv16 &dkv16, cudaStream_t st,
                                     const char *fn) {
    return dfa__bwd_kv_ws<DQ_MODE, BF16, OUT32, dfa__bwd_softcapped<dfa__bwd_ws_config<64, false>>,
                          dfa__bwd_softcapped<dfa__bwd_ws_config<64, true>>,
                          dfa__bwd_softcapped<dfa__bwd_ws_config<128, false>>,
                          dfa__bwd_softcapped<dfa__bwd_ws_config<128, true>>>(p, dkv16, st, fn);
}

#define DFA__INSTANCE(M, B, O)                                                                                   \
    template dfa_status dfa__bwd_kv_ws_softcapped<M, B, O>(const dfa__bwd_params &, const dfa__cuda_dkv16 &,     \
                                                           cudaStream_t, const char *);
DFA__INSTANCE(0, 0, 0) DFA__INSTANCE(0, 0, 1) DFA__INSTANCE(0, 1, 0) DFA__INSTANCE(0, 1, 1)
DFA__INSTANCE(1, 0, 0) DFA__INSTANCE(1, 0, 1) DFA__INSTANCE(1, 1, 0) DFA__INSTANCE(1, 1, 1)
DFA__INSTANCE(2, 0, 0) DFA__INSTANCE(2, 0, 1) DFA__INSTANCE(2, 1, 0) DFA__INSTANCE(2, 1, 1)
#undef DFA__INSTANCE
