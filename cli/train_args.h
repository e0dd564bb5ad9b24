/* The command line of `distflash train` into the trainer's configuration. Parsing only:
 * it reads argv and writes the result and a message; it prints nothing, opens nothing and
 * starts nothing, so cmd_train.c runs it before anything else and fuzz/fuzz_train_args.c
 * runs it on arbitrary argv. */
#ifndef DFA_CLI_TRAIN_ARGS_H
#define DFA_CLI_TRAIN_ARGS_H

#include <stddef.h>

#include "train/trainer.h"

typedef struct {
    dft_train_config cfg; /* dft_train_defaults() and the options; paths point into argv */
    int threads;          /* --threads N (>= 0), or -1 when not given */
    int quiet;            /* --quiet */
    int progress;         /* --progress auto|lines|live: DFT_PROGRESS_* (default auto) */
    int help;             /* --help or -h: print the usage; what follows it was not read */
    const char *preset;   /* --preset NAME (the last one given), or NULL */
    const char *export_path; /* --export FILE.safetensors: the weights at the end, or NULL */
    int export_bf16;      /* --export-dtype bf16 (default f32) */
} train_args;

/* argv[0] is the subcommand's name and is skipped. Returns 0 (see out->help), or 2, the exit
   status of a bad command line, with the message in err (no "distflash train: " prefix). */
int train_args_parse(int argc, char *const *argv, train_args *out, char *err, size_t errlen);

#endif
