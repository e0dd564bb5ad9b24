/* The trainer's process group: the ranks that share each sequence (one chunk each).
 * Over MPI when built with it and launched by mpirun; otherwise one process. The sums
 * are reduced to rank 0 and broadcast back, so every rank holds the same bits (an
 * MPI_Allreduce may legally differ across ranks in the last bit). */
#ifndef DFT_TRAIN_GROUP_H
#define DFT_TRAIN_GROUP_H

#include <stddef.h>

#include "distflash.h"

typedef struct {
    int rank, size;
    int mpi;          /* 1 when this process called MPI_Init (and must finalize) */
    dfa_comm *attn;   /* for dfa_dist_attn_*; NULL with one rank */
} dft_group;

/* Under a launcher (mpirun) initialises MPI and builds the attention communicator;
   otherwise a group of one. 0, or -1 with a message. */
int dft_group_open(dft_group *g, int *argc, char ***argv, char *err, size_t errlen);
void dft_group_close(dft_group *g);

/* In-place sums over the ranks; every rank gets the same bits. 0 or -1 with a message. */
int dft_group_sum_f32(dft_group *g, float *x, size_t n, char *err, size_t errlen);
int dft_group_sum_f64(dft_group *g, double *x, int n, char *err, size_t errlen);
/* 1 if flag is nonzero on any rank (used so that every rank stops together on an error). */
int dft_group_any(dft_group *g, int flag);
/* The maximum of x over the ranks. */
double dft_group_max(dft_group *g, double x);

/* 1 when this process was started by an MPI launcher. */
int dft_group_launched(void);

#endif
