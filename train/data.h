/* Training data for the byte-level trainer: the built-in passkey-retrieval task and
 * any byte file. Every sequence is a pure function of (seed, split, index), so a
 * resumed run sees exactly the data an uninterrupted one would, with no cursor to save.
 *
 * A sequence of `context` positions is context + 1 bytes: the model reads bytes[0..context-1]
 * and position t is trained to predict bytes[t + 1] with weight weight[t]. */
#ifndef DFT_TRAIN_DATA_H
#define DFT_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "train/rng.h" /* dft_rng_hash: counter-based random numbers over a key */

#define DFT_PASSKEY_DIGITS 5
#define DFT_PASSKEY_MIN_CONTEXT 256 /* shortest context the passkey generator accepts */

typedef enum { DFT_DATA_PASSKEY = 0, DFT_DATA_FILE = 1 } dft_data_kind;
typedef enum { DFT_SPLIT_TRAIN = 0, DFT_SPLIT_EVAL = 1 } dft_split;

typedef struct {
    dft_data_kind kind;
    int context;          /* positions per sequence */
    uint64_t seed;
    float answer_weight;  /* passkey: weight of the key's targets (filler targets weigh 1) */
    uint8_t *file;        /* DFT_DATA_FILE: the whole file (owned; dft_data_close frees it) */
    size_t file_len;
} dft_data;

/* The passkey task at `context` positions. Returns 0, or -1 with a message in err
   (context below DFT_PASSKEY_MIN_CONTEXT, answer_weight not finite or < 0). */
int dft_data_passkey(dft_data *d, int context, uint64_t seed, float answer_weight, char *err, size_t errlen);

/* Random windows of a byte file: the train split reads the first 90% of the file, the
   eval split the last 10%. The whole file is read into memory, so it must be a regular file
   (its size known before reading; a device or a pipe is refused). Returns 0, or -1 with a
   message naming the path and the reason (unreadable, not a regular file, out of memory,
   empty, shorter than 2 * (context + 1) bytes). */
int dft_data_file(dft_data *d, const char *path, int context, uint64_t seed, char *err, size_t errlen);

void dft_data_close(dft_data *d);

/* Fills bytes[context + 1] and weight[context] for sequence `index` of `split`.
   For the passkey task *answer_pos is the position t whose target bytes[t + 1] is the
   key's first digit (the key's digits are the targets of t .. t + DIGITS - 1, the last
   positions of the sequence); for a file it is -1. Thread safe (reads d only). */
void dft_data_sample(const dft_data *d, dft_split split, uint64_t index, uint8_t *bytes, float *weight,
                      int *answer_pos);


#endif
