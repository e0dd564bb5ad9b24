/* Writes the seed corpus of fuzz_ckpt (fuzz/corpus/ckpt/) with the trainer's own writer:
 * checkpoints of the tiny configuration in ckpt_config.h, one that loads and one for each
 * kind of refusal behind the checksum. Run it again when the file format changes:
 *   build-fuzz/fuzz/make_ckpt_seeds fuzz/corpus/ckpt */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_config.h"

static float sec[FUZZ_CKPT_SECTIONS][FUZZ_CKPT_FLOATS];

static int save(const char *dir, const char *name, const dft_ckpt_field *f, int nf, int64_t step, int nsections,
                size_t nfloats) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    float *s[FUZZ_CKPT_SECTIONS] = {sec[0], sec[1], sec[2]};
    if (dft_ckpt_save(path, f, nf, step, s, nsections, nfloats, err, sizeof err)) {
        fprintf(stderr, "make_ckpt_seeds: %s\n", err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_ckpt_seeds DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    /* values of every kind a float section can hold */
    for (int s = 0; s < FUZZ_CKPT_SECTIONS; s++)
        for (int i = 0; i < FUZZ_CKPT_FLOATS; i++) sec[s][i] = (float)((i - 7) * (s + 1)) * 0.03125f;
    sec[0][0] = -0.0f, sec[0][1] = 1e-40f, sec[0][2] = INFINITY, sec[0][3] = NAN, sec[2][15] = 3.4e38f;

    dft_ckpt_field f[FUZZ_CKPT_NFIELDS + 1];
    memcpy(f, fuzz_ckpt_fields, sizeof fuzz_ckpt_fields);
    const int nf = FUZZ_CKPT_NFIELDS;
    int bad = 0;
    bad |= save(dir, "valid.ckpt", f, nf, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    bad |= save(dir, "valid_last_step.ckpt", f, nf, 4, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    bad |= save(dir, "negative_step.ckpt", f, nf, -1, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    bad |= save(dir, "two_sections.ckpt", f, nf, 2, 2, FUZZ_CKPT_FLOATS);
    bad |= save(dir, "fewer_floats.ckpt", f, nf, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS / 2);
    bad |= save(dir, "no_sections.ckpt", f, nf, 2, 0, 0);
    bad |= save(dir, "fewer_fields.ckpt", f, nf - 1, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    f[nf] = (dft_ckpt_field){"extra", 7};
    bad |= save(dir, "extra_field.ckpt", f, nf + 1, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    f[1].value = 16;
    bad |= save(dir, "other_d_model.ckpt", f, nf, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    f[1] = (dft_ckpt_field){"d_modle", 8};
    bad |= save(dir, "renamed_field.ckpt", f, nf, 2, FUZZ_CKPT_SECTIONS, FUZZ_CKPT_FLOATS);
    return bad;
}
