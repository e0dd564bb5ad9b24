/* distflash-bench: the developer subcommands of the distflash CLI. `distflash bench ...`
 * (and demo, simulate, dist-bench) starts this program when it sits beside distflash, as
 * in a build tree (build/tools/); it can also be run directly. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "distflash.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"bench", cmd_bench, "forward/backward speed and memory vs the naive path (--device cpu|cuda)"},
    {"demo", cmd_demo, "the attention demo: a long sequence, checked against the naive path"},
    {"simulate", cmd_simulate, "print a distributed schedule and predicted makespans (--ranks P)"},
    {"dist-bench", cmd_dist_bench, "distributed attention timings; run under mpirun -np P"},
    {"plan", cmd_plan, "a masked distributed plan printed and checked, on the CPU (--ranks P --docs MEAN)"},
    {"plan-blocks", cmd_plan_blocks, "a masked distributed plan's blocks timed on one GPU, with and without lending"},
    {"rank-sim", cmd_rank_sim, "each rank's whole pass of a P-rank call run on one GPU (transfers left out)"},
};

static void usage(FILE *f) {
    fprintf(f, "distflash-bench %s (developer tools)\nusage: distflash-bench <command> [options]   "
               "(distflash-bench <command> --help)\n\ncommands:\n", dfa_version_string());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "distflash-bench: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
