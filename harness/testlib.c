#include "testlib.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_values.h"
#include "common/dtype.h"

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

size_t tl_dtype_size(dfa_dtype t) { return dfa__dtype_size(t); }

void *tl_alloc(dfa_dtype t, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * tl_dtype_size(t));
    if (!p) {
        fprintf(stderr, "test: out of memory allocating %lld elements\n", (long long)n);
        exit(2);
    }
    return p;
}

/* The storage types through the library's own conversions (src/common/dtype.h), so that a
   test rounds exactly as the library stores; tests/cpu/test_dtype.c checks those conversions
   against an independent exact reference. */
double tl_get(dfa_dtype t, const void *p, int64_t i) {
    if (t == DFA_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == DFA_BF16 ? (double)dfa__bf16_to_f32(h) : (double)dfa__f16_to_f32(h);
}

void tl_set(dfa_dtype t, void *p, int64_t i, double x) {
    const float f = (float)x;
    if (t == DFA_F32) ((float *)p)[i] = f;
    else ((uint16_t *)p)[i] = t == DFA_BF16 ? dfa__f32_to_bf16(f) : dfa__f32_to_f16(f);
}

void tl_fill_normal(dfa_dtype t, void *p, int64_t n, double stddev) {
    for (int64_t i = 0; i < n; i++) {
        tl_set(t, p, i, stddev * tl_rand_normal());
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
    snprintf(buf, sizeof buf, "B=%d Sq=%d Sk=%d H=%d Hkv=%d D=%d %s causal=%d q_start=%lld k_start=%lld",
             d->batch, d->seqlen_q, d->seqlen_k, d->num_heads, d->num_kv_heads, d->head_dim,
             cli_dtype_name(d->dtype), d->causal, (long long)d->q_start,
             (long long)d->k_start);
    const size_t n = strlen(buf);
    if (d->q_doc) snprintf(buf + strlen(buf), sizeof buf - n, " docs");
    if (d->flags & DFA_FLAG_WINDOW)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " window=(%d,%d)", (int)d->window_left,
                 (int)d->window_right);
    if (d->head_dim_v) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " Dv=%d", (int)d->head_dim_v);
    if (d->softcap > 0) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " softcap=%g", (double)d->softcap);
    if (d->sinks) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " sinks");
    return buf;
}

void *tl_slice_rows(dfa_dtype t, const void *src, int B, int N, int r0, int n, int64_t width) {
    const size_t es = tl_dtype_size(t), row = (size_t)width * es;
    char *dst = tl_alloc(t, (int64_t)B * n * width);
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * row, (const char *)src + ((size_t)b * N + r0) * row, (size_t)n * row);
    return dst;
}

double *tl_slice_rows_f64(const double *src, int B, int N, int r0, int n, int64_t width) {
    double *dst = malloc(sizeof(double) * (size_t)B * n * width);
    if (!dst) abort();
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * width, src + ((size_t)b * N + r0) * width, sizeof(double) * (size_t)n * width);
    return dst;
}

void tl_random_docs(int32_t *ids, int N, int n) {
    int32_t id = tl_rand_int(-5, 5);
    for (int i = 0; i < N;) {
        const int kind = tl_rand_int(0, 3);
        const int len = kind == 0 ? 1 : kind == 1 ? tl_rand_int(2, 4) : kind == 2 ? n : tl_rand_int(n + 1, 3 * n + 1);
        for (int r = 0; r < len && i < N; r++) ids[i++] = id;
        id += tl_rand_int(1, 3);
    }
}

void tl_busy_docs(int32_t *ids, int N, int n) {
    int32_t id = 0;
    for (int i = 0; i < N - n; id++) {
        const int chunk_end = (i / n + 1) * n, tile_end = i - i % n + ((i % n) / 128 + 1) * 128;
        const int len = tl_rand_int(1, 4), end = chunk_end < tile_end ? chunk_end : tile_end;
        for (int r = 0; r < len && i < end; r++) ids[i++] = id;
    }
    for (int i = N - n; i < N; i++) ids[i] = id;
}

void tl_straddle_docs(int32_t *ids, int N, int n) {
    const int from = N >= 2 * n ? N - 2 * n + n / 2 : 0, to = N - n / 4;
    int32_t id = 0;
    for (int i = 0; i < N; id++) {
        if (i == from) {
            while (i < to) ids[i++] = id;
            continue;
        }
        const int chunk_end = (i / n + 1) * n, tile_end = i - i % n + ((i % n) / 128 + 1) * 128;
        const int len = tl_rand_int(1, 4), end = chunk_end < tile_end ? chunk_end : tile_end;
        for (int r = 0; r < len && i < end && (i < from || i >= to); r++) ids[i++] = id;
    }
}
