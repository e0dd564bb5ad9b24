/* The training loop in one process: resume continues bitwise, the checkpoint policies train
 * identically, training lowers the loss, and bad configurations, data files and checkpoint
 * files give clear errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "train/trainer.h"

static char dir[256];

static const char *path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static dft_train_config tiny(void) {
    dft_train_config c = dft_train_defaults();
    c.model = (dft_model_config){.n_layers = 2, .d_model = 32, .n_heads = 4, .n_kv_heads = 2, .ffn = 48,
                                  .context = 264, .rope_base = 10000.0f, .init_std = 0.05f};
    c.batch = 2, c.steps = 6, c.warmup = 2, c.lr = 3e-3f, c.lr_min = 3e-4f;
    c.eval_every = 0, c.eval_seqs = 4, c.progress = 0, c.out = NULL;
    c.answer_weight = 10.0f, c.length_warmup = 0;
    return c;
}

static float *train(dft_train_config c, dft_train_report *rep, char *err, size_t errlen) {
    dft_group g = {.rank = 0, .size = 1};
    float *params = NULL;
    if (dft_train(&c, &g, rep, &params, err, errlen)) return NULL;
    return params;
}

static size_t nparams(void) {
    dft_model_config m = tiny().model;
    return dft_param_layout_of(&m).total;
}

static void test_resume_is_bitwise(void) {
    char err[1024];
    dft_train_report rep;
    dft_train_config c = tiny();
    float *straight = train(c, &rep, err, sizeof err);
    CHECK(straight != NULL, "uninterrupted run: %s", err);
    CHECK(rep.attn_fwd_calls_per_step == 2 && rep.attn_bwd_calls_per_step == 2,
          "attn-output: %.1f attention forwards per step (want 2 = one per layer)", rep.attn_fwd_calls_per_step);

    dft_train_config first = c;
    first.stop_after = 3, first.save_path = path("run.ckpt");
    float *half = train(first, &rep, err, sizeof err);
    CHECK(half != NULL && rep.steps_done == 3, "first half: %s", err);
    dft_train_config second = c;
    second.resume_path = path("run.ckpt");
    float *resumed = train(second, &rep, err, sizeof err);
    CHECK(resumed != NULL && rep.first_step == 3 && rep.steps_done == 6, "resumed run: %s", err);
    if (straight && resumed)
        CHECK(memcmp(straight, resumed, sizeof(float) * nparams()) == 0, "resumed parameters differ from uninterrupted");
    free(half), free(resumed);

    /* the same run under the other checkpoint policies: the same bits */
    for (int p = DFT_CKPT_NONE; p <= DFT_CKPT_LAYER; p++) {
        dft_train_config o = c;
        o.policy = (dft_ckpt_policy)p;
        float *q = train(o, &rep, err, sizeof err);
        CHECK(q != NULL, "policy %s: %s", dft_ckpt_policy_name(o.policy), err);
        CHECK(rep.attn_fwd_calls_per_step == (p == DFT_CKPT_LAYER ? 4 : 2), "policy %s: %.1f attention forwards per step",
              dft_ckpt_policy_name(o.policy), rep.attn_fwd_calls_per_step);
        if (q && straight)
            CHECK(memcmp(q, straight, sizeof(float) * nparams()) == 0, "policy %s trains differently from attn-output",
                  dft_ckpt_policy_name(o.policy));
        free(q);
    }
    free(straight);
}

/* A length warm-up (256 positions for the first 3 steps, then 264): a resume across the stage
   change is still bitwise, and the evaluation runs at the whole context. */
static void test_length_warmup_resume(void) {
    char err[1024];
    dft_train_report rep;
    dft_train_config c = tiny();
    c.length_warmup = 0.5f; /* 3 of the 6 steps */
    float *straight = train(c, &rep, err, sizeof err);
    CHECK(straight != NULL && isfinite(rep.eval_acc), "warm-up run: %s", err);
    dft_train_config first = c;
    first.stop_after = 2, first.save_path = path("warm.ckpt");
    free(train(first, &rep, err, sizeof err));
    dft_train_config second = c;
    second.resume_path = path("warm.ckpt");
    float *resumed = train(second, &rep, err, sizeof err);
    CHECK(resumed != NULL && rep.first_step == 2, "resumed warm-up run: %s", err);
    if (straight && resumed)
        CHECK(memcmp(straight, resumed, sizeof(float) * nparams()) == 0, "warm-up: resumed parameters differ");
    /* and it is not the run without a warm-up */
    float *plain = train(tiny(), &rep, err, sizeof err);
    if (straight && plain)
        CHECK(memcmp(straight, plain, sizeof(float) * nparams()) != 0, "the warm-up changed nothing");
    free(straight), free(resumed), free(plain);
}

static void test_checkpoint_errors(void) {
    char err[1024];
    dft_train_report rep;
    dft_train_config c = tiny();
    c.steps = 2, c.save_path = path("good.ckpt");
    free(train(c, &rep, err, sizeof err));

    /* a flipped byte in the middle of the file */
    FILE *f = fopen(path("good.ckpt"), "rb");
    CHECK(f != NULL, "checkpoint not written");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size);
    CHECK(fread(bytes, 1, (size_t)size, f) == (size_t)size, "read back");
    fclose(f);
    bytes[size / 2] ^= 0x10;
    f = fopen(path("bad.ckpt"), "wb");
    fwrite(bytes, 1, (size_t)size, f);
    fclose(f);
    free(bytes);

    struct {
        const char *what, *file, *expect;
        int d_model;
    } cases[] = {
        {"corrupt file", "bad.ckpt", "checksum", 32},
        {"another model", "good.ckpt", "d_model", 64},
        {"missing file", "nope.ckpt", "nope.ckpt", 32},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dft_train_config r = tiny();
        r.model.d_model = cases[i].d_model;
        r.resume_path = path(cases[i].file);
        err[0] = 0;
        float *p = train(r, &rep, err, sizeof err);
        CHECK(p == NULL && strstr(err, cases[i].expect), "%s: want an error naming \"%s\", got \"%s\"", cases[i].what,
              cases[i].expect, err);
        free(p);
    }
}

static void test_bad_configs(void) {
    char err[1024];
    dft_train_report rep;
    struct {
        const char *what, *expect;
        dft_train_config c;
    } cases[] = {
        {"heads not dividing d_model", "heads = 5 does not divide d_model", tiny()},
        {"unreadable data file", "no-such-file.txt", tiny()},
        {"context below the passkey minimum", "context", tiny()},
        {"batch 0", "batch = 0", tiny()},
        {"warm-up longer than the run", "warmup", tiny()},
        {"negative length warm-up", "length-warmup", tiny()},
    };
    cases[0].c.model.n_heads = 5;
    cases[1].c.data_path = "/nonexistent/no-such-file.txt";
    cases[2].c.model.context = 64;
    cases[3].c.batch = 0;
    cases[4].c.warmup = 100;
    cases[5].c.length_warmup = -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        float *p = train(cases[i].c, &rep, err, sizeof err);
        CHECK(p == NULL && strstr(err, cases[i].expect), "%s: want an error naming \"%s\", got \"%s\"", cases[i].what,
              cases[i].expect, err);
        free(p);
    }
}

static void test_learns_a_file(void) {
    /* a byte file with an obvious pattern: the loss must fall well below log(256) */
    FILE *f = fopen(path("text.txt"), "wb");
    for (int i = 0; i < 4000; i++) fputs("abcabd ", f);
    fclose(f);
    dft_train_config c = tiny();
    c.data_path = path("text.txt"), c.steps = 30, c.lr = 1e-2f, c.lr_min = 1e-3f, c.warmup = 3, c.eval_seqs = 2;
    c.csv_path = path("log.csv");
    char err[1024];
    dft_train_report rep;
    float *p = train(c, &rep, err, sizeof err);
    CHECK(p != NULL, "file run: %s", err);
    CHECK(rep.loss < 1.5 && rep.eval_acc > 0.5, "loss %.3f, next-byte accuracy %.3f after 30 steps", rep.loss, rep.eval_acc);
    FILE *log = fopen(path("log.csv"), "r");
    int lines = 0;
    char line[512];
    while (log && fgets(line, sizeof line, log)) lines++;
    if (log) fclose(log);
    CHECK(lines == 31, "log has %d lines, want a header and 30 rows", lines);
    free(p);
}

int main(void) {
    tl_init("test_trainer");
    snprintf(dir, sizeof dir, "/tmp/dfa-test-trainer-%d", (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd)) return fprintf(stderr, "cannot create %s\n", dir), 1;
    test_resume_is_bitwise();
    test_length_warmup_resume();
    test_checkpoint_errors();
    test_bad_configs();
    test_learns_a_file();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return tl_finish("test_trainer");
}
