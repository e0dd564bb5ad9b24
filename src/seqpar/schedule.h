/* Internal: sequence-parallel schedules as pure functions.
 *
 * Layout: the global sequence of P * n rows is cut into P contiguous chunks of
 * n rows; rank r owns chunk r (its q, k, v, o, lse, dout rows). A schedule
 * runs in steps; at each step a rank computes at most one *task*: the
 * attention of some query rows of one chunk against the whole key chunk of
 * another (or the same) chunk. Everything else — which messages move, from
 * whom, to whom, and when — is derived from the tasks, identically on every
 * rank, so the ranks agree on the protocol without negotiating it.
 *
 * Timing convention (the executor and the simulator both follow it):
 *  - the inputs of a task computed at step s (a remote k/v chunk, remote
 *    query rows) are posted at step s-1, before that step's compute, and
 *    waited after it (overlap); step 0 tasks use only local data;
 *  - the results of a task computed at step s on a rank that does not own
 *    the query chunk (partial o/lse in the forward, dq in the backward) or
 *    the key chunk (dk/dv in the backward) are posted at step s+1 and
 *    waited after its compute; results of the last step travel after it.
 *
 * Schedules (causal; non-causal attention needs every pair, so every kind
 * runs the plain ring of P steps there):
 *  - RING: at step t rank p >= t computes q_p against k_{p-t}; P steps; the
 *    last rank does P-1 full blocks while rank 0 idles after the first step.
 *  - PAPER: DistFlashAttn's balancing (Alg. 2, the reference code's
 *    predicates, 0-indexed): floor(P/2)+1 steps. At step t >= 1 rank p >= t
 *    computes q_p against k_{p-t} (its own queries), and rank p < t is a
 *    helper: it computes q_{p-t+P} against its own k_p and returns (o, lse).
 *    Owners cover key distances 1..floor(P/2), helpers P-floor(P/2)..P-1.
 *    For even P both would cover distance P/2 at the last step, so the
 *    helpers idle there: P/2 ranks idle for a whole block.
 *  - BALANCED (ours, the default): PAPER, except that for even P the last
 *    step's pair (q_{r+P/2}, k_r) is split by query rows between its owner
 *    r+P/2 (first ceil(n/2) rows) and rank r (the rest), which already holds
 *    k_r and only needs those query rows. No rank idles for any P.
 */
#ifndef DFA_SEQPAR_SCHEDULE_H
#define DFA_SEQPAR_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

typedef enum {
    DFA__SCHED_BALANCED = DFA_SCHEDULE_BALANCED, /* ours: zero idle for every P */
    DFA__SCHED_RING = DFA_SCHEDULE_RING,
    DFA__SCHED_PAPER = 100 /* the published balancing, kept for comparison (simulate, dist-bench) */
} dfa__sched_kind;

struct dfa__sched_plan;

typedef struct {
    dfa__sched_kind kind;
    int nranks; /* P >= 1 */
    int causal; /* 0 or 1 */
    int rows;   /* n: local rows per rank, >= 1 */
    /* Masks (documents, window): the tasks come from this plan (dfa__sched_plan_build) instead
       of the kind's formula. NULL: no mask, the formulas above. */
    const struct dfa__sched_plan *plan;
} dfa__sched;

/* What folding a partial result costs the rank it lands on, per row, in tile-cost units (pairs
   of one head): a float32 read-add-write of the row's heads. A pair off the diagonal sends its
   query rows' results to the query owner and (backward) the whole key chunk's dk, dv to the key
   owner, wherever it is computed; lent rows send x rows of each back to the owner. The value
   is fitted to the times of a pair off the diagonal and of a diagonal against their tile costs
   on two H200s (32 heads x 128, 64k rows a rank): the pair takes about 384 units per row of its
   query window plus its key chunk more than its tile cost says. Small chunks are memory-bound:
   there, lending costs more in folds than it saves. */
#define DFA__PLAN_FOLD_COST 384

/* One block of work: query rows [row0, row1) of chunk q_chunk against the key rows
   [k_row0, k_row1) of chunk k_chunk (k_row1 = 0: to the chunk's end). */
typedef struct {
    int q_chunk, row0, row1;
    int k_chunk;
    int causal_mask; /* apply the causal mask inside the block (the diagonal block when causal; every
                        block of a masked plan when causal: the block's mask comes from positions) */
    int64_t work;    /* masked plans: the block's visible pairs (> 0); 0 elsewhere (derived) */
    /* Masked plans, one batch row: the first rows of a busy diagonal lent to another rank read
       only the keys before their end (causal): [0, x); a pair off the diagonal reads only the keys
       some of its rows see (a document's tail, a window's reach). 0, 0 elsewhere: all. */
    int k_row0, k_row1;
} dfa__task;

/* The end of the key rows a task reads, and how many (n: rows per chunk). */
static inline int dfa__task_key_end(const dfa__task *t, int n) { return t->k_row1 > 0 ? t->k_row1 : n; }
static inline int dfa__task_key_rows(const dfa__task *t, int n) { return dfa__task_key_end(t, n) - t->k_row0; }

/* A diagonal's first rows lent to another rank (schedule.h, busy diagonals). */
static inline int dfa__task_lent(const dfa__task *t) { return t->q_chunk == t->k_chunk && t->k_row1 > 0; }

typedef enum {
    DFA__MSG_KV = 1,       /* k and v of chunk k_chunk: its owner -> the computing rank */
    DFA__MSG_QUERY = 2,    /* the task's query rows (fwd: q; bwd: q, o, dout, lse): owner -> computing rank */
    DFA__MSG_QRESULT = 3,  /* fwd: partial (o, lse); bwd: partial dq; computing rank -> query owner */
    DFA__MSG_KVRESULT = 4  /* bwd only: partial (dk, dv); computing rank -> key owner */
} dfa__msg_kind;

typedef struct {
    dfa__msg_kind kind;
    int send;       /* 1: this rank sends it, 0: this rank receives it */
    int peer;       /* the other rank */
    int step;       /* the compute step of the task it serves (inputs) or comes from (results) */
    dfa__task task; /* that task (computed on the sender of results / the receiver of inputs) */
} dfa__msg;

/* Name of a kind ("ring", "paper", "balanced"). */
const char *dfa__sched_name(dfa__sched_kind k);

/* 1 if s is a well-formed schedule description. */
int dfa__sched_valid(const dfa__sched *s);

/* Number of steps (>= 1). */
int dfa__sched_steps(const dfa__sched *s);

/* The task of `rank` at `step`: returns 1 and fills *out, or 0 when the rank idles. */
int dfa__sched_task(const dfa__sched *s, int rank, int step, dfa__task *out);

/* Upper bound on the messages one rank has in one step (for sizing arrays). */
int dfa__sched_max_messages(const dfa__sched *s);

/* The messages of `rank` that belong to compute step `step` (inputs of the tasks computed
   at that step, and the results they produce; bwd selects the backward's messages). Ordered
   by the computing rank, the same way on both ends. Returns the count (<= cap; -1 if cap is
   too small). */
int dfa__sched_messages(const dfa__sched *s, int bwd, int rank, int step, dfa__msg *out, int cap);

/* 1 for the kinds posted one step before their compute step (inputs), 0 for results. */
static inline int dfa__msg_is_input(dfa__msg_kind k) { return k == DFA__MSG_KV || k == DFA__MSG_QUERY; }

/* Shapes that size a message: from the per-rank descriptor (seqlen = n). */
typedef struct {
    int batch, heads, kv_heads, head_dim;
    size_t elem; /* bytes per element of the storage type */
} dfa__msg_shape;

/* Bytes of a message's payload (all its tensors). Partial results travel in float32. */
int64_t dfa__msg_bytes(const dfa__msg *m, int bwd, const dfa__msg_shape *sh, int rows);

/* Query-key pairs a task evaluates (the masked half of a diagonal block excluded; a masked
   plan's tasks: their visible pairs). */
int64_t dfa__task_pairs(const dfa__task *t, int rows);

/*
 * Masked plans (documents and sliding windows). Under a mask many (query chunk,
 * key chunk) pairs have no visible key at all: a window shorter than a chunk leaves only the
 * diagonal and its neighbour, packed documents leave the diagonal and the pairs that one
 * document straddles. A masked plan computes exactly the pairs with a visible key, each once
 * and as one whole-chunk task, and no message moves for the others:
 *  - step 0: every rank its diagonal pair (local; always visible when the diagonal is);
 *  - the other pairs, heaviest first, each go to the owner of its query chunk or of its key
 *    chunk (each holds half the inputs), BALANCED/PAPER: whichever has less work so far,
 *    counted in tile cost and folds (the work that remains, not blocks; dfa__plan_counts);
 *    RING: the query owner; then a busy diagonal may lend its first rows (below);
 *  - each rank then runs its pairs in order of key distance from step 1 on; the messages
 *    follow from the tasks as for every schedule;
 *  - with `rows` (the query rows of each pair that have a visible key), a pair off the
 *    diagonal covers only those rows: a window shorter than a chunk leaves its first `window`
 *    rows, a document straddling two chunks the rows of that document, so the query rows, the
 *    partial results and their folds shrink alike (the diagonal stays whole: its results are
 *    the accumulators' first, exec_plan.c first_is_diagonal); with `keys` also only the keys they see, widened to
 *    whole DFA__PLAN_TILE tiles (one batch row: contiguous rows of k and v).
 * work[q * P + k] = visible pairs of query chunk q against key chunk k (0: skip the pair);
 * rows[2 (q * P + k)], rows[2 (q * P + k) + 1] = the first and one past the last query row of
 * chunk q with a visible key in chunk k.
 */
typedef struct dfa__sched_plan {
    int nranks, steps;
    dfa__task *tasks;     /* [steps][nranks]; q_chunk < 0: the rank idles */
    const int64_t *work;  /* [P][P], the caller's (kept for the checker) */
    const int *rows;      /* [P][P][2] or NULL (whole chunks), the caller's (kept for the checker) */
    const int *keys;      /* [P][P][2] or NULL (whole key chunks), the same for keys */
    int64_t *load;        /* [P] each rank's load as the plan balanced it (cost units with folds) */
} dfa__sched_plan;

/* Samples of a diagonal's prefix work (dfa__mask_pair_work's diag_prefix). */
#define DFA__DIAG_SAMPLES 64
/* The tile of the masked plans' cost model (src/common/mask.h, tile cost): the Hopper kernels'
   128-row query and key blocks (the CPU's are 48-96: the model only ranks the ranks' loads). */
#define DFA__PLAN_TILE 128

/* The key rows [*k0, *k1) that a pair off the diagonal reads, from the keys its rows see
   [lo, hi): widened to whole tiles of DFA__PLAN_TILE keys, within the chunk's n. */
static inline void dfa__plan_key_window(int lo, int hi, int n, int *k0, int *k1) {
    const int end = (hi + DFA__PLAN_TILE - 1) / DFA__PLAN_TILE * DFA__PLAN_TILE;
    *k0 = lo / DFA__PLAN_TILE * DFA__PLAN_TILE;
    *k1 = end < n ? end : n;
}

/* Builds the plan of schedule s (kind, P, causal, rows; s->plan ignored) for the pair work
   matrix (in: dfa__mask_pair_work's counts) and, if not NULL, the pairs' visible query rows (tasks off the diagonal cover only
   those); 0 on success, -1 on allocation failure. Free with dfa__sched_plan_free.
   The ranks are balanced on cost (the pairs' tile cost, dfa__mask_pair_work, plus fold_cost a
   row for the partial results that land on each rank) when not NULL, else on the visible
   pairs; tasks carry their visible pairs either way.
   Busy diagonals: with one long document the pairs off the diagonal cannot even the ranks out
   (the diagonal is most of a rank's work). With diag_prefix (causal BALANCED / PAPER plans;
   [P][2][DFA__DIAG_SAMPLES + 1], dfa__mask_pair_work), the busiest rank's diagonal may lend its
   first x rows (x = a sample row, at most lend_rows_max) to the least busy rank: that task reads keys
   [0, x) only (causal: all those rows see), so it moves x rows of k and v in and, backward,
   x rows of dk and dv out instead of whole chunks. The owner keeps rows [x, n) at step 0. With
   split_pairs it may then lend further *bands*, rows [x, x') against keys [0, x') (a later
   sample row x'), each to the least busy rank of its move and within the bytes of one chunk's
   message (piece below); without, one band at most. (The executor lends only under documents: a
   window alone leaves the diagonals alike.)
   Split pairs (helpers): a pair off the diagonal that one long document straddles can outweigh
   every other rank's work (at P = 8 on 128k tokens: a document over all of chunk 4 and most of
   chunk 5 makes the pair (5, 4) 0.22 of 0.83 G visible pairs), and placed whole it runs on its
   query owner or its key owner. With split_pairs, a busiest rank's pair may hand its last query
   rows [s, r1), or its last keys [s, k1) (s on a DFA__PLAN_TILE row; one or the other per pair)
   to the least busy rank, a *helper*, which gets the piece's rows from the query owner and its
   keys from the key owner in the same step, and sends a partial result back to each: the owner
   of the side that was cut folds one more (two dk, dv for the same keys, or two o, lse / dq for
   the same rows). Only *dense* pairs split: every visible row sees every visible key (work =
   rows x keys: a document straddling the chunks, one batch row), so a piece's visible pairs are
   its rows times its visible keys, exactly. (The helper may also be the pair's other owner: then
   the piece needs one input, as a whole pair does.) A piece or band on a third rank takes both
   inputs and sends both results in one step, as lent rows do, so it must fit one whole-chunk
   message's bytes, which bound a masked step's buffers (dfa__dist_workspace_bytes): for each
   pass's inputs and results, rows x q + key_rows x k <= n x cap (bytes per row;
   dfa__piece_bytes_of). So a pair of whole chunks (every row sees every key) cannot be split.
   Lending and splitting alternate, whichever lowers the busiest load of all ranks more, while one
   lowers it by 2% or more (at most 2 P moves); the greedy is myopic, so the plan is also built as
   before split pairs (one band, no piece) and that one is kept when its busiest load is no higher. */
typedef struct {
    int64_t q[3], k[3], cap[3]; /* forward inputs, backward inputs, backward results (the forward's
                                   results are query rows only: a piece's are within a chunk's) */
} dfa__piece_bytes;

typedef struct {
    const int64_t *work;        /* [P][P] visible pairs (required) */
    const int *rows;            /* [P][P][2] their visible query rows, or NULL */
    const int *keys;            /* [P][P][2] their visible key rows (with rows), or NULL: pairs off the
                                   diagonal then read and move only those keys */
    const int64_t *cost;        /* [P][P] their tile cost, or NULL */
    const int64_t *diag_prefix; /* [P][2][DFA__DIAG_SAMPLES + 1], or NULL */
    int fold_cost;              /* with cost: DFA__PLAN_FOLD_COST (tests: less), else 0 */
    int lend_rows_max;          /* the most rows a diagonal lends (0: n / 2). The executor gives as many
                                   as keep the lent block's two inputs, and its two results, within
                                   one whole-chunk message's bytes (its workspace bound assumes it) */
    int split_pairs;            /* 1: pairs off the diagonal may be split over ranks (above; needs rows and
                                   keys) and a diagonal may lend more than one band; 0: one band at most */
    dfa__piece_bytes piece;     /* with split_pairs: what bounds a piece (all 0: nothing, the plans' tests) */
} dfa__plan_counts;

int dfa__sched_plan_build(const dfa__sched *s, const dfa__plan_counts *in, dfa__sched_plan *out);

/* lend_rows_max for per-rank descriptor d: the lent block takes x query rows and x key rows at
   once and sends back both results, so each sum must stay within one whole chunk's largest
   input and largest result, by which dfa__dist_workspace_bytes bounds a masked step, in both
   passes: half a chunk when query and key/value rows weigh the same, up to two thirds. */
int dfa__lend_rows(const dfa_attn_desc *d);
/* The per-row bytes of a piece of a split pair for per-rank descriptor d (dfa__piece_bytes). */
dfa__piece_bytes dfa__piece_bytes_of(const dfa_attn_desc *d);
/* 1 if a piece of `rows` query rows reading `key_rows` keys fits b's bounds for chunks of n rows. */
int dfa__piece_fits(const dfa__piece_bytes *b, int rows, int key_rows, int n);
void dfa__sched_plan_free(dfa__sched_plan *p);
/* 1 if task t of plan p (chunks of n rows) is a piece of a split pair: off the diagonal, fewer
   query rows than the pair's visible ones or fewer keys than its key window. */
int dfa__task_is_piece(const dfa__sched_plan *p, const dfa__task *t, int n);

/* The work matrix of a masked call: rank r's chunk is rows [r n, (r + 1) n) of the global
   sequence; d is the per-rank descriptor (seqlen_q = seqlen_k = n, causal, flags, window;
   positions and d's own document pointers are ignored); ids (NULL without documents) holds
   every rank's document ids, [P][batch][n]. Fills work[P * P] and, if not NULL, rows[P * P * 2]
   (the visible query rows of each pair, as in dfa__sched_plan). Pairs that chunk-level bounds
   (causal, window distance, the chunks' first and last ids) rule out cost nothing; the others
   are counted row by row. With keys (not NULL, [P][P][2]), also the key rows of chunk k some row
   of chunk q sees, as rows for query rows. With cost (not NULL, [P][P]), also each pair's tile cost (tiles of
   DFA__PLAN_TILE). With diag_prefix (not NULL, causal d only), also each diagonal's work below
   its sample rows x_j = j n / DFA__DIAG_SAMPLES: diag_prefix[(2 r) S1 + j] the visible pairs of
   rows [0, x_j) of chunk r against its keys [0, x_j), diag_prefix[(2 r + 1) S1 + j] their tile
   cost (S1 = DFA__DIAG_SAMPLES + 1). */
void dfa__mask_pair_work(const dfa_attn_desc *d, int P, const int32_t *ids, int64_t *work, int *rows, int *keys,
                         int64_t *cost, int64_t *diag_prefix);

/* A masked call's chunk-pair counts for P ranks, as dfa__mask_pair_work fills them: the
   executor's, for its plan, and the communicator's copy of the last call's (exec_mask.c). */
typedef struct {
    int64_t *work;   /* [P][P] visible pairs per chunk pair */
    int *rows;       /* [P][P][2] their visible query rows */
    int *keys;       /* [P][P][2] their visible key rows */
    int64_t *cost;   /* [P][P] their tile cost (what the plan balances) */
    int64_t *prefix; /* [P][2][DFA__DIAG_SAMPLES + 1] the diagonals' prefix work, or NULL (no lending) */
} dfa__pair_counts;

/* 1 when the masked plans of per-rank descriptor d may lend diagonal rows and split pairs
   (documents, causal, one batch row: the rows, keys and ids they read are then contiguous
   prefixes of a chunk's; not the ring). (a window alone leaves the diagonals alike) */
int dfa__plan_lends(const dfa_attn_desc *d, dfa__sched_kind kind);

/* The plan's inputs as the executor builds them for per-rank descriptor d (documents: q_doc
   non-NULL; it is not read) from counts m (dfa__mask_pair_work's; m->prefix where
   dfa__plan_lends), with fold_cost a row and split_mode as dfa__dist_set_split_pairs's on (1 the
   library's plan, 0 the plan before split pairs, 2 split pairs without lending). The result points
   into m. */
dfa__plan_counts dfa__plan_inputs(const dfa_attn_desc *d, const dfa__pair_counts *m, dfa__sched_kind kind, int fold_cost,
                                  int split_mode);

/* Allocates m's arrays for P ranks, prefix only if with_prefix: 0, or -1 with m all NULL. */
int dfa__pair_counts_alloc(dfa__pair_counts *m, int P, int with_prefix);
/* Copies src's counts into dst (both allocated for P ranks; prefix copied when both have one). */
void dfa__pair_counts_copy(dfa__pair_counts *dst, const dfa__pair_counts *src, int P);
/* Frees m's arrays and leaves them NULL (m may be all NULL). */
void dfa__pair_counts_free(dfa__pair_counts *m);

#endif
