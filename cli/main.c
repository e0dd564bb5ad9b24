/* distflash: the command-line program. `distflash --help` lists the subcommands.
 *
 * One file per subcommand (cmd_<name>.c, declared in commands.h). train and export use the
 * public API and the trainer only; the benchmark, planning and simulation subcommands also
 * reach into the library's internals (schedules, the executor) and the harness (harness/:
 * timing, the naive path), which the program links statically. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "distflash.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a LLaMA-style model (sequence parallel under mpirun)"},
    {"export", cmd_export, "a training checkpoint's weights as safetensors (Hugging Face LLaMA names)"},
    {"bench", cmd_bench, "forward/backward speed and memory vs the naive path (--device cpu|cuda)"},
    {"demo", cmd_demo, "the attention demo: a long sequence, checked against the naive path"},
    {"dist-bench", cmd_dist_bench, "distributed attention timings; run under mpirun -np P"},
    {"simulate", cmd_simulate, "print a distributed schedule and predicted makespans (--ranks P)"},
    {"plan", cmd_plan, "a masked distributed plan printed and checked, on the CPU (--ranks P --docs MEAN)"},
    {"plan-blocks", cmd_plan_blocks, "a masked distributed plan's blocks timed on one GPU, with and without lending"},
    {"rank-sim", cmd_rank_sim, "each rank's whole pass of a P-rank call run on one GPU (transfers left out)"},
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
