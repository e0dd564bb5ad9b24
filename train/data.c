/* Training data: the passkey-retrieval task and random windows of a byte file.
 *
 * Passkey layout (context + 1 bytes):
 *   [filler a][key statement][filler b][question][5 key digits]
 * The filler is one fixed paragraph repeated: a tiny model predicts such filler almost perfectly
 * within a few hundred steps and then spends its capacity and gradient on retrieval. Fillers
 * built to train copying
 * (random sentences repeated within a sequence, random-letter words, per-sequence successor
 * chains) did worse: at 256 positions and 3 M tokens the best of them reached 3% exact where
 * this one reached 47% (one seed each), and at 2048 positions none learned at all.
 * The statement says the key twice, as the classic passkey prompt does ("The passkey is <KEY>.
 * Remember it. <KEY> is the passkey."), and the question shares its prefix "The passkey is <";
 * '<' appears nowhere else. The second copy is the answer's retrieval at short range (find the
 * byte after the previous '<', then the byte after the previous copy of the current digit), so
 * its targets weigh like the answer's: that dense short-range signal is what lets a tiny model
 * learn retrieval in a couple of million tokens (at 256 positions, 2000 steps of 4: 17% exact,
 * 70% of digits, against about 8% exact with the key said once), and the length
 * warm-up of the trainer carries it to the whole context. Digits appear only in the key and answer. */
#include "train/data.h"
#include "train/text.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A counter-based stream: draw i is hash(key + i * DFT_RNG_GOLDEN), the splitmix64 sequence from key. */
typedef struct {
    uint64_t key, i;
} rng_stream;

static uint64_t rng_next(rng_stream *s) { return dft_rng_hash(s->key + (s->i++) * DFT_RNG_GOLDEN); }

/* Uniform in [0, n) for 0 < n <= 2^32 (multiply-shift; bias below 2^-32). */
static uint64_t rng_below(rng_stream *s, uint64_t n) { return ((rng_next(s) >> 32) * n) >> 32; }

/* One key per (seed, split, index, purpose): each hash folds in the next field, so streams for
   different fields never share a key except by a 64-bit collision. */
static uint64_t stream_key(uint64_t seed, int split, uint64_t index, uint64_t purpose) {
    uint64_t k = dft_rng_hash(seed);
    k = dft_rng_hash(k ^ (uint64_t)(unsigned)split);
    k = dft_rng_hash(k ^ index);
    return dft_rng_hash(k ^ purpose);
}

enum { PURPOSE_LAYOUT = 1, PURPOSE_WINDOW = 4 };

/* ---- passkey ---- */

static const char filler_text[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char key_prefix[] = " The passkey is <";
static const char key_middle[] = ">. Remember it. <";
static const char key_suffix[] = "> is the passkey. ";
static const char question[] = " What is the passkey? The passkey is <";

#define LEN(s) (sizeof(s) - 1)
#define STATEMENT_LEN (LEN(key_prefix) + DFT_PASSKEY_DIGITS + LEN(key_middle) + DFT_PASSKEY_DIGITS + LEN(key_suffix))
#define TAIL_LEN (LEN(question) + DFT_PASSKEY_DIGITS)

static void passkey_sample(const dft_data *d, dft_split split, uint64_t index, uint8_t *bytes, float *weight,
                           int *answer_pos) {
    const size_t n = (size_t)d->context + 1;
    const size_t filler = n - STATEMENT_LEN - TAIL_LEN;

    rng_stream layout = {stream_key(d->seed, (int)split, index, PURPOSE_LAYOUT), 0};
    char key[DFT_PASSKEY_DIGITS];
    for (int i = 0; i < DFT_PASSKEY_DIGITS; i++) key[i] = (char)('0' + rng_below(&layout, 10));
    const size_t depth = (size_t)rng_below(&layout, (uint64_t)filler + 1); /* bytes of filler before the key */

    /* The filler runs on across the statement, as if the statement had been pasted into it. */
    for (size_t i = 0; i < depth; i++) bytes[i] = (uint8_t)filler_text[i % LEN(filler_text)];
    uint8_t *s = bytes + depth;
    memcpy(s, key_prefix, LEN(key_prefix));
    memcpy(s + LEN(key_prefix), key, DFT_PASSKEY_DIGITS);
    uint8_t *again = s + LEN(key_prefix) + DFT_PASSKEY_DIGITS + LEN(key_middle);
    memcpy(s + LEN(key_prefix) + DFT_PASSKEY_DIGITS, key_middle, LEN(key_middle));
    memcpy(again, key, DFT_PASSKEY_DIGITS);
    memcpy(again + DFT_PASSKEY_DIGITS, key_suffix, LEN(key_suffix));
    for (size_t i = depth; i < filler; i++) bytes[STATEMENT_LEN + i] = (uint8_t)filler_text[i % LEN(filler_text)];

    uint8_t *q = bytes + n - TAIL_LEN;
    memcpy(q, question, LEN(question));
    memcpy(q + LEN(question), key, DFT_PASSKEY_DIGITS);

    const int first = d->context - DFT_PASSKEY_DIGITS;
    for (int t = 0; t < d->context; t++) weight[t] = t >= first ? d->answer_weight : 1.0f;
    /* The key said again right after it: the same retrieval at short range, weighted like the answer. */
    const int repeat = (int)(again - bytes) - 1;
    for (int i = 0; i < DFT_PASSKEY_DIGITS; i++) weight[repeat + i] = d->answer_weight;
    *answer_pos = first;
}

int dft_data_passkey(dft_data *d, int context, uint64_t seed, float answer_weight, char *err, size_t errlen) {
    if (!d) {
        dft_train_msg(err, errlen, "passkey data: NULL data handle");
        return -1;
    }
    memset(d, 0, sizeof *d);
    if (context < DFT_PASSKEY_MIN_CONTEXT) {
        dft_train_msg(err, errlen, "passkey data: context %d is below the minimum %d", context,
                       DFT_PASSKEY_MIN_CONTEXT);
        return -1;
    }
    if (!isfinite(answer_weight) || answer_weight < 0.0f) {
        dft_train_msg(err, errlen, "passkey data: answer_weight %g must be finite and >= 0", (double)answer_weight);
        return -1;
    }
    d->kind = DFT_DATA_PASSKEY;
    d->context = context;
    d->seed = seed;
    d->answer_weight = answer_weight;
    return 0;
}

/* ---- byte files ---- */

/* First byte of the eval split: 90% of the file, moved down where needed so that the eval
   split still holds one whole window (the file is at least two windows long). */
static size_t eval_start(const dft_data *d) {
    const size_t window = (size_t)d->context + 1;
    size_t cut = d->file_len / 10 * 9 + d->file_len % 10 * 9 / 10;
    if (d->file_len - cut < window) cut = d->file_len - window;
    return cut;
}

static void file_sample(const dft_data *d, dft_split split, uint64_t index, uint8_t *bytes, float *weight,
                        int *answer_pos) {
    const size_t window = (size_t)d->context + 1;
    const size_t cut = eval_start(d);
    const size_t lo = split == DFT_SPLIT_TRAIN ? 0 : cut;
    const size_t hi = split == DFT_SPLIT_TRAIN ? cut : d->file_len; /* windows lie in [lo, hi) */
    rng_stream r = {stream_key(d->seed, (int)split, index, PURPOSE_WINDOW), 0};
    const uint64_t starts = (uint64_t)(hi - lo - window) + 1;
    /* rng_below takes n <= 2^32; larger files draw the start from two words. */
    uint64_t off;
    if (starts <= (1ull << 32)) {
        off = rng_below(&r, starts);
    } else {
        off = rng_next(&r) % starts;
    }
    memcpy(bytes, d->file + lo + off, window);
    for (int t = 0; t < d->context; t++) weight[t] = 1.0f;
    *answer_pos = -1;
}

int dft_data_file(dft_data *d, const char *path, int context, uint64_t seed, char *err, size_t errlen) {
    if (!d) {
        dft_train_msg(err, errlen, "file data: NULL data handle");
        return -1;
    }
    memset(d, 0, sizeof *d);
    if (!path) {
        dft_train_msg(err, errlen, "file data: NULL path");
        return -1;
    }
    if (context < 1) {
        dft_train_msg(err, errlen, "file data %s: context %d must be >= 1", path, context);
        return -1;
    }
    /* The whole file is read (windows are drawn anywhere in it), so its size must be known
       first: a regular file, read up to the size it had when opened. */
    FILE *f = fopen(path, "rb");
    if (!f) {
        dft_train_msg(err, errlen, "file data %s: unreadable: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        dft_train_msg(err, errlen, "file data %s: not a regular file (the whole file is read, by its size)", path);
        return -1;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        fclose(f);
        dft_train_msg(err, errlen, "file data %s: %lld bytes is too large", path, (long long)st.st_size);
        return -1;
    }
    const size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        fclose(f);
        dft_train_msg(err, errlen, "file data %s: out of memory for %zu bytes", path, len);
        return -1;
    }
    const size_t got = fread(buf, 1, len, f);
    int read_error = ferror(f) || got != len;
    int close_error = fclose(f);
    if (read_error || close_error) {
        free(buf);
        dft_train_msg(err, errlen, "file data %s: unreadable: read error (%zu of %zu bytes)", path, got, len);
        return -1;
    }
    if (len == 0) {
        free(buf);
        dft_train_msg(err, errlen, "file data %s: empty", path);
        return -1;
    }
    const size_t need = 2 * ((size_t)context + 1);
    if (len < need) {
        free(buf);
        dft_train_msg(err, errlen,
                       "file data %s: too short: %zu bytes, need at least %zu (two windows of context %d + 1)", path,
                       len, need, context);
        return -1;
    }
    d->kind = DFT_DATA_FILE;
    d->context = context;
    d->seed = seed;
    d->answer_weight = 1.0f;
    d->file = buf;
    d->file_len = len;
    return 0;
}

void dft_data_close(dft_data *d) {
    if (!d) return;
    free(d->file);
    d->file = NULL;
    d->file_len = 0;
}

void dft_data_sample(const dft_data *d, dft_split split, uint64_t index, uint8_t *bytes, float *weight,
                      int *answer_pos) {
    if (d->kind == DFT_DATA_FILE)
        file_sample(d, split, index, bytes, weight, answer_pos);
    else
        passkey_sample(d, split, index, bytes, weight, answer_pos);
}
