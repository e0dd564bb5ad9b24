/* Training with --device cuda under mpirun -np 2 (one GPU per rank) against one GPU on whole
 * sequences: the same configuration for a few steps gives the same losses and parameters within
 * the bf16 rounding of the two runs (the distributed attention merges partial results in another
 * order). Rule: the losses agree to 1e-2 relative, and the parameters differ by less than a quarter
 * of how far training moved them (AdamW moves every parameter by about lr, so those whose gradient
 * is within bf16 noise of zero may go either way; a rank missing the others' gradients, or the
 * wrong positions, lands about as far away as training moved). Every rank ends with the same bits (NCCL's sum). Needs 2 GPUs:
 * with fewer it says so and exits 77 (skipped). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_train_util.h"
#include "testlib.h"
#include "train/trainer.h"

static dft_train_config small(void) {
    dft_train_config c = dft_train_defaults();
    c.model = (dft_model_config){.n_layers = 2, .d_model = 128, .n_heads = 4, .n_kv_heads = 2, .ffn = 256,
                                  .context = 1024, .rope_base = 10000.0f, .init_std = 0.02f};
    c.batch = 2, c.steps = 4, c.warmup = 1, c.lr = 1e-3f, c.lr_min = 1e-4f;
    c.eval_every = 0, c.eval_seqs = 2, c.progress = 0, c.out = NULL, c.answer_weight = 4.0f, c.length_warmup = 0;
    c.device = DFT_DEVICE_CUDA;
    return c;
}

int main(int argc, char **argv) {
    dft_group g;
    char err[1024] = "";
    if (dft_group_open(&g, &argc, &argv, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    int gpus = gpu_count();
    if (gpus < g.size || g.size < 2) {
        if (g.rank == 0)
            printf("test_gpu_train_dist: %d rank(s) and %d GPU(s) visible: needs 2 ranks with a GPU each: skipped\n", g.size,
                   gpus);
        dft_group_close(&g);
        return 77;
    }
    tl_init("test_gpu_train_dist");
    dft_train_config c = small();
    size_t total = dft_param_layout_of(&c.model).total;
    dft_train_report rep, ref_rep;
    float *got = NULL, *ref = NULL;
    for (int sched = 0; sched < 2; sched++) {
        c = small();
        c.schedule = sched ? DFA_SCHEDULE_RING : DFA_SCHEDULE_BALANCED;
        int rc = dft_train(&c, &g, &rep, &got, err, sizeof err);
        CHECK(rc == 0, "%d GPUs: %s", g.size, err);
        if (rc) break;
        float *copy = malloc(sizeof(float) * total);
        memcpy(copy, got, sizeof(float) * total);
        MPI_Bcast(copy, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD);
        CHECK(memcmp(copy, got, sizeof(float) * total) == 0, "rank %d's parameters differ from rank 0's", g.rank);
        free(copy);
        if (g.rank == 0) {
            if (!ref) { /* one GPU, whole sequences (the other ranks wait) */
                dft_group one = {.rank = 0, .size = 1};
                dft_train_config o = small();
                CHECK(dft_train(&o, &one, &ref_rep, &ref, err, sizeof err) == 0, "one GPU: %s", err);
            }
            if (ref) {
                float *init = malloc(sizeof(float) * total);
                dft_model_init(&c.model, init, c.seed);
                double moved = 0, apart = 0;
                for (size_t i = 0; i < total; i++) {
                    moved += ((double)ref[i] - init[i]) * ((double)ref[i] - init[i]);
                    apart += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
                }
                double le = fabs(rep.loss - ref_rep.loss) / ref_rep.loss, ratio = sqrt(apart / moved);
                if (getenv("DFA_TRAIN_STATS"))
                    printf("  %s: loss %.6f (one GPU %.6f), parameters apart / moved %.3g\n", sched ? "ring" : "balanced",
                           rep.loss, ref_rep.loss, ratio);
                CHECK(le < 1e-2, "%s: loss %.6g on %d GPUs, %.6g on one", sched ? "ring" : "balanced", rep.loss, g.size,
                      ref_rep.loss);
                CHECK(ratio < 0.25, "%s: the parameters differ from one GPU's by %.3g of the distance training moved them",
                      sched ? "ring" : "balanced", ratio);
                free(init);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        free(got), got = NULL;
    }
    /* a context the ranks do not divide is refused on every rank alike */
    dft_train_config bad = small();
    bad.model.context = 1023;
    err[0] = '\0';
    CHECK(dft_train(&bad, &g, &rep, NULL, err, sizeof err) != 0 && strstr(err, "not divisible"),
          "context 1023 on %d ranks: \"%s\"", g.size, err);
    free(ref);
    int failures = tl_failures;
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int rc = tl_finish("test_gpu_train_dist");
    dft_group_close(&g);
    return failures ? 1 : rc;
}
