/* Training logs: a CSV file of per-step metrics and a PNG plot of them drawn by gnuplot
 * when it is installed (the trainer works without it and says so). */
#ifndef DFT_TRAIN_LOG_H
#define DFT_TRAIN_LOG_H

#include <stddef.h>

typedef struct dft_csv dft_csv;

/* Creates (truncates) path and writes the header line "col0,col1,...".
   Returns NULL with a message in err on failure. */
dft_csv *dft_csv_open(const char *path, const char *const *columns, int ncolumns, char *err, size_t errlen);
/* Appends one row; NaN values are written as empty fields (e.g. accuracy on steps
   without an evaluation). Flushed at once so a killed run keeps its log. */
int dft_csv_row(dft_csv *c, const double *values, int nvalues);
void dft_csv_close(dft_csv *c);

/* Draws png_path from a CSV written above: train loss (and eval loss if present)
   against step on the left axis, accuracy on the right. x_column, the loss columns and
   the accuracy column are named. Returns 0 when drawn; 1 when gnuplot is not installed
   (msg then says "gnuplot not found; install gnuplot-nox to get <png>"); -1 when gnuplot
   failed (msg says why). Never exits. */
int dft_plot_png(const char *csv_path, const char *png_path, const char *title, char *msg, size_t msglen);

#endif
