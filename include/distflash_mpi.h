/*
 * distflash over MPI: a communicator for the sequence-parallel calls of
 * distflash.h (dfa_dist_attn_fwd/bwd) made from an MPI communicator. The
 * attention itself runs on the CPU kernels of the calling process; k/v chunks,
 * helper queries and partial results move with nonblocking point-to-point MPI.
 *
 *   MPI_Init(&argc, &argv);
 *   dfa_comm *c;
 *   if (dfa_comm_create_mpi(MPI_COMM_WORLD, &c) != DFA_OK) { ... dfa_last_error() ... }
 *   dfa_dist_attn_fwd(c, &d, q, k, v, o, lse);   // every rank, its own rows
 *   dfa_comm_destroy(c);                          // before MPI_Finalize
 *   MPI_Finalize();
 */
#ifndef DISTFLASH_MPI_H
#define DISTFLASH_MPI_H

#include <mpi.h>

#include "distflash.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over comm (every rank calls it, like MPI_Comm_dup). The
 * communicator works on a duplicate of comm, so the library's messages never
 * mix with the caller's; its error handler is MPI_ERRORS_RETURN, and MPI
 * failures come back as DFA_ERR_BACKEND with MPI's own text. The caller keeps
 * comm and must destroy the result (dfa_comm_destroy, also collective) before
 * MPI_Finalize. MPI must be initialised; any thread level works as long as one
 * thread at a time uses a given dfa_comm. Rank order of comm is the sequence
 * order: rank r holds chunk r (dfa_dist_position).
 *
 * Memory: a distributed call needs a few chunks' worth of scratch (message
 * slots for three consecutive steps, float32 accumulators); the communicator keeps it between
 * calls, so that a training step calling layer after layer with the same
 * shapes does not allocate and fault it in every time. dfa_comm_destroy frees it.
 *
 * Sinks, softcap, value head dims (distflash.h, "Logits, softcap and sinks"): the
 * distributed calls take them as the single-device calls do (host memory for the sinks,
 * checked finite on each rank; softcap, head_dim_v and whether sinks and dsinks are set
 * must agree across ranks). Every rank passes the same sinks (one learnable logit per
 * head, replicated like any weight): the forward adds them once to each row's merged
 * result. The backward's d->attn.dsinks receives the sum over this rank's own rows only,
 * -sum over b and its rows i of exp(sink_h - lse_i) (dout_i . o_i): the gradient of the
 * replicated sinks is the sum of every rank's dsinks, which the trainer reduces across the
 * group (an allreduce, with the other replicated weights' gradients), as with any weight.
 *
 * Errors: out NULL, comm MPI_COMM_NULL or an intercommunicator, MPI not
 * initialised (DFA_ERR_INVALID_ARGUMENT; these are checked on each rank before
 * anything collective, so pass the same arguments everywhere); memory
 * (DFA_ERR_OUT_OF_MEMORY); MPI_Comm_dup failing (DFA_ERR_BACKEND). *out is set
 * only on success.
 */
DFA_API dfa_status dfa_comm_create_mpi(MPI_Comm comm, dfa_comm **out);

/*
 * Timeouts. A rank that never makes a call (it crashed, or took another branch) would
 * leave its peers waiting in MPI forever. Every wait of an MPI communicator's calls
 * (transfers and the collective agreements, all nonblocking MPI) has a deadline: when its
 * peers have not answered `seconds` after a wait began, the call returns DFA_ERR_BACKEND on
 * every rank still waiting, naming the MPI call and the timeout. The communicator is then
 * unusable (every later call says so): destroy it. MPI cannot take back an unfinished
 * collective nor, reliably, a send, so buffers MPI may still use stay with the
 * communicator; a peer's late messages never land in the caller's memory, but sends from
 * it may still be read. The usual next step is MPI_Abort.
 *
 * seconds > 0 and finite (DFA_ERR_INVALID_ARGUMENT otherwise, or for c NULL); default 600.
 * Not collective; set the same value on every rank. NCCL communicators take it too (see
 * distflash_nccl.h, which declares it as well).
 */
DFA_API dfa_status dfa_comm_set_timeout(dfa_comm *c, double seconds);

/*
 * A communicator for the distributed calls on GPUs (distflash_nccl.h), started from MPI:
 * collective over comm, one rank per GPU. Makes `device` current (cudaSetDevice), has rank 0
 * make an NCCL unique id, broadcasts it over comm, and joins a new non-blocking NCCL
 * communicator of comm's ranks in comm's order, which the returned communicator owns
 * (dfa_comm_destroy, collective, frees it; destroy it before MPI_Finalize). Errors: out
 * NULL, MPI not initialised, comm MPI_COMM_NULL or an intercommunicator, device out of range
 * (DFA_ERR_INVALID_ARGUMENT, checked on each rank before anything collective); a library
 * built without NCCL (DFA_ERR_UNSUPPORTED); MPI, CUDA or NCCL failures (DFA_ERR_BACKEND).
 */
DFA_API dfa_status dfa_comm_create_nccl_mpi(MPI_Comm comm, int device, dfa_comm **out);

#ifdef __cplusplus
}
#endif

#endif /* DISTFLASH_MPI_H */
