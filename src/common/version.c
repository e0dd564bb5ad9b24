#include "distflash.h"
#include "../cpu/kernels.h"

#define DFA__STR2(x) #x
#define DFA__STR(x) DFA__STR2(x)

/* The optional parts compiled into the library, from DFA_BUILT_<PART> (src/CMakeLists.txt
   defines one for each part whose sources are in the library), not from DFA_HAVE_<PART>
   (what the machine has): NCCL is found wherever CUDA is, but names itself here only once a
   CMakeLists.txt adds its communicator's sources together with NCCL to DFA_BUILT_PARTS. */
#ifdef DFA_BUILT_CUDA
#define DFA__PART_CUDA "; cuda"
#else
#define DFA__PART_CUDA ""
#endif
#ifdef DFA_BUILT_MPI
#define DFA__PART_MPI "; mpi"
#else
#define DFA__PART_MPI ""
#endif
#ifdef DFA_BUILT_NCCL
#define DFA__PART_NCCL "; nccl"
#else
#define DFA__PART_NCCL ""
#endif
#ifdef _OPENMP
#define DFA__PART_OMP "openmp"
#else
#define DFA__PART_OMP "no openmp"
#endif

unsigned dfa_version(void) { return DFA_VERSION; }

const char *dfa_version_string(void) {
    return DFA__STR(DFA_VERSION_MAJOR) "." DFA__STR(DFA_VERSION_MINOR) "." DFA__STR(DFA_VERSION_PATCH)
        " (cpu, " DFA__PART_OMP DFA__PART_CUDA DFA__PART_MPI DFA__PART_NCCL ")";
}
