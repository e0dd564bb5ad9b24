/* `distflash train`: the small LLaMA-style trainer (train/model, train/). Under
 * `mpirun -np P` the ranks split every sequence (sequence parallelism). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "commands.h"
#include "train_args.h"
#include "train_paths.h"
#include "train/outfile.h"
#include "train/model/matmul.h"
#include "train/model/preset.h"
#include "train/safetensors.h"
#include "train/trainer.h"

/* The presets with their parameter counts (from the layout, so they cannot drift). */
static void list_presets(FILE *f) {
    int n;
    const dft_model_preset *p = dft_model_presets(&n);
    for (int i = 0; i < n; i++) {
        const dft_model_config *m = &p[i].model;
        double params = (double)dft_param_layout_of(m).total;
        char count[32];
        if (params >= 1e9) snprintf(count, sizeof count, "%.2fB", params / 1e9);
        else if (params >= 1e6) snprintf(count, sizeof count, "%.1fM", params / 1e6);
        else snprintf(count, sizeof count, "%.0fK", params / 1e3);
        fprintf(f, "    %-10s %7s params: %d layers, d %d, heads %d/%d, ffn %d, context %d\n%15s%s\n", p[i].name, count,
                m->n_layers, m->d_model, m->n_heads, m->n_kv_heads, m->ffn, m->context, "", p[i].what);
    }
}

static void usage(FILE *f) {
    dft_train_config d = dft_train_defaults();
    fprintf(f,
            "usage: [mpirun -np P] distflash train [options]\n\n"
            "Trains a byte-level LLaMA-style model (RMSNorm, RoPE at global positions, GQA attention through\n"
            "distflash, SwiGLU) with AdamW. Under mpirun every rank holds context/P positions of each sequence.\n\n"
            "model:\n"
            "  --preset NAME          a named model shape (options after it override it); the presets:\n");
    list_presets(f);
    fprintf(f,
            "  --layers N --d-model D --heads H --kv-heads K --ffn F        [%d, %d, %d, %d, %d]\n"
            "  --context T            positions per sequence, all ranks      [%d]\n"
            "  --rope-base B --init-std S                                    [%g, %g]\n"
            "training:\n"
            "  --steps N --batch B    schedule length, sequences per step    [%d, %d]\n"
            "  --lr LR --lr-min LR --warmup N                                [%g, %g, %d]\n"
            "  --weight-decay W --clip C                                     [%g, %g]\n"
            "  --seed S               weights and data                       [%llu]\n"
            "  --checkpoint none|layer|attn-output   activation checkpointing [%s]\n"
            "  --sp balanced|ring     sequence-parallel attention schedule   [balanced]\n"
            "  --overlap 0|1          overlap communication with compute     [%d]\n"
            "  --threads N            OpenMP threads per rank, at most 4 per CPU [cores / ranks]\n"
            "  --device cpu|cuda      where the model runs (cuda: one GPU per rank, bf16) [cpu]\n"
            "  --deterministic 0|1    cuda: bitwise reproducible steps (slower attention backward) [0]\n"
            "  --profile 0|1          cuda: per-phase GPU time breakdown at the end [0]\n"
            "data and evaluation:\n"
            "  --data FILE            train on a byte file (default: built-in passkey retrieval)\n"
            "  --answer-weight W      passkey: loss weight of the key's digits [%g]\n"
            "  --length-warmup F      this fraction of the steps trains on shorter sequences, from 256\n"
            "                         positions doubling up to the context (0: off)            [%g]\n"
            "  --eval-every N --eval-seqs N   held-out evaluation (eval-seqs <= %d) [%d, %d]\n"
            "output:\n"
            "  --log FILE.csv --plot FILE.png   per-step log and its plot (gnuplot)\n"
            "  --save FILE [--save-every N]     checkpoint file (at the end, and every N steps)\n"
            "  --resume FILE                    continue from a checkpoint (bitwise as if never stopped);\n"
            "                                   --save may name the same file\n"
            "  --stop-after N                   stop after step N of the schedule (then --resume)\n"
            "  --export FILE.safetensors        the final weights as safetensors (Hugging Face LLaMA names;\n"
            "                                   also: distflash export CKPT OUT.safetensors)\n"
            "  --export-dtype f32|bf16          the exported weights' type                  [f32]\n"
            "  --progress auto|lines|live       a live line on a terminal, else plain periodic lines (auto);\n"
            "                                   under mpirun the ranks see a terminal even when mpirun's output\n"
            "                                   goes to a file: say lines                    [auto]\n"
            "  --quiet                          no progress\n"
            "  Every output path is checked before training: its folder must exist and take a new file, it\n"
            "  may not be a directory, two outputs may not name one file, nor an output the --data or\n"
            "  --resume file (compared as files, through links). Checkpoints and exports are written under\n"
            "  a temporary name beside the target and renamed; Ctrl-C (SIGINT, SIGTERM) removes it.\n"
            "  --data and --resume read regular files only (their size is known before reading).\n"
            "CPU matmuls: %s (DFA_MM_BACKEND=own|blas picks the backend at run time); GPU: cuBLASLt\n",
            d.model.n_layers, d.model.d_model, d.model.n_heads, d.model.n_kv_heads, d.model.ffn, d.model.context,
            d.model.rope_base, d.model.init_std, d.steps, d.batch, d.lr, d.lr_min, d.warmup, d.weight_decay, d.clip,
            (unsigned long long)d.seed, dft_ckpt_policy_name(d.policy), d.overlap, d.answer_weight, d.length_warmup,
            DFT_EVAL_SEQS_MAX, d.eval_every, d.eval_seqs, dft_gemm_describe());
}

/* Threads per rank: an explicit --threads, else OMP_NUM_THREADS, else the cores shared
   among the ranks of this node. */
static int default_threads(void) {
    if (getenv("OMP_NUM_THREADS")) return 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = local ? atol(local) : 1;
    if (cores < 1) cores = 1;
    if (ranks < 1) ranks = 1;
    return cores / ranks > 0 ? (int)(cores / ranks) : 1;
}

int cmd_train(int argc, char **argv) {
    train_args a;
    char err[1024] = "";
    if (train_args_parse(argc, argv, &a, err, sizeof err)) {
        fprintf(stderr, "distflash train: %s\n", err);
        return 2;
    }
    if (a.help) return usage(stdout), 0;
    dft_train_config c = a.cfg;
    int threads = a.threads >= 0 ? a.threads : default_threads();
    if (threads > 0) {
        if (dfa_set_num_threads(threads) != DFA_OK) {
            fprintf(stderr, "distflash train: --threads %d: %s\n", threads, dfa_last_error());
            return 2;
        }
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
    }

    dft_group g;
    if (dft_group_open(&g, &argc, &argv, err, sizeof err)) {
        fprintf(stderr, "distflash train: %s\n", err);
        return 1;
    }
    /* the files before the work (rank 0 writes them); a signal then takes the temporary
       files along (train/outfile.h) */
    const int bad_paths = g.rank == 0 && train_paths_check(&a, err, sizeof err);
    if (dft_group_any(&g, bad_paths)) {
        if (bad_paths) fprintf(stderr, "distflash train: %s\n", err);
        dft_group_close(&g);
        return 2;
    }
    dft_outfile_cleanup_on_signals();
    c.out = g.rank == 0 ? stdout : NULL;
    c.progress = a.quiet ? DFT_PROGRESS_NONE : a.progress;
    dft_train_report rep;
    float *final = NULL;
    int rc = dft_train(&c, &g, &rep, a.export_path && g.rank == 0 ? &final : NULL, err, sizeof err); /* rank 0 writes */
    if (rc == 0 && a.export_path && g.rank == 0) {
        char step[32];
        snprintf(step, sizeof step, "%d", rep.steps_done);
        dft_export_meta meta[] = {{"distflash.step", step}, {"distflash.data", c.data_path ? c.data_path : "passkey"}};
        if (dft_export_safetensors(a.export_path, &c.model, final, a.export_bf16, meta, 2, err, sizeof err)) rc = -1;
        else printf("export: %s (%s)\n", a.export_path, a.export_bf16 ? "bf16" : "f32");
    }
    free(final);
    if (rc) {
        if (g.rank == 0) fprintf(stderr, "distflash train: %s\n", err);
    } else if (g.rank == 0) {
        int passkey = !c.data_path;
        printf("done: steps %d..%d in %.1f s (median step %.3f s), %.0f tokens/s over %d rank%s\n", rep.first_step,
               rep.steps_done, rep.seconds, rep.median_step_seconds, rep.tokens_per_second, g.size,
               g.size > 1 ? "s" : "");
        printf("loss %.4f; eval loss %.4f; %s %.4f%s", rep.loss, rep.eval_loss,
               passkey ? "passkey exact-match accuracy" : "next-byte accuracy", rep.eval_acc,
               passkey ? " (chance 1e-5)" : "");
        if (passkey) printf("; digits right %.4f (chance 0.1)", rep.eval_digit_acc);
        printf(" over %lld held-out sequences\n", ((long long)c.eval_seqs + c.batch - 1) / c.batch * c.batch);
        printf("attention: %.1f forward and %.1f backward calls per step (checkpoint %s), %.3f s per step on rank 0\n",
               rep.attn_fwd_calls_per_step, rep.attn_bwd_calls_per_step, dft_ckpt_policy_name(c.policy),
               rep.attn_seconds_per_step);
        printf("memory: activations %.1f MiB per rank, peak resident %.1f MiB (largest rank)\n", rep.acts_mib,
               rep.peak_rss_mib);
        if (c.device == DFT_DEVICE_CUDA) printf("gpu memory: peak %.1f MiB in use (largest rank)\n", rep.peak_device_mib);
        if (c.profile) {
            printf("gpu time per step (rank 0):");
            for (int i = 0; i < DFT_DEVICE_PHASES; i++)
                printf(" %s %.4f s%s", dft_device_phase_name(i), rep.phase_seconds_per_step[i],
                       i + 1 < DFT_DEVICE_PHASES ? "," : "\n");
        }
        printf("matmuls: %s\n", c.device == DFT_DEVICE_CUDA ? "cuBLASLt (bf16 in, float32 accumulate)" : dft_gemm_describe());
    }
    dft_group_close(&g);
    return rc ? 1 : 0;
}
