/* One rank's outputs of a distributed call against references on the whole sequence (the GPU
 * distributed tests: test_dist_gpu, test_dist_replay). */
#ifndef DFA_TESTS_GPU_DIST_CHECK_H
#define DFA_TESTS_GPU_DIST_CHECK_H

#include <math.h>
#include <stdlib.h>

#include "testlib.h"

/* The error budget of one output: what the naive same-precision path or the single-GPU call
   misses the oracle by (ref, n values), through tl_tolerance. */
static inline double dist_budget(dfa_dtype t, tl_quantity kind, const void *naive, const void *single, const double *ref,
                                 int64_t n) {
    return fmax(tl_tolerance(t, kind, tl_max_err(t, naive, ref, n), ref, n),
                tl_tolerance(t, kind, tl_max_err(t, single, ref, n), ref, n));
}

/* The budget of dsinks summed over the ranks ([H] values of d, the whole sequence's descriptor
   with host sinks): the rule on the naive float32 dsinks or the single-GPU call's, plus four
   standard deviations of the moves that rounding o to the storage type (unit roundoff u) makes
   in each row's D = dout . o, weighted by exp(sink - lse) (fdo, oref, lref: the oracle's). */
static inline double dist_dsinks_budget(const dfa_attn_desc *d, const float *naive, const float *single,
                                        const double *ref, const double *fdo, const double *oref, const double *lref) {
    const int H = d->num_heads, N = d->seqlen_q, Dv = d->head_dim_v ? d->head_dim_v : d->head_dim;
    const double u = d->dtype == DFA_F16 ? 0x1p-11 : d->dtype == DFA_BF16 ? 0x1p-8 : 0x1p-24;
    double spread = 0;
    for (int h = 0; h < H; h++) {
        double s2 = 0;
        for (int b = 0; b < d->batch; b++)
            for (int i = 0; i < N; i++) {
                const double p = exp(d->sinks[h] - lref[((int64_t)b * H + h) * N + i]);
                double r2 = 0;
                for (int c = 0; c < Dv; c++) {
                    const int64_t e = (((int64_t)b * N + i) * H + h) * Dv + c;
                    r2 += fdo[e] * oref[e] * fdo[e] * oref[e];
                }
                s2 += p * p * r2;
            }
        spread = fmax(spread, 4 * u * sqrt(s2));
    }
    return fmax(tl_tolerance(d->dtype, TL_GRADIENT, tl_max_err(DFA_F32, naive, ref, H), ref, H),
                tl_tolerance(d->dtype, TL_GRADIENT, tl_max_err(DFA_F32, single, ref, H), ref, H)) +
           spread;
}

/* One output: this rank's rows (host, the storage type), the single-GPU call's and the oracle's
   on the whole sequence ([B][N][width]), and the error budget. */
typedef struct {
    const char *name;
    const void *got, *single;
    const double *ref;
    int64_t width;
    double tol;
} dist_output;

/* Rows [r0, r0 + n) of each output against the oracle and the single-GPU call; lse ([B][H][n],
   float) against the oracle's ([B][H][N]) within 2e-5 relative, -inf where it is. With
   `expect` a CHECK fails for every miss; without, nothing is checked. Returns the misses. */
static inline int dist_check_rank(dfa_dtype t, const dist_output *out, int nout, const float *lse, const double *lref,
                                  int B, int H, int N, int r0, int n, int expect, int rank, const char *cfg) {
    int misses = 0;
    for (int i = 0; i < nout; i++) {
        const int64_t count = (int64_t)B * n * out[i].width;
        double *sref = tl_slice_rows_f64(out[i].ref, B, N, r0, n, out[i].width);
        double *one = tl_to_f64(t, out[i].single, (int64_t)B * N * out[i].width);
        double *sone = tl_slice_rows_f64(one, B, N, r0, n, out[i].width);
        const double e_ref = tl_max_err(t, out[i].got, sref, count), e_one = tl_max_err(t, out[i].got, sone, count);
        misses += !(e_ref <= out[i].tol) + !(e_one <= out[i].tol);
        CHECK(!expect || e_ref <= out[i].tol, "rank %d: %s vs oracle: %.3g > %.3g for %s", rank, out[i].name, e_ref,
              out[i].tol, cfg);
        CHECK(!expect || e_one <= out[i].tol, "rank %d: %s vs single GPU: %.3g > %.3g for %s", rank, out[i].name, e_one,
              out[i].tol, cfg);
        free(sref);
        free(one);
        free(sone);
    }
    int lbad = 0;
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < n; i++) {
            const double ref = lref[(size_t)bh * N + (size_t)r0 + i];
            const float got = lse[(size_t)bh * n + i];
            lbad += !(fabs(got - ref) <= 2e-5 * (1.0 + fabs(ref)) || (isinf(ref) && got == ref));
        }
    misses += lbad > 0;
    CHECK(!expect || lbad == 0, "rank %d: lse: %d rows off the oracle for %s", rank, lbad, cfg);
    return misses;
}

#endif
