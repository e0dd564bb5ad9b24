/* Training with --device cuda in one process: the loss falls, a stopped and resumed run ends
 * with the bits of an uninterrupted one (deterministic attention), checkpoints move between
 * the GPU and the CPU trainer (same file), and bad configurations are refused with messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_train_util.h"
#include "testlib.h"
#include "train/trainer.h"

static dft_train_config small(void) {
    dft_train_config c = dft_train_defaults();
    c.model = (dft_model_config){.n_layers = 2, .d_model = 128, .n_heads = 4, .n_kv_heads = 2, .ffn = 256,
                                  .context = 512, .rope_base = 10000.0f, .init_std = 0.02f};
    c.batch = 2, c.steps = 6, c.warmup = 1, c.lr = 3e-3f, c.lr_min = 3e-4f;
    c.eval_every = 0, c.eval_seqs = 4, c.progress = 0, c.out = NULL, c.answer_weight = 4.0f, c.length_warmup = 0;
    c.device = DFT_DEVICE_CUDA, c.deterministic = 1;
    return c;
}

int main(int argc, char **argv) {
    if (gpu_count() < 1) return printf("no CUDA device: skipped\n"), 77;
    tl_init("test_gpu_train");
    dft_group g;
    char err[1024] = "";
    if (dft_group_open(&g, &argc, &argv, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    char dir[] = "/tmp/dft_gpu_train_XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    char ck[256], ck_cpu[256];
    snprintf(ck, sizeof ck, "%s/gpu.ckpt", dir), snprintf(ck_cpu, sizeof ck_cpu, "%s/cpu.ckpt", dir);
    dft_train_config shape = small();
    size_t total = dft_param_layout_of(&shape.model).total;
    dft_train_report rep, rep2;

    /* uninterrupted, and the loss falls */
    dft_train_config c = small();
    c.steps = 30, c.warmup = 3;
    float *full = NULL;
    CHECK(dft_train(&c, &g, &rep, &full, err, sizeof err) == 0, "30 steps on the GPU: %s", err);
    double first_loss = log(256.0); /* the untrained model predicts about uniformly */
    CHECK(isfinite(rep.loss) && rep.loss < 0.8 * first_loss, "the loss after 30 steps is %.4f (start ~%.4f)", rep.loss,
          first_loss);
    CHECK(rep.attn_fwd_calls_per_step == c.model.n_layers && rep.attn_bwd_calls_per_step == c.model.n_layers,
          "attn-output: %.1f/%.1f attention calls per step", rep.attn_fwd_calls_per_step, rep.attn_bwd_calls_per_step);
    CHECK(isfinite(rep.eval_loss) && rep.peak_device_mib > 0, "eval loss %.4f, peak device memory %.1f MiB", rep.eval_loss,
          rep.peak_device_mib);
    free(full), full = NULL;

    /* stop after 3 of 6 steps, resume: the same bits as 6 steps at once */
    c = small();
    CHECK(dft_train(&c, &g, &rep, &full, err, sizeof err) == 0, "6 steps: %s", err);
    dft_train_config s = small();
    s.stop_after = 3, s.save_path = ck;
    CHECK(dft_train(&s, &g, &rep2, NULL, err, sizeof err) == 0, "3 steps and save: %s", err);
    dft_train_config r = small();
    r.resume_path = ck;
    float *resumed = NULL;
    CHECK(dft_train(&r, &g, &rep2, &resumed, err, sizeof err) == 0, "resume: %s", err);
    CHECK(full && resumed && memcmp(full, resumed, sizeof(float) * total) == 0 && rep.loss == rep2.loss,
          "a resumed GPU run differs from an uninterrupted one (loss %.9g vs %.9g)", rep2.loss, rep.loss);

    /* the GPU's checkpoint resumes on the CPU, and the CPU's on the GPU */
    dft_train_config on_cpu = small();
    on_cpu.device = DFT_DEVICE_CPU, on_cpu.deterministic = 0, on_cpu.resume_path = ck;
    float *cpu_end = NULL;
    CHECK(dft_train(&on_cpu, &g, &rep2, &cpu_end, err, sizeof err) == 0 && rep2.first_step == 3,
          "a GPU checkpoint on the CPU: %s", err);
    if (cpu_end && full) {
        /* the same training from the same state: close, not equal. AdamW moves a parameter by about
           lr whatever its gradient's size, so the ~1% of parameters whose gradient is within the bf16
           noise of zero may move either way: about 0.015 relative here. A checkpoint not loaded (the
           initial weights) would be ~0.5 away. */
        double e = rel_l2(cpu_end, full, total);
        if (getenv("DFA_TRAIN_STATS")) printf("  GPU checkpoint continued on the CPU: %.3g relative from the GPU run\n", e);
        CHECK(e < 5e-2, "continued on the CPU, the parameters are %.3g away (relative) from the GPU's", e);
    }
    dft_train_config cpu_save = small();
    cpu_save.device = DFT_DEVICE_CPU, cpu_save.deterministic = 0, cpu_save.stop_after = 2, cpu_save.save_path = ck_cpu;
    CHECK(dft_train(&cpu_save, &g, &rep2, NULL, err, sizeof err) == 0, "CPU run: %s", err);
    dft_train_config on_gpu = small();
    on_gpu.resume_path = ck_cpu;
    CHECK(dft_train(&on_gpu, &g, &rep2, NULL, err, sizeof err) == 0 && rep2.first_step == 2 && isfinite(rep2.loss),
          "a CPU checkpoint on the GPU: %s", err);

    /* the three policies train alike (bitwise with deterministic attention) */
    float *pol[3] = {NULL, NULL, NULL};
    for (int p = 0; p < 3; p++) {
        dft_train_config q = small();
        q.steps = 3, q.policy = (dft_ckpt_policy)p;
        CHECK(dft_train(&q, &g, &rep2, &pol[p], err, sizeof err) == 0, "policy %s: %s",
              dft_ckpt_policy_name((dft_ckpt_policy)p), err);
        if (p == DFT_CKPT_LAYER)
            CHECK(rep2.attn_fwd_calls_per_step == 2 * q.model.n_layers, "layer: %.1f forward attention calls per step",
                  rep2.attn_fwd_calls_per_step);
    }
    for (int p = 1; p < 3; p++)
        if (pol[0] && pol[p]) {
            double e = rel_l2(pol[p], pol[0], total);
            CHECK(e < 1e-6, "policy %s trains differently from none on the GPU (relative %.3g)",
                  dft_ckpt_policy_name((dft_ckpt_policy)p), e);
            if (getenv("DFA_TRAIN_STATS"))
                printf("  policy %s vs none after 3 steps: %s\n", dft_ckpt_policy_name((dft_ckpt_policy)p),
                       memcmp(pol[p], pol[0], sizeof(float) * total) ? "close, not bitwise" : "bitwise equal");
        }

    /* a byte file instead of the passkey task, with the per-step CSV */
    char data[256], csv[256];
    snprintf(data, sizeof data, "%s/bytes.txt", dir), snprintf(csv, sizeof csv, "%s/log.csv", dir);
    FILE *f = fopen(data, "wb");
    for (int i = 0; f && i < 20000; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog\n", i % 97);
    if (f) fclose(f);
    dft_train_config fd = small();
    fd.data_path = data, fd.csv_path = csv, fd.steps = 4;
    CHECK(dft_train(&fd, &g, &rep2, NULL, err, sizeof err) == 0 && isfinite(rep2.eval_acc), "--data on the GPU: %s", err);
    int lines = 0, ch;
    FILE *lf = fopen(csv, "r");
    while (lf && (ch = fgetc(lf)) != EOF) lines += ch == '\n';
    if (lf) fclose(lf);
    CHECK(lines == fd.steps + 1, "the CSV log has %d lines, expected a header and %d steps", lines, fd.steps);

    /* refusals, with the reason */
    dft_train_config bad = small();
    bad.model.ffn = 100;
    CHECK(dft_train(&bad, &g, &rep2, NULL, err, sizeof err) != 0 && strstr(err, "ffn"), "ffn 100: \"%s\"", err);
    bad = small(), bad.device = 5;
    CHECK(dft_train(&bad, &g, &rep2, NULL, err, sizeof err) != 0 && strstr(err, "device"), "device 5: \"%s\"", err);
    bad = small(), bad.model.n_heads = 3;
    CHECK(dft_train(&bad, &g, &rep2, NULL, err, sizeof err) != 0 && strstr(err, "heads"), "heads 3: \"%s\"", err);

    for (int p = 0; p < 3; p++) free(pol[p]);
    free(full), free(resumed), free(cpu_end);
    unlink(ck), unlink(ck_cpu), unlink(data), unlink(csv), rmdir(dir);
    dft_group_close(&g);
    return tl_finish("test_gpu_train");
}
