/* `distflash bench --device cuda`: TFLOP/s of the CUDA forward and
 * forward+backward and peak device memory, over head dims, sequence lengths
 * and masks (defaults: the shapes of the peer anchors, h = 4096/d heads and
 * b = max(1, 32768/S) sequences). FLOPs as in DESIGN.md: forward 4 b h S^2 d,
 * halved when causal; forward+backward 3.5x that. Times are medians of CUDA
 * event timings after warm-up. `--fit S` checks that a forward+backward with
 * 32 heads x 128 at sequence length S fits in device memory.
 *
 * The shapes users and the distributed schedule run besides the square ones: `--kv-ratio`
 * (GQA: h / ratio key/value heads) and `--blocks` (causal only): `below`, a chunk of queries
 * against an earlier chunk of keys (q_start = S, k_start = 0: every key visible), and `half`,
 * the balanced schedule's half-height window (the last S/2 query rows of a chunk against its S
 * keys). FLOPs count the visible pairs, so a block kind runs "as fast as a square one" when
 * its TFLOP/s match the square row's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

#ifndef DFA_HAVE_CUDA
int cmd_bench_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "distflash: bench --device cuda: this build has no CUDA support "
                    "(configure with nvcc on the PATH, or -DDFA_WITH_CUDA=ON)\n");
    return 2;
}
#else

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>

#include "cli_values.h"
#include "distflash_cuda.h"
#include "cuda_fill.h"
#include "measure.h"

#define BENCH_CUDA(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "distflash bench: %s failed: %s\n", #call, cudaGetErrorString(e_));            \
            return -1;                                                                                     \
        }                                                                                                  \
    } while (0)

enum { BLOCK_SQUARE, BLOCK_BELOW, BLOCK_HALF, NBLOCK_KINDS };
static const char *const block_names[NBLOCK_KINDS] = {"square", "below", "half"};

typedef struct {
    int dims[4], ndims;
    int seqs[8], nseqs;
    int causals[2], ncausals;
    int ratios[4], nratios;
    int blocks[NBLOCK_KINDS], nblocks;
    int warmup, reps, deterministic, fit;
    dfa_dtype dtype;
    const char *json;
} bench_opts;

#define MAX_VALUE (1L << 30) /* of any size in a list */

static void usage(FILE *f) {
    fprintf(f, "usage: distflash bench --device cuda [--dims 64,128] [--seqlens 2k,8k,32k] [--causal 0,1]\n"
               "                       [--kv-ratio 1,4,8] [--blocks square,below,half]\n"
               "                       [--dtype bf16|f16] [--warmup 3] [--reps 10] [--deterministic]\n"
               "                       [--json FILE] [--fit S|auto]\n"
               "  TFLOP/s of forward and forward+backward, peak device memory; heads = 4096/d,\n"
               "  batch = max(1, 32768/S). --kv-ratio: heads / kv heads (GQA). --blocks (causal rows\n"
               "  only): below = queries after all S keys, half = the last S/2 rows of a chunk against its\n"
               "  S keys; FLOPs over visible pairs. --fit S: does fwd+bwd at 32 heads x 128, batch 1, length S fit?\n"
               "  (--fit auto: the longest S the memory model allows, then checked)\n"
               "  The library's kernels only; kernel families and variants side by side: dfa_lab_cuda.\n");
}

/* bench_cuda_fill_random with this command's error policy (print, return -1). */
static int fill_random(void *dst, size_t bytes, dfa_dtype t, uint64_t seed) {
    BENCH_CUDA(bench_cuda_fill_random(t, dst, bytes, seed));
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
    size_t bytes;
} buffers;

static void free_buffers(buffers *b) {
    void *p[] = {b->q, b->k, b->v, b->o, b->dout, b->dq, b->dk, b->dv, b->lse};
    for (int i = 0; i < 9; i++) if (p[i]) cudaFree(p[i]);
    memset(b, 0, sizeof *b);
}

static int alloc_buffers(buffers *b, const dfa_attn_desc *d) {
    memset(b, 0, sizeof *b);
    const size_t es = 2;
    const size_t nq = (size_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim * es;
    const size_t nk = (size_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim * es;
    const size_t nl = (size_t)d->batch * d->num_heads * d->seqlen_q * 4;
    void **qs[] = {&b->q, &b->o, &b->dout, &b->dq}, **ks[] = {&b->k, &b->v, &b->dk, &b->dv};
    for (int i = 0; i < 4; i++)
        if (cudaMalloc(qs[i], nq) != cudaSuccess || cudaMalloc(ks[i], nk) != cudaSuccess) goto oom;
    if (cudaMalloc((void **)&b->lse, nl) != cudaSuccess) goto oom;
    b->bytes = 4 * nq + 4 * nk + nl;
    return 0;
oom:
    (void)cudaGetLastError();
    free_buffers(b);
    return -1;
}

/* Median milliseconds of `reps` timed runs of fwd (mode 0) or fwd+bwd (mode 1). */
static int time_it(const dfa_attn_desc *d, buffers *b, int mode, int warmup, int reps, float *ms_out) {
    cudaEvent_t e0, e1;
    BENCH_CUDA(cudaEventCreate(&e0));
    BENCH_CUDA(cudaEventCreate(&e1));
    float *ts = malloc(sizeof(float) * (size_t)reps);
    for (int r = -warmup; r < reps; r++) {
        BENCH_CUDA(cudaEventRecord(e0, 0));
        dfa_status st = dfa_attn_fwd_cuda(d, b->q, b->k, b->v, b->o, b->lse, 0);
        if (!st && mode) st = dfa_attn_bwd_cuda(d, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv, 0);
        if (st) {
            fprintf(stderr, "distflash bench: %s: %s\n", dfa_status_string(st), dfa_last_error());
            free(ts);
            return -1;
        }
        BENCH_CUDA(cudaEventRecord(e1, 0));
        BENCH_CUDA(cudaEventSynchronize(e1));
        if (r >= 0) BENCH_CUDA(cudaEventElapsedTime(&ts[r], e0, e1));
    }
    qsort(ts, (size_t)reps, sizeof(float), cmp_float);
    *ms_out = ts[reps / 2];
    free(ts);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

static int pool_setup(cudaMemPool_t *pool) {
    int dev;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetDefaultMemPool(pool, dev));
    uint64_t keep = UINT64_MAX; /* keep scratch in the pool between calls, as a framework would */
    BENCH_CUDA(cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return 0;
}

static uint64_t pool_high(cudaMemPool_t pool, int reset) {
    uint64_t v = 0;
    if (reset) {
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v);
        cudaMemPoolTrimTo(pool, 0);
        return 0;
    }
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v);
    return v;
}

/* Device bytes one token of a 32 x 128 forward+backward takes: q, k, v, o, dout, dq, dk, dv,
   lse, and the backward's scratch. */
static double bytes_per_token(const bench_opts *o) {
    dfa_attn_desc d = dfa_attn_desc_init(1, 1 << 20, 1 << 20, 32, 32, 128);
    d.dtype = o->dtype;
    d.flags = o->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    return 8.0 * 32 * 128 * 2 + 32 * 4 + (double)dfa_attn_bwd_cuda_scratch_bytes(&d) / (1 << 20);
}

/* "square,below,half" -> block kinds; -1 on an unknown name. */
static int parse_blocks(const char *s, int *out) {
    int n = 0;
    while (*s && n < NBLOCK_KINDS) {
        const size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < NBLOCK_KINDS; i++)
            if (strlen(block_names[i]) == len && !strncmp(s, block_names[i], len)) k = i;
        if (k < 0) return -1;
        out[n++] = k;
        s += len;
        if (*s == ',') s++;
    }
    return *s ? -1 : n;
}

/* Visible (query, key) pairs of one head of a block kind with S keys, in DESIGN.md's convention
   (a causal square counts S^2 / 2, not S (S + 1) / 2): the last S/2 rows of a causal chunk see
   3 S^2 / 8, a block below the diagonal S^2. */
static double visible_pairs(int kind, int S, int causal) {
    const double s = S;
    if (!causal || kind == BLOCK_BELOW) return s * s;
    return kind == BLOCK_HALF ? 0.375 * s * s : 0.5 * s * s;
}

static int run_fit(const bench_opts *o, cudaMemPool_t pool) {
    size_t free0 = 0, total0 = 0;
    BENCH_CUDA(cudaMemGetInfo(&free0, &total0));
    const double per = bytes_per_token(o);
    /* --fit auto: the longest length (a multiple of 1024) whose bytes fit in free memory
       less 1 GiB of headroom for the context, the pool's granularity and fragmentation */
    const int S = o->fit > 0 ? o->fit : (int)(((double)free0 - (double)(1u << 30)) / per / 1024) * 1024;
    printf("fit model: %.0f bytes per token (%s) -> %d tokens in %.2f GiB free\n", per,
           o->deterministic ? "deterministic dq" : "f32 dq accumulator", S, free0 / (double)(1 << 30));
    dfa_attn_desc d = dfa_attn_desc_init(1, S, S, 32, 32, 128);
    d.dtype = o->dtype;
    d.causal = 1;
    d.k_start = S; /* every row fully masked: the kernels skip all tiles, memory is the same */
    d.flags = o->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    size_t free_b = 0, total_b = 0;
    BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
    buffers b;
    const size_t scratch = dfa_attn_bwd_cuda_scratch_bytes(&d);
    printf("fit check: S=%d, 32 heads x 128, %s%s: buffers %.2f GiB + scratch %.2f GiB; device free %.2f of %.2f GiB\n",
           S, cli_dtype_name(o->dtype), o->deterministic ? ", deterministic" : "",
           (16.0 * S * 4096 + 128.0 * S) / (1 << 30), scratch / (double)(1 << 30), free_b / (double)(1 << 30),
           total_b / (double)(1 << 30));
    if (alloc_buffers(&b, &d)) {
        printf("fit check: the buffers do not fit\n");
        return 1;
    }
    pool_high(pool, 1);
    dfa_status st = dfa_attn_fwd_cuda(&d, b.q, b.k, b.v, b.o, b.lse, 0);
    if (!st) st = dfa_attn_bwd_cuda(&d, b.q, b.k, b.v, b.o, b.lse, b.dout, b.dq, b.dk, b.dv, 0);
    const cudaError_t e = cudaDeviceSynchronize();
    printf("fit check: %s (%s)%s; peak %.2f GiB\n", st == DFA_OK && e == cudaSuccess ? "fits" : "does NOT fit",
           dfa_status_string(st), e == cudaSuccess ? "" : cudaGetErrorString(e),
           (b.bytes + pool_high(pool, 0)) / (double)(1 << 30));
    free_buffers(&b);
    return st == DFA_OK && e == cudaSuccess ? 0 : 1;
}

/* One row of the table: head dim D, length S, causal or not, heads / kv heads = ratio, a block
   kind; 0 when it ran (or was skipped), 1 when it could not, -1 on a CUDA failure. */
static int bench_one(const bench_opts *o, cudaMemPool_t pool, FILE *js, int *first, int D, int S, int causal,
                     int ratio, int kind) {
    const int h = 4096 / D, b = S >= 32768 ? 1 : 32768 / S;
    if (h % ratio) {
        printf("%4d %6d: %d heads do not divide by --kv-ratio %d: skipped\n", D, S, h, ratio);
        return 0;
    }
    if (!causal && kind != BLOCK_SQUARE) return 0; /* without causality every block is a square */
    const int hkv = h / ratio, rows = kind == BLOCK_HALF ? S - S / 2 : S;
    dfa_attn_desc d = dfa_attn_desc_init(b, rows, S, h, hkv, D);
    d.dtype = o->dtype;
    d.causal = causal;
    d.q_start = kind == BLOCK_BELOW ? S : kind == BLOCK_HALF ? S / 2 : 0;
    d.flags = o->deterministic ? DFA_FLAG_DETERMINISTIC : 0;
    buffers bf;
    if (alloc_buffers(&bf, &d)) {
        printf("%4d %6d: buffers do not fit\n", D, S);
        return 1;
    }
    const size_t nq = (size_t)b * rows * h * D * 2, nk = (size_t)b * S * hkv * D * 2;
    if (fill_random(bf.q, nq, d.dtype, 1) || fill_random(bf.k, nk, d.dtype, 2) ||
        fill_random(bf.v, nk, d.dtype, 3) || fill_random(bf.dout, nq, d.dtype, 4)) {
        free_buffers(&bf);
        return -1;
    }
    const double flops = 4.0 * b * h * D * visible_pairs(kind, S, causal);
    float ms_f = 0, ms_fb = 0;
    pool_high(pool, 1);
    if (time_it(&d, &bf, 0, o->warmup, o->reps, &ms_f) || time_it(&d, &bf, 1, o->warmup, o->reps, &ms_fb)) {
        free_buffers(&bf);
        return 1;
    }
    const double peak = (double)(bf.bytes + pool_high(pool, 0)) / (1 << 20);
    const double tf = flops / (ms_f * 1e-3) / 1e12, tfb = 3.5 * flops / (ms_fb * 1e-3) / 1e12;
    printf("%4d %6d %3d %3d %3d %6d %6s | %9.3f %8.1f | %9.3f %8.1f | %9.0f\n", D, S, b, h, hkv, causal,
           block_names[kind], ms_f, tf, ms_fb, tfb, peak);
    fflush(stdout);
    if (js)
        fprintf(js,
                "%s {\"backend\": \"distflash\", \"d\": %d, \"s\": %d, \"b\": %d, \"h\": %d, "
                "\"kv_heads\": %d, \"block\": \"%s\", \"causal\": %s, \"fwd_ms\": %.4f, \"fwd_tflops\": %.2f, "
                "\"fwdbwd_ms\": %.4f, \"fwdbwd_tflops\": %.2f, \"peak_mib\": %.0f}\n",
                *first ? "" : ",", D, S, b, h, hkv, block_names[kind], causal ? "true" : "false", ms_f, tf,
                ms_fb, tfb, peak);
    *first = 0;
    free_buffers(&bf);
    cudaMemPoolTrimTo(pool, 0);
    return 0;
}

int cmd_bench_cuda(int argc, char **argv) {
    bench_opts o = {{64, 128}, 2, {2048, 8192, 32768}, 3, {0, 1}, 2, {1}, 1, {BLOCK_SQUARE}, 1, 3, 10, 0, 0,
                    DFA_BF16, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        dfa_dtype t;
        if (!strcmp(a, "--device")) { i++; continue; } /* cmd_bench passes it through */
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        if (!strcmp(a, "--deterministic")) { o.deterministic = 1; continue; }
        if (!val) { usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--dims")) o.ndims = cli_size_list(val, 0, MAX_VALUE, o.dims, 4);
        else if (!strcmp(a, "--seqlens")) o.nseqs = cli_size_list(val, 0, MAX_VALUE, o.seqs, 8);
        else if (!strcmp(a, "--causal")) o.ncausals = cli_size_list(val, 0, MAX_VALUE, o.causals, 2);
        else if (!strcmp(a, "--warmup")) o.warmup = atoi(val);
        else if (!strcmp(a, "--reps")) o.reps = atoi(val);
        else if (!strcmp(a, "--fit")) o.fit = !strcmp(val, "auto") ? -1 : atoi(val);
        else if (!strcmp(a, "--json")) o.json = val;
        else if (!strcmp(a, "--kv-ratio")) o.nratios = cli_size_list(val, 1, 64, o.ratios, 4);
        else if (!strcmp(a, "--blocks")) o.nblocks = parse_blocks(val, o.blocks);
        else if (!strcmp(a, "--dtype") && !cli_dtype(val, &t) && t != DFA_F32) o.dtype = t;
        else { usage(stderr); return 2; }
    }
    if (o.ndims <= 0 || o.nseqs <= 0 || o.ncausals <= 0 || o.nratios <= 0 || o.nblocks <= 0 || o.reps < 1 ||
        o.warmup < 0) {
        usage(stderr);
        return 2;
    }
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "distflash bench: no usable CUDA device\n");
        return 2;
    }
    cudaMemPool_t pool;
    if (pool_setup(&pool)) return 1;
    printf("device: %s (sm_%d%d, %d SMs, %.0f GiB); %s\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           prop.totalGlobalMem / (double)(1 << 30), dfa_version_string());
    if (o.fit) return run_fit(&o, pool);

    FILE *js = o.json ? fopen(o.json, "w") : NULL;
    if (js) fprintf(js, "[\n");
    printf("%4s %6s %3s %3s %3s %6s %6s | %9s %8s | %9s %8s | %9s\n", "d", "S", "b", "h", "kv", "causal", "block",
           "fwd ms", "TFLOP/s", "fwd+bwd", "TFLOP/s", "peak MiB");
    int first = 1, rc = 0;
    for (int di = 0; di < o.ndims; di++)
        for (int si = 0; si < o.nseqs; si++)
            for (int ci = 0; ci < o.ncausals; ci++)
                for (int ri = 0; ri < o.nratios; ri++)
                    for (int ki = 0; ki < o.nblocks; ki++) {
                        const int r = bench_one(&o, pool, js, &first, o.dims[di], o.seqs[si], o.causals[ci],
                                                o.ratios[ri], o.blocks[ki]);
                        if (r < 0) {
                            if (js) fclose(js);
                            return 1;
                        }
                        if (r) rc = 1;
                    }
    if (js) {
        fprintf(js, "]\n");
        fclose(js);
    }
    return rc;
}
#endif
