/* `distflash export CKPT OUT.safetensors [--dtype f32|bf16]`: a checkpoint's weights as a
 * safetensors file with Hugging Face LLaMA names (train/safetensors.h). It reads only the
 * trainer's files: the model's shape comes from the checkpoint's configuration fields. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/text.h"

static void usage(FILE *f) {
    fprintf(f, "usage: distflash export CHECKPOINT OUT.safetensors [--dtype f32|bf16]\n\n"
               "Writes the weights of a `distflash train --save` checkpoint as safetensors, named and shaped like\n"
               "Hugging Face's LLaMA (torch Linear weights [out, in]); the metadata holds the model's shape, the\n"
               "RoPE convention and the checkpoint's configuration. Load it with safetensors.torch.load_file.\n");
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

    enum { MAXF = 64 };
    dft_ckpt_named f[MAXF];
    int nf = 0;
    int64_t step = 0;
    size_t nfloats = 0;
    float *params = NULL;
    char err[1024] = "";
    if (dft_ckpt_read_any(in, f, MAXF, &nf, &step, &nfloats, &params, err, sizeof err)) {
        fprintf(stderr, "distflash export: %s\n", err);
        return 1;
    }
    if (nf > MAXF) nf = MAXF;
    dft_model_config c = {0};
    struct {
        const char *name;
        int *i;
        float *x;
        int seen;
    } want[] = {{"layers", &c.n_layers, NULL, 0}, {"d_model", &c.d_model, NULL, 0}, {"heads", &c.n_heads, NULL, 0},
                {"kv_heads", &c.n_kv_heads, NULL, 0}, {"ffn", &c.ffn, NULL, 0}, {"context", &c.context, NULL, 0},
                {"rope_base", NULL, &c.rope_base, 0}, {"init_std", NULL, &c.init_std, 0}};
    for (int i = 0; i < nf; i++)
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (!strcmp(f[i].name, want[k].name)) {
                double v = f[i].value;
                if (want[k].i) *want[k].i = (v >= -2147483648.0 && v <= 2147483647.0) ? (int)v : 0;
                else *want[k].x = (float)v;
                want[k].seen = 1;
            }
    int rc = 1;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        if (!want[k].seen) {
            fprintf(stderr, "distflash export: %s has no '%s' field: not a distflash train checkpoint\n", in,
                    want[k].name);
            goto done;
        }
    char why[256];
    if (dft_model_config_check(&c, 1, why, sizeof why)) {
        fprintf(stderr, "distflash export: %s: the model in it is not valid: %s\n", in, why);
        goto done;
    }
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
