/* Picks the tile-kernel table once, from the processor's features and DFA_CPU_ISA. */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DFA__X86 1
#endif

static int cpu_has(const char *feature) {
#ifdef DFA__X86
    __builtin_cpu_init();
    if (!strcmp(feature, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    if (!strcmp(feature, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)feature;
#endif
    return 0;
}

int dfa__cpu_kernels_usable(const dfa__cpu_kernels *t) {
    if (!t) return 0;
    if (t == dfa__cpu_kernels_avx512()) return cpu_has("avx512");
    if (t == dfa__cpu_kernels_avx2()) return cpu_has("avx2");
    return 1;
}

static const dfa__cpu_kernels *pick(void) {
    const char *cap = getenv("DFA_CPU_ISA");
    int allow512 = !cap || !strcmp(cap, "avx512");
    int allow2 = allow512 || !strcmp(cap, "avx2");
    if (allow512 && dfa__cpu_kernels_avx512() && cpu_has("avx512")) return dfa__cpu_kernels_avx512();
    if (allow2 && dfa__cpu_kernels_avx2() && cpu_has("avx2")) return dfa__cpu_kernels_avx2();
    return dfa__cpu_kernels_scalar();
}

const dfa__cpu_kernels *dfa__cpu_kernels_get(void) {
    /* Racing first calls compute the same pointer, so a plain static is enough. */
    static const dfa__cpu_kernels *_Atomic chosen;
    const dfa__cpu_kernels *k = chosen;
    if (!k) {
        k = pick();
        chosen = k;
    }
    return k;
}

const char *dfa_cpu_isa(void) { return dfa__cpu_kernels_get()->name; }
