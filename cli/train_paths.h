/* The files of `distflash train`, checked before the training starts, so that a bad path
 * fails at once instead of after the run: every output (--save, --export, --log, --plot)
 * can be created in its folder and is not a directory; no two outputs name the same file;
 * no output names an input (--data, --resume), except --save naming the checkpoint that
 * --resume reads (continuing a run). Names are compared as files (device and inode,
 * through symlinks), not only as strings. */
#ifndef DFA_TOOLS_TRAIN_PATHS_H
#define DFA_TOOLS_TRAIN_PATHS_H

#include <stddef.h>

#include "train_args.h"

/* 0, or -1 with the reason in err (naming the option and the path). */
int train_paths_check(const train_args *a, char *err, size_t errlen);

#endif
