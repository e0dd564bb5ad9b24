/* `distflash export CKPT OUT.safetensors [--dtype f32|bf16]`: a checkpoint's weights as a
 * safetensors file with Hugging Face LLaMA names (train/safetensors.h). It reads only the
 * trainer's files: the model's shape comes from the checkpoint's configuration fields,
 * validated as a resume validates them (dft_train_config_of_fields). The output path is
 * checked before the checkpoint is read, and may not name the checkpoint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "train/checkpoint.h"
#include "train/outfile.h"
#include "train/safetensors.h"
#include "train/text.h"
#include "train/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: distflash export CHECKPOINT OUT.safetensors [--dtype f32|bf16]\n\n"
               "Writes the weights of a `distflash train --save` checkpoint as safetensors, named and shaped like\n"
               "Hugging Face's LLaMA (torch Linear weights [out, in]); the metadata holds the model's shape, the\n"
               "RoPE convention and the checkpoint's configuration. Load it with safetensors.torch.load_file.\n\n"
               "The checkpoint must be a regular file written by distflash train (its fields are validated as\n"
               "--resume does); OUT's folder must exist and be writable, and OUT may not name the checkpoint\n"
               "(both are checked before anything is read). OUT is written under a temporary name beside it and\n"
               "renamed; Ctrl-C removes the temporary file.\n");
}

int cmd_export(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        if (!strcmp(argv[i], "--dtype")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (!strcmp(v, "f32")) bf16 = 0;
            else if (!strcmp(v, "bf16")) bf16 = 1;
            else return fprintf(stderr, "distflash export: --dtype takes f32 or bf16\n"), 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "distflash export: unknown option %s\n", argv[i]);
            return usage(stderr), 2;
        } else if (!in) in = argv[i];
        else if (!out) out = argv[i];
        else return fprintf(stderr, "distflash export: one checkpoint and one output file\n"), 2;
    }
    if (!in || !out) return usage(stderr), 2;
    /* before reading anything: the output can be written, and it is not the input */
    char err[1024] = "";
    if (dft_same_file(in, out)) {
        fprintf(stderr, "distflash export: %s and %s are the same file; the export would destroy the checkpoint\n", in,
                out);
        return 2;
    }
    if (dft_outfile_check(out, "output", 1, err, sizeof err)) {
        fprintf(stderr, "distflash export: %s\n", err);
        return 2;
    }
    dft_outfile_cleanup_on_signals();

    enum { MAXF = 64 };
    dft_ckpt_named f[MAXF];
    int nf = 0;
    int64_t step = 0;
    size_t nfloats = 0;
    float *params = NULL;
    if (dft_ckpt_read_any(in, f, MAXF, &nf, &step, &nfloats, &params, err, sizeof err)) {
        fprintf(stderr, "distflash export: %s\n", err);
        return 1;
    }
    int rc = 1;
    /* validated as a resume would: a checkpoint of distflash train, its values what it writes */
    dft_train_config tc;
    if (dft_train_config_of_fields(f, nf, step, &tc, err, sizeof err)) {
        fprintf(stderr, "distflash export: %s: not a valid distflash train checkpoint: %s\n", in, err);
        goto done;
    }
    const dft_model_config c = tc.model;
    size_t total = dft_param_layout_of(&c).total;
    if (total != nfloats) {
        fprintf(stderr, "distflash export: %s holds %zu floats per section but its model has %zu parameters\n", in,
                nfloats, total);
        goto done;
    }
    /* the metadata: the step, the source and every configuration field, as "distflash.<name>" */
    dft_export_meta meta[MAXF + 2];
    char keys[MAXF][272], values[MAXF][40], stepv[32];
    int nm = 0;
    snprintf(stepv, sizeof stepv, "%lld", (long long)step);
    meta[nm++] = (dft_export_meta){"distflash.step", stepv};
    meta[nm++] = (dft_export_meta){"distflash.checkpoint", in};
    for (int i = 0; i < nf; i++) {
        snprintf(keys[i], sizeof keys[i], "distflash.%.255s", f[i].name);
        dft_format_shortest(values[i], sizeof values[i], f[i].value);
        meta[nm++] = (dft_export_meta){keys[i], values[i]};
    }
    if (dft_export_safetensors(out, &c, params, bf16, meta, nm, err, sizeof err)) {
        fprintf(stderr, "distflash export: %s\n", err);
        goto done;
    }
    printf("distflash export: %s (step %lld, %zu parameters) -> %s (%s, %d tensors)\n", in, (long long)step, total, out,
           bf16 ? "bf16" : "f32", dft_export_tensor_count(&c));
    rc = 0;
done:
    free(params);
    return rc;
}
