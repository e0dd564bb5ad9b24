/* `distflash plan-blocks`: the blocks of a masked distributed plan, timed one by one on one GPU.
 *
 * A masked plan (src/seqpar/schedule.h) gives each of P ranks its blocks: its diagonal, pairs
 * off the diagonal, and rows a busy diagonal lends. This builds the plan for P ranks of a
 * packed sequence the way the executor does (tile cost, folds, lending, split pairs), then runs every
 * block of every rank on this one GPU, with the executor's own compute table (float32 partial
 * outputs, the mask's intervals), and sums each rank's kernel time: what the ranks' compute
 * would be on P GPUs, without messages, folds or the rounding of the outputs. It prints the
 * plan without lending or splitting and with both, so the balance they buy is measured on one GPU. */
#include <stdio.h>

#include "commands.h"

#ifndef DFA_HAVE_CUDA
int cmd_plan_blocks(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash plan-blocks: this build has no CUDA support\n");
    return 2;
}
#else

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_masks.h"
#include "cli_values.h"
#include "cuda_fill.h"
#include "distflash_cuda.h"
#include "measure.h"
#include "plan_args.h"
#include "seqpar/compute.h"
#include "seqpar/schedule.h"

#define PB_CUDA(call) BENCH_CUDA_OR_EXIT("plan-blocks", call)

typedef plan_args pb_opts;

static int usage(FILE *f) {
    fprintf(f, "usage: distflash plan-blocks [options]   (one GPU)\n\n");
    plan_args_usage(f, "each block");
    return f == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, pb_opts *o) {
    *o = plan_args_default();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
        if (plan_args_parse(argc, argv, &i, o) != 1) return -1;
    }
    if (plan_args_finish(o)) return -1;
    if (!bench_mask_on(&o->mask)) return -1; /* a plan without a mask is not a masked plan */
    return 0;
}

/* The whole sequence on the device, and one block's float32 outputs. */
typedef struct {
    char *q, *k, *v, *o, *dout;
    float *lse, *lse_rows, *o32, *lse32, *dq32, *dk32, *dv32;
    int32_t *ids;
    void *scratch;
} pb_bufs;

/* One block of the plan (the executor's descriptor, exec_steps.c compute), fwd and bwd: median
   milliseconds of each into ms[0], ms[1]. */
static void time_block(const pb_opts *o, const dfa__compute_ops *ops, void *ctx, const pb_bufs *b, const dfa__task *t,
                       int n, const dfa_attn_desc *chunk, cudaStream_t st, double ms[2]) {
    const size_t es = 2, qrow = (size_t)o->heads * o->head_dim * es, krow = (size_t)o->kv_heads * o->head_dim * es;
    const int rows = t->row1 - t->row0, krows = dfa__task_key_rows(t, n);
    const size_t q0 = (size_t)t->q_chunk * n + (size_t)t->row0, k0 = (size_t)t->k_chunk * n + (size_t)t->k_row0;
    dfa_attn_desc bd = *chunk;
    bd.seqlen_q = rows;
    bd.seqlen_k = krows;
    bd.causal = t->causal_mask;
    bd.q_start = (int64_t)q0;
    bd.k_start = (int64_t)k0;
    bd.q_doc = o->mask.doc_mean > 0 ? b->ids + q0 : NULL;
    bd.k_doc = o->mask.doc_mean > 0 ? b->ids + k0 : NULL;
    /* the block's lse rows, packed [heads][rows] as the executor packs a window's */
    PB_CUDA(cudaMemcpy2DAsync(b->lse_rows, (size_t)rows * 4, b->lse + q0, (size_t)o->seqlen * 4, (size_t)rows * 4,
                              (size_t)o->heads, cudaMemcpyDeviceToDevice, st));
    cudaEvent_t e0, e1;
    PB_CUDA(cudaEventCreate(&e0));
    PB_CUDA(cudaEventCreate(&e1));
    double *x = malloc(sizeof(double) * (size_t)o->reps);
    for (int bwd = 0; bwd < 2; bwd++) {
        for (int r = -1; r < o->reps; r++) { /* one warm-up */
            PB_CUDA(cudaEventRecord(e0, st));
            dfa_status s = bwd ? ops->bwd(ctx, &bd, b->q + q0 * qrow, b->k + k0 * krow, b->v + k0 * krow,
                                          b->o + q0 * qrow, b->lse_rows, b->dout + q0 * qrow, b->dq32, b->dk32, b->dv32,
                                          NULL)
                               : ops->fwd(ctx, &bd, b->q + q0 * qrow, b->k + k0 * krow, b->v + k0 * krow, b->o32,
                                          b->lse32, NULL);
            if (s == DFA_OK && ops->take_error) s = ops->take_error(ctx, "plan-blocks");
            if (s != DFA_OK) {
                fprintf(stderr, "distflash plan-blocks: block q%d[%d:%d] x k%d[%d:%d]: %s\n", t->q_chunk, t->row0,
                        t->row1, t->k_chunk, t->k_row0, t->k_row0 + krows, dfa_last_error());
                exit(1);
            }
            PB_CUDA(cudaEventRecord(e1, st));
            PB_CUDA(cudaEventSynchronize(e1));
            float f;
            PB_CUDA(cudaEventElapsedTime(&f, e0, e1));
            if (r >= 0) x[r] = f;
        }
        ms[bwd] = measure_median(x, o->reps);
    }
    free(x);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

int cmd_plan_blocks(int argc, char **argv) {
    pb_opts o;
    const int p = parse(argc, argv, &o);
    if (p) return usage(p > 0 ? stdout : stderr);
    const int P = o.ranks, n = o.seqlen / P, S = o.seqlen, H = o.heads, HK = o.kv_heads, D = o.head_dim;
    int ndocs = 0;
    int32_t *ids = bench_docs(&o.mask, 1, S, &ndocs);
    dfa_attn_desc chunk = dfa_attn_desc_init(1, n, n, H, HK, D);
    chunk.dtype = o.dtype;
    chunk.causal = 1;
    bench_mask_apply(&o.mask, &chunk, NULL);
    chunk.q_doc = chunk.k_doc = NULL;
    /* the plan's counts, as the executor makes them (exec_mask.c, setup_mask) */
    const size_t cells = (size_t)P * P;
    int64_t *work = malloc(sizeof *work * cells), *cost = malloc(sizeof *cost * cells);
    int64_t *prefix = malloc(sizeof *prefix * (size_t)P * 2 * (DFA__DIAG_SAMPLES + 1));
    int *rows = malloc(sizeof *rows * 2 * cells), *keys = malloc(sizeof *keys * 2 * cells);
    if (!work || !cost || !prefix || !rows || !keys || (o.mask.doc_mean > 0 && !ids)) {
        fprintf(stderr, "distflash plan-blocks: out of host memory\n");
        return 1;
    }
    dfa_attn_desc counted = chunk;
    dfa__mask_pair_work(&counted, P, ids, work, rows, keys, cost, ids ? prefix : NULL);

    /* the whole sequence, and a real forward for the backward's o and lse */
    const size_t qb = (size_t)S * H * D * 2, kb = (size_t)S * HK * D * 2;
    pb_bufs b;
    memset(&b, 0, sizeof b);
    PB_CUDA(cudaMalloc((void **)&b.q, qb));
    PB_CUDA(cudaMalloc((void **)&b.k, kb));
    PB_CUDA(cudaMalloc((void **)&b.v, kb));
    PB_CUDA(cudaMalloc((void **)&b.o, qb));
    PB_CUDA(cudaMalloc((void **)&b.dout, qb));
    PB_CUDA(cudaMalloc((void **)&b.lse, sizeof(float) * (size_t)H * S));
    PB_CUDA(cudaMalloc((void **)&b.lse_rows, sizeof(float) * (size_t)H * n));
    PB_CUDA(cudaMalloc((void **)&b.lse32, sizeof(float) * (size_t)H * n));
    PB_CUDA(cudaMalloc((void **)&b.o32, sizeof(float) * (size_t)n * H * D));
    PB_CUDA(cudaMalloc((void **)&b.dq32, sizeof(float) * (size_t)n * H * D));
    PB_CUDA(cudaMalloc((void **)&b.dk32, sizeof(float) * (size_t)n * HK * D));
    PB_CUDA(cudaMalloc((void **)&b.dv32, sizeof(float) * (size_t)n * HK * D));
    if (ids) {
        PB_CUDA(cudaMalloc((void **)&b.ids, sizeof(int32_t) * (size_t)S));
        PB_CUDA(cudaMemcpy(b.ids, ids, sizeof(int32_t) * (size_t)S, cudaMemcpyHostToDevice));
    }
    {
        void *dst[4] = {b.q, b.k, b.v, b.dout};
        const size_t bytes[4] = {qb, kb, kb, qb};
        for (int i = 0; i < 4; i++) PB_CUDA(bench_cuda_fill_random(o.dtype, dst[i], bytes[i], 1 + (uint64_t)i));
    }
    cudaStream_t st;
    PB_CUDA(cudaStreamCreate(&st));
    dfa_attn_desc whole = chunk;
    whole.seqlen_q = whole.seqlen_k = S;
    whole.q_doc = whole.k_doc = b.ids;
    if (dfa_attn_fwd_cuda(&whole, b.q, b.k, b.v, b.o, b.lse, st) != DFA_OK) {
        fprintf(stderr, "distflash plan-blocks: the whole forward: %s\n", dfa_last_error());
        return 1;
    }
    const dfa__compute_ops *ops = dfa__compute_cuda();
    chunk.q_doc = chunk.k_doc = b.ids; /* (masked: the scratch then holds the blocks' intervals) */
    void *ctx = NULL;
    if (ops->ctx_create(&chunk, &ctx) != DFA_OK) {
        fprintf(stderr, "distflash plan-blocks: %s\n", dfa_last_error());
        return 1;
    }
    PB_CUDA(cudaMalloc(&b.scratch, ops->scratch_bytes(&chunk)));
    ops->bind(ctx, st, b.scratch);

    char what[160];
    bench_mask_describe(&o.mask, ndocs, what, sizeof what);
    printf("plan-blocks: %d tokens on %d ranks (%d rows each), %s, %d heads (%d kv) x %d, %s, causal; "
           "kernel medians of %d\n", S, P, n, what, H, HK, D, cli_dtype_name(o.dtype), o.reps);
    printf("(each rank's blocks run one by one on this GPU with the executor's compute table: compute only, "
           "no messages, folds or output rounding)\n");
    double worst[2] = {0, 0};
    for (int lend = 0; lend < 2; lend++) {
        if (lend && !ids) break; /* the executor lends only under documents */
        const dfa__sched s = {DFA__SCHED_BALANCED, P, 1, n, NULL};
        dfa_attn_desc planned = chunk; /* (the ids themselves are not read) */
        planned.q_doc = planned.k_doc = ids;
        const dfa__pair_counts mc = {work, rows, keys, cost, ids ? prefix : NULL};
        dfa__plan_counts in = dfa__plan_inputs(&planned, &mc, DFA__SCHED_BALANCED, DFA__PLAN_FOLD_COST, 1);
        if (!lend) in.diag_prefix = NULL, in.split_pairs = 0;
        dfa__sched_plan plan;
        if (dfa__sched_plan_build(&s, &in, &plan)) {
            fprintf(stderr, "distflash plan-blocks: out of host memory\n");
            return 1;
        }
        printf("\n%s:\n  rank  step  block                                   pairs      fwd ms   bwd ms\n",
               lend ? "balanced plan, busy ranks lend diagonal rows and split pairs (the library's)"
                    : "balanced plan without lending or splitting");
        double most = 0, sum = 0;
        for (int r = 0; r < P; r++) {
            double tot[2] = {0, 0};
            for (int t = 0; t < plan.steps; t++) {
                const dfa__task *tk = &plan.tasks[(size_t)t * P + r];
                if (tk->q_chunk < 0) continue;
                double ms[2];
                time_block(&o, ops, ctx, &b, tk, n, &chunk, st, ms);
                tot[0] += ms[0], tot[1] += ms[1];
                char blk[64];
                snprintf(blk, sizeof blk, "q%d[%d:%d] x k%d[%d:%d]", tk->q_chunk, tk->row0, tk->row1, tk->k_chunk,
                         tk->k_row0, dfa__task_key_end(tk, n));
                printf("  %4d  %4d  %-38s %9.3g  %8.2f %8.2f\n", r, t, blk, (double)tk->work, ms[0], ms[1]);
            }
            printf("  rank %d: fwd %.2f ms, bwd %.2f ms, f+b %.2f ms\n", r, tot[0], tot[1], tot[0] + tot[1]);
            most = tot[0] + tot[1] > most ? tot[0] + tot[1] : most;
            sum += tot[0] + tot[1];
        }
        printf("  busiest rank f+b %.2f ms, mean %.2f ms: balance (mean / busiest) %.3f\n", most, sum / P,
               sum / P / most);
        worst[lend] = most;
        dfa__sched_plan_free(&plan);
    }
    if (worst[1] > 0) printf("\nlending and splitting: the busiest rank's f+b compute %.2f -> %.2f ms (%.2fx)\n", worst[0], worst[1],
                             worst[0] / worst[1]);
    ops->ctx_destroy(ctx);
    cudaFree(b.q), cudaFree(b.k), cudaFree(b.v), cudaFree(b.o), cudaFree(b.dout), cudaFree(b.lse);
    cudaFree(b.lse_rows), cudaFree(b.lse32), cudaFree(b.o32), cudaFree(b.dq32), cudaFree(b.dk32), cudaFree(b.dv32);
    cudaFree(b.ids), cudaFree(b.scratch);
    cudaStreamDestroy(st);
    free(work), free(cost), free(prefix), free(rows), free(keys), free(ids);
    return 0;
}
#endif
