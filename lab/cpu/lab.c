/* cpu_lab: the CPU kernel lab driver.
 *
 *   cpu_lab [-s S] [-d D] [-H heads] [--kv-heads N] [--causal 0|1] [-t threads] [-r repeats]
 *           [--isa avx512|avx2|scalar] [--only NAME] [--skip-gemm] [--skip-fwd] [--skip-bwd]
 *
 * 1. Every usable kernel table against the scalar one on GEMMs of the attention
 *    tiles' shapes: max relative difference and single-thread GFLOP/s.
 * 2. Every forward and backward variant (lab.h) checked against the float64
 *    oracle on an awkward shape (odd lengths, GQA, causal offsets with fully
 *    masked rows), then timed on B=1, S x S: median of the repeats after one
 *    warm-up, as wall-clock GFLOP/s and as GFLOP per CPU-second (the second is
 *    steadier when other work shares the machine).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab.h"
#include "measure.h"
#include "oracle.h"

static unsigned long long rng = 88172645463325252ull;
static float frand(void) { /* roughly normal: sum of 4 uniforms, centred */
    float s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        s += (float)(rng >> 40) / (float)(1 << 24);
    }
    return (s - 2.0f) * 1.7f;
}
static float *rand_floats(size_t n) {
    float *p = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static double *to_f64(const float *p, size_t n) {
    double *x = malloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) x[i] = p[i];
    return x;
}
/* max |a - ref| / max(1, max |ref|); NaN gives inf */
static double rel_err(const float *a, const double *ref, size_t n) {
    double e = 0, m = 1;
    for (size_t i = 0; i < n; i++) {
        const double x = fabs((double)a[i] - ref[i]);
        if (!(x <= e)) e = isnan(x) ? INFINITY : x;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return e / m;
}

/* ---- 1. kernel tables ---- */
typedef struct {
    const char *op;
    int M, N, K;
} gemm_shape;

static void run_gemm(const dfa__cpu_kernels *kr, const char *op, int M, int N, int K, const float *A,
                     const float *B, float *C) {
    if (!strcmp(op, "nn")) kr->gemm_nn(M, N, K, A, K, B, N, C, N);
    else if (!strcmp(op, "nn_acc")) kr->gemm_nn_acc(M, N, K, A, K, B, N, C, N);
    else if (!strcmp(op, "tn_acc")) kr->gemm_tn_acc(M, N, K, A, M, B, N, C, N);
    else kr->gemm_nt(M, N, K, A, K, B, K, C, N);
}

static void lab_gemm(void) {
    static const gemm_shape shapes[] = {
        {"nn", 64, 48, 128},     /* fwd S^T = K Q^T, D = 128 */
        {"tn_acc", 48, 128, 64}, /* fwd O += (P^T)^T V */
        {"tn_acc", 128, 48, 64}, /* fwd O^T += V^T P^T */
        {"nn", 48, 64, 128},     /* bwd S = Q K^T, dP = dO V^T */
        {"tn_acc", 64, 128, 48}, /* bwd dV += P^T dO, dK += dS^T Q */
        {"nn_acc", 48, 128, 64}, /* bwd dQ += dS K */
        {"nt", 64, 64, 128},     /* C = A B^T */
        {"nn", 37, 29, 71},      /* odd sizes */
    };
    const dfa__cpu_kernels *tabs[] = {dfa__cpu_kernels_avx512(), dfa__cpu_kernels_avx2(), dfa__cpu_kernels_scalar()};
    printf("\n== GEMM tiles, single thread: GFLOP/s (max rel. diff vs scalar)\n%-22s", "op M x N x K");
    for (int t = 0; t < 3; t++)
        if (dfa__cpu_kernels_usable(tabs[t])) printf(" %20s", tabs[t]->name);
    printf("\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const gemm_shape g = shapes[s];
        float *A = rand_floats((size_t)g.M * g.K), *B = rand_floats((size_t)g.K * g.N * 2);
        float *C0 = rand_floats((size_t)g.M * g.N), *C = malloc(sizeof(float) * (size_t)g.M * g.N);
        float *ref = malloc(sizeof(float) * (size_t)g.M * g.N);
        memcpy(ref, C0, sizeof(float) * (size_t)g.M * g.N);
        run_gemm(dfa__cpu_kernels_scalar(), g.op, g.M, g.N, g.K, A, B, ref);
        double *ref64 = to_f64(ref, (size_t)g.M * g.N);
        printf("%-7s %4d x %3d x %3d", g.op, g.M, g.N, g.K);
        for (int t = 0; t < 3; t++) {
            if (!dfa__cpu_kernels_usable(tabs[t])) continue;
            memcpy(C, C0, sizeof(float) * (size_t)g.M * g.N);
            run_gemm(tabs[t], g.op, g.M, g.N, g.K, A, B, C);
            const double err = rel_err(C, ref64, (size_t)g.M * g.N);
            const long iters = 100000000L / ((long)g.M * g.N * g.K) + 1;
            double t0 = measure_now();
            for (long i = 0; i < iters; i++) run_gemm(tabs[t], g.op, g.M, g.N, g.K, A, B, C);
            const double dt = measure_now() - t0;
            printf(" %9.1f (%8.1e)", 2.0 * g.M * g.N * g.K * iters / dt / 1e9, err);
        }
        printf("\n");
        free(A), free(B), free(C0), free(C), free(ref), free(ref64);
    }
}

/* ---- 2. attention variants ---- */
typedef struct {
    dfa_attn_desc d;
    size_t nq, nk, nl;
    float *q, *k, *v, *dout, *o, *lse, *dq, *dk, *dv;
} problem;

static problem make_problem(dfa_attn_desc d) {
    problem p = {.d = d};
    p.nq = (size_t)d.batch * d.seqlen_q * d.num_heads * d.head_dim;
    p.nk = (size_t)d.batch * d.seqlen_k * d.num_kv_heads * d.head_dim;
    p.nl = (size_t)d.batch * d.num_heads * d.seqlen_q;
    p.q = rand_floats(p.nq), p.k = rand_floats(p.nk), p.v = rand_floats(p.nk), p.dout = rand_floats(p.nq);
    p.o = malloc(sizeof(float) * p.nq), p.lse = malloc(sizeof(float) * p.nl);
    p.dq = malloc(sizeof(float) * p.nq), p.dk = malloc(sizeof(float) * p.nk), p.dv = malloc(sizeof(float) * p.nk);
    return p;
}
static void free_problem(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->o), free(p->lse), free(p->dq), free(p->dk), free(p->dv);
}

static double flops_fwd(const dfa_attn_desc *d) {
    return 4.0 * d->batch * d->num_heads * (double)d->seqlen_q * d->seqlen_k * d->head_dim * (d->causal ? 0.5 : 1.0);
}

typedef struct {
    int threads, reps, skip_fwd, skip_bwd;
    const char *only;
} lab_opts;

static void lab_attention(const dfa__cpu_kernels *kr, dfa_attn_desc big, lab_opts op) {
    /* the check shape: odd lengths, GQA 2:1, batch 2, causal with keys starting after the
       first queries (fully masked rows) */
    dfa_attn_desc small = dfa_attn_desc_init(2, 133, 211, 4, 2, big.head_dim);
    small.causal = 1, small.q_start = 100, small.k_start = 7;
    problem cp = make_problem(small);
    double *fq = to_f64(cp.q, cp.nq), *fk = to_f64(cp.k, cp.nk), *fv = to_f64(cp.v, cp.nk), *fdo = to_f64(cp.dout, cp.nq);
    double *oref = malloc(sizeof(double) * cp.nq), *lref = malloc(sizeof(double) * cp.nl);
    double *gq = malloc(sizeof(double) * cp.nq), *gk = malloc(sizeof(double) * cp.nk), *gv = malloc(sizeof(double) * cp.nk);
    oracle_fwd(&small, fq, fk, fv, oref, lref);
    oracle_bwd(&small, fq, fk, fv, fdo, gq, gk, gv);
    for (size_t i = 0; i < cp.nl; i++) lref[i] = isinf(lref[i]) ? -1e30 : lref[i];

    problem bp = make_problem(big);
    const double ff = flops_fwd(&big);
    printf("\n== attention on table %s, %d thread(s): B=%d S=%d H=%d Hkv=%d D=%d causal=%d; check shape %s\n",
           kr->name, op.threads, big.batch, big.seqlen_q, big.num_heads, big.num_kv_heads, big.head_dim, big.causal,
           "B=2 Sq=133 Sk=211 H=4 Hkv=2 causal q_start=100 k_start=7");
    printf("%-16s %-5s %10s %10s %10s %9s  %s\n", "variant", "pass", "max err", "ms", "GFLOP/s", "GF/cpu-s", "what");
    for (int pass = 0; pass < 2; pass++) {
        const int n = pass ? lab_bwd_count : lab_fwd_count;
        if (pass ? op.skip_bwd : op.skip_fwd) continue;
        for (int vi = 0; vi < n; vi++) {
            const char *name = pass ? lab_bwd_variants[vi].name : lab_fwd_variants[vi].name;
            const char *what = pass ? lab_bwd_variants[vi].what : lab_fwd_variants[vi].what;
            if (op.only && !strstr(name, op.only)) continue;
            double err = 0;
            /* check */
            for (size_t i = 0; i < cp.nl; i++) cp.lse[i] = NAN;
            if (!pass) {
                lab_fwd_variants[vi].fwd(&small, kr, lab_fwd_variants[vi].tiles, cp.q, cp.k, cp.v, cp.o, cp.lse, op.threads);
                for (size_t i = 0; i < cp.nl; i++) cp.lse[i] = isinf(cp.lse[i]) ? -1e30f : cp.lse[i];
                err = rel_err(cp.o, oref, cp.nq);
                double le = 0;
                for (size_t i = 0; i < cp.nl; i++) le = fmax(le, fabs(cp.lse[i] - lref[i]) / (1 + fabs(lref[i])));
                err = fmax(err, isnan(le) ? INFINITY : le);
            } else {
                dfa_attn_fwd(&small, cp.q, cp.k, cp.v, cp.o, cp.lse);
                lab_bwd_variants[vi].bwd(&small, kr, lab_bwd_variants[vi].tiles, cp.q, cp.k, cp.v, cp.o, cp.lse,
                                         cp.dout, cp.dq, cp.dk, cp.dv, op.threads);
                err = fmax(rel_err(cp.dq, gq, cp.nq), fmax(rel_err(cp.dk, gk, cp.nk), rel_err(cp.dv, gv, cp.nk)));
            }
            /* time */
            double *tw = malloc(sizeof(double) * (size_t)op.reps), *tc = malloc(sizeof(double) * (size_t)op.reps);
            if (pass) dfa_attn_fwd(&big, bp.q, bp.k, bp.v, bp.o, bp.lse);
            for (int r = -1; r < op.reps; r++) {
                const double w0 = measure_now(), c0 = measure_cpu_now();
                if (!pass)
                    lab_fwd_variants[vi].fwd(&big, kr, lab_fwd_variants[vi].tiles, bp.q, bp.k, bp.v, bp.o, bp.lse, op.threads);
                else
                    lab_bwd_variants[vi].bwd(&big, kr, lab_bwd_variants[vi].tiles, bp.q, bp.k, bp.v, bp.o, bp.lse,
                                             bp.dout, bp.dq, bp.dk, bp.dv, op.threads);
                if (r >= 0) tw[r] = measure_now() - w0, tc[r] = measure_cpu_now() - c0;
            }
            const double mw = measure_median(tw, op.reps), mc = measure_median(tc, op.reps), fl = pass ? 2.5 * ff : ff;
            printf("%-16s %-5s %10.2e %10.1f %10.1f %9.1f  %s%s\n", name, pass ? "bwd" : "fwd", err, mw * 1e3,
                   fl / mw / 1e9, fl / mc / 1e9, what, err < 1e-4 ? "" : "   <-- CHECK FAILED");
            free(tw), free(tc);
        }
    }
    free_problem(&cp), free_problem(&bp);
    free(fq), free(fk), free(fv), free(fdo), free(oref), free(lref), free(gq), free(gk), free(gv);
}

int main(int argc, char **argv) {
    int S = 4096, D = 128, H = 8, Hkv = 0, causal = 1, skip_gemm = 0;
    lab_opts op = {1, 3, 0, 0, NULL};
    const char *isa = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "-s")) S = atoi(val), i++;
        else if (!strcmp(a, "-d")) D = atoi(val), i++;
        else if (!strcmp(a, "-H")) H = atoi(val), i++;
        else if (!strcmp(a, "--kv-heads")) Hkv = atoi(val), i++;
        else if (!strcmp(a, "--causal")) causal = atoi(val), i++;
        else if (!strcmp(a, "-t")) op.threads = atoi(val), i++;
        else if (!strcmp(a, "-r")) op.reps = atoi(val), i++;
        else if (!strcmp(a, "--isa")) isa = val, i++;
        else if (!strcmp(a, "--only")) op.only = val, i++;
        else if (!strcmp(a, "--skip-gemm")) skip_gemm = 1;
        else if (!strcmp(a, "--skip-fwd")) op.skip_fwd = 1;
        else if (!strcmp(a, "--skip-bwd")) op.skip_bwd = 1;
        else {
            fprintf(stderr, "usage: see the comment at the top of lab/cpu/lab.c\n");
            return 2;
        }
    }
    if (op.reps < 1) op.reps = 1;
    const dfa__cpu_kernels *kr = dfa__cpu_kernels_get();
    if (isa) {
        kr = !strcmp(isa, "avx512") ? dfa__cpu_kernels_avx512() : !strcmp(isa, "avx2") ? dfa__cpu_kernels_avx2()
                                                                                          : dfa__cpu_kernels_scalar();
        if (!dfa__cpu_kernels_usable(kr)) {
            fprintf(stderr, "cpu_lab: table %s is not usable here\n", isa);
            return 2;
        }
    }
    FILE *f = fopen("/proc/loadavg", "r");
    char load[128] = "?";
    if (f) {
        if (!fgets(load, sizeof load, f)) strcpy(load, "?\n");
        fclose(f);
    }
    printf("cpu_lab: %s; loadavg %s", dfa_version_string(), load);
    if (!skip_gemm) lab_gemm();
    dfa_attn_desc big = dfa_attn_desc_init(1, S, S, H, Hkv ? Hkv : H, D);
    big.causal = causal;
    lab_attention(kr, big, op);
    return 0;
}
