#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "train/checkpoint.h"
#include "train/clock.h"
#include "train/data.h"
#include "train/log.h"
#include "train/optim.h"

dft_train_config dft_train_defaults(void) {
    /* The demo (scripts/demo): passkey retrieval at 2048 positions on 2 ranks in about 7 minutes
       on 2 cores: the values are chosen for that task on such a machine. */
    dft_train_config c;
    memset(&c, 0, sizeof c);
    c.model = (dft_model_config){.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 4, .ffn = 256,
                                  .context = 2048, .rope_base = 10000.0f, .init_std = 0.02f};
    c.batch = 2, c.steps = 5400, c.length_warmup = 0.9f, c.lr = 3e-3f, c.lr_min = 3e-4f, c.warmup = 30;
    c.beta1 = 0.9f, c.beta2 = 0.95f, c.weight_decay = 0.1f, c.clip = 1.0f;
    c.seed = 1234, c.policy = DFT_CKPT_ATTN_OUTPUT, c.schedule = DFA_SCHEDULE_BALANCED, c.overlap = 1;
    c.answer_weight = 1000.0f, c.eval_every = 1800, c.eval_seqs = 128, c.progress = 1;
    return c;
}

enum { PROGRESS_SECONDS = 30 }; /* the longest silence of the plain progress lines */

static int check_config(const dft_train_config *c, int ranks, char *err, size_t errlen) {
#define BAD(...) return (snprintf(err, errlen, __VA_ARGS__), -1)
    if (dft_model_config_check(&c->model, ranks, err, errlen)) return -1;
    if (c->batch < 1) BAD("batch = %d; it must be >= 1", c->batch);
    if (c->steps < 1) BAD("steps = %d; it must be >= 1", c->steps);
    if (c->stop_after < 0 || c->stop_after > c->steps) BAD("stop-after = %d; it must be in 0..steps (%d)", c->stop_after, c->steps);
    if (!(c->lr > 0) || !isfinite(c->lr)) BAD("lr = %g; it must be finite and > 0", c->lr);
    if (!(c->lr_min >= 0) || c->lr_min > c->lr) BAD("lr-min = %g; it must be in [0, lr]", c->lr_min);
    if (c->warmup < 0 || c->warmup > c->steps) BAD("warmup = %d; it must be in 0..steps (%d)", c->warmup, c->steps);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) BAD("Adam betas must be in [0, 1)");
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay)) BAD("weight-decay = %g; it must be finite and >= 0", c->weight_decay);
    if (!(c->clip >= 0) || !isfinite(c->clip)) BAD("clip = %g; it must be finite and >= 0 (0: no clipping)", c->clip);
    if (c->policy < DFT_CKPT_NONE || c->policy > DFT_CKPT_ATTN_OUTPUT) BAD("unknown checkpoint policy %d", (int)c->policy);
    if (c->eval_every < 0 || c->eval_seqs < 0) BAD("eval-every and eval-seqs must be >= 0");
    if (c->eval_seqs > DFT_EVAL_SEQS_MAX) BAD("eval-seqs = %d; it must be at most %d", c->eval_seqs, DFT_EVAL_SEQS_MAX);
    if (c->save_every < 0) BAD("save-every = %d; it must be >= 0", c->save_every);
    if (!(c->length_warmup >= 0 && c->length_warmup < 1))
        BAD("length-warmup = %g; it must be a fraction of the steps in [0, 1)", c->length_warmup);
    if (c->save_every && !c->save_path) BAD("save-every needs a checkpoint path (--save FILE)");
    if ((long)c->batch * (c->model.context / ranks) > (1l << 30)) BAD("batch x context is too large");
    if (c->device != DFT_DEVICE_CPU && c->device != DFT_DEVICE_CUDA) BAD("unknown device %d", c->device);
    return 0;
#undef BAD
}

/* Everything one run holds. */
typedef struct {
    const dft_train_config *cfg;
    dft_group *g;
    dft_data data;
    dft_attention attn;
    dft_acts *acts;          /* for `batch` sequences of `span` positions */
    dft_device *dev;         /* --device cuda: the model, its state and activations on this rank's GPU */
    int span;                 /* positions per sequence now (the context, or less in the length warm-up) */
    int rows;                 /* local positions per sequence: span / ranks */
    size_t total;             /* parameters */
    float *params, *grads, *m, *v;
    uint8_t *seq, *tokens, *targets, *argmax;
    float *seq_weight, *weights;
    int *answer_pos;          /* per sequence of the batch */
    int64_t *pos;
    char *err;
    size_t errlen;
} run;

/* Positions per sequence at a training step. With a length warm-up the first length_warmup
   (a fraction) of the steps train on shorter sequences, doubling from DFT_PASSKEY_MIN_CONTEXT (short sequences are
   cheap, and a tiny model finds the key among 256 positions long before it can among
   thousands); after that, the whole context. Each shorter stage gets the same number of tokens,
   so a stage half as long runs twice the steps: 4/7, 2/7, 1/7 of the warm-up for 256, 512, 1024
   below 2048. Spans are rounded up to a multiple of the ranks. */
static int span_at(const dft_train_config *c, int ranks, int step) {
    int full = c->model.context;
    int warm = (int)((double)c->length_warmup * c->steps + 0.5); /* 0.9f * 5400 is 4859.9998 */
    if (warm <= 0 || step >= warm || full <= DFT_PASSKEY_MIN_CONTEXT) return full;
    int stages = 0;
    while ((DFT_PASSKEY_MIN_CONTEXT << stages) < full && stages < 20) stages++;
    /* stage i (span 256 << i) holds 2^(stages-1-i) of the 2^stages - 1 parts */
    long parts = (1l << stages) - 1, at = (long)step * parts / warm, end = 0;
    int stage = 0;
    while (stage < stages - 1 && at >= (end += 1l << (stages - 1 - stage))) stage++;
    long span = (long)DFT_PASSKEY_MIN_CONTEXT << stage;
    span = (span + ranks - 1) / ranks * ranks;
    return span < full ? (int)span : full;
}

/* Makes the activation buffers fit sequences of `span` positions (a no-op if they do). */
static int use_span(run *r, int span) {
    if (r->span == span && (r->acts || dft_device_acts_bytes(r->dev))) return 0;
    dft_acts_free(r->acts);
    r->acts = NULL;
    r->span = span, r->rows = span / r->g->size;
    for (int i = 0; i < r->rows; i++) r->pos[i] = dfa_dist_position(r->cfg->schedule, r->g->rank, r->g->size, r->rows, i);
    if (r->dev) return dft_device_set_span(r->dev, r->cfg->policy, r->cfg->batch, r->rows, r->pos, r->err, r->errlen);
    r->acts = dft_acts_create(&r->cfg->model, r->cfg->policy, r->cfg->batch, r->rows, r->pos, r->err, r->errlen);
    return r->acts ? 0 : -1;
}

/* The forward on the run's device. */
static double forward(run *r, float grad_scale, uint8_t *argmax) {
    const dft_train_config *c = r->cfg;
    if (r->dev)
        return dft_device_forward(r->dev, &r->attn, r->tokens, r->targets, r->weights, grad_scale, argmax, r->err,
                                  r->errlen);
    return dft_model_forward(&c->model, r->params, r->acts, &r->attn, r->tokens, r->targets, r->weights, grad_scale,
                             argmax, r->err, r->errlen);
}

/* This rank's rows of `batch` sequences of a split, at the current span; returns the global
   sum of weights (every rank generates whole sequences, so it knows them all). */
static double fill_batch(run *r, dft_split split, uint64_t first_index) {
    const dft_train_config *c = r->cfg;
    dft_data data = r->data;
    data.context = r->span;
    double wsum = 0;
    for (int b = 0; b < c->batch; b++) {
        dft_data_sample(&data, split, first_index + (uint64_t)b, r->seq, r->seq_weight, &r->answer_pos[b]);
        for (int t = 0; t < r->span; t++) wsum += r->seq_weight[t];
        for (int i = 0; i < r->rows; i++) {
            int64_t p = r->pos[i];
            size_t at = (size_t)b * r->rows + i;
            r->tokens[at] = r->seq[p];
            r->targets[at] = r->seq[p + 1];
            r->weights[at] = r->seq_weight[p];
        }
    }
    return wsum;
}

/* Held-out evaluation: weighted loss, and the exact-match accuracy of the passkey (all its
   digits predicted) and its per-digit accuracy, or, for a byte file, the next-byte accuracy
   (digit_out NaN). */
static int evaluate(run *r, double *loss_out, double *acc_out, double *digit_out) {
    const dft_train_config *c = r->cfg;
    const int batches = (int)(((int64_t)c->eval_seqs + c->batch - 1) / c->batch); /* eval_seqs is bounded */
    if (dft_group_any(r->g, use_span(r, c->model.context))) return -1; /* evaluation is always at the whole context */
    double stats[4] = {0, 0, 0, 0}; /* weighted nll, weight, correct (sequences or bytes), wrong digits */
    double *wrong = calloc((size_t)c->batch, sizeof(double));
    if (!wrong) return (snprintf(r->err, r->errlen, "out of memory"), -1);
    for (int e = 0; e < batches; e++) {
        double wsum = fill_batch(r, DFT_SPLIT_EVAL, (uint64_t)e * c->batch);
        double nll = forward(r, 0.0f, r->argmax);
        if (isnan(nll)) return free(wrong), -1;
        stats[0] += nll, stats[1] += wsum;
        for (int b = 0; b < c->batch; b++) {
            wrong[b] = 0;
            for (int i = 0; i < r->rows; i++) {
                size_t at = (size_t)b * r->rows + i;
                int64_t p = r->pos[i];
                int in_answer = r->answer_pos[b] >= 0 && p >= r->answer_pos[b] && p < r->answer_pos[b] + DFT_PASSKEY_DIGITS;
                int right = r->argmax[at] == r->targets[at];
                if (r->answer_pos[b] < 0) stats[2] += right; /* byte accuracy, summed below */
                else if (in_answer && !right) wrong[b] += 1;
            }
        }
        if (dft_group_sum_f64(r->g, wrong, c->batch, r->err, r->errlen)) return free(wrong), -1;
        for (int b = 0; b < c->batch; b++)
            if (r->answer_pos[b] >= 0 && r->g->rank == 0) /* summed over the ranks already: count once */
                stats[2] += wrong[b] == 0, stats[3] += wrong[b];
    }
    free(wrong);
    double sums[3] = {stats[0], stats[2], stats[3]};
    if (dft_group_sum_f64(r->g, sums, 3, r->err, r->errlen)) return -1;
    int passkey = r->data.kind == DFT_DATA_PASSKEY;
    double denom = passkey ? (double)batches * c->batch : (double)batches * c->batch * c->model.context;
    *loss_out = sums[0] / stats[1];
    *acc_out = sums[1] / denom;
    *digit_out = passkey ? 1.0 - sums[2] / (denom * DFT_PASSKEY_DIGITS) : NAN;
    return 0;
}

static int fields_of(const dft_train_config *c, const dft_data *data, dft_ckpt_field f[32]) {
    int n = 0;
#define FIELD(name, value) f[n++] = (dft_ckpt_field){name, (double)(value)}
    FIELD("layers", c->model.n_layers);
    FIELD("d_model", c->model.d_model);
    FIELD("heads", c->model.n_heads);
    FIELD("kv_heads", c->model.n_kv_heads);
    FIELD("ffn", c->model.ffn);
    FIELD("context", c->model.context);
    FIELD("rope_base", c->model.rope_base);
    FIELD("init_std", c->model.init_std);
    FIELD("batch", c->batch);
    FIELD("steps", c->steps);
    FIELD("lr", c->lr);
    FIELD("lr_min", c->lr_min);
    FIELD("warmup", c->warmup);
    FIELD("beta1", c->beta1);
    FIELD("beta2", c->beta2);
    FIELD("weight_decay", c->weight_decay);
    FIELD("clip", c->clip);
    FIELD("seed", (double)(c->seed & ((1ull << 53) - 1)));
    FIELD("data", data->kind);
    FIELD("answer_weight", c->answer_weight);
    FIELD("length_warmup", c->length_warmup);
#undef FIELD
    return n;
}

int dft_train_config_of_fields(const dft_ckpt_named *f, int nf, int64_t step, dft_train_config *out, char *err,
                               size_t errlen) {
#define BAD(...) return (snprintf(err, errlen, __VA_ARGS__), -1)
    dft_train_config c = dft_train_defaults();
    int data_kind = 0;
    double seed = 0;
    /* Every field of fields_of, in its order, where it goes and what it holds. */
    const struct {
        const char *name;
        int *i;
        float *x;
        double *d;
    } to[] = {{"layers", &c.model.n_layers, NULL, NULL}, {"d_model", &c.model.d_model, NULL, NULL},
              {"heads", &c.model.n_heads, NULL, NULL}, {"kv_heads", &c.model.n_kv_heads, NULL, NULL},
              {"ffn", &c.model.ffn, NULL, NULL}, {"context", &c.model.context, NULL, NULL},
              {"rope_base", NULL, &c.model.rope_base, NULL}, {"init_std", NULL, &c.model.init_std, NULL},
              {"batch", &c.batch, NULL, NULL}, {"steps", &c.steps, NULL, NULL}, {"lr", NULL, &c.lr, NULL},
              {"lr_min", NULL, &c.lr_min, NULL}, {"warmup", &c.warmup, NULL, NULL}, {"beta1", NULL, &c.beta1, NULL},
              {"beta2", NULL, &c.beta2, NULL}, {"weight_decay", NULL, &c.weight_decay, NULL},
              {"clip", NULL, &c.clip, NULL}, {"seed", NULL, NULL, &seed}, {"data", &data_kind, NULL, NULL},
              {"answer_weight", NULL, &c.answer_weight, NULL}, {"length_warmup", NULL, &c.length_warmup, NULL}};
    const int n = (int)(sizeof to / sizeof to[0]);
    dft_ckpt_field ref[32];
    dft_data passkey = {0};
    if (fields_of(&c, &passkey, ref) != n) BAD("internal: the checkpoint fields and their readers disagree");
    if (!f || nf != n)
        BAD("%d configuration fields where distflash train writes %d (%s ... %s)", nf, n, ref[0].name, ref[n - 1].name);
    for (int i = 0; i < n; i++) {
        if (strcmp(f[i].name, ref[i].name) || strcmp(to[i].name, ref[i].name))
            BAD("configuration field %d is '%.64s' where distflash train writes '%s'", i, f[i].name, ref[i].name);
        const double v = f[i].value;
        if (to[i].i) {
            if (!(v >= -2147483648.0 && v <= 2147483647.0) || v != (double)(int)v)
                BAD("%s = %.17g is not an integer of the int range", f[i].name, v);
            *to[i].i = (int)v;
        } else if (to[i].x) {
            if (!isfinite(v) || (double)(float)v != v) BAD("%s = %.17g is not a finite float32 value", f[i].name, v);
            *to[i].x = (float)v;
        } else if (!(v >= 0 && v < 9007199254740992.0) || v != floor(v)) {
            BAD("%s = %.17g is not an integer in [0, 2^53)", f[i].name, v);
        } else {
            *to[i].d = v;
        }
    }
    if (data_kind != DFT_DATA_PASSKEY && data_kind != DFT_DATA_FILE) BAD("data = %d; it must be 0 or 1", data_kind);
    c.seed = (uint64_t)seed;
    if (check_config(&c, 1, err, errlen)) return -1;
    if (step < 0 || step > c.steps) BAD("step %lld is outside the checkpoint's %d steps", (long long)step, c.steps);
    *out = c;
    return 0;
#undef BAD
}

static double peak_rss_mib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0; /* Linux reports KiB */
}

static void format_eta(char *buf, size_t len, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, len, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void free_run(run *r) {
    dft_acts_free(r->acts);
    dft_device_close(r->dev);
    dft_data_close(&r->data);
    free(r->params), free(r->grads), free(r->m), free(r->v);
    free(r->seq), free(r->tokens), free(r->targets), free(r->argmax);
    free(r->seq_weight), free(r->weights), free(r->answer_pos), free(r->pos);
}

/* One optimiser step from the summed gradients. */
static int update(run *r, int step) {
    const dft_train_config *c = r->cfg;
    if (r->dev) {
        dft_lr_schedule sched = {c->lr, c->lr_min, c->warmup, c->steps};
        dft_adamw h = {c->beta1, c->beta2, 1e-8f, c->weight_decay};
        return dft_device_update(r->dev, c->clip, dft_lr_at(&sched, step), &h, (long)step + 1, r->err, r->errlen);
    }
    float factor = dft_clip_factor(dft_sum_squares(r->grads, r->total), c->clip);
    if (factor != 1.0f) dft_scale(r->grads, r->total, factor);
    dft_lr_schedule sched = {c->lr, c->lr_min, c->warmup, c->steps};
    float lr = dft_lr_at(&sched, step);
    dft_adamw h = {c->beta1, c->beta2, 1e-8f, c->weight_decay};
    dft_param_tensor t[16];
    int nt = dft_param_tensors(&c->model, t);
    for (int i = 0; i < nt; i++)
        dft_adamw_update(r->params + t[i].offset, r->grads + t[i].offset, r->m + t[i].offset, r->v + t[i].offset,
                          t[i].count, &h, lr, (long)step + 1, t[i].is_matrix);
    return 0;
}

/* One training step's gradients and this rank's loss (NaN on failure): on the CPU into r->grads
   summed over the ranks, on a GPU in device memory summed with NCCL. */
static double step_grads(run *r, double wsum) {
    const dft_train_config *c = r->cfg;
    if (r->dev) {
        if (dft_device_zero_grads(r->dev, r->err, r->errlen)) return NAN;
        double loss = forward(r, (float)(1.0 / wsum), NULL);
        if (isnan(loss) || dft_device_backward(r->dev, &r->attn, r->err, r->errlen) ||
            dft_device_sum_grads(r->dev, r->err, r->errlen))
            return NAN;
        return loss;
    }
    memset(r->grads, 0, sizeof(float) * r->total);
    double loss = forward(r, (float)(1.0 / wsum), NULL);
    if (isnan(loss) || dft_model_backward(&c->model, r->params, r->grads, r->acts, &r->attn, r->tokens, r->err, r->errlen) ||
        dft_group_sum_f32(r->g, r->grads, r->total, r->err, r->errlen))
        return NAN;
    return loss;
}

int dft_train(const dft_train_config *cfg, dft_group *g, dft_train_report *rep, float **final_params, char *err,
               size_t errlen) {
    const dft_train_config *c = cfg;
    memset(rep, 0, sizeof *rep);
    rep->eval_loss = rep->eval_acc = rep->eval_digit_acc = NAN;
    if (check_config(c, g->size, err, errlen)) return -1;
    run r;
    memset(&r, 0, sizeof r);
    r.cfg = c, r.g = g, r.err = err, r.errlen = errlen;
    r.attn = (dft_attention){.comm = g->attn, .schedule = c->schedule, .overlap = c->overlap};
    r.rows = c->model.context / g->size; /* the most positions a rank holds: buffers are sized for it */
    int bad = c->data_path ? dft_data_file(&r.data, c->data_path, c->model.context, c->seed, err, errlen)
                           : dft_data_passkey(&r.data, c->model.context, c->seed, c->answer_weight, err, errlen);
    if (dft_group_any(g, bad)) {
        if (!bad) snprintf(err, errlen, "another rank could not open the data");
        return free_run(&r), -1;
    }
    if (c->device == DFT_DEVICE_CUDA) {
        bad = dft_device_open(&r.dev, &c->model, g, c->deterministic, c->profile, &r.attn, err, errlen) != 0;
        if (dft_group_any(g, bad)) {
            if (!bad) snprintf(err, errlen, "another rank could not open its GPU");
            return free_run(&r), -1;
        }
    }
    r.total = dft_param_layout_of(&c->model).total;
    size_t n = (size_t)c->batch * r.rows;
    r.params = malloc(sizeof(float) * r.total), r.grads = malloc(sizeof(float) * r.total);
    r.m = calloc(r.total, sizeof(float)), r.v = calloc(r.total, sizeof(float));
    r.seq = malloc((size_t)c->model.context + 1), r.seq_weight = malloc(sizeof(float) * c->model.context);
    r.tokens = malloc(n), r.targets = malloc(n), r.argmax = malloc(n), r.weights = malloc(sizeof(float) * n);
    r.answer_pos = malloc(sizeof(int) * c->batch), r.pos = malloc(sizeof(int64_t) * r.rows);
    bad = !r.params || !r.grads || !r.m || !r.v || !r.seq || !r.seq_weight || !r.tokens || !r.targets || !r.argmax ||
          !r.weights || !r.answer_pos || !r.pos;
    if (bad) snprintf(err, errlen, "out of memory for %zu parameters and their optimiser state", r.total);
    if (!bad && use_span(&r, c->model.context)) bad = 1;
    if (dft_group_any(g, bad)) {
        if (!bad) snprintf(err, errlen, "another rank ran out of memory");
        return free_run(&r), -1;
    }

    dft_model_init(&c->model, r.params, c->seed);
    dft_ckpt_field fields[32];
    int nfields = fields_of(c, &r.data, fields);
    float *sections[3] = {r.params, r.m, r.v};
    int64_t first = 0;
    if (c->resume_path) {
        bad = dft_ckpt_load(c->resume_path, fields, nfields, &first, sections, 3, r.total, err, errlen) != 0;
        if (!bad && (first < 0 || first > c->steps)) {
            snprintf(err, errlen, "checkpoint %s: step %lld is outside this run's %d steps", c->resume_path,
                     (long long)first, c->steps);
            bad = 1;
        }
        if (dft_group_any(g, bad)) {
            if (!bad) snprintf(err, errlen, "another rank could not load the checkpoint %s", c->resume_path);
            return free_run(&r), -1;
        }
    }
    if (r.dev) {
        bad = dft_device_upload(r.dev, r.params, r.m, r.v, err, errlen) != 0;
        if (dft_group_any(g, bad)) {
            if (!bad) snprintf(err, errlen, "another rank could not copy the parameters to its GPU");
            return free_run(&r), -1;
        }
    }
    int end = c->stop_after ? c->stop_after : c->steps;
    if (end < first) end = (int)first;
    rep->first_step = (int)first, rep->params = r.total;
    rep->acts_mib = (r.dev ? dft_device_acts_bytes(r.dev) : dft_acts_bytes(r.acts)) / 1048576.0;

    dft_csv *csv = NULL;
    if (g->rank == 0 && c->csv_path) {
        static const char *const cols[] = {"step", "lr", "loss", "eval_loss", "eval_acc", "tokens_per_s", "elapsed_s",
                                           "eval_digit_acc"};
        csv = dft_csv_open(c->csv_path, cols, 8, err, errlen);
        bad = csv == NULL;
    }
    if (dft_group_any(g, bad)) {
        if (!bad) snprintf(err, errlen, "rank 0 could not open the log %s", c->csv_path);
        return free_run(&r), -1;
    }
    if (c->out && g->rank == 0)
        fprintf(c->out, "distflash train: %zu parameters, %d layers, d_model %d, heads %d/%d, context %d on %d rank%s "
                        "(%d positions each), batch %d, checkpoint policy %s, %s data%s\n",
                r.total, c->model.n_layers, c->model.d_model, c->model.n_heads, c->model.n_kv_heads,
                c->model.context, g->size, g->size > 1 ? "s" : "", r.rows, c->batch, dft_ckpt_policy_name(c->policy),
                c->data_path ? c->data_path : "passkey", r.dev ? ", on GPUs (bf16, one per rank)" : "");
    if (c->out && g->rank == 0 && dft_device_attn_groups(r.dev) > 1)
        fprintf(c->out, "attention in %d head groups per call (bounds the distributed workspace)\n",
                dft_device_attn_groups(r.dev));

    int steps_here = end - (int)first;
    double *step_times = calloc((size_t)(steps_here > 0 ? steps_here : 1), sizeof(double));
    double t_start = dft_now_seconds(), tokens_done = 0, tokens_left = 0;
    for (int step = (int)first; step < end; step++) tokens_left += (double)c->batch * span_at(c, g->size, step);
    int live = c->out && g->rank == 0 &&
               (c->progress == DFT_PROGRESS_LIVE || (c->progress == DFT_PROGRESS_AUTO && isatty(fileno(c->out))));
    int rc = step_times ? 0 : -1;
    if (!step_times) snprintf(err, errlen, "out of memory");
    double attn_seconds = 0, last_line = t_start;
    long fwd_calls = 0, bwd_calls = 0;
    for (int step = (int)first; rc == 0 && step < end; step++) {
        double t0 = dft_now_seconds();
        long fwd0 = r.attn.fwd_calls, bwd0 = r.attn.bwd_calls;
        double attn0 = r.attn.fwd_seconds + r.attn.bwd_seconds;
        if (dft_group_any(g, use_span(&r, span_at(c, g->size, step)))) {
            rc = -1;
            break;
        }
        int span = r.span; /* (an evaluation below switches to the whole context) */
        double wsum = fill_batch(&r, DFT_SPLIT_TRAIN, (uint64_t)step * c->batch);
        if (errlen) err[0] = '\0';
        double loss = step_grads(&r, wsum);
        if (dft_group_any(g, isnan(loss)) || dft_group_sum_f64(g, &loss, 1, err, errlen)) {
            if (!isnan(loss)) snprintf(err, errlen, "another rank failed in the step");
            else if (!err[0]) snprintf(err, errlen, "the loss is nan at step %d (diverged: lower --lr)", step);
            rc = -1;
            break;
        }
        loss /= wsum;
        if (!isfinite(loss)) {
            snprintf(err, errlen, "the loss is %g at step %d (diverged: lower --lr)", loss, step);
            rc = -1;
            break;
        }
        fwd_calls += r.attn.fwd_calls - fwd0, bwd_calls += r.attn.bwd_calls - bwd0;
        attn_seconds += r.attn.fwd_seconds + r.attn.bwd_seconds - attn0;
        if (update(&r, step) || (r.dev && dft_device_end_step(r.dev, err, errlen))) {
            rc = -1;
            break;
        }
        step_times[step - first] = dft_now_seconds() - t0;
        rep->loss = loss;

        int done = step + 1;
        double eval_loss = NAN, eval_acc = NAN, eval_digit = NAN;
        if (c->eval_seqs > 0 && ((c->eval_every && done % c->eval_every == 0) || done == end)) {
            if (evaluate(&r, &eval_loss, &eval_acc, &eval_digit)) {
                rc = -1;
                break;
            }
            rep->eval_loss = eval_loss, rep->eval_acc = eval_acc, rep->eval_digit_acc = eval_digit;
        }
        tokens_done += (double)c->batch * span, tokens_left -= (double)c->batch * span;
        double elapsed = dft_now_seconds() - t_start, tps = tokens_done / elapsed;
        dft_lr_schedule sched = {c->lr, c->lr_min, c->warmup, c->steps};
        double row[8] = {done, dft_lr_at(&sched, step), loss, eval_loss, eval_acc, tps, elapsed, eval_digit};
        if (csv && dft_csv_row(csv, row, 8)) {
            snprintf(err, errlen, "writing %s failed", c->csv_path);
            rc = -1;
        }
        if (c->progress && c->out && g->rank == 0) {
            char eta[32], acc[64] = "";
            format_eta(eta, sizeof eta, tokens_left / tps); /* steps grow during a length warm-up */
            if (!isnan(rep->eval_digit_acc))
                snprintf(acc, sizeof acc, "  eval acc %.3f (digits %.3f)", rep->eval_acc, rep->eval_digit_acc);
            else if (!isnan(rep->eval_acc)) snprintf(acc, sizeof acc, "  eval acc %.3f", rep->eval_acc);
            /* Not a terminal (a log file, a pipe, mpirun's forwarding): plain lines, at the first
               step (the run started, and its pace), every 5% of the steps, at evaluations, at the
               end, and at least every PROGRESS_SECONDS so slow steps still show a pulse. */
            int every = end / 20 > 0 ? end / 20 : 1;
            double now = dft_now_seconds();
            int due = done == (int)first + 1 || done % every == 0 || done == end || !isnan(eval_acc) ||
                      now - last_line >= PROGRESS_SECONDS;
            if (live)
                fprintf(c->out, "\rstep %d/%d  context %d  loss %.4f  %.0f tok/s  ETA %s%s\033[K", done, end, span, loss,
                        tps, eta, acc);
            else if (due) {
                fprintf(c->out, "step %d/%d  context %d  loss %.4f  %.0f tok/s  ETA %s%s\n", done, end, span, loss, tps,
                        eta, acc);
                last_line = now;
            }
            fflush(c->out);
        }
        if (c->save_path && ((c->save_every && done % c->save_every == 0) || done == end)) {
            bad = r.dev && dft_device_download(r.dev, r.params, r.m, r.v, err, errlen); /* the file is the CPU's */
            bad = bad || (g->rank == 0 && dft_ckpt_save(c->save_path, fields, nfields, done, sections, 3, r.total, err, errlen));
            if (dft_group_any(g, bad)) {
                if (!bad) snprintf(err, errlen, "rank 0 could not save the checkpoint %s", c->save_path);
                rc = -1;
            }
        }
        if (dft_group_any(g, rc != 0)) {
            if (rc == 0) snprintf(err, errlen, "another rank failed");
            rc = -1;
        }
    }
    if (live) fprintf(c->out, "\n");
    dft_csv_close(csv);
    rep->steps_done = rc == 0 ? end : rep->steps_done;
    rep->seconds = dft_now_seconds() - t_start;
    if (steps_here > 0 && rc == 0) {
        qsort(step_times, (size_t)steps_here, sizeof(double), cmp_double);
        rep->median_step_seconds = step_times[steps_here / 2];
        rep->tokens_per_second = tokens_done / rep->seconds;
        rep->attn_fwd_calls_per_step = (double)fwd_calls / steps_here;
        rep->attn_bwd_calls_per_step = (double)bwd_calls / steps_here;
        rep->attn_seconds_per_step = attn_seconds / steps_here;
    }
    free(step_times);
    rep->peak_rss_mib = dft_group_max(g, peak_rss_mib());
    rep->peak_device_mib = dft_group_max(g, dft_device_peak_mib(r.dev));
    dft_device_phase_seconds(r.dev, rep->phase_seconds_per_step);
    for (int i = 0; i < 5 && steps_here > 0; i++) rep->phase_seconds_per_step[i] /= steps_here;
    if (r.dev && c->profile) rep->attn_seconds_per_step = rep->phase_seconds_per_step[1]; /* CUDA events */
    if (rc == 0 && c->plot_path && c->csv_path && g->rank == 0 && c->out) {
        char msg[512] = "";
        int p = dft_plot_png(c->csv_path, c->plot_path, "distflash train", msg, sizeof msg);
        if (p == 0) fprintf(c->out, "plot: %s\n", c->plot_path);
        else fprintf(c->out, "plot: not drawn: %s\n", msg);
    }
    if (rc == 0 && final_params && r.dev) rc = dft_device_download(r.dev, r.params, NULL, NULL, err, errlen);
    if (rc == 0 && final_params) {
        *final_params = malloc(sizeof(float) * r.total);
        if (*final_params) memcpy(*final_params, r.params, sizeof(float) * r.total);
        else rc = (snprintf(err, errlen, "out of memory"), -1);
    }
    free_run(&r);
    return rc;
}
