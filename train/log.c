/* The training log: a CSV file flushed row by row, and a PNG plot drawn by piping a
 * script into gnuplot. The plot reads the CSV back first to learn which of the expected
 * columns exist and hold data, so an early plot (no evaluation yet) still draws. */
#include "train/log.h"
#include "train/text.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The columns the plot draws (the trainer's CSV: step,lr,loss,eval_loss,eval_acc,...). */
#define PLOT_X "step"
#define PLOT_LOSS "loss"
#define PLOT_EVAL_LOSS "eval_loss"
#define PLOT_ACC "eval_acc"

/* ---- CSV ---- */

struct dft_csv {
    FILE *f;
    int ncolumns;
};

dft_csv *dft_csv_open(const char *path, const char *const *columns, int ncolumns, char *err, size_t errlen) {
    if (!path || ncolumns <= 0 || !columns) {
        dft_train_msg(err, errlen, "csv %s: no columns", path ? path : "(null)");
        return NULL;
    }
    for (int i = 0; i < ncolumns; i++) {
        if (!columns[i] || !*columns[i] || strpbrk(columns[i], ",\n\r\"")) {
            dft_train_msg(err, errlen, "csv %s: column %d has an empty name or one with a comma, quote or newline",
                           path, i);
            return NULL;
        }
    }
    dft_csv *c = malloc(sizeof *c);
    if (!c) {
        dft_train_msg(err, errlen, "csv %s: out of memory", path);
        return NULL;
    }
    c->ncolumns = ncolumns;
    c->f = fopen(path, "w");
    if (!c->f) {
        dft_train_msg(err, errlen, "csv %s: cannot create: %s", path, strerror(errno));
        free(c);
        return NULL;
    }
    int bad = 0;
    for (int i = 0; i < ncolumns && !bad; i++) bad = fprintf(c->f, "%s%s", i ? "," : "", columns[i]) < 0;
    if (!bad) bad = fputc('\n', c->f) == EOF;
    if (!bad) bad = fflush(c->f) != 0;
    if (bad) {
        dft_train_msg(err, errlen, "csv %s: write failed: %s", path, strerror(errno));
        fclose(c->f);
        free(c);
        return NULL;
    }
    return c;
}

int dft_csv_row(dft_csv *c, const double *values, int nvalues) {
    if (!c || !values || nvalues != c->ncolumns) return -1;
    for (int i = 0; i < nvalues; i++) {
        char field[40] = "";
        if (!isnan(values[i])) dft_format_shortest(field, sizeof field, values[i]);
        if (fprintf(c->f, "%s%s", i ? "," : "", field) < 0) return -1;
    }
    if (fputc('\n', c->f) == EOF) return -1;
    return fflush(c->f) == 0 ? 0 : -1;
}

void dft_csv_close(dft_csv *c) {
    if (!c) return;
    fclose(c->f); /* every row was flushed already; nothing is left to lose */
    free(c);
}

/* ---- plot ---- */

/* Which of the plotted columns the CSV has (1-based index, 0: absent) and whether any
   row gives them a value. */
typedef struct {
    int x, loss, eval_loss, acc;
    int loss_rows, eval_loss_rows, acc_rows;
} csv_shape;

/* Field `col` (0-based) of line, or NULL; *len gets its length. */
static const char *field_at(const char *line, int col, size_t *len) {
    const char *p = line;
    for (int i = 0; i < col; i++) {
        p = strchr(p, ',');
        if (!p) return NULL;
        p++;
    }
    *len = strcspn(p, ",\r\n");
    return p;
}

static int read_shape(const char *csv_path, csv_shape *sh, char *msg, size_t msglen) {
    memset(sh, 0, sizeof *sh);
    FILE *f = fopen(csv_path, "r");
    if (!f) {
        dft_train_msg(msg, msglen, "plot: cannot open %s: %s", csv_path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) < 0) {
        dft_train_msg(msg, msglen, "plot: %s is empty", csv_path);
        free(line);
        fclose(f);
        return -1;
    }
    int *slots[] = {&sh->x, &sh->loss, &sh->eval_loss, &sh->acc};
    const char *names[] = {PLOT_X, PLOT_LOSS, PLOT_EVAL_LOSS, PLOT_ACC};
    for (int col = 0;; col++) {
        size_t len;
        const char *name = field_at(line, col, &len);
        if (!name) break;
        for (int k = 0; k < 4; k++)
            if (!*slots[k] && len == strlen(names[k]) && memcmp(name, names[k], len) == 0) *slots[k] = col + 1;
    }
    int *counts[] = {NULL, &sh->loss_rows, &sh->eval_loss_rows, &sh->acc_rows};
    while (getline(&line, &cap, f) >= 0) {
        for (int k = 1; k < 4; k++) {
            size_t len;
            if (*slots[k] && field_at(line, *slots[k] - 1, &len) && len > 0) (*counts[k])++;
        }
    }
    int bad = ferror(f);
    free(line);
    fclose(f);
    if (bad) {
        dft_train_msg(msg, msglen, "plot: reading %s failed", csv_path);
        return -1;
    }
    if (!sh->x || !sh->loss) {
        dft_train_msg(msg, msglen, "plot: %s has no '%s' or no '%s' column", csv_path, PLOT_X, PLOT_LOSS);
        return -1;
    }
    if (!sh->loss_rows) {
        dft_train_msg(msg, msglen, "plot: %s has no rows with a loss yet", csv_path);
        return -1;
    }
    return 0;
}

/* Writes s as a gnuplot single-quoted string (a quote inside is doubled). */
static int put_gp_string(FILE *f, const char *s) {
    if (fputc('\'', f) == EOF) return -1;
    for (; *s; s++) {
        if (*s == '\n' || *s == '\r') continue; /* would end the command */
        if (*s == '\'' && fputc('\'', f) == EOF) return -1;
        if (fputc(*s, f) == EOF) return -1;
    }
    return fputc('\'', f) == EOF ? -1 : 0;
}

/* The best PNG terminal this gnuplot has: "pngcairo", "png" or NULL. */
static const char *png_terminal(void) {
    FILE *p = popen("gnuplot -e 'set terminal' 2>&1", "r");
    if (!p) return NULL;
    int cairo = 0, png = 0;
    char line[256];
    while (fgets(line, sizeof line, p)) {
        char name[32];
        if (sscanf(line, " %31s", name) != 1) continue;
        if (strcmp(name, "pngcairo") == 0) cairo = 1;
        if (strcmp(name, "png") == 0) png = 1;
    }
    pclose(p);
    return cairo ? "pngcairo" : png ? "png" : NULL;
}

static int write_script(FILE *g, const char *terminal, const char *csv_path, const char *png_path,
                        const char *title, const csv_shape *sh) {
    int bad = 0;
    bad |= fprintf(g, "set terminal %s size 1000,600\nset output ", terminal) < 0;
    bad |= put_gp_string(g, png_path);
    bad |= fprintf(g, "\nset datafile separator ','\nset datafile missing ''\n") < 0;
    if (title) {
        bad |= fprintf(g, "set title ") < 0;
        bad |= put_gp_string(g, title);
        bad |= fprintf(g, " noenhanced\n") < 0;
    }
    bad |= fprintf(g, "set xlabel '%s'\nset ylabel 'loss'\nset ytics nomirror\nset grid\n"
                      "set key outside top center horizontal noenhanced\n",
                   PLOT_X) < 0;
    if (sh->acc_rows)
        bad |= fprintf(g, "set y2label 'accuracy'\nset y2range [0:1]\nset y2tics 0,0.1,1\n") < 0;
    /* Columns by number (not by name, not as expressions): gnuplot then skips empty fields
       and still joins the points on either side, so sparse evaluations draw as a line.
       "title columnheader" names each line after its column and consumes the header row. */
    bad |= fprintf(g, "plot ") < 0;
    bad |= put_gp_string(g, csv_path);
    bad |= fprintf(g, " using %d:%d with lines lw 1 title columnheader axes x1y1", sh->x, sh->loss) < 0;
    if (sh->eval_loss_rows)
        bad |= fprintf(g, ", '' using %d:%d with linespoints pt 7 ps 0.6 lw 2 title columnheader axes x1y1", sh->x,
                       sh->eval_loss) < 0;
    if (sh->acc_rows)
        bad |= fprintf(g, ", '' using %d:%d with linespoints pt 5 ps 0.6 lw 2 title columnheader axes x1y2", sh->x,
                       sh->acc) < 0;
    bad |= fprintf(g, "\nset output\n") < 0;
    return bad ? -1 : 0;
}

/* gnuplot's complaint for the message: its error lines joined by "; ", without the echo of
   the failing command ("gnuplot> ...") and the caret line under it. */
static void gnuplot_error(const char *path, char *out, size_t n) {
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    size_t used = 0;
    while (fgets(line, sizeof line, f) && used + 1 < n) {
        line[strcspn(line, "\r\n")] = '\0';
        const char *text = line + strspn(line, " \t");
        if (text[strspn(text, " \t^")] == '\0' || strncmp(text, "gnuplot>", 8) == 0) continue;
        /* collapse the alignment spaces gnuplot puts after "line N:" */
        char clean[512];
        size_t k = 0;
        for (const char *c = text; *c && k + 1 < sizeof clean; c++)
            if (!(*c == ' ' && (c[1] == ' ' || c[1] == '\0'))) clean[k++] = *c;
        clean[k] = '\0';
        int w = snprintf(out + used, n - used, "%s%s", used ? "; " : "", clean);
        if (w < 0) break;
        used += (size_t)w < n - used ? (size_t)w : n - used - 1;
    }
    fclose(f);
}

int dft_plot_png(const char *csv_path, const char *png_path, const char *title, char *msg, size_t msglen) {
    if (!csv_path || !png_path) {
        dft_train_msg(msg, msglen, "plot: no CSV or PNG path");
        return -1;
    }
    int found = system("command -v gnuplot >/dev/null 2>&1");
    if (found == -1) {
        dft_train_msg(msg, msglen, "plot: cannot run a shell to look for gnuplot: %s", strerror(errno));
        return -1;
    }
    if (!WIFEXITED(found) || WEXITSTATUS(found) != 0) {
        dft_train_msg(msg, msglen, "gnuplot not found; install gnuplot-nox to get %s", png_path);
        return 1;
    }
    csv_shape sh;
    if (read_shape(csv_path, &sh, msg, msglen)) return -1;
    const char *terminal = png_terminal();
    if (!terminal) {
        dft_train_msg(msg, msglen, "plot: this gnuplot has neither the pngcairo nor the png terminal");
        return -1;
    }

    /* gnuplot's complaints go to a file, to be quoted in msg rather than printed; its
       standard output goes nowhere, since after a failed "set output" gnuplot writes the
       image there, which would land in the trainer's output. */
    char errpath[] = "/tmp/dfa-gnuplot-XXXXXX";
    int fd = mkstemp(errpath);
    if (fd < 0) {
        dft_train_msg(msg, msglen, "plot: cannot create a temporary file in /tmp: %s", strerror(errno));
        return -1;
    }
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "gnuplot >/dev/null 2>'%s'", errpath);

    int rc = 0;
    FILE *g = popen(cmd, "w");
    if (!g) {
        dft_train_msg(msg, msglen, "plot: cannot start gnuplot: %s", strerror(errno));
        remove(errpath);
        return -1;
    }
    /* If gnuplot dies before reading its script, writing the script raises SIGPIPE, whose
       default action would kill the trainer. Block it in this thread while writing (after
       the fork, so gnuplot does not inherit the mask) and discard one that arrives, leaving
       the process's signal handling as it was. */
    sigset_t pipe_set, old_set, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
    int script_bad = write_script(g, terminal, csv_path, png_path, title, &sh);
    int status = pclose(g);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || script_bad) {
        char why[512];
        gnuplot_error(errpath, why, sizeof why);
        dft_train_msg(msg, msglen, "plot: gnuplot failed drawing %s: %s", png_path,
                       why[0]       ? why
                       : script_bad ? "could not write the script to it"
                                    : "no message");
        rc = -1;
    }

    if (!was_pending) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE) == 1) {
            struct timespec zero = {0, 0};
            sigtimedwait(&pipe_set, NULL, &zero);
        }
    }
    pthread_sigmask(SIG_SETMASK, &old_set, NULL);
    remove(errpath);
    if (rc) return rc;

    struct stat st;
    if (stat(png_path, &st) != 0 || st.st_size == 0) {
        dft_train_msg(msg, msglen, "plot: gnuplot ran but %s was not written", png_path);
        return -1;
    }
    dft_train_msg(msg, msglen, "plot: wrote %s", png_path);
    return 0;
}
