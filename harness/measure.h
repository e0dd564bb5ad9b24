/* Measuring one pass in a forked child: its run times (shared with the parent
 * through a small shared mapping) and its peak resident memory (ru_maxrss from
 * wait4), from which the resident size after the inputs and outputs were
 * allocated and written (the baseline) is subtracted. The parent must not have
 * started OpenMP threads before forking (threads do not survive fork). */
#ifndef DFA_HARNESS_MEASURE_H
#define DFA_HARNESS_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "distflash.h"

#define MEASURE_MAX_REPS 64

typedef struct {
    int ok;                          /* set by the child when it finished its work */
    int reps;                        /* timed runs recorded */
    double seconds[MEASURE_MAX_REPS];
    double baseline_kib;             /* resident KiB before the measured pass */
    double value[8];                 /* free slots for the child's own results */
    char msg[256];                   /* why the child failed, if it did */
} measure_result;

/* Runs fn(arg, r) in a child; r lives in shared memory. Returns 0 when the child
   exited normally with r->ok set; *peak_kib is the child's peak resident KiB
   minus r->baseline_kib; *other_cpus (may be NULL) is how many CPUs other
   processes kept busy on average meanwhile (machine busy time from /proc/stat
   minus the child's own CPU time, over the wall time): contention, if not ~0. */
int measure_in_child(void (*fn)(void *arg, measure_result *r), void *arg, measure_result *out, double *peak_kib,
                     double *other_cpus);

/* CPUs busy on the whole machine, averaged over `seconds` (from /proc/stat; -1 if unknown). */
double measure_busy_cpus(double seconds);

/* Waits up to max_seconds until the machine is idle (< 0.15 CPUs busy over 1 s);
   returns the last busy reading. */
double measure_wait_idle(double max_seconds);

/* Resident KiB of the calling process now (VmRSS). */
double measure_rss_kib(void);

double measure_now(void);                       /* monotonic seconds */
double measure_cpu_now(void);                   /* CPU seconds of this process, all its threads */
double measure_median(const double *x, int n);  /* of n >= 1 values (x is not changed) */

/* Random inputs in storage type t: n values, roughly normal with unit variance. */
void measure_fill(dfa_dtype t, void *p, int64_t n, uint64_t seed);

/* Bytes of each tensor of a descriptor. */
size_t measure_q_bytes(const dfa_attn_desc *d);
size_t measure_kv_bytes(const dfa_attn_desc *d);
size_t measure_lse_bytes(const dfa_attn_desc *d);

/* First line of /proc/loadavg without its newline ("?" if unavailable), and the CPU model. */
void measure_loadavg(char *buf, size_t n);
void measure_cpu_model(char *buf, size_t n);

#endif
