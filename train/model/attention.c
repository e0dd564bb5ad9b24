#include "train/model/attention.h"
#include "train/clock.h"

#include <stdio.h>

static dfa_dist_desc describe(const dft_attention *at, const dft_model_config *c, int batch, int rows) {
    /* dfa_dist_desc_init fills the versioning headers and zeroes the rest (reserved space) */
    dfa_dist_desc d = dfa_dist_desc_init(batch, rows, c->n_heads, c->n_kv_heads, c->d_model / c->n_heads);
    d.attn.causal = 1; /* one process holds the whole sequence from position 0 */
    d.schedule = at->schedule;
    d.overlap = at->overlap;
    return d;
}

static int report(dfa_status st, const char *what, char *err, size_t errlen) {
    if (st == DFA_OK) return 0;
    snprintf(err, errlen, "%s failed: %s: %s", what, dfa_status_string(st), dfa_last_error());
    return -1;
}

int dft_attention_fwd(dft_attention *at, const dft_model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, float *o, float *lse, char *err, size_t errlen) {
    dfa_dist_desc d = describe(at, c, batch, rows);
    double t0 = dft_now_seconds();
    dfa_status st = at->comm ? dfa_dist_attn_fwd(at->comm, &d, q, k, v, o, lse) : dfa_attn_fwd(&d.attn, q, k, v, o, lse);
    at->fwd_seconds += dft_now_seconds() - t0;
    at->fwd_calls++;
    return report(st, at->comm ? "dfa_dist_attn_fwd" : "dfa_attn_fwd", err, errlen);
}

int dft_attention_bwd(dft_attention *at, const dft_model_config *c, int batch, int rows, const float *q,
                       const float *k, const float *v, const float *o, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, char *err, size_t errlen) {
    dfa_dist_desc d = describe(at, c, batch, rows);
    double t0 = dft_now_seconds();
    dfa_status st = at->comm ? dfa_dist_attn_bwd(at->comm, &d, q, k, v, o, lse, dout, dq, dk, dv)
                             : dfa_attn_bwd(&d.attn, q, k, v, o, lse, dout, dq, dk, dv);
    at->bwd_seconds += dft_now_seconds() - t0;
    at->bwd_calls++;
    return report(st, at->comm ? "dfa_dist_attn_bwd" : "dfa_attn_bwd", err, errlen);
}
