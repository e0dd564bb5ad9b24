/* Every bad input to the CUDA entry points: the CPU calls' statuses for the
 * CPU calls' checks, plus the device's own (f32 storage, alignment, host
 * pointers, the sinks' memory); the message names the argument and no output is touched. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "distflash_cuda.h"
#include "gpu_util.h"

enum { B = 2, SQ = 5, SK = 7, H = 4, HKV = 2, D = 16 };
enum { NQ = B * SQ * H * D, NK = B * SK * HKV * D, NL = B * H * SQ };
#define ES 2 /* bf16 */

static void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *o2;
enum { SCRATCH = 1 << 20 }; /* more than any call here needs */
static unsigned char *scratch;
static float *lse, *lse2;
static unsigned char snap[4][NQ * ES];
static float snap_lse[NL];

static void fill(void *p, size_t bytes) {
    unsigned char *h = malloc(bytes);
    tl_fill_normal(DFA_BF16, h, (int64_t)(bytes / ES), 1.0); /* small random bf16 values */
    CUDA_OK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    free(h);
}

static void snapshot(void) {
    fill(o, NQ * ES);
    fill(dq, NQ * ES);
    fill(dk, NK * ES);
    fill(dv, NK * ES);
    float l[NL];
    for (int i = 0; i < NL; i++) l[i] = (float)tl_rand_normal();
    CUDA_OK(cudaMemcpy(lse, l, sizeof l, cudaMemcpyHostToDevice));
    to_host(snap[0], o, NQ * ES);
    to_host(snap[1], dq, NQ * ES);
    to_host(snap[2], dk, NK * ES);
    to_host(snap[3], dv, NK * ES);
    to_host(snap_lse, lse, sizeof snap_lse);
}

static int untouched(void) {
    static unsigned char now[NQ * ES];
    static float nl[NL];
    int same = 1;
    to_host(now, o, NQ * ES);
    same &= !memcmp(now, snap[0], NQ * ES);
    to_host(now, dq, NQ * ES);
    same &= !memcmp(now, snap[1], NQ * ES);
    to_host(now, dk, NK * ES);
    same &= !memcmp(now, snap[2], NK * ES);
    to_host(now, dv, NK * ES);
    same &= !memcmp(now, snap[3], NK * ES);
    to_host(nl, lse, sizeof nl);
    same &= !memcmp(nl, snap_lse, sizeof nl);
    return same;
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
        CUDA_OK(cudaGetLastError());                                                                       \
    } while (0)

static dfa_attn_desc good(void) { return tl_desc(B, SQ, SK, H, HKV, D, DFA_BF16, 1, 2, 0); }

static void bad_desc(dfa_attn_desc d, dfa_status want, const char *word, int merge_reads_it) {
    EXPECT(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0), want, word);
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, dv, 0), want, word);
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, scratch, SCRATCH, 0), want, word);
    EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv, scratch, SCRATCH, 0), want, word);
    if (merge_reads_it) EXPECT(dfa_attn_merge_cuda(&d, o, lse, o2, lse2, 0), want, word);
}

static void test_descriptors(void) {
    dfa_attn_desc d;
    EXPECT(dfa_attn_fwd_cuda(NULL, q, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "descriptor");
    EXPECT(dfa_attn_bwd_cuda(NULL, q, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "descriptor");
    EXPECT(dfa_attn_merge_cuda(NULL, o, lse, o2, lse2, 0), DFA_ERR_INVALID_ARGUMENT, "descriptor");
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
    const int bad_dims[] = {4, 12, 33, 264, 512};
    for (int i = 0; i < 5; i++) {
        d = good(); d.head_dim = bad_dims[i]; bad_desc(d, DFA_ERR_UNSUPPORTED, "head_dim", 1);
    }
    /* a value head dim of its own: a multiple of 8 (merge reads it), and one of the pairs the
       kernels take (head_dim <= 128 with head_dim_v <= 64, head_dim <= 192 with head_dim_v <= 128) */
    d = good(); d.head_dim_v = 12; bad_desc(d, DFA_ERR_UNSUPPORTED, "head_dim_v", 1);
    const int bad_pairs[][2] = {{16, 256}, {256, 128}, {200, 64}, {192, 136}};
    for (int i = 0; i < 4; i++) {
        d = good(); d.head_dim = bad_pairs[i][0]; d.head_dim_v = bad_pairs[i][1];
        bad_desc(d, DFA_ERR_UNSUPPORTED, "d->head_dim_v", 0);
        CHECK(dfa_attn_bwd_cuda_scratch_bytes(&d) == 0 && dfa_attn_fwd_cuda_scratch_bytes(&d) == 0,
              "scratch bytes of head_dim %d with head_dim_v %d (not a pair the kernels take) is not 0",
              bad_pairs[i][0], bad_pairs[i][1]);
    }
    /* softcap: finite and >= 0, and not with a value head dim of its own on the device */
    const float bad_caps[] = {NAN, -1.0f, INFINITY, -INFINITY};
    for (int i = 0; i < 4; i++) {
        d = good(); d.softcap = bad_caps[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "softcap", 0);
    }
    d = good(); d.head_dim = 192; d.head_dim_v = 128; d.softcap = 30.0f;
    bad_desc(d, DFA_ERR_UNSUPPORTED, "d->softcap", 0);
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(&d) == 0 && dfa_attn_fwd_cuda_scratch_bytes(&d) == 0,
          "scratch bytes of a softcap with a value head dim of its own is not 0");
    d = good(); d.dtype = (dfa_dtype)7; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "dtype", 1);
    d = good(); d.causal = 2; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "causal", 0);
    const float bad_scales[] = {NAN, -1.0f, INFINITY};
    for (int i = 0; i < 3; i++) {
        d = good(); d.softmax_scale = bad_scales[i]; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "softmax_scale", 0);
    }
    d = good(); d.q_start = INT64_MAX; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "q_start", 0);
    d = good(); d.k_start = INT64_MIN; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "k_start", 0);
    d = good(); d.flags = 0x80; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "flags", 1);
    d = good(); d.batch = INT_MAX; d.seqlen_q = INT_MAX; d.num_heads = INT_MAX / 256; d.num_kv_heads = 1; d.head_dim = 256;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "overflow", 1);
    /* the versioning header and the reserved space (distflash.h, "Descriptors that can grow") */
    d = good(); d.struct_size = 7; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->struct_size", 1);
    d = good(); d.magic = 0; bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->magic", 1);
    d = good(); d.reserved[0] = 1; bad_desc(d, DFA_ERR_UNSUPPORTED, "d->reserved", 1);
    d = good(); d.struct_size = 0xdeadbeefu;
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(&d) == 0, "scratch bytes of a descriptor with a bad struct_size is not 0");
    /* the device's own: f32 storage (fwd/bwd), alignment, host memory */
    d = good(); d.dtype = DFA_F32;
    EXPECT(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0), DFA_ERR_UNSUPPORTED, "DFA_F32");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_UNSUPPORTED, "DFA_F32");
}

static void test_pointers(void) {
    dfa_attn_desc d = good();
    EXPECT(dfa_attn_fwd_cuda(&d, NULL, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "q");
    EXPECT(dfa_attn_fwd_cuda(&d, q, NULL, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "k");
    EXPECT(dfa_attn_fwd_cuda(&d, q, k, NULL, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "v");
    EXPECT(dfa_attn_fwd_cuda(&d, q, k, v, NULL, lse, 0), DFA_ERR_INVALID_ARGUMENT, "o");
    EXPECT(dfa_attn_bwd_cuda(&d, NULL, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "q");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, NULL, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "o");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, NULL, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "lse");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, NULL, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dout");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, NULL, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dq");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, NULL, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dk");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, NULL, 0), DFA_ERR_INVALID_ARGUMENT, "dv");
    EXPECT(dfa_attn_merge_cuda(&d, NULL, lse, o2, lse2, 0), DFA_ERR_INVALID_ARGUMENT, "o_acc");
    EXPECT(dfa_attn_merge_cuda(&d, o, NULL, o2, lse2, 0), DFA_ERR_INVALID_ARGUMENT, "lse_acc");
    EXPECT(dfa_attn_merge_cuda(&d, o, lse, NULL, lse2, 0), DFA_ERR_INVALID_ARGUMENT, "o_part");
    EXPECT(dfa_attn_merge_cuda(&d, o, lse, o2, NULL, 0), DFA_ERR_INVALID_ARGUMENT, "lse_part");
    /* overlaps */
    EXPECT(dfa_attn_fwd_cuda(&d, o, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "overlaps input q");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dq, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dq and dk");
    EXPECT(dfa_attn_merge_cuda(&d, o, lse, o, lse2, 0), DFA_ERR_INVALID_ARGUMENT, "o_part");
    /* misaligned and host pointers */
    EXPECT(dfa_attn_fwd_cuda(&d, (char *)q + 2, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "aligned");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, (char *)dout + 8, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dout");
    static unsigned char host_q[NQ * ES] __attribute__((aligned(16)));
    EXPECT(dfa_attn_fwd_cuda(&d, host_q, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "device memory");
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, host_q, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dk");
    /* a good call clears the message; the scratch query */
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0) == DFA_OK && dfa_last_error()[0] == '\0',
          "a successful call left the error message '%s'", dfa_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(&d) > 0, "scratch bytes of a good descriptor is 0");
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(NULL) == 0, "scratch bytes of NULL is not 0");
    dfa_attn_desc z = {0}; /* zero-initialised: the same descriptor as good() */
    z.batch = B, z.seqlen_q = SQ, z.seqlen_k = SK, z.num_heads = H, z.num_kv_heads = HKV, z.head_dim = D;
    z.dtype = DFA_BF16, z.causal = 1, z.q_start = 2;
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(&z) == dfa_attn_bwd_cuda_scratch_bytes(&d),
          "scratch bytes of a zero-initialised descriptor differ");
    CHECK(dfa_attn_fwd_cuda(&z, q, k, v, o, lse, 0) == DFA_OK, "zero-initialised descriptor refused: %s",
          dfa_last_error());
    CUDA_OK(cudaDeviceSynchronize());
}

static int bits_equal(const void *a, const void *b, size_t bytes) {
    unsigned char *ha = malloc(bytes), *hb = malloc(bytes);
    to_host(ha, a, bytes);
    to_host(hb, b, bytes);
    const int same = !memcmp(ha, hb, bytes);
    free(ha);
    free(hb);
    return same;
}

/* Bytes of the 256 after scratch + n that are no longer the 0xff they were set to. */
static int written_past(size_t n) {
    unsigned char past[256];
    to_host(past, scratch + n, sizeof past);
    int touched = 0;
    for (int i = 0; i < 256; i++) touched += past[i] != 0xff;
    return touched;
}

/* The _with_scratch calls: scratch NULL, too small, misaligned or host memory fails naming it
   (outputs untouched); with exactly the bytes asked for the calls give the plain calls' bits
   (deterministic backward) and write nothing past them; with and without a mask. */
static void scratch_case(dfa_attn_desc d) {
    const size_t nf = dfa_attn_fwd_cuda_scratch_bytes(&d), nb = dfa_attn_bwd_cuda_scratch_bytes(&d);
    CHECK(nf >= 256 && nf % 256 == 0 && nb > 0 && nb % 256 == 0 && nb + 256 <= SCRATCH,
          "scratch bytes fwd %zu, bwd %zu", nf, nb);
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, NULL, nf, 0), DFA_ERR_INVALID_ARGUMENT, "scratch");
    EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv, NULL, nb, 0),
           DFA_ERR_INVALID_ARGUMENT, "scratch");
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, scratch, nf - 1, 0), DFA_ERR_INVALID_ARGUMENT,
           "scratch_bytes");
    EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv, scratch, nb - 1, 0),
           DFA_ERR_INVALID_ARGUMENT, "scratch_bytes");
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, scratch + 16, nf, 0), DFA_ERR_INVALID_ARGUMENT,
           "scratch");
    EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv, scratch + 128, nb, 0),
           DFA_ERR_INVALID_ARGUMENT, "scratch");
    /* scratch over a tensor of the call: an o (dv) allocation of at least the scratch's bytes, so
       that the scratch overlaps that tensor alone (the next allocation may lie right behind a
       smaller one, and the message names the first tensor, in argument order, that it meets) */
    {
        const size_t bo = NQ * ES > nf ? NQ * ES : nf, bv = NK * ES > nb ? NK * ES : nb;
        void *o_big = dev_alloc(bo), *dv_big = dev_alloc(bv);
        EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o_big, lse, o_big, nf, 0), DFA_ERR_INVALID_ARGUMENT,
               "scratch overlaps o");
        EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv_big, dv_big, nb, 0),
               DFA_ERR_INVALID_ARGUMENT, "scratch overlaps dv");
        CUDA_OK(cudaFree(o_big));
        CUDA_OK(cudaFree(dv_big));
    }
    static unsigned char host_scratch[SCRATCH] __attribute__((aligned(256)));
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, host_scratch, nf, 0), DFA_ERR_INVALID_ARGUMENT,
           "scratch");
    EXPECT(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o2, lse2, dout, dq, dk, dv, host_scratch, nb, 0),
           DFA_ERR_INVALID_ARGUMENT, "scratch");

    /* good calls: the plain call's outputs, then the scratch call's into other buffers */
    void *o_s = dev_alloc(NQ * ES), *dq_s = dev_alloc(NQ * ES), *dk_s = dev_alloc(NK * ES), *dv_s = dev_alloc(NK * ES);
    float *lse_s = dev_alloc(4 * NL);
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0) == DFA_OK, "fwd: %s", dfa_last_error());
    CUDA_OK(cudaMemset(scratch, 0xff, SCRATCH));
    CHECK(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o_s, lse_s, scratch, nf, 0) == DFA_OK &&
              dfa_last_error()[0] == '\0',
          "fwd with scratch: %s", dfa_last_error());
    CHECK(bits_equal(o, o_s, NQ * ES) && bits_equal(lse, lse_s, 4 * NL), "fwd with scratch: not the plain call's bits");
    int touched = written_past(nf);
    CHECK(touched == 0, "fwd with scratch wrote %d bytes past the %zu it asked for", touched, nf);
    d.flags |= DFA_FLAG_DETERMINISTIC; /* the same dq bits on every run */
    CHECK(dfa_attn_bwd_cuda_scratch_bytes(&d) <= nb, "deterministic bwd asks for more scratch");
    const size_t nbd = dfa_attn_bwd_cuda_scratch_bytes(&d);
    CHECK(dfa_attn_bwd_cuda(&d, q, k, v, o, lse, dout, dq, dk, dv, 0) == DFA_OK, "bwd: %s", dfa_last_error());
    CUDA_OK(cudaMemset(scratch, 0xff, SCRATCH));
    CHECK(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o, lse, dout, dq_s, dk_s, dv_s, scratch, nbd, 0) == DFA_OK,
          "bwd with scratch: %s", dfa_last_error());
    CHECK(bits_equal(dq, dq_s, NQ * ES) && bits_equal(dk, dk_s, NK * ES) && bits_equal(dv, dv_s, NK * ES),
          "bwd with scratch: not the plain call's bits");
    touched = written_past(nbd);
    CHECK(touched == 0, "bwd with scratch wrote %d bytes past the %zu it asked for", touched, nbd);
    /* the default (atomic dq) backward with its own, larger scratch goes through too */
    d.flags &= ~(unsigned)DFA_FLAG_DETERMINISTIC;
    CHECK(dfa_attn_bwd_cuda_with_scratch(&d, q, k, v, o, lse, dout, dq_s, dk_s, dv_s, scratch, nb, 0) == DFA_OK,
          "bwd with scratch: %s", dfa_last_error());
    CHECK(bits_equal(dk, dk_s, NK * ES) && bits_equal(dv, dv_s, NK * ES), "bwd with scratch: dk, dv differ");
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(o_s)); CUDA_OK(cudaFree(dq_s)); CUDA_OK(cudaFree(dk_s)); CUDA_OK(cudaFree(dv_s));
    CUDA_OK(cudaFree(lse_s));
}

static void test_scratch(void) {
    CHECK(dfa_attn_fwd_cuda_scratch_bytes(NULL) == 0, "fwd scratch bytes of NULL is not 0");
    scratch_case(good());
    int32_t host_k[B * SK], host_q[B * SQ];
    for (int i = 0; i < B * SK; i++) host_k[i] = (i % SK) / 3;
    for (int i = 0; i < B * SQ; i++) host_q[i] = (i % SQ) / 3;
    int32_t *kids = dev_copy_of(host_k, sizeof host_k), *qids = dev_copy_of(host_q, sizeof host_q);
    dfa_attn_desc d = good();
    d.q_doc = qids, d.k_doc = kids;
    d.flags = DFA_FLAG_WINDOW, d.window_left = 2, d.window_right = -1;
    const size_t masked = dfa_attn_bwd_cuda_scratch_bytes(&d);
    scratch_case(d);
    d.q_doc = d.k_doc = NULL, d.flags = 0;
    CHECK(masked > dfa_attn_bwd_cuda_scratch_bytes(&d), "a mask's intervals are not in the scratch bytes");
    CUDA_OK(cudaFree(kids));
    CUDA_OK(cudaFree(qids));
}

/* Masks on the device: ids must be device memory, 4-byte aligned, set together; bad window
   values as on the CPU; a good masked call goes through. */
static void test_masks(void) {
    int32_t host_ids[B * SK];
    for (int i = 0; i < B * SK; i++) host_ids[i] = (i % SK) / 3;
    int32_t *ids = dev_copy_of(host_ids, sizeof host_ids);
    dfa_attn_desc d = good();
    d.q_doc = host_ids, d.k_doc = ids;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->q_doc", 0);
    d = good();
    d.q_doc = ids, d.k_doc = (const int32_t *)(const void *)((const char *)ids + 2);
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->k_doc", 0);
    d = good();
    d.q_doc = ids;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->k_doc is NULL", 0);
    d = good();
    d.window_left = 3;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "DFA_FLAG_WINDOW", 0);
    d = good();
    d.flags = DFA_FLAG_WINDOW, d.window_right = -4;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "window_right", 0);
    int32_t host_q[B * SQ];
    for (int i = 0; i < B * SQ; i++) host_q[i] = (i % SQ) / 3;
    int32_t *qids = dev_copy_of(host_q, sizeof host_q);
    d = good();
    d.q_doc = qids, d.k_doc = ids;
    d.flags = DFA_FLAG_WINDOW, d.window_left = 2, d.window_right = -1;
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0) == DFA_OK, "masked fwd refused: %s", dfa_last_error());
    CHECK(dfa_attn_bwd_cuda(&d, q, k, v, o, lse, dout, dq, dk, dv, 0) == DFA_OK, "masked bwd refused: %s",
          dfa_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(ids));
    CUDA_OK(cudaFree(qids));
}

/* Sinks on the device: sinks and dsinks must be device memory, 4-byte aligned, apart from the
   outputs (and the caller's scratch); dsinks needs sinks; the forward needs no scratch more for
   them (its kernels add them); good calls go through (with lse = NULL too). */
static void test_sinks(void) {
    float host_s[H] = {0.5f, -1.0f, 2.0f, 0.0f};
    float *sinks = dev_copy_of(host_s, sizeof host_s), *dsinks = dev_alloc(sizeof host_s);
    dfa_attn_desc d = good();
    d.sinks = host_s;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->sinks", 0);
    d.sinks = (const float *)(const void *)((const char *)sinks + 2);
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->sinks", 0);
    d = good();
    d.dsinks = dsinks;
    bad_desc(d, DFA_ERR_INVALID_ARGUMENT, "d->dsinks", 0);
    d.sinks = sinks;
    float host_ds[H];
    d.dsinks = host_ds;
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "d->dsinks");
    d.dsinks = (float *)(void *)((char *)dsinks + 1);
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "d->dsinks");
    d.dsinks = (float *)dq; /* an output twice */
    EXPECT(dfa_attn_bwd_cuda(&d, q, k, v, o2, lse2, dout, dq, dk, dv, 0), DFA_ERR_INVALID_ARGUMENT, "dsinks");
    d = good();
    d.sinks = (const float *)o; /* an input that the forward writes */
    EXPECT(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0), DFA_ERR_INVALID_ARGUMENT, "sinks");
    d.sinks = (const float *)(const void *)scratch; /* the caller's scratch is written */
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, lse, scratch, SCRATCH, 0), DFA_ERR_INVALID_ARGUMENT,
           "scratch");
    d = good();
    const size_t plain = dfa_attn_fwd_cuda_scratch_bytes(&d);
    d.sinks = sinks;
    const size_t with = dfa_attn_fwd_cuda_scratch_bytes(&d);
    CHECK(with == plain, "forward scratch with sinks %zu, want %zu (as without)", with, plain);
    EXPECT(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, NULL, scratch, with - 1, 0), DFA_ERR_INVALID_ARGUMENT,
           "scratch_bytes");
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0) == DFA_OK, "fwd with sinks refused: %s", dfa_last_error());
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, NULL, 0) == DFA_OK, "fwd with sinks, lse NULL refused: %s",
          dfa_last_error());
    CHECK(dfa_attn_fwd_cuda_with_scratch(&d, q, k, v, o, NULL, scratch, with, 0) == DFA_OK,
          "fwd with sinks and the caller's scratch refused: %s", dfa_last_error());
    CHECK(dfa_attn_fwd_cuda(&d, q, k, v, o, lse, 0) == DFA_OK, "fwd with sinks refused: %s", dfa_last_error());
    d.dsinks = dsinks;
    CHECK(dfa_attn_bwd_cuda(&d, q, k, v, o, lse, dout, dq, dk, dv, 0) == DFA_OK, "bwd with dsinks refused: %s",
          dfa_last_error());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaFree(sinks));
    CUDA_OK(cudaFree(dsinks));
}

int main(void) {
    tl_init("test_gpu_errors");
    if (!have_gpu()) return 77; /* ctest: skipped */
    q = dev_alloc(NQ * ES); k = dev_alloc(NK * ES); v = dev_alloc(NK * ES); o = dev_alloc(NQ * ES);
    dout = dev_alloc(NQ * ES); dq = dev_alloc(NQ * ES); dk = dev_alloc(NK * ES); dv = dev_alloc(NK * ES);
    o2 = dev_alloc(NQ * ES); lse = dev_alloc(4 * NL); lse2 = dev_alloc(4 * NL);
    scratch = dev_alloc(SCRATCH);
    fill(q, NQ * ES); fill(k, NK * ES); fill(v, NK * ES); fill(dout, NQ * ES); fill(o2, NQ * ES);
    float l[NL];
    for (int i = 0; i < NL; i++) l[i] = (float)tl_rand_normal();
    CUDA_OK(cudaMemcpy(lse2, l, sizeof l, cudaMemcpyHostToDevice));
    test_descriptors();
    test_pointers();
    test_masks();
    test_sinks();
    test_scratch();
    return tl_finish("test_gpu_errors");
}
