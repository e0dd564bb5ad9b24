#include <stdio.h>

#include "commands.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash: this command is not built yet\n");
    return 2;
}
