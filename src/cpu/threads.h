/* Internal: how many OpenMP threads a CPU call uses. */
#ifndef DFA_CPU_THREADS_H
#define DFA_CPU_THREADS_H

/* dfa_set_num_threads takes at most this many threads per online CPU. */
#define DFA__THREADS_PER_CPU 4

/* The most threads dfa_set_num_threads takes: DFA__THREADS_PER_CPU x the online CPUs. */
int dfa__max_threads(void);

/* Threads the next parallel region will use (>= 1). */
int dfa__cpu_threads(void);

/* Index of the calling thread inside a parallel region (0 outside one). */
int dfa__cpu_thread_id(void);

#endif
