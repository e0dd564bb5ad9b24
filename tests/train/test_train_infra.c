/* The trainer's infrastructure: the learning-rate schedule, AdamW and clipping against a
 * plain double re-implementation, checkpoint files (round trip, and refusal of every kind of
 * damaged or mismatched file without touching the outputs), the CSV log and the plot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"
#include "train/checkpoint.h"
#include "train/log.h"
#include "train/optim.h"

static char tmp_prefix[64];

/* A scratch path for this process: /tmp/dfa-infra-test-<pid>-<name>. */
static const char *scratch(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s-%s", tmp_prefix, name);
    return buf;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (n == cap) buf = realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int close_rel(double a, double b, double rel) { return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-30; }

/* ---- learning-rate schedule ---- */

static void test_lr(void) {
    dft_lr_schedule s = {.lr_max = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 10, .total_steps = 110};
    CHECK(close_rel(dft_lr_at(&s, 0), 1e-4, 1e-6), "lr step 0: %g", dft_lr_at(&s, 0));
    CHECK(close_rel(dft_lr_at(&s, 4), 5e-4, 1e-6), "lr step 4: %g", dft_lr_at(&s, 4));
    CHECK(close_rel(dft_lr_at(&s, 9), 1e-3, 1e-6), "lr at the end of warm-up: %g", dft_lr_at(&s, 9));
    CHECK(close_rel(dft_lr_at(&s, 10), 1e-3, 1e-6), "lr at the start of decay: %g", dft_lr_at(&s, 10));
    CHECK(close_rel(dft_lr_at(&s, 60), 5.5e-4, 1e-6), "lr at the midpoint: %g", dft_lr_at(&s, 60));
    double q = 1e-4 + 0.9e-3 * (1 + cos(3.14159265358979323846 * 0.25)) / 2;
    CHECK(close_rel(dft_lr_at(&s, 35), q, 1e-6), "lr at a quarter: %g vs %g", dft_lr_at(&s, 35), q);
    CHECK(close_rel(dft_lr_at(&s, 110), 1e-4, 1e-6), "lr at the end: %g", dft_lr_at(&s, 110));
    CHECK(close_rel(dft_lr_at(&s, 5000), 1e-4, 1e-6), "lr past the end: %g", dft_lr_at(&s, 5000));
    for (int t = 11; t <= 110; t++)
        CHECK(dft_lr_at(&s, t) <= dft_lr_at(&s, t - 1), "lr rises at step %d", t);

    dft_lr_schedule z = {.lr_max = 2e-3f, .lr_min = 0, .warmup_steps = 0, .total_steps = 100};
    CHECK(close_rel(dft_lr_at(&z, 0), 2e-3, 1e-6), "no warm-up, step 0: %g", dft_lr_at(&z, 0));
    CHECK(close_rel(dft_lr_at(&z, 50), 1e-3, 1e-6), "no warm-up, midpoint: %g", dft_lr_at(&z, 50));
    CHECK(dft_lr_at(&z, 100) == 0 && dft_lr_at(&z, 1000) == 0, "no warm-up, end: %g", dft_lr_at(&z, 100));
    dft_lr_schedule d = {.lr_max = 1e-3f, .lr_min = 1e-5f, .warmup_steps = 10, .total_steps = 10};
    CHECK(close_rel(dft_lr_at(&d, 10), 1e-5, 1e-6) && isfinite(dft_lr_at(&d, 10)),
          "no decay phase: %g (want the floor)", dft_lr_at(&d, 10));
}

/* ---- AdamW ---- */

typedef struct {
    double *p, *m, *v;
} ref_state;

/* The textbook update in double, moments kept in double. */
static void ref_adamw(ref_state *r, const float *g, size_t n, const dft_adamw *h, double lr, long t, int decay) {
    for (size_t i = 0; i < n; i++) {
        r->m[i] = h->beta1 * r->m[i] + (1 - h->beta1) * g[i];
        r->v[i] = h->beta2 * r->v[i] + (1 - h->beta2) * (double)g[i] * g[i];
        double mhat = r->m[i] / (1 - pow(h->beta1, (double)t));
        double vhat = r->v[i] / (1 - pow(h->beta2, (double)t));
        r->p[i] -= lr * (mhat / (sqrt(vhat) + h->eps) + (decay ? h->weight_decay : 0.0) * r->p[i]);
    }
}

static void test_adamw_run(int decay, int steps) {
    enum { N = 257 };
    dft_adamw h = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float p[N], m[N] = {0}, v[N] = {0}, g[N];
    double rp[N], rm[N] = {0}, rv[N] = {0};
    for (int i = 0; i < N; i++) rp[i] = p[i] = (float)tl_rand_normal();
    ref_state r = {rp, rm, rv};
    double worst = 0;
    for (long t = 1; t <= steps; t++) {
        for (int i = 0; i < N; i++) g[i] = (float)(tl_rand_normal() * (i % 7 == 0 ? 1e-3 : 1.0));
        float lr = 1e-2f;
        dft_adamw_update(p, g, m, v, N, &h, lr, t, decay);
        ref_adamw(&r, g, N, &h, lr, t, decay);
        for (int i = 0; i < N; i++) {
            /* float storage of p, m, v: a few float ulps of the parameter and the step */
            double err = fabs(p[i] - rp[i]);
            if (err > worst) worst = err;
            CHECK(err <= 4e-7 * fabs(rp[i]) + 1e-7 * t, "adamw decay=%d t=%ld i=%d: %.9g vs %.9g", decay, t, i,
                  p[i], rp[i]);
            /* m mixes signs, so its error is relative to the gradients' scale (about 1), not to m */
            CHECK(fabs(m[i] - rm[i]) < 1e-6, "adamw m t=%ld i=%d: %g vs %g", t, i, m[i], rm[i]);
            CHECK(close_rel(v[i], rv[i], 1e-5) || fabs(v[i] - rv[i]) < 1e-12, "adamw v t=%ld i=%d: %g vs %g", t, i,
                  v[i], rv[i]);
        }
    }
    printf("adamw decay=%d, %d steps: max |p - ref| = %.3g\n", decay, steps, worst);
}

static void test_adamw(void) {
    test_adamw_run(1, 1);
    test_adamw_run(0, 1);
    test_adamw_run(1, 25);
    test_adamw_run(0, 25);

    /* At t = 1 the bias correction makes mhat = g and vhat = g^2: the step is lr * sign(g). */
    dft_adamw h = {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-12f, .weight_decay = 0.5f};
    float p[4] = {1, -2, 0.5f, 3}, g[4] = {0.3f, -7, 1e-3f, -0.01f}, m[4] = {0}, v[4] = {0};
    float q[4], mq[4] = {0}, vq[4] = {0};
    memcpy(q, p, sizeof p);
    dft_adamw_update(p, g, m, v, 4, &h, 0.01f, 1, 0);
    dft_adamw_update(q, g, mq, vq, 4, &h, 0.01f, 1, 1);
    const float p0[4] = {1, -2, 0.5f, 3};
    for (int i = 0; i < 4; i++) {
        double sign = g[i] > 0 ? 1 : -1;
        CHECK(fabs(p[i] - (p0[i] - 0.01 * sign)) < 1e-6, "t=1 step without decay i=%d: %.9g", i, p[i]);
        /* with decay the only difference is lr * wd * p */
        CHECK(fabs((p[i] - q[i]) - 0.01 * 0.5 * p0[i]) < 1e-6, "decay term i=%d: %.9g", i, p[i] - q[i]);
        CHECK(m[i] == mq[i] && v[i] == vq[i], "decay changed the moments at i=%d", i);
    }
}

/* ---- clipping, sums, scaling ---- */

static void test_clip(void) {
    CHECK(dft_clip_factor(0.0, 1.0f) == 1.0f, "zero norm: %g", dft_clip_factor(0.0, 1.0f));
    CHECK(dft_clip_factor(0.25, 1.0f) == 1.0f, "below max: %g", dft_clip_factor(0.25, 1.0f));
    CHECK(dft_clip_factor(1.0, 1.0f) == 1.0f, "at max: %g", dft_clip_factor(1.0, 1.0f));
    CHECK(close_rel(dft_clip_factor(25.0, 1.0f), 0.2, 1e-7), "norm 5, max 1: %g", dft_clip_factor(25.0, 1.0f));
    CHECK(close_rel(dft_clip_factor(1e6, 0.5f), 0.5e-3, 1e-7), "norm 1000, max 0.5: %g",
          dft_clip_factor(1e6, 0.5f));
    CHECK(dft_clip_factor(25.0, 0.0f) == 1.0f, "max 0 means no clipping: %g", dft_clip_factor(25.0, 0.0f));
    CHECK(dft_clip_factor(25.0, -1.0f) == 1.0f, "max < 0 means no clipping: %g", dft_clip_factor(25.0, -1.0f));
    CHECK(isnan(dft_clip_factor(NAN, 1.0f)), "a NaN norm must not be hidden");

    enum { N = 1001 };
    float g[N];
    double want = 0;
    for (int i = 0; i < N; i++) {
        g[i] = (float)tl_rand_normal();
        want += (double)g[i] * g[i];
    }
    CHECK(dft_sum_squares(g, N) == want, "sum of squares %.17g vs %.17g", dft_sum_squares(g, N), want);
    CHECK(dft_sum_squares(g, 0) == 0, "empty sum of squares");
    float s = dft_clip_factor(want, 1.0f);
    float h[N];
    memcpy(h, g, sizeof g);
    dft_scale(h, N, s);
    for (int i = 0; i < N; i++) CHECK(h[i] == g[i] * s, "scale i=%d", i);
    CHECK(close_rel(sqrt(dft_sum_squares(h, N)), 1.0, 1e-5), "clipped norm %g", sqrt(dft_sum_squares(h, N)));
}

/* ---- checkpoints ---- */

enum { CK_N = 1000, CK_S = 3 };
static float ck_src[CK_S][CK_N], ck_out[CK_S][CK_N], ck_poison[CK_S][CK_N];
static const dft_ckpt_field ck_fields[] = {
    {"d_model", 64}, {"n_layers", 2}, {"lr_max", 3e-4}, {"seed", 1234567890123.0}, {"context", 512}};
enum { CK_NF = sizeof ck_fields / sizeof ck_fields[0] };

static void poison_outputs(int64_t *step) {
    tl_poison(ck_out, sizeof ck_out);
    memcpy(ck_poison, ck_out, sizeof ck_out);
    *step = -777;
}

static int outputs_untouched(int64_t step) { return step == -777 && memcmp(ck_out, ck_poison, sizeof ck_out) == 0; }

/* Loads path with the standard configuration; expects a refusal whose message contains want. */
static void expect_refusal(const char *path, const dft_ckpt_field *fields, int nfields, int nsections,
                           size_t nfloats, const char *want, const char *what) {
    float *out[CK_S] = {ck_out[0], ck_out[1], ck_out[2]};
    int64_t step;
    char err[512] = "";
    poison_outputs(&step);
    int rc = dft_ckpt_load(path, fields, nfields, &step, out, nsections, nfloats, err, sizeof err);
    CHECK(rc == -1, "%s: accepted", what);
    CHECK(err[0] != '\0', "%s: no message", what);
    CHECK(!want || strstr(err, want), "%s: message '%s' lacks '%s'", what, err, want);
    CHECK(outputs_untouched(step), "%s: outputs changed by a refused load", what);
}

static void test_checkpoint(void) {
    char path[128], tmp[160], bad[128];
    scratch(path, sizeof path, "run.ckpt");
    scratch(bad, sizeof bad, "bad.ckpt");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    /* random bit patterns: NaN payloads, infinities, -0 and subnormals must all survive */
    for (int s = 0; s < CK_S; s++)
        for (int i = 0; i < CK_N; i++) {
            uint32_t u = (uint32_t)tl_rand_u64();
            memcpy(&ck_src[s][i], &u, 4);
        }
    float *src[CK_S] = {ck_src[0], ck_src[1], ck_src[2]};
    float *out[CK_S] = {ck_out[0], ck_out[1], ck_out[2]};
    char err[512] = "";

    int rc = dft_ckpt_save(path, ck_fields, CK_NF, 4242, src, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0, "save: %s", err);
    CHECK(!file_exists(tmp), "%s left behind after a save", tmp);
    int64_t step = -1;
    tl_poison(ck_out, sizeof ck_out);
    rc = dft_ckpt_load(path, ck_fields, CK_NF, &step, out, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0, "load: %s", err);
    CHECK(step == 4242, "step %lld after the round trip", (long long)step);
    CHECK(memcmp(ck_src, ck_out, sizeof ck_src) == 0, "round trip is not bitwise");

    size_t len = 0;
    unsigned char *file = read_all(path, &len);
    CHECK(file != NULL, "cannot read back %s", path);
    if (!file) return;
    size_t want_len = 16 + 20 + 8 + (size_t)CK_S * CK_N * 4;
    for (int i = 0; i < CK_NF; i++) want_len += 9 + strlen(ck_fields[i].name);
    CHECK(len == want_len, "file is %zu bytes, the layout says %zu", len, want_len);
    CHECK(memcmp(file, "DFACKPT\n", 8) == 0 && file[8] == 1 && file[9] == 0, "magic or version not as documented");

    /* One flipped byte anywhere is refused: every byte of the header and of the first
       floats, a sample of the rest, and the whole checksum. */
    unsigned char *copy = malloc(len);
    int tried = 0;
    for (size_t pos = 0; pos < len; pos++) {
        int in_header = pos < len - (size_t)CK_S * CK_N * 4 - 8 + 64;
        if (!(in_header || pos >= len - 16 || pos % 61 == 0)) continue;
        memcpy(copy, file, len);
        copy[pos] ^= (unsigned char)(1u << tl_rand_int(0, 7));
        if (write_all(bad, copy, len)) {
            CHECK(0, "cannot write %s", bad);
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "flipped byte at %zu of %zu", pos, len);
        expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, NULL, what);
        tried++;
    }
    printf("checkpoint: %d flipped-byte files refused\n", tried);
    /* A flipped float byte is reported as corruption, not as something else. */
    memcpy(copy, file, len);
    copy[len / 2] ^= 0x10;
    CHECK(write_all(bad, copy, len) == 0, "cannot write %s", bad);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "checksum mismatch (file corrupt)", "flipped data byte");

    /* Truncation anywhere. */
    size_t cuts[] = {0, 1, 7, 8, 11, 16, 20, 30, 60, 100, len / 2, len - 9, len - 8, len - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        CHECK(write_all(bad, file, cuts[k]) == 0, "cannot write %s", bad);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", cuts[k]);
        expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "truncated", what);
    }
    /* Extra bytes at the end. */
    memcpy(copy, file, len);
    unsigned char *longer = malloc(len + 3);
    memcpy(longer, file, len);
    memset(longer + len, 0, 3);
    CHECK(write_all(bad, longer, len + 3) == 0, "cannot write %s", bad);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "corrupt", "three bytes appended");
    free(longer);

    /* Not a checkpoint; another format version. */
    CHECK(write_all(bad, "hello, this is plain text and not a checkpoint at all\n", 54) == 0, "write %s", bad);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "not a distflash checkpoint", "text file");
    memcpy(copy, file, len);
    copy[8] = 7;
    CHECK(write_all(bad, copy, len) == 0, "cannot write %s", bad);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "format version 7, this build reads 1", "version 7");

    /* Another configuration: a value, a name, the field count, the sizes. */
    dft_ckpt_field f[CK_NF + 1];
    memcpy(f, ck_fields, sizeof ck_fields);
    f[0].value = 128;
    char want[256];
    snprintf(want, sizeof want, "checkpoint %s: d_model is 64 in the file but 128 in this run", path);
    float *o[CK_S] = {ck_out[0], ck_out[1], ck_out[2]};
    poison_outputs(&step);
    rc = dft_ckpt_load(path, f, CK_NF, &step, o, CK_S, CK_N, err, sizeof err);
    CHECK(rc == -1 && strcmp(err, want) == 0, "d_model differs: rc %d, message '%s'", rc, err);
    CHECK(outputs_untouched(step), "d_model differs: outputs changed");
    memcpy(f, ck_fields, sizeof ck_fields);
    f[2].value = 3.0000001e-4;
    expect_refusal(path, f, CK_NF, CK_S, CK_N, "lr_max is 0.0003 in the file but 0.00030000001 in this run",
                   "lr_max differs slightly");
    memcpy(f, ck_fields, sizeof ck_fields);
    f[3].value = 1234567890124.0;
    expect_refusal(path, f, CK_NF, CK_S, CK_N, "seed", "seed differs by one");
    memcpy(f, ck_fields, sizeof ck_fields);
    f[1].name = "n_layer";
    expect_refusal(path, f, CK_NF, CK_S, CK_N, "'n_layers' in the file but 'n_layer'", "renamed field");
    memcpy(f, ck_fields, sizeof ck_fields);
    f[CK_NF].name = "n_heads";
    f[CK_NF].value = 4;
    expect_refusal(path, f, CK_NF + 1, CK_S, CK_N, "n_heads", "one more field in the run");
    expect_refusal(path, ck_fields, CK_NF - 1, CK_S, CK_N, "context", "one field fewer in the run");
    expect_refusal(path, ck_fields, CK_NF, CK_S, CK_N - 1, "floats", "nfloats one smaller");
    expect_refusal(path, ck_fields, CK_NF, CK_S, CK_N + 1, "floats", "nfloats one larger");
    expect_refusal(path, ck_fields, CK_NF, CK_S - 1, CK_N, "sections", "one section fewer");

    /* Field names come from the file, which is untrusted: a message shows bytes outside
       printable ASCII (terminal escapes, line breaks, NUL) and the backslash as \xNN, so a
       hostile file cannot write control sequences into the trainer's output (found by
       fuzz/fuzz_ckpt.c; fuzz/corpus/ckpt/regress_field_name_bytes.ckpt). */
    memcpy(f, ck_fields, sizeof ck_fields);
    f[0].name = "d_model\x1b[2J\nX";
    f[CK_NF] = (dft_ckpt_field){"x\x1b]0;title\x07\\\xff", 1};
    rc = dft_ckpt_save(bad, f, CK_NF + 1, 1, src, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0, "save with hostile names: %s", err);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "field 0 is 'd_model\\x1b[2J\\x0aX' in the file",
                   "escape bytes in a field name");
    f[0].name = "d_model";
    rc = dft_ckpt_save(bad, f, CK_NF + 1, 1, src, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0, "save with a hostile extra name: %s", err);
    expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "first extra in the file: 'x\\x1b]0;title\\x07\\x5c\\xff')",
                   "escape bytes in an extra field name");
    {
        /* a NUL inside a name (the writer cannot make one): patch it in, fix the checksum */
        size_t blen = 0;
        unsigned char *b = read_all(bad, &blen);
        CHECK(b && blen > 8 + 20 && b[16] == 7 && memcmp(b + 17, "d_model", 7) == 0, "layout of %s", bad);
        if (b && blen > 8 + 20 && b[16] == 7) {
            b[17 + 1] = '\0';
            const uint64_t h = dft_ckpt_checksum(b, blen - 8);
            for (int i = 0; i < 8; i++) b[blen - 8 + i] = (unsigned char)(h >> (8 * i));
            CHECK(write_all(bad, b, blen) == 0, "cannot write %s", bad);
            expect_refusal(bad, ck_fields, CK_NF, CK_S, CK_N, "field 0 is 'd\\x00model' in the file but 'd_model'",
                           "NUL in a field name");
        }
        free(b);
    }
    float *o2[CK_S] = {ck_out[0], ck_out[1], ck_out[2]};
    poison_outputs(&step);
    rc = dft_ckpt_load(bad, ck_fields, CK_NF, &step, o2, CK_S, CK_N, err, sizeof err);
    for (const char *c = err; *c; c++)
        CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f, "message has byte 0x%02x: '%s'", (unsigned char)*c,
              err);

    /* Missing file; unwritable place. */
    char missing[128];
    scratch(missing, sizeof missing, "no-such.ckpt");
    expect_refusal(missing, ck_fields, CK_NF, CK_S, CK_N, missing, "missing file");
    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s-no-such-dir/run.ckpt", tmp_prefix);
    rc = dft_ckpt_save(nodir, ck_fields, CK_NF, 1, src, CK_S, CK_N, err, sizeof err);
    CHECK(rc == -1 && strstr(err, nodir), "save into a missing directory: rc %d, '%s'", rc, err);

    /* A second save replaces the first and leaves no temporary file. */
    ck_src[1][5] = 42.0f;
    rc = dft_ckpt_save(path, ck_fields, CK_NF, 4343, src, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0 && !file_exists(tmp), "second save: rc %d, '%s'", rc, err);
    rc = dft_ckpt_load(path, ck_fields, CK_NF, &step, out, CK_S, CK_N, err, sizeof err);
    CHECK(rc == 0 && step == 4343 && memcmp(ck_src, ck_out, sizeof ck_src) == 0, "second round trip: %s", err);

    /* No fields and no sections is a valid (if useless) file. */
    rc = dft_ckpt_save(bad, NULL, 0, 0, NULL, 0, 0, err, sizeof err);
    CHECK(rc == 0, "empty save: %s", err);
    rc = dft_ckpt_load(bad, NULL, 0, &step, NULL, 0, 0, err, sizeof err);
    CHECK(rc == 0 && step == 0, "empty load: %s", err);

    free(copy);
    free(file);
    remove(path);
    remove(bad);
}

/* ---- CSV and plot ---- */

static void test_csv_and_plot(void) {
    char csv[128], png[128], err[512] = "";
    scratch(csv, sizeof csv, "log.csv");
    scratch(png, sizeof png, "log.png");
    const char *cols[] = {"step", "lr", "loss", "eval_loss", "eval_acc", "tokens_per_s", "elapsed_s"};
    dft_csv *c = dft_csv_open(csv, cols, 7, err, sizeof err);
    CHECK(c != NULL, "csv open: %s", err);
    if (!c) return;
    double r0[7] = {0, 0.001, 3.5, NAN, NAN, 12000, 0.25};
    double r1[7] = {10, 0.0003, 2.25, 2.5, 0.125, 1.5e6, 1234.5};
    CHECK(dft_csv_row(c, r0, 7) == 0, "row 0");
    CHECK(dft_csv_row(c, r1, 7) == 0, "row 1");
    CHECK(dft_csv_row(c, r1, 6) == -1, "a row of the wrong width is refused");
    /* rows are flushed at once: the file is complete before the close */
    const char *want = "step,lr,loss,eval_loss,eval_acc,tokens_per_s,elapsed_s\n"
                       "0,0.001,3.5,,,12000,0.25\n"
                       "10,0.0003,2.25,2.5,0.125,1500000,1234.5\n";
    size_t len = 0;
    unsigned char *got = read_all(csv, &len);
    CHECK(got && len == strlen(want) && memcmp(got, want, len) == 0, "csv before close:\n%.*s", (int)len,
          got ? (char *)got : "");
    free(got);
    /* a longer run with sparse evaluations, for the plot */
    for (int s = 20; s <= 400; s += 10) {
        int ev = s % 100 == 0;
        double r[7] = {s, 1e-3, 3 * exp(-s / 120.0) + 0.4, ev ? 3 * exp(-s / 120.0) + 0.5 : NAN,
                       ev ? 1 - exp(-s / 150.0) : NAN, 1e4, s * 0.5};
        CHECK(dft_csv_row(c, r, 7) == 0, "row at step %d", s);
    }
    dft_csv_close(c);
    CHECK(dft_csv_open(csv, cols, 0, err, sizeof err) == NULL && err[0], "csv without columns accepted");
    char nodir[160];
    snprintf(nodir, sizeof nodir, "%s-no-such-dir/log.csv", tmp_prefix);
    CHECK(dft_csv_open(nodir, cols, 7, err, sizeof err) == NULL && strstr(err, nodir),
          "csv in a missing directory: '%s'", err);

    char msg[512] = "";
    int rc = dft_plot_png(csv, png, "infra test: it's a 'quoted' title", msg, sizeof msg);
    CHECK(rc == 0 || rc == 1, "plot returned %d: %s", rc, msg);
    printf("plot: rc %d: %s\n", rc, msg);
    if (rc == 0) {
        unsigned char *p = read_all(png, &len);
        static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        CHECK(p && len > 8 && memcmp(p, sig, 8) == 0, "%s is not a PNG", png);
        free(p);
        char kept[160];
        snprintf(kept, sizeof kept, "%s-kept.png", tmp_prefix);
        if (getenv("DFA_KEEP_PLOT") && rename(png, kept) == 0) printf("plot kept at %s\n", kept);
        else remove(png);
        /* a log with no evaluation yet still draws */
        c = dft_csv_open(csv, cols, 7, err, sizeof err);
        CHECK(c && dft_csv_row(c, r0, 7) == 0 && dft_csv_row(c, (double[7]){1, 1, 3, NAN, NAN, 1, 1}, 7) == 0,
              "short csv");
        dft_csv_close(c);
        rc = dft_plot_png(csv, png, NULL, msg, sizeof msg);
        CHECK(rc == 0 && file_exists(png), "plot without evaluations: rc %d: %s", rc, msg);
        remove(png);
        char missing[128];
        scratch(missing, sizeof missing, "no-such.csv");
        rc = dft_plot_png(missing, png, NULL, msg, sizeof msg);
        CHECK(rc == -1 && strstr(msg, missing), "plot of a missing csv: rc %d: %s", rc, msg);
        /* gnuplot itself failing (it cannot create the PNG) is -1 with its reason */
        char nodir_png[160];
        snprintf(nodir_png, sizeof nodir_png, "%s-no-such-dir/log.png", tmp_prefix);
        rc = dft_plot_png(csv, nodir_png, NULL, msg, sizeof msg);
        CHECK(rc == -1 && strstr(msg, "gnuplot failed"), "plot into a missing directory: rc %d: %s", rc, msg);
        printf("plot into a missing directory: %s\n", msg);
    } else {
        CHECK(strstr(msg, "gnuplot not found; install gnuplot-nox to get") && strstr(msg, png), "message: %s", msg);
    }
    /* Without gnuplot on the PATH the answer is 1 and the message says what to install. */
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    setenv("PATH", "/nonexistent-dfa-path", 1);
    rc = dft_plot_png(csv, png, NULL, msg, sizeof msg);
    char want_msg[256];
    snprintf(want_msg, sizeof want_msg, "gnuplot not found; install gnuplot-nox to get %s", png);
    CHECK(rc == 1 && strcmp(msg, want_msg) == 0, "no gnuplot: rc %d: %s", rc, msg);
    if (saved) {
        setenv("PATH", saved, 1);
        free(saved);
    } else {
        unsetenv("PATH");
    }
    remove(csv);
    remove(png);
}

int main(void) {
    tl_init("test_train_infra");
    snprintf(tmp_prefix, sizeof tmp_prefix, "/tmp/dfa-infra-test-%ld", (long)getpid());
    test_lr();
    test_adamw();
    test_clip();
    test_checkpoint();
    test_csv_and_plot();
    return tl_finish("test_train_infra");
}
