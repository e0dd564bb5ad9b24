/* The trainer's files as a careless user or an attacker would meet them (train/outfile.h,
 * checkpoint.h, data.h, trainer.h):
 *  - temporary files: a symlink planted where the old fixed "<path>.tmp" was, and at every
 *    other name, is never followed: the victim keeps its bytes, the checkpoint or export is a
 *    regular file, and no temporary file is left behind;
 *  - a signal (SIGINT, SIGTERM) while a file is being written removes the temporary file and
 *    still ends the process by that signal;
 *  - same files: equal strings, hard links, symlinks, "./x" and "dir/../dir/x" spellings, and
 *    files not yet there; different files are different;
 *  - the up-front check of an output path: a missing folder, a directory, a device where a
 *    file would be renamed over, each named; a writable file or folder passes;
 *  - bounded readers: /dev/zero as a checkpoint or as data is refused by its kind, and a file
 *    whose header does not fit its size (1 GiB, sparse) is refused without reading it;
 *  - export's validation: a checkpoint that distflash train wrote passes, and one with a
 *    fractional d_model, a negative or huge step, a missing, extra or renamed field is refused
 *    naming it; duplicate metadata keys are refused by the safetensors writer;
 *  - --eval-seqs beyond DFT_EVAL_SEQS_MAX is refused instead of overflowing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/outfile.h"
#include "train/safetensors.h"
#include "train/trainer.h"

static char dir[] = "/tmp/dfa_test_outputs_XXXXXX";

static const char *at(const char *name) {
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

static int has_text(const char *path, const char *text) {
    char got[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = 0;
    return !strcmp(got, text);
}

/* Names in dir that start with prefix (temporary files left behind). */
static int count_prefix(const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

static int is_regular_file(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static dft_train_config tiny(void) {
    dft_train_config c = dft_train_defaults();
    c.model = (dft_model_config){.n_layers = 1, .d_model = 32, .n_heads = 2, .n_kv_heads = 2, .ffn = 32,
                                  .context = 256, .rope_base = 10000.0f, .init_std = 0.05f};
    c.batch = 1, c.steps = 2, c.warmup = 0, c.eval_every = 0, c.eval_seqs = 0, c.progress = 0, c.out = NULL;
    c.length_warmup = 0;
    return c;
}

static void test_planted_links(void) {
    write_text(at("victim"), "precious");
    float a[4] = {1, 2, 3, 4};
    float *sections[1] = {a};
    const dft_ckpt_field fields[1] = {{"x", 1.0}};
    char err[512] = "";
    /* the old fixed temporary name, and the target itself, are symlinks to the victim */
    symlink(at("victim"), at("c.ckpt.tmp"));
    symlink(at("victim"), at("c.ckpt"));
    CHECK(dft_ckpt_save(at("c.ckpt"), fields, 1, 7, sections, 1, 4, err, sizeof err) == 0, "save: %s", err);
    CHECK(has_text(at("victim"), "precious"), "the symlinked victim was overwritten by a checkpoint save");
    CHECK(is_regular_file(at("c.ckpt")), "the checkpoint is not a regular file (a planted link survived)");
    int64_t step = 0;
    float back[4] = {0};
    float *out[1] = {back};
    CHECK(dft_ckpt_load(at("c.ckpt"), fields, 1, &step, out, 1, 4, err, sizeof err) == 0 && step == 7 &&
              !memcmp(back, a, sizeof a),
          "the saved checkpoint does not read back: %s", err);
    CHECK(count_prefix("c.ckpt.tmp.") == 0, "temporary files of the checkpoint were left behind");

    dft_train_config c = tiny();
    const size_t total = dft_param_layout_of(&c.model).total;
    float *params = calloc(total, sizeof(float));
    symlink(at("victim"), at("w.safetensors.tmp"));
    symlink(at("victim"), at("w.safetensors"));
    CHECK(dft_export_safetensors(at("w.safetensors"), &c.model, params, 0, NULL, 0, err, sizeof err) == 0, "export: %s",
          err);
    CHECK(has_text(at("victim"), "precious"), "the symlinked victim was overwritten by an export");
    CHECK(is_regular_file(at("w.safetensors")), "the export is not a regular file");
    CHECK(count_prefix("w.safetensors.tmp.") == 0, "temporary files of the export were left behind");
    free(params);
}

static void test_signal_removes_tmp(void) {
    static const int sigs[] = {SIGINT, SIGTERM};
    for (int s = 0; s < 2; s++) {
        const pid_t pid = fork();
        if (pid == 0) {
            dft_outfile_cleanup_on_signals();
            dft_outfile o;
            char err[256];
            if (dft_outfile_open(&o, at("sig.ckpt"), "test", err, sizeof err)) _exit(3);
            fputs("partial", o.f);
            fflush(o.f);
            for (;;) pause(); /* killed by the parent */
        }
        /* wait until the child's temporary file is there, then signal it */
        int seen = 0;
        for (int i = 0; i < 20000 && !(seen = count_prefix("sig.ckpt.tmp.") > 0); i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        CHECK(seen, "the child's temporary file never appeared");
        kill(pid, sigs[s]);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sigs[s], "the child did not end by signal %d (status 0x%x)",
              sigs[s], status);
        CHECK(count_prefix("sig.ckpt.tmp.") == 0, "signal %d left the temporary file behind", sigs[s]);
        CHECK(access(at("sig.ckpt"), F_OK) != 0, "signal %d: the unfinished file took the target's name", sigs[s]);
    }
}

static void test_same_file(void) {
    write_text(at("a"), "a");
    write_text(at("b"), "b");
    link(at("a"), at("a.hard"));
    symlink(at("a"), at("a.soft"));
    mkdir(at("sub"), 0755);
    char dotted[600], up[600];
    snprintf(dotted, sizeof dotted, "%s/./a", dir);
    snprintf(up, sizeof up, "%s/sub/../new", dir);
    CHECK(dft_same_file(at("a"), at("a")), "a path is not the same as itself");
    CHECK(dft_same_file(at("a"), at("a.hard")), "a hard link is not the same file");
    CHECK(dft_same_file(at("a.soft"), at("a")), "a symlink is not the same file");
    CHECK(dft_same_file(dotted, at("a")), "dir/./a is not dir/a");
    CHECK(dft_same_file(up, at("new")), "dir/sub/../new (not there yet) is not dir/new");
    CHECK(!dft_same_file(at("a"), at("b")), "two files are the same");
    CHECK(!dft_same_file(at("new"), at("sub/new")), "two folders' new files are the same");
}

static void test_check(void) {
    char err[512];
    CHECK(dft_outfile_check("/nonexistent-dfa-dir/x.ckpt", "--save", 1, err, sizeof err) == -1 &&
              strstr(err, "--save /nonexistent-dfa-dir/x.ckpt: cannot create a file in /nonexistent-dfa-dir"),
          "a missing folder: %s", err);
    CHECK(dft_outfile_check(dir, "--export", 1, err, sizeof err) == -1 && strstr(err, "is a directory"),
          "a directory: %s", err);
    CHECK(dft_outfile_check(at("sub/"), "--log", 0, err, sizeof err) == -1 && strstr(err, "directory"),
          "a trailing slash: %s", err);
    CHECK(dft_outfile_check("/dev/null", "--save", 1, err, sizeof err) == -1 && strstr(err, "not a regular file"),
          "a device to rename over: %s", err);
    CHECK(dft_outfile_check("/dev/null", "--log", 0, err, sizeof err) == 0, "/dev/null as a log: %s", err);
    CHECK(dft_outfile_check(at("a"), "--save", 1, err, sizeof err) == 0, "an existing file: %s", err);
    CHECK(dft_outfile_check(at("fresh"), "--save", 1, err, sizeof err) == 0, "a new file: %s", err);
    CHECK(access(at("fresh"), F_OK) != 0 && count_prefix("fresh") == 0, "the check left a file behind");
    CHECK(dft_outfile_check("", "--save", 1, err, sizeof err) == -1, "an empty path passed");
}

static void test_bounded_readers(void) {
    char err[512] = "";
    const dft_ckpt_field fields[1] = {{"x", 1.0}};
    float a[4], *sections[1] = {a};
    int64_t step;
    CHECK(dft_ckpt_load("/dev/zero", fields, 1, &step, sections, 1, 4, err, sizeof err) == -1 &&
              strstr(err, "not a regular file"),
          "--resume /dev/zero: %s", err);
    dft_ckpt_named named[4];
    int nf;
    size_t nfloats;
    float *p0 = NULL;
    CHECK(dft_ckpt_read_any("/dev/zero", named, 4, &nf, &step, &nfloats, &p0, err, sizeof err) == -1 &&
              strstr(err, "not a regular file"),
          "export /dev/zero: %s", err);
    dft_data d;
    CHECK(dft_data_file(&d, "/dev/zero", 64, 1, err, sizeof err) == -1 && strstr(err, "not a regular file"),
          "--data /dev/zero: %s", err);
    /* a valid small checkpoint grown to 1 GiB (sparse): refused from its header and size */
    float *one[1] = {a};
    memset(a, 0, sizeof a);
    CHECK(dft_ckpt_save(at("big.ckpt"), fields, 1, 0, one, 1, 4, err, sizeof err) == 0, "save: %s", err);
    CHECK(truncate(at("big.ckpt"), (off_t)1 << 30) == 0, "truncate: %s", strerror(errno));
    const clock_t t0 = clock();
    CHECK(dft_ckpt_load(at("big.ckpt"), fields, 1, &step, sections, 1, 4, err, sizeof err) == -1 &&
              strstr(err, "past the end of the data"),
          "a 1 GiB file with a 4-float header: %s", err);
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 0.5, "the 1 GiB file took %.2f s of CPU: it was read",
          (double)(clock() - t0) / CLOCKS_PER_SEC);
    unlink(at("big.ckpt"));
}

static void test_export_validation(void) {
    char err[1024] = "";
    dft_train_config c = tiny();
    c.save_path = at("t.ckpt");
    dft_group g = {.rank = 0, .size = 1};
    dft_train_report rep;
    CHECK(dft_train(&c, &g, &rep, NULL, err, sizeof err) == 0, "training the checkpoint: %s", err);
    enum { MAXF = 64 };
    dft_ckpt_named f[MAXF];
    int nf = 0;
    int64_t step = 0;
    size_t nfloats = 0;
    float *params = NULL;
    CHECK(dft_ckpt_read_any(c.save_path, f, MAXF, &nf, &step, &nfloats, &params, err, sizeof err) == 0, "read: %s", err);
    free(params);
    dft_train_config got;
    CHECK(dft_train_config_of_fields(f, nf, step, &got, err, sizeof err) == 0, "a trainer's checkpoint refused: %s", err);
    CHECK(got.model.d_model == c.model.d_model && got.steps == c.steps && got.lr == c.lr && got.seed == c.seed,
          "the configuration read back differs");
    int d_model = -1;
    for (int i = 0; i < nf; i++)
        if (!strcmp(f[i].name, "d_model")) d_model = i;
    CHECK(d_model >= 0, "no d_model field");
    if (d_model < 0) return;

    dft_ckpt_named x[MAXF];
    memcpy(x, f, sizeof x);
    x[d_model].value = 16.5;
    CHECK(dft_train_config_of_fields(x, nf, step, &got, err, sizeof err) == -1 && strstr(err, "d_model = 16.5"),
          "d_model 16.5: %s", err);
    const int64_t steps[] = {-1, (int64_t)1 << 62, c.steps + 1};
    for (int i = 0; i < 3; i++)
        CHECK(dft_train_config_of_fields(f, nf, steps[i], &got, err, sizeof err) == -1 && strstr(err, "step "),
              "step %lld: %s", (long long)steps[i], err);
    memcpy(x, f, sizeof x);
    snprintf(x[nf].name, sizeof x[nf].name, "step");
    x[nf].value = 5;
    CHECK(dft_train_config_of_fields(x, nf + 1, step, &got, err, sizeof err) == -1 && strstr(err, "fields"),
          "an extra field named like a metadata key: %s", err);
    memcpy(x, f, sizeof x);
    snprintf(x[1].name, sizeof x[1].name, "%s", f[0].name); /* a duplicate name */
    CHECK(dft_train_config_of_fields(x, nf, step, &got, err, sizeof err) == -1 && strstr(err, f[1].name),
          "a duplicate field name: %s", err);
    CHECK(dft_train_config_of_fields(f, nf - 1, step, &got, err, sizeof err) == -1, "a missing field passed");
    memcpy(x, f, sizeof x);
    x[d_model].value = 0;
    CHECK(dft_train_config_of_fields(x, nf, step, &got, err, sizeof err) == -1, "d_model 0 passed");

    /* the writer refuses duplicate metadata keys, its own among them */
    const size_t total = dft_param_layout_of(&c.model).total;
    float *zeros = calloc(total, sizeof(float));
    const dft_export_meta twice[] = {{"distflash.step", "1"}, {"distflash.step", "2"}};
    CHECK(dft_export_safetensors(at("d.safetensors"), &c.model, zeros, 0, twice, 2, err, sizeof err) == -1 &&
              strstr(err, "distflash.step") && strstr(err, "twice"),
          "duplicate metadata keys: %s", err);
    const dft_export_meta builtin[] = {{"hidden_size", "7"}};
    CHECK(dft_export_safetensors(at("d.safetensors"), &c.model, zeros, 0, builtin, 1, err, sizeof err) == -1 &&
              strstr(err, "hidden_size"),
          "a metadata key of the writer's own: %s", err);
    CHECK(access(at("d.safetensors"), F_OK) != 0 && count_prefix("d.safetensors") == 0,
          "a refused export left a file behind");
    free(zeros);
}

static void test_eval_seqs(void) {
    char err[512] = "";
    dft_train_config c = tiny();
    c.eval_seqs = 2147483647;
    dft_group g = {.rank = 0, .size = 1};
    dft_train_report rep;
    CHECK(dft_train(&c, &g, &rep, NULL, err, sizeof err) == -1 && strstr(err, "eval-seqs = 2147483647"),
          "eval_seqs INT_MAX: %s", err);
    c.eval_seqs = DFT_EVAL_SEQS_MAX + 1;
    CHECK(dft_train(&c, &g, &rep, NULL, err, sizeof err) == -1 && strstr(err, "eval-seqs"), "eval_seqs max + 1: %s",
          err);
}

int main(void) {
    tl_init("test_outputs");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_planted_links();
    test_signal_removes_tmp();
    test_same_file();
    test_check();
    test_bounded_readers();
    test_export_validation();
    test_eval_seqs();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_outputs: could not remove %s\n", dir);
    return tl_finish("test_outputs");
}
