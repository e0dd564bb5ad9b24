/* distflash bench: forward/backward speed and peak memory of the CPU kernels
 * beside the naive materialising implementation, as a table (--device cuda hands
 * over to the CUDA bench). Every pass runs in its own forked child: its peak
 * resident memory (ru_maxrss) minus the resident size after its inputs and
 * outputs were written is what it needed; times are the median of the repeats
 * after warm-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_passes.h"
#include "cli_values.h"
#include "commands.h"
#include "fma_peak.h"
#include "measure.h"
#include "naive_attn.h"

#define MAX_LIST 16
#define MAX_VALUE (1L << 30) /* of any size option */

typedef struct {
    int n;
    int v[MAX_LIST];
} int_list;

/* a comma-separated list of sizes (k = 1024); returns 0 when val is not one */
static int get_list(const char *val, int_list *l) {
    const int n = cli_size_list(val, 0, MAX_VALUE, l->v, MAX_LIST);
    if (n < 0) return 0;
    l->n = n;
    return 1;
}
/* *dst = the size in val if it is >= min; returns 0 otherwise */
static int get_int(const char *val, int *dst, int min) { return cli_size(val, min, MAX_VALUE, dst) == 0; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: distflash bench [--device cpu|cuda] [options]\n"
            "  -b, --batch B          batch (1)\n"
            "  -H, --heads H          query heads (8)\n"
            "      --kv-heads N       key/value heads (= heads)\n"
            "  -s, --seqlen LIST      sequence lengths, comma separated, k = 1024 (4k)\n"
            "  -d, --head-dim LIST    head dims (128)\n"
            "      --causal LIST      0, 1 or 0,1 (1)\n"
            "      --dtype LIST       f32, bf16, f16 (f32)\n"
            "  -t, --threads N        threads (0: the OpenMP default)\n"
            "  -r, --repeats N        timed runs per pass, median reported (3)\n"
            "      --warmup N         untimed runs first (1)\n"
            "      --no-bwd           forward only\n"
            "      --no-naive         skip the naive implementation\n"
            "      --naive-max-gib G  run the naive pass only if its scratch fits in G GiB (4)\n"
            "      --peak             only measure this machine's float32 FMA peak\n"
            "      --peak-gflops X    use X as the peak instead of measuring it\n"
            "      --wait-idle S      before each pass wait up to S seconds for the machine to be idle\n"
            "The 'other CPUs' column: how many CPUs other processes kept busy during the row's passes\n"
            "(from /proc/stat); anything well above 0 means the row was measured under contention.\n");
}

typedef struct {
    int threads;
    double seconds;
    fma_peak_result res[3];
    int n;
} peak_job;

static void run_peak(void *arg, measure_result *r) {
    peak_job *p = arg;
    fma_peak_result res[3];
    const int n = fma_peak_measure(p->threads, p->seconds, res);
    for (int i = 0; i < n; i++) r->value[i] = res[i].gflops;
    r->reps = n;
    r->ok = 1;
}

/* Measures the peak in a child (OpenMP must not start in this process before the forks). */
static double measure_peak(int threads, int verbose) {
    peak_job job = {threads, 1.5, {{0}}, 0};
    measure_result r;
    memset(&r, 0, sizeof r);
    double kib;
    double other = -1;
    if (measure_in_child(run_peak, &job, &r, &kib, &other) != 0) return 0;
    static const char *names[3] = {"avx512", "avx2", "scalar"};
    /* the child fills the ISAs it has, in this order, always ending with scalar */
    const int have512 = r.reps == 3, have2 = r.reps >= 2;
    double best = 0;
    int i = 0;
    if (verbose) printf("  (other processes kept %.2f CPUs busy during the peak measurement)\n", other);
    for (int t = 0; t < 3; t++) {
        if ((t == 0 && !have512) || (t == 1 && !have2)) continue;
        if (verbose) printf("  f32 FMA peak, %-6s : %7.1f GFLOP/s\n", names[t], r.value[i]);
        best = r.value[i] > best ? r.value[i] : best;
        i++;
    }
    return best;
}

static void print_header(int threads, const char *argv0_line) {
    char model[256], load[128], date[64];
    measure_cpu_model(model, sizeof model);
    measure_loadavg(load, sizeof load);
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("distflash bench (cpu) %s\n", dfa_version_string());
    char thr[32];
    if (threads) snprintf(thr, sizeof thr, "%d", threads);
    else snprintf(thr, sizeof thr, "OpenMP default");
    printf("  date %s; %s; isa %s; threads %s; loadavg %s\n", date, model, dfa_cpu_isa(), thr, load);
    printf("  command: %s\n", argv0_line);
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cuda")) return cmd_bench_cuda(argc, argv);

    int batch = 1, heads = 8, kv_heads = 0, threads = 0, reps = 3, warmup = 1, no_bwd = 0, no_naive = 0;
    int peak_only = 0;
    double naive_max_gib = 4.0, peak = 0, wait_idle = 0;
    int_list seqlens = {1, {4096}}, dims = {1, {128}}, causals = {1, {1}};
    dfa_dtype dtypes[MAX_LIST] = {DFA_F32};
    int ndtypes = 1;
    char cmdline[1024] = "distflash";
    for (int i = 0; i < argc; i++)
        snprintf(cmdline + strlen(cmdline), sizeof cmdline - strlen(cmdline), " %s", argv[i]);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1, used = 1;
#define IS(s, l) (!strcmp(a, s) || !strcmp(a, l))
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--device")) {
            ok = val && !strcmp(val, "cpu");
        } else if (IS("-b", "--batch")) {
            ok = get_int(val, &batch, 1);
        } else if (IS("-H", "--heads")) {
            ok = get_int(val, &heads, 1);
        } else if (!strcmp(a, "--kv-heads")) {
            ok = get_int(val, &kv_heads, 1);
        } else if (IS("-s", "--seqlen")) {
            ok = get_list(val, &seqlens);
        } else if (IS("-d", "--head-dim")) {
            ok = get_list(val, &dims);
        } else if (!strcmp(a, "--causal")) {
            ok = get_list(val, &causals);
        } else if (!strcmp(a, "--dtype")) {
            ok = (ndtypes = cli_dtype_list(val, dtypes, MAX_LIST)) > 0;
        } else if (IS("-t", "--threads")) {
            ok = get_int(val, &threads, 0);
        } else if (IS("-r", "--repeats")) {
            ok = get_int(val, &reps, 1) && reps <= MEASURE_MAX_REPS;
        } else if (!strcmp(a, "--warmup")) {
            ok = get_int(val, &warmup, 0);
        } else if (!strcmp(a, "--naive-max-gib")) {
            ok = val && (naive_max_gib = atof(val)) >= 0;
        } else if (!strcmp(a, "--wait-idle")) {
            ok = val && (wait_idle = atof(val)) >= 0;
        } else if (!strcmp(a, "--peak-gflops")) {
            ok = val && (peak = atof(val)) > 0;
        } else {
            used = 0;
            if (!strcmp(a, "--no-bwd")) no_bwd = 1;
            else if (!strcmp(a, "--no-naive")) no_naive = 1;
            else if (!strcmp(a, "--peak")) peak_only = 1;
            else ok = 0;
        }
#undef IS
        if (!ok) {
            fprintf(stderr, "distflash bench: bad or missing value for '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i += used;
    }
    if (!kv_heads) kv_heads = heads;

    print_header(threads, cmdline);
    if (peak_only) {
        measure_peak(threads, 1);
        return 0;
    }
    if (peak <= 0) peak = measure_peak(threads, 1);
    else printf("  f32 FMA peak (given): %.1f GFLOP/s\n", peak);
    printf("  FLOPs: fwd 4*B*H*S*S*D (halved when causal), bwd 2.5x fwd; %%peak of the f32 FMA peak above;\n"
           "  MiB: peak resident memory of the pass above its inputs and outputs; median of %d after %d warm-up\n\n",
           reps, warmup);

    printf("| B | H | Hkv | S | D | causal | dtype | fwd ms | fwd GFLOP/s | fwd %%peak | fwd MiB | bwd ms | bwd GFLOP/s "
           "| bwd %%peak | bwd MiB | naive fwd ms | naive fwd GFLOP/s | naive fwd MiB | naive bwd ms | naive bwd "
           "GFLOP/s | naive bwd MiB | other CPUs |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int failures = 0;
    for (int ti = 0; ti < ndtypes; ti++)
        for (int di = 0; di < dims.n; di++)
            for (int si = 0; si < seqlens.n; si++)
                for (int ci = 0; ci < causals.n; ci++) {
                    dfa_attn_desc d = dfa_attn_desc_init(batch, seqlens.v[si], seqlens.v[si], heads, kv_heads, dims.v[di]);
                    d.dtype = dtypes[ti];
                    d.causal = causals.v[ci] != 0;
                    printf("| %d | %d | %d | %d | %d | %d | %s ", batch, heads, kv_heads, d.seqlen_q, d.head_dim,
                           d.causal, cli_dtype_name(d.dtype));
                    fflush(stdout);
                    double other_max = -1;
                    for (int kind = 0; kind < 4; kind++) {
                        const int is_bwd = kind == PASS_FLASH_BWD || kind == PASS_NAIVE_BWD;
                        const int is_naive = kind >= PASS_NAIVE_FWD;
                        char b1[32];
                        if ((is_bwd && no_bwd) || (is_naive && no_naive)) {
                            printf(is_naive ? "| - | - | - " : "| - | - | - | - ");
                            continue;
                        }
                        if (is_naive) {
                            const double need = is_bwd ? naive_bwd_bytes(&d) : naive_fwd_bytes(&d);
                            if (need > naive_max_gib * 1024 * 1024 * 1024) {
                                printf("| not run | needs %s | - ", pass_bytes_str(need, b1, sizeof b1));
                                continue;
                            }
                        }
                        const pass_job job = {d, (pass_kind)kind, threads, warmup, reps, 0};
                        if (wait_idle > 0) measure_wait_idle(wait_idle);
                        const pass_outcome r = pass_measure(&job);
                        if (r.ran && r.other_cpus > other_max) other_max = r.other_cpus;
                        if (!r.ran) {
                            failures++;
                            printf(is_naive ? "| %s | - | - " : "| %s | - | - | - ", r.why);
                        } else if (is_naive) {
                            printf("| %.1f | %.1f | %.0f ", r.median_s * 1e3, r.gflops, r.extra_mib);
                        } else {
                            printf("| %.1f | %.1f | %.0f%% | %.0f ", r.median_s * 1e3, r.gflops, 100.0 * r.gflops / peak,
                                   r.extra_mib);
                        }
                        fflush(stdout);
                    }
                    if (other_max >= 0) printf("| %.2f |\n", other_max);
                    else printf("| ? |\n");
                }
    char load[128];
    measure_loadavg(load, sizeof load);
    printf("\nloadavg at the end: %s\n", load);
    return failures ? 1 : 0;
}
