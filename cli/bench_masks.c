/* Masks for dist-bench: see bench_masks.h. */
#include "bench_masks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mask.h"

int bench_mask_on(const bench_mask *m) { return m->doc_mean > 0 || m->window >= 0; }

int bench_mask_arg(int argc, char **argv, int *i, bench_mask *m) {
    const char *a = argv[*i];
    if (strcmp(a, "--docs") && strcmp(a, "--window")) return 0;
    if (*i + 1 >= argc) return -1;
    const char *v = argv[++*i];
    char *end = NULL;
    if (!strcmp(a, "--docs")) {
        m->doc_mean = strtod(v, &end);
        return *end == '\0' && m->doc_mean >= 1.0 && isfinite(m->doc_mean) ? 1 : -1;
    }
    const long w = strtol(v, &end, 10);
    m->window = (int)w;
    return *end == '\0' && w >= 0 && w <= 0x7fffffff ? 1 : -1;
}

/* A fixed-seed generator (splitmix64) and standard normals (Box-Muller): the same layout on
   every rank and every run. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s) {
    const double u1 = ((double)(next_u64(s) >> 11) + 0.5) * 0x1.0p-53, u2 = (double)(next_u64(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int32_t *bench_docs(const bench_mask *m, int batch, int64_t S, int *ndocs) {
    *ndocs = 0;
    if (!(m->doc_mean > 0)) return NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)batch * (size_t)S);
    if (!ids) return NULL;
    const double sigma = 1.0, mu = log(m->doc_mean) - sigma * sigma / 2; /* E[exp(N(mu, sigma^2))] = mean */
    uint64_t seed = 1;
    int32_t id = 0;
    for (int64_t i = 0; i < S; id++) {
        const double x = exp(mu + sigma * normal(&seed));
        const int64_t len = x < 1.0 ? 1 : x > (double)S ? S : (int64_t)llround(x);
        for (int64_t r = 0; r < len && i < S; r++) ids[i++] = id;
    }
    *ndocs = id;
    for (int b = 1; b < batch; b++) memcpy(ids + (size_t)b * S, ids, sizeof(int32_t) * (size_t)S);
    return ids;
}

void bench_mask_apply(const bench_mask *m, dfa_attn_desc *d, const int32_t *ids) {
    d->q_doc = d->k_doc = ids;
    if (m->window >= 0) {
        d->flags |= DFA_FLAG_WINDOW;
        d->window_left = m->window;
        d->window_right = d->causal ? 0 : m->window;
    }
}

int32_t *bench_docs_slice(const int32_t *ids, int batch, int64_t S, int64_t r0, int64_t n) {
    if (!ids) return NULL;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)batch * (size_t)n);
    if (!out) return NULL;
    for (int b = 0; b < batch; b++) memcpy(out + (size_t)b * n, ids + (size_t)b * S + r0, sizeof(int32_t) * (size_t)n);
    return out;
}

double bench_visible_flops(const dfa_attn_desc *d) {
    return 4.0 * d->num_heads * d->head_dim * (double)dfa__visible_pairs(d);
}

void bench_mask_describe(const bench_mask *m, int ndocs, char *buf, int len) {
    int k = 0;
    buf[0] = '\0';
    if (m->doc_mean > 0) k += snprintf(buf, (size_t)len, "docs log-normal mean %.0f sigma 1 (%d per row)", m->doc_mean, ndocs);
    if (m->window >= 0 && k < len) snprintf(buf + k, (size_t)(len - k), "%swindow %d", k ? ", " : "", m->window);
    if (!bench_mask_on(m)) snprintf(buf, (size_t)len, "no mask");
}
