#include "threads.h"

#include "../common/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int requested_threads; /* 0: the OpenMP default */

dfa_status dfa_set_num_threads(int n) {
    dfa__clear_error();
    if (n < 0)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, "dfa_set_num_threads", "n = %d; it must be >= 0", n);
    requested_threads = n;
    return DFA_OK;
}

int dfa__cpu_threads(void) {
#ifdef _OPENMP
    return requested_threads > 0 ? requested_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

int dfa__cpu_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
