/* A small test harness shared by every test program: checks, random inputs,
 * poisoned outputs, and comparison against the float64 oracle. */
#ifndef DFA_HARNESS_TESTLIB_H
#define DFA_HARNESS_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

/* ---- checks ---- */
extern int tl_checks, tl_failures;
void tl_fail_at(const char *file, int line, const char *fmt, ...);
#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        tl_checks++;                                                                                       \
        if (!(cond)) tl_fail_at(__FILE__, __LINE__, __VA_ARGS__);                                          \
    } while (0)
/* Prints "<name>: N checks, M failures" and returns the process exit code. */
int tl_finish(const char *name);
/* Sets the seed from DFA_TEST_SEED or the clock, and prints it. */
void tl_init(const char *name);

/* ---- random numbers (splitmix64; seeded by tl_init) ---- */
uint64_t tl_rand_u64(void);
double tl_rand_uniform(void); /* [0, 1) */
double tl_rand_normal(void);
int tl_rand_int(int lo, int hi); /* inclusive */

/* ---- tensors in a storage dtype ---- */
size_t tl_dtype_size(dfa_dtype t);
void *tl_alloc(dfa_dtype t, int64_t n); /* aborts on failure (tests may) */
void tl_fill_normal(dfa_dtype t, void *p, int64_t n, double stddev);
void tl_poison(void *p, size_t bytes);            /* every byte 0xFF: NaN in f32, bf16 and f16 */
int64_t tl_count_nan(dfa_dtype t, const void *p, int64_t n);
double tl_get(dfa_dtype t, const void *p, int64_t i);
void tl_set(dfa_dtype t, void *p, int64_t i, double x); /* to float32, then as the library stores (nearest even) */
double *tl_to_f64(dfa_dtype t, const void *p, int64_t n); /* malloc'd copy */

/* ---- comparison ---- */
/* max |a - ref| over n elements; NaN anywhere gives +inf. */
double tl_max_err(dfa_dtype t, const void *a, const double *ref, int64_t n);
double tl_max_abs(const double *ref, int64_t n);

/* The low-precision tolerance rule shared by every test: a result may be at most twice as far
   from the float64 oracle as a naive same-precision computation (naive_err), plus an absolute
   term of about one unit in the last place of the storage type at the largest reference value
   (a result next to a rounding midpoint may round either way after any float32 error), and two
   for gradients (they also inherit the rounding of the stored o through D = rowsum(dO * o),
   which with very few keys can dominate). float32: a few float32 ulps. */
typedef enum { TL_OUTPUT, TL_GRADIENT } tl_quantity;
double tl_tolerance(dfa_dtype t, tl_quantity what, double naive_err, const double *ref, int64_t n);

/* ---- sequence chunks (the distributed tests) ---- */
/* Rows [r0, r0 + n) of a [batch, N, width] tensor, as a new [batch, n, width] one (malloc'd). */
void *tl_slice_rows(dfa_dtype t, const void *src, int B, int N, int r0, int n, int64_t width);
double *tl_slice_rows_f64(const double *src, int B, int N, int r0, int n, int64_t width);

/* Document ids of N positions in chunks of n (non-decreasing): tl_random_docs draws lengths 1,
   short, a chunk and longer than a chunk; tl_busy_docs short documents (1 to 4 rows, none
   across a chunk's end or a 128-row tile's) up to the last chunk, then one document over all of
   it, so that the last chunk's own block is most of the work and no pair of chunks shares a
   document: a balanced masked plan then lends that block's first rows (src/seqpar/schedule.h). */
void tl_random_docs(int32_t *ids, int N, int n);
void tl_busy_docs(int32_t *ids, int N, int n);
/* tl_straddle_docs: short documents as tl_busy_docs, except one from half-way into the second to
   last chunk (the start of the only chunk when N = n) to 3/4 into the last: the pair of the last
   two chunks is dense and the heaviest, so a balanced masked plan splits it (schedule.h; a third
   rank's piece reads half a chunk of keys, within the workspace bound). */
void tl_straddle_docs(int32_t *ids, int N, int n);

/* ---- descriptors ---- */
dfa_attn_desc tl_desc(int b, int sq, int sk, int h, int hkv, int d, dfa_dtype t, int causal, int64_t q_start,
                      int64_t k_start);
const char *tl_desc_str(const dfa_attn_desc *d); /* static buffer */

#endif
