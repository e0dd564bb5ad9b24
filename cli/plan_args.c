/* (plan_args.h) */
#include "plan_args.h"

#include <string.h>

#include "cli_values.h"

plan_args plan_args_default(void) { return (plan_args){131072, 2, 32, 0, 128, 5, DFA_BF16, {4096, -1}}; }

int plan_args_parse(int argc, char **argv, int *i, plan_args *a) {
    const char *o = argv[*i];
    if (!strcmp(o, "--docs") && *i + 1 < argc && !strcmp(argv[*i + 1], "0")) { /* no documents (a window alone) */
        a->mask.doc_mean = 0;
        ++*i;
        return 1;
    }
    const int m = bench_mask_arg(argc, argv, i, &a->mask);
    if (m) return m;
    int *dst = !strcmp(o, "--seqlen") ? &a->seqlen : !strcmp(o, "--ranks") ? &a->ranks
             : !strcmp(o, "--heads") ? &a->heads : !strcmp(o, "--kv-heads") ? &a->kv_heads
             : !strcmp(o, "--head-dim") ? &a->head_dim : !strcmp(o, "--reps") ? &a->reps : NULL;
    if (!dst && strcmp(o, "--dtype")) return 0;
    if (*i + 1 >= argc) return -1;
    const char *v = argv[++*i];
    if (!dst) return cli_dtype(v, &a->dtype) || a->dtype == DFA_F32 ? -1 : 1;
    const long lo = dst == &a->seqlen ? 2 : dst == &a->head_dim ? 64 : 1;
    const long hi = dst == &a->seqlen ? 1 << 24 : dst == &a->ranks ? 64 : dst == &a->reps ? 1000
                  : dst == &a->head_dim ? 128 : 256;
    return cli_size(v, lo, hi, dst) ? -1 : 1;
}

int plan_args_finish(plan_args *a) {
    if (!a->kv_heads) a->kv_heads = a->heads;
    return a->heads % a->kv_heads || a->seqlen % a->ranks || (a->head_dim != 64 && a->head_dim != 128) ? -1 : 0;
}

plan_variant plan_variant_default(void) { return (plan_variant){0, 0, -1}; }

int plan_variant_parse(int argc, char **argv, int *i, plan_variant *v) {
    const char *o = argv[*i];
    if (!strcmp(o, "--ring")) return v->ring = 1;
    if (!strcmp(o, "--no-split")) return v->no_split = 1;
    if (strcmp(o, "--fold-cost")) return 0;
    if (*i + 1 >= argc) return -1;
    return cli_size(argv[++*i], 0, 1 << 20, &v->fold_cost) ? -1 : 1;
}

void plan_variant_usage(FILE *f) {
    fprintf(f, "  --ring            the ring schedule (default: balanced)\n"
               "  --no-split        the plan before split pairs: no pair split over ranks, one band lent at most\n"
               "                    (src/seqpar/schedule.h; default: the library's plan)\n"
               "  --fold-cost C     the masked plan's fold cost per row (default: the library's, DFA__PLAN_FOLD_COST)\n");
}

void plan_args_usage(FILE *f, const char *what) {
    fprintf(f, "  --seqlen S        tokens of the packed sequence (default 128k)\n"
               "  --ranks P         ranks of the plan (default 2)\n"
               "  --heads H         query heads (default 32)\n"
               "  --kv-heads H      key/value heads (default = heads)\n"
               "  --head-dim D      64 or 128 (default 128)\n"
               "  --dtype T         bf16 or f16 (default bf16)\n"
               "  --docs MEAN       documents, log-normal lengths of this mean (default 4096; 0: none)\n"
               "  --window W        a sliding window of W keys (with or without documents)\n");
    if (what) fprintf(f, "  --reps R          timed repetitions of %s, median (default 5)\n", what);
}
