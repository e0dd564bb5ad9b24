/* Descriptors that can grow (distflash.h): the versioning header (struct_size, magic,
 * version, reserved_header) and the reserved space of dfa_attn_desc and dfa_dist_desc.
 *
 * Accepted: a zero-initialised descriptor, one from dfa_attn_desc_init, one from a newer
 * header of the same size that sets nothing new; all give the same bits.
 * Refused: a struct_size or magic or version that is neither "zero-initialised" nor
 * "initialised" (DFA_ERR_INVALID_ARGUMENT, naming the field), a struct_size larger than
 * this library's descriptor (a newer header whose descriptor grew: DFA_ERR_UNSUPPORTED,
 * naming struct_size), non-zero bytes where this library knows no field
 * (DFA_ERR_UNSUPPORTED, naming the bytes), through every CPU entry point, outputs
 * untouched. Larger descriptors live in buffers of exactly their size, so that
 * AddressSanitizer would see a read past struct_size (tests/cpu/test_limits.c: on the stack). The distributed descriptor's layout
 * rules are checked on the import itself (white box); tests/mpi/test_dist_errors.c checks
 * them through dfa_dist_attn_fwd/bwd. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "common/desc.h"

enum { B = 2, SQ = 5, SK = 7, H = 4, HKV = 2, D = 16 };
enum { NQ = B * SQ * H * D, NK = B * SK * HKV * D, NL = B * H * SQ };

_Static_assert(sizeof(dfa_attn_desc) == DFA_ATTN_DESC_SIZE_V1, "DFA_ATTN_DESC_SIZE_V1 is sizeof(dfa_attn_desc)");
_Static_assert(sizeof(dfa_attn_desc) == DFA_ATTN_DESC_SIZE_V2 && sizeof(dfa_attn_desc) == DFA_ATTN_DESC_SIZE_V3 &&
                   DFA_DESC_VERSION == 3,
               "versions 2 and 3 took their fields from the reserved space");
_Static_assert(offsetof(dfa_attn_desc, q_doc) == 72 && offsetof(dfa_attn_desc, softcap) == 96,
               "the version-2 fields sit where version 1 had reserved[0..2]");
_Static_assert(offsetof(dfa_attn_desc, head_dim_v) == 100 && offsetof(dfa_attn_desc, sinks) == 104 &&
                   offsetof(dfa_attn_desc, dsinks) == 112 && offsetof(dfa_attn_desc, reserved) == 120,
               "the version-3 fields sit where version 2 had reserved[0..2]");
_Static_assert(sizeof(dfa_dist_desc) == DFA_DIST_DESC_SIZE_V1, "DFA_DIST_DESC_SIZE_V1 is sizeof(dfa_dist_desc)");
_Static_assert(offsetof(dfa_attn_desc, batch) == 16 && offsetof(dfa_dist_desc, attn) == 16,
               "the versioning header is 16 bytes");

static float q[NQ], k[NK], v[NK], dout[NQ], o_ref[NQ], lse_ref[NL], dq_ref[NQ], dk_ref[NK], dv_ref[NK];
static float o[NQ], lse[NL], dq[NQ], dk[NK], dv[NK], o_part[NQ], lse_part[NL];

/* The shape every case uses, set on a descriptor whatever its header. */
static void set_shape(dfa_attn_desc *d) {
    d->batch = B;
    d->seqlen_q = SQ;
    d->seqlen_k = SK;
    d->num_heads = H;
    d->num_kv_heads = HKV;
    d->head_dim = D;
    d->dtype = DFA_F32;
    d->causal = 1;
    d->q_start = 3;
}

static dfa_attn_desc made_by_init(void) {
    dfa_attn_desc d = dfa_attn_desc_init(B, SQ, SK, H, HKV, D);
    set_shape(&d);
    return d;
}

/* A caller's descriptor of `size` bytes (a newer header's, when size > 136): the bytes of
   made_by_init(), struct_size = size, the rest zero. malloc'd, exactly size bytes. */
static dfa_attn_desc *larger(uint32_t size) {
    unsigned char *p = calloc(1, size);
    dfa_attn_desc d = made_by_init();
    d.struct_size = size;
    memcpy(p, &d, sizeof d);
    return (dfa_attn_desc *)(void *)p;
}

static void poison_outputs(void) {
    tl_poison(o, sizeof o);
    tl_poison(lse, sizeof lse);
    tl_poison(dq, sizeof dq);
    tl_poison(dk, sizeof dk);
    tl_poison(dv, sizeof dv);
}

static int poisoned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0xff) return 0;
    return 1;
}

/* Accepted: forward, backward and merge give the reference's bits. */
static void expect_ok(const dfa_attn_desc *d, const char *what) {
    poison_outputs();
    dfa_status st = dfa_attn_fwd(d, q, k, v, o, lse);
    CHECK(st == DFA_OK, "%s: dfa_attn_fwd refused it: %s", what, dfa_last_error());
    CHECK(!memcmp(o, o_ref, sizeof o) && !memcmp(lse, lse_ref, sizeof lse), "%s: forward differs", what);
    st = dfa_attn_bwd(d, q, k, v, o_ref, lse_ref, dout, dq, dk, dv);
    CHECK(st == DFA_OK, "%s: dfa_attn_bwd refused it: %s", what, dfa_last_error());
    CHECK(!memcmp(dq, dq_ref, sizeof dq) && !memcmp(dk, dk_ref, sizeof dk) && !memcmp(dv, dv_ref, sizeof dv),
          "%s: backward differs", what);
    memcpy(o, o_ref, sizeof o);
    memcpy(lse, lse_ref, sizeof lse);
    st = dfa_attn_merge(d, o, lse, o_part, lse_part);
    CHECK(st == DFA_OK, "%s: dfa_attn_merge refused it: %s", what, dfa_last_error());
}

/* Refused by every CPU entry point with `want`, the message naming `word`, outputs untouched. */
static void expect_refused(const dfa_attn_desc *d, dfa_status want, const char *word, const char *what) {
    static const char *const fns[] = {"dfa_attn_fwd: ", "dfa_attn_bwd: ", "dfa_attn_merge: "};
    for (int call = 0; call < 3; call++) {
        poison_outputs();
        dfa_status st = call == 0   ? dfa_attn_fwd(d, q, k, v, o, lse)
                        : call == 1 ? dfa_attn_bwd(d, q, k, v, o_ref, lse_ref, dout, dq, dk, dv)
                                    : dfa_attn_merge(d, o, lse, o_part, lse_part);
        const char *msg = dfa_last_error();
        CHECK(st == want, "%s (%s): %s, want %s (%s)", what, fns[call], dfa_status_string(st),
              dfa_status_string(want), msg);
        CHECK(strstr(msg, word) != NULL, "%s (%s): message '%s' does not name '%s'", what, fns[call], msg, word);
        CHECK(!strncmp(msg, fns[call], strlen(fns[call])), "%s: message '%s' does not name the call", what, msg);
        CHECK(poisoned(o, sizeof o) && poisoned(lse, sizeof lse) && poisoned(dq, sizeof dq) &&
                  poisoned(dk, sizeof dk) && poisoned(dv, sizeof dv),
              "%s (%s): an output was touched", what, fns[call]);
    }
}

static void test_accepted(void) {
    dfa_attn_desc d = made_by_init();
    CHECK(d.struct_size == DFA_ATTN_DESC_SIZE_V1 && d.magic == DFA_DESC_MAGIC && d.version == DFA_DESC_VERSION &&
              d.reserved_header == 0,
          "dfa_attn_desc_init header: %u 0x%x %u %u", d.struct_size, d.magic, d.version, d.reserved_header);
    const dfa_attn_desc i = dfa_attn_desc_init(B, SQ, SK, H, HKV, D);
    CHECK(i.dtype == DFA_F32 && i.causal == 0 && i.q_start == 0 && i.k_start == 0 && i.softmax_scale == 0.0f &&
              i.flags == 0 && !memcmp(i.reserved, (uint64_t[8]){0}, sizeof i.reserved),
          "dfa_attn_desc_init: not every other field at its default");
    expect_ok(&d, "dfa_attn_desc_init");

    dfa_attn_desc z;
    memset(&z, 0, sizeof z);
    set_shape(&z);
    expect_ok(&z, "zero-initialised");
    dfa_attn_desc zc = {0};
    set_shape(&zc);
    expect_ok(&zc, "= {0}");

    /* version 1 (the mask fields were reserved then, so zero): the same call */
    dfa_attn_desc v1 = made_by_init();
    v1.version = 1;
    expect_ok(&v1, "version 1");
    /* version 2 (the version-3 fields were reserved then, so zero): the same call */
    dfa_attn_desc v2 = made_by_init();
    v2.version = 2;
    expect_ok(&v2, "version 2");
    /* version 3's fields at values that change nothing: the same bits */
    dfa_attn_desc same = made_by_init();
    same.head_dim_v = D;
    expect_ok(&same, "head_dim_v = head_dim");
    /* version 2's mask fields at values that mask nothing beyond causal: the same bits */
    dfa_attn_desc w = made_by_init();
    w.flags = DFA_FLAG_WINDOW;
    w.window_left = w.window_right = -1;
    expect_ok(&w, "an unlimited window");
    w.window_left = SK + 3; /* further back than any key */
    expect_ok(&w, "a window wider than the sequence");

    dfa_attn_desc newer = made_by_init();
    newer.version = DFA_DESC_VERSION + 1; /* a newer header of the same size that sets nothing new */
    expect_ok(&newer, "a newer version, same size");
}

static void test_refused(void) {
    char word[64], what[96];
    /* a newer header whose descriptor grew, zero tail or not: refused by its size */
    const uint32_t sizes[] = {144, 200, 4096};
    for (int s = 0; s < 3; s++)
        for (int tail = 0; tail <= 1; tail++) {
            dfa_attn_desc *big = larger(sizes[s]);
            if (tail) ((unsigned char *)big)[sizes[s] - 1] = 7;
            snprintf(word, sizeof word, "d->struct_size = %u is larger", sizes[s]);
            snprintf(what, sizeof what, "struct_size %u, %s tail", sizes[s], tail ? "non-zero" : "zero");
            expect_refused(big, DFA_ERR_UNSUPPORTED, word, what);
            expect_refused(big, DFA_ERR_UNSUPPORTED, "newer distflash.h", what);
            free(big);
        }

    /* reserved space: initialised and zero-initialised descriptors alike */
    for (int zero_init = 0; zero_init <= 1; zero_init++) {
        dfa_attn_desc d = made_by_init();
        if (zero_init) {
            memset(&d, 0, sizeof d);
            set_shape(&d);
        }
        const size_t r = offsetof(dfa_attn_desc, reserved);
        d.reserved[0] = 1;
        snprintf(word, sizeof word, "bytes %zu..%zu of d (d->reserved)", r, r);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "reserved[0] = 1");
        expect_refused(&d, DFA_ERR_UNSUPPORTED, "did not zero-initialise", "reserved[0] = 1");
        d.reserved[0] = 0;
        d.reserved[1] = (uint64_t)1 << 63; /* the last reserved word (reserved[7] in version 1) */
        snprintf(word, sizeof word, "bytes %u..%u", DFA_ATTN_DESC_SIZE_V1 - 1, DFA_ATTN_DESC_SIZE_V1 - 1);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "last reserved word, top bit");
    }

    /* a version-1 descriptor had reserved bytes where version 2 put the mask fields */
    {
        static const int32_t ids[B * SK] = {0};
        dfa_attn_desc d = made_by_init();
        d.version = 1;
        /* The message names the first non-zero byte: give q_doc a pointer whose lowest byte is
         * not zero, so that byte is the field's first (the refusal comes before any use). */
        const int32_t *p = ((uintptr_t)ids & 0xff) ? ids : ids + 1;
        d.q_doc = p;
        d.k_doc = p;
        const size_t a = offsetof(dfa_attn_desc, q_doc);
        snprintf(word, sizeof word, "bytes %zu..", a);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 1 with q_doc set");
        expect_refused(&d, DFA_ERR_UNSUPPORTED, "version-1", "version 1 with q_doc set");
        d.q_doc = d.k_doc = NULL;
        d.window_right = 1;
        snprintf(word, sizeof word, "bytes %zu..%zu", offsetof(dfa_attn_desc, window_right),
                 offsetof(dfa_attn_desc, window_right));
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 1 with window_right set");
    }

    /* a version-2 descriptor had reserved bytes where version 3 put softcap..dsinks */
    {
        static const float sinks_mem[H + 1] = {0};
        static float dsinks_mem[H + 1];
        /* pointers whose lowest byte is not zero, so the named first byte is the field's own */
        const float *sinks = ((uintptr_t)sinks_mem & 0xff) ? sinks_mem : sinks_mem + 1;
        float *dsinks = ((uintptr_t)dsinks_mem & 0xff) ? dsinks_mem : dsinks_mem + 1;
        dfa_attn_desc d = made_by_init();
        d.version = 2;
        d.softcap = 1.00000012f; /* 0x3f800001: every byte of the field non-zero */
        snprintf(word, sizeof word, "bytes %zu..%zu", offsetof(dfa_attn_desc, softcap),
                 offsetof(dfa_attn_desc, softcap) + 3);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 2 with softcap set");
        expect_refused(&d, DFA_ERR_UNSUPPORTED, "version-2", "version 2 with softcap set");
        d.softcap = 0.0f;
        d.head_dim_v = D;
        snprintf(word, sizeof word, "bytes %zu..", offsetof(dfa_attn_desc, head_dim_v));
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 2 with head_dim_v set");
        d.head_dim_v = 0;
        d.sinks = sinks;
        snprintf(word, sizeof word, "bytes %zu..", offsetof(dfa_attn_desc, sinks));
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 2 with sinks set");
        d.sinks = NULL;
        d.dsinks = dsinks;
        snprintf(word, sizeof word, "bytes %zu..", offsetof(dfa_attn_desc, dsinks));
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, "version 2 with dsinks set");
        d.version = 1;
        d.dsinks = NULL;
        d.sinks = sinks;
        expect_refused(&d, DFA_ERR_UNSUPPORTED, "version-1", "version 1 with sinks set");
    }

    /* struct_size: neither 0 nor a descriptor size */
    const uint32_t bad_sizes[] = {7, 8, 40, 128, 140, 4104, 1u << 20, 0xdeadbeefu, 0xffffffffu};
    for (int s = 0; s < 9; s++) {
        dfa_attn_desc d = made_by_init();
        d.struct_size = bad_sizes[s];
        snprintf(word, sizeof word, "d->struct_size = %u", bad_sizes[s]);
        snprintf(what, sizeof what, "struct_size %u", bad_sizes[s]);
        expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, word, what);
    }

    /* magic and version must match struct_size */
    dfa_attn_desc d = made_by_init();
    d.magic = 0x12345678u;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->magic = 0x12345678", "wrong magic");
    d.magic = 0;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->magic", "struct_size set, magic 0");
    d = made_by_init();
    d.struct_size = 0;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->magic", "struct_size 0, magic set");
    d.magic = 0;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->version", "struct_size 0, version set");
    d = made_by_init();
    d.version = 0;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->version", "struct_size set, version 0");
    d = made_by_init();
    d.reserved_header = 1;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->reserved_header", "reserved_header 1");
    memset(&d, 0, sizeof d);
    set_shape(&d);
    d.reserved_header = 0x100;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->reserved_header", "zero-initialised, reserved_header set");
    expect_refused(NULL, DFA_ERR_INVALID_ARGUMENT, "descriptor", "NULL");

    /* the header is checked before the contents: a bad size elsewhere does not hide it */
    d = made_by_init();
    d.batch = 0;
    d.struct_size = 40;
    expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->struct_size", "struct_size 40 and batch 0");
}

/* The normalised copy: every accepted form imports to the same bytes; refusals leave *out alone. */
static void test_attn_import(void) {
    static const char fn[] = "test";
    dfa_attn_desc want, got;
    dfa_attn_desc d = made_by_init();
    CHECK(dfa__attn_desc_import(&d, &want, fn) == DFA_OK, "import of dfa_attn_desc_init: %s", dfa_last_error());
    CHECK(want.struct_size == sizeof want && want.magic == DFA_DESC_MAGIC && want.version == DFA_DESC_VERSION,
          "normalised header: %u 0x%x %u", want.struct_size, want.magic, want.version);
    CHECK(!memcmp(&want, &d, sizeof d), "the import of an initialised descriptor is not the same bytes");
    dfa_attn_desc z = {0};
    set_shape(&z);
    CHECK(dfa__attn_desc_import(&z, &got, fn) == DFA_OK && !memcmp(&got, &want, sizeof got),
          "zero-initialised: not the normalised bytes (%s)", dfa_last_error());
    dfa_attn_desc newer = made_by_init();
    newer.version = 9;
    CHECK(dfa__attn_desc_import(&newer, &got, fn) == DFA_OK && !memcmp(&got, &want, sizeof got),
          "version 9 of the same size: not the normalised bytes (%s)", dfa_last_error());
    dfa_attn_desc *big = larger(200);
    memset(&got, 0xff, sizeof got);
    CHECK(dfa__attn_desc_import(big, &got, fn) == DFA_ERR_UNSUPPORTED && poisoned(&got, sizeof got),
          "struct_size 200: accepted or *out written (%s)", dfa_last_error());
    free(big);
}

/* A caller's distributed descriptor from a newer header: attn of attn_size bytes, the whole
   struct of size bytes (malloc'd, exactly), schedule and overlap after the caller's attn. */
static unsigned char *dist_bytes(uint32_t size, uint32_t attn_size, dfa_schedule s, int overlap) {
    unsigned char *p = calloc(1, size);
    dfa_dist_desc d = dfa_dist_desc_init(B, SQ, H, HKV, D);
    d.struct_size = size;
    d.attn.struct_size = attn_size;
    memcpy(p, &d, offsetof(dfa_dist_desc, attn) + offsetof(dfa_attn_desc, reserved));
    const size_t at = offsetof(dfa_dist_desc, attn) + attn_size;
    if (at + sizeof s + sizeof overlap <= size) { /* else the caller's fields do not fit: refused */
        memcpy(p + at, &s, sizeof s);
        memcpy(p + at + sizeof s, &overlap, sizeof overlap);
    }
    return p;
}

static void expect_dist_refused(const void *p, dfa_status want, const char *word, const char *what) {
    dfa_dist_desc out;
    memset(&out, 0xff, sizeof out);
    dfa_status st = dfa__dist_desc_import(p, &out, "test");
    CHECK(st == want && strstr(dfa_last_error(), word) != NULL, "%s: %s, want %s naming '%s' (%s)", what,
          dfa_status_string(st), dfa_status_string(want), word, dfa_last_error());
    CHECK(poisoned(&out, sizeof out), "%s: *out written on refusal", what);
}

static void test_dist_desc(void) {
    static const char fn[] = "test";
    const dfa_dist_desc i = dfa_dist_desc_init(B, SQ, H, HKV, D);
    const dfa_attn_desc a = dfa_attn_desc_init(B, SQ, SQ, H, HKV, D);
    CHECK(i.struct_size == DFA_DIST_DESC_SIZE_V1 && i.magic == DFA_DESC_MAGIC && i.version == DFA_DESC_VERSION &&
              i.reserved_header == 0 && !memcmp(&i.attn, &a, sizeof a) && i.schedule == DFA_SCHEDULE_BALANCED &&
              i.overlap == 0 && !memcmp(i.reserved, (uint64_t[4]){0}, sizeof i.reserved),
          "dfa_dist_desc_init: header, attn or defaults wrong");

    dfa_dist_desc want, got;
    CHECK(dfa__dist_desc_import(&i, &want, fn) == DFA_OK && !memcmp(&want, &i, sizeof i),
          "dfa_dist_desc_init does not import to itself (%s)", dfa_last_error());
    dfa_dist_desc z = {0}; /* zero-initialised, fields set: the same descriptor */
    z.attn.batch = B, z.attn.seqlen_q = z.attn.seqlen_k = SQ, z.attn.num_heads = H, z.attn.num_kv_heads = HKV;
    z.attn.head_dim = D;
    CHECK(dfa__dist_desc_import(&z, &got, fn) == DFA_OK && !memcmp(&got, &want, sizeof got),
          "zero-initialised dfa_dist_desc: not the normalised bytes (%s)", dfa_last_error());
    z.attn = a; /* an initialised attn in a zero-initialised outer descriptor */
    CHECK(dfa__dist_desc_import(&z, &got, fn) == DFA_OK && !memcmp(&got, &want, sizeof got),
          "zero-initialised outer, initialised attn: not the normalised bytes (%s)", dfa_last_error());

    /* the caller's layout at this library's sizes: schedule and overlap after attn */
    unsigned char *p = dist_bytes(DFA_DIST_DESC_SIZE_V1, DFA_ATTN_DESC_SIZE_V1, DFA_SCHEDULE_RING, 1);
    CHECK(dfa__dist_desc_import((dfa_dist_desc *)(void *)p, &got, fn) == DFA_OK, "byte-built descriptor refused: %s",
          dfa_last_error());
    CHECK(got.schedule == DFA_SCHEDULE_RING && got.overlap == 1 && !memcmp(&got.attn, &want.attn, sizeof got.attn) &&
              got.struct_size == sizeof got,
          "byte-built: schedule %d overlap %d, or attn/header differ", (int)got.schedule, got.overlap);
    free(p);
    /* a newer header whose descriptors grew: refused by their sizes */
    p = dist_bytes(200, 144, DFA_SCHEDULE_RING, 1);
    expect_dist_refused(p, DFA_ERR_UNSUPPORTED, "d->struct_size = 200 is larger", "larger outer descriptor");
    free(p);
    p = dist_bytes(DFA_DIST_DESC_SIZE_V1, 144, DFA_SCHEDULE_RING, 1);
    expect_dist_refused(p, DFA_ERR_UNSUPPORTED, "d->attn.struct_size = 144 is larger", "larger attn");
    free(p);

    dfa_dist_desc d = i;
    d.reserved[3] = 1;
    expect_dist_refused(&d, DFA_ERR_UNSUPPORTED, "(d->reserved)", "dist reserved");
    d = i;
    d.attn.reserved[1] = 1;
    expect_dist_refused(&d, DFA_ERR_UNSUPPORTED, "(d->attn.reserved)", "attn reserved");
    d = i;
    d.struct_size = 136;
    expect_dist_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->struct_size = 136", "outer struct_size 136");
    d = i;
    d.attn.struct_size = 0xdeadbeefu;
    expect_dist_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->attn.struct_size", "attn struct_size garbage");
    d = i;
    d.attn.magic = 1;
    expect_dist_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->attn.magic", "attn magic");
    d = i;
    d.magic = 0;
    expect_dist_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->magic", "outer magic");
    d = i;
    d.attn.reserved_header = 5;
    expect_dist_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->attn.reserved_header", "attn reserved_header");
    expect_dist_refused(NULL, DFA_ERR_INVALID_ARGUMENT, "descriptor", "NULL");
}

int main(void) {
    tl_init("test_desc");
    tl_fill_normal(DFA_F32, q, NQ, 1.0);
    tl_fill_normal(DFA_F32, k, NK, 1.0);
    tl_fill_normal(DFA_F32, v, NK, 1.0);
    tl_fill_normal(DFA_F32, dout, NQ, 1.0);
    tl_fill_normal(DFA_F32, o_part, NQ, 1.0);
    for (int i = 0; i < NL; i++) lse_part[i] = (float)tl_rand_normal();
    const dfa_attn_desc d = made_by_init();
    CHECK(dfa_attn_fwd(&d, q, k, v, o_ref, lse_ref) == DFA_OK, "reference forward: %s", dfa_last_error());
    CHECK(dfa_attn_bwd(&d, q, k, v, o_ref, lse_ref, dout, dq_ref, dk_ref, dv_ref) == DFA_OK,
          "reference backward: %s", dfa_last_error());
    test_accepted();
    test_refused();
    test_attn_import();
    test_dist_desc();
    return tl_finish("test_desc");
}
