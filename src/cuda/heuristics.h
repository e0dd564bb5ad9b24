/* Internal (CUDA sources only, C++): every choice the library makes between the kernels it
 * ships, in one place. First the configurations of the Hopper kernels, one compile-time
 * struct per head dim (and mask), whose named members the kernels' templates read; then the
 * run-time rules that pick a kernel for a call, each with its threshold and the reason for it.
 * The kernel lab (lab/gpu) derives its variants from these structs, one member changed. */
#ifndef DFA_CUDA_HEURISTICS_H
#define DFA_CUDA_HEURISTICS_H

#include "launch.h"

/* ---------------------------------------------------------------------------------------------
 * The Hopper forward (fwd_wgmma.cuh, fwd_wgmma_persistent.cuh), per head dim D and value head
 * dim DV (D itself but in DeepSeek's 192 / 128).
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
 *   SOFTCAP     each block's scores are capped before the softmax (tile.cuh): false in every
 *               configuration below; calls with a softcap run dfa__fwd_softcapped<K>
 * Every configuration pipelines a warpgroup's blocks: S of block j + 1 is issued before the
 * softmax of block j, which then runs under P V of block j. */
template <int D, int DV = D> struct dfa__fwd_wgmma_config;

/* 192-row query tiles (each K/V tile serves 1.5x the rows of two consumers), three consumers at
   160 registers: o is 32 of them, which leaves no room for Q (Q_IN_REGS would spill) and makes
   o's rescale cheaper than the vote that skips it (KEEP_MAX). Each block's products are short,
   so the softmax is a large share of it: the consumers take turns (PINGPONG), which the
   persistent kernel's overlap of tiles cannot combine with, so every CTA has one tile. o's
   direct stores are a small share of a tile at 32 values per thread. */
template <> struct dfa__fwd_wgmma_config<64> {
    static constexpr int D = 64, DV = 64, BN = 128, NCW = 3;
    static constexpr bool PINGPONG = true, FAST_EXP = true, KEEP_MAX = false, Q_IN_REGS = false, TMA_O = false,
                          PERSISTENT = false, SOFTCAP = false;
};

/* 128-row query tiles, two consumers at 232 registers: room for Q (Q_IN_REGS) beside o's 64. The
   pipelined walk already overlaps each softmax with the warpgroup's own P V, so the consumers
   issue independently. o's 64 values per thread leave by TMA (D / 4 conflict-free shared stores
   per thread instead of as many scattered 4-byte global ones). Short tiles (windows, documents,
   short sequences) pay a CTA's set-up and its last P V and epilogue with nothing behind them:
   the persistent kernel overlaps those with the next tile (PERSISTENT). */
template <> struct dfa__fwd_wgmma_config<128> {
    static constexpr int D = 128, DV = 128, BN = 128, NCW = 2;
    static constexpr bool PINGPONG = false, FAST_EXP = true, KEEP_MAX = true, Q_IN_REGS = true, TMA_O = true,
                          PERSISTENT = true, SOFTCAP = false;
};

/* 128 x 64 tiles: o is 128 registers per consumer thread, so the key block is 64 and nothing
   else is held in registers; the products (four times d = 64's columns) dominate a block, so
   its exponentials keep exp2f. */
template <> struct dfa__fwd_wgmma_config<256> {
    static constexpr int D = 256, DV = 256, BN = 64, NCW = 2;
    static constexpr bool PINGPONG = false, FAST_EXP = false, KEEP_MAX = false, Q_IN_REGS = false, TMA_O = false,
                          PERSISTENT = false, SOFTCAP = false;
};

/* DeepSeek's MLA: q and k 192 wide, v and o 128. d = 128's tiles and registers (o is 64 per
   consumer thread, S 64) but Q stays in shared memory (its 48 registers would not fit beside
   them), and the stages take 208 KB: 128 x 192 Q, two 128 x 192 K and two 128 x 128 V. One tile
   per CTA (the persistent kernel's o staging tile would not fit beside them). */
template <> struct dfa__fwd_wgmma_config<192, 128> {
    static constexpr int D = 192, DV = 128, BN = 128, NCW = 2;
    static constexpr bool PINGPONG = false, FAST_EXP = true, KEEP_MAX = true, Q_IN_REGS = false, TMA_O = true,
                          PERSISTENT = false, SOFTCAP = false;
};

/* Configuration K with softcapping: the same tiles and schedule, one tanh per score more, and
   one tile per CTA. At d = 128 the capped softmax asks as much of the MUFU unit as the products ask
   of the tensor cores (kernels.md), and the persistent kernel, holding a tile's owed P V beside the
   cap, spills; one tile per CTA ran the capped d = 128 forward 2.6% faster (one H200, 8k x4
   causal, the lab's "fwd wgmma one tile d128" row with --softcap 30). */
template <class K> struct dfa__fwd_softcapped : K {
    static constexpr bool SOFTCAP = true, PERSISTENT = false;
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

/* ---------------------------------------------------------------------------------------------
 * The Hopper backward (bwd_ws.cuh), per head dim D and mask (documents, windows).
 *   DV             the value head dim: D, but 128 at D = 192 (DeepSeek's MLA)
 *   BM             query rows per block of a CTA's walk (a CTA owns 128 keys)
 *   MASKED         the mask's visible intervals decide the element test (mask.cuh); the unmasked
 *                  kernel keeps the plain causal test, which costs the unmasked blocks less
 *   FAST_EXP       P recomputed with ex2.approx.ftz alone (as the forward's FAST_EXP)
 *   DEFER_DQ       block j's dQ product goes in with block j + 1's S^T, and its tile is staged
 *                  for the dQ writer under S^T: the tensor pipe does not drain between blocks and
 *                  no product is in flight across iterations; otherwise dQ goes in right behind
 *                  dV/dK of its own block
 *   DQ_WHOLE_TILE  (D = 128, with DEFER_DQ) each block's whole 64 x 128 dQ tile is one
 *                  consumer's m64n128 product, the consumers taking turns: it reads dS^T and K
 *                  once (48 KB of shared-memory operands where two m64n64 halves read 64 KB), and
 *                  the other consumer has no dQ work in that block
 *   DQ_COLS0       (with DEFER_DQ) 0: each consumer computes half of the dQ tile; otherwise
 *                  consumer 0 its first DQ_COLS0 columns and consumer 1 the rest, and each block's
 *                  dQ product retires and is staged before the next block's S^T goes in
 *   DP_AFTER_P     S^T retires and P is computed (and rounded to 16 bits) before dP^T and dV go
 *                  in: S^T's and dP^T's accumulators are never live together, and dS takes the
 *                  rounded P
 *   TMA_DKV        dK and dV leave through shared memory and TMA (full 32-byte sectors, where
 *                  direct stores from the accumulator layout use 16 bytes of each); float32
 *                  instances: the key tiles handed whole to 16-bit outputs (dfa__cuda_dkv16)
 *   SOFTCAP        S^T is capped before P and dS^T multiplied by the cap's derivative, recovered
 *                  from P (bwd_ws.cuh): false in every configuration below; calls with a softcap
 *                  run dfa__bwd_softcapped<K>
 * Every configuration walks a CTA's query blocks in runs: the blocks every row of which sees
 * every key of the CTA skip the element test altogether. */
template <int D, bool MASKED> struct dfa__bwd_ws_config;

/* 128-row query blocks; P keeps exp2f (FAST_EXP does not pay at d = 64). */
template <> struct dfa__bwd_ws_config<64, false> {
    static constexpr int D = 64, DV = 64, BM = 128, DQ_COLS0 = 0;
    static constexpr bool MASKED = false, FAST_EXP = false, DEFER_DQ = true, DQ_WHOLE_TILE = false, TMA_DKV = false;
    static constexpr bool DP_AFTER_P = false;
    static constexpr bool TMA_DKV_SHORT_WALKS = false, SOFTCAP = false; /* see dfa__bwd_tma_dkv_for */
};
/* Masked at d = 64: deferring dQ does not pay against the masked step, so dQ goes in right behind
   dV/dK. */
template <> struct dfa__bwd_ws_config<64, true> : dfa__bwd_ws_config<64, false> {
    static constexpr bool MASKED = true, DEFER_DQ = false;
};

/* 64-row query blocks (128 would be over the register budget beside dK and dV). */
template <> struct dfa__bwd_ws_config<128, false> {
    static constexpr int D = 128, DV = 128, BM = 64, DQ_COLS0 = 0;
    static constexpr bool MASKED = false, FAST_EXP = true, DEFER_DQ = true, DQ_WHOLE_TILE = true, TMA_DKV = false;
    static constexpr bool DP_AFTER_P = false;
    static constexpr bool TMA_DKV_SHORT_WALKS = true, SOFTCAP = false; /* see dfa__bwd_tma_dkv_for */
};
/* Masked at d = 128: a window's or a document's CTAs walk few blocks, so the epilogue is a large
   share of their time: dK, dV by TMA. */
template <> struct dfa__bwd_ws_config<128, true> : dfa__bwd_ws_config<128, false> {
    static constexpr bool MASKED = true, TMA_DKV = true;
};

/* DeepSeek's MLA (192 / 128): d = 128's tiles, each consumer keeping its 64 keys' dK and dV whole
   (96 + 64 accumulators per thread), so that dV and dK take P^T and dS^T from registers and each
   Q and dO block serves 128 keys. Beside those 160 registers S^T and dP^T would not fit together
   (DP_AFTER_P), nor a dQ product wider than 64 columns: consumer 0 computes dQ's first two
   64-column blocks and consumer 1 the third, one piece at a time, before the next S^T (DQ_COLS0).
   The stages leave room for one dS^T buffer only (dfa__bwd_ws_layout). */
template <> struct dfa__bwd_ws_config<192, false> {
    static constexpr int D = 192, DV = 128, BM = 64, DQ_COLS0 = 128;
    static constexpr bool MASKED = false, FAST_EXP = true, DEFER_DQ = true, DQ_WHOLE_TILE = false, TMA_DKV = false;
    static constexpr bool TMA_DKV_SHORT_WALKS = false, SOFTCAP = false, DP_AFTER_P = true;
};
template <> struct dfa__bwd_ws_config<192, true> : dfa__bwd_ws_config<192, false> {
    static constexpr bool MASKED = true;
};

/* An unmasked configuration for short walks (dfa__bwd_tma_dkv_for): dK, dV by TMA. */
template <class K> struct dfa__bwd_ws_short_walk : K {
    static constexpr bool TMA_DKV = true;
};
/* Configuration K with softcapping: the same tiles and schedule; per score a tanh more for P and
   a log2 for dS's factor. */
template <class K> struct dfa__bwd_softcapped : K {
    static constexpr bool SOFTCAP = true;
};

/* The Hopper backward for head dim 256 (bwd_ws_wide.cuh). A CTA owns 64 keys; its two consumers
 * split the columns of dK, dV and dQ in 64-column blocks, consumer 0 taking the first KN0, VN0
 * and QN0 and consumer 1 the rest (half of each). dQ goes in right behind dV and dK.
 *   STAGES    Q and dO blocks in flight: 1, a second would not fit shared memory beside K, V and
 *             the float32 dQ staging tile (the next Q lands only after this block's dK)
 *   MASKED    as dfa__bwd_ws_config's (the element test always reads the mask's intervals)
 *   FAST_EXP  P recomputed with ex2.approx.ftz alone
 *   SOFTCAP   S^T capped before P; false here, dfa__bwd_softcapped<K> for softcapped calls */
template <int D, int DV, bool M> struct dfa__bwd_wide_config;
template <bool M> struct dfa__bwd_wide_config<256, 256, M> {
    static constexpr int D = 256, DV = 256, STAGES = 1, KN0 = 128, VN0 = 128, QN0 = 128;
    static constexpr bool MASKED = M, FAST_EXP = true, SOFTCAP = false;
};
/* Whether a call's head dims take the Hopper backward of attn_bwd_wide.cu (where the Hopper
   kernels run): the wide kernel at 256, the 128-key kernel at 192 / 128. */
static inline bool dfa__bwd_wide_for(int head_dim, int head_dim_v) {
    return (head_dim == 256 && head_dim_v == 256) || (head_dim == 192 && head_dim_v == 128);
}

/* CTAs per key tile for the Hopper kernel's float32 instances that add dq as it comes (bwd_ws.cuh
   QSPLIT). A grid of fewer key tiles than SMs (the sequence-parallel executor's narrow blocks: a
   document's tail against the next chunk's rows, a few key tiles per kv head, each CTA walking
   thousands of query rows) leaves most SMs idle; splitting each tile's query blocks over several
   CTAs, their dK, dV added into zeroed outputs, fills them, down to DFA__BWD_QSPLIT_MIN_ITERS
   query blocks per CTA, below which a CTA's K/V load and pipeline fill are not paid back. ctas:
   key tiles of the grid; iters: the most query blocks (times the group's heads) a tile walks;
   sms: the device's SMs. Never with keys handed to 16-bit outputs (whole or not, they are written
   once) nor in the deterministic modes (float32 additions in any order). A test may force the
   count (dfa__cuda_force_bwd_qsplit). */
#define DFA__BWD_QSPLIT_MIN_ITERS 8
static inline int dfa__bwd_qsplit_for(long long ctas, long long iters, int sms) {
    const int forced = dfa__cuda_forced_bwd_qsplit();
    if (forced > 0) return forced;
    if (ctas <= 0 || ctas * 2 > sms) return 1;
    long long n = sms / ctas, by_iters = iters / DFA__BWD_QSPLIT_MIN_ITERS;
    n = n < by_iters ? n : by_iters;
    return n < 1 ? 1 : (int)n;
}

/* (batch, kv head) pairs per section of the backward's key-block grid (dfa__bwd_tile_order in
   bwd_mma.cuh; 0: each pair's key tiles one after another), for either family. A CTA walks the
   query blocks (times the group's heads) that see its key tile: under a causal mask, tile 0
   walks all of them and the last tile a few. In the pairs' order the last pair's tile 0 starts
   near the grid's end and runs on while most SMs idle. Longest first within sections of pairs
   leaves the short walks for the end; small sections keep the CTAs in flight on the Q and dO of
   a few pairs, which the L2 holds. Timed on an H100 (lab/gpu/bwd_order.c), sections of 2 pairs
   were as fast as the pairs' order or faster on every causal shape (up to 1.06x: GQA, 32k and
   8k MHA) while sections of 16 or more lost up to 15% to the L2. Masked calls take the same
   rule (a window's walks are alike, a document's follow its tiles). Unmasked non-causal walks
   are all alike: no sections; nor with in-order dq (a CTA waits on CTAs of higher key tiles,
   which its order launches first). A test may force the size (dfa__cuda_force_bwd_sections). */
#define DFA__BWD_SECTION_PAIRS 2
static inline int dfa__bwd_sections_for(const dfa__cuda_shape *s, int dq_mode) {
    const int forced = dfa__cuda_forced_bwd_sections(), pairs = s->batch * s->num_kv_heads;
    if (dq_mode == 2) return 0;
    if (forced) return forced < 0 ? 0 : (forced < pairs ? forced : pairs);
    if (!(s->causal || s->masked)) return 0;
    return DFA__BWD_SECTION_PAIRS < pairs ? DFA__BWD_SECTION_PAIRS : pairs;
}

/* Whether the unmasked configuration with TMA_DKV_SHORT_WALKS, 16-bit outputs and dQ added as it
   comes stores dK and dV by TMA (dfa__bwd_ws_short_walk): when a key tile's CTA walks at most
   DFA__BWD_TMA_DKV_MAX_ROWS query rows (rows: seqlen_q times the group's heads). The epilogue is a
   CTA's share in inverse proportion to the blocks it walks: large on short walks, where the
   full-sector stores pay; on long walks it is a small share and the direct stores' main loop is
   scheduled as well or better. A test may force either form (dfa__cuda_force_bwd_dkv_tma). */
#define DFA__BWD_TMA_DKV_MAX_ROWS 4096
static inline bool dfa__bwd_tma_dkv_for(long long rows) {
    const int forced = dfa__cuda_forced_bwd_dkv_tma();
    return forced ? forced == 2 : rows <= DFA__BWD_TMA_DKV_MAX_ROWS;
}

/* ---------------------------------------------------------------------------------------------
 * Which family runs a pass, and how the backward computes dq. */

/* The Hopper kernels run a pass on sm_90 (their sm_90a code: wgmma, TMA, setmaxnreg, runs there
   only) at the head dims they are built for, forward and backward: 64, 128 and 256, and 192 with
   a value head dim of 128, with or without a softcap (dfa__cuda_pick_family). Elsewhere the
   mma.sync kernels run (sm_80 on, any head dim, and the value head dims of dfa__mma_v_pair_for). */
static inline bool dfa__hopper_kernels_for(int cc, int head_dim, int head_dim_v) {
    if (cc != 90) return false;
    if (head_dim_v != head_dim) return head_dim == 192 && head_dim_v == 128;
    return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

/* How the backward computes dq: 0 a dq pass after the key-block kernel, 1 the key-block kernel
   adds it in any order (float32 reduce-adds or atomics), 2 in key-block order. Without
   DFA_FLAG_DETERMINISTIC, 1 (one pass, no second walk over K and V). Deterministic: 2 with the
   Hopper kernel (its dQ writer adds the tiles of each query block in a fixed order), except under
   a mask, whose order the in-order dq does not derive (it follows the causal structure); there,
   and with the mma.sync kernels, 0. hopper: the Hopper kernels run the backward. */
static inline int dfa__bwd_dq_mode(const dfa__cuda_shape *s, int hopper) {
    if (!(s->flags & DFA_FLAG_DETERMINISTIC)) return 1;
    return hopper && !s->masked ? 2 : 0;
}

/* A float32 backward (out_f32) whose every key's dk, dv go to 16-bit outputs (dkv16 covering all
   of them) with dq added by the key-block kernel runs as the 16-bit kernel itself, with the
   caller's float32 dq as its accumulator (scaled on the way in, as every dq contribution is)
   and no conversion after it: ptxas schedules the float32 instances' main loop apart, slower. */
static inline bool dfa__bwd_all_keys_16bit(const dfa__cuda_shape *s, int dq_mode, const dfa__cuda_dkv16 *dkv16) {
    return s->out_f32 && dq_mode != 0 && dkv16 && dkv16->dk && dkv16->dv && dkv16->from <= 0 &&
           dkv16->to >= s->seqlen_k;
}

/* ---------------------------------------------------------------------------------------------
 * The mma.sync kernels (fwd_mma.cuh, bwd_mma.cuh), per padded head dim DP (64, 128 or 256: the
 * head dim rounded up) and padded value head dim DV (DP itself unless v has a head dim of its
 * own). The key blocks shrink as DP grows, so that the double-buffered tiles fit shared memory
 * and the accumulators the registers.
 *
 * A value head dim of its own runs at the (DP, DV) pairs below: (192, 128), DeepSeek's MLA
 * (q and k 192 wide, v 128), and (128, 64). A call takes the first pair whose DP and DV its
 * head_dim and head_dim_v fit, padded with zeros as every mma.sync kernel pads (0: none). */
static inline int dfa__mma_v_pair_for(int head_dim, int head_dim_v) {
    if (head_dim <= 128 && head_dim_v <= 64) return 1;   /* (128, 64) */
    if (head_dim <= 192 && head_dim_v <= 128) return 2;  /* (192, 128) */
    return 0;
}
/* The forward: NW warps of 16 query rows, key blocks of BN. The (DP, DV) pairs keep the key
   block of their DP's row (192 takes 256's): two CTAs of each fit an sm_80 SM's shared memory
   (128 x 64: 64 KB; 192 x 128: 64 KB), and Q's fragments (DP / 4 registers) and o's accumulators
   (DV / 2) stay inside a thread's registers. */
template <int DP, int DV = DP> struct dfa__fwd_mma_config;
template <> struct dfa__fwd_mma_config<64> { static constexpr int NW = 4, BN = 128; };
template <> struct dfa__fwd_mma_config<128> { static constexpr int NW = 4, BN = 64; };
template <> struct dfa__fwd_mma_config<256> { static constexpr int NW = 4, BN = 32; };
template <> struct dfa__fwd_mma_config<128, 64> { static constexpr int NW = 4, BN = 64; };
template <> struct dfa__fwd_mma_config<192, 128> { static constexpr int NW = 4, BN = 32; };
/* The key-block kernel: BN keys per CTA, query blocks of BM; DSPLIT 2 splits dK, dV's columns
   over two warps (d = 256: 256 accumulator columns of each would not fit one warp's registers;
   192 x 128: dK's 192 and dV's 128 columns, 160 registers, would not either). */
template <int DP, int DV = DP> struct dfa__bwd_kv_mma_config;
template <> struct dfa__bwd_kv_mma_config<64> { static constexpr int BN = 128, BM = 64, DSPLIT = 1; };
template <> struct dfa__bwd_kv_mma_config<128> { static constexpr int BN = 128, BM = 64, DSPLIT = 1; };
template <> struct dfa__bwd_kv_mma_config<256> { static constexpr int BN = 64, BM = 32, DSPLIT = 2; };
template <> struct dfa__bwd_kv_mma_config<128, 64> { static constexpr int BN = 128, BM = 64, DSPLIT = 1; };
template <> struct dfa__bwd_kv_mma_config<192, 128> { static constexpr int BN = 64, BM = 32, DSPLIT = 2; };
/* The deterministic dq pass: NW warps of 16 query rows, key blocks of BN. */
template <int DP, int DV = DP> struct dfa__bwd_dq_mma_config;
template <> struct dfa__bwd_dq_mma_config<64> { static constexpr int NW = 4, BN = 64; };
template <> struct dfa__bwd_dq_mma_config<128> { static constexpr int NW = 4, BN = 64; };
template <> struct dfa__bwd_dq_mma_config<256> { static constexpr int NW = 4, BN = 32; };
template <> struct dfa__bwd_dq_mma_config<128, 64> { static constexpr int NW = 4, BN = 64; };
template <> struct dfa__bwd_dq_mma_config<192, 128> { static constexpr int NW = 4, BN = 32; };

#endif
