/* libFuzzer target: the trainer's checkpoint reader (train/checkpoint.c, dft_ckpt_load) on
 * arbitrary file contents. A checkpoint is untrusted input (--resume FILE): the reader must
 * refuse a bad file with a message, never crash, read out of bounds or allocate more than
 * the file, and leave the caller's sections and step untouched when it refuses.
 *
 * Each input is loaded twice: as it is, and with its last 8 bytes replaced by the right
 * checksum, so that mutations get past the checksum to the checks behind it (configuration
 * fields, step, sizes). A file that loads is saved again and loaded back: the same step and
 * the same bits. Properties that fail abort(), which libFuzzer reports as a crash. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ckpt_config.h"

#define POISON 0x7fc0dead /* a NaN pattern no file in the corpus holds */
#define STEP_POISON (-4242)

static int in_fd = -1;
static char in_path[64], rt_dir[256], rt_path[300];

static void fail(const char *what, const char *err) {
    fprintf(stderr, "fuzz_ckpt: property failed: %s (message: \"%s\")\n", what, err ? err : "");
    abort();
}

static void cleanup(void) {
    if (rt_path[0]) unlink(rt_path);
    if (rt_dir[0]) rmdir(rt_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    in_fd = memfd_create("fuzz_ckpt", 0);
    if (in_fd < 0) {
        perror("fuzz_ckpt: memfd_create");
        exit(1);
    }
    snprintf(in_path, sizeof in_path, "/proc/self/fd/%d", in_fd);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(rt_dir, sizeof rt_dir, "%s/fuzz_ckpt.XXXXXX", base);
    if (!mkdtemp(rt_dir)) {
        perror("fuzz_ckpt: mkdtemp");
        exit(1);
    }
    snprintf(rt_path, sizeof rt_path, "%s/rt.ckpt", rt_dir);
    atexit(cleanup);
    return 0;
}

/* A message is one line of printable text: a hostile file must not write terminal
   escapes or line breaks into the trainer's output. */
static int printable(const char *s, size_t cap) {
    size_t n = strnlen(s, cap);
    if (n == 0 || n == cap) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
    return 1;
}

static void poison(float *const *sec) {
    for (int s = 0; s < FUZZ_CKPT_SECTIONS; s++)
        for (int i = 0; i < FUZZ_CKPT_FLOATS; i++) {
            uint32_t u = POISON;
            memcpy(&sec[s][i], &u, 4);
        }
}

static int poisoned(float *const *sec) {
    for (int s = 0; s < FUZZ_CKPT_SECTIONS; s++)
        for (int i = 0; i < FUZZ_CKPT_FLOATS; i++) {
            uint32_t u;
            memcpy(&u, &sec[s][i], 4);
            if (u != POISON) return 0;
        }
    return 1;
}

static void load_bytes(const uint8_t *data, size_t size) {
    if (ftruncate(in_fd, 0) != 0 || (size && pwrite(in_fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz_ckpt: writing the input");
        exit(1);
    }
    static float a[FUZZ_CKPT_SECTIONS][FUZZ_CKPT_FLOATS], b[FUZZ_CKPT_SECTIONS][FUZZ_CKPT_FLOATS];
    float *sa[FUZZ_CKPT_SECTIONS] = {a[0], a[1], a[2]}, *sb[FUZZ_CKPT_SECTIONS] = {b[0], b[1], b[2]};
    poison(sa);
    char err[512];
    memset(err, 'x', sizeof err);
    int64_t step = STEP_POISON;
    int rc = dft_ckpt_load(in_path, fuzz_ckpt_fields, FUZZ_CKPT_NFIELDS, &step, sa, FUZZ_CKPT_SECTIONS,
                           FUZZ_CKPT_FLOATS, err, sizeof err);
    if (rc != 0 && rc != -1) fail("dft_ckpt_load returns 0 or -1", NULL);
    if (rc == -1) {
        if (!printable(err, sizeof err)) fail("a refusal has a message of printable text", NULL);
        if (!poisoned(sa)) fail("a refused file leaves the sections untouched", err);
        if (step != STEP_POISON) fail("a refused file leaves the step untouched", err);
        return;
    }
    if (step < 0) fail("a loaded step is >= 0", NULL);

    /* Round trip: what loaded saves and loads back as the same step and bits. */
    if (dft_ckpt_save(rt_path, fuzz_ckpt_fields, FUZZ_CKPT_NFIELDS, step, sa, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS,
                      err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_ckpt: cannot save the round trip: %s\n", err);
        exit(1);
    }
    poison(sb);
    int64_t step2 = STEP_POISON;
    if (dft_ckpt_load(rt_path, fuzz_ckpt_fields, FUZZ_CKPT_NFIELDS, &step2, sb, FUZZ_CKPT_SECTIONS,
                      FUZZ_CKPT_FLOATS, err, sizeof err) != 0)
        fail("a saved file loads back", err);
    if (step2 != step || memcmp(a, b, sizeof a) != 0) fail("a saved file loads back as the same step and bits", NULL);
    unlink(rt_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_bytes(data, size);
    if (size >= 8) {
        uint8_t *copy = malloc(size);
        if (!copy) return 0;
        memcpy(copy, data, size);
        uint64_t sum = dft_ckpt_checksum(copy, size - 8);
        for (int i = 0; i < 8; i++) copy[size - 8 + i] = (uint8_t)(sum >> (8 * i));
        load_bytes(copy, size);
        free(copy);
    }
    return 0;
}
