#include "fma_peak.h"
#include "measure.h"

#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* 12 independent accumulators per thread: more than FMA latency x FMA ports on
   current x86 cores, so the loop runs at the FMA throughput. Named variables, so
   the compiler keeps them in registers. */
#define CHAINS(T, SET) T a0 = SET(1), a1 = SET(2), a2 = SET(3), a3 = SET(4), a4 = SET(5), a5 = SET(6), \
                         a6 = SET(7), a7 = SET(8), a8 = SET(9), a9 = SET(10), a10 = SET(11), a11 = SET(12)
#define STEP(F) a0 = F(a0, x, y), a1 = F(a1, x, y), a2 = F(a2, x, y), a3 = F(a3, x, y), a4 = F(a4, x, y), \
                a5 = F(a5, x, y), a6 = F(a6, x, y), a7 = F(a7, x, y), a8 = F(a8, x, y), a9 = F(a9, x, y),   \
                a10 = F(a10, x, y), a11 = F(a11, x, y)
#define SUM(ADD) ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11)))
#define ITERS 1000000L /* per call: 12 M vector FMAs */

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_X86 1

__attribute__((target("avx512f"))) static float run_avx512(void) {
    const __m512 x = _mm512_set1_ps(0.9999999f), y = _mm512_set1_ps(1e-7f);
    CHAINS(__m512, _mm512_set1_ps);
    for (long i = 0; i < ITERS; i++) STEP(_mm512_fmadd_ps);
    return _mm512_reduce_add_ps(SUM(_mm512_add_ps));
}

__attribute__((target("avx2,fma"))) static float run_avx2(void) {
    const __m256 x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
    CHAINS(__m256, _mm256_set1_ps);
    for (long i = 0; i < ITERS; i++) STEP(_mm256_fmadd_ps);
    float o[8];
    _mm256_storeu_ps(o, SUM(_mm256_add_ps));
    return o[0] + o[7];
}
#endif

static float fmaf_plain(float a, float x, float y) { return a * x + y; }
#define ID(v) ((float)(v))
#define PLUS(a, b) ((a) + (b))
static float run_scalar(void) {
    const float x = 0.9999999f, y = 1e-7f;
    CHAINS(float, ID);
    for (long i = 0; i < ITERS; i++) STEP(fmaf_plain);
    return SUM(PLUS);
}

/* GFLOP/s of `threads` threads each calling run() until `seconds` have passed. */
static double measure(float (*run)(void), int lanes, int threads, double seconds) {
    double best = 0;
    volatile float sink = 0;
    for (int trial = 0; trial < 3; trial++) {
        long calls_total = 0;
        const double t0 = measure_now();
        double t1 = t0;
#pragma omp parallel num_threads(threads) reduction(+ : calls_total)
        {
            long calls = 0;
            float s = 0;
            while (measure_now() - t0 < seconds / 3) {
                s += run();
                calls++;
            }
            sink += s;
            calls_total += calls;
        }
        t1 = measure_now();
        const double g = 2.0 * lanes * 12.0 * ITERS * (double)calls_total / (t1 - t0) / 1e9;
        best = g > best ? g : best;
    }
    (void)sink;
    return best;
}

int fma_peak_measure(int threads, double seconds, fma_peak_result out[3]) {
    int n = 0;
#ifdef HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) out[n++] = (fma_peak_result){"avx512", measure(run_avx512, 16, threads, seconds)};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        out[n++] = (fma_peak_result){"avx2", measure(run_avx2, 8, threads, seconds)};
#endif
    out[n++] = (fma_peak_result){"scalar", measure(run_scalar, 1, threads, seconds)};
    return n;
}
