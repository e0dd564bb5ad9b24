/* The data generators: determinism, the passkey layout at several contexts, the weights,
 * byte-file windows that stay inside their split, and every bad argument. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testlib.h"
#include "train/data.h"

static const char statement_prefix[] = "The passkey is <";

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Offset of the first occurrence of needle in hay[0..n), or -1. */
static long find(const uint8_t *hay, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(hay + i, needle, m)) return (long)i;
    return -1;
}

typedef struct {
    uint8_t *bytes;
    float *weight;
    int answer_pos;
} sample;

static sample alloc_sample(int context) {
    sample s = {malloc((size_t)context + 1), malloc(sizeof(float) * (size_t)context), -2};
    if (!s.bytes || !s.weight) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return s;
}

static void free_sample(sample *s) {
    free(s->bytes);
    free(s->weight);
}

/* Checks one passkey sequence; returns the statement's relative depth in [0, 1], or -1. */
static double check_passkey_layout(const dft_data *d, const sample *s, uint64_t index) {
    const int c = d->context;
    const size_t n = (size_t)c + 1;
    CHECK(s->answer_pos == c - DFT_PASSKEY_DIGITS, "context %d index %llu: answer_pos %d, expected %d", c,
          (unsigned long long)index, s->answer_pos, c - DFT_PASSKEY_DIGITS);

    const uint8_t *answer = s->bytes + n - DFT_PASSKEY_DIGITS;
    for (int i = 0; i < DFT_PASSKEY_DIGITS; i++)
        CHECK(is_digit(answer[i]), "context %d index %llu: answer byte %d is '%c'", c, (unsigned long long)index, i,
              answer[i]);

    long at = find(s->bytes, n, statement_prefix);
    CHECK(at >= 0, "context %d index %llu: no key statement", c, (unsigned long long)index);
    if (at < 0) return -1;
    const uint8_t *stated = s->bytes + at + strlen(statement_prefix);
    CHECK(stated + DFT_PASSKEY_DIGITS < answer - strlen(statement_prefix), "context %d: statement overlaps the question", c);
    CHECK(!memcmp(stated, answer, DFT_PASSKEY_DIGITS), "context %d index %llu: stated key %.5s, answer %.5s", c,
          (unsigned long long)index, (const char *)stated, (const char *)answer);

    /* The question ends the sequence, with the shared prefix right before the answer. */
    const char *q = "What is the passkey? The passkey is <";
    CHECK(!memcmp(answer - strlen(q), q, strlen(q)), "context %d index %llu: no question before the answer", c,
          (unsigned long long)index);

    /* The statement says the key twice: "<KEY>. Remember it. <KEY> is the passkey." */
    const uint8_t *again = stated + DFT_PASSKEY_DIGITS + strlen(">. Remember it. <");
    CHECK(!memcmp(stated + DFT_PASSKEY_DIGITS, ">. Remember it. <", strlen(">. Remember it. <")) &&
              !memcmp(again, answer, DFT_PASSKEY_DIGITS) &&
              !memcmp(again + DFT_PASSKEY_DIGITS, "> is the passkey. ", strlen("> is the passkey. ")),
          "context %d index %llu: the statement does not repeat the key", c, (unsigned long long)index);

    /* Digits nowhere but the two stated copies and the answer; '<' only before those three. */
    int stray_digits = 0, markers = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = s->bytes + i;
        int in_key = (p >= stated && p < stated + DFT_PASSKEY_DIGITS) || (p >= again && p < again + DFT_PASSKEY_DIGITS) ||
                     p >= answer;
        if (is_digit(*p) && !in_key) stray_digits++;
        if (*p == '<') markers++;
        CHECK(*p >= 32 && *p < 127, "context %d: byte %zu is not printable (%d)", c, i, *p);
    }
    CHECK(stray_digits == 0, "context %d index %llu: %d digits outside the key", c, (unsigned long long)index,
          stray_digits);
    CHECK(markers == 3, "context %d index %llu: '<' appears %d times", c, (unsigned long long)index, markers);
    int prefixes = 0;
    for (long from = 0, hit; (hit = find(s->bytes + from, n - (size_t)from, statement_prefix)) >= 0;
         from += hit + 1)
        prefixes++;
    CHECK(prefixes == 2, "context %d index %llu: the shared prefix appears %d times", c, (unsigned long long)index,
          prefixes);

    const long repeat = (long)(again - s->bytes) - 1; /* targets of the repeated key weigh like the answer */
    for (int t = 0; t < c; t++) {
        int weighted = t >= c - DFT_PASSKEY_DIGITS || (t >= repeat && t < repeat + DFT_PASSKEY_DIGITS);
        float want = weighted ? d->answer_weight : 1.0f;
        if (s->weight[t] != want) {
            CHECK(0, "context %d index %llu: weight[%d] = %g, expected %g", c, (unsigned long long)index, t,
                  (double)s->weight[t], (double)want);
            break;
        }
    }
    /* The statement starts with a space before "The": its depth in the filler is at - 1. */
    const double filler = (double)n - 62.0 - 43.0; /* statement and question lengths */
    return (double)(at - 1) / filler;
}

static void test_passkey_contexts(void) {
    const int contexts[] = {256, 257, 1000, 4096, 65536};
    for (int ci = 0; ci < 5; ci++) {
        const int c = contexts[ci];
        dft_data d;
        char err[256] = "";
        int rc = dft_data_passkey(&d, c, 1234 + (uint64_t)ci, 7.5f, err, sizeof err);
        CHECK(rc == 0, "passkey context %d: %s", c, err);
        if (rc) continue;
        sample s = alloc_sample(c);
        const int count = c >= 65536 ? 24 : 300;
        int bins[3] = {0, 0, 0};
        double lo = 1, hi = 0;
        for (int i = 0; i < count; i++) {
            s.bytes[c] = 0xAB; /* the last byte must be written too */
            dft_data_sample(&d, DFT_SPLIT_TRAIN, (uint64_t)i, s.bytes, s.weight, &s.answer_pos);
            double depth = check_passkey_layout(&d, &s, (uint64_t)i);
            if (depth < 0) continue;
            CHECK(depth <= 1.0, "context %d: depth %g beyond the filler", c, depth);
            bins[depth < 1.0 / 3 ? 0 : depth < 2.0 / 3 ? 1 : 2]++;
            if (depth < lo) lo = depth;
            if (depth > hi) hi = depth;
        }
        for (int b = 0; b < 3; b++)
            CHECK(bins[b] >= count / 6, "context %d: depth third %d holds %d of %d sequences", c, b, bins[b], count);
        if (count >= 300) CHECK(lo < 0.05 && hi > 0.95, "context %d: depths span only [%g, %g]", c, lo, hi);
        free_sample(&s);
        dft_data_close(&d);
    }
}

/* Same arguments give the same bytes; another index, split or seed gives others. */
static void test_determinism(void) {
    const int c = 1000;
    dft_data d1, d2, d3;
    char err[256];
    CHECK(dft_data_passkey(&d1, c, 42, 3.0f, err, sizeof err) == 0, "%s", err);
    CHECK(dft_data_passkey(&d2, c, 42, 3.0f, err, sizeof err) == 0, "%s", err);
    CHECK(dft_data_passkey(&d3, c, 43, 3.0f, err, sizeof err) == 0, "%s", err);
    sample a = alloc_sample(c), b = alloc_sample(c);
    int keys_seen = 0;
    uint8_t first_key[DFT_PASSKEY_DIGITS];
    for (uint64_t i = 0; i < 20; i++) {
        memset(a.bytes, 0, (size_t)c + 1);
        memset(b.bytes, 0xFF, (size_t)c + 1);
        dft_data_sample(&d1, DFT_SPLIT_TRAIN, i, a.bytes, a.weight, &a.answer_pos);
        dft_data_sample(&d2, DFT_SPLIT_TRAIN, i, b.bytes, b.weight, &b.answer_pos);
        CHECK(!memcmp(a.bytes, b.bytes, (size_t)c + 1) && !memcmp(a.weight, b.weight, sizeof(float) * c) &&
                  a.answer_pos == b.answer_pos,
              "index %llu: two calls differ", (unsigned long long)i);
        dft_data_sample(&d1, DFT_SPLIT_TRAIN, i + 1, b.bytes, b.weight, &b.answer_pos);
        CHECK(memcmp(a.bytes, b.bytes, (size_t)c + 1), "index %llu and %llu agree", (unsigned long long)i,
              (unsigned long long)i + 1);
        dft_data_sample(&d1, DFT_SPLIT_EVAL, i, b.bytes, b.weight, &b.answer_pos);
        CHECK(memcmp(a.bytes, b.bytes, (size_t)c + 1), "index %llu: train and eval agree", (unsigned long long)i);
        dft_data_sample(&d3, DFT_SPLIT_TRAIN, i, b.bytes, b.weight, &b.answer_pos);
        CHECK(memcmp(a.bytes, b.bytes, (size_t)c + 1), "index %llu: seeds 42 and 43 agree", (unsigned long long)i);
        if (i == 0) memcpy(first_key, a.bytes + c + 1 - DFT_PASSKEY_DIGITS, DFT_PASSKEY_DIGITS);
        else keys_seen += memcmp(first_key, a.bytes + c + 1 - DFT_PASSKEY_DIGITS, DFT_PASSKEY_DIGITS) != 0;
    }
    CHECK(keys_seen >= 18, "the key changes with the index only %d of 19 times", keys_seen);
    free_sample(&a);
    free_sample(&b);
}

/* Key digits are roughly uniform: each digit value at each place within a wide band. */
static void test_key_digits(void) {
    const int c = 256, count = 2000;
    dft_data d;
    char err[256];
    CHECK(dft_data_passkey(&d, c, 9, 1.0f, err, sizeof err) == 0, "%s", err);
    sample s = alloc_sample(c);
    int hist[DFT_PASSKEY_DIGITS][10] = {{0}};
    for (int i = 0; i < count; i++) {
        dft_data_sample(&d, DFT_SPLIT_EVAL, (uint64_t)i, s.bytes, s.weight, &s.answer_pos);
        for (int k = 0; k < DFT_PASSKEY_DIGITS; k++) {
            uint8_t ch = s.bytes[c + 1 - DFT_PASSKEY_DIGITS + k];
            if (is_digit(ch)) hist[k][ch - '0']++;
        }
    }
    for (int k = 0; k < DFT_PASSKEY_DIGITS; k++)
        for (int v = 0; v < 10; v++)
            CHECK(hist[k][v] > 120 && hist[k][v] < 280, "key place %d digit %d drawn %d times of %d", k, v,
                  hist[k][v], count);
    free_sample(&s);
}

static void expect_error(int rc, const char *err, const char *word, const char *what) {
    CHECK(rc == -1, "%s: returned %d, expected -1", what, rc);
    CHECK(strstr(err, word) != NULL, "%s: message '%s' does not name '%s'", what, err, word);
}

static void test_bad_args(void) {
    dft_data d;
    char err[256];
    err[0] = 0;
    expect_error(dft_data_passkey(&d, 255, 1, 1.0f, err, sizeof err), err, "context", "context 255");
    err[0] = 0;
    expect_error(dft_data_passkey(&d, -5, 1, 1.0f, err, sizeof err), err, "context", "context -5");
    err[0] = 0;
    expect_error(dft_data_passkey(&d, 256, 1, NAN, err, sizeof err), err, "answer_weight", "NaN weight");
    err[0] = 0;
    expect_error(dft_data_passkey(&d, 256, 1, INFINITY, err, sizeof err), err, "answer_weight", "inf weight");
    err[0] = 0;
    expect_error(dft_data_passkey(&d, 256, 1, -1.0f, err, sizeof err), err, "answer_weight", "negative weight");
    CHECK(dft_data_passkey(&d, 256, 1, 0.0f, err, sizeof err) == 0, "weight 0 refused: %s", err);
    /* A NULL err buffer is allowed. */
    CHECK(dft_data_passkey(&d, 10, 1, 1.0f, NULL, 0) == -1, "context 10 with no err buffer");

    const char *missing = "/nonexistent-dir/no-such-file.bin";
    err[0] = 0;
    expect_error(dft_data_file(&d, missing, 64, 1, err, sizeof err), err, missing, "missing file (path)");
    expect_error(dft_data_file(&d, missing, 64, 1, err, sizeof err), err, "unreadable", "missing file (reason)");
    err[0] = 0;
    expect_error(dft_data_file(&d, "/", 64, 1, err, sizeof err), err, "not a regular file", "a directory");
    /* a device without end: refused by its kind, not read until memory runs out */
    err[0] = 0;
    expect_error(dft_data_file(&d, "/dev/zero", 64, 1, err, sizeof err), err, "not a regular file", "/dev/zero");

    char path[] = "/tmp/dfa_test_data_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    if (fd < 0) return;
    close(fd);
    err[0] = 0;
    expect_error(dft_data_file(&d, path, 64, 1, err, sizeof err), err, "empty", "empty file");
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    for (int i = 0; i < 129; i++) fputc('a' + i % 26, f);
    CHECK(fclose(f) == 0, "fclose");
    err[0] = 0;
    expect_error(dft_data_file(&d, path, 64, 1, err, sizeof err), err, "too short", "129 bytes at context 64");
    CHECK(strstr(err, path) != NULL, "short-file message '%s' does not name the path", err);
    err[0] = 0;
    expect_error(dft_data_file(&d, path, 0, 1, err, sizeof err), err, "context", "context 0");
    CHECK(dft_data_file(&d, path, 63, 1, err, sizeof err) == 0, "128 bytes at context 63 refused: %s", err);
    dft_data_close(&d);
    dft_data_close(&d); /* twice is harmless */
    remove(path);
}

/* Windows are exact copies of the file and stay inside their split. */
static void test_file_windows(void) {
    char path[] = "/tmp/dfa_test_data_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    if (fd < 0) return;
    close(fd);
    /* Each 4-byte cell holds its own offset, so a window tells where it came from. */
    const size_t cells = 5000, len = cells * 4;
    uint8_t *content = malloc(len);
    if (!content) exit(2);
    for (size_t i = 0; i < cells; i++) {
        uint32_t v = (uint32_t)i;
        memcpy(content + 4 * i, &v, 4);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(content, 1, len, f) == len, "cannot write %s", path);
    if (f) CHECK(fclose(f) == 0, "fclose");

    const int contexts[] = {63, 1000, 9999};
    for (int ci = 0; ci < 3; ci++) {
        const int c = contexts[ci];
        dft_data d;
        char err[256];
        int rc = dft_data_file(&d, path, c, 7, err, sizeof err);
        CHECK(rc == 0, "file context %d: %s", c, err);
        if (rc) continue;
        CHECK(d.file_len == len, "file_len %zu, expected %zu", d.file_len, len);
        size_t cut = len * 9 / 10;
        if (len - cut < (size_t)c + 1) cut = len - ((size_t)c + 1);
        sample s = alloc_sample(c);
        for (int split = 0; split < 2; split++) {
            size_t lo_seen = len, hi_seen = 0;
            for (uint64_t i = 0; i < 400; i++) {
                dft_data_sample(&d, (dft_split)split, i, s.bytes, s.weight, &s.answer_pos);
                CHECK(s.answer_pos == -1, "file answer_pos %d", s.answer_pos);
                CHECK(s.weight[0] == 1.0f && s.weight[c - 1] == 1.0f, "file weights not 1");
                /* Locate the window by trying every start (the content is unique at 4-byte granularity). */
                long start = -1;
                for (size_t o = 0; o + (size_t)c + 1 <= len; o++)
                    if (content[o] == s.bytes[0] && !memcmp(content + o, s.bytes, (size_t)c + 1)) {
                        start = (long)o;
                        break;
                    }
                CHECK(start >= 0, "context %d split %d index %llu: window is not a slice of the file", c, split,
                      (unsigned long long)i);
                if (start < 0) continue;
                size_t a = (size_t)start, b = a + (size_t)c + 1;
                if (split == DFT_SPLIT_TRAIN)
                    CHECK(b <= cut, "context %d: train window [%zu, %zu) crosses the split at %zu", c, a, b, cut);
                else
                    CHECK(a >= cut && b <= len, "context %d: eval window [%zu, %zu) outside [%zu, %zu)", c, a, b,
                          cut, len);
                if (a < lo_seen) lo_seen = a;
                if (b > hi_seen) hi_seen = b;
            }
            if (split == DFT_SPLIT_TRAIN && c == 63)
                CHECK(lo_seen < cut / 20 && hi_seen > cut - cut / 20, "train windows span only [%zu, %zu) of %zu",
                      lo_seen, hi_seen, cut);
        }
        free_sample(&s);
        dft_data_close(&d);
        CHECK(d.file == NULL, "close left the file buffer");
    }
    free(content);
    remove(path);
}

static void test_rng(void) {
    CHECK(dft_rng_hash(0) != dft_rng_hash(1), "hash(0) == hash(1)");
    CHECK(dft_rng_hash(12345) == dft_rng_hash(12345), "hash not a function");
    int ones = 0;
    for (uint64_t i = 0; i < 1000; i++) ones += __builtin_popcountll(dft_rng_hash(i));
    CHECK(ones > 31000 && ones < 33000, "hash bits unbalanced: %d of 64000 set", ones);
}

int main(void) {
    tl_init("test_data");
    test_rng();
    test_passkey_contexts();
    test_determinism();
    test_key_digits();
    test_bad_args();
    test_file_windows();
    return tl_finish("test_data");
}
