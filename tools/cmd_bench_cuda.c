#include <stdio.h>

#include "commands.h"

int cmd_bench_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash: bench --device cuda is not built yet\n");
    return 2;
}
