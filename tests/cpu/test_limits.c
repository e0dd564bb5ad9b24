/* The edges of the documented ranges, where arithmetic or trust would break:
 *  - offsets: |q_start|, |k_start| and |q_start - k_start| < 2^62. Just inside, causal and
 *    windowed calls match the float64 oracle (every key visible, or none); a pair of offsets
 *    each inside 2^62 whose difference is not is refused by name, outputs untouched (a
 *    difference of 2^63 - 2 used to wrap and mask every key);
 *  - struct_size: a descriptor on the caller's stack that claims 4096 bytes is refused before
 *    any byte past this library's descriptor is read (AddressSanitizer watches), for the
 *    attention descriptor and for both headers of the distributed one;
 *  - dfa_set_num_threads: at most 4 threads per online CPU, refused by name above. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/desc.h"
#include "cpu/threads.h"
#include "oracle.h"
#include "testlib.h"

enum { B = 2, SQ = 37, SK = 29, H = 4, HKV = 2, D = 16 };
enum { NQ = B * SQ * H * D, NK = B * SK * HKV * D, NL = B * H * SQ };

static float q[NQ], k[NK], v[NK], dout[NQ], o[NQ], lse[NL], dq[NQ], dk[NK], dv[NK];
static double q64[NQ], k64[NK], v64[NK], dout64[NQ], o64[NQ], lse64[NL], dq64[NQ], dk64[NK], dv64[NK];

#define TWO62 ((int64_t)1 << 62)

static int poisoned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0xff) return 0;
    return 1;
}

/* Forward and backward against the oracle at these offsets (and window). */
static void expect_exact(int64_t q_start, int64_t k_start, int causal, int window_left, int window_right,
                         const char *what) {
    dfa_attn_desc d = dfa_attn_desc_init(B, SQ, SK, H, HKV, D);
    d.causal = causal;
    d.q_start = q_start;
    d.k_start = k_start;
    if (window_left || window_right) {
        d.flags = DFA_FLAG_WINDOW;
        d.window_left = window_left;
        d.window_right = window_right;
    }
    oracle_fwd(&d, q64, k64, v64, o64, lse64);
    oracle_bwd(&d, q64, k64, v64, dout64, dq64, dk64, dv64);
    tl_poison(o, sizeof o);
    tl_poison(lse, sizeof lse);
    dfa_status st = dfa_attn_fwd(&d, q, k, v, o, lse);
    CHECK(st == DFA_OK, "%s: forward %s (%s)", what, dfa_status_string(st), dfa_last_error());
    if (st) return;
    const double tol = 1e-5;
    CHECK(tl_max_err(DFA_F32, o, o64, NQ) <= tol, "%s: o off the oracle by %g", what, tl_max_err(DFA_F32, o, o64, NQ));
    int lse_bad = 0;
    for (int i = 0; i < NL; i++) {
        const double want = lse64[i], got = lse[i];
        if (want == -1.0 / 0.0 ? got != want : !(got - want <= tol && want - got <= tol)) lse_bad++;
    }
    CHECK(!lse_bad, "%s: %d lse values off the oracle (lse[0] = %g, oracle %g)", what, lse_bad, (double)lse[0], lse64[0]);
    st = dfa_attn_bwd(&d, q, k, v, o, lse, dout, dq, dk, dv);
    CHECK(st == DFA_OK, "%s: backward %s (%s)", what, dfa_status_string(st), dfa_last_error());
    if (st) return;
    CHECK(tl_max_err(DFA_F32, dq, dq64, NQ) <= 1e-4 && tl_max_err(DFA_F32, dk, dk64, NK) <= 1e-4 &&
              tl_max_err(DFA_F32, dv, dv64, NK) <= 1e-4,
          "%s: gradients off the oracle (dq %g dk %g dv %g)", what, tl_max_err(DFA_F32, dq, dq64, NQ),
          tl_max_err(DFA_F32, dk, dk64, NK), tl_max_err(DFA_F32, dv, dv64, NK));
}

/* Refused by the forward and the backward with DFA_ERR_INVALID_ARGUMENT naming `word`,
   outputs untouched. */
static void expect_refused(const dfa_attn_desc *d, dfa_status want, const char *word, const char *what) {
    for (int call = 0; call < 2; call++) {
        tl_poison(o, sizeof o), tl_poison(lse, sizeof lse);
        tl_poison(dq, sizeof dq), tl_poison(dk, sizeof dk), tl_poison(dv, sizeof dv);
        dfa_status st = call == 0 ? dfa_attn_fwd(d, q, k, v, o, lse)
                                  : dfa_attn_bwd(d, q, k, v, o, lse, dout, dq, dk, dv);
        CHECK(st == want && strstr(dfa_last_error(), word) != NULL, "%s (%s): %s, want %s naming '%s' (%s)", what,
              call ? "bwd" : "fwd", dfa_status_string(st), dfa_status_string(want), word, dfa_last_error());
        CHECK(poisoned(o, sizeof o) && poisoned(lse, sizeof lse) && poisoned(dq, sizeof dq) && poisoned(dk, sizeof dk) &&
                  poisoned(dv, sizeof dv),
              "%s (%s): an output was touched", what, call ? "bwd" : "fwd");
    }
}

static void test_offsets(void) {
    /* the largest relative offsets in range, both ways: every key visible, or none */
    expect_exact(TWO62 / 2, -(TWO62 / 2 - 1), 1, 0, 0, "causal, q_start - k_start = 2^62 - 1");
    expect_exact(-(TWO62 / 2), TWO62 / 2 - 1, 1, 0, 0, "causal, q_start - k_start = -(2^62 - 1)");
    expect_exact(TWO62 - 1 - SK, TWO62 - 1 - SK - 3, 1, 0, 0, "causal at the top of the range");
    expect_exact(-(TWO62 - 1), -(TWO62 - 1) + 5, 1, 0, 0, "causal at the bottom of the range");
    expect_exact(TWO62 / 2, -(TWO62 / 2 - 1), 0, 2147483647, -1, "window_left INT32_MAX, 2^62 - 1 apart");
    expect_exact(TWO62 / 2, -(TWO62 / 2 - 1), 1, -1, 3, "window right 3, causal, 2^62 - 1 apart");
    expect_exact(-(TWO62 / 2), TWO62 / 2 - 1, 0, -1, 2147483647, "window_right INT32_MAX, -(2^62 - 1) apart");
    expect_exact(TWO62 - 8, TWO62 - 20, 1, 7, 0, "a window near 2^62");

    /* each offset inside 2^62, their difference not */
    const struct {
        int64_t q, k;
        int window;
    } out[] = {{TWO62 - 1, -(TWO62 - 1), 0}, {TWO62 - 1, -(TWO62 - 1), 1}, {-(TWO62 - 1), TWO62 - 1, 0},
               {TWO62 / 2, -(TWO62 / 2), 0}, {-(TWO62 / 2), TWO62 / 2, 1}};
    for (size_t c = 0; c < sizeof out / sizeof out[0]; c++) {
        dfa_attn_desc d = dfa_attn_desc_init(B, SQ, SK, H, HKV, D);
        d.causal = 1;
        d.q_start = out[c].q;
        d.k_start = out[c].k;
        if (out[c].window) d.flags = DFA_FLAG_WINDOW, d.window_left = 16, d.window_right = 0;
        char what[128];
        snprintf(what, sizeof what, "q_start %lld, k_start %lld%s", (long long)out[c].q, (long long)out[c].k,
                 out[c].window ? ", window" : "");
        expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "d->q_start - d->k_start", what);
        d.causal = 0; /* the offsets are checked whether or not a mask reads them */
        expect_refused(&d, DFA_ERR_INVALID_ARGUMENT, "|q_start - k_start| < 2^62", what);
    }
}

static void test_struct_size(void) {
    /* on the stack: nothing past sizeof may be read, whatever struct_size says */
    dfa_attn_desc d = dfa_attn_desc_init(B, SQ, SK, H, HKV, D);
    const uint32_t newer[] = {144, 200, 4096};
    for (int s = 0; s < 3; s++) {
        d.struct_size = newer[s];
        char word[64], what[64];
        snprintf(word, sizeof word, "d->struct_size = %u is larger", newer[s]);
        snprintf(what, sizeof what, "a %zu-byte descriptor claiming %u", sizeof d, newer[s]);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, word, what);
        expect_refused(&d, DFA_ERR_UNSUPPORTED, "newer distflash.h", what);
    }
    dfa_dist_desc x = dfa_dist_desc_init(B, SQ, H, HKV, D), out;
    for (int nested = 0; nested <= 1; nested++) {
        dfa_dist_desc y = x;
        if (nested) y.attn.struct_size = 4096;
        else y.struct_size = 4096;
        memset(&out, 0xff, sizeof out);
        const dfa_status st = dfa__dist_desc_import(&y, &out, "test");
        const char *word = nested ? "d->attn.struct_size = 4096" : "d->struct_size = 4096";
        CHECK(st == DFA_ERR_UNSUPPORTED && strstr(dfa_last_error(), word), "dist descriptor, %s: %s (%s)", word,
              dfa_status_string(st), dfa_last_error());
        CHECK(poisoned(&out, sizeof out), "dist descriptor, %s: *out written", word);
    }
}

static void test_threads(void) {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int max = dfa__max_threads();
    CHECK(max == 4 * (cpus > 0 ? cpus : 1), "the thread bound is %d for %ld CPUs", max, cpus);
    const int too_many[] = {max + 1, 200 * max, 2147483647};
    for (int i = 0; i < 3; i++) {
        const dfa_status st = dfa_set_num_threads(too_many[i]);
        char word[32];
        snprintf(word, sizeof word, "n = %d", too_many[i]);
        CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), word) &&
                  strstr(dfa_last_error(), "per online CPU"),
              "dfa_set_num_threads(%d): %s (%s)", too_many[i], dfa_status_string(st), dfa_last_error());
    }
    CHECK(dfa_set_num_threads(max) == DFA_OK, "dfa_set_num_threads(%d) refused: %s", max, dfa_last_error());
    CHECK(dfa__cpu_threads() == max, "after dfa_set_num_threads(%d) a call uses %d threads", max, dfa__cpu_threads());
    CHECK(dfa_set_num_threads(0) == DFA_OK, "dfa_set_num_threads(0) refused");
}

int main(void) {
    tl_init("test_limits");
    tl_fill_normal(DFA_F32, q, NQ, 1.0);
    tl_fill_normal(DFA_F32, k, NK, 1.0);
    tl_fill_normal(DFA_F32, v, NK, 1.0);
    tl_fill_normal(DFA_F32, dout, NQ, 1.0);
    for (int i = 0; i < NQ; i++) q64[i] = q[i], dout64[i] = dout[i];
    for (int i = 0; i < NK; i++) k64[i] = k[i], v64[i] = v[i];
    test_offsets();
    test_struct_size();
    test_threads();
    return tl_finish("test_limits");
}
