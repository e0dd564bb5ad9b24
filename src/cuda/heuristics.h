/* Internal (CUDA sources only, C++): every choice the library makes between the kernels it
 * ships, in one place. First the configurations of the Hopper kernels, one compile-time
 * struct per head dim (and mask), whose named members the kernels' templates read; then the
 * run-time rules that pick a kernel for a call, each with its threshold and the reason for it.
 * The kernel lab (lab/gpu) derives its variants from these structs, one member changed. */
#ifndef DFA_CUDA_HEURISTICS_H
#define DFA_CUDA_HEURISTICS_H

#include "launch.h"

/* ---------------------------------------------------------------------------------------------
 * The Hopper forward (fwd_wgmma.cuh, fwd_wgmma_persistent.cuh), per head dim D.
 *   BN          keys per block (the K/V stage ring's tile)
 *   NCW         consumer warpgroups, 64 query rows each: the query tile has 64 * NCW rows
 *   PINGPONG    the consumers take turns issuing their products (named barriers), so one's
 *               softmax runs under the others' matrix work
 *   FAST_EXP    2^x by ex2.approx.ftz alone, without exp2f's denormal fix-up (a compare and two
 *               multiplies per element): no softmax weight needs values below 2^-126
 *   KEEP_MAX    a row keeps its reference maximum until a block raises it by more than 2^8, so
 *               that most blocks skip o's rescale (a warp vote decides)
 *   Q_IN_REGS   each consumer holds its Q rows in registers: S = Q K^T as wgmma RS, reading only
 *               K from shared memory, and the Q buffer is free once read
 *   TMA_O       o leaves through shared memory and one bulk tensor copy per warpgroup
 *   PERSISTENT  the launcher runs grids of more query tiles than SMs on the persistent kernel
 *               (one CTA per SM walking tiles; 16-bit o only: dfa__fwd_persistent_for)
 * Every configuration pipelines a warpgroup's blocks: S of block j + 1 is issued before the
 * softmax of block j, which then runs under P V of block j. */
template <int D> struct dfa__fwd_wgmma_config;

/* 192-row query tiles (each K/V tile serves 1.5x the rows of two consumers), three consumers at
   160 registers: o is 32 of them, which leaves no room for Q (Q_IN_REGS would spill) and makes
   o's rescale cheaper than the vote that skips it (KEEP_MAX). Each block's products are short,
   so the softmax is a large share of it: the consumers take turns (PINGPONG), which the
   persistent kernel's overlap of tiles cannot combine with, so every CTA has one tile. o's
   direct stores are a small share of a tile at 32 values per thread. */
template <> struct dfa__fwd_wgmma_config<64> {
    static constexpr int D = 64, BN = 128, NCW = 3;
    static constexpr bool PINGPONG = true, FAST_EXP = true, KEEP_MAX = false, Q_IN_REGS = false, TMA_O = false,
                          PERSISTENT = false;
};

/* 128-row query tiles, two consumers at 232 registers: room for Q (Q_IN_REGS) beside o's 64. The
   pipelined walk already overlaps each softmax with the warpgroup's own P V, so the consumers
   issue independently. o's 64 values per thread leave by TMA (D / 4 conflict-free shared stores
   per thread instead of as many scattered 4-byte global ones). Short tiles (windows, documents,
   short sequences) pay a CTA's set-up and its last P V and epilogue with nothing behind them:
   the persistent kernel overlaps those with the next tile (PERSISTENT). */
template <> struct dfa__fwd_wgmma_config<128> {
    static constexpr int D = 128, BN = 128, NCW = 2;
    static constexpr bool PINGPONG = false, FAST_EXP = true, KEEP_MAX = true, Q_IN_REGS = true, TMA_O = true,
                          PERSISTENT = true;
};

/* 128 x 64 tiles: o is 128 registers per consumer thread, so the key block is 64 and nothing
   else is held in registers; the products (four times d = 64's columns) dominate a block, so
   its exponentials keep exp2f. */
template <> struct dfa__fwd_wgmma_config<256> {
    static constexpr int D = 256, BN = 64, NCW = 2;
    static constexpr bool PINGPONG = false, FAST_EXP = false, KEEP_MAX = false, Q_IN_REGS = false, TMA_O = false,
                          PERSISTENT = false;
};

/* The persistent forward for a grid of `tiles` query tiles on `sms` SMs: only when there are more
   tiles than SMs (with fewer, every CTA has one tile anyway). */
static inline bool dfa__fwd_persistent_for(long long tiles, int sms) { return tiles > sms; }

/* (batch, head) pairs per L2 section of the forward's grid (dfa__fwd_tile_order): as many kv
   heads as have K and V in a third of the L2, at least one, times the query heads that share
   each. The CTAs resident at one time then read a few heads' K/V, which stay in L2, instead of
   one head each from DRAM; a third leaves the rest of the L2 to Q, o and the next section's
   first blocks. l2_bytes: the device's L2 (cudaDevAttrL2CacheSize). */
static inline int dfa__fwd_l2_heads(const dfa__cuda_shape *s, long long l2_bytes) {
    const long long kv_head = (long long)s->seqlen_k * s->head_dim * 2 * 2, heads = (long long)s->batch * s->num_heads;
    long long n = l2_bytes / 3 / (kv_head > 0 ? kv_head : 1);
    n = (n < 1 ? 1 : n) * (s->num_heads / s->num_kv_heads);
    return (int)(n < heads ? n : heads);
}

#endif
