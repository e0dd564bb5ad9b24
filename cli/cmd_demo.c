/* distflash demo [attention]: the attention demo (scripts/demo --attention runs it).
 * The README's main job is the training demo, scripts/demo. Exact attention
 * on a long sequence with the CPU kernels, checked element by element against the
 * naive materialising implementation at a length where that fits, with the speed and
 * peak memory of both. Each pass runs in a forked child (bench_passes.h) so that its
 * memory is measured on its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_passes.h"
#include "cli_values.h"
#include "commands.h"
#include "naive_attn.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: distflash demo [attention] [options]\n"
            "  -s, --seqlen S        the long sequence (16384)\n"
            "      --check-seqlen S  where the naive path runs and every element is compared (2048)\n"
            "  -H, --heads H         heads (8)\n"
            "  -d, --head-dim D      head dim (128)\n"
            "      --dtype f32|bf16  storage type (f32)\n"
            "      --no-causal       full attention instead of causal\n"
            "  -t, --threads N       threads (0: the OpenMP default)\n");
}

static void print_row(const char *what, const pass_outcome *r) {
    if (r->ran)
        printf("    %-22s %9.1f ms %8.1f GFLOP/s %9.0f MiB\n", what, r->median_s * 1e3, r->gflops, r->extra_mib);
    else
        printf("    %-22s %s\n", what, r->why);
}

/* err / max(1, ref_max) within tol */
static int close_enough(double err, double ref_max, double tol, const char *name) {
    const double rel = err / (ref_max > 1 ? ref_max : 1);
    const int ok = rel <= tol;
    printf("    %-4s max |flash - naive| = %.2e (max |naive| %.3g): %s\n", name, err, ref_max, ok ? "ok" : "MISMATCH");
    return ok;
}

int cmd_demo(int argc, char **argv) {
    int S = 16384, S_check = 2048, H = 8, D = 128, causal = 1, threads = 0;
    dfa_dtype dtype = DFA_F32;
    int i = 1;
    if (i < argc && !strcmp(argv[i], "attention")) i++;
    for (; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = NULL;
        dfa_dtype t;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seqlen")) dst = &S;
        else if (!strcmp(a, "--check-seqlen")) dst = &S_check;
        else if (!strcmp(a, "-H") || !strcmp(a, "--heads")) dst = &H;
        else if (!strcmp(a, "-d") || !strcmp(a, "--head-dim")) dst = &D;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) dst = &threads;
        else if (!strcmp(a, "--no-causal")) causal = 0;
        else if (!strcmp(a, "--dtype") && !cli_dtype(val, &t) && t != DFA_F16) {
            dtype = t;
            i++;
        } else {
            fprintf(stderr, "distflash demo: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (dst) {
            char *end = NULL;
            const long x = val ? strtol(val, &end, 10) : -1;
            if (!val || *end || x < (dst == &threads ? 0 : 1) || x > (1 << 24)) {
                fprintf(stderr, "distflash demo: bad value for '%s'\n", a);
                return 2;
            }
            *dst = (int)x;
            i++;
        }
    }

    {
        dfa_attn_desc check = dfa_attn_desc_init(1, S_check, S_check, H, H, D);
        check.dtype = dtype;
        if (naive_bwd_bytes(&check) > 4.0 * 1024 * 1024 * 1024) {
            fprintf(stderr, "distflash demo: --check-seqlen %d would need %.1f GiB for the naive backward (limit 4)\n",
                    S_check, naive_bwd_bytes(&check) / (1024.0 * 1024 * 1024));
            return 2;
        }
    }
    char tbuf[32];
    if (threads) snprintf(tbuf, sizeof tbuf, "%d", threads);
    else snprintf(tbuf, sizeof tbuf, "OpenMP default");
    printf("distflash demo: exact FlashAttention on the CPU (%s kernels, threads: %s)\n", dfa_cpu_isa(), tbuf);
    printf("  layout [batch, seq, heads, head_dim], B=1, H=%d, D=%d, %s, %s\n", H, D, causal ? "causal" : "full",
           cli_dtype_name(dtype));

    /* 1. every element against the naive path where it fits */
    dfa_attn_desc small = dfa_attn_desc_init(1, S_check, S_check, H, H, D);
    small.causal = causal, small.dtype = dtype;
    char b1[32], b2[32];
    printf("\n1. S = %d: the library against the naive path (which holds the full %s score matrix)\n", S_check,
           pass_bytes_str(4.0 * H * (double)S_check * S_check, b1, sizeof b1));
    const pass_job jobs[4] = {{small, PASS_FLASH_FWD, threads, 1, 3, 0},
                              {small, PASS_NAIVE_FWD, threads, 1, 3, 1},
                              {small, PASS_FLASH_BWD, threads, 1, 3, 0},
                              {small, PASS_NAIVE_BWD, threads, 1, 3, 1}};
    pass_outcome r[4];
    for (int k = 0; k < 4; k++) r[k] = pass_measure(&jobs[k]);
    const double tol = dtype == DFA_F32 ? 1e-4 : 2e-2;
    int ok = r[1].ran && r[3].ran;
    if (r[1].ran) {
        ok &= close_enough(r[1].value[0], r[1].value[1], tol, "o");
        printf("    lse  max |flash - naive| = %.2e\n", r[1].value[2]);
        ok &= r[1].value[2] <= tol * 10;
    }
    if (r[3].ran) {
        ok &= close_enough(r[3].value[0], r[3].value[1], tol, "dq");
        ok &= close_enough(r[3].value[2], r[3].value[3], tol, "dk");
        ok &= close_enough(r[3].value[4], r[3].value[5], tol, "dv");
    }
    printf("  %-24s %12s %16s %13s\n", "", "median", "", "extra memory");
    print_row("flash forward", &r[0]);
    print_row("naive forward", &r[1]);
    print_row("flash backward", &r[2]);
    print_row("naive backward", &r[3]);
    if (r[0].ran && r[1].ran)
        printf("    forward: flash is %.1fx the naive speed with %.0fx less memory\n", r[0].gflops / r[1].gflops,
               r[1].extra_mib / (r[0].extra_mib > 1 ? r[0].extra_mib : 1));

    /* 2. the long sequence, where the naive path does not fit */
    dfa_attn_desc big = small;
    big.seqlen_q = big.seqlen_k = S;
    printf("\n2. S = %d: the library alone (the naive path would need %s for the forward, %s for the backward)\n", S,
           pass_bytes_str(naive_fwd_bytes(&big), b1, sizeof b1), pass_bytes_str(naive_bwd_bytes(&big), b2, sizeof b2));
    const pass_job long_fwd = {big, PASS_FLASH_FWD, threads, 0, 1, 0}, long_bwd = {big, PASS_FLASH_BWD, threads, 0, 1, 0};
    const pass_outcome lf = pass_measure(&long_fwd), lb = pass_measure(&long_bwd);
    print_row("flash forward", &lf);
    print_row("flash backward", &lb);
    if (lf.ran)
        printf("    forward memory: %.0f MiB beside %s of inputs and outputs; the naive forward needs %.0fx more\n",
               lf.extra_mib,
               pass_bytes_str(2.0 * measure_q_bytes(&big) + 2.0 * measure_kv_bytes(&big) + measure_lse_bytes(&big), b1,
                              sizeof b1),
               naive_fwd_bytes(&big) / (lf.extra_mib * 1024 * 1024));
    ok &= lf.ran && lb.ran;
    printf("\n%s\n", ok ? "demo: OK" : "demo: FAILED");
    return ok ? 0 : 1;
}
