/* dfa_bench_cuda: the same as `distflash bench --device cuda ...` (tools/cmd_bench_cuda.c). */
#include "commands.h"

int main(int argc, char **argv) { return cmd_bench_cuda(argc, argv); }
