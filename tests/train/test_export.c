/* The safetensors export (train/safetensors.h) and the checkpoint reader behind
 * `distflash export` (dft_ckpt_read_any): a file is written for a random model, its header
 * parsed back (length, alignment, names, dtypes, shapes, contiguous offsets, metadata) and
 * every tensor compared with the parameters it came from (transposed for [out, in]), in
 * float32 bitwise and in bf16 rounded to nearest even; bad arguments are refused with a
 * message that names them and leave no file; a checkpoint reads back without knowing its
 * configuration, and a corrupt one is refused. Presets: tiny is the CLI's default. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "train/checkpoint.h"
#include "train/model/preset.h"
#include "train/safetensors.h"
#include "train/trainer.h"

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static float bf16_to_f32(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Nearest bf16 to x (ties to even), by the definition: the closer of the two neighbours. */
static float bf16_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float a, b;
    memcpy(&a, &lo, 4), memcpy(&b, &hi, 4);
    double da = fabs((double)x - a), db = fabs((double)x - b);
    if (da < db) return a;
    if (db < da) return b;
    return (lo >> 16) & 1 ? b : a;
}

static void check_file(const char *path, const dft_model_config *c, const float *params, int bf16) {
    size_t n = 0;
    uint8_t *b = slurp(path, &n);
    CHECK(b != NULL && n >= 8, "%s: not written", path);
    if (!b || n < 8) return free(b);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)b[i] << (8 * i);
    CHECK(hlen + 8 <= n, "header length %llu past the file (%zu bytes)", (unsigned long long)hlen, n);
    CHECK((8 + hlen) % 8 == 0, "the data starts at %llu, not 8-byte aligned", (unsigned long long)(8 + hlen));
    char *h = malloc(hlen + 1);
    memcpy(h, b + 8, hlen);
    h[hlen] = 0;
    CHECK(h[0] == '{', "the header does not start with '{'");
    size_t end = strlen(h);
    while (end > 0 && h[end - 1] == ' ') end--;
    CHECK(end > 0 && h[end - 1] == '}', "the header does not end with '}' before its padding");
    CHECK(strstr(h, "\"__metadata__\":{") != NULL, "no __metadata__");
    CHECK(strstr(h, "\"rope\":\"rotate_half") != NULL, "the metadata does not say the RoPE convention");
    char want[64];
    snprintf(want, sizeof want, "\"num_key_value_heads\":\"%d\"", c->n_kv_heads);
    CHECK(strstr(h, want) != NULL, "the metadata lacks %s", want);
    const uint8_t *data = b + 8 + hlen;
    size_t data_len = n - 8 - hlen, expect_at = 0, esize = bf16 ? 2 : 4;
    int count = dft_export_tensor_count(c), bad_values = 0;
    CHECK(count == 9 * c->n_layers + 3, "%d tensors for %d layers", count, c->n_layers);
    size_t covered = 0;
    for (int i = 0; i < count; i++) {
        dft_export_tensor t;
        CHECK(dft_export_tensor_at(c, i, &t) == 0, "tensor %d", i);
        char key[128];
        snprintf(key, sizeof key, "\"%s\":{", t.name);
        const char *at = strstr(h, key);
        CHECK(at != NULL, "no tensor %s in the header", t.name);
        if (!at) continue;
        char dtype[8];
        long r = 0, cl = 0;
        unsigned long long b0, b1;
        int got;
        if (t.cols)
            got = sscanf(at + strlen(key), "\"dtype\":\"%7[A-Z0-9]\",\"shape\":[%ld,%ld],\"data_offsets\":[%llu,%llu]}", dtype,
                         &r, &cl, &b0, &b1);
        else
            got = sscanf(at + strlen(key), "\"dtype\":\"%7[A-Z0-9]\",\"shape\":[%ld],\"data_offsets\":[%llu,%llu]}", dtype, &r,
                         &b0, &b1) + 1;
        CHECK(got == 5, "%s: the entry does not parse (%d fields)", t.name, got);
        if (got != 5) continue;
        CHECK(!strcmp(dtype, bf16 ? "BF16" : "F32"), "%s: dtype %s", t.name, dtype);
        CHECK(r == t.rows && cl == t.cols, "%s: shape [%ld, %ld], expected [%ld, %ld]", t.name, r, cl, t.rows, t.cols);
        size_t elems = (size_t)t.rows * (t.cols ? t.cols : 1);
        CHECK(b0 == expect_at && b1 == b0 + elems * esize, "%s: offsets [%llu, %llu], expected [%zu, %zu]", t.name, b0,
              b1, expect_at, expect_at + elems * esize);
        CHECK(b1 <= data_len, "%s: past the end of the data", t.name);
        if (b1 > data_len) continue;
        expect_at = b1, covered += b1 - b0;
        long cols = t.cols ? t.cols : 1;
        for (size_t e = 0; e < elems; e++) {
            long row = (long)(e / cols), col = (long)(e % cols);
            float src = params[t.offset + (t.transpose ? (size_t)col * t.rows + row : e)], got_v;
            if (bf16) {
                got_v = bf16_to_f32(data + b0 + 2 * e);
                bad_values += got_v != bf16_nearest(src);
            } else {
                memcpy(&got_v, data + b0 + 4 * e, 4); /* the test runs little-endian, as the file is */
                bad_values += memcmp(&got_v, &src, 4) != 0;
            }
        }
    }
    CHECK(bad_values == 0, "%s: %d values differ from the parameters", path, bad_values);
    CHECK(covered == data_len, "the tensors cover %zu of the %zu data bytes", covered, data_len);
    size_t total = dft_param_layout_of(c).total;
    CHECK(covered == total * esize, "the file holds %zu bytes of tensors for %zu parameters", covered, total);
    free(h), free(b);
}

static void test_export(void) {
    dft_model_config c = {.n_layers = 2, .d_model = 48, .n_heads = 6, .n_kv_heads = 3, .ffn = 40, .context = 512,
                          .rope_base = 500000.0f, .init_std = 0.02f};
    size_t total = dft_param_layout_of(&c).total;
    float *p = malloc(sizeof(float) * total);
    for (size_t i = 0; i < total; i++) p[i] = (float)tl_rand_normal();
    p[3] = 1.00390625f; /* a bf16 tie (halfway between two bf16 values): rounds to even */
    char path[] = "/tmp/dft_export_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    char err[512];
    dft_export_meta meta[] = {{"distflash.step", "17"}, {"odd \"key\"\n", "a\\b\tc"}, {"utf8", "caf\xc3\xa9"},
                              {"latin1", "caf\xe9"}};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        CHECK(dft_export_safetensors(path, &c, p, bf16, meta, 4, err, sizeof err) == 0, "export: %s", err);
        check_file(path, &c, p, bf16);
    }
    size_t n;
    uint8_t *b = slurp(path, &n);
    CHECK(b && strstr((char *)b + 8, "\"odd \\\"key\\\"\\u000a\":\"a\\\\b\\u0009c\"") != NULL,
          "metadata strings are not escaped as JSON");
    CHECK(b && strstr((char *)b + 8, "\"utf8\":\"caf\xc3\xa9\"") && strstr((char *)b + 8, "\"latin1\":\"caf\\u00e9\""),
          "UTF-8 metadata must stay as it is and other bytes >= 0x80 become \\u00XX (the header is UTF-8)");
    free(b);

    /* bad arguments: refused, named, nothing written */
    remove(path);
    CHECK(dft_export_safetensors(NULL, &c, p, 0, NULL, 0, err, sizeof err) == -1 && strstr(err, "path"),
          "a NULL path: %s", err);
    CHECK(dft_export_safetensors(path, &c, NULL, 0, NULL, 0, err, sizeof err) == -1 && strstr(err, "params"),
          "NULL params: %s", err);
    dft_model_config odd = c;
    odd.n_heads = 5;
    CHECK(dft_export_safetensors(path, &odd, p, 0, NULL, 0, err, sizeof err) == -1 && strstr(err, "heads = 5"),
          "5 heads of d 48 must be refused: %s", err);
    CHECK(dft_export_safetensors(path, &c, p, 0, NULL, 2, err, sizeof err) == -1, "2 metadata entries at NULL");
    CHECK(access(path, F_OK) != 0, "a refused export left %s", path);
    CHECK(dft_export_safetensors("/nonexistent-dir/x.safetensors", &c, p, 0, NULL, 0, err, sizeof err) == -1 &&
              strstr(err, "cannot create"),
          "an unwritable path: %s", err);

    /* the checkpoint reader of `distflash export` */
    float *m = calloc(total, sizeof(float)), *sections[3] = {p, m, m};
    dft_ckpt_field fields[3] = {{"layers", 2}, {"d_model", 48}, {"rope_base", 500000}};
    CHECK(dft_ckpt_save(path, fields, 3, 9, sections, 3, total, err, sizeof err) == 0, "save: %s", err);
    dft_ckpt_named got[2];
    int nf = 0;
    int64_t step = 0;
    size_t nfloats = 0;
    float *params = NULL;
    CHECK(dft_ckpt_read_any(path, got, 2, &nf, &step, &nfloats, &params, err, sizeof err) == 0, "read_any: %s", err);
    CHECK(nf == 3 && step == 9 && nfloats == total, "read_any: %d fields, step %lld, %zu floats", nf, (long long)step,
          nfloats);
    CHECK(!strcmp(got[0].name, "layers") && got[0].value == 2 && !strcmp(got[1].name, "d_model") && got[1].value == 48,
          "read_any: fields %s=%g %s=%g", got[0].name, got[0].value, got[1].name, got[1].value);
    CHECK(params && memcmp(params, p, sizeof(float) * total) == 0, "read_any: the parameters differ");
    free(params);
    /* one flipped byte: refused as corrupt, nothing returned */
    b = slurp(path, &n);
    b[n / 2] ^= 0x10;
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
    free(b);
    params = NULL;
    CHECK(dft_ckpt_read_any(path, got, 2, &nf, &step, &nfloats, &params, err, sizeof err) == -1 &&
              strstr(err, "checksum") && params == NULL,
          "a corrupt checkpoint: %s", err);
    CHECK(dft_ckpt_read_any(path, got, 2, NULL, &step, &nfloats, &params, err, sizeof err) == -1, "NULL nfields");
    remove(path);
    free(p), free(m);
}

static void test_presets(void) {
    dft_train_config d = dft_train_defaults();
    const dft_model_preset *tiny = dft_model_preset_find("tiny");
    CHECK(tiny && !memcmp(&tiny->model, &d.model, sizeof d.model), "preset tiny is not the default model");
    const dft_model_preset *b = dft_model_preset_find("bench756m");
    CHECK(b && b->model.n_layers == 16 && b->model.d_model == 2048 && b->model.n_heads == 16 &&
              b->model.n_kv_heads == 8 && b->model.ffn == 5632 && b->model.context == 65536,
          "bench756m is not the GPU benchmark's model");
    if (b) {
        size_t params = dft_param_layout_of(&b->model).total;
        CHECK(params > 750e6 && params < 760e6, "bench756m has %zu parameters", params);
    }
    CHECK(dft_model_preset_find("huge") == NULL && dft_model_preset_find(NULL) == NULL, "unknown presets");
    int n;
    const dft_model_preset *all = dft_model_presets(&n);
    char err[256];
    for (int i = 0; i < n; i++)
        CHECK(dft_model_config_check(&all[i].model, 1, err, sizeof err) == 0, "preset %s: %s", all[i].name, err);
}

int main(void) {
    tl_init("test_export");
    test_export();
    test_presets();
    return tl_finish("test_export");
}
