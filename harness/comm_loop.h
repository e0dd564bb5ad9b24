/* Internal to tests/ and cli/: the collectives of a communicator whose P ranks run one after
 * another in one process on one GPU (rank-sim's loopback in cli/, the replay communicator
 * of tests/gpu/test_dist_replay.c). Each of those ranks is handed the same arguments, so the
 * maximum and the broadcast leave the values as they are, and the allgather of document ids
 * copies every rank's ids from one device array that holds them all. The point-to-point
 * transfers (start, wait) differ between the two users and stay with them.
 *
 * Header only (static inline): it needs the CUDA runtime and the library's internal
 * seqpar/comm.h, which dfa_harness does not link. */
#ifndef DFA_HARNESS_COMM_LOOP_H
#define DFA_HARNESS_COMM_LOOP_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "common/error.h"
#include "seqpar/comm.h"

/* Identical ranks: the maximum over them is each rank's own value. */
static inline dfa_status comm_loop_allreduce_max(dfa_comm *c, int64_t *v, int n) {
    (void)c, (void)v, (void)n;
    return DFA_OK;
}

/* Identical ranks: the root's buffer already equals every other rank's. */
static inline dfa_status comm_loop_bcast(dfa_comm *c, void *buf, size_t bytes, int root) {
    (void)c, (void)buf, (void)bytes, (void)root;
    return DFA_OK;
}

/* The allgather of the ranks' ids: recv <- all_ids ([size][bytes], device), on the call's stream,
   waited for as the real allgather is. who names the communicator in the error. */
static inline dfa_status comm_loop_allgather_ids(dfa_comm *c, void *recv, size_t bytes, const int32_t *all_ids,
                                                 const char *who) {
    cudaError_t e = cudaMemcpyAsync(recv, all_ids, bytes * (size_t)c->size, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)c->stream);
    return e == cudaSuccess ? DFA_OK : dfa__fail(DFA_ERR_BACKEND, who, "ids: %s", cudaGetErrorString(e));
}

#endif
