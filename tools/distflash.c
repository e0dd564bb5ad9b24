/* distflash: the command-line tool. `distflash help` lists the subcommands. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "distflash.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"demo", cmd_demo, "the default job: see README.md"},
    {"bench", cmd_bench, "forward/backward speed and memory vs the naive path (--device cpu|cuda)"},
    {"simulate", cmd_simulate, "print a distributed schedule and predicted makespans (--ranks P)"},
    {"dist-bench", cmd_dist_bench, "distributed attention timings; run under mpirun -np P"},
    {"train", cmd_train, "train a small LLaMA-style model (sequence parallel under mpirun)"},
};

static void usage(FILE *f) {
    fprintf(f, "distflash %s\nusage: distflash <command> [options]   (distflash <command> --help)\n\ncommands:\n",
            dfa_version_string());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("distflash %s\n", dfa_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "distflash: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
