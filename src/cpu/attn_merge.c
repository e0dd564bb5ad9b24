/* Merging partial attention results computed over disjoint key sets (never adding sinks:
   distflash.h, "Logits, softcap and sinks"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/args.h"
#include "../common/desc.h"
#include "../common/dtype.h"
#include "../common/error.h"
#include "threads.h"

dfa_status dfa_attn_merge(const dfa_attn_desc *user_d, void *o_acc, float *lse_acc, const void *o_part,
                          const float *lse_part) {
    static const char fn[] = "dfa_attn_merge";
    dfa__clear_error();
    dfa_attn_desc desc; /* the caller's descriptor, normalised: the only one used below */
    const dfa_attn_desc *d = &desc;
    dfa_status st = dfa__check_merge_args(user_d, &desc, o_acc, lse_acc, o_part, lse_part, fn);
    if (st) return st;
    const int D = dfa__head_dim_v(d), H = d->num_heads; /* the width of o */
    const size_t es = dfa__dtype_size(d->dtype);

    const int nthreads = dfa__cpu_threads();
    float *scratch = malloc(sizeof(float) * 2 * (size_t)D * (size_t)nthreads);
    if (!scratch) return dfa__fail(DFA_ERR_OUT_OF_MEMORY, fn, "cannot allocate scratch");

    const int64_t rows = (int64_t)d->batch * d->seqlen_q * H; /* (b, i, h) in memory order of o */
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t h = r % H, bi = r / H, b = bi / d->seqlen_q, i = bi % d->seqlen_q;
        const int64_t li = (b * H + h) * d->seqlen_q + i;
        const float la = lse_acc[li], lb = lse_part[li];
        void *oa = dfa__elem(d->dtype, o_acc, r * D);
        const void *ob = dfa__elem_c(d->dtype, o_part, r * D);
        if (lb == -INFINITY) {
            if (la == -INFINITY) memset(oa, 0, (size_t)D * es); /* nothing seen on either side */
            continue;
        }
        if (la == -INFINITY) { /* only the partial saw keys: take it as is */
            memcpy(oa, ob, (size_t)D * es);
            lse_acc[li] = lb;
            continue;
        }
        float *a = scratch + (size_t)2 * D * (size_t)dfa__cpu_thread_id(), *p = a + D;
        dfa__load_f32(d->dtype, oa, a, D);
        dfa__load_f32(d->dtype, ob, p, D);
        const float mx = la > lb ? la : lb; /* NaN in either propagates through the exps */
        const float lse = mx + logf(expf(la - mx) + expf(lb - mx));
        const float wa = expf(la - lse), wb = expf(lb - lse);
        for (int c = 0; c < D; c++) a[c] = wa * a[c] + wb * p[c];
        dfa__store_f32(d->dtype, a, oa, D);
        lse_acc[li] = lse;
    }
    free(scratch);
    return DFA_OK;
}
