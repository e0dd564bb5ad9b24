/* The storage-type conversions of src/common/dtype.h (bf16 and f16 to and from float32)
 * against an exact reference written independently here: decoding by the definition of the
 * formats (ldexp), rounding by searching the two neighbouring codes, ties to even, IEEE
 * overflow to infinity. The test harness (harness/testlib.c) and the oracle convert through
 * dtype.h, so this program is what keeps them honest. Every 16-bit code is decoded; every
 * code's value, the midpoints between neighbours and one float32 step either side of them,
 * and random float32 bit patterns are rounded. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "testlib.h"

typedef struct {
    const char *name;
    int man_bits, exp_bits; /* bf16: 7, 8; f16: 10, 5 */
} format;
static const format BF16 = {"bf16", 7, 8}, F16 = {"f16", 10, 5};

/* The value of code h by the definition; with raw, the all-ones exponent counts as one more
   binade (the value an infinity code would have if the format went on), for rounding. */
static double ref_decode(const format *f, unsigned h, int raw) {
    const unsigned emax = (1u << f->exp_bits) - 1, bias = emax / 2;
    const unsigned e = (h >> f->man_bits) & emax, m = h & ((1u << f->man_bits) - 1);
    const double s = (h >> (f->man_bits + f->exp_bits)) & 1 ? -1.0 : 1.0;
    if (e == emax && !raw) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, 1 - (int)bias - f->man_bits);
    return s * ldexp((double)((1u << f->man_bits) + m), (int)e - (int)bias - f->man_bits);
}

/* Nearest code to x, ties to the even code; past the largest finite value by half a step or
   more, infinity. */
static unsigned ref_round(const format *f, double x) {
    const unsigned sign = 1u << (f->man_bits + f->exp_bits), inf = ((1u << f->exp_bits) - 1) << f->man_bits;
    if (isnan(x)) return inf | (1u << (f->man_bits - 1));
    const double ax = fabs(x);
    unsigned lo = 0, hi = inf; /* codes ordered by value: +0 .. the infinity code */
    while (hi - lo > 1) {
        const unsigned mid = (lo + hi) / 2;
        if (ref_decode(f, mid, 1) <= ax) lo = mid;
        else hi = mid;
    }
    const double dlo = ax - ref_decode(f, lo, 1), dhi = ref_decode(f, hi, 1) - ax;
    const unsigned r = dlo < dhi ? lo : dlo > dhi ? hi : (lo & 1) ? hi : lo;
    return (x < 0 || (x == 0 && signbit(x)) ? sign : 0) | r;
}

static float lib_decode(const format *f, unsigned h) {
    return f == &BF16 ? dfa__bf16_to_f32((uint16_t)h) : dfa__f16_to_f32((uint16_t)h);
}
static unsigned lib_round(const format *f, float x) {
    return f == &BF16 ? dfa__f32_to_bf16(x) : dfa__f32_to_f16(x);
}

static int same(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

static long rounded; /* values checked by check_round */

static void check_round(const format *f, float x) {
    const unsigned want = ref_round(f, x), got = lib_round(f, x);
    rounded++;
    if (isnan(x)) CHECK(isnan(lib_decode(f, got)), "%s: NaN %a rounds to code 0x%04x, not a NaN", f->name, x, got);
    else CHECK(got == want, "%s: %a rounds to 0x%04x, the nearest (ties to even) is 0x%04x", f->name, x, got, want);
}

static void test_format(const format *f) {
    const unsigned codes = 1u << (1 + f->exp_bits + f->man_bits);
    const unsigned inf = ((1u << f->exp_bits) - 1) << f->man_bits, sign = codes / 2;
    for (unsigned h = 0; h < codes; h++) {
        const double want = ref_decode(f, h, 0);
        const float got = lib_decode(f, h);
        CHECK(same(got, want), "%s: code 0x%04x decodes to %a, by definition %a", f->name, h, (double)got, want);
    }
    for (unsigned s = 0; s <= sign; s += sign)
        for (unsigned h = 0; h < inf; h++) { /* every finite code and its upper neighbour */
            const double v = ref_decode(f, s | h, 1), next = ref_decode(f, s | (h + 1), 1);
            const float mid = (float)(0.5 * (v + next)); /* exact: a few more bits than the format */
            check_round(f, (float)v);
            check_round(f, mid);
            check_round(f, nextafterf(mid, 0.0f));
            check_round(f, nextafterf(mid, s ? -INFINITY : INFINITY));
        }
    const float special[] = {INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -0.0f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) check_round(f, special[i]);
    for (int i = 0; i < 1000000; i++) { /* random bit patterns: every exponent, NaNs included */
        const uint32_t u = (uint32_t)tl_rand_u64();
        float x;
        memcpy(&x, &u, 4);
        check_round(f, x);
    }
    /* A value survives the round trip through its own code. */
    for (unsigned h = 0; h < codes; h++)
        if (!isnan(lib_decode(f, h)))
            CHECK(lib_round(f, lib_decode(f, h)) == h, "%s: code 0x%04x does not survive a round trip", f->name, h);
}

int main(void) {
    tl_init("test_dtype");
    test_format(&BF16);
    test_format(&F16);
    printf("dtype: every bf16 and f16 code decoded, %ld float32 values rounded against the reference\n", rounded);
    return tl_finish("test_dtype");
}
