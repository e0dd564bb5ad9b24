/* distflash: the command-line tool. `distflash help` lists the subcommands.
 *
 * The installed tool uses the public API only. The developer subcommands (bench, demo,
 * simulate, dist-bench) need the library's internals and the benchmark plumbing, so
 * they are a separate program built from bench/cli, distflash-bench; distflash hands
 * them over (execv) when that program sits in the same folder, as in a build tree. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "distflash.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a LLaMA-style model (sequence parallel under mpirun)"},
    {"export", cmd_export, "a training checkpoint's weights as safetensors (Hugging Face LLaMA names)"},
    {"bench", NULL, "forward/backward speed and memory vs the naive path (--device cpu|cuda) [dev]"},
    {"demo", NULL, "the attention demo: a long sequence, checked against the naive path [dev]"},
    {"simulate", NULL, "print a distributed schedule and predicted makespans (--ranks P) [dev]"},
    {"dist-bench", NULL, "distributed attention timings; run under mpirun -np P [dev]"},
};

static void usage(FILE *f) {
    fprintf(f, "distflash %s\nusage: distflash <command> [options]   (distflash <command> --help)\n\ncommands:\n",
            dfa_version_string());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n[dev]: developer tools, in the program distflash-bench that a source build puts beside\n"
               "distflash (build/tools/); they are not installed.\n");
}

/* Runs distflash-bench from the folder of this executable with the same arguments. */
static int hand_over(char **argv) {
    char self[PATH_MAX], path[PATH_MAX + 32];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        snprintf(path, sizeof path, "%s/distflash-bench", n > 0 && slash ? self : ".");
        argv[0] = path;
        execv(path, argv);
        if (errno != ENOENT) {
            fprintf(stderr, "distflash: cannot start %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    fprintf(stderr,
            "distflash: '%s' is a developer tool (distflash-bench, built from bench/ in a source build "
            "beside distflash); it is not part of this installation\n",
            argv[1]);
    return 2;
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
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run ? commands[i].run(argc - 1, argv + 1) : hand_over(argv);
    fprintf(stderr, "distflash: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
