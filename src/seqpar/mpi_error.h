/* Internal: MPI failures as DFA_ERR_BACKEND with MPI's own text, and the checks of a
 * communicator constructor from an MPI_Comm (comm_mpi.c). */
#ifndef DFA_SEQPAR_MPI_ERROR_H
#define DFA_SEQPAR_MPI_ERROR_H

#include <mpi.h>

#include "distflash.h"

dfa_status dfa__mpi_failed(const char *call, int code);

/* The checks of a constructor from an MPI_Comm: out non-NULL, MPI initialised and not
   finalised, comm an intracommunicator (each before anything collective). */
dfa_status dfa__mpi_check_comm(MPI_Comm comm, void *out, const char *fn);

#endif
