/* `distflash plan`: a masked distributed plan printed, on the CPU (no GPU, no MPI).
 *
 * The plan the executor would build for P ranks of a packed sequence (src/seqpar/schedule.h:
 * the chunk pairs with a visible key, lent bands of busy diagonals, split pairs), from the same
 * counts and inputs (dfa__mask_pair_work, dfa__plan_inputs): each rank's tasks by step with
 * their rows, keys, visible pairs and tile cost, each rank's totals, and the plan checked by the
 * simulator (every visible pair once, matched messages, both passes). Why a rank is busy is
 * then a matter of reading; plan-blocks and rank-sim time the same plan on a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_masks.h"
#include "commands.h"
#include "plan_args.h"
#include "seqpar/schedule.h"
#include "sim/simulate.h"

typedef struct {
    plan_args sh;
    plan_variant v;
} plan_opts;

static int usage(FILE *f) {
    fprintf(f, "usage: distflash plan [options]   (CPU only)\n\n");
    plan_args_usage(f, NULL);
    plan_variant_usage(f);
    return f == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, plan_opts *o) {
    *o = (plan_opts){plan_args_default(), plan_variant_default()};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        int m = plan_args_parse(argc, argv, &i, &o->sh);
        if (!m) m = plan_variant_parse(argc, argv, &i, &o->v);
        if (m <= 0) return -1;
    }
    if (plan_args_finish(&o->sh)) return -1;
    if (!bench_mask_on(&o->sh.mask)) {
        fprintf(stderr, "distflash plan: the plans are those of masked calls (--docs MEAN or --window W)\n");
        return -1;
    }
    return 0;
}

int cmd_plan(int argc, char **argv) {
    plan_opts o;
    const int p = parse(argc, argv, &o);
    if (p) return usage(p > 0 ? stdout : stderr);
    const int P = o.sh.ranks, S = o.sh.seqlen, n = S / P;
    const dfa__sched_kind kind = o.v.ring ? DFA__SCHED_RING : DFA__SCHED_BALANCED;
    int ndocs = 0;
    int32_t *ids = bench_docs(&o.sh.mask, 1, S, &ndocs);
    dfa_attn_desc d = dfa_attn_desc_init(1, n, n, o.sh.heads, o.sh.kv_heads, o.sh.head_dim);
    d.dtype = o.sh.dtype;
    d.causal = 1;
    bench_mask_apply(&o.sh.mask, &d, ids); /* (the plan reads the ids of every rank, below) */
    dfa__pair_counts mc;
    if ((o.sh.mask.doc_mean > 0 && !ids) || dfa__pair_counts_alloc(&mc, P, dfa__plan_lends(&d, kind))) {
        fprintf(stderr, "distflash plan: out of host memory\n");
        return 1;
    }
    dfa__mask_pair_work(&d, P, ids, mc.work, mc.rows, mc.keys, mc.cost, mc.prefix);
    const dfa__sched s0 = {kind, P, 1, n, NULL};
    const int fold_cost = o.v.fold_cost < 0 ? DFA__PLAN_FOLD_COST : o.v.fold_cost;
    const dfa__plan_counts in = dfa__plan_inputs(&d, &mc, kind, fold_cost, !o.v.no_split);
    dfa__sched_plan plan;
    if (dfa__sched_plan_build(&s0, &in, &plan)) {
        fprintf(stderr, "distflash plan: out of host memory\n");
        return 1;
    }
    const dfa__sched s = {kind, P, 1, n, &plan};
    char what[160], err[256];
    bench_mask_describe(&o.sh.mask, ndocs, what, sizeof what);
    printf("plan: %d tokens on %d ranks (%d rows each), %s, %s schedule%s, fold cost %d a row\n", S, P, n, what,
           dfa__sched_name(kind), o.v.no_split ? ", no split pairs or bands" : "", fold_cost);
    printf("(visible pairs and tile cost in G of one head; `lent` a band of a diagonal, `rest` what its owner keeps, `piece` part of a split pair)\n\n");
    int64_t pairs_most = 0, pairs_sum = 0, tiles_most = 0, tiles_sum = 0;
    int bands = 0, pieces = 0;
    for (int r = 0; r < P; r++) {
        int64_t pr = 0, tr = 0;
        printf("  rank %d:\n", r);
        for (int t = 0; t < plan.steps; t++) {
            dfa__task tk;
            if (!dfa__sched_task(&s, r, t, &tk)) continue;
            const size_t x = (size_t)tk.q_chunk * P + (size_t)tk.k_chunk;
            const int lent = dfa__task_lent(&tk), piece = dfa__task_is_piece(&plan, &tk, n);
            const int rest = tk.q_chunk == tk.k_chunk && !lent && tk.row0 > 0; /* a diagonal that lent its first rows */
            /* a task's tile cost: its pair's, in proportion to the visible pairs it carries */
            const int64_t tiles = mc.work[x] > 0 ? (int64_t)((double)mc.cost[x] * (double)tk.work / (double)mc.work[x]) : 0;
            bands += lent;
            pieces += piece;
            char blk[64];
            snprintf(blk, sizeof blk, "q%d[%d:%d] x k%d[%d:%d]", tk.q_chunk, tk.row0, tk.row1, tk.k_chunk, tk.k_row0,
                     dfa__task_key_end(&tk, n));
            printf("    step %-3d %-34s %-5s  pairs %7.4f G  tiles %7.4f G\n", t, blk,
                   lent ? "lent" : piece ? "piece" : rest ? "rest" : "", 1e-9 * (double)tk.work,
                   1e-9 * (double)tiles);
            pr += tk.work;
            tr += tiles;
        }
        printf("    total %.4f G pairs, %.4f G tiles; the plan's load %.4f G (tiles and folds)\n", 1e-9 * (double)pr,
               1e-9 * (double)tr, 1e-9 * (double)plan.load[r]);
        pairs_most = pr > pairs_most ? pr : pairs_most;
        tiles_most = tr > tiles_most ? tr : tiles_most;
        pairs_sum += pr;
        tiles_sum += tr;
    }
    printf("\n  %d steps, %d lent bands, %d pieces of split pairs\n", plan.steps, bands, pieces);
    printf("  busiest rank %.4f G pairs (mean %.4f, balance %.3f), %.4f G tiles (mean %.4f, balance %.3f); "
           "folds not counted\n",
           1e-9 * (double)pairs_most, 1e-9 * (double)pairs_sum / P, (double)pairs_sum / P / (double)pairs_most,
           1e-9 * (double)tiles_most, 1e-9 * (double)tiles_sum / P, (double)tiles_sum / P / (double)tiles_most);
    int bad = 0;
    for (int bwd = 0; bwd <= 1; bwd++)
        if (dfa__sim_check(&s, bwd, err, sizeof err)) {
            printf("  the simulator REFUSES the plan (%s): %s\n", bwd ? "backward" : "forward", err);
            bad = 1;
        }
    if (!bad) printf("  checked by the simulator: every visible pair once, every message matched, both passes\n");
    dfa__sched_plan_free(&plan);
    dfa__pair_counts_free(&mc);
    free(ids);
    return bad;
}
