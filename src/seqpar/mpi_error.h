/* Internal: MPI failures as DFA_ERR_BACKEND with MPI's own text, the checks of a
 * communicator constructor from an MPI_Comm, and the MPI communicators' timeout (comm_mpi.c). */
#ifndef DFA_SEQPAR_MPI_ERROR_H
#define DFA_SEQPAR_MPI_ERROR_H

#include <mpi.h>

#include "distflash.h"

dfa_status dfa__mpi_failed(const char *call, int code);

/* The checks of a constructor from an MPI_Comm: out non-NULL, MPI initialised and not
   finalised, comm an intracommunicator (each before anything collective). */
dfa_status dfa__mpi_check_comm(MPI_Comm comm, void *out, const char *fn);

#define DFA__MPI_DEFAULT_TIMEOUT 600.0 /* seconds, as the NCCL communicators' */

/* 1 when c is an MPI communicator (comm_mpi.c). */
int dfa__comm_is_mpi(const dfa_comm *c);

/* dfa_comm_set_timeout on an MPI communicator c: checks seconds, sets it. */
dfa_status dfa__mpi_set_timeout(dfa_comm *c, double seconds, const char *fn);

#endif
