#include "threads.h"

#include <limits.h>
#include <unistd.h>

#include "../common/error.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int requested_threads; /* 0: the OpenMP default */

int dfa__max_threads(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    if (cpus > INT_MAX / DFA__THREADS_PER_CPU) cpus = INT_MAX / DFA__THREADS_PER_CPU;
    return (int)cpus * DFA__THREADS_PER_CPU;
}

/* OpenMP has no way to report that it could not start a team's threads: libgomp ends the
   process. A bound on the request keeps the library's threads within what the machine
   plainly supports, so a mistaken count is an error here instead of an exit later. */
dfa_status dfa_set_num_threads(int n) {
    static const char fn[] = "dfa_set_num_threads";
    dfa__clear_error();
    if (n < 0) return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn, "n = %d; it must be >= 0", n);
    const int max = dfa__max_threads();
    if (n > max)
        return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                         "n = %d is more than %d threads (%d per online CPU, %d CPUs); 0 takes the OpenMP default",
                         n, max, DFA__THREADS_PER_CPU, max / DFA__THREADS_PER_CPU);
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
