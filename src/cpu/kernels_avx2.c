/* avx2 tile kernels: not written yet; dispatch falls back to the next table. */
#include <stddef.h>

#include "kernels.h"

const dfa__cpu_kernels *dfa__cpu_kernels_avx2(void) { return NULL; }
