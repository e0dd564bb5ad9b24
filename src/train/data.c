/* Training data: the passkey-retrieval task and random windows of a byte file.
 *
 * Passkey layout (context + 1 bytes):
 *   [filler a][key statement][filler b][question][5 key digits]
 * The filler is made of a handful of short random sentences that the sequence draws from over
 * and over: after the first sight of a sentence the rest of each repeat is predictable only by
 * copying from earlier in the context, so the language-model loss on the filler trains the same
 * induction (match-and-copy) heads that retrieving the key needs. The key statement and the
 * question share the distinctive prefix "The passkey is <", and '<' appears nowhere else, so the
 * byte just before the answer points straight at the byte before the stated key. Digits appear
 * only in the key statement and in the answer. */
#include "train/data.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ull

uint64_t dfa__rng_hash(uint64_t x) {
    uint64_t z = x + GOLDEN;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A counter-based stream: draw i is hash(key + i * GOLDEN), the splitmix64 sequence from key. */
typedef struct {
    uint64_t key, i;
} rng_stream;

static uint64_t rng_next(rng_stream *s) { return dfa__rng_hash(s->key + (s->i++) * GOLDEN); }

/* Uniform in [0, n) for 0 < n <= 2^32 (multiply-shift; bias below 2^-32). */
static uint64_t rng_below(rng_stream *s, uint64_t n) { return ((rng_next(s) >> 32) * n) >> 32; }

/* One key per (seed, split, index, purpose): each hash folds in the next field, so streams for
   different fields never share a key except by a 64-bit collision. */
static uint64_t stream_key(uint64_t seed, int split, uint64_t index, uint64_t purpose) {
    uint64_t k = dfa__rng_hash(seed);
    k = dfa__rng_hash(k ^ (uint64_t)(unsigned)split);
    k = dfa__rng_hash(k ^ index);
    return dfa__rng_hash(k ^ purpose);
}

enum { PURPOSE_LAYOUT = 1, PURPOSE_SENTENCES = 2, PURPOSE_ORDER = 3, PURPOSE_WINDOW = 4 };

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- passkey ---- */

/* Lower-case words without digits, '<' or the words of the key phrases, so nothing in the
   filler can be mistaken for the statement or the question. */
static const char *const filler_words[] = {
    "grass", "sky",   "sun",   "tree",  "river", "stone", "cloud", "wind",  "rain",   "hill",  "bird",
    "fish",  "road",  "house", "light", "night", "day",   "sea",   "moon",  "star",   "green", "blue",
    "red",   "small", "big",   "old",   "warm",  "cold",  "quiet", "dark",  "soft",   "runs",  "falls",
    "sings", "grows", "flows", "rests", "moves", "over",  "under", "near",  "far",    "and",   "then",
    "here",  "there", "a",     "slow",  "again", "often", "field", "leaf",  "snow",   "fire",  "boat",
    "lake",  "path",  "door",  "wall",  "song",  "bread", "milk",  "horse", "garden",
};
#define N_FILLER_WORDS (sizeof filler_words / sizeof filler_words[0])

/* The filler's shape; compile-time knobs so that bench/train/passkey_mirror.py can compare
   designs (-D...) on the generator itself. Kind 0: sentences of filler_words; 1: sentences of
   random-letter words (every byte of a first sight is new, so copying its repeats pays more per
   byte); 2: a chain over a small alphabet where each symbol is followed by its own per-sequence
   successor, except for random jumps; 3: the classic fixed filler sentences, repeated; 4: one
   byte, '-', repeated (the least to attend to). */
#ifndef DFA__FILLER_KIND
#define DFA__FILLER_KIND 0
#endif
#ifndef DFA__CHAIN_JUMP_PER_256
#define DFA__CHAIN_JUMP_PER_256 32
#endif
/* Sentences per sequence: few enough that each repeats many times even at 256 positions. */
#ifndef DFA__FILLER_SENTENCES
#define DFA__FILLER_SENTENCES 6
#endif
#ifndef DFA__FILLER_MIN_WORDS
#define DFA__FILLER_MIN_WORDS 3
#endif
#ifndef DFA__FILLER_MAX_WORDS
#define DFA__FILLER_MAX_WORDS 6
#endif
/* Most episodes (statement + question + answer, each with its own key and marker) in one
   training sequence, drawn uniformly from 1..this: the retrieval skill learns from answers, so
   more answers per sequence is more signal per token. Evaluation has one episode. */
#ifndef DFA__TRAIN_EPISODES_MAX
#define DFA__TRAIN_EPISODES_MAX 1
#endif
#define MIN_LETTERS 2
#define MAX_LETTERS 7

static const char key_prefix[] = " The passkey is "; /* then the marker, the digits, the suffix */
static const char key_suffix[] = ">. Remember it. ";
static const char question[] = " What is the passkey? The passkey is "; /* then the marker, the digits */
/* Episode markers of training sequences; evaluation always uses the first. None is a digit,
   and none appears in any filler or in the phrases. */
static const char markers[] = "<[{(|#@$%&*=+^~";

#define LEN(s) (sizeof(s) - 1)
#define STATEMENT_LEN (LEN(key_prefix) + 1 + DFA__PASSKEY_DIGITS + LEN(key_suffix))
#define TAIL_LEN (LEN(question) + 1 + DFA__PASSKEY_DIGITS)

/* Appends sentence j of the sequence's pool at out[*pos], stopping at `end`. */
static void put_sentence(uint64_t sentences_key, int j, uint8_t *out, size_t *pos, size_t end) {
    rng_stream r = {dfa__rng_hash(sentences_key ^ (uint64_t)j), 0};
    int words = DFA__FILLER_MIN_WORDS + (int)rng_below(&r, DFA__FILLER_MAX_WORDS - DFA__FILLER_MIN_WORDS + 1);
    for (int w = 0; w < words && *pos < end; w++) {
        if (DFA__FILLER_KIND == 1) {
            int letters = MIN_LETTERS + (int)rng_below(&r, MAX_LETTERS - MIN_LETTERS + 1);
            for (int l = 0; l < letters && *pos < end; l++) out[(*pos)++] = (uint8_t)('a' + rng_below(&r, 26));
        } else {
            const char *word = filler_words[rng_below(&r, N_FILLER_WORDS)];
            for (const char *c = word; *c && *pos < end; c++) out[(*pos)++] = (uint8_t)*c;
        }
        const char *sep = w + 1 < words ? " " : ". ";
        for (const char *c = sep; *c && *pos < end; c++) out[(*pos)++] = (uint8_t)*c;
    }
}

static const char classic_filler[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

static const char chain_alphabet[] = "abcdefghijklmnopqrstuvwxyz .";
#define CHAIN_SYMBOLS LEN(chain_alphabet)

/* Fills out[0..end) with the chain: successor[i] is where symbol i leads in this sequence. */
static void put_chain(uint64_t successor_key, uint64_t steps_key, uint8_t *out, size_t end) {
    rng_stream r = {successor_key, 0};
    uint8_t successor[CHAIN_SYMBOLS]; /* a random permutation (Fisher-Yates): long cycles, no merging */
    for (size_t i = 0; i < CHAIN_SYMBOLS; i++) successor[i] = (uint8_t)i;
    for (size_t i = CHAIN_SYMBOLS - 1; i > 0; i--) {
        size_t j = rng_below(&r, i + 1);
        uint8_t t = successor[i];
        successor[i] = successor[j];
        successor[j] = t;
    }
    rng_stream step = {steps_key, 0};
    size_t cur = rng_below(&step, CHAIN_SYMBOLS);
    for (size_t p = 0; p < end; p++) {
        out[p] = (uint8_t)chain_alphabet[cur];
        uint64_t u = rng_next(&step);
        cur = (u & 255) < DFA__CHAIN_JUMP_PER_256 ? ((u >> 32) * CHAIN_SYMBOLS) >> 32 : successor[cur];
    }
}

typedef struct {
    size_t at;       /* bytes of filler before the piece */
    int episode;
    int is_question;
} piece;

static int piece_before(const piece *x, const piece *y) {
    if (x->at != y->at) return x->at < y->at;
    if (x->episode != y->episode) return x->episode < y->episode;
    return x->is_question < y->is_question;
}

static size_t piece_len(const piece *p) { return p->is_question ? TAIL_LEN : STATEMENT_LEN; }

static void put_piece(const piece *p, const char *keys, const char *marks, uint8_t *out) {
    const char *text = p->is_question ? question : key_prefix;
    size_t len = p->is_question ? LEN(question) : LEN(key_prefix);
    memcpy(out, text, len);
    out[len] = (uint8_t)marks[p->episode];
    memcpy(out + len + 1, keys + DFA__PASSKEY_DIGITS * p->episode, DFA__PASSKEY_DIGITS);
    if (!p->is_question) memcpy(out + len + 1 + DFA__PASSKEY_DIGITS, key_suffix, LEN(key_suffix));
}

static void put_filler(const dfa__data *d, dfa__split split, uint64_t index, uint8_t *bytes, size_t filler) {
    const uint64_t sentences_key = stream_key(d->seed, (int)split, index, PURPOSE_SENTENCES);
    rng_stream order = {stream_key(d->seed, (int)split, index, PURPOSE_ORDER), 0};
    size_t pos = 0;
    if (DFA__FILLER_KIND == 2)
        put_chain(sentences_key, order.key, bytes, filler);
    else if (DFA__FILLER_KIND == 3)
        for (; pos < filler; pos++) bytes[pos] = (uint8_t)classic_filler[pos % LEN(classic_filler)];
    else if (DFA__FILLER_KIND == 4)
        memset(bytes, '-', filler);
    else
        while (pos < filler)
            put_sentence(sentences_key, (int)rng_below(&order, DFA__FILLER_SENTENCES), bytes, &pos, filler);
}

#define MAX_EPISODES (DFA__TRAIN_EPISODES_MAX > 1 ? DFA__TRAIN_EPISODES_MAX : 1)

static void passkey_sample(const dfa__data *d, dfa__split split, uint64_t index, uint8_t *bytes, float *weight,
                           int *answer_pos) {
    const size_t n = (size_t)d->context + 1;
    rng_stream layout = {stream_key(d->seed, (int)split, index, PURPOSE_LAYOUT), 0};

    size_t episodes = 1;
    if (split == DFA__SPLIT_TRAIN && MAX_EPISODES > 1) {
        size_t fit = n / (STATEMENT_LEN + TAIL_LEN), most = MAX_EPISODES < fit ? MAX_EPISODES : fit;
        if (most > LEN(markers)) most = LEN(markers);
        episodes = 1 + (size_t)rng_below(&layout, most);
    }
    char keys[DFA__PASSKEY_DIGITS * MAX_EPISODES], marks[MAX_EPISODES];
    char pool[LEN(markers)];
    memcpy(pool, markers, LEN(markers));
    for (size_t e = 0; e < episodes; e++) {
        for (int i = 0; i < DFA__PASSKEY_DIGITS; i++)
            keys[DFA__PASSKEY_DIGITS * e + i] = (char)('0' + rng_below(&layout, 10));
        if (episodes > 1) { /* distinct markers: a partial Fisher-Yates draw */
            size_t j = e + (size_t)rng_below(&layout, LEN(markers) - e);
            char t = pool[e];
            pool[e] = pool[j];
            pool[j] = t;
        }
        marks[e] = pool[e];
    }
    const size_t filler = n - episodes * (STATEMENT_LEN + TAIL_LEN);

    /* Every episode but the last puts its statement and then its question at two uniform
       depths; the last one's question ends the sequence. */
    piece pieces[2 * MAX_EPISODES];
    size_t np = 0;
    for (size_t e = 0; e < episodes; e++) {
        size_t a = (size_t)rng_below(&layout, (uint64_t)filler + 1);
        pieces[np++] = (piece){a, (int)e, 0};
        if (e + 1 < episodes) {
            size_t b = (size_t)rng_below(&layout, (uint64_t)filler + 1);
            if (b < a) {
                pieces[np - 1].at = b;
                b = a;
            }
            pieces[np++] = (piece){b, (int)e, 1};
        }
    }
    for (size_t i = 1; i < np; i++) { /* insertion sort by depth */
        piece p = pieces[i];
        size_t j = i;
        for (; j > 0 && piece_before(&p, &pieces[j - 1]); j--) pieces[j] = pieces[j - 1];
        pieces[j] = p;
    }

    /* Filler first, all of it at the front; then open the gaps, last piece first, so that
       each move reads filler that has not been overwritten yet. */
    put_filler(d, split, index, bytes, filler);
    size_t before = 0; /* bytes of pieces before piece i */
    for (size_t i = 0; i < np; i++) before += piece_len(&pieces[i]);
    for (size_t i = np; i-- > 0;) {
        const size_t end = i + 1 < np ? pieces[i + 1].at : filler;
        memmove(bytes + pieces[i].at + before, bytes + pieces[i].at, end - pieces[i].at);
        before -= piece_len(&pieces[i]);
        put_piece(&pieces[i], keys, marks, bytes + pieces[i].at + before);
    }
    piece tail = {0, (int)episodes - 1, 1};
    put_piece(&tail, keys, marks, bytes + n - TAIL_LEN);

    for (int t = 0; t < d->context; t++) weight[t] = 1.0f;
    /* Each answer's digits are the targets of the positions just before them. */
    size_t at = 0;
    for (size_t i = 0; i < np; i++) {
        at += pieces[i].at - (i ? pieces[i - 1].at : 0);
        if (pieces[i].is_question)
            for (size_t k = 0; k < DFA__PASSKEY_DIGITS; k++) weight[at + LEN(question) + k] = d->answer_weight;
        at += piece_len(&pieces[i]);
    }
    const int first = d->context - DFA__PASSKEY_DIGITS;
    for (int t = first; t < d->context; t++) weight[t] = d->answer_weight;
    *answer_pos = first;
}

int dfa__data_passkey(dfa__data *d, int context, uint64_t seed, float answer_weight, char *err, size_t errlen) {
    if (!d) {
        set_err(err, errlen, "passkey data: NULL data handle");
        return -1;
    }
    memset(d, 0, sizeof *d);
    if (context < DFA__PASSKEY_MIN_CONTEXT) {
        set_err(err, errlen, "passkey data: context %d is below the minimum %d", context, DFA__PASSKEY_MIN_CONTEXT);
        return -1;
    }
    if (!isfinite(answer_weight) || answer_weight < 0.0f) {
        set_err(err, errlen, "passkey data: answer_weight %g must be finite and >= 0", (double)answer_weight);
        return -1;
    }
    d->kind = DFA__DATA_PASSKEY;
    d->context = context;
    d->seed = seed;
    d->answer_weight = answer_weight;
    return 0;
}

/* ---- byte files ---- */

/* First byte of the eval split: 90% of the file, moved down where needed so that the eval
   split still holds one whole window (the file is at least two windows long). */
static size_t eval_start(const dfa__data *d) {
    const size_t window = (size_t)d->context + 1;
    size_t cut = d->file_len / 10 * 9 + d->file_len % 10 * 9 / 10;
    if (d->file_len - cut < window) cut = d->file_len - window;
    return cut;
}

static void file_sample(const dfa__data *d, dfa__split split, uint64_t index, uint8_t *bytes, float *weight,
                        int *answer_pos) {
    const size_t window = (size_t)d->context + 1;
    const size_t cut = eval_start(d);
    const size_t lo = split == DFA__SPLIT_TRAIN ? 0 : cut;
    const size_t hi = split == DFA__SPLIT_TRAIN ? cut : d->file_len; /* windows lie in [lo, hi) */
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

int dfa__data_file(dfa__data *d, const char *path, int context, uint64_t seed, char *err, size_t errlen) {
    if (!d) {
        set_err(err, errlen, "file data: NULL data handle");
        return -1;
    }
    memset(d, 0, sizeof *d);
    if (!path) {
        set_err(err, errlen, "file data: NULL path");
        return -1;
    }
    if (context < 1) {
        set_err(err, errlen, "file data %s: context %d must be >= 1", path, context);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "file data %s: unreadable: %s", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : (size_t)1 << 16;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                set_err(err, errlen, "file data %s: out of memory after %zu bytes", path, len);
                return -1;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int read_error = ferror(f);
    int close_error = fclose(f);
    if (read_error || close_error) {
        free(buf);
        set_err(err, errlen, "file data %s: unreadable: read error", path);
        return -1;
    }
    if (len == 0) {
        free(buf);
        set_err(err, errlen, "file data %s: empty", path);
        return -1;
    }
    const size_t need = 2 * ((size_t)context + 1);
    if (len < need) {
        free(buf);
        set_err(err, errlen, "file data %s: too short: %zu bytes, need at least %zu (two windows of context %d + 1)",
                path, len, need, context);
        return -1;
    }
    d->kind = DFA__DATA_FILE;
    d->context = context;
    d->seed = seed;
    d->answer_weight = 1.0f;
    d->file = buf;
    d->file_len = len;
    return 0;
}

void dfa__data_close(dfa__data *d) {
    if (!d) return;
    free(d->file);
    d->file = NULL;
    d->file_len = 0;
}

void dfa__data_sample(const dfa__data *d, dfa__split split, uint64_t index, uint8_t *bytes, float *weight,
                      int *answer_pos) {
    if (d->kind == DFA__DATA_FILE)
        file_sample(d, split, index, bytes, weight, answer_pos);
    else
        passkey_sample(d, split, index, bytes, weight, answer_pos);
}
