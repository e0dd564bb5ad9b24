/* The GPU model against the CPU model (the reference): the forward loss and every parameter
 * gradient on small configurations, the three checkpoint policies against each other (and
 * their attention call counts), one optimiser step against the CPU's, and the configurations
 * the GPU refuses.
 *
 * Tolerance: the GPU runs bf16 activations and matmul inputs (unit roundoff 2^-9 = 2e-3) with
 * float32 accumulation; the CPU float32 throughout. Through two layers a gradient picks up some
 * tens of bf16 roundings, so each tensor's gradient must be within 5e-2 relative L2 error of the
 * CPU's (about 25 roundoffs; a wrong sign, scale, transpose or missing term is an O(1) error)
 * and the loss within 1e-2 relative. The measured errors are printed with DFA_TRAIN_STATS=1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_train_util.h"
#include "testlib.h"
#include "train/cuda/model_cuda.h"
#include "train/model/model.h"

#define GRAD_TOL 5e-2
#define LOSS_TOL 1e-2

typedef struct {
    int batch, rows;
    uint8_t *tok, *tgt;
    float *w;
    int64_t *pos;
} batch_data;

static batch_data make_batch(int batch, int rows) {
    batch_data b = {batch, rows, malloc((size_t)batch * rows), malloc((size_t)batch * rows),
                    malloc(sizeof(float) * batch * rows), malloc(sizeof(int64_t) * rows)};
    for (int i = 0; i < batch * rows; i++) {
        /* a little structure (repeats) so that attention matters, bytes of a small alphabet */
        b.tok[i] = (uint8_t)(i % 3 == 0 && i ? b.tok[i - 1] : 'a' + tl_rand_int(0, 25));
        b.tgt[i] = (uint8_t)('a' + tl_rand_int(0, 25));
        b.w[i] = i % 11 == 0 ? 0.0f : 1.0f;
    }
    for (int r = 0; r < rows; r++) b.pos[r] = r;
    return b;
}

static void free_batch(batch_data *b) { free(b->tok), free(b->tgt), free(b->w), free(b->pos); }

/* GPU loss and gradients of one forward/backward under a policy; 0 on success */
static int gpu_grads(const dft_model_config *c, const float *params, dft_ckpt_policy policy, const batch_data *b,
                     float scale, double *loss, float *grads, long calls[2], int groups, int dn_rows) {
    char err[512] = "";
    dft_gpu_model m;
    if (dft_gpu_model_init(&m, c, 1, 0, err, sizeof err)) {
        CHECK(0, "dft_gpu_model_init: %s", err);
        return -1;
    }
    int rc = -1;
    dft_gpu_acts *a = NULL;
    m.attn_groups = groups;
    m.dn_rows = dn_rows;
    dft_attention at = {.comm = NULL, .schedule = DFA_SCHEDULE_BALANCED, .overlap = 1};
    if (dft_gpu_model_upload(&m, params, NULL, NULL, err, sizeof err)) goto done;
    if (!(a = dft_gpu_acts_create(&m, policy, b->batch, b->rows, b->pos, err, sizeof err))) goto done;
    if (groups && dft_gpu_acts_groups(a) != groups) {
        snprintf(err, sizeof err, "%d head groups asked, %d taken", groups, dft_gpu_acts_groups(a));
        goto done;
    }
    *loss = dft_gpu_forward(&m, a, &at, b->tok, b->tgt, b->w, scale, NULL, err, sizeof err);
    if (isnan(*loss) || dft_gpu_backward(&m, a, &at, err, sizeof err) || dft_gpu_grads_download(&m, grads, err, sizeof err))
        goto done;
    calls[0] = at.fwd_calls, calls[1] = at.bwd_calls;
    rc = 0;
done:
    CHECK(rc == 0, "GPU pass (policy %s): %s", dft_ckpt_policy_name(policy), err);
    dft_gpu_acts_free(a);
    dft_gpu_model_free(&m);
    return rc;
}

static void compare_with_cpu(const dft_model_config *c, int batch) {
    char err[512] = "";
    int rows = c->context;
    size_t total = dft_param_layout_of(c).total;
    float *params = malloc(sizeof(float) * total);
    dft_model_init(c, params, tl_rand_u64());
    /* norm gains away from 1 so that their gradients are exercised */
    dft_param_tensor t[16];
    int nt = dft_param_tensors(c, t);
    for (int i = 0; i < nt; i++)
        if (!t[i].is_matrix)
            for (size_t j = 0; j < t[i].count; j++) params[t[i].offset + j] = (float)(1.0 + 0.2 * tl_rand_normal());
    batch_data b = make_batch(batch, rows);
    double wsum = 0;
    for (int i = 0; i < batch * rows; i++) wsum += b.w[i];
    float scale = (float)(1.0 / wsum);

    /* the CPU reference */
    dft_acts *ca = dft_acts_create(c, DFT_CKPT_NONE, batch, rows, b.pos, err, sizeof err);
    CHECK(ca != NULL, "dft_acts_create: %s", err);
    float *ref = calloc(total, sizeof(float));
    dft_attention cat = {.comm = NULL, .schedule = DFA_SCHEDULE_BALANCED, .overlap = 1};
    double ref_loss = dft_model_forward(c, params, ca, &cat, b.tok, b.tgt, b.w, scale, NULL, err, sizeof err);
    CHECK(!isnan(ref_loss) && dft_model_backward(c, params, ref, ca, &cat, b.tok, err, sizeof err) == 0, "CPU model: %s", err);
    dft_acts_free(ca);

    float *g[3];
    double loss[3];
    long calls[3][2];
    int ok = 1;
    for (int p = 0; p < 3; p++) {
        g[p] = malloc(sizeof(float) * total);
        tl_poison(g[p], sizeof(float) * total);
        ok &= gpu_grads(c, params, (dft_ckpt_policy)p, &b, scale, &loss[p], g[p], calls[p], 0, 0) == 0;
    }
    int hd = c->d_model / c->n_heads;
    if (ok) {
        double le = fabs(loss[0] - ref_loss) / fabs(ref_loss);
        CHECK(le < LOSS_TOL, "hd %d: GPU loss %.6g, CPU %.6g (relative error %.3g)", hd, loss[0], ref_loss, le);
        for (int i = 0; i < nt; i++) {
            double e = rel_l2(g[0] + t[i].offset, ref + t[i].offset, t[i].count);
            if (getenv("DFA_TRAIN_STATS")) printf("  hd %d %-10s gradient relative L2 error %.3g\n", hd, t[i].name, e);
            CHECK(e < GRAD_TOL, "hd %d: gradient of %s: relative L2 error %.3g against the CPU model", hd, t[i].name, e);
        }
        /* the policies: same forward, same gradients (deterministic attention: the same bits) */
        for (int p = 1; p < 3; p++) {
            double e = rel_l2(g[p], g[0], total);
            int bitwise = memcmp(g[p], g[0], sizeof(float) * total) == 0 && loss[p] == loss[0];
            if (getenv("DFA_TRAIN_STATS"))
                printf("  hd %d policy %s vs none: %s (relative L2 %.3g)\n", hd, dft_ckpt_policy_name((dft_ckpt_policy)p),
                       bitwise ? "bitwise equal" : "not bitwise", e);
            CHECK(loss[p] == loss[0] && e < 1e-3, "hd %d: policy %s: loss %.9g (none %.9g), gradients differ by %.3g", hd,
                  dft_ckpt_policy_name((dft_ckpt_policy)p), loss[p], loss[0], e);
        }
        /* attention head group by head group (what long contexts take to bound the distributed
           workspace): every head is independent, so the same bits */
        int G = c->n_kv_heads;
        float *gg = malloc(sizeof(float) * total);
        double lg = 0;
        long cg[2];
        if (G > 1 && gpu_grads(c, params, DFT_CKPT_ATTN_OUTPUT, &b, scale, &lg, gg, cg, G, 0) == 0)
            CHECK(lg == loss[2] && memcmp(gg, g[2], sizeof(float) * total) == 0 && cg[0] == calls[2][0],
                  "hd %d: attention in %d head groups differs from one call (loss %.9g vs %.9g)", hd, G, lg, loss[2]);
        /* the norms' float32 gradients a few rows at a time (long contexts take 65536): the same
           loss; the gradients within float rounding (the norm gains sum in other groupings) */
        if (gpu_grads(c, params, DFT_CKPT_LAYER, &b, scale, &lg, gg, cg, 0, 7) == 0) {
            const double e = rel_l2(gg, g[1], total);
            CHECK(lg == loss[1] && e < 1e-5, "hd %d: dn 7 rows at a time: loss %.9g (%.9g), gradients differ by %.3g", hd,
                  lg, loss[1], e);
        }
        free(gg);
        /* attention calls per step, as the CPU model counts them */
        int L = c->n_layers;
        CHECK(calls[0][0] == L && calls[0][1] == L, "none: %ld/%ld attention calls, expected %d/%d", calls[0][0], calls[0][1], L, L);
        CHECK(calls[1][0] == 2 * L && calls[1][1] == L, "layer: %ld/%ld attention calls, expected %d/%d", calls[1][0],
              calls[1][1], 2 * L, L);
        CHECK(calls[2][0] == L && calls[2][1] == L, "attn-output: %ld/%ld attention calls, expected %d/%d", calls[2][0],
              calls[2][1], L, L);
    }

    /* one optimiser step on the GPU's gradients: the CPU's AdamW bits (no clipping), and with
       clipping within a float rounding of the factor */
    for (int clip = 0; clip < 2 && ok; clip++) {
        dft_gpu_model m;
        float *p_cpu = malloc(sizeof(float) * total), *p_gpu = malloc(sizeof(float) * total);
        float *mm = calloc(total, sizeof(float)), *vv = calloc(total, sizeof(float)), *gg = malloc(sizeof(float) * total);
        memcpy(p_cpu, params, sizeof(float) * total), memcpy(gg, g[0], sizeof(float) * total);
        float max_norm = clip ? 0.5f * (float)sqrt(dft_sum_squares(gg, total)) : 0.0f;
        dft_adamw h = {0.9f, 0.95f, 1e-8f, 0.1f};
        int rc = dft_gpu_model_init(&m, c, 1, 0, err, sizeof err) || dft_gpu_model_upload(&m, params, NULL, NULL, err, sizeof err);
        if (!rc) {
            CUDA_OK(cudaMemcpy(m.grads, gg, sizeof(float) * total, cudaMemcpyHostToDevice));
            CUDA_OK(cudaDeviceSynchronize()); /* the model's stream does not wait for the legacy one */
            rc = dft_gpu_update(&m, max_norm, 1e-3f, &h, 1, err, sizeof err) ||
                 dft_gpu_model_download(&m, p_gpu, NULL, NULL, err, sizeof err);
        }
        CHECK(rc == 0, "GPU update: %s", err);
        float f = dft_clip_factor(dft_sum_squares(gg, total), max_norm);
        if (f != 1.0f) dft_scale(gg, total, f);
        for (int i = 0; i < nt; i++)
            dft_adamw_update(p_cpu + t[i].offset, gg + t[i].offset, mm + t[i].offset, vv + t[i].offset, t[i].count, &h,
                             1e-3f, 1, t[i].is_matrix);
        if (!rc) {
            if (!clip) CHECK(memcmp(p_cpu, p_gpu, sizeof(float) * total) == 0, "hd %d: the GPU AdamW step differs from the CPU's", hd);
            else {
                double worst = 0;
                for (size_t i = 0; i < total; i++) worst = fmax(worst, fabs((double)p_cpu[i] - p_gpu[i]));
                CHECK(worst <= 1e-3 * 1e-3, "hd %d: the clipped GPU step differs from the CPU's by %.3g", hd, worst);
            }
        }
        dft_gpu_model_free(&m);
        free(p_cpu), free(p_gpu), free(mm), free(vv), free(gg);
    }
    for (int p = 0; p < 3; p++) free(g[p]);
    free(ref), free(params);
    free_batch(&b);
}

static void refusals(void) {
    char err[512] = "";
    dft_gpu_model m;
    dft_model_config c = {.n_layers = 1, .d_model = 64, .n_heads = 4, .n_kv_heads = 2, .ffn = 100, .context = 64,
                          .rope_base = 10000.0f, .init_std = 0.02f};
    CHECK(dft_gpu_model_init(&m, &c, 0, 0, err, sizeof err) != 0 && strstr(err, "ffn = 100"),
          "ffn 100 must be refused naming ffn: \"%s\"", err);
    c.ffn = 128, c.n_heads = 16; /* head_dim 4 */
    err[0] = '\0';
    CHECK(dft_gpu_model_init(&m, &c, 0, 0, err, sizeof err) != 0 && strstr(err, "head_dim"),
          "head_dim 4 must be refused naming head_dim: \"%s\"", err);
    c.n_heads = 4;
    CHECK(dft_gpu_model_init(&m, &c, 0, 0, err, sizeof err) == 0, "a good configuration: %s", err);
    char err2[512] = "";
    int64_t pos[4] = {0, 1, 2, 3};
    CHECK(dft_gpu_acts_create(&m, (dft_ckpt_policy)7, 1, 4, pos, err2, sizeof err2) == NULL && strstr(err2, "policy"),
          "an unknown policy must be refused: \"%s\"", err2);
    dft_gpu_model_free(&m);
}

int main(void) {
    if (gpu_count() < 1) return printf("no CUDA device: skipped\n"), 77;
    tl_init("test_gpu_model");
    /* head_dim 32 (the mma.sync attention kernels) and 64 (wgmma on sm_90) */
    dft_model_config a = {.n_layers = 2, .d_model = 128, .n_heads = 4, .n_kv_heads = 2, .ffn = 256, .context = 256,
                          .rope_base = 10000.0f, .init_std = 0.05f};
    compare_with_cpu(&a, 2);
    dft_model_config b = {.n_layers = 2, .d_model = 256, .n_heads = 4, .n_kv_heads = 2, .ffn = 512, .context = 192,
                          .rope_base = 10000.0f, .init_std = 0.05f};
    compare_with_cpu(&b, 1);
    refusals();
    return tl_finish("test_gpu_model");
}
