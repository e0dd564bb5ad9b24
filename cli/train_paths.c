/* `distflash train`'s files, checked before any work (train_paths.h). */
#include "train_paths.h"

#include <stdio.h>

#include "train/outfile.h"

int train_paths_check(const train_args *a, char *err, size_t errlen) {
    const dft_train_config *c = &a->cfg;
    /* outputs: written whole and renamed (1), or opened for writing where they are (0) */
    const struct {
        const char *flag, *path;
        int replaced;
    } out[] = {{"--save", c->save_path, 1}, {"--export", a->export_path, 1}, {"--log", c->csv_path, 0},
               {"--plot", c->plot_path, 0}};
    const struct {
        const char *flag, *path;
    } in[] = {{"--data", c->data_path}, {"--resume", c->resume_path}};
    const int nout = (int)(sizeof out / sizeof out[0]), nin = (int)(sizeof in / sizeof in[0]);
    for (int i = 0; i < nout; i++) {
        if (!out[i].path) continue;
        for (int j = 0; j < i; j++)
            if (out[j].path && dft_same_file(out[i].path, out[j].path)) {
                snprintf(err, errlen, "%s %s and %s %s are the same file; one would overwrite the other", out[j].flag,
                         out[j].path, out[i].flag, out[i].path);
                return -1;
            }
        for (int j = 0; j < nin; j++) {
            /* --save over the checkpoint it resumes from is how a run continues */
            if (!in[j].path || (out[i].path == c->save_path && in[j].path == c->resume_path)) continue;
            if (dft_same_file(out[i].path, in[j].path)) {
                snprintf(err, errlen, "%s %s is the file %s reads (%s); writing it would destroy it", out[i].flag,
                         out[i].path, in[j].flag, in[j].path);
                return -1;
            }
        }
        if (dft_outfile_check(out[i].path, out[i].flag, out[i].replaced, err, errlen)) return -1;
    }
    return 0;
}
