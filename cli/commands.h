/* The subcommands of the distflash command-line program, one file each (cmd_<name>.c).
   Each takes the arguments after its name (argv[0] is the name) and returns the process
   exit status. */
#ifndef DFA_CLI_COMMANDS_H
#define DFA_CLI_COMMANDS_H

int cmd_train(int argc, char **argv);       /* the LLaMA-style trainer with sequence parallelism */
int cmd_export(int argc, char **argv);      /* a training checkpoint's weights as safetensors */
int cmd_demo(int argc, char **argv);        /* the attention demo: a long sequence against the naive path */
int cmd_bench(int argc, char **argv);       /* single-device speed and memory, vs the naive path and peers */
int cmd_simulate(int argc, char **argv);    /* distributed schedules: table and predicted makespans */
int cmd_dist_bench(int argc, char **argv);  /* distributed attention under mpirun: per-rank, per-step times */
int cmd_plan(int argc, char **argv);        /* a masked plan printed, on the CPU */
int cmd_plan_blocks(int argc, char **argv); /* a masked plan's blocks, one by one on one GPU */
int cmd_rank_sim(int argc, char **argv);    /* each rank's whole pass of a P-rank call on one GPU */

/* `distflash bench --device cuda ...`: cmd_bench hands its whole argument list here
   (cmd_bench_cuda.c; prints a clear message when built without CUDA). */
int cmd_bench_cuda(int argc, char **argv);
/* `distflash dist-bench --device cuda ...`: cmd_dist_bench hands its arguments here
   (cmd_dist_bench_cuda.c; a clear message when built without MPI or NCCL). */
int cmd_dist_bench_cuda(int argc, char **argv);

#endif
