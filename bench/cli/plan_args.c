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

void plan_args_usage(FILE *f, const char *what) {
    fprintf(f, "  --seqlen S        tokens of the packed sequence (default 128k)\n"
               "  --ranks P         ranks of the plan (default 2)\n"
               "  --heads H         query heads (default 32)\n"
               "  --kv-heads H      key/value heads (default = heads)\n"
               "  --head-dim D      64 or 128 (default 128)\n"
               "  --dtype T         bf16 or f16 (default bf16)\n"
               "  --docs MEAN       documents, log-normal lengths of this mean (default 4096; 0: none)\n"
               "  --window W        a sliding window of W keys (with or without documents)\n"
               "  --reps R          timed repetitions of %s, median (default 5)\n",
            what);
}
