/* The subcommands of the installed distflash command-line tool, one file each
   (cmd_<name>.c). Each takes the arguments after its name and returns the process
   exit status. The developer subcommands live in bench/cli (distflash-bench). */
#ifndef DFA_TOOLS_COMMANDS_H
#define DFA_TOOLS_COMMANDS_H

int cmd_train(int argc, char **argv);  /* the LLaMA-style trainer with sequence parallelism */
int cmd_export(int argc, char **argv); /* a training checkpoint's weights as safetensors */

#endif
