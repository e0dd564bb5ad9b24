/* The model's hand-written backward against central finite differences on a tiny
 * configuration, the three checkpoint policies against each other (same gradients, the
 * attention-forward counts each one promises), and configuration checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "train/model/model.h"

typedef struct {
    dft_model_config c;
    int batch, rows;
    uint8_t *tokens, *targets;
    float *weights;
    float scale;
    int64_t *pos;
} problem;

static problem make_problem(dft_model_config c, int batch) {
    problem p = {.c = c, .batch = batch, .rows = c.context};
    int n = batch * p.rows;
    p.tokens = malloc(n), p.targets = malloc(n), p.weights = malloc(sizeof(float) * n);
    p.pos = malloc(sizeof(int64_t) * p.rows);
    double wsum = 0;
    for (int i = 0; i < n; i++) {
        p.tokens[i] = (uint8_t)tl_rand_int(0, 255);
        p.targets[i] = (uint8_t)tl_rand_int(0, 255);
        p.weights[i] = (float)(0.5 + tl_rand_uniform());
        wsum += p.weights[i];
    }
    p.scale = (float)(1.0 / wsum);
    for (int i = 0; i < p.rows; i++) p.pos[i] = i;
    return p;
}

static void free_problem(problem *p) { free(p->tokens), free(p->targets), free(p->weights), free(p->pos); }

/* The mean weighted loss at params, and (if grads) its gradient. */
static double loss_and_grad(const problem *p, dft_ckpt_policy policy, const float *params, float *grads,
                            dft_attention *at) {
    char err[256] = "";
    dft_acts *a = dft_acts_create(&p->c, policy, p->batch, p->rows, p->pos, err, sizeof err);
    CHECK(a != NULL, "acts: %s", err);
    if (!a) return NAN;
    double loss = dft_model_forward(&p->c, params, a, at, p->tokens, p->targets, p->weights, p->scale, NULL, err,
                                     sizeof err);
    CHECK(isfinite(loss), "forward: %s", err);
    if (grads) {
        memset(grads, 0, sizeof(float) * dft_param_layout_of(&p->c).total);
        CHECK(dft_model_backward(&p->c, params, grads, a, at, p->tokens, err, sizeof err) == 0, "backward: %s", err);
    }
    dft_acts_free(a);
    return loss * p->scale;
}

static void test_gradients(void) {
    /* GQA 4:2, head_dim 8, two layers, an odd context */
    dft_model_config c = {.n_layers = 2, .d_model = 32, .n_heads = 4, .n_kv_heads = 2, .ffn = 24,
                           .context = 13, .rope_base = 10000.0f, .init_std = 0.3f};
    problem p = make_problem(c, 2);
    size_t total = dft_param_layout_of(&c).total;
    float *params = malloc(sizeof(float) * total), *grads = malloc(sizeof(float) * total);
    dft_model_init(&c, params, 7);
    /* perturb the norm gains so their gradients are not at a symmetric point */
    dft_param_tensor t[16];
    int nt = dft_param_tensors(&c, t);
    for (int i = 0; i < nt; i++)
        if (!t[i].is_matrix)
            for (size_t j = 0; j < t[i].count; j++) params[t[i].offset + j] = (float)(1.0 + 0.3 * tl_rand_normal());
    dft_attention at = {0};
    loss_and_grad(&p, DFT_CKPT_NONE, params, grads, &at);
    /* Finite differences on a few entries of every tensor. The model computes in float32, so
       the loss carries rounding noise of about 1e-7 relative: the step must stay large enough
       to stand above it, and Richardson extrapolation removes the truncation that such a step
       brings. A wrong backward misses by tens of percent; this passes at about 1%. */
    for (int i = 0; i < nt; i++) {
        double worst = 0, scale = 0;
        for (int s = 0; s < 6; s++) {
            size_t j = t[i].offset + (size_t)tl_rand_int(0, (int)t[i].count - 1);
            float keep = params[j];
            /* Richardson: (4 D(h/2) - D(h)) / 3 cancels the h^2 term of the central difference */
            double h = 2e-2 * fmax(1.0, fabs(keep)), dh[2];
            for (int k = 0; k < 2; k++) {
                float up_at = (float)(keep + h / (1 + k)), down_at = (float)(keep - h / (1 + k));
                params[j] = up_at;
                double up = loss_and_grad(&p, DFT_CKPT_NONE, params, NULL, &at);
                params[j] = down_at;
                double down = loss_and_grad(&p, DFT_CKPT_NONE, params, NULL, &at);
                dh[k] = (up - down) / ((double)up_at - (double)down_at); /* the step actually taken */
            }
            params[j] = keep;
            double fd = (4 * dh[1] - dh[0]) / 3;
            worst = fmax(worst, fabs(fd - grads[j]));
            scale = fmax(scale, fabs(fd));
        }
        if (getenv("DFA_FD_STATS")) printf("  %-10s worst %.3g scale %.3g ratio %.3g\n", t[i].name, worst, scale, worst / (scale + 1e-12));
        CHECK(worst <= 1e-2 * scale + 5e-5, "%s: finite differences differ by %.3g (gradient scale %.3g)", t[i].name,
              worst, scale);
    }
    free(params), free(grads), free_problem(&p);
}

static void test_policies(void) {
    dft_model_config c = {.n_layers = 3, .d_model = 48, .n_heads = 6, .n_kv_heads = 3, .ffn = 40,
                           .context = 37, .rope_base = 500.0f, .init_std = 0.2f};
    problem p = make_problem(c, 3);
    size_t total = dft_param_layout_of(&c).total;
    float *params = malloc(sizeof(float) * total), *ref = malloc(sizeof(float) * total), *grads = malloc(sizeof(float) * total);
    dft_model_init(&c, params, 11);
    const long want_fwd[3] = {3, 6, 3}; /* attention forwards per step: none, layer, attn-output */
    double ref_loss = 0;
    for (int policy = DFT_CKPT_NONE; policy <= DFT_CKPT_ATTN_OUTPUT; policy++) {
        dft_attention at = {0};
        double loss = loss_and_grad(&p, (dft_ckpt_policy)policy, params, policy ? grads : ref, &at);
        CHECK(at.fwd_calls == want_fwd[policy] && at.bwd_calls == 3, "%s: %ld attention forwards, %ld backwards",
              dft_ckpt_policy_name((dft_ckpt_policy)policy), at.fwd_calls, at.bwd_calls);
        if (policy == 0) {
            ref_loss = loss;
            continue;
        }
        CHECK(loss == ref_loss, "%s: loss %.17g differs from none's %.17g", dft_ckpt_policy_name((dft_ckpt_policy)policy),
              loss, ref_loss);
        CHECK(memcmp(grads, ref, sizeof(float) * total) == 0, "%s: gradients differ from none's",
              dft_ckpt_policy_name((dft_ckpt_policy)policy));
    }
    free(params), free(ref), free(grads), free_problem(&p);
}

static void test_config_checks(void) {
    dft_model_config good = {.n_layers = 2, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .ffn = 128,
                              .context = 1024, .rope_base = 10000.0f, .init_std = 0.02f};
    char err[256];
    CHECK(dft_model_config_check(&good, 4, err, sizeof err) == 0, "good config refused: %s", err);
    struct {
        const char *what, *expect;
        dft_model_config c;
        int ranks;
    } bad[] = {
        {"heads not dividing d_model", "heads = 6 does not divide d_model = 64", good, 1},
        {"kv heads not dividing heads", "kv-heads = 3", good, 1},
        {"context not divisible by ranks", "context = 1024 is not divisible by the 3 ranks", good, 3},
        {"head_dim not a multiple of 8", "head_dim", good, 1},
        {"zero layers", "layers = 0", good, 1},
        {"NaN init", "init-std", good, 1},
    };
    bad[0].c.n_heads = 6;
    bad[1].c.n_kv_heads = 3;
    bad[3].c.n_heads = 16, bad[3].c.n_kv_heads = 16; /* head_dim 4 */
    bad[4].c.n_layers = 0;
    bad[5].c.init_std = NAN;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        int rc = dft_model_config_check(&bad[i].c, bad[i].ranks, err, sizeof err);
        CHECK(rc == -1 && strstr(err, bad[i].expect), "%s: rc %d, message \"%s\"", bad[i].what, rc, err);
    }
}

int main(void) {
    tl_init("test_model");
    test_gradients();
    test_policies();
    test_config_checks();
    return tl_finish("test_model");
}
