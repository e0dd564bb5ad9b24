/* Output files: temporary name, rename, signal cleanup, up-front checks (outfile.h). */
#include "train/outfile.h"
#include "train/text.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the temporary files a signal removes ---- */

/* Written before `live` is set and read by the handler only when it is: the handler needs
   no lock and calls only unlink and raise (both async-signal-safe). */
enum { SLOTS = 4, SLOT_BYTES = PATH_MAX + 32 };
static char slot_name[SLOTS][SLOT_BYTES];
static volatile sig_atomic_t slot_live[SLOTS];

static int register_tmp(const char *name) {
    if (strlen(name) >= SLOT_BYTES) return -1;
    for (int i = 0; i < SLOTS; i++)
        if (!slot_live[i]) {
            memcpy(slot_name[i], name, strlen(name) + 1);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            slot_live[i] = 1;
            return i;
        }
    return -1; /* more files open at once than slots: this one is not removed on a signal */
}

static void unregister_tmp(int slot) {
    if (slot >= 0) slot_live[slot] = 0;
}

static void on_signal(int sig) {
    for (int i = 0; i < SLOTS; i++)
        if (slot_live[i]) unlink(slot_name[i]);
    raise(sig); /* SA_RESETHAND restored the default action, SA_NODEFER lets it through */
}

void dft_outfile_cleanup_on_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM};
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue; /* ignored, or someone's */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(sigs[i], &sa, NULL);
    }
}

/* ---- temporary file, rename ---- */

/* mkstemp beside path; *fd and the malloc'd name, or NULL with errno set. */
static char *make_tmp(const char *path, int *fd) {
    static const char suffix[] = ".tmp.XXXXXX";
    const size_t n = strlen(path);
    char *name = malloc(n + sizeof suffix);
    if (!name) return NULL;
    memcpy(name, path, n);
    memcpy(name + n, suffix, sizeof suffix);
    *fd = mkstemp(name);
    if (*fd < 0) {
        const int e = errno;
        free(name);
        errno = e;
        return NULL;
    }
    return name;
}

int dft_outfile_open(dft_outfile *o, const char *path, const char *what, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->slot = -1;
    if (!path || !path[0]) {
        dft_train_msg(err, errlen, "%s: no output path", what);
        return -1;
    }
    o->path = path;
    int fd = -1;
    o->tmp = make_tmp(path, &fd);
    if (!o->tmp) {
        dft_train_msg(err, errlen, "%s %s: cannot create a temporary file beside it: %s", what, path, strerror(errno));
        return -1;
    }
    o->slot = register_tmp(o->tmp);
    /* mkstemp makes 0600; the output gets the mode a plain fopen would give it */
    const mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0 || !(o->f = fdopen(fd, "wb"))) {
        const int e = errno;
        if (!o->f) close(fd);
        o->f = NULL;
        dft_outfile_discard(o);
        dft_train_msg(err, errlen, "%s %s: cannot set up the temporary file: %s", what, path, strerror(e));
        return -1;
    }
    return 0;
}

void dft_outfile_discard(dft_outfile *o) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (o->tmp) unlink(o->tmp);
    unregister_tmp(o->slot);
    o->slot = -1;
    free(o->tmp);
    o->tmp = NULL;
}

int dft_outfile_commit(dft_outfile *o, int write_errno, const char *what, char *err, size_t errlen) {
    int failed = write_errno;
    /* The data must be on disk before the rename makes it the target, or a crash could
       leave a complete-looking name over incomplete contents. */
    if (!failed && fflush(o->f) != 0) failed = errno ? errno : -1;
    if (!failed && fsync(fileno(o->f)) != 0) failed = errno ? errno : -1;
    if (fclose(o->f) != 0 && !failed) failed = errno ? errno : -1;
    o->f = NULL;
    if (failed) {
        dft_train_msg(err, errlen, "%s %s: writing %s failed: %s", what, o->path, o->tmp,
                      failed > 0 ? strerror(failed) : "I/O error");
        dft_outfile_discard(o);
        return -1;
    }
    if (rename(o->tmp, o->path) != 0) {
        dft_train_msg(err, errlen, "%s %s: cannot rename %s to it: %s", what, o->path, o->tmp, strerror(errno));
        dft_outfile_discard(o);
        return -1;
    }
    unregister_tmp(o->slot); /* after the rename: a signal in between finds no file under the name */
    o->slot = -1;
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

/* ---- up-front checks ---- */

/* The folder of path ("." for a bare name), malloc'd; NULL when out of memory. */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    char *d = strndup(path, (size_t)(slash - path));
    return d;
}

int dft_outfile_check(const char *path, const char *what, int replaced, char *err, size_t errlen) {
    if (!path || !path[0]) {
        dft_train_msg(err, errlen, "%s: the path is empty", what);
        return -1;
    }
    if (path[strlen(path) - 1] == '/') {
        dft_train_msg(err, errlen, "%s %s: names a directory, not a file", what, path);
        return -1;
    }
    struct stat st, lst;
    const int exists = stat(path, &st) == 0, link_exists = lstat(path, &lst) == 0;
    if (exists && S_ISDIR(st.st_mode)) {
        dft_train_msg(err, errlen, "%s %s: is a directory", what, path);
        return -1;
    }
    if (replaced && link_exists && !S_ISREG(lst.st_mode) && !S_ISLNK(lst.st_mode)) {
        dft_train_msg(err, errlen, "%s %s: exists and is not a regular file (it would be replaced)", what, path);
        return -1;
    }
    if (!replaced && exists && access(path, W_OK) == 0) return 0; /* opened for writing where it is */
    int fd = -1;
    char *tmp = make_tmp(path, &fd);
    if (!tmp) {
        const int e = errno;
        char *dir = folder_of(path);
        dft_train_msg(err, errlen, "%s %s: cannot create a file in %s: %s", what, path, dir ? dir : "its folder",
                      strerror(e));
        free(dir);
        return -1;
    }
    close(fd);
    unlink(tmp);
    free(tmp);
    return 0;
}

static int same_inode(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

int dft_same_file(const char *a, const char *b) {
    if (!a || !b) return 0;
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && same_inode(&sa, &sb)) return 1;
    if (lstat(a, &sa) == 0 && lstat(b, &sb) == 0 && same_inode(&sa, &sb)) return 1;
    /* not both there yet: the same name in the same folder */
    const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
    if (strcmp(na ? na + 1 : a, nb ? nb + 1 : b) != 0) return 0;
    char *da = folder_of(a), *db = folder_of(b);
    const int same = da && db && stat(da, &sa) == 0 && stat(db, &sb) == 0 && same_inode(&sa, &sb);
    free(da);
    free(db);
    return same;
}
