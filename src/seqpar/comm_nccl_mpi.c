/* dfa_comm_create_nccl_mpi (distflash_mpi.h): an NCCL communicator started from an MPI
 * communicator, the way most programs start NCCL: rank 0 makes the unique id, MPI
 * broadcasts it, every rank joins on its GPU. The NCCL communicator is the library's own
 * (non-blocking, so that a timeout can abort it) and goes with dfa_comm_destroy. */
#include <string.h>

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include "../common/error.h"
#include "comm_nccl.h"
#include "distflash_mpi.h"
#include "mpi_error.h"

dfa_status dfa_comm_create_nccl_mpi(MPI_Comm comm, int device, dfa_comm **out) {
    static const char fn[] = "dfa_comm_create_nccl_mpi";
    dfa__clear_error();
    dfa_status st = dfa__mpi_check_comm(comm, out, fn);
    if (st) return st;
    int rc;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) return dfa__fail(DFA_ERR_BACKEND, fn, "cudaGetDeviceCount failed: %s", cudaGetErrorString(e));
    if (device < 0 || device >= ndev)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "device = %d; this process sees %d device(s)", device, ndev);

    int rank = 0, size = 0;
    if ((rc = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS || (rc = MPI_Comm_size(comm, &size)) != MPI_SUCCESS)
        return dfa__mpi_failed(fn, rc);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return dfa__fail(DFA_ERR_BACKEND, fn, "cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(e));
    /* rank 0's id, with its status, so that every rank fails alike when rank 0 could not make one */
    struct {
        int ok;
        ncclUniqueId id;
    } root;
    memset(&root, 0, sizeof root);
    if (rank == 0) root.ok = ncclGetUniqueId(&root.id) == ncclSuccess;
    if ((rc = MPI_Bcast(&root, (int)sizeof root, MPI_BYTE, 0, comm)) != MPI_SUCCESS) return dfa__mpi_failed(fn, rc);
    if (!root.ok) return dfa__fail(DFA_ERR_BACKEND, fn, "ncclGetUniqueId failed on rank 0");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t own = NULL;
    const ncclResult_t r = ncclCommInitRankConfig(&own, size, root.id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        if (own) ncclCommAbort(own);
        return dfa__nccl_fail(fn, "ncclCommInitRankConfig", r, NULL);
    }
    st = dfa__nccl_settle(&own, r, DFA__NCCL_DEFAULT_TIMEOUT, fn, "ncclCommInitRankConfig");
    if (st) {
        if (own) ncclCommAbort(own);
        return st;
    }
    return dfa__comm_from_nccl(own, out, fn);
}
