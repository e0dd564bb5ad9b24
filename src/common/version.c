#include "distflash.h"
#include "../cpu/kernels.h"

#define DFA__STR2(x) #x
#define DFA__STR(x) DFA__STR2(x)

#ifdef DFA_HAVE_CUDA
#define DFA__PART_CUDA "; cuda"
#else
#define DFA__PART_CUDA ""
#endif
#ifdef DFA_HAVE_MPI
#define DFA__PART_MPI "; mpi"
#else
#define DFA__PART_MPI ""
#endif
#ifdef DFA_HAVE_NCCL
#define DFA__PART_NCCL "; nccl"
#else
#define DFA__PART_NCCL ""
#endif
#ifdef _OPENMP
#define DFA__PART_OMP "openmp"
#else
#define DFA__PART_OMP "no openmp"
#endif

const char *dfa_version_string(void) {
    return DFA__STR(DFA_VERSION_MAJOR) "." DFA__STR(DFA_VERSION_MINOR) "." DFA__STR(DFA_VERSION_PATCH)
        " (cpu, " DFA__PART_OMP DFA__PART_CUDA DFA__PART_MPI DFA__PART_NCCL ")";
}
