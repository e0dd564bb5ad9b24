/* The kernel lab's own variants: kernels that were measured against the library's
 * and lost, or are being measured before promotion (bench/gpu/NOTES.md), kept here so that they can be measured again. The
 * library ships only the winners; these run through its launch paths
 * (src/cuda/launch_fwd.cuh, launch_bwd.cuh) with one kernel swapped. */
#ifndef DFA_LAB_VARIANTS_H
#define DFA_LAB_VARIANTS_H

#include <cuda_runtime_api.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    LAB_LIBRARY = 0,          /* not a lab variant: the library's own kernels */
    LAB_FWD_WGMMA_PLAIN,      /* Hopper forward without ping-pong consumers */
    LAB_BWD_WGMMA_FUSED,      /* Hopper backward, dQ issued behind dV/dK under one wait */
    LAB_BWD_WGMMA_BULK,       /* Hopper backward, dq by bulk reduce-adds from shared memory */
    LAB_BWD_WGMMA_BULK_FUSED, /* both */
    LAB_BWD_WGMMA_V0,         /* the two-warpgroup Hopper backward (lab_bwd_wgmma.cuh VARIANT 0), the library's
                                 until the warp-specialised one (bwd_ws.cuh) replaced it */
    LAB_FWD_WGMMA_PIPE,       /* Hopper forward, ping-pong + intra-warpgroup pipelining (both head dims) */
    LAB_FWD_WGMMA_PIPE_ONLY,  /* Hopper forward, intra-warpgroup pipelining without ping-pong (both head dims) */
    LAB_FWD_WGMMA_PINGPONG,   /* Hopper forward, ping-pong alone: the library's until 2026-12-01 */
    LAB_BWD_WS_DQ_PASS,       /* deterministic: the warp-specialised kernel without dq, then the dq pass */
    LAB_FWD_WGMMA_LATE,       /* the library's forward with o rescaled under the next S (PP bit 2) */
    LAB_FWD_WGMMA_M128,       /* head dim 64: 128-row query tiles (two consumers), ping-pong + pipelining: the
                                 library's until 192-row tiles replaced it (2026-12-01, run 8) */
    LAB_FWD_WGMMA_CLUSTER,    /* the library's forward in pairs of CTAs sharing K/V loads (TMA multicast) */
    LAB_FWD_WGMMA_PERSIST,    /* the persistent forward (PP bit 5) at both head dims, o from registers */
    LAB_FWD_WGMMA_D256_RETIRED, /* was head dim 256 on the Hopper forward, the library's since 2026-12-01 (run 13) */
    LAB_FWD_WGMMA_D256_PP,    /* head dim 256 on the Hopper forward with ping-pong consumers */
    LAB_FWD_WGMMA_HEADS_ORDER, /* the library's forward with the grid's old order (every head in one section:
                                  resident CTAs on different heads; dfa__fwd_tile_order) */
    LAB_BWD_WS_PLAIN,         /* the warp-specialised backward as the library had it until run 14 (bwd_ws.cuh
                                 VARIANT 0: dQ after dV/dK have landed, staging with bank conflicts) */
    LAB_BWD_WS_CHAIN_SWZ,     /* the library's (dQ issued behind dV/dK) with conflict-free dQ staging stores
                                 (VARIANT 5; 4% slower in run 15) */
    LAB_FWD_WGMMA_EXP2F,      /* the library's forward with 2^x by exp2f (its denormal fix-up; PP bit 3 clear):
                                 the library's until 2026-12-01 run 18 */
    LAB_FWD_WGMMA_EX2_PP,     /* the library's forward (ex2.approx.ftz) with ping-pong consumers at d = 128 too */
    LAB_BWD_WS_EX2,           /* the library's backward with P recomputed by ex2.approx.ftz alone (VARIANT 9;
                                 run 18: -2.4% at d = 128, +2.7% at d = 64, S = 32k) */
    LAB_FWD_WGMMA_L2_HALF,    /* the library's forward with L2 sections of half as many heads */
    LAB_FWD_WGMMA_L2_DOUBLE,  /* ... twice as many heads (run 16 measured these against sections for two thirds
                                 of the L2; the library then took half of those: a third) */
    LAB_BWD_WS_DEFER,         /* the library's backward with each block's dQ issued with the next block's S^T,
                                 its tile staged under S^T (VARIANT 17) */
    LAB_BWD_WS_DEFER_EX2,     /* ... and P by ex2.approx.ftz (VARIANT 25) */
    LAB_BWD_WS_DEFER_PP,      /* ... dQ deferred and the two consumers taking turns issuing (VARIANT 49) */
    LAB_BWD_WS_DEFER_PP_EX2,  /* ... and P by ex2.approx.ftz (VARIANT 57) */
    LAB_BWD_WS_MASK_SKIP,     /* the library's backward; masked calls test elements only in the blocks that need it
                                 (VARIANT 129) */
    LAB_FWD_WGMMA_TMA_O,      /* the library's forward with o stored by TMA from shared memory (PP bit 4) at d = 64
                                 too (the library's at d = 128 since run 44) */
    LAB_BWD_WS_TMA_DKV,       /* the library's backward with dK, dV stored by TMA from shared memory (VARIANT 257),
                                 masked or not: the library's masked kernel at d = 128 from run 44 until its query
                                 blocks went in runs (VARIANT bit 10, 2026-12-02) */
    LAB_FWD_WGMMA_DIRECT_O,   /* the library's forward before run 44: o stored from registers at d = 128 too */
    LAB_FWD_WGMMA_KEEP_MAX,   /* PP bit 6 at both head dims: o rescaled only when a row's maximum grows by > 2^8 */
    LAB_FWD_WGMMA_RESCALE_ALWAYS, /* the library's before session 13: o rescaled after every block at d = 128 too */
    LAB_FWD_WGMMA_Q_REGS,     /* d = 128: the library's with PP bit 7 (Q in registers, S = Q K^T as wgmma RS); d = 64 spills */
    LAB_FWD_WGMMA_OWED_PV,    /* d = 128: PP bit 8 (persistent: a tile's last P V issued with the next tile's first S,
                                 its epilogue after the first softmax); the library's since session 14 (506) */
    LAB_BWD_WS_DIRECT_DKV,    /* the library's backward before run 44: dK, dV stored from registers, masked too; the
                                 unmasked kernel (and the masked one at d = 64) until bit 10 (2026-12-02) */
    LAB_BWD_WS_MASK_UNI,      /* the library's masked backward (VARIANT 257 at d = 128, 1 at 64) deciding the element
                                 test per warp by two scalar compares, the test one unsigned compare (+512) */
    LAB_FWD_WGMMA_PERSIST_PP, /* the library's persistent forward at d = 128 with ping-pong consumers (PP 59) */
    LAB_FWD_WGMMA_DESC_ADD,   /* the library's forward with the wgmma descriptors as base + constant (PP bit 9) */
    /* the library's backward (VARIANT 1025; masked 1281 at d = 128) with the older bits again, the
       step now being split in runs: 2^x by ex2 alone (+8), dQ deferred (+16), and the consumers
       taking turns (+32), dP^T with dQ (+64); dK, dV by TMA unmasked too (+256). Since run 6 of
       2026-12-02 the library's unmasked kernel is 1041 ("runs defer" without masks) */
    LAB_BWD_WS_RUNS_EX2,
    LAB_BWD_WS_RUNS_DEFER,
    LAB_BWD_WS_RUNS_DEFER_PP,
    LAB_BWD_WS_RUNS_DEFER_EARLY,
    LAB_BWD_WS_RUNS_TMA_DKV,
    LAB_BWD_WS_RUNS_DEFER_EX2, /* 1041, masked 1297, with ex2 (+8): the library's d = 128 kernels in sessions 15-17 */
    LAB_BWD_WS_Q_FIRST,        /* those with Q and dO copied before the lse and D reads (+4096) */
    LAB_BWD_WS_STAMPS,         /* the d = 128 kernels of sessions 15-17 (1049, masked 1305) stamping each CTA's phases
                                  (+8192; lab_bwd_stamps_dump) */
    LAB_BWD_WS_EARLY_KV,       /* the sessions 15-17 d = 128 kernels with K, V copied at the entry (+16384) */
    LAB_BWD_WS_EARLY_KV_STAMPS, /* ... and the stamps (+8192) */
    LAB_BWD_WS_TMA_DKV_ALL,    /* the sessions 15-17 d = 128 kernels with dK, dV by TMA unmasked too (1305) */
    LAB_BWD_WS_DESC_ADD,       /* the sessions 15-17 d = 128 kernels with descriptors as base + constant (+32768) */
    LAB_BWD_WS_DESC_SCALE_STSM, /* ... and dS^T scaled (+65536, bf16) and stored by stmatrix (+131072) */
    LAB_BWD_WS_DESC_SCALE_STSM_TMA, /* ... and dK, dV by TMA unmasked too (+256) */
    LAB_BWD_WS_DQ_ALT, /* session 19's library kernels (33817 / 230681) with each block's dQ tile whole by one consumer (bit 18) */
    LAB_BWD_WS_DQ_ALT_TMA, /* ... with dK, dV by TMA unmasked too (the library's short walks) */
    LAB_BWD_WS_DQ_ALT_M1, /* masked: 230681's bit 18 form without bits 16 (SCALE_DS) and 17 (STSM): 296217 */
    LAB_BWD_WS_DQ_ALT_M2, /* masked: with SCALE_DS, no STSM: 361753 */
    LAB_BWD_WS_DQ_ALT_M3, /* masked: with STSM, no SCALE_DS: 427289 */
    LAB_BWD_WS_DQ_ALT_STAMPS, /* the library's d = 128 kernels since session 20 (295961 / 296217) with the stamps (bit 13) */
};

/* As dfa_attn_fwd_cuda / dfa_attn_bwd_cuda (same arguments, already valid: the lab makes
   them) with a lab variant's kernel; DFA_ERR_UNSUPPORTED where it cannot run (not sm_90,
   head_dim not 64 or 128; the older backward variants (FUSED, BULK) need the atomic dq path). */
dfa_status lab_fwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o,
                   float *lse, cudaStream_t stream);
dfa_status lab_bwd(int variant, const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *o,
                   const float *lse, const void *dout, void *dq, void *dk, void *dv, cudaStream_t stream);

/* The backward's per-CTA stamps (LAB_BWD_WS_STAMPS): cleared before a run; dumped after it as
   65536 records of 8 little-endian uint64 (src/cuda/bwd_ws.cuh says what each holds; a CTA that
   did not run leaves zeros), for bench/gpu/bwd_stamps.py. Both return 0, or -1 on a failure. */
int lab_bwd_stamps_clear(void);
int lab_bwd_stamps_dump(const char *path);

#ifdef __cplusplus
}
#endif

#endif
