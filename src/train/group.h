/* The trainer's process group: the ranks that share each sequence (one chunk each).
 * Over MPI when built with it and launched by mpirun; otherwise one process. The sums
 * are reduced to rank 0 and broadcast back, so every rank holds the same bits (an
 * MPI_Allreduce may legally differ across ranks in the last bit). */
#ifndef DFA_TRAIN_GROUP_H
#define DFA_TRAIN_GROUP_H

#include <stddef.h>

#include "distflash.h"

typedef struct {
    int rank, size;
    int mpi;          /* 1 when this process called MPI_Init (and must finalize) */
    dfa_comm *attn;   /* for dfa_dist_attn_*; NULL with one rank */
} dfa__group;

/* Under a launcher (mpirun) initialises MPI and builds the attention communicator;
   otherwise a group of one. 0, or -1 with a message. */
int dfa__group_open(dfa__group *g, int *argc, char ***argv, char *err, size_t errlen);
void dfa__group_close(dfa__group *g);

/* In-place sums over the ranks; every rank gets the same bits. 0 or -1 with a message. */
int dfa__group_sum_f32(dfa__group *g, float *x, size_t n, char *err, size_t errlen);
int dfa__group_sum_f64(dfa__group *g, double *x, int n, char *err, size_t errlen);
/* 1 if flag is nonzero on any rank (used so that every rank stops together on an error). */
int dfa__group_any(dfa__group *g, int flag);
/* The maximum of x over the ranks. */
double dfa__group_max(dfa__group *g, double x);

/* 1 when this process was started by an MPI launcher. */
int dfa__group_launched(void);

#endif
