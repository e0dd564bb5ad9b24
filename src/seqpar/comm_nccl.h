/* Internal: the NCCL backend of dfa_comm (comm_nccl.c), shared with its MPI-based
 * constructor (comm_nccl_mpi.c). */
#ifndef DFA_SEQPAR_COMM_NCCL_H
#define DFA_SEQPAR_COMM_NCCL_H

#include <nccl.h>

#include "distflash.h"

#define DFA__NCCL_DEFAULT_TIMEOUT 600.0 /* seconds */

/* Maps an NCCL failure to DFA_ERR_BACKEND with NCCL's text (and its last error, when comm is known). */
dfa_status dfa__nccl_fail(const char *fn, const char *call, ncclResult_t r, ncclComm_t comm);

/* Waits, up to timeout seconds, until a non-blocking NCCL communicator has finished the
   operation that returned r (ncclInProgress), polling ncclCommGetAsyncError. On a timeout
   the communicator is aborted and *comm set to NULL. */
dfa_status dfa__nccl_settle(ncclComm_t *comm, ncclResult_t r, double timeout, const char *fn, const char *call);

/* Wraps a non-blocking NCCL communicator made by the library (it now belongs to the
   dfa_comm, which aborts it on failure here) on the current device. */
dfa_status dfa__comm_from_nccl(ncclComm_t own, dfa_comm **out, const char *fn);

/* 1 when c is an NCCL communicator; its CUDA device (c must be one). */
int dfa__comm_is_nccl(const dfa_comm *c);
int dfa__comm_nccl_device(const dfa_comm *c);

#endif
