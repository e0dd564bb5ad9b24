/* Output files written whole or not at all (checkpoints, safetensors exports), and the
 * checks the command line makes on every output path before any work.
 *
 * A file is written under a fresh temporary name beside its target, "<path>.tmp.XXXXXX",
 * created by mkstemp: O_CREAT | O_EXCL, so a name that already exists (a symlink planted
 * there among them) is never opened, and the name cannot be guessed in advance. It is
 * flushed, synced and then renamed over the target (rename replaces a symlink at the target,
 * never the file it points to), so a crash never leaves half a file under the target's name.
 * While it is open its name is registered, and dft_outfile_cleanup_on_signals makes SIGINT
 * and SIGTERM remove it before the process dies as it would have. */
#ifndef DFT_TRAIN_OUTFILE_H
#define DFT_TRAIN_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;          /* write here */
    char *tmp;        /* the temporary file's name (malloc'd) */
    const char *path; /* the target */
    int slot;         /* the signal-cleanup registration, or -1 */
} dft_outfile;

/* Creates the temporary file for path (mode 0666 less the umask, as fopen would). `what`
   starts the message ("checkpoint", "export"). 0, or -1 with the reason in err. */
int dft_outfile_open(dft_outfile *o, const char *path, const char *what, char *err, size_t errlen);

/* Finishes: flush, fsync, close, rename over the target. write_errno is the errno of an earlier
   failed write (-1 for one without errno), 0 if every write succeeded. On any failure the
   temporary file is removed. 0, or -1 with the reason in err. */
int dft_outfile_commit(dft_outfile *o, int write_errno, const char *what, char *err, size_t errlen);

/* Closes and removes the temporary file (after a failure of the caller's). */
void dft_outfile_discard(dft_outfile *o);

/* Before any work: can an output go to path? The path is not empty and not a directory; its
   folder exists and takes a new file (one is created there and removed at once). With
   replaced != 0 (a file written as above, renamed over the target) an existing target must be
   a regular file or a symlink; otherwise (a log opened for writing) anything writable is.
   0, or -1 with err naming `what` (an option such as "--save"), the path and the reason. */
int dft_outfile_check(const char *path, const char *what, int replaced, char *err, size_t errlen);

/* 1 when a and b name the same file, or would once written: the same string, the same
   existing file (device and inode, through symlinks or not), or the same last component in
   the same folder (device and inode of the folder). */
int dft_same_file(const char *a, const char *b);

/* Installs SIGINT and SIGTERM handlers (where the signal has its default action) that remove
   the registered temporary files and then end the process by the same signal. */
void dft_outfile_cleanup_on_signals(void);

#endif
