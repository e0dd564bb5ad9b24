/* libFuzzer target: the command line of `distflash train` (cli/train_args.c). The input's
 * bytes, split at NUL bytes, are the arguments after `train`. The parser must not crash or
 * read past argv, must either accept (0) or refuse with exit status 2 and a message, and
 * what it accepts must be a configuration it could have been given: paths point into argv,
 * --plot comes with --log, --threads is not negative. Whatever it accepts then goes through
 * the model's configuration check (train/model), which must not crash either. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_args.h"

enum { MAX_ARGS = 256 };

static void fail(const char *what, const char *err) {
    fprintf(stderr, "fuzz_train_args: property failed: %s (message: \"%s\")\n", what, err ? err : "");
    abort();
}

/* The value of the last --seed option, or NULL: walks the accepted command line as the
   parser does (every option but --quiet takes a value). */
static const char *last_seed(int argc, char **argv) {
    const char *v = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--quiet")) continue;
        if (!strcmp(argv[i], "--seed")) v = argv[i + 1];
        i++;
    }
    return v;
}

/* The documented meaning of --seed ("a non-negative integer"): optional white space and '+',
   then decimal digits whose value fits in 64 bits; returns 0 when text is not that. */
static int seed_value(const char *text, uint64_t *out) {
    const char *p = text;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r')) p++;
    if (*p == '+') p++;
    if (!*p) return 0;
    uint64_t x = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        unsigned d = (unsigned)(*p - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *out = x;
    return 1;
}

/* s is NULL or one of argv[1..argc-1] (not a copy, not a neighbour's middle) */
static int is_arg(const char *s, int argc, char **argv) {
    if (!s) return 1;
    for (int i = 1; i < argc; i++)
        if (s == argv[i]) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* "a\0b" is two arguments, "a\0" one, "" none; each argument is its own allocation so
       that AddressSanitizer sees a read past any of them. */
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = strdup("train");
    size_t at = 0;
    while (at < size && argc <= MAX_ARGS) {
        const uint8_t *nul = memchr(data + at, 0, size - at);
        size_t len = nul ? (size_t)(nul - (data + at)) : size - at;
        char *a = malloc(len + 1);
        if (!a) break;
        memcpy(a, data + at, len);
        a[len] = '\0';
        argv[argc++] = a;
        at += len + 1;
    }
    argv[argc] = NULL;

    train_args r;
    char err[256];
    memset(err, 'x', sizeof err);
    int rc = train_args_parse(argc, argv, &r, err, sizeof err);
    if (rc == 2) {
        size_t n = strnlen(err, sizeof err);
        if (n == 0 || n == sizeof err) fail("a refusal has a message", NULL);
    } else if (rc == 0) {
        if (err[0] != '\0') fail("an accepted command line leaves the message empty", err);
        if (!r.help) {
            const dft_train_config *c = &r.cfg;
            if (!is_arg(c->data_path, argc, argv) || !is_arg(c->csv_path, argc, argv) ||
                !is_arg(c->plot_path, argc, argv) || !is_arg(c->save_path, argc, argv) ||
                !is_arg(c->resume_path, argc, argv) || !is_arg(r.export_path, argc, argv))
                fail("paths point into argv", NULL);
            if (c->plot_path && !c->csv_path) fail("--plot comes with --log", NULL);
            if (r.threads < -1) fail("--threads is -1 (not given) or >= 0", NULL);
            const char *seed = last_seed(argc, argv);
            uint64_t want;
            if (seed && (!seed_value(seed, &want) || want != c->seed))
                fail("an accepted --seed is a non-negative integer that fits in 64 bits, and is the seed", seed);
            char merr[256];
            for (int ranks = 1; ranks <= 3; ranks++) (void)dft_model_config_check(&c->model, ranks, merr, sizeof merr);
        }
    } else {
        fail("train_args_parse returns 0 or 2", NULL);
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
