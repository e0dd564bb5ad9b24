/* Sequence-parallel attention on GPUs, one rank per GPU: NCCL started from MPI.
 *   mpicc seqpar_nccl.c $(pkg-config --cflags --libs distflash) -o seqpar_nccl && mpirun -np 2 ./seqpar_nccl */
#include <distflash_mpi.h>  /* dfa_comm_create_nccl_mpi */
#include <distflash_nccl.h> /* the distributed _cuda calls */
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ngpus = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus < 1) {
        fprintf(stderr, "rank %d: no CUDA device\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    dfa_comm *c;
    if (dfa_comm_create_nccl_mpi(MPI_COMM_WORLD, rank % ngpus, &c) != DFA_OK) { /* collective */
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int batch = 1, n = 8192, heads = 16, kv_heads = 4, head_dim = 128; /* n: this rank's rows */
    dfa_dist_desc d = dfa_dist_desc_init(batch, n, heads, kv_heads, head_dim);
    d.attn.dtype = DFA_BF16, d.attn.causal = 1, d.overlap = 1;
    const size_t nq = (size_t)batch * n * heads * head_dim, nkv = (size_t)batch * n * kv_heads * head_dim;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc(&q, 2 * nq) || cudaMalloc(&o, 2 * nq) ||
        cudaMalloc(&dout, 2 * nq) || cudaMalloc(&dq, 2 * nq) || cudaMalloc(&k, 2 * nkv) || cudaMalloc(&v, 2 * nkv) ||
        cudaMalloc(&dk, 2 * nkv) || cudaMalloc(&dv, 2 * nkv) ||
        cudaMalloc((void **)&lse, sizeof(float) * batch * heads * n))
        MPI_Abort(MPI_COMM_WORLD, 1);
    cudaMemsetAsync(q, 0, 2 * nq, s), cudaMemsetAsync(k, 0, 2 * nkv, s), cudaMemsetAsync(v, 0, 2 * nkv, s);
    cudaMemsetAsync(dout, 0, 2 * nq, s);
    dfa_comm_set_timeout(c, 60.0); /* a peer that never calls: DFA_ERR_BACKEND after 60 s, not a hang */
    /* Enqueued on s; a failure on another rank shows at the next call or at dfa_comm_check. */
    if (dfa_dist_attn_fwd_cuda(c, &d, q, k, v, o, lse, s) != DFA_OK ||
        dfa_dist_attn_bwd_cuda(c, &d, q, k, v, o, lse, dout, dq, dk, dv, s) != DFA_OK ||
        cudaStreamSynchronize(s) != cudaSuccess || dfa_comm_check(c) != DFA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dfa_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) printf("%s: ok\n", dfa_version_string());
    dfa_comm_destroy(c); /* collective, before MPI_Finalize */
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(dout), cudaFree(dq), cudaFree(dk), cudaFree(dv);
    cudaFree(lse), cudaStreamDestroy(s);
    MPI_Finalize();
    return 0;
}
