#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int tl_checks, tl_failures;
static uint64_t rng_state;
static uint64_t seed;

void tl_fail_at(const char *file, int line, const char *fmt, ...) {
    tl_failures++;
    if (tl_failures > 50) return; /* enough to diagnose */
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  (seed %llu)\n", (unsigned long long)seed);
}

int tl_finish(const char *name) {
    printf("%s: %d checks, %d failures (seed %llu)\n", name, tl_checks, tl_failures, (unsigned long long)seed);
    return tl_failures ? 1 : 0;
}

void tl_init(const char *name) {
    const char *env = getenv("DFA_TEST_SEED");
    if (env && *env) {
        seed = strtoull(env, NULL, 10);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    rng_state = seed;
    printf("%s: seed %llu (set DFA_TEST_SEED to repeat)\n", name, (unsigned long long)seed);
    fflush(stdout);
}

uint64_t tl_rand_u64(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tl_rand_uniform(void) { return (double)(tl_rand_u64() >> 11) * 0x1.0p-53; }

double tl_rand_normal(void) {
    double u = tl_rand_uniform(), v = tl_rand_uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

int tl_rand_int(int lo, int hi) { return lo + (int)(tl_rand_u64() % (uint64_t)(hi - lo + 1)); }

size_t tl_dtype_size(dfa_dtype t) { return t == DFA_F32 ? 4 : 2; }

void *tl_alloc(dfa_dtype t, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * tl_dtype_size(t));
    if (!p) {
        fprintf(stderr, "test: out of memory allocating %lld elements\n", (long long)n);
        exit(2);
    }
    return p;
}

/* Exact conversions, written independently of the library's. */
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double f16_to_f64(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)m, -24);
    return s * ldexp(1024.0 + m, e - 25);
}

double tl_get(dfa_dtype t, const void *p, int64_t i) {
    if (t == DFA_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DFA_BF16 ? (double)bf16_to_f32(h) : f16_to_f64(h);
}

/* Round to the nearest representable value by searching the two neighbours (slow, plain, exact). */
static uint16_t round16(dfa_dtype t, double x) {
    if (isnan(x)) return t == DFA_BF16 ? 0x7fc0 : 0x7e00;
    /* binary search over the ordered positive codes */
    double ax = fabs(x);
    uint16_t sign = x < 0 ? 0x8000 : 0;
    uint16_t lo = 0, hi = t == DFA_BF16 ? 0x7f80 : 0x7c00; /* +0 .. +inf */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        double v = t == DFA_BF16 ? (double)bf16_to_f32(mid) : f16_to_f64(mid);
        if (v <= ax) lo = mid; else hi = mid;
    }
    double vlo = t == DFA_BF16 ? (double)bf16_to_f32(lo) : f16_to_f64(lo);
    double vhi = t == DFA_BF16 ? (double)bf16_to_f32(hi) : f16_to_f64(hi);
    uint16_t r;
    if (ax - vlo < vhi - ax) r = lo;
    else if (ax - vlo > vhi - ax) r = hi;
    else r = (lo & 1) ? hi : lo;
    return (uint16_t)(sign | r);
}

void tl_set(dfa_dtype t, void *p, int64_t i, double x) {
    if (t == DFA_F32) ((float *)p)[i] = (float)x;
    else ((uint16_t *)p)[i] = round16(t, x);
}

void tl_fill_normal(dfa_dtype t, void *p, int64_t n, double stddev) {
    for (int64_t i = 0; i < n; i++) {
        double x = stddev * tl_rand_normal();
        if (t == DFA_F32) ((float *)p)[i] = (float)x;
        else {
            /* bf16/f16: truncate a float32 then fix with exact rounding only when cheap enough */
            tl_set(t, p, i, (double)(float)x);
        }
    }
}

void tl_poison(void *p, size_t bytes) { memset(p, 0xff, bytes); }

int64_t tl_count_nan(dfa_dtype t, const void *p, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += isnan(tl_get(t, p, i)) ? 1 : 0;
    return c;
}

double *tl_to_f64(dfa_dtype t, const void *p, int64_t n) {
    double *r = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!r) exit(2);
    for (int64_t i = 0; i < n; i++) r[i] = tl_get(t, p, i);
    return r;
}

double tl_max_err(dfa_dtype t, const void *a, const double *ref, int64_t n) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = tl_get(t, a, i);
        double d = fabs(x - ref[i]);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

double tl_max_abs(const double *ref, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    return m;
}

double tl_tolerance(dfa_dtype t, tl_quantity what, double naive_err, const double *ref, int64_t n) {
    double ulps = t == DFA_F32 ? 0x1p-18 : t == DFA_F16 ? 0x1p-11 : 0x1p-8;
    if (what == TL_GRADIENT && t != DFA_F32) ulps *= 2;
    return 2.0 * naive_err + ulps * fmax(1.0, tl_max_abs(ref, n));
}

dfa_attn_desc tl_desc(int b, int sq, int sk, int h, int hkv, int d, dfa_dtype t, int causal, int64_t q_start,
                      int64_t k_start) {
    dfa_attn_desc x = dfa_attn_desc_init(b, sq, sk, h, hkv, d);
    x.dtype = t;
    x.causal = causal;
    x.q_start = q_start;
    x.k_start = k_start;
    return x;
}

const char *tl_desc_str(const dfa_attn_desc *d) {
    static _Thread_local char buf[256];
    static const char *names[] = {"f32", "bf16", "f16"};
    snprintf(buf, sizeof buf, "B=%d Sq=%d Sk=%d H=%d Hkv=%d D=%d %s causal=%d q_start=%lld k_start=%lld",
             d->batch, d->seqlen_q, d->seqlen_k, d->num_heads, d->num_kv_heads, d->head_dim,
             (unsigned)d->dtype < 3 ? names[d->dtype] : "?", d->causal, (long long)d->q_start,
             (long long)d->k_start);
    return buf;
}
