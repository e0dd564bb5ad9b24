/* Every bad input to the CPU entry points: the call fails with the right
 * status, the message names the argument, and no output is touched. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

enum { B = 2, SQ = 5, SK = 7, H = 4, HKV = 2, D = 16 };
enum { NQ = B * SQ * H * D, NK = B * SK * HKV * D, NL = B * H * SQ };

/* Inputs, outputs and untouched-copies of the outputs. */
static float q[NQ], k[NK], v[NK], o[NQ], dout[NQ], dq[NQ], dk[NK], dv[NK], lse[NL], lse2[NL], o2[NQ];
static float snap_o[NQ], snap_dq[NQ], snap_dk[NK], snap_dv[NK], snap_lse[NL];
static float dsk[H], snap_dsk[H]; /* the descriptor's dsinks, an output too */

static dfa_attn_desc good(void) { return tl_desc(B, SQ, SK, H, HKV, D, DFA_F32, 1, 2, 0); }

static void snapshot(void) {
    for (int i = 0; i < NQ; i++) o[i] = dq[i] = (float)tl_rand_normal();
    for (int i = 0; i < NK; i++) dk[i] = dv[i] = (float)tl_rand_normal();
    for (int i = 0; i < NL; i++) lse[i] = (float)tl_rand_normal();
    for (int i = 0; i < H; i++) dsk[i] = (float)tl_rand_normal();
    memcpy(snap_dsk, dsk, sizeof dsk);
    memcpy(snap_o, o, sizeof o);
    memcpy(snap_dq, dq, sizeof dq);
    memcpy(snap_dk, dk, sizeof dk);
    memcpy(snap_dv, dv, sizeof dv);
    memcpy(snap_lse, lse, sizeof lse);
}

static int untouched(void) {
    return !memcmp(o, snap_o, sizeof o) && !memcmp(dq, snap_dq, sizeof dq) && !memcmp(dk, snap_dk, sizeof dk) &&
           !memcmp(dv, snap_dv, sizeof dv) && !memcmp(lse, snap_lse, sizeof lse) && !memcmp(dsk, snap_dsk, sizeof dsk);
}

#define EXPECT(call, status, word)                                                                         \
    do {                                                                                                   \
        snapshot();                                                                                        \
        dfa_status s_ = (call);                                                                            \
        CHECK(s_ == (status), "%s returned %s, expected %s (%s)", #call, dfa_status_string(s_),             \
              dfa_status_string(status), dfa_last_error());                                                \
        CHECK(strstr(dfa_last_error(), (word)) != NULL, "%s: message '%s' does not name '%s'", #call,      \
              dfa_last_error(), (word));                                                                   \
        CHECK(untouched(), "%s touched an output on error", #call);                                       \
    } while (0)

/* Applies one bad descriptor to all three entry points (merge only when it reads the field). */
static void bad_desc(dfa_attn_desc d, dfa_status want, const char *word, int merge_reads_it) {
    EXPECT(dfa_attn_fwd(&d, q, k, v, o, lse), want, word);
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), want, word);
    if (merge_reads_it) EXPECT(dfa_attn_merge(&d, o, lse, o2, lse2), want, word);
}

static void test_descriptors(void) {
    dfa_attn_desc d;
    EXPECT(dfa_attn_fwd(NULL, q, k, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "descriptor");
    EXPECT(dfa_attn_bwd(NULL, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "descriptor");
    EXPECT(dfa_attn_merge(NULL, o, lse, o2, lse2), DFA_ERR_INVALID_ARGUMENT, "descriptor");

    const int bad_sizes[] = {0, -1, INT_MIN};
    for (int i = 0; i < 3; i++) {
        d = good(); d.batch = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "batch", 1);
        d = good(); d.seqlen_q = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "seqlen_q", 1);
        d = good(); d.seqlen_k = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "seqlen_k", 0);
        d = good(); d.num_heads = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "num_heads", 1);
        d = good(); d.num_kv_heads = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "num_kv_heads", 0);
        d = good(); d.head_dim = bad_sizes[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "head_dim", 1);
    }
    d = good(); d.num_kv_heads = 3; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "num_kv_heads", 0);
    d = good(); d.num_heads = 4; d.num_kv_heads = 8; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "num_heads", 0);
    const int bad_dims[] = {4, 12, 33, 264, 512};
    for (int i = 0; i < 5; i++) {
        d = good(); d.head_dim = bad_dims[i]; bad_desc(d, DFA_ERR_UNSUPPORTED, "head_dim", 1);
    }
    d = good(); d.dtype = (dfa_dtype)7; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "dtype", 1);
    d = good(); d.dtype = (dfa_dtype)-1; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "dtype", 1);
    d = good(); d.causal = 2; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "causal", 0);
    d = good(); d.causal = -1; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "causal", 0);
    const float bad_scales[] = {NAN, -1.0f, -0.0f * 0 - 1e-30f, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++) {
        d = good(); d.softmax_scale = bad_scales[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "softmax_scale", 0);
    }
    d = good(); d.q_start = INT64_MAX; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "q_start", 0);
    d = good(); d.k_start = INT64_MIN; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "k_start", 0);
    d = good(); d.flags = 0x80; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "flags", 1);
    /* size products that overflow */
    d = good(); d.batch = INT_MAX; d.seqlen_q = INT_MAX; d.num_heads = INT_MAX / 256; d.num_kv_heads = 1; d.head_dim = 256;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "overflow", 1);
    d = good(); d.batch = 1 << 23; d.seqlen_q = 1 << 20; d.seqlen_k = 1 << 20; d.num_heads = 1 << 10; d.num_kv_heads = 1; d.head_dim = 256;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "overflow", 1);
    d = good(); d.seqlen_k = INT_MAX; d.num_kv_heads = H; d.batch = INT_MAX;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "overflow", 0);
    d = good(); d.num_heads = INT_MAX / 8 + 1; d.num_kv_heads = 1; d.head_dim = 256; d.batch = 1; d.seqlen_q = 1;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "num_heads", 1);
}

static void test_pointers(void) {
    dfa_attn_desc d = good();
    EXPECT(dfa_attn_fwd(&d, NULL, k, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "q");
    EXPECT(dfa_attn_fwd(&d, q, NULL, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "k");
    EXPECT(dfa_attn_fwd(&d, q, k, NULL, o, lse), DFA_ERR_INVALID_ARGUMENT, "v");
    EXPECT(dfa_attn_fwd(&d, q, k, v, NULL, lse), DFA_ERR_INVALID_ARGUMENT, "o");
    EXPECT(dfa_attn_bwd(&d, NULL, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "q");
    EXPECT(dfa_attn_bwd(&d, q, NULL, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "k");
    EXPECT(dfa_attn_bwd(&d, q, k, NULL, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "v");
    EXPECT(dfa_attn_bwd(&d, q, k, v, NULL, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "o");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, NULL, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "lse");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, NULL, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "dout");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, NULL, dk, dv), DFA_ERR_INVALID_ARGUMENT, "dq");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, NULL, dv), DFA_ERR_INVALID_ARGUMENT, "dk");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, NULL), DFA_ERR_INVALID_ARGUMENT, "dv");
    EXPECT(dfa_attn_merge(&d, NULL, lse, o2, lse2), DFA_ERR_INVALID_ARGUMENT, "o_acc");
    EXPECT(dfa_attn_merge(&d, o, NULL, o2, lse2), DFA_ERR_INVALID_ARGUMENT, "lse_acc");
    EXPECT(dfa_attn_merge(&d, o, lse, NULL, lse2), DFA_ERR_INVALID_ARGUMENT, "o_part");
    EXPECT(dfa_attn_merge(&d, o, lse, o2, NULL), DFA_ERR_INVALID_ARGUMENT, "lse_part");
}

static void test_overlap(void) {
    dfa_attn_desc d = good();
    /* o written over q: refused. The "input" is a copy of o so that untouched() can still check o. */
    EXPECT(dfa_attn_fwd(&d, o, k, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "overlaps input q");
    EXPECT(dfa_attn_fwd(&d, q, k, v, o, (float *)o + 3), DFA_ERR_INVALID_ARGUMENT, "overlap");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dq, dv), DFA_ERR_INVALID_ARGUMENT, "dq and dk");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, (float *)dk + 1), DFA_ERR_INVALID_ARGUMENT, "and dv");
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dout, dk, dv), DFA_ERR_INVALID_ARGUMENT, "input dout");
    EXPECT(dfa_attn_merge(&d, o, lse, o, lse2), DFA_ERR_INVALID_ARGUMENT, "o_part");
}

/* Documents and windows (descriptor version 2). Merge does not read them. */
static int32_t qdoc[B * SQ], kdoc[B * SK];

static dfa_attn_desc with_docs(void) {
    dfa_attn_desc d = good();
    for (int i = 0; i < B * SQ; i++) qdoc[i] = (i % SQ) / 2;
    for (int j = 0; j < B * SK; j++) kdoc[j] = (j % SK) / 2;
    d.q_doc = qdoc;
    d.k_doc = kdoc;
    return d;
}

static void test_masks(void) {
    dfa_attn_desc d;
    d = good(); d.window_left = 4; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "DFA_FLAG_WINDOW", 0);
    d = good(); d.window_right = -1; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "window_right", 0);
    d = good(); d.flags = DFA_FLAG_WINDOW; d.window_left = -2; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "window_left", 0);
    d = good(); d.flags = DFA_FLAG_WINDOW; d.window_left = INT32_MIN;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "window_left", 0);
    d = good(); d.flags = DFA_FLAG_WINDOW; d.window_right = -7; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "window_right", 0);
    d = good(); d.flags = DFA_FLAG_WINDOW | 0x10; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "flags", 1);
    d = good(); d.flags = DFA_FLAG_SAME_DOCS; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "DFA_FLAG_SAME_DOCS", 0);
    d = with_docs(); d.k_doc = NULL; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->k_doc is NULL", 0);
    d = with_docs(); d.q_doc = NULL; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->q_doc is NULL", 0);
    d = with_docs(); qdoc[SQ + 3] = -5; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->q_doc decreases in batch row 1 at row 3", 0);
    d = with_docs(); kdoc[SK - 1] = -1; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->k_doc decreases in batch row 0 at row 6", 0);
    /* outputs over the document ids (inputs) */
    d = with_docs(); d.k_doc = (const int32_t *)(const void *)lse; /* lse: enough floats for B * SK ids */
    EXPECT(dfa_attn_fwd(&d, q, k, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "input d->k_doc");
    d = with_docs(); d.q_doc = (const int32_t *)(const void *)dq;
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "input d->q_doc");
    /* valid masks; merge ignores the ids even when they are bad */
    d = with_docs(); d.flags = DFA_FLAG_WINDOW; d.window_left = 1; d.window_right = -1;
    CHECK(dfa_attn_fwd(&d, q, k, v, o, lse) == DFA_OK, "fwd with documents and a window: %s", dfa_last_error());
    CHECK(dfa_attn_bwd(&d, q, k, v, o, lse, dout, dq, dk, dv) == DFA_OK, "bwd with documents and a window: %s",
          dfa_last_error());
    d = with_docs(); d.flags = DFA_FLAG_SAME_DOCS; /* a promise for the distributed calls; this one reads its ids */
    CHECK(dfa_attn_fwd(&d, q, k, v, o, lse) == DFA_OK, "fwd with DFA_FLAG_SAME_DOCS: %s", dfa_last_error());
    d = with_docs(); qdoc[0] = 99; d.k_doc = NULL; d.window_left = 5;
    CHECK(dfa_attn_merge(&d, o, lse, o2, lse2) == DFA_OK, "merge read the mask fields: %s", dfa_last_error());
}

/* Softcap, head_dim_v, sinks and dsinks (descriptor version 3). Merge reads head_dim_v only. */
static float sinks[H] = {0.5f, -1.0f, 2.0f, 0.0f};

static dfa_attn_desc with_sinks(void) {
    dfa_attn_desc d = good();
    d.sinks = sinks;
    d.dsinks = dsk;
    return d;
}

static void test_v3_fields(void) {
    dfa_attn_desc d;
    const float bad_caps[] = {-1.0f, -1e-30f, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++) {
        d = good(); d.softcap = bad_caps[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->softcap", 0);
    }
    d = good(); d.softcap = 1e-45f; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->softcap", 0); /* scale / cap overflows */
    const int32_t neg_dims[] = {-1, -8, INT32_MIN};
    for (int i = 0; i < 3; i++) {
        d = good(); d.head_dim_v = neg_dims[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->head_dim_v", 1);
    }
    const int32_t bad_dims[] = {4, 12, 33, 264, 512, INT32_MAX};
    for (int i = 0; i < 6; i++) {
        d = good(); d.head_dim_v = bad_dims[i]; bad_desc(d, DFA_ERR_UNSUPPORTED, "d->head_dim_v", 1);
    }
    d = good(); d.dsinks = dsk; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->dsinks", 0);
    const float bad_sinks[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        d = with_sinks(); sinks[2] = bad_sinks[i];
        bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->sinks[2]", 0);
        sinks[2] = 2.0f;
    }
    /* sinks are inputs, dsinks an output of the backward */
    d = with_sinks(); d.dsinks = dq + 5;
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT, "dq and d->dsinks");
    d = with_sinks(); d.dsinks = (float *)dout + 1;
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT,
           "output d->dsinks overlaps input dout");
    d = with_sinks(); d.dsinks = (float *)sinks + 1;
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT,
           "output d->dsinks overlaps input d->sinks");
    d = with_sinks(); d.sinks = lse + 3; /* finite values, over the forward's lse */
    EXPECT(dfa_attn_fwd(&d, q, k, v, o, lse), DFA_ERR_INVALID_ARGUMENT, "output lse overlaps input d->sinks");
    d = with_sinks(); d.sinks = dk;
    EXPECT(dfa_attn_bwd(&d, q, k, v, o2, lse2, dout, dq, dk, dv), DFA_ERR_INVALID_ARGUMENT,
           "output dk overlaps input d->sinks");
    /* head_dim_v sets the extents the overlap checks use: an o of NQ floats just before q is
       apart from it, one of 2 NQ floats (Dv = 2 D) runs into it */
    {
        static float big[2 * NQ];
        memcpy(big + NQ, q, sizeof q);
        d = good(); d.head_dim_v = 2 * D;
        EXPECT(dfa_attn_fwd(&d, big + NQ, k, v, big, lse), DFA_ERR_INVALID_ARGUMENT, "output o overlaps input q");
        d.head_dim_v = D;
        CHECK(dfa_attn_fwd(&d, big + NQ, k, v, big, lse) == DFA_OK, "o just before q refused: %s", dfa_last_error());
    }
    /* valid: every field at once; merge ignores bad sinks and softcap */
    d = with_sinks(); d.softcap = 5.0f; d.head_dim_v = 8;
    CHECK(dfa_attn_fwd(&d, q, k, v, o, lse) == DFA_OK, "fwd with softcap, head_dim_v and sinks: %s", dfa_last_error());
    CHECK(dfa_attn_bwd(&d, q, k, v, o, lse, dout, dq, dk, dv) == DFA_OK, "bwd with softcap, head_dim_v, sinks: %s",
          dfa_last_error());
    d = good(); d.dsinks = dsk; d.softcap = -3.0f; d.sinks = (const float *)(const void *)"garbage";
    CHECK(dfa_attn_merge(&d, o, lse, o2, lse2) == DFA_OK, "merge read softcap or the sinks: %s", dfa_last_error());
    d = good(); d.head_dim_v = D;
    CHECK(dfa_attn_fwd(&d, q, k, v, o, lse) == DFA_OK, "head_dim_v = head_dim refused: %s", dfa_last_error());
}

static void test_misc(void) {
    CHECK(dfa_set_num_threads(-1) == DFA_ERR_INVALID_ARGUMENT, "dfa_set_num_threads(-1) accepted");
    CHECK(strstr(dfa_last_error(), "n = -1") != NULL, "dfa_set_num_threads message: %s", dfa_last_error());
    CHECK(dfa_set_num_threads(0) == DFA_OK, "dfa_set_num_threads(0) refused");
    CHECK(!strcmp(dfa_status_string(DFA_OK), "DFA_OK"), "status string");
    CHECK(!strcmp(dfa_status_string(DFA_ERR_BACKEND), "DFA_ERR_BACKEND"), "status string");
    CHECK(dfa_status_string((dfa_status)99) != NULL, "unknown status string is NULL");
    /* a good call clears the previous message */
    dfa_attn_desc d = good();
    CHECK(dfa_attn_fwd(&d, q, k, v, o, lse) == DFA_OK && dfa_last_error()[0] == '\0',
          "a successful call left the error message '%s'", dfa_last_error());
    /* lse is optional in the forward */
    CHECK(dfa_attn_fwd(&d, q, k, v, o, NULL) == DFA_OK, "fwd with lse = NULL failed: %s", dfa_last_error());
}

int main(void) {
    tl_init("test_errors");
    for (int i = 0; i < NQ; i++) q[i] = (float)tl_rand_normal(), dout[i] = (float)tl_rand_normal(), o2[i] = (float)tl_rand_normal();
    for (int i = 0; i < NK; i++) k[i] = (float)tl_rand_normal(), v[i] = (float)tl_rand_normal();
    for (int i = 0; i < NL; i++) lse2[i] = (float)tl_rand_normal();
    test_descriptors();
    test_pointers();
    test_overlap();
    test_masks();
    test_v3_fields();
    test_misc();
    return tl_finish("test_errors");
}
