/* Sequence-parallel attention over MPI: every rank holds n rows of one long causal sequence.
 *   mpicc seqpar_mpi.c $(pkg-config --cflags --libs distflash) -o seqpar_mpi && mpirun -np 2 ./seqpar_mpi */
#include <distflash_mpi.h> /* distflash.h + dfa_comm_create_mpi */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    dfa_comm *c;
    if (dfa_comm_create_mpi(MPI_COMM_WORLD, &c) != DFA_OK) { /* collective; works on a duplicate */
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int batch = 1, n = 128, heads = 4, kv_heads = 2, head_dim = 64; /* n: this rank's rows */
    dfa_dist_desc d = dfa_dist_desc_init(batch, n, heads, kv_heads, head_dim);
    d.attn.causal = 1;
    d.schedule = DFA_SCHEDULE_BALANCED; /* or DFA_SCHEDULE_RING */
    d.overlap = 1;                      /* post the next step's messages before computing */

    const size_t nq = (size_t)batch * n * heads * head_dim, nkv = (size_t)batch * n * kv_heads * head_dim;
    float *q = malloc(nq * sizeof *q), *o = malloc(nq * sizeof *o), *dout = malloc(nq * sizeof *dout);
    float *dq = malloc(nq * sizeof *dq), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
    float *dk = malloc(nkv * sizeof *dk), *dv = malloc(nkv * sizeof *dv);
    float *lse = malloc((size_t)batch * heads * n * sizeof *lse);
    if (!q || !o || !dout || !dq || !k || !v || !dk || !dv || !lse) MPI_Abort(MPI_COMM_WORLD, 1);
    srand(1 + (unsigned)rank);
    for (size_t i = 0; i < nq; i++) q[i] = (float)rand() / RAND_MAX - 0.5f, dout[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < nkv; i++) k[i] = (float)rand() / RAND_MAX - 0.5f, v[i] = (float)rand() / RAND_MAX - 0.5f;

    if (dfa_dist_attn_fwd(c, &d, q, k, v, o, lse) != DFA_OK ||
        dfa_dist_attn_bwd(c, &d, q, k, v, o, lse, dout, dq, dk, dv) != DFA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Global position 0 (rank 0's row 0 under both schedules) sees only itself: o = v there. */
    int ok = 1;
    if (dfa_dist_position(d.schedule, rank, nranks, n, 0) == 0)
        for (int e = 0; e < head_dim; e++) ok &= (double)o[e] - v[e] < 1e-6 && v[e] - (double)o[e] < 1e-6;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("%d ranks x %d rows: %s\n", nranks, n, ok ? "ok" : "WRONG");
    dfa_comm_destroy(c); /* collective, before MPI_Finalize */
    free(q), free(o), free(dout), free(dq), free(k), free(v), free(dk), free(dv), free(lse);
    MPI_Finalize();
    return ok ? 0 : 1;
}
