/* The options of the one-GPU subcommands that take a masked distributed plan apart (plan-blocks,
 * rank-sim): the packed sequence, the ranks it is split over, the heads, the mask. */
#ifndef DFA_CLI_PLAN_ARGS_H
#define DFA_CLI_PLAN_ARGS_H

#include <stdio.h>

#include "bench_masks.h"
#include "distflash.h"

typedef struct {
    int seqlen, ranks, heads, kv_heads, head_dim, reps; /* kv_heads 0: = heads */
    dfa_dtype dtype;
    bench_mask mask;
} plan_args;

/* 128k tokens, 2 ranks, 32 heads x 128, bf16, 5 repetitions, documents of mean 4096. */
plan_args plan_args_default(void);

/* Parses the option at argv[*i] (advancing *i past its value): 1 when it was one of these,
   0 when not, -1 on a bad or missing value. --docs 0 means no documents. */
int plan_args_parse(int argc, char **argv, int *i, plan_args *a);

/* After the last option: kv_heads defaulted, and the shape one that splits over the ranks with
   a supported head dim. 0, or -1. */
int plan_args_finish(plan_args *a);

/* The help lines of these options (`what`: what --reps repeats; NULL: the command times nothing). */
void plan_args_usage(FILE *f, const char *what);

/* Which plan of that sequence (plan, rank-sim): the schedule, split pairs, the fold cost. */
typedef struct {
    int ring;      /* --ring: the ring schedule (default: balanced) */
    int no_split;  /* --no-split: the plan before split pairs (one lent band at most, no piece) */
    int fold_cost; /* --fold-cost C: the fold cost per row; -1: the library's (DFA__PLAN_FOLD_COST) */
} plan_variant;

plan_variant plan_variant_default(void);
/* As plan_args_parse, for these options. */
int plan_variant_parse(int argc, char **argv, int *i, plan_variant *v);
void plan_variant_usage(FILE *f);

#endif
