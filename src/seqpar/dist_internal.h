/* Internal: the distributed calls with an explicit schedule kind, including the paper's
 * published balancing (DFA__SCHED_PAPER), which the public enum does not offer; used by
 * the public wrappers and by `distflash dist-bench` for its comparison. d->schedule is
 * ignored here (kind replaces it; the public wrappers pass a private value of dist_api.c
 * that means "d->schedule, once the descriptor is imported"). */
#ifndef DFA_SEQPAR_DIST_INTERNAL_H
#define DFA_SEQPAR_DIST_INTERNAL_H

#include "distflash.h"
#include "schedule.h"

/* The distributed calls' own rules on a normalised descriptor (after the common checks of the
   call shape): seqlen_q == seqlen_k, a known schedule kind, overlap 0 or 1. */
dfa_status dfa__check_dist_desc(const dfa_dist_desc *d, dfa__sched_kind kind, const char *fn);

dfa_status dfa__dist_fwd(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                         const void *v, void *o, float *lse);
dfa_status dfa__dist_bwd(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                         const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
                         void *dv);

#ifdef DFA_HAVE_NCCL
#include <cuda_runtime_api.h>
/* The same on device memory over an NCCL communicator (distflash_nccl.h). */
dfa_status dfa__dist_fwd_cuda(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                              const void *v, void *o, float *lse, cudaStream_t stream);
dfa_status dfa__dist_bwd_cuda(dfa_comm *c, const dfa_dist_desc *d, dfa__sched_kind kind, const void *q, const void *k,
                              const void *v, const void *o, const float *lse, const void *dout, void *dq, void *dk,
                              void *dv, cudaStream_t stream);
#endif

#endif
