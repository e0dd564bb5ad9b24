/* The CUDA kernel lab: every kernel variant side by side. Each variant is first
 * checked against the CPU library on a moderate shape (fresh random inputs,
 * max |gpu - cpu| relative to max |cpu|), then timed on the bench shapes
 * (h = 4096/d heads, b = max(1, 32768/S)); medians of CUDA event timings.
 *
 *   dfa_lab_cuda [--dims 128] [--seqlens 8k,32k] [--causal 1] [--check 1000] [--reps 5]
 *                [--rounds 1] [--only 'fwd wgmma,bwd wgmma atomic'] [--window W] [--docs M]
 *                [--softcap C] [--list]
 *
 * --only keeps the variants whose name contains one of the comma-separated strings; --list
 * prints the names. --rounds R > 1 times every selected variant once per round, round after
 * round, on each shape, and prints the median round and the spread: a GPU's clocks drift
 * between single measurements, so comparisons take rounds.
 *
 * Variants: the library's kernels of each family (mma.sync; the Hopper kernels), forward and
 * backward with either dq path (added as it comes; deterministic), run through the public calls
 * with their family forced (dfa__cuda_force_family, the tests' hook); then the lab's rows
 * (lab_variants.cu): the library's Hopper kernels with one member of their configuration
 * changed, other grid orders, and the lab's experimental kernels. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/launch.h"
#include "distflash_cuda.h"
#include "lab_cuda.h"
#include "lab_variants.h"

typedef struct {
    const char *name;
    int family; /* DFA__FAMILY_MMA or DFA__FAMILY_WGMMA: the library's kernels of that family */
    int bwd, deterministic;
    int lab; /* -1: the library's kernels; else the lab row (lab_variants.h) that runs the measured pass */
    int check_min; /* the check's sequence length at least this (a persistent kernel needs more
                      tiles than SMs for a CTA to take a second tile) */
} variant;

/* The library's own kernels; main appends the lab's rows. */
static const variant library_rows[] = {
    {"fwd mma.sync", DFA__FAMILY_MMA, 0, 0, -1, 0},
    {"bwd mma atomic dq", DFA__FAMILY_MMA, 1, 0, -1, 0},
    {"bwd mma determ. dq", DFA__FAMILY_MMA, 1, 1, -1, 0},
    {"fwd wgmma (library)", DFA__FAMILY_WGMMA, 0, 0, -1, 8192},
    {"bwd wgmma atomic dq", DFA__FAMILY_WGMMA, 1, 0, -1, 0},
    {"bwd wgmma determ. dq", DFA__FAMILY_WGMMA, 1, 1, -1, 0},
};
#define MAX_VARIANTS 128
static variant variants[MAX_VARIANTS];
static int nvariants;

/* The variant's forward: its own for a forward lab variant, else the library's (of its family). */
static dfa_status run_fwd(const variant *v, const dfa_attn_desc *d, const void *q, const void *k, const void *vv,
                          void *o, float *lse) {
    return v->lab >= 0 && !v->bwd ? lab_fwd(v->lab, d, q, k, vv, o, lse, 0) : dfa_attn_fwd_cuda(d, q, k, vv, o, lse, 0);
}
static dfa_status run_bwd(const variant *v, const dfa_attn_desc *d, const void *q, const void *k, const void *vv,
                          const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv) {
    return v->lab >= 0 ? lab_bwd(v->lab, d, q, k, vv, o, lse, dout, dq, dk, dv, 0)
                  : dfa_attn_bwd_cuda(d, q, k, vv, o, lse, dout, dq, dk, dv, 0);
}

static uint64_t rng = 88172645463325252ull;
static float rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    double u = 0;
    for (int j = 0; j < 4; j++) u += (double)((rng >> (16 * j)) & 0xffff) / 65536.0;
    return (float)((u - 2.0) * 1.7320508);
}
static uint16_t to_bf16(float f) {
    uint32_t w;
    memcpy(&w, &f, 4);
    return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t w = (uint32_t)h << 16;
    float f;
    memcpy(&f, &w, 4);
    return f;
}

/* n random bf16 values on the device (a random block of at most 16M values, repeated) */
static void *dev_random(size_t n, uint16_t **host_copy) {
    const size_t blk = n < ((size_t)16 << 20) ? n : ((size_t)16 << 20);
    uint16_t *h = malloc(blk * 2);
    for (size_t i = 0; i < blk; i++) h[i] = to_bf16(rnd());
    void *d;
    LAB_CUDA(cudaMalloc(&d, n * 2));
    for (size_t off = 0; off < n; off += blk)
        LAB_CUDA(cudaMemcpy((uint16_t *)d + off, h, (n - off < blk ? n - off : blk) * 2, cudaMemcpyHostToDevice));
    if (host_copy && blk == n) *host_copy = h;
    else free(h);
    return d;
}

static void set_variant(const variant *v) { dfa__cuda_force_family(v->family); }

/* --window W: every pass with a causal sliding window of W keys back (0: none). The check runs
   with at most a third of its length, so that the window cuts into its rows. */
static int g_window = 0;
static void set_window(dfa_attn_desc *d, int S, int checking) {
    if (!g_window || !d->causal) return;
    d->flags |= DFA_FLAG_WINDOW;
    d->window_left = checking && g_window > S / 3 ? S / 3 : g_window;
    d->window_right = -1;
}

/* --softcap C: every pass with logits capped at C (0: none). */
static float g_softcap = 0.0f;

/* --docs M: packed documents (causal) with log-normal lengths of mean M and sigma 1, the masks
   bench's layout; batch row r draws its lengths from seed r + 1, so every pass and the FLOP count
   see the same layout. The check uses a mean of S / 8, so that its sequence holds several. */
static int g_docs = 0;
static void make_docs(int32_t *ids, int S, double mean, int row) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(row + 1);
    const double mu = log(mean) - 0.5;
    for (int i = 0, id = 0; i < S; id++) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            u[j] = ((double)(x >> 11) + 0.5) / 9007199254740992.0;
        }
        const double z = sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
        long len = lround(exp(mu + z));
        for (len = len < 1 ? 1 : len; len > 0 && i < S; len--) ids[i++] = id;
    }
}
/* Document ids of b rows of S tokens on the device (NULL without --docs). */
static int32_t *dev_docs(int b, int S, double mean) {
    if (!g_docs) return NULL;
    int32_t *h = malloc((size_t)b * S * 4), *d;
    for (int r = 0; r < b; r++) make_docs(h + (size_t)r * S, S, mean, r);
    LAB_CUDA(cudaMalloc((void **)&d, (size_t)b * S * 4));
    LAB_CUDA(cudaMemcpy(d, h, (size_t)b * S * 4, cudaMemcpyHostToDevice));
    free(h);
    return d;
}
/* Visible (query, key) pairs of b rows of S tokens under --docs (causal) and --window. */
static double doc_pairs(int b, int S) {
    int32_t *ids = malloc((size_t)S * 4);
    double pairs = 0;
    for (int r = 0; r < b; r++) {
        make_docs(ids, S, g_docs, r);
        for (int i = 0, start = 0; i < S; i++) {
            if (ids[i] != ids[start]) start = i;
            const int lo = g_window && i - g_window > start ? i - g_window : start;
            pairs += i - lo + 1;
        }
    }
    free(ids);
    return pairs;
}

static double rel_diff(const uint16_t *a, const uint16_t *ref, size_t n) {
    double m = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = fabs((double)from_bf16(a[i]) - from_bf16(ref[i]));
        if (!(x <= m)) m = x;
        if (fabs(from_bf16(ref[i])) > r) r = fabs(from_bf16(ref[i]));
    }
    return m / (r > 0 ? r : 1);
}

/* Largest relative difference of the variant's outputs from the CPU library's. */
static double check(const variant *v, int D, int S, int causal) {
    if (S < v->check_min) S = v->check_min;
    dfa_attn_desc d = dfa_attn_desc_init(1, S, S, 4, 2, D);
    d.dtype = DFA_BF16;
    d.causal = causal;
    d.flags = v->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    d.softcap = g_softcap;
    set_window(&d, S, 1);
    int32_t *hdoc = NULL;
    dfa_attn_desc dg = d; /* the GPU's: the same mask with device ids */
    if (g_docs && causal) {
        hdoc = malloc((size_t)S * 4);
        make_docs(hdoc, S, S / 8.0, 0);
        d.q_doc = d.k_doc = hdoc;
        dg.q_doc = dg.k_doc = dev_docs(1, S, S / 8.0);
    }
    const size_t nq = (size_t)S * 4 * D, nk = (size_t)S * 2 * D, nl = (size_t)4 * S;
    uint16_t *hq, *hk, *hv, *hdo;
    void *q = dev_random(nq, &hq), *k = dev_random(nk, &hk), *v_ = dev_random(nk, &hv), *dout = dev_random(nq, &hdo);
    uint16_t *co = malloc(nq * 2), *go = malloc(nq * 2), *cdq = malloc(nq * 2), *cdk = malloc(nk * 2), *cdv = malloc(nk * 2);
    float *cl = malloc(nl * 4);
    if (dfa_attn_fwd(&d, hq, hk, hv, co, cl) || dfa_attn_bwd(&d, hq, hk, hv, co, cl, hdo, cdq, cdk, cdv)) {
        fprintf(stderr, "lab: CPU reference failed: %s\n", dfa_last_error());
        exit(1);
    }
    void *o, *dq, *dk, *dv;
    float *lse;
    LAB_CUDA(cudaMalloc(&o, nq * 2)); LAB_CUDA(cudaMalloc(&dq, nq * 2));
    LAB_CUDA(cudaMalloc(&dk, nk * 2)); LAB_CUDA(cudaMalloc(&dv, nk * 2)); LAB_CUDA(cudaMalloc((void **)&lse, nl * 4));
    LAB_CUDA(cudaMemset(o, 0xff, nq * 2));
    double worst = 0;
    if (run_fwd(v, &dg, q, k, v_, o, lse)) {
        fprintf(stderr, "lab: %s: %s\n", v->name, dfa_last_error());
        return INFINITY;
    }
    LAB_CUDA(cudaDeviceSynchronize());
    LAB_CUDA(cudaMemcpy(go, o, nq * 2, cudaMemcpyDeviceToHost));
    worst = rel_diff(go, co, nq);
    if (v->bwd) {
        /* the CPU's o and lse feed both backwards, so only the backward is compared */
        LAB_CUDA(cudaMemcpy(o, co, nq * 2, cudaMemcpyHostToDevice));
        LAB_CUDA(cudaMemcpy(lse, cl, nl * 4, cudaMemcpyHostToDevice));
        LAB_CUDA(cudaMemset(dq, 0xff, nq * 2)); LAB_CUDA(cudaMemset(dk, 0xff, nk * 2)); LAB_CUDA(cudaMemset(dv, 0xff, nk * 2));
        if (run_bwd(v, &dg, q, k, v_, o, lse, dout, dq, dk, dv)) {
            fprintf(stderr, "lab: %s: %s\n", v->name, dfa_last_error());
            return INFINITY;
        }
        LAB_CUDA(cudaDeviceSynchronize());
        LAB_CUDA(cudaMemcpy(go, dq, nq * 2, cudaMemcpyDeviceToHost));
        double e = rel_diff(go, cdq, nq);
        LAB_CUDA(cudaMemcpy(go, dk, nk * 2, cudaMemcpyDeviceToHost));
        e = fmax(e, rel_diff(go, cdk, nk));
        LAB_CUDA(cudaMemcpy(go, dv, nk * 2, cudaMemcpyDeviceToHost));
        worst = fmax(e, rel_diff(go, cdv, nk));
    }
    cudaFree(q); cudaFree(k); cudaFree(v_); cudaFree(dout); cudaFree(o); cudaFree(dq); cudaFree(dk); cudaFree(dv);
    cudaFree(lse);
    cudaFree((void *)dg.q_doc);
    free(hdoc);
    free(hq); free(hk); free(hv); free(hdo); free(co); free(go); free(cdq); free(cdk); free(cdv); free(cl);
    return worst;
}

/* FLOPs of the variant's pass on the bench shape (h = 4096/D heads, b = max(1, 32768/S)). */
static double bench_flops(const variant *v, int D, int S, int causal) {
    const int h = 4096 / D, b = S >= 32768 ? 1 : 32768 / S;
    if (g_docs && causal) return 4.0 * h * doc_pairs(b, S) * D * (v->bwd ? 2.5 : 1.0);
    const double W = g_window, pairs = causal && g_window && g_window < S ? W * (W + 1) / 2 + (S - W) * (W + 1)
                                       : (double)S * S * (causal ? 0.5 : 1.0);
    return 4.0 * b * h * pairs * D * (v->bwd ? 2.5 : 1.0);
}

static int cmpf(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of the variant's pass (forward, or backward alone) on the bench shape. */
static float timeit(const variant *v, int D, int S, int causal, int reps) {
    const int h = 4096 / D, b = S >= 32768 ? 1 : 32768 / S;
    dfa_attn_desc d = dfa_attn_desc_init(b, S, S, h, h, D);
    d.dtype = DFA_BF16;
    d.causal = causal;
    d.flags = v->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    d.softcap = g_softcap;
    set_window(&d, S, 0);
    if (causal) d.q_doc = d.k_doc = dev_docs(b, S, g_docs);
    const size_t n = (size_t)b * S * h * D;
    void *q = dev_random(n, NULL), *k = dev_random(n, NULL), *vv = dev_random(n, NULL), *dout = dev_random(n, NULL);
    void *o, *dq, *dk, *dv;
    float *lse;
    LAB_CUDA(cudaMalloc(&o, n * 2)); LAB_CUDA(cudaMalloc(&dq, n * 2)); LAB_CUDA(cudaMalloc(&dk, n * 2));
    LAB_CUDA(cudaMalloc(&dv, n * 2)); LAB_CUDA(cudaMalloc((void **)&lse, (size_t)b * h * S * 4));
    cudaEvent_t e0, e1;
    LAB_CUDA(cudaEventCreate(&e0));
    LAB_CUDA(cudaEventCreate(&e1));
    float ts[64];
    if (reps > 64) reps = 64;
    if (run_fwd(v, &d, q, k, vv, o, lse)) {
        fprintf(stderr, "lab: %s: %s\n", v->name, dfa_last_error());
        return NAN;
    }
    for (int r = -2; r < reps; r++) {
        LAB_CUDA(cudaEventRecord(e0, 0));
        const dfa_status st = v->bwd ? run_bwd(v, &d, q, k, vv, o, lse, dout, dq, dk, dv)
                                     : run_fwd(v, &d, q, k, vv, o, lse);
        LAB_CUDA(cudaEventRecord(e1, 0));
        LAB_CUDA(cudaEventSynchronize(e1));
        if (st) {
            fprintf(stderr, "lab: %s: %s\n", v->name, dfa_last_error());
            return NAN;
        }
        if (r >= 0) LAB_CUDA(cudaEventElapsedTime(&ts[r], e0, e1));
    }
    qsort(ts, (size_t)reps, sizeof(float), cmpf);
    cudaFree(q); cudaFree(k); cudaFree(vv); cudaFree(dout); cudaFree(o); cudaFree(dq); cudaFree(dk); cudaFree(dv);
    cudaFree(lse);
    cudaFree((void *)d.q_doc);
    return ts[reps / 2];
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s) return -1;
        if (*end == 'k') { x *= 1024; end++; }
        out[n++] = (int)x;
        if (*end == ',') end++;
        s = end;
    }
    return n;
}

/* Does the variant's name contain one of the comma-separated substrings of `only` (NULL: all)? */
static int selected(const variant *v, const char *only) {
    if (!only) return 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", only);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
        if (strstr(v->name, t)) return 1;
    return 0;
}

static int cmpd(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MAX_ROUNDS 16

int main(int argc, char **argv) {
    int dims[4] = {128}, nd = 1, seqs[8] = {8192, 32768}, ns = 2, causals[2] = {1}, nc = 1, check_s = 1000, reps = 5;
    int rounds = 1;
    const char *only = NULL;
    const int nlib = (int)(sizeof library_rows / sizeof library_rows[0]);
    for (int i = 0; i < nlib; i++) variants[nvariants++] = library_rows[i];
    for (int i = 0; i < lab_variant_count() && nvariants < MAX_VARIANTS; i++) {
        const lab_variant *r = lab_variant_at(i);
        const variant v = {r->name, DFA__FAMILY_WGMMA, r->bwd, r->deterministic, i, r->check_min};
        variants[nvariants++] = v;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < nvariants; i++) printf("%s\n", variants[i].name);
        return 0;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dims")) nd = parse_list(argv[i + 1], dims, 4);
        else if (!strcmp(argv[i], "--seqlens")) ns = parse_list(argv[i + 1], seqs, 8);
        else if (!strcmp(argv[i], "--causal")) nc = parse_list(argv[i + 1], causals, 2);
        else if (!strcmp(argv[i], "--check")) check_s = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
        else if (!strcmp(argv[i], "--window")) g_window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--docs")) g_docs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--softcap")) g_softcap = (float)atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: dfa_lab_cuda [--dims 128] [--seqlens 8k,32k] [--causal 1] [--check 1000] "
                            "[--reps 5] [--rounds 1] [--only 'fwd wgmma,bwd wgmma atomic'] [--window W] [--docs M] "
                            "[--softcap C] [--list]\n");
            return 2;
        }
    }
    if (nd < 1 || ns < 1 || nc < 1 || reps < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "lab: bad lists, --reps or --rounds (1..%d)\n", MAX_ROUNDS);
        return 2;
    }
    uint64_t keep = UINT64_MAX;
    cudaMemPool_t pool;
    LAB_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
    LAB_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    if (rounds == 1) { /* each variant in turn over every shape */
        printf("%-22s %4s %6s %2s | %10s | %9s %8s\n", "variant", "d", "S", "c", "rel diff", "ms", "TFLOP/s");
        for (int vi = 0; vi < nvariants; vi++) {
            const variant *v = &variants[vi];
            if (!selected(v, only)) continue;
            set_variant(v);
            for (int di = 0; di < nd; di++)
                for (int ci = 0; ci < nc; ci++) {
                    const double diff = check(v, dims[di], check_s, causals[ci]);
                    for (int si = 0; si < ns; si++) {
                        const int D = dims[di], S = seqs[si], causal = causals[ci];
                        const float ms = timeit(v, D, S, causal, reps);
                        const double fl = bench_flops(v, D, S, causal);
                        printf("%-22s %4d %6d %2d | %10.2e | %9.3f %8.1f\n", v->name, D, S, causal, diff, ms,
                               fl / (ms * 1e-3) / 1e12);
                        fflush(stdout);
                    }
                }
        }
        return 0;
    }
    /* Interleaved rounds: per shape, every selected variant once per round, so that a drift of
       the GPU (clocks, temperature) between variants averages out; the median round is printed
       with the spread (max - min) / median of the rounds. */
    printf("%-22s %4s %6s %2s | %10s | %9s %8s %7s  (%d interleaved rounds)\n", "variant", "d", "S", "c", "rel diff",
           "ms", "TFLOP/s", "spread", rounds);
    static double diffs[MAX_VARIANTS], ms[MAX_VARIANTS][MAX_ROUNDS];
    for (int di = 0; di < nd; di++)
        for (int ci = 0; ci < nc; ci++) {
            for (int vi = 0; vi < nvariants; vi++)
                if (selected(&variants[vi], only)) {
                    set_variant(&variants[vi]);
                    diffs[vi] = check(&variants[vi], dims[di], check_s, causals[ci]);
                }
            for (int si = 0; si < ns; si++) {
                const int D = dims[di], S = seqs[si], causal = causals[ci];
                for (int r = 0; r < rounds; r++)
                    for (int vi = 0; vi < nvariants; vi++)
                        if (selected(&variants[vi], only)) {
                            set_variant(&variants[vi]);
                            ms[vi][r] = timeit(&variants[vi], D, S, causal, reps);
                        }
                for (int vi = 0; vi < nvariants; vi++) {
                    const variant *v = &variants[vi];
                    if (!selected(v, only)) continue;
                    double t[MAX_ROUNDS];
                    memcpy(t, ms[vi], sizeof(double) * (size_t)rounds);
                    qsort(t, (size_t)rounds, sizeof(double), cmpd);
                    const double med = t[rounds / 2];
                    const double fl = bench_flops(v, D, S, causal);
                    printf("%-22s %4d %6d %2d | %10.2e | %9.3f %8.1f %6.1f%%\n", v->name, D, S, causal, diffs[vi], med,
                           fl / (med * 1e-3) / 1e12, 100.0 * (t[rounds - 1] - t[0]) / med);
                    fflush(stdout);
                }
            }
        }
    return 0;
}
