/* Bad input to the distributed calls under mpirun: a descriptor that differs across ranks,
 * a NULL pointer or a bad size on one rank, bad values everywhere. Every rank must return
 * the same error status (never hang, never crash), with a message that names the argument
 * (or the failing rank and its reason), and leave its outputs untouched. Afterwards a valid
 * call still works, gives the same bits twice, and the same bits with overlap on and off. */
#include <math.h>
#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "common/error.h"
#include "seqpar/comm.h"
#include "distflash_mpi.h"

static int rank, nranks;

enum { B = 1, N = 8, H = 2, HKV = 1, D = 16 };

typedef struct {
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} bufs;

/* Sized for up to 2N rows and 2H heads so that a rank with a larger descriptor still
   passes valid buffers (the point is the mismatch, not an overrun). */
static const int64_t CAP = (int64_t)B * 2 * N * 2 * H * D;

static void make(bufs *b) {
    float **all[] = {&b->q, &b->k, &b->v, &b->o, &b->lse, &b->dout, &b->dq, &b->dk, &b->dv};
    for (int i = 0; i < 9; i++) {
        *all[i] = tl_alloc(DFA_F32, CAP);
        tl_fill_normal(DFA_F32, *all[i], CAP, 1.0);
    }
    for (int64_t i = 0; i < CAP; i++) b->lse[i] = 2.0f; /* a plausible lse */
}

static void release(bufs *b) {
    free(b->q); free(b->k); free(b->v); free(b->o); free(b->lse); free(b->dout); free(b->dq); free(b->dk); free(b->dv);
}

static dfa_dist_desc good_desc(void) {
    dfa_dist_desc d = {0};
    d.attn = tl_desc(B, N, N, H, HKV, D, DFA_F32, 1, 0, 0);
    d.schedule = DFA_SCHEDULE_BALANCED;
    d.overlap = 1;
    return d;
}

static int poisoned(const void *p) {
    const unsigned char *c = p;
    for (int64_t i = 0; i < CAP * 4; i++)
        if (c[i] != 0xff) return 0;
    return 1;
}

/* One failing call on every rank: fwd (or bwd) with this rank's descriptor/buffers; every
   rank must return `want`; the message must contain `text` (on every rank) and outputs stay
   poisoned. */
static void expect_fail(dfa_comm *c, const char *name, int bwd, const dfa_dist_desc *d, bufs *b, dfa_status want,
                        const char *text) {
    tl_poison(b->o, (size_t)CAP * 4);
    tl_poison(b->dq, (size_t)CAP * 4);
    tl_poison(b->dk, (size_t)CAP * 4);
    tl_poison(b->dv, (size_t)CAP * 4);
    float *lse_out = malloc(sizeof(float) * (size_t)CAP);
    tl_poison(lse_out, (size_t)CAP * 4);
    dfa_status st = bwd ? dfa_dist_attn_bwd(c, d, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv)
                        : dfa_dist_attn_fwd(c, d, b->q, b->k, b->v, b->o, lse_out);
    const char *msg = dfa_last_error();
    CHECK(st == want, "rank %d: %s: status %s, want %s (%s)", rank, name, dfa_status_string(st),
          dfa_status_string(want), msg);
    CHECK(strstr(msg, text) != NULL, "rank %d: %s: message \"%s\" does not mention \"%s\"", rank, name, msg, text);
    CHECK(strncmp(msg, bwd ? "dfa_dist_attn_bwd: " : "dfa_dist_attn_fwd: ", 19) == 0,
          "rank %d: %s: message \"%s\" does not name the call", rank, name, msg);
    if (bwd) {
        CHECK(b->dq && poisoned(b->dq) && poisoned(b->dk) && poisoned(b->dv), "rank %d: %s: gradients touched", rank,
              name);
    } else {
        CHECK(poisoned(b->o) && poisoned(lse_out), "rank %d: %s: outputs touched", rank, name);
    }
    free(lse_out);
    /* everyone is still in step: a barrier would hang here otherwise */
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_mismatch(dfa_comm *c, bufs *b) {
    if (nranks < 2) return; /* nothing can differ */
    const int last = nranks - 1;
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = good_desc();
        if (rank == last) d.attn.seqlen_q = d.attn.seqlen_k = N + 1;
        expect_fail(c, "seqlen differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.seqlen_q is 8 on some ranks and 9");
        d = good_desc();
        if (rank == 0) d.attn.softmax_scale = 0.5f;
        expect_fail(c, "scale differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "softmax_scale");
        d = good_desc();
        if (rank == 0) d.schedule = DFA_SCHEDULE_RING;
        expect_fail(c, "schedule differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->schedule");
        d = good_desc();
        if (rank == last) d.overlap = 0;
        expect_fail(c, "overlap differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->overlap");
        d = good_desc();
        if (rank == last) d.attn.dtype = DFA_BF16;
        expect_fail(c, "dtype differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.dtype");
        d = good_desc();
        if (rank == 0) d.attn.causal = 0;
        expect_fail(c, "causal differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.causal");
        d = good_desc();
        if (rank == last) d.attn.num_heads = 2 * H;
        expect_fail(c, "heads differ", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.num_heads");
        d = good_desc();
        if (rank == 0) d.attn.num_kv_heads = H;
        expect_fail(c, "kv heads differ", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.num_kv_heads");
        d = good_desc();
        if (rank == 0) d.attn.batch = 2;
        expect_fail(c, "batch differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.batch");
        /* q_start/k_start are ignored by contract: differing offsets are fine */
        d = good_desc();
        d.attn.q_start = rank * 1000;
        dfa_status st = bwd ? dfa_dist_attn_bwd(c, &d, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv)
                            : dfa_dist_attn_fwd(c, &d, b->q, b->k, b->v, b->o, b->lse);
        CHECK(st == DFA_OK, "rank %d: differing q_start refused: %s", rank, dfa_last_error());
    }
}

/* A bad argument on one rank: that rank names it, the others name the rank and its reason. */
static void test_one_rank_bad(dfa_comm *c, bufs *b) {
    const int bad = nranks - 1;
    char who[64];
    snprintf(who, sizeof who, "rank %d failed", bad);
    const int other = rank != bad;
    dfa_dist_desc d = good_desc();
    float *keep;

    keep = b->q;
    if (rank == bad) b->q = NULL;
    expect_fail(c, "q NULL on one rank", 0, &d, b, DFA_ERR_INVALID_ARGUMENT, other ? who : "q is NULL");
    expect_fail(c, "q NULL on one rank (bwd)", 1, &d, b, DFA_ERR_INVALID_ARGUMENT, "q is NULL");
    b->q = keep;

    keep = b->dk;
    if (rank == bad) b->dk = NULL;
    tl_poison(b->dq, (size_t)CAP * 4);
    dfa_status st = dfa_dist_attn_bwd(c, &d, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "dk is NULL"), "rank %d: dk NULL: %s (%s)",
          rank, dfa_status_string(st), dfa_last_error());
    CHECK(poisoned(b->dq), "rank %d: dk NULL: dq touched", rank);
    b->dk = keep;
    MPI_Barrier(MPI_COMM_WORLD);

    keep = b->lse;
    if (rank == 0) b->lse = NULL;
    expect_fail(c, "lse NULL in bwd", 1, &d, b, DFA_ERR_INVALID_ARGUMENT, "lse is NULL");
    b->lse = keep;

    /* the descriptor itself NULL on one rank */
    if (rank == bad) {
        expect_fail(c, "d NULL", 0, NULL, b, DFA_ERR_INVALID_ARGUMENT, "d (the descriptor) is NULL");
    } else {
        expect_fail(c, "d NULL elsewhere", 0, &d, b, DFA_ERR_INVALID_ARGUMENT, who);
    }

    /* a bad size on one rank: its check names it; the rest learn which rank failed */
    dfa_dist_desc e = good_desc();
    if (rank == bad) e.attn.batch = 0;
    expect_fail(c, "batch 0 on one rank", 0, &e, b, DFA_ERR_INVALID_ARGUMENT, "batch");
    e = good_desc();
    if (rank == bad) e.attn.head_dim = 12;
    expect_fail(c, "head_dim 12 on one rank", 1, &e, b, DFA_ERR_UNSUPPORTED, "head_dim");

    /* an output overlapping an input on one rank */
    if (rank == bad) {
        tl_poison(b->k, (size_t)CAP * 4); /* o == k: any write would show */
        dfa_status s2 = dfa_dist_attn_fwd(c, &d, b->q, b->k, b->v, b->k, NULL);
        CHECK(s2 == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "overlap"), "rank %d: o == k: %s (%s)", rank,
              dfa_status_string(s2), dfa_last_error());
        CHECK(poisoned(b->k), "rank %d: o == k: k written", rank);
        tl_fill_normal(DFA_F32, b->k, CAP, 1.0);
        MPI_Barrier(MPI_COMM_WORLD); /* the one inside the others' expect_fail */
    } else {
        expect_fail(c, "overlap elsewhere", 0, &d, b, DFA_ERR_INVALID_ARGUMENT, who);
    }
}

/* Masks (documents, window): differing fields across ranks, bad ids on one rank, k_doc that
   is not q_doc, a bad window everywhere; each fails every rank with the right status. */
static void test_masks(dfa_comm *c, bufs *b) {
    int32_t ids[B * N], bad_ids[B * N], copy[B * N];
    for (int i = 0; i < B * N; i++) ids[i] = rank * 10 + i / 3, bad_ids[i] = copy[i] = ids[i];
    bad_ids[5] = -100;
    char who[64];
    snprintf(who, sizeof who, "rank %d failed", nranks - 1);
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = good_desc();
        d.attn.flags = DFA_FLAG_WINDOW;
        d.attn.window_left = rank == nranks - 1 && nranks > 1 ? 3 : 2;
        if (nranks > 1)
            expect_fail(c, "window differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.window_left is 2 on some ranks and 3");
        d = good_desc();
        d.attn.q_doc = d.attn.k_doc = rank == 0 && nranks > 1 ? NULL : ids;
        if (nranks > 1) expect_fail(c, "documents on some ranks", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.q_doc");
        d = good_desc();
        d.attn.q_doc = d.attn.k_doc = rank == nranks - 1 ? bad_ids : ids;
        expect_fail(c, "decreasing ids on one rank", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT,
                    rank == nranks - 1 ? "d->q_doc decreases" : who);
        d = good_desc();
        d.attn.q_doc = ids;
        d.attn.k_doc = copy; /* the same ids, another pointer */
        expect_fail(c, "k_doc not q_doc", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.k_doc differs");
        d = good_desc();
        d.attn.flags = DFA_FLAG_WINDOW;
        d.attn.window_right = -3;
        expect_fail(c, "window_right -3", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "window_right");
        d = good_desc();
        d.attn.flags = DFA_FLAG_SAME_DOCS; /* a promise about ids there are none of */
        expect_fail(c, "DFA_FLAG_SAME_DOCS without ids", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "DFA_FLAG_SAME_DOCS");
        d = good_desc();
        d.attn.q_doc = d.attn.k_doc = ids;
        d.attn.flags = rank == 0 && nranks > 1 ? DFA_FLAG_SAME_DOCS : 0;
        if (nranks > 1)
            expect_fail(c, "DFA_FLAG_SAME_DOCS on one rank", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.flags");
    }
    /* and a valid masked call goes through on every rank */
    dfa_dist_desc d = good_desc();
    d.attn.q_doc = d.attn.k_doc = ids;
    d.attn.flags = DFA_FLAG_WINDOW;
    d.attn.window_left = 4;
    CHECK(dfa_dist_attn_fwd(c, &d, b->q, b->k, b->v, b->o, b->lse) == DFA_OK, "rank %d: masked fwd: %s", rank,
          dfa_last_error());
}

/* The version-3 fields: bad values refused on every rank, naming the field (a non-finite sink on
   one rank, checked on the host; dsinks without sinks; a negative softcap; a value head dim that
   is not a multiple of 8), and the fields differing across ranks. */
static void test_v3_errors(dfa_comm *c, bufs *b) {
    float sinks[2 * H], dsinks[2 * H];
    for (int h = 0; h < 2 * H; h++) sinks[h] = 0.25f * (float)h - 0.5f;
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = good_desc();
        float bad[2 * H];
        memcpy(bad, sinks, sizeof bad);
        if (rank == nranks - 1) bad[1] = NAN;
        d.attn.sinks = bad;
        expect_fail(c, "a NaN sink on one rank", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "sinks[1]");
        d = good_desc();
        d.attn.dsinks = dsinks;
        expect_fail(c, "dsinks without sinks", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "dsinks");
        d = good_desc();
        d.attn.softcap = -1.0f;
        expect_fail(c, "negative softcap", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "softcap");
        d = good_desc();
        d.attn.head_dim_v = 12;
        expect_fail(c, "head_dim_v 12", bwd, &d, b, DFA_ERR_UNSUPPORTED, "head_dim_v");
        if (nranks < 2) continue; /* nothing can differ */
        d = good_desc();
        if (rank == 0) d.attn.softcap = 30.0f;
        expect_fail(c, "softcap differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.softcap");
        d = good_desc();
        if (rank == 0) d.attn.head_dim_v = 2 * D;
        expect_fail(c, "head_dim_v differs", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.head_dim_v");
        d = good_desc();
        if (rank == 0) d.attn.sinks = sinks;
        expect_fail(c, "sinks on one rank", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.sinks");
    }
}

/* The same bad value everywhere. */
static void test_bad_everywhere(dfa_comm *c, bufs *b) {
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = good_desc();
        d.attn.head_dim = 12;
        expect_fail(c, "head_dim 12", bwd, &d, b, DFA_ERR_UNSUPPORTED, "head_dim");
        d = good_desc();
        d.attn.seqlen_k = N - 1;
        expect_fail(c, "seqlen_q != seqlen_k", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "seqlen_k");
        d = good_desc();
        d.schedule = (dfa_schedule)7;
        expect_fail(c, "schedule 7", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->schedule = 7");
        d = good_desc();
        d.schedule = (dfa_schedule)100; /* the internal paper kind is not public */
        expect_fail(c, "schedule 100", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->schedule = 100");
        d = good_desc();
        d.overlap = 2;
        expect_fail(c, "overlap 2", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->overlap");
        d = good_desc();
        d.attn.num_heads = 3;
        d.attn.num_kv_heads = 2;
        expect_fail(c, "heads not a multiple", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "num_heads");
        d = good_desc();
        d.attn.softmax_scale = -1.0f;
        expect_fail(c, "negative scale", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "softmax_scale");
        d = good_desc();
        d.attn.dtype = (dfa_dtype)9;
        expect_fail(c, "dtype 9", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "dtype");
    }
    /* no communicator: a local error on each rank */
    dfa_dist_desc d = good_desc();
    dfa_status st = dfa_dist_attn_fwd(NULL, &d, b->q, b->k, b->v, b->o, b->lse);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "communicator"), "c NULL: %s", dfa_last_error());
    st = dfa_dist_attn_bwd(NULL, &d, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "communicator"), "c NULL: %s", dfa_last_error());
}

static void test_create(void) {
    dfa_status st = dfa_comm_create_mpi(MPI_COMM_WORLD, NULL);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "out"), "create(out NULL): %s", dfa_last_error());
    dfa_comm *c = (dfa_comm *)&st; /* must stay untouched */
    st = dfa_comm_create_mpi(MPI_COMM_NULL, &c);
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "MPI_COMM_NULL"), "create(MPI_COMM_NULL): %s",
          dfa_last_error());
    CHECK(c == (dfa_comm *)&st, "create(MPI_COMM_NULL) wrote *out");
    /* a sub-communicator works and is independent of the world one */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    dfa_comm *h = NULL;
    st = dfa_comm_create_mpi(half, &h);
    CHECK(st == DFA_OK && dfa_comm_size(h) == (nranks + 1 - rank % 2) / 2 && dfa_comm_rank(h) == rank / 2,
          "create(split): %s, size %d rank %d", dfa_last_error(), dfa_comm_size(h), dfa_comm_rank(h));
    dfa_comm_destroy(h);
    MPI_Comm_free(&half);
}

/* Descriptors that can grow (distflash.h), through the distributed calls. On a communicator
   of one rank (MPI_COMM_SELF, every rank on its own): the accepted forms give the same bits
   as good_desc(); a bad header, a descriptor larger than this library's (a newer header whose
   descriptor grew) or non-zero unknown bytes are refused, naming the field or the bytes.
   Larger descriptors live in buffers of exactly their size (AddressSanitizer sees any read
   past struct_size). Then a bad header on one rank of the world communicator. */
static unsigned char *dist_bytes(uint32_t size, uint32_t attn_size) {
    const dfa_dist_desc g = good_desc();
    dfa_dist_desc d = dfa_dist_desc_init(B, N, H, HKV, D);
    d.attn = g.attn;
    d.struct_size = size;
    d.attn.struct_size = attn_size;
    unsigned char *p = calloc(1, size);
    memcpy(p, &d, offsetof(dfa_dist_desc, attn) + sizeof d.attn);
    const size_t at = offsetof(dfa_dist_desc, attn) + attn_size; /* schedule, overlap after the caller's attn */
    memcpy(p + at, &g.schedule, sizeof g.schedule);
    memcpy(p + at + sizeof g.schedule, &g.overlap, sizeof g.overlap);
    return p;
}

static void test_versioning(bufs *b) {
    dfa_comm *self = NULL;
    CHECK(dfa_comm_create_mpi(MPI_COMM_SELF, &self) == DFA_OK, "create(MPI_COMM_SELF): %s", dfa_last_error());
    const size_t qb = sizeof(float) * B * N * H * D, lb = sizeof(float) * B * H * N;
    float *o_ref = tl_alloc(DFA_F32, CAP), *lse_ref = tl_alloc(DFA_F32, CAP);
    float *o = tl_alloc(DFA_F32, CAP), *lse = tl_alloc(DFA_F32, CAP);
    const dfa_dist_desc g = good_desc();
    CHECK(dfa_dist_attn_fwd(self, &g, b->q, b->k, b->v, o_ref, lse_ref) == DFA_OK, "rank %d: reference: %s", rank,
          dfa_last_error());

    dfa_dist_desc zero = {0}; /* zero-initialised, fields set one by one */
    zero.attn.batch = B, zero.attn.seqlen_q = zero.attn.seqlen_k = N, zero.attn.num_heads = H;
    zero.attn.num_kv_heads = HKV, zero.attn.head_dim = D, zero.attn.causal = 1, zero.overlap = 1;
    dfa_dist_desc init = dfa_dist_desc_init(B, N, H, HKV, D);
    init.attn.causal = 1, init.overlap = 1;
    unsigned char *bytes = dist_bytes(DFA_DIST_DESC_SIZE_V1, DFA_ATTN_DESC_SIZE_V1); /* built byte by byte */
    unsigned char *bigger = dist_bytes(256, DFA_ATTN_DESC_SIZE_V1); /* a newer header whose descriptor grew */
    unsigned char *bigger_attn = dist_bytes(DFA_DIST_DESC_SIZE_V1 + 16, 152); /* ... and its attn too */
    const struct { const void *d; const char *what; } ok[] = {
        {&zero, "zero-initialised"}, {&init, "dfa_dist_desc_init"}, {bytes, "byte-built"}};
    for (int i = 0; i < 3; i++) {
        tl_poison(o, (size_t)CAP * 4);
        dfa_status st = dfa_dist_attn_fwd(self, ok[i].d, b->q, b->k, b->v, o, lse);
        CHECK(st == DFA_OK && !memcmp(o, o_ref, qb) && !memcmp(lse, lse_ref, lb), "rank %d: %s: %s, or other bits (%s)",
              rank, ok[i].what, dfa_status_string(st), dfa_last_error());
        st = dfa_dist_attn_bwd(self, ok[i].d, b->q, b->k, b->v, o_ref, lse_ref, b->dout, b->dq, b->dk, b->dv);
        CHECK(st == DFA_OK, "rank %d: %s: backward %s (%s)", rank, ok[i].what, dfa_status_string(st), dfa_last_error());
    }

    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = init;
        d.struct_size = 7;
        expect_fail(self, "struct_size 7", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->struct_size = 7");
        d = init;
        d.struct_size = 0xdeadbeefu;
        expect_fail(self, "struct_size garbage", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->struct_size");
        d = init;
        d.attn.struct_size = 40;
        expect_fail(self, "attn.struct_size 40", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.struct_size = 40");
        d = init;
        d.magic = 0x1234;
        expect_fail(self, "magic", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->magic");
        d = zero;
        d.attn.magic = DFA_DESC_MAGIC; /* with attn.struct_size 0 */
        expect_fail(self, "attn.magic", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->attn.magic");
        d = init;
        d.reserved_header = 1;
        expect_fail(self, "reserved_header", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT, "d->reserved_header");
        d = init;
        d.reserved[0] = 1;
        expect_fail(self, "reserved", bwd, &d, b, DFA_ERR_UNSUPPORTED, "(d->reserved)");
        d = zero;
        d.attn.reserved[1] = 1; /* the last reserved word (reserved[7] in version 1) */
        expect_fail(self, "attn.reserved", bwd, &d, b, DFA_ERR_UNSUPPORTED, "(d->attn.reserved)");
        expect_fail(self, "struct_size 256", bwd, (const dfa_dist_desc *)(void *)bigger, b, DFA_ERR_UNSUPPORTED,
                    "d->struct_size = 256 is larger");
        expect_fail(self, "struct_size 208", bwd, (const dfa_dist_desc *)(void *)bigger_attn, b,
                    DFA_ERR_UNSUPPORTED, "d->struct_size = 208 is larger");
        memcpy(bigger_attn, &init, 16); /* the outer header at this library's size: the attn's is refused */
        expect_fail(self, "attn.struct_size 152 inside", bwd, (const dfa_dist_desc *)(void *)bigger_attn, b,
                    DFA_ERR_UNSUPPORTED, "d->attn.struct_size = 152 is larger");
        ((dfa_dist_desc *)(void *)bigger_attn)->struct_size = DFA_DIST_DESC_SIZE_V1 + 16; /* as before */
        expect_fail(self, "d NULL", bwd, NULL, b, DFA_ERR_INVALID_ARGUMENT, "d (the descriptor) is NULL");
    }
    free(bytes);
    free(bigger);
    free(bigger_attn);
    free(o_ref), free(lse_ref), free(o), free(lse);
    dfa_comm_destroy(self);
}

/* A bad header on one rank of a larger communicator: that rank names it, the others the rank. */
static void test_versioning_one_rank(dfa_comm *c, bufs *b) {
    const int bad = nranks - 1;
    char who[64];
    snprintf(who, sizeof who, "rank %d failed", bad);
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa_dist_desc d = good_desc();
        if (rank == bad) d.attn.struct_size = 12;
        expect_fail(c, "attn.struct_size on one rank", bwd, &d, b, DFA_ERR_INVALID_ARGUMENT,
                    rank == bad || nranks == 1 ? "d->attn.struct_size = 12" : who);
        d = good_desc();
        if (rank == bad) d.reserved[1] = 3;
        expect_fail(c, "reserved on one rank", bwd, &d, b, DFA_ERR_UNSUPPORTED,
                    rank == bad || nranks == 1 ? "(d->reserved)" : who);
    }
    /* the header itself is not compared across ranks: zero-initialised here, initialised there */
    dfa_dist_desc d = good_desc();
    if (rank % 2) d.struct_size = DFA_DIST_DESC_SIZE_V1, d.magic = DFA_DESC_MAGIC, d.version = DFA_DESC_VERSION;
    CHECK(dfa_dist_attn_fwd(c, &d, b->q, b->k, b->v, b->o, b->lse) == DFA_OK, "rank %d: mixed headers refused: %s",
          rank, dfa_last_error());
}

/* A block that fails in the middle of the protocol (injected through the communicator's
   compute table on the last rank): that rank stops computing but keeps exchanging messages,
   and every rank returns its status after the closing agreement, outputs untouched. */
static dfa__compute_ops failing_ops;
static int blocks_before_failure;

static dfa_status failing_fwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              float *o, float *lse, const dfa__direct *direct) {
    if (blocks_before_failure-- <= 0) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "test", "injected failure");
    return dfa__compute_cpu()->fwd(ctx, d, q, k, v, o, lse, direct);
}

static dfa_status failing_bwd(void *ctx, const dfa_attn_desc *d, const void *q, const void *k, const void *v,
                              const void *o, const float *lse, const void *dout, float *dq, float *dk, float *dv,
                              const dfa__direct *direct) {
    if (blocks_before_failure-- <= 0) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, "test", "injected failure");
    return dfa__compute_cpu()->bwd(ctx, d, q, k, v, o, lse, dout, dq, dk, dv, direct);
}

static void test_failure_midway(dfa_comm *c, bufs *b) {
    const int bad = nranks - 1;
    failing_ops = *dfa__compute_cpu();
    failing_ops.fwd = failing_fwd;
    failing_ops.bwd = failing_bwd;
    const dfa__compute_ops *keep = c->compute;
    for (int bwd = 0; bwd <= 1; bwd++)
        for (int sched = 0; sched <= 1; sched++) {
            if (rank == bad) c->compute = &failing_ops;
            blocks_before_failure = nranks > 1 ? 1 : 0; /* fail the second block (the first with one rank) */
            dfa_dist_desc d = good_desc();
            d.schedule = sched ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
            expect_fail(c, "failure midway", bwd, &d, b, DFA_ERR_OUT_OF_MEMORY, "injected failure");
            c->compute = keep;
        }
}

/* After all the failures, a valid call works; the same bits twice and with overlap off. */
static void test_recovers(dfa_comm *c, bufs *b) {
    for (int bwd = 0; bwd <= 1; bwd++) {
        float *out[2][3];
        for (int rep = 0; rep < 2; rep++) {
            dfa_dist_desc d = good_desc();
            d.overlap = rep == 0;
            for (int i = 0; i < 3; i++) out[rep][i] = tl_alloc(DFA_F32, CAP);
            dfa_status st = bwd ? dfa_dist_attn_bwd(c, &d, b->q, b->k, b->v, b->o, b->lse, b->dout, out[rep][0],
                                                    out[rep][1], out[rep][2])
                                : dfa_dist_attn_fwd(c, &d, b->q, b->k, b->v, out[rep][0], out[rep][1]);
            CHECK(st == DFA_OK, "rank %d: valid call after errors failed: %s", rank, dfa_last_error());
        }
        const size_t qb = sizeof(float) * B * N * H * D, kb = sizeof(float) * B * N * HKV * D;
        const size_t lb = sizeof(float) * B * H * N;
        CHECK(!memcmp(out[0][0], out[1][0], qb) && !memcmp(out[0][1], out[1][1], bwd ? kb : lb) &&
                  (!bwd || !memcmp(out[0][2], out[1][2], kb)),
              "rank %d: %s differs between overlap on and off", rank, bwd ? "bwd" : "fwd");
        if (!bwd) memcpy(b->o, out[0][0], qb), memcpy(b->lse, out[0][1], lb); /* a consistent o/lse for bwd */
        for (int rep = 0; rep < 2; rep++)
            for (int i = 0; i < 3; i++) free(out[rep][i]);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    tl_init("test_dist_errors");
    dfa_comm *c = NULL;
    CHECK(dfa_comm_create_mpi(MPI_COMM_WORLD, &c) == DFA_OK, "create: %s", dfa_last_error());
    bufs b;
    make(&b);
    test_create();
    test_mismatch(c, &b);
    test_one_rank_bad(c, &b);
    test_bad_everywhere(c, &b);
    test_masks(c, &b);
    test_v3_errors(c, &b);
    test_versioning(&b);
    test_versioning_one_rank(c, &b);
    test_failure_midway(c, &b);
    test_recovers(c, &b);
    release(&b);
    dfa_comm_destroy(c);
    int fails = tl_failures, all = 0;
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const int rc = tl_finish("test_dist_errors");
    MPI_Finalize();
    return rc || all ? 1 : 0;
}
