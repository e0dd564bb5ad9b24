/* This machine's float32 FMA peak, measured: every thread runs independent
   chains of fused multiply-adds (enough to cover the FMA latency) for a while.
   Call it only where OpenMP may start threads (`distflash bench` calls it in a
   forked child). */
#ifndef DFA_HARNESS_FMA_PEAK_H
#define DFA_HARNESS_FMA_PEAK_H

typedef struct {
    const char *isa;  /* "avx512", "avx2" or "scalar" */
    double gflops;    /* all threads together */
} fma_peak_result;

/* Measures each instruction set the processor has, with `threads` threads for
   about `seconds` each; fills up to 3 results (best first sorted by nothing:
   in the order avx512, avx2, scalar) and returns how many. */
int fma_peak_measure(int threads, double seconds, fma_peak_result out[3]);

#endif
