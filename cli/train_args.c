/* `distflash train`'s options (the usage text in cmd_train.c lists them). */
#include "train_args.h"
#include "train/model/preset.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fills err and returns 2, the exit status of a bad command line. */
static int bad(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 2;
}

static int parse_int(const char *flag, const char *v, int *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || *end || end == v || x < INT_MIN || x > INT_MAX)
        return bad(err, errlen, "%s needs an integer, got \"%s\"", flag, v ? v : "");
    *out = (int)x;
    return 0;
}

static int parse_float(const char *flag, const char *v, float *out, char *err, size_t errlen) {
    char *end;
    float x = v ? strtof(v, &end) : 0;
    if (!v || *end || end == v || !isfinite(x))
        return bad(err, errlen, "%s needs a finite number, got \"%s\"", flag, v ? v : "");
    *out = x;
    return 0;
}

int train_args_parse(int argc, char *const *argv, train_args *out, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    train_args r = {.cfg = dft_train_defaults(), .threads = -1, .progress = DFT_PROGRESS_AUTO};
    dft_train_config *c = &r.cfg;
    int threads_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            r.help = 1;
            *out = r;
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            r.quiet = 1;
            continue;
        }
        struct { const char *flag; int *p; } ints[] = {
            {"--layers", &c->model.n_layers}, {"--d-model", &c->model.d_model}, {"--heads", &c->model.n_heads},
            {"--kv-heads", &c->model.n_kv_heads}, {"--ffn", &c->model.ffn}, {"--context", &c->model.context},
            {"--steps", &c->steps}, {"--batch", &c->batch}, {"--warmup", &c->warmup}, {"--overlap", &c->overlap},
            {"--threads", &r.threads}, {"--eval-every", &c->eval_every}, {"--eval-seqs", &c->eval_seqs},
            {"--save-every", &c->save_every}, {"--stop-after", &c->stop_after},
            {"--deterministic", &c->deterministic}, {"--profile", &c->profile}};
        struct { const char *flag; float *p; } floats[] = {
            {"--rope-base", &c->model.rope_base}, {"--init-std", &c->model.init_std}, {"--lr", &c->lr},
            {"--lr-min", &c->lr_min}, {"--weight-decay", &c->weight_decay}, {"--clip", &c->clip},
            {"--answer-weight", &c->answer_weight}, {"--length-warmup", &c->length_warmup}};
        struct { const char *flag; const char **p; } strs[] = {
            {"--data", &c->data_path}, {"--log", &c->csv_path}, {"--plot", &c->plot_path},
            {"--save", &c->save_path}, {"--resume", &c->resume_path}};
        int found = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(a, ints[k].flag)) {
                if (parse_int(a, v, ints[k].p, err, errlen)) return 2;
                if (ints[k].p == &r.threads) threads_given = 1;
                found = 1;
            }
        for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++)
            if (!strcmp(a, floats[k].flag)) {
                if (parse_float(a, v, floats[k].p, err, errlen)) return 2;
                found = 1;
            }
        for (size_t k = 0; k < sizeof strs / sizeof strs[0]; k++)
            if (!strcmp(a, strs[k].flag)) {
                if (!v) return bad(err, errlen, "%s needs a value", a);
                *strs[k].p = v;
                found = 1;
            }
        if (!strcmp(a, "--seed")) {
            /* strtoull takes "-1" as 2^64 - 1 and saturates past 2^64: refuse both */
            char *end;
            errno = 0;
            if (!v || (c->seed = strtoull(v, &end, 10), *end || end == v || errno || strchr(v, '-')))
                return bad(err, errlen, "--seed needs a non-negative integer");
            found = 1;
        } else if (!strcmp(a, "--checkpoint")) {
            int p = dft_ckpt_policy_parse(v);
            if (p < 0) return bad(err, errlen, "--checkpoint takes none, layer or attn-output");
            c->policy = (dft_ckpt_policy)p;
            found = 1;
        } else if (!strcmp(a, "--device")) {
            int d = dft_device_parse(v);
            if (d < 0) return bad(err, errlen, "--device takes cpu or cuda");
            c->device = d;
            found = 1;
        } else if (!strcmp(a, "--preset")) {
            /* the model options at this point of the line: later ones override them */
            const dft_model_preset *p = dft_model_preset_find(v);
            if (!p) return bad(err, errlen, "--preset takes tiny, small, bench756m or 1b (see distflash train --help)");
            c->model = p->model;
            r.preset = p->name;
            found = 1;
        } else if (!strcmp(a, "--progress")) {
            if (v && !strcmp(v, "auto")) r.progress = DFT_PROGRESS_AUTO;
            else if (v && !strcmp(v, "lines")) r.progress = DFT_PROGRESS_LINES;
            else if (v && !strcmp(v, "live")) r.progress = DFT_PROGRESS_LIVE;
            else return bad(err, errlen, "--progress takes auto, lines or live");
            found = 1;
        } else if (!strcmp(a, "--export")) {
            if (!v) return bad(err, errlen, "--export needs a value");
            r.export_path = v;
            found = 1;
        } else if (!strcmp(a, "--export-dtype")) {
            if (v && !strcmp(v, "f32")) r.export_bf16 = 0;
            else if (v && !strcmp(v, "bf16")) r.export_bf16 = 1;
            else return bad(err, errlen, "--export-dtype takes f32 or bf16");
            found = 1;
        } else if (!strcmp(a, "--sp")) {
            if (v && !strcmp(v, "balanced")) c->schedule = DFA_SCHEDULE_BALANCED;
            else if (v && !strcmp(v, "ring")) c->schedule = DFA_SCHEDULE_RING;
            else return bad(err, errlen, "--sp takes balanced or ring");
            found = 1;
        }
        if (!found) return bad(err, errlen, "unknown option %s (see distflash train --help)", a);
        i++; /* every option but --quiet and --help takes a value */
    }
    if (threads_given && r.threads < 0) return bad(err, errlen, "--threads must be >= 0");
    if (c->plot_path && !c->csv_path) return bad(err, errlen, "--plot needs --log FILE.csv");
    if ((c->deterministic != 0 && c->deterministic != 1) || (c->profile != 0 && c->profile != 1))
        return bad(err, errlen, "--deterministic and --profile take 0 or 1");
    if (c->device != DFT_DEVICE_CUDA && (c->deterministic || c->profile))
        return bad(err, errlen, "--deterministic and --profile apply to --device cuda (the CPU is always deterministic)");
    *out = r;
    return 0;
}
