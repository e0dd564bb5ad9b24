/* The four measured passes of `distflash bench` and `distflash demo`: the
 * library's forward and backward and the naive materialising ones, each run in
 * a forked child (harness/measure.h) on fresh random inputs. */
#ifndef DFA_CLI_BENCH_PASSES_H
#define DFA_CLI_BENCH_PASSES_H

#include "distflash.h"
#include "measure.h"

typedef enum { PASS_FLASH_FWD, PASS_FLASH_BWD, PASS_NAIVE_FWD, PASS_NAIVE_BWD } pass_kind;

typedef struct {
    dfa_attn_desc d;
    pass_kind kind;
    int threads;  /* 0: the OpenMP default */
    int warmup;   /* untimed runs first */
    int reps;     /* timed runs, at most MEASURE_MAX_REPS */
    int check;    /* demo: also run the other implementation once and compare (value[0..2]) */
} pass_job;

typedef struct {
    int ran;           /* 0: not run (see why) */
    char why[300];
    double median_s;   /* of the timed runs */
    double gflops;     /* by the FLOP convention of DESIGN.md */
    double extra_mib;  /* peak resident memory above the inputs and outputs */
    double other_cpus; /* CPUs other processes kept busy meanwhile (contention; -1 unknown) */
    double value[8];   /* copied from the child */
} pass_outcome;

/* FLOPs of the forward pass by the convention (4 B H Sq Sk D, halved when causal); the backward is 2.5x. */
double pass_fwd_flops(const dfa_attn_desc *d);

/* Measures one pass in a child. */
pass_outcome pass_measure(const pass_job *job);

/* Human-readable bytes ("537 MiB", "8.0 GiB"). */
const char *pass_bytes_str(double bytes, char *buf, int n);

#endif
