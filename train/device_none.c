/* --device: the names, and the refusals of a build without CUDA (device.h). */
#include "train/device.h"

#include <stdio.h>
#include <string.h>

const char *dft_device_name(dft_device_kind k) { return k == DFT_DEVICE_CUDA ? "cuda" : "cpu"; }

int dft_device_parse(const char *s) {
    if (s && !strcmp(s, "cpu")) return DFT_DEVICE_CPU;
    if (s && !strcmp(s, "cuda")) return DFT_DEVICE_CUDA;
    return -1;
}

#ifndef DFT_HAVE_GPU_MODEL
static int refuse(char *err, size_t errlen) {
    snprintf(err, errlen, "--device cuda: this distflash was built without CUDA (install the CUDA toolkit and "
                          "rebuild with -DDFA_WITH_CUDA=ON)");
    return -1;
}

const char *dft_device_phase_name(int phase) { (void)phase; return "?"; }
int dft_device_open(dft_device **out, const dft_model_config *c, dft_group *g, int deterministic, int profile,
                    dft_attention *attn, char *err, size_t errlen) {
    (void)c, (void)g, (void)deterministic, (void)profile, (void)attn;
    *out = NULL;
    return refuse(err, errlen);
}
void dft_device_close(dft_device *dv) { (void)dv; }
int dft_device_set_span(dft_device *dv, dft_ckpt_policy policy, int batch, int rows, const int64_t *pos, char *err,
                        size_t errlen) {
    (void)dv, (void)policy, (void)batch, (void)rows, (void)pos;
    return refuse(err, errlen);
}
size_t dft_device_acts_bytes(const dft_device *dv) { (void)dv; return 0; }
int dft_device_attn_groups(const dft_device *dv) { (void)dv; return 0; }
int dft_device_upload(dft_device *dv, const float *params, const float *m, const float *v, char *err, size_t errlen) {
    (void)dv, (void)params, (void)m, (void)v;
    return refuse(err, errlen);
}
int dft_device_download(dft_device *dv, float *params, float *m, float *v, char *err, size_t errlen) {
    (void)dv, (void)params, (void)m, (void)v;
    return refuse(err, errlen);
}
int dft_device_zero_grads(dft_device *dv, char *err, size_t errlen) { (void)dv; return refuse(err, errlen); }
double dft_device_forward(dft_device *dv, dft_attention *at, const uint8_t *tokens, const uint8_t *targets,
                          const float *weights, float grad_scale, uint8_t *argmax, char *err, size_t errlen) {
    (void)dv, (void)at, (void)tokens, (void)targets, (void)weights, (void)grad_scale, (void)argmax;
    refuse(err, errlen);
    return 0.0 / 0.0;
}
int dft_device_backward(dft_device *dv, dft_attention *at, char *err, size_t errlen) {
    (void)dv, (void)at;
    return refuse(err, errlen);
}
int dft_device_sum_grads(dft_device *dv, char *err, size_t errlen) { (void)dv; return refuse(err, errlen); }
int dft_device_update(dft_device *dv, float clip, float lr, const dft_adamw *h, long t, char *err, size_t errlen) {
    (void)dv, (void)clip, (void)lr, (void)h, (void)t;
    return refuse(err, errlen);
}
int dft_device_end_step(dft_device *dv, char *err, size_t errlen) { (void)dv; return refuse(err, errlen); }
double dft_device_peak_mib(const dft_device *dv) { (void)dv; return 0; }
void dft_device_phase_seconds(const dft_device *dv, double out[DFT_DEVICE_PHASES]) {
    (void)dv;
    for (int i = 0; i < DFT_DEVICE_PHASES; i++) out[i] = 0;
}
#endif
