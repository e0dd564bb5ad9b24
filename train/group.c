#include "train/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DFA_HAVE_MPI
#include <mpi.h>

#include "distflash_mpi.h"

static int mpi_fail(int rc, const char *what, char *err, size_t errlen) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(err, errlen, "%s failed: %s", what, text);
    return -1;
}
#endif

int dft_group_launched(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int dft_group_open(dft_group *g, int *argc, char ***argv, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    g->size = 1;
    if (!dft_group_launched()) return 0;
#ifdef DFA_HAVE_MPI
    int up = 0, provided = 0;
    MPI_Initialized(&up);
    if (!up) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init_thread", err, errlen);
        g->mpi = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g->size);
    if (g->size > 1) {
        dfa_status st = dfa_comm_create_mpi(MPI_COMM_WORLD, &g->attn);
        if (st != DFA_OK) {
            snprintf(err, errlen, "dfa_comm_create_mpi: %s", dfa_last_error());
            return -1;
        }
    }
    return 0;
#else
    (void)argc, (void)argv;
    snprintf(err, errlen, "started by an MPI launcher, but this distflash was built without MPI "
                          "(install libopenmpi-dev and rebuild)");
    return -1;
#endif
}

void dft_group_close(dft_group *g) {
    dfa_comm_destroy(g->attn);
    g->attn = NULL;
#ifdef DFA_HAVE_MPI
    if (g->mpi) MPI_Finalize();
#endif
    g->mpi = 0;
}

int dft_group_sum_f32(dft_group *g, float *x, size_t n, char *err, size_t errlen) {
    if (g->size == 1) return 0;
#ifdef DFA_HAVE_MPI
    /* in slices that fit an int count */
    for (size_t at = 0; at < n;) {
        int count = n - at > (1u << 30) ? (1 << 30) : (int)(n - at);
        int rc = MPI_Reduce(g->rank == 0 ? MPI_IN_PLACE : x + at, x + at, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Reduce", err, errlen);
        rc = MPI_Bcast(x + at, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast", err, errlen);
        at += (size_t)count;
    }
#endif
    (void)x, (void)n, (void)err, (void)errlen;
    return 0;
}

int dft_group_sum_f64(dft_group *g, double *x, int n, char *err, size_t errlen) {
    if (g->size == 1) return 0;
#ifdef DFA_HAVE_MPI
    int rc = MPI_Reduce(g->rank == 0 ? MPI_IN_PLACE : x, x, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Reduce", err, errlen);
    rc = MPI_Bcast(x, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast", err, errlen);
#endif
    (void)x, (void)n, (void)err, (void)errlen;
    return 0;
}

int dft_group_any(dft_group *g, int flag) {
    int any = flag != 0;
#ifdef DFA_HAVE_MPI
    if (g->size > 1 && MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD) != MPI_SUCCESS) return 1;
#endif
    (void)g;
    return any;
}

double dft_group_max(dft_group *g, double x) {
#ifdef DFA_HAVE_MPI
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
#endif
    (void)g;
    return x;
}
