/*
 * distflash: exact, memory-efficient attention for long-context training.
 *
 * Public C API (contract v0). CPU entry points, status codes, the attention
 * descriptor and the backend-neutral distributed calls. Backend headers
 * (distflash_cuda.h, distflash_mpi.h, distflash_nccl.h) add device entry
 * points and communicator constructors on top of this one.
 *
 * Conventions shared by every call:
 *  - Every entry point returns a dfa_status. On any status other than DFA_OK
 *    the outputs are untouched, and dfa_last_error() names the argument and
 *    says why. The library never prints, exits or aborts.
 *  - The caller owns every buffer. Scratch memory is linear in sequence length,
 *    never seqlen_q x seqlen_k. The single-device calls allocate it for the
 *    duration of a call and free it before returning (the CUDA backward gives
 *    its device scratch back in stream order, see distflash_cuda.h). The
 *    distributed calls keep theirs in the communicator between calls, reused
 *    while the shapes stay the same and replaced when they change, until
 *    dfa_comm_destroy frees it (see distflash_mpi.h).
 *  - Thread safety: calls are reentrant; distinct calls may run concurrently
 *    from different threads on distinct outputs. Each CPU call parallelises
 *    itself with OpenMP (see dfa_set_num_threads).
 *  - The CPU calls are deterministic: same inputs, same machine, same bits, for
 *    any thread count. So are the device calls, except the backward's float32
 *    additions of partial gradients, which happen in any order unless
 *    DFA_FLAG_DETERMINISTIC is set (distflash_cuda.h, "Determinism").
 */
#ifndef DISTFLASH_H
#define DISTFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* DFA_VERSION_MAJOR, _MINOR, _PATCH and DFA_VERSION: the version of these headers */
#include "distflash_version.h"

/* DFA_API marks every function of the public headers: the shared library is built with
   hidden visibility, so it exports exactly what these headers declare. (GCC and Clang; other
   compilers export everything and need nothing here. Predefine DFA_API to override.) */
#ifndef DFA_API
#if defined(__GNUC__) || defined(__clang__)
#define DFA_API __attribute__((visibility("default")))
#else
#define DFA_API
#endif
#endif

/* The outcome of every call. The numbers are stable: part of the ABI, never reused or
   renumbered; a later version may add statuses with new numbers (dfa_status_string names
   an unknown one "DFA_ERR_UNKNOWN_STATUS"). */
typedef enum {
    DFA_OK = 0,
    DFA_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad size, mismatched shapes */
    DFA_ERR_UNSUPPORTED = 2,      /* valid but not implemented (head_dim, dtype on a backend) */
    DFA_ERR_OUT_OF_MEMORY = 3,    /* scratch allocation failed; outputs untouched */
    DFA_ERR_BACKEND = 4,          /* CUDA / NCCL / MPI reported an error; message has its text */
    DFA_ERR_INTERNAL = 5          /* a bug in distflash; please report it */
} dfa_status;

typedef enum { DFA_F32 = 0, DFA_BF16 = 1, DFA_F16 = 2 } dfa_dtype;

/* Flags for dfa_attn_desc.flags. */
#define DFA_FLAG_DETERMINISTIC 1u /* device backward: the same bits on every run (the CPU always is) */
#define DFA_FLAG_WINDOW 2u        /* sliding window: window_left / window_right apply (descriptor v2) */
#define DFA_FLAG_SAME_DOCS 4u     /* distributed calls: the document ids are those of the communicator's
                                     last call with documents (see dfa_dist_attn_fwd); needs q_doc */

/*
 * Descriptors that can grow (dfa_attn_desc, dfa_dist_desc).
 *
 * Later versions of this header add fields to the descriptors (masks, options). So that a
 * program built against this header keeps working with a later library, and a program
 * built against a later header fails clearly with an older library, each descriptor
 * starts with a small versioning header and ends with reserved space:
 *
 *  - struct_size: sizeof the descriptor as the caller compiled it. 0 (a zero-initialised
 *    descriptor) means this header's size (DFA_ATTN_DESC_SIZE_V1 / DFA_DIST_DESC_SIZE_V1).
 *    Otherwise it must be the size of a descriptor version the library knows: the library
 *    reads that many bytes of the caller's memory, so it takes no size on trust. A size
 *    larger than this library's descriptor (a newer header whose descriptor grew) is refused
 *    with DFA_ERR_UNSUPPORTED before any byte past this library's size is read.
 *  - magic: 0 when struct_size is 0, DFA_DESC_MAGIC otherwise (catches descriptors that
 *    were never initialised).
 *  - version: DFA_DESC_VERSION of the caller's header (0 in a zero-initialised descriptor).
 *  - reserved: must be zero. New fields are carved out of the reserved space first (zero
 *    is always their default, today's behaviour), so sizes stay put and a zero-initialised
 *    descriptor stays valid in every later version; only when that space runs out does the
 *    size grow, and then the library reads a caller's older, shorter descriptor with the
 *    missing fields at their defaults.
 *
 * The library refuses (DFA_ERR_INVALID_ARGUMENT) a struct_size or magic that is neither of
 * the above (DFA_ERR_UNSUPPORTED for a larger descriptor size, as said), and refuses (DFA_ERR_UNSUPPORTED) non-zero bytes where it knows no field: a
 * descriptor that was not zero-initialised, or one from a newer header that sets fields
 * this library does not know. Either way dfa_last_error() names the field or byte range.
 *
 * Two ways to make one, both valid forever:
 *   dfa_attn_desc d = dfa_attn_desc_init(batch, sq, sk, heads, kv_heads, head_dim);
 *   dfa_attn_desc d = {0};  d.batch = ...;    (C; memset to 0 works too)
 * and then set the fields. Never copy a descriptor's bytes from another program's memory
 * without its header.
 */
#define DFA_DESC_MAGIC 0x31414644u /* "DFA1" in memory on little-endian machines */
#define DFA_DESC_VERSION 3u        /* this header's descriptor version (2: documents, window; 3: softcap,
                                      value head dim, sinks) */

/*
 * Shapes and options of one attention call.
 *
 * Layouts (row-major, contiguous, element type `dtype`; Dv = head_dim_v, or
 * head_dim when head_dim_v is 0):
 *   q, dq          : [batch, seqlen_q, num_heads,    head_dim]
 *   o, dout        : [batch, seqlen_q, num_heads,    Dv]
 *   k, dk          : [batch, seqlen_k, num_kv_heads, head_dim]
 *   v, dv          : [batch, seqlen_k, num_kv_heads, Dv]
 *   lse            : [batch, num_heads, seqlen_q] float32, natural log of
 *                    sum_j exp(s_ij) over the visible keys (plus exp(sink_h)
 *                    with sinks; see "Logits, softcap and sinks" below).
 * GQA/MQA: query head h reads kv head h / (num_heads / num_kv_heads).
 * Causal: key j is visible to query i iff k_start + j <= q_start + i, so two
 * chunks of one long sequence can be paired by their global offsets. A query
 * row that sees no key gets o = 0 and lse = -inf (merging it is exact), or
 * lse = sink_h with sinks.
 *
 * Limits: all sizes >= 1; num_heads a multiple of num_kv_heads; head_dim and
 * head_dim_v multiples of 8, at most 256; |q_start|, |k_start| and |q_start - k_start|
 * < 2^62 (every position sum is then exact; beyond, refused naming the field);
 * element counts and byte sizes must fit in int64/size_t.
 */
typedef struct {
    uint32_t struct_size;     /* versioning header: see above (0 in a zero-initialised descriptor) */
    uint32_t magic;
    uint32_t version;
    uint32_t reserved_header; /* must be 0 */
    int batch, seqlen_q, seqlen_k, num_heads, num_kv_heads, head_dim;
    dfa_dtype dtype;          /* of q, k, v, o, dout, dq, dk, dv */
    int causal;               /* 0 or 1; key j visible to query i iff k_start + j <= q_start + i */
    int64_t q_start, k_start; /* global position of row 0 of q / of k (used when causal or windowed) */
    float softmax_scale;      /* 0 means 1/sqrt(head_dim); otherwise finite and > 0 */
    unsigned flags;           /* DFA_FLAG_*; 0 is the default */
    /* Version 2 (carved out of version 1's reserved space; zero = version 1's behaviour):
       documents and a sliding window, see "Masks" below. */
    const int32_t *q_doc;     /* [batch, seqlen_q] document id of each query row, or NULL */
    const int32_t *k_doc;     /* [batch, seqlen_k] document id of each key row, or NULL */
    int32_t window_left;      /* with DFA_FLAG_WINDOW: keys at most this far behind (>= 0, -1 unlimited) */
    int32_t window_right;     /* with DFA_FLAG_WINDOW: keys at most this far ahead (>= 0, -1 unlimited) */
    /* Version 3 (carved out of version 2's reserved space; zero = version 2's behaviour):
       see "Logits, softcap and sinks" below. */
    float softcap;            /* 0 = off; else finite and > 0: s = softcap * tanh(s / softcap) */
    int32_t head_dim_v;       /* 0 = head_dim; else a multiple of 8, <= 256: v, o, dout, dv have this dim */
    const float *sinks;       /* [num_heads] float32 learnable logits, finite, or NULL (no sinks) */
    float *dsinks;            /* backward output [num_heads] float32 (overwritten), or NULL = not wanted */
    uint64_t reserved[2];     /* room for later fields (options); must be 0 */
} dfa_attn_desc;

#define DFA_ATTN_DESC_SIZE_V1 136u /* sizeof(dfa_attn_desc) in descriptor version 1 */
#define DFA_ATTN_DESC_SIZE_V2 136u /* ... and in version 2: the new fields took reserved space */
#define DFA_ATTN_DESC_SIZE_V3 136u /* ... and in version 3, likewise */

/*
 * Logits, softcap and sinks (descriptor version 3).
 *
 * For query row i of head h (batch row b) and each visible key j (see "Masks"):
 *   s_ij = scale * q_i . k_j                       scale = softmax_scale (or 1/sqrt(head_dim))
 *   s_ij = softcap * tanh(s_ij / softcap)          only when softcap > 0 (logit softcapping)
 *   lse_i = log(sum_j exp(s_ij) + exp(sink_h))     the exp(sink_h) term only when sinks != NULL
 *   o_i = sum_j exp(s_ij - lse_i) v_j
 * A sink is one learnable logit per query head that joins every row's normaliser and carries
 * no value: it takes a share exp(sink_h - lse_i) of the row's weight, so the weights of the
 * keys sum to less than 1. A row that sees no key gets o = 0 and lse = sink_h (-inf without
 * sinks). The backward's probabilities are P_ij = exp(s_ij - lse_i), as without sinks (lse
 * already holds the sink), with D_i = dout_i . o_i and dS_ij = P_ij (dout_i . v_j - D_i);
 * softcap multiplies dS_ij by its derivative 1 - tanh^2(s_ij / softcap) (s_ij before the cap)
 * before dq and dk are formed. With dsinks != NULL the backward also writes
 *   dsinks[h] = - sum over b and i of exp(sink_h - lse_i) D_i     (rows of head h, every batch row)
 * overwriting it (not accumulating); a row whose lse is -inf adds nothing. dsinks needs
 * sinks; the forward does not read it. In the backward the sinks matter only for dsinks,
 * which depends on the rows (lse, o, dout) and not on the keys: when the keys are split into
 * chunks (backward of each chunk with the merged o and lse), any one chunk's call gives all
 * of dsinks, so pass dsinks to one of them only. head_dim_v (Dv) gives v, dv, o and dout their own
 * last dimension (value heads wider or narrower than the query/key heads); lse and the
 * scale do not depend on it (the default scale is 1/sqrt(head_dim)).
 *
 * sinks and dsinks live where the tensors do: host memory for the CPU calls, which check
 * that every sink is finite (DFA_ERR_INVALID_ARGUMENT naming the head otherwise), and device
 * memory for the _cuda calls, where finite sinks are the caller's promise (not checked, as
 * reading them would synchronise). sinks is an input and dsinks an output of the backward:
 * no output may overlap either. A descriptor that says version 1 or 2 may not set these
 * fields (their bytes were reserved: DFA_ERR_UNSUPPORTED, as any reserved byte).
 *
 * dfa_attn_merge never adds sinks and ignores softcap, sinks and dsinks: partial results
 * over disjoint key sets are computed and merged without sinks, and the sink joins once,
 * at the end (lse = logaddexp(lse, sink_h), o scaled by exp(lse_before - lse_after)).
 * Merge reads head_dim_v for the width of o.
 *
 * The CPU calls implement all of this, and so do the distributed calls on the host
 * (dfa_dist_attn_fwd/bwd): their blocks take softcap and head_dim_v, partial results merge
 * without the sinks, the forward adds each row's sink once after the last merge, and the
 * backward's dsinks is the sum over the calling rank's own rows only (see distflash_mpi.h,
 * "Sinks"). The _cuda calls (distflash_cuda.h) implement sinks, dsinks and softcap, and a
 * head_dim_v other than head_dim at the pairs their kernels are built for (not together
 * with softcap); the distributed device calls (distflash_nccl.h) implement sinks, dsinks
 * and softcap and refuse a head_dim_v other than head_dim (DFA_ERR_UNSUPPORTED naming the
 * field).
 */

/*
 * Masks (descriptor version 2): packed documents and a sliding window.
 *
 * Key j is visible to query i, with global positions pi = q_start + i and pj = k_start + j
 * (batch row b), iff all of these hold:
 *   causal:   !causal || pj <= pi
 *   docs:     q_doc == NULL || q_doc[b][i] == k_doc[b][j]
 *   window:   !(flags & DFA_FLAG_WINDOW) || ((window_left  < 0 || pi - pj <= window_left) &&
 *                                           (window_right < 0 || pj - pi <= window_right))
 * so window_left = w, causal = 1 is the usual "w keys back plus the diagonal" sliding window
 * (FlashAttention's window_size = (w, 0)), and window_left = 0 lets a query see only its own
 * position. A query row that sees no key gets o = 0 and lse = -inf (sink_h with sinks), its
 * gradients are 0, and keys that no query sees get dk = dv = 0.
 *
 * Documents are given as per-token ids, not as cumulative sequence lengths (flash-attn's
 * cu_seqlens): ids travel with the rows they label, so any chunk of a sequence (a rank's rows
 * in the distributed calls, a key chunk paired by q_start/k_start) carries its own layout
 * unchanged, where cu_seqlens would have to be re-based and clipped for every chunk. Within
 * each batch row the ids must be non-decreasing along the sequence (each document is one
 * contiguous run of rows); any int32 values, equal ids meaning the same document, so a query
 * sees exactly the keys of its own run. Non-decreasing ids make every visible key range an
 * interval and "this block is fully masked" a comparison of the blocks' first and last ids,
 * which is what lets the kernels skip masked blocks (cost follows the visible pairs).
 * q_doc and k_doc are set together or both NULL (one document). For the CPU calls they are
 * host pointers and the library checks that they are non-decreasing; for the _cuda calls they
 * are device pointers and being non-decreasing is the caller's promise (not checked). They
 * are inputs: outputs must not overlap them. dfa_attn_merge does not read them.
 * Without DFA_FLAG_WINDOW both window fields must be 0; with it, each is -1 (unlimited on
 * that side) or >= 0. A descriptor that says version 1 may not set the version-2 fields
 * (their bytes were reserved in version 1: DFA_ERR_UNSUPPORTED, as any reserved byte).
 */

/* A descriptor with the given shape, its versioning header filled in, and every other
   field at its default (dtype f32, non-causal, offsets 0, default scale, flags 0, no
   documents, no window, no softcap, value head dim = head_dim, no sinks): the
   same as a zero-initialised descriptor with the shape set. Arguments are not checked
   here; the calls check them. */
DFA_API dfa_attn_desc dfa_attn_desc_init(int batch, int seqlen_q, int seqlen_k, int num_heads,
                                         int num_kv_heads, int head_dim);

/* Static name of a status ("DFA_OK", "DFA_ERR_INVALID_ARGUMENT", ...). Never NULL. */
DFA_API const char *dfa_status_string(dfa_status s);

/* Message describing the last failure on the calling thread ("" if none yet).
   The pointer stays valid until the next distflash call on this thread. */
DFA_API const char *dfa_last_error(void);

/* "major.minor.patch" and the compiled-in parts, e.g. "0.2.0 (cpu, openmp; cuda; mpi; nccl)". */
DFA_API const char *dfa_version_string(void);

/* The library's version as one number, major * 10000 + minor * 100 + patch (0.2.0 is 200):
   the DFA_VERSION of the headers it was built with. A program can compare it with its own
   DFA_VERSION to find which library it runs with. Versioning: a change of major version may
   break the API or ABI; a minor version adds functions, flags or descriptor fields (within the
   rules of "Descriptors that can grow") and keeps every existing call; a patch fixes bugs. */
DFA_API unsigned dfa_version(void);

/* Threads used by each CPU call: n >= 1, or 0 for the OpenMP default
   (OMP_NUM_THREADS or the core count). Process-wide; not thread safe against
   calls running at the same moment. At most 4 threads per online CPU
   (sysconf(_SC_NPROCESSORS_ONLN)): a larger n is refused with
   DFA_ERR_INVALID_ARGUMENT naming the bound, since OpenMP ends the process
   when it cannot create a team's threads. */
DFA_API dfa_status dfa_set_num_threads(int n);

/* The SIMD path the CPU kernels use on this processor: "avx512", "avx2" or "scalar".
   DFA_CPU_ISA=avx512|avx2|scalar in the environment caps it (for testing). */
DFA_API const char *dfa_cpu_isa(void);

/*
 * Forward: o = softmax(scale * q k^T + mask) v, and its per-row log-sum-exp
 * (with softcap and sinks as "Logits, softcap and sinks" says).
 * q, k, v: inputs (layouts above). o: output, overwritten. lse: output,
 * overwritten; may be NULL when not needed (inference). Outputs must not
 * overlap inputs or each other. Memory is linear in sequence length.
 */
DFA_API dfa_status dfa_attn_fwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                void *o, float *lse);

/*
 * Backward: gradients of sum(dout * o) with respect to q, k and v, given the
 * o and lse that dfa_attn_fwd produced for the same inputs (or that a merge of
 * partial results produced: the backward of each chunk with the merged o and
 * lse gives exact partial gradients). dq, dk, dv (and d->dsinks when set)
 * are overwritten (not accumulated) and must not overlap inputs or each
 * other.
 */
DFA_API dfa_status dfa_attn_bwd(const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                                const void *o, const float *lse, const void *dout,
                                void *dq, void *dk, void *dv);

/*
 * Fold a partial result computed over other keys into an accumulated one, in
 * place: lse = logaddexp(lse_acc, lse_part),
 * o = exp(lse_acc - lse) o_acc + exp(lse_part - lse) o_part.
 * Uses batch, seqlen_q, num_heads, head_dim, head_dim_v (the width of o)
 * and dtype of d (the key-side fields, softcap and the sinks are not read:
 * merge never adds a sink, see "Logits, softcap and sinks"). Rows whose lse
 * is -inf on both sides stay o = 0, lse = -inf. o_part/lse_part must not
 * overlap o_acc/lse_acc.
 */
DFA_API dfa_status dfa_attn_merge(const dfa_attn_desc *d, void *o_acc, float *lse_acc,
                                  const void *o_part, const float *lse_part);

/* ------------------------------------------------------------------------ */
/* Sequence parallelism (DistFlashAttn). Communicators come from a backend  */
/* header: dfa_comm_create_mpi (distflash_mpi.h), dfa_comm_create_nccl.     */
/* ------------------------------------------------------------------------ */

typedef struct dfa_comm dfa_comm; /* opaque, one per rank */

/* Frees a communicator; the underlying MPI_Comm / ncclComm_t stays the caller's. NULL is a no-op. */
DFA_API void dfa_comm_destroy(dfa_comm *c);

typedef enum {
    DFA_SCHEDULE_BALANCED = 0, /* DistFlashAttn token-level balancing, zero idle for every P (default) */
    DFA_SCHEDULE_RING = 1      /* each rank fetches every earlier key/value chunk in turn */
} dfa_schedule;

/* A distributed call's descriptor. Versioning header and reserved space as in
   dfa_attn_desc (see "Descriptors that can grow"); attn carries its own header. */
typedef struct {
    uint32_t struct_size, magic, version, reserved_header; /* as in dfa_attn_desc */
    dfa_attn_desc attn;    /* per-rank shape: seqlen_q == seqlen_k == local rows */
    dfa_schedule schedule;
    int overlap;           /* 1: post the next step's messages before computing the current one */
    uint64_t reserved[4];  /* room for later fields; must be 0 */
} dfa_dist_desc;

#define DFA_DIST_DESC_SIZE_V1 192u /* sizeof(dfa_dist_desc) in descriptor version 1 */

/* A distributed descriptor: both versioning headers filled in, attn =
   dfa_attn_desc_init(batch, local_rows, local_rows, num_heads, num_kv_heads, head_dim),
   schedule DFA_SCHEDULE_BALANCED, overlap 0: the same as a zero-initialised descriptor
   with those fields set. */
DFA_API dfa_dist_desc dfa_dist_desc_init(int batch, int local_rows, int num_heads, int num_kv_heads, int head_dim);

/*
 * Distributed forward/backward: every rank of the communicator calls with its
 * own local rows (same descriptor on every rank; checked collectively, so a
 * mismatch fails on every rank instead of hanging). attn.q_start/k_start are
 * ignored: the schedule's layout decides global positions (dfa_dist_position).
 * Buffers and layouts as in dfa_attn_fwd/bwd, with seqlen = local rows.
 * Masks (see "Masks"): the window applies to global positions; documents are
 * this rank's ids, attn.q_doc == attn.k_doc (the same pointer: a rank's rows are
 * its queries and its keys), non-decreasing within the rank's rows, and the
 * same id on two ranks is the same document (a document may span ranks). The
 * ranks exchange their ids (4 bytes a token) and then compute and move only the
 * (query chunk, key chunk) pairs that have a visible key, balanced by the work
 * the kernels do on them (whole tiles), a rank whose own block holds one long
 * document lending its first rows to the least busy rank, and a heavy pair of
 * chunks split over several ranks (causal, batch 1, balanced schedule); a
 * window shorter than a chunk pairs neighbours only. The device calls
 * (distflash_nccl.h) take masks too, with the ids in device memory.
 * A training step passes the same ids to every layer, forward and backward:
 * DFA_FLAG_SAME_DOCS in attn.flags is the caller's promise that they equal
 * the ids of this communicator's last call with documents. The call then
 * reuses what that call gathered and planned instead of exchanging and
 * reading the ids again (on the device calls, that exchange is what
 * synchronises the stream). When the communicator kept nothing it can reuse
 * (no earlier call with documents, another shape, batch, window or causal
 * setting in between, or a failure in the last one) on any rank, every rank
 * reads the ids as without the flag. The promise is not checked: a call
 * whose ids changed computes with the previous ids' mask. The single-device
 * calls ignore the flag; without documents it is refused.
 */
DFA_API dfa_status dfa_dist_attn_fwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k,
                                     const void *v, void *o, float *lse);
DFA_API dfa_status dfa_dist_attn_bwd(dfa_comm *c, const dfa_dist_desc *d, const void *q, const void *k,
                                     const void *v, const void *o, const float *lse, const void *dout,
                                     void *dq, void *dk, void *dv);

/* Global sequence position of local row i on this rank under a schedule's
   layout (-1 if an argument is out of range). */
DFA_API int64_t dfa_dist_position(dfa_schedule s, int rank, int nranks, int local_rows, int i);

/* Rank and size of a communicator (-1 / 0 for NULL). */
DFA_API int dfa_comm_rank(const dfa_comm *c);
DFA_API int dfa_comm_size(const dfa_comm *c);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLASH_H */
