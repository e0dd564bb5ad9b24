/* The test oracle: attention written as plainly as possible in float64, and a
 * naive implementation in the storage precision that sets the error budget
 * (a fast kernel may be at most twice as far from the oracle as it is). */
#ifndef DFA_HARNESS_ORACLE_H
#define DFA_HARNESS_ORACLE_H

#include "distflash.h"

/* Exact attention on float64 copies of the inputs (layouts as in distflash.h: softcap, sinks
   and head_dim_v of d included; d->sinks is read, d->dsinks never). lse may be NULL. Rows that
   see no key: o = 0, lse = -inf (the sink with sinks). */
void oracle_fwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, double *o,
                double *lse);

/* Exact gradients of sum(dout * o); oracle_bwd_all also writes dsinks ([num_heads], with
   d->sinks; may be NULL). */
void oracle_bwd(const dfa_attn_desc *d, const double *q, const double *k, const double *v, const double *dout,
                double *dq, double *dk, double *dv);
void oracle_bwd_all(const dfa_attn_desc *d, const double *q, const double *k, const double *v, const double *dout,
                    double *dq, double *dk, double *dv, double *dsinks);

/* Naive attention in the storage precision: float32 arithmetic, probabilities
   (and in the backward dS) rounded to the storage type as a tensor-core kernel
   would, outputs rounded to the storage type. */
void naive_fwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, void *o);
void naive_bwd_lowp(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *dout,
                    void *dq, void *dk, void *dv);
/* ... and dsinks in float32 ([num_heads], with d->sinks; may be NULL). */
void naive_bwd_lowp_all(const dfa_attn_desc *d, const void *q, const void *k, const void *v, const void *dout,
                        void *dq, void *dk, void *dv, float *dsinks);

#endif
