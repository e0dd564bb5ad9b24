/* Internal: between the C entry points (api.c, the sequence-parallel executor)
 * and the CUDA launchers (*.cu). Callers validate arguments; the launchers pick
 * a kernel, launch it on the caller's stream and map CUDA failures to
 * DFA_ERR_BACKEND. Nothing here is part of the public API. */
#ifndef DFA_CUDA_LAUNCH_H
#define DFA_CUDA_LAUNCH_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention call, resolved: sizes, element type, causal offset, scale. The kernels'
   parameter blocks hold a copy of it (member sh; launch_fwd.cuh, launch_bwd.cuh). The order of
   the fields is the kernels' parameter layout, which ptxas's register allocation is sensitive
   to: keep it. */
typedef struct {
    int batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim;
    int causal;       /* 0 also when every key is visible to every row */
    long long offset; /* q_start - k_start, clamped to [-seqlen_q - 1, seqlen_k] */
    float scale;      /* resolved softmax scale */
    int bf16;         /* 1: bf16 storage, 0: f16 (q, k, v, o, dout and, unless out_f32, the outputs) */
    unsigned flags;   /* DFA_FLAG_* */
    int out_f32;      /* 1: the forward writes o, the backward dq, dk, dv as float32 (same layouts,
                         4-byte elements, 16-byte aligned); the inputs keep the storage type.
                         0 for the public calls. */
    /* Masks (documents, window; src/cuda/mask.cuh). 0 / NULL without one. With a mask, causal
       and offset are 0: the visible intervals carry the causal part too. mask_rows[b][i] =
       {lo, hi}: the keys [lo, hi) query row i sees; mask_keys[b][j] = {lo, hi}: the query rows
       that see key j (device memory, dfa__cuda_mask_prepare fills them). */
    int masked;
    const int *mask_rows; /* [batch][seqlen_q][2] */
    const int *mask_keys; /* [batch][seqlen_k][2] */
    /* The persistent forward's tile counter (4 bytes of device memory, zeroed by its launcher):
       a caller's scratch (dfa_attn_fwd_cuda_with_scratch); NULL: the launcher takes 256 bytes of
       stream-ordered scratch itself */
    unsigned int *fwd_counter;
    /* The version-3 features, after the fields above so that the kernels' parameter layout
       before them stays as it was. softcap: 0 off, else c > 0 and every logit becomes
       c * tanh(scale * q.k / c). head_dim_v: the value head dim of v, o, dout and dv (head_dim
       when the descriptor's is 0). sinks: [num_heads] float32 device logits that join every
       row's normaliser, NULL off; dsinks: the backward's [num_heads] float32 output, NULL when
       not wanted. */
    float softcap;
    int head_dim_v;
    const float *sinks;
    float *dsinks;
    /* 1: the forward's kernels add sinks[h] to each row's normaliser themselves (the public
       forward, api.c); 0: they ignore the sinks (the sequence-parallel executor's blocks, whose
       partial results take the sinks once merged). */
    int fwd_sinks;
} dfa__cuda_shape;

/* Resolves a validated descriptor (f16/bf16) into a shape (out_f32 = 0). A descriptor with
   a mask gives masked = 1 with NULL interval arrays: the caller prepares them
   (dfa__cuda_mask_of, dfa__cuda_mask_prepare) before launching. */
dfa__cuda_shape dfa__cuda_shape_of(const dfa_attn_desc *d);

/* The source of a mask (device pointers for the ids), for dfa__cuda_mask_prepare. */
typedef struct {
    int batch, seqlen_q, seqlen_k;
    const int32_t *q_doc, *k_doc; /* NULL: one document */
    long long offset;             /* q_start - k_start (not clamped) */
    int causal, window;
    int left, right;              /* with window: -1 unlimited */
} dfa__cuda_mask;

dfa__cuda_mask dfa__cuda_mask_of(const dfa_attn_desc *d);

/* Bytes of device memory the interval arrays of a mask take (rows, then keys, 256-aligned). */
size_t dfa__cuda_mask_bytes(const dfa__cuda_mask *m);

/* Computes the visible intervals of every query row and every key of m into buf (at least
   dfa__cuda_mask_bytes, 256-byte aligned) on stream, and points s->mask_rows / mask_keys
   into it. One thread per row and per key, binary searches in the ids. */
dfa_status dfa__cuda_mask_prepare(const dfa__cuda_mask *m, void *buf, dfa__cuda_shape *s, cudaStream_t stream,
                                  const char *fn);

/* A masked call's intervals in stream-ordered scratch: *buf (cudaMallocAsync on stream, NULL on
   failure) prepared for s; dfa__cuda_mask_end gives it back after the call's launches and returns
   st, or the failure to free when st is DFA_OK. */
dfa_status dfa__cuda_mask_begin(const dfa_attn_desc *d, dfa__cuda_shape *s, void **buf, cudaStream_t stream,
                                const char *fn);
dfa_status dfa__cuda_mask_end(void *buf, dfa_status st, cudaStream_t stream, const char *fn);

/* o (and lse, which may be NULL) of one forward, enqueued on stream. */
dfa_status dfa__cuda_fwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, void *o,
                         float *lse, cudaStream_t stream, const char *fn);

/* Keys of a float32 backward (out_f32) whose dk, dv go to outputs of the storage type instead,
   same layouts ([batch, seqlen_k, kv_heads, D]): the sequence-parallel executor's diagonal
   blocks write the keys no other block adds to straight into the caller's dk, dv
   (seqpar/compute.h, dfa__direct). The float32 dk, dv of those keys are left unwritten. The
   kernels take it as a parameter of its own, after their parameter block, which leaves the
   16-bit kernels' code as it was. */
typedef struct {
    void *dk, *dv; /* NULL: none */
    int from, to;  /* keys [from, to) of every (batch, kv head) */
} dfa__cuda_dkv16;

/* dq, dk, dv of one backward, enqueued on stream. scratch: NULL to take dfa__cuda_bwd_scratch(s)
   bytes with cudaMallocAsync on stream (given back with cudaFreeAsync before this returns), or a
   caller-owned device buffer of at least that many bytes, 256-byte aligned, used instead (it
   must stay untouched until the stream has passed this call). With out_f32, dq itself is the
   float32 accumulator (zeroed on the stream first) unless a separate dq pass computes it.
   dkv16: NULL, or (with out_f32) the keys whose dk, dv go to 16-bit outputs. */
dfa_status dfa__cuda_bwd(const dfa__cuda_shape *s, const void *q, const void *k, const void *v, const void *o,
                         const float *lse, const void *dout, void *dq, void *dk, void *dv, void *scratch,
                         const dfa__cuda_dkv16 *dkv16, cudaStream_t stream, const char *fn);

/* Bytes of device scratch one backward with this shape takes on the current device: D and
   lse * log2(e) per (batch, head, query row), 256-byte aligned; the float32 dq accumulator
   unless dq is float32 (it is its own accumulator) or a dq pass computes it (deterministic
   calls outside the Hopper kernel); with the Hopper kernel's in-order dq (deterministic), a
   counter per (batch, head, 64 query rows). */
size_t dfa__cuda_bwd_scratch(const dfa__cuda_shape *s);

/* dtype: 0 f32, 1 bf16, 2 f16 (as dfa_dtype). rows = batch * seqlen_q * num_heads. */
dfa_status dfa__cuda_merge(int dtype, int batch, int seqlen_q, int num_heads, int head_dim, void *o_acc,
                           float *lse_acc, const void *o_part, const float *lse_part, cudaStream_t stream,
                           const char *fn);

/* Attention sinks (sinks.cu). add_sinks: the rows of a forward computed without sinks get them,
   in place: lse = logaddexp(lse, sinks[h]), o *= exp(lse_before - lse) (a row whose lse is -inf
   gets o = 0, lse = sinks[h]). o is [batch, seqlen, heads, dv] float32 (the sequence-parallel
   executor's merged accumulator), lse [batch, heads, seqlen] float32, sinks [heads] device
   memory. */
dfa_status dfa__cuda_add_sinks(int batch, int seqlen, int heads, int dv, float *o, float *lse, const float *sinks,
                               cudaStream_t stream, const char *fn);

/* dsinks[h] = -sum over b, i of exp(sinks[h] - lse[b][h][i]) D[b][h][i], overwritten, in a fixed
   order (the same bits on every run). D: dsum ([batch, heads, seqlen], the backward's D pass), or
   with dsum NULL dout_i . o_i computed here from o and dout ([batch, seqlen, heads, dv], bf16 when
   bf16, else f16). Rows whose lse is -inf add nothing. gate: NULL, or a device flag: dsinks is
   written only where *gate == 1. */
dfa_status dfa__cuda_dsinks(int bf16, int batch, int seqlen, int heads, int dv, const void *o, const void *dout,
                            const float *dsum, const float *lse, const float *sinks, float *dsinks, const int *gate,
                            cudaStream_t stream, const char *fn);

/* Kernel families. AUTO: the Hopper (wgmma/TMA) kernels for head dims 64 and 128 on sm_90
   (value head dim equal to head_dim), the mma.sync kernels otherwise. */
enum { DFA__FAMILY_AUTO = 0, DFA__FAMILY_MMA = 1, DFA__FAMILY_WGMMA = 2 };

/* FOR TESTS ONLY: makes every later forward and backward of this process use one family
   (DFA__FAMILY_WGMMA: DFA_ERR_UNSUPPORTED where it cannot run), or the default again
   (DFA__FAMILY_AUTO). Process-wide; call it while no other thread is in a CUDA call of the
   library. Not exported in any public header: the GPU tests link the static library. */
void dfa__cuda_force_family(int family);
/* The forced family, DFA__FAMILY_AUTO unless a test forced one. */
int dfa__cuda_forced_family(void);

/* FOR TESTS ONLY: makes every later forward take its query tiles in sections of n (batch,
   head) pairs (dfa__fwd_tile_order; at most all of them), or of the size the L2 suggests
   again (n = 0). The order changes no bit of the results: the tests compare bit for bit. Same
   rules as dfa__cuda_force_family. */
void dfa__cuda_force_l2_heads(int n);
int dfa__cuda_forced_l2_heads(void);

/* FOR TESTS ONLY: makes every later backward whose key tiles may be split over several CTAs (the
   Hopper kernel's float32 instances, not deterministic, no 16-bit keys; heuristics.h
   dfa__bwd_qsplit_for) split each into n (1: never), or choose again (n = 0). Results change
   in the last bits (float32 sums in another order). Same rules as dfa__cuda_force_family. */
void dfa__cuda_force_bwd_qsplit(int n);
int dfa__cuda_forced_bwd_qsplit(void);

/* FOR TESTS ONLY: makes every later backward's key-block grid (either family, not in-order dq)
   come in sections of n (batch, kv head) pairs (dfa__bwd_tile_order; at most all of them), or
   in the pairs' order without sections (n < 0), or as heuristics.h dfa__bwd_sections_for
   chooses again (n = 0). The order changes no bit of dk and dv; dq, added as the tiles come,
   changes in its last bits. Same rules as dfa__cuda_force_family. */
void dfa__cuda_force_bwd_sections(int n);
int dfa__cuda_forced_bwd_sections(void);

/* FOR TESTS ONLY: how every later backward with the unmasked d = 128 Hopper kernel, 16-bit
   outputs and dQ added as it comes stores dK and dV (heuristics.h dfa__bwd_tma_dkv_for):
   1 from registers, 2 by TMA through shared memory, 0 chosen by the query rows a CTA walks
   again. Either way the bits are the same (only the epilogue differs). Same rules as
   dfa__cuda_force_family. */
void dfa__cuda_force_bwd_dkv_tma(int mode);
int dfa__cuda_forced_bwd_dkv_tma(void);

/* The family a pass (forward or backward: both have Hopper kernels at the same head dims) uses:
   `family` (AUTO, MMA, WGMMA) resolved for the shape on the current device into *wgmma (1: Hopper
   kernels: sm_90 and head dims 64, 128 and 256 with head_dim_v = head_dim, or 192 / 128; see
   dfa__hopper_kernels_for). Fails (status recorded) when the device is older than sm_80, when the
   value head dim is not one the kernels take (dfa__cuda_check_head_dim_v), or when WGMMA is
   asked for where it cannot run. */
dfa_status dfa__cuda_pick_family(const dfa__cuda_shape *s, int family, int *wgmma, const char *fn);

/* A value head dim of its own (head_dim_v != head_dim, both resolved) runs on the mma.sync
   kernels at the (head_dim, head_dim_v) pairs they are built for (heuristics.h,
   dfa__mma_v_pair_for); elsewhere DFA_ERR_UNSUPPORTED naming d->head_dim_v (the fail form
   always records that error). */
dfa_status dfa__cuda_check_head_dim_v(int head_dim, int head_dim_v, const char *fn);
dfa_status dfa__cuda_fail_head_dim_v(int head_dim, int head_dim_v, const char *fn);

/* A softcap (> 0) runs with value head dim = head dim; with one of its own DFA_ERR_UNSUPPORTED
   naming d->softcap. Both families cap, forward and backward. */
dfa_status dfa__cuda_check_softcap(float softcap, int head_dim, int head_dim_v, const char *fn);

/* Maps a CUDA error to DFA_ERR_BACKEND (or DFA_ERR_OUT_OF_MEMORY) with CUDA's own message. */
dfa_status dfa__cuda_fail(cudaError_t e, const char *fn, const char *what);

/* Compute capability major*10+minor of the current device, or a negative value on failure
   (then the message is recorded). */
int dfa__cuda_device_cc(const char *fn, dfa_status *st);

/* One attribute of the current device (cudaDevAttrL2CacheSize, ...; all are >= 0), or -1 with *st
   set (DFA_ERR_BACKEND, CUDA's message). */
int dfa__cuda_device_attr(enum cudaDeviceAttr attr, const char *fn, dfa_status *st);

#ifdef __cplusplus
}
#endif

#endif
