/* Internal: how many OpenMP threads a CPU call uses. */
#ifndef DFA_CPU_THREADS_H
#define DFA_CPU_THREADS_H

/* Threads the next parallel region will use (>= 1). */
int dfa__cpu_threads(void);

/* Index of the calling thread inside a parallel region (0 outside one). */
int dfa__cpu_thread_id(void);

#endif
