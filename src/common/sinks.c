#include "sinks.h"

#include "error.h"

dfa_status dfa__check_sinks_host(const dfa_attn_desc *d, const char *fn) {
    if (!d->sinks) return DFA_OK;
    for (int h = 0; h < d->num_heads; h++)
        if (!isfinite(d->sinks[h]))
            return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "d->sinks[%d] = %g; every sink must be finite", h,
                             (double)d->sinks[h]);
    return DFA_OK;
}

void dfa__dsinks_host(int batch, int heads, int rows, const float *sinks, const float *lse, const float *dsum,
                      float *dsinks, int h0, int h1) {
    for (int h = h0; h < h1; h++) {
        double acc = 0.0;
        for (int b = 0; b < batch; b++) {
            const int64_t first = ((int64_t)b * heads + h) * rows;
            for (int i = 0; i < rows; i++) {
                const float l = lse[first + i];
                if (l == -INFINITY) continue;
                acc += exp((double)sinks[h] - (double)l) * (double)dsum[first + i];
            }
        }
        dsinks[h] = (float)-acc;
    }
}
