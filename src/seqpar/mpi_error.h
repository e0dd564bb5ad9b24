/* Internal: MPI failures as DFA_ERR_BACKEND with MPI's own text (comm_mpi.c). */
#ifndef DFA_SEQPAR_MPI_ERROR_H
#define DFA_SEQPAR_MPI_ERROR_H

#include "distflash.h"

dfa_status dfa__mpi_failed(const char *call, int code);

#endif
