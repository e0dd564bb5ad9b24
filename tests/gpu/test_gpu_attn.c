/* The CUDA forward, backward and merge against the float64 oracle and the CPU
 * library, on fresh random inputs with poisoned outputs: sequence lengths 1, 17,
 * 128, 1000, 4097; causal masks with offsets (rows that see nothing included);
 * GQA/MQA; every head-dim class; value head dims of their own (192/128, 128/64 and dims
 * padded into those pairs; masks too); bf16 and f16; every forward kernel the device
 * has (mma.sync everywhere; wgmma on sm_90 for head dims 64, 128, 256 and 192/128),
 * forward and backward; atomic and deterministic dq. Tolerance: twice the error of a naive
 * same-precision computation plus a small absolute term (as tests/cpu).
 * The internal launchers' float32 outputs (out_f32 = 1, for the sequence-parallel
 * executor) on the same cases: at least as accurate as the 16-bit results, which
 * must be their rounding (bit for bit where no atomics sum), with the library's
 * scratch and with a caller's.
 * DFA_GPU_TEST_SMALL=1 runs a few tiny cases (for compute-sanitizer);
 * DFA_GPU_TEST_KERNEL=mma|wgmma checks one family of kernels (forward and backward),
 * through the library's test-only hook dfa__cuda_force_family (src/cuda/launch.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_values.h"
#include "cuda/launch.h"
#include "oracle.h"
#include "testlib.h"
#include "distflash_cuda.h"
#include "gpu_util.h"

static int cc;

/* The value head dim (v, o, dout, dv): head_dim_v, or head_dim where it is 0. */
static int dv_of(const dfa_attn_desc *d) { return d->head_dim_v ? d->head_dim_v : d->head_dim; }
static int rising_keys; /* keys grow along the sequence, so later key blocks raise rows' maxima */
static const char *only_kernel; /* DFA_GPU_TEST_KERNEL=mma|wgmma: check one family of kernels */
static const int families[2] = {DFA__FAMILY_MMA, DFA__FAMILY_WGMMA}; /* as kernels[] below */

/* max |got - ref| <= 2 * naive error + atol; returns the tolerance used */
static double check_close(const char *what, const char *kernel, const dfa_attn_desc *d, const void *got,
                          const void *naive, const double *ref, int64_t n) {
    const dfa_dtype t = d->dtype;
    const double err = tl_max_err(t, got, ref, n), naive_err = tl_max_err(t, naive, ref, n);
    const double tol = tl_tolerance(t, what[0] == 'd' ? TL_GRADIENT : TL_OUTPUT, naive_err, ref, n);
    CHECK(err <= tol, "%s [%s]: max error %.3g > tol %.3g (naive same-precision error %.3g) for %s", what, kernel, err,
          tol, naive_err, tl_desc_str(d));
    return tol;
}

/* The GPU result may differ from the CPU library's by the GPU's tolerance plus the CPU's own error. */
static void check_vs_cpu(const char *what, const char *kernel, const dfa_attn_desc *d, const void *got,
                         const void *cpu, const double *ref, int64_t n, double tol) {
    const dfa_dtype t = d->dtype;
    double diff = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = fabs(tl_get(t, got, i) - tl_get(t, cpu, i));
        if (!(x <= diff)) diff = x; /* NaN sticks */
    }
    const double cpu_err = tl_max_err(t, cpu, ref, n);
    CHECK(diff <= tol + cpu_err, "%s [%s]: differs from the CPU library by %.3g (> %.3g) for %s", what, kernel, diff,
          tol + cpu_err, tl_desc_str(d));
}

/* 1 when rounding the float32 values f to the storage type gives the 16-bit values h
   (compared as numbers: +0 and -0 are equal). */
static int rounds_to(dfa_dtype t, const float *f, const void *h, int64_t n) {
    void *r = tl_alloc(t, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        tl_set(t, r, i, (double)f[i]);
        bad += !(tl_get(t, r, i) == tl_get(t, h, i));
    }
    free(r);
    return bad == 0;
}

/* The forward with out_f32 = 1 through the internal launcher (the family forced by the
   caller): o in float32 at least as accurate as the 16-bit o16 (the same tolerance), o16 is
   its rounding, and lse is the same. */
static void check_fwd_f32(const dfa_attn_desc *d, const char *kernel, const void *qd, const void *kd, const void *vd,
                          const void *o16, const float *lse16, const double *oref, double tol) {
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * dv_of(d); /* o's elements */
    const int64_t nl = (int64_t)d->batch * d->num_heads * d->seqlen_q;
    dfa__cuda_shape s = dfa__cuda_shape_of(d);
    s.out_f32 = 1;
    float *od = dev_alloc(4 * (size_t)nq), *ld = dev_alloc(4 * (size_t)nl);
    float *o = malloc(4 * (size_t)nq), *l = malloc(4 * (size_t)nl);
    dev_poison(od, 4 * (size_t)nq);
    dev_poison(ld, 4 * (size_t)nl);
    const dfa_status st = dfa__cuda_fwd(&s, qd, kd, vd, od, ld, 0, "test_gpu_attn");
    CHECK(st == DFA_OK, "fwd f32 [%s] failed: %s (%s) for %s", kernel, dfa_status_string(st), dfa_last_error(),
          tl_desc_str(d));
    CUDA_OK(cudaGetLastError());
    to_host(o, od, 4 * (size_t)nq);
    to_host(l, ld, 4 * (size_t)nl);
    CHECK(tl_count_nan(DFA_F32, o, nq) == 0, "fwd f32 [%s] left %lld elements of o unwritten/NaN for %s", kernel,
          (long long)tl_count_nan(DFA_F32, o, nq), tl_desc_str(d));
    const double err = tl_max_err(DFA_F32, o, oref, nq);
    CHECK(err <= tol, "o f32 [%s]: max error %.3g > tol %.3g of the 16-bit o for %s", kernel, err, tol, tl_desc_str(d));
    CHECK(rounds_to(d->dtype, o, o16, nq), "o f32 [%s]: rounded to 16 bits it is not the 16-bit o for %s", kernel,
          tl_desc_str(d));
    CHECK(!memcmp(l, lse16, 4 * (size_t)nl), "lse [%s] differs with out_f32 for %s", kernel, tl_desc_str(d));

    CUDA_OK(cudaFree(od));
    CUDA_OK(cudaFree(ld));
    free(o);
    free(l);
}

/* One backward through the internal launcher (the family forced by the caller), outputs
   poisoned first; scratch NULL (the library's) or `scratch` (the caller's). */
static void run_bwd_internal(const dfa__cuda_shape *s, const char *kernel, const void *const ins[5], const float *lse,
                             void *const outs[3], const size_t bytes[3], void *scratch) {
    for (int i = 0; i < 3; i++) dev_poison(outs[i], bytes[i]);
    const dfa_status st = dfa__cuda_bwd(s, ins[0], ins[1], ins[2], ins[3], lse, ins[4], outs[0], outs[1], outs[2],
                                        scratch, NULL, 0, "test_gpu_attn");
    CHECK(st == DFA_OK, "bwd [%s%s%s] failed: %s (%s)", kernel, s->out_f32 ? ", f32" : "",
          scratch ? ", caller scratch" : "", dfa_status_string(st), dfa_last_error());
    CUDA_OK(cudaGetLastError());
}

/* The internal backward on the inputs of a public one (ins: q, k, v, o, dout on the device)
   whose 16-bit gradients grads16 (dq, dk, dv, on the host) passed with tolerances tol:
   the scratch size; out_f32 = 1 with the library's scratch and with a caller's (poisoned,
   guarded by a canary): gradients at least as accurate as the 16-bit ones, whose rounding
   they are (bit for bit for dk, dv and the deterministic dq; atomics sum dq in any order);
   out_f32 = 0 with a caller's scratch: the public call's gradients. */
static void check_bwd_scratch_f32(const dfa_attn_desc *d, const char *kernel, const void *const ins[5],
                                  const float *lse, const void *const grads16[3], const double *const refs[3],
                                  const double tol[3]) {
    static const char *names[3] = {"dq", "dk", "dv"};
    const dfa_dtype t = d->dtype;
    const size_t es = tl_dtype_size(t);
    const int det = (d->flags & DFA_FLAG_DETERMINISTIC) != 0;
    const int64_t n[3] = {(int64_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim,
                          (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim,
                          (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * dv_of(d)};
    const size_t rows = (size_t)d->batch * d->num_heads * d->seqlen_q, base = (8 * rows + 255) / 256 * 256;
    dfa__cuda_shape s = dfa__cuda_shape_of(d), s32 = s;
    s32.out_f32 = 1;
    /* the Hopper kernel's deterministic dq is summed in-kernel in a fixed order: the float32
       accumulator, then a counter per (batch, head, 64 query rows); mma.sync's dq pass needs neither */
    const int masked = d->q_doc != NULL || (d->flags & DFA_FLAG_WINDOW) != 0; /* masked: the dq pass */
    const int inorder = det && !masked && !strncmp(kernel, "wgmma", 5);
    const size_t sems = inorder ? 4 * (size_t)d->batch * d->num_heads * (size_t)((d->seqlen_q + 63) / 64) : 0;
    const size_t acc_end = base + (det && !inorder ? 0 : 4 * (size_t)n[0]);
    const size_t want16 = inorder ? (acc_end + 255) / 256 * 256 + sems : acc_end, want32 = base + sems;
    /* the public count: the kernel's part rounded up to 256 bytes, then the mask's intervals */
#define UP256(x) (((x) + 255) / 256 * 256)
    const size_t want_public = UP256(want16) + (masked ? UP256(8 * (size_t)d->batch * d->seqlen_q) +
                                                             UP256(8 * (size_t)d->batch * d->seqlen_k)
                                                       : 0);
#undef UP256
    CHECK(dfa__cuda_bwd_scratch(&s) == want16 && dfa_attn_bwd_cuda_scratch_bytes(d) == want_public,
          "scratch bytes %zu (public %zu), want %zu (public %zu) for %s", dfa__cuda_bwd_scratch(&s),
          dfa_attn_bwd_cuda_scratch_bytes(d), want16, want_public, tl_desc_str(d));
    CHECK(dfa__cuda_bwd_scratch(&s32) == want32,
          "scratch bytes with out_f32 %zu, want %zu (no dq accumulator) for %s", dfa__cuda_bwd_scratch(&s32), want32,
          tl_desc_str(d));

    /* a caller's scratch: the bytes asked for, then a canary (the 16-bit call asks for more) */
    const size_t sbytes = dfa__cuda_bwd_scratch(&s), canary = 256;
    unsigned char *scratch = dev_alloc(sbytes + canary), *canary_h = malloc(canary);
    void *outs[3];
    size_t bytes16[3], bytes32[3];
    float *got[2][3];
    for (int i = 0; i < 3; i++) {
        bytes16[i] = (size_t)n[i] * es;
        bytes32[i] = 4 * (size_t)n[i];
        outs[i] = dev_alloc(bytes32[i]);
        got[0][i] = malloc(bytes32[i]);
        got[1][i] = malloc(bytes32[i]);
    }
    char kname[96];
    /* the float32 gradients rounded are the 16-bit call's bits only with each key tile's dK, dV
       summed by one CTA: split tiles (launch_bwd.cuh dfa__bwd_qsplit_for) are checked below */
    dfa__cuda_force_bwd_qsplit(1);
    for (int rep = 0; rep < 2; rep++) {
        snprintf(kname, sizeof kname, "%s, f32 out, %s scratch", kernel, rep ? "caller's" : "library");
        dev_poison(scratch, sbytes + canary);
        run_bwd_internal(&s32, kname, ins, lse, outs, bytes32, rep ? scratch : NULL);
        for (int i = 0; i < 3; i++) to_host(got[rep][i], outs[i], bytes32[i]);
        for (int i = 0; i < 3; i++) {
            CHECK(tl_count_nan(DFA_F32, got[rep][i], n[i]) == 0, "%s f32 [%s] left %lld elements unwritten/NaN for %s",
                  names[i], kname, (long long)tl_count_nan(DFA_F32, got[rep][i], n[i]), tl_desc_str(d));
            const double err = tl_max_err(DFA_F32, got[rep][i], refs[i], n[i]);
            CHECK(err <= tol[i], "%s f32 [%s]: max error %.3g > tol %.3g of the 16-bit %s for %s", names[i], kname, err,
                  tol[i], names[i], tl_desc_str(d));
            if (i > 0 || det)
                CHECK(rounds_to(t, got[rep][i], grads16[i], n[i]),
                      "%s f32 [%s]: rounded to 16 bits it is not the 16-bit %s for %s", names[i], kname, names[i],
                      tl_desc_str(d));
        }
        to_host(canary_h, scratch + want32, canary);
        int touched = 0;
        for (size_t i = 0; i < canary; i++) touched += canary_h[i] != 0xff;
        CHECK(touched == 0, "bwd [%s] wrote %d bytes past the scratch it asked for, for %s", kname, touched,
              tl_desc_str(d));
    }
    if (det)
        for (int i = 0; i < 3; i++)
            CHECK(!memcmp(got[0][i], got[1][i], bytes32[i]), "%s f32 [%s, deterministic] differs between two runs for %s",
                  names[i], kernel, tl_desc_str(d));

    /* 16-bit keys (the executor's diagonal blocks, launch.h dfa__cuda_dkv16): dk, dv of keys
       [from, to) go to 16-bit outputs, the public call's bits there, the float32 ones' elsewhere,
       neither written where the other is; dq as before */
    for (int part = 0; part < 3; part++) { /* the first half, all (the 16-bit kernel, attn_bwd.cu), the middle */
        const int all = part == 1;
        const int from = part == 2 ? d->seqlen_k / 3 : 0;
        const int to = all ? d->seqlen_k : part == 0 ? (d->seqlen_k + 1) / 2 : d->seqlen_k - d->seqlen_k / 4;
        void *d16[2] = {dev_alloc(bytes16[1]), dev_alloc(bytes16[2])};
        void *h16 = malloc(bytes16[1] > bytes16[2] ? bytes16[1] : bytes16[2]);
        const size_t big32 = bytes32[0] > bytes32[1] ? bytes32[0] : bytes32[1];
        float *h32 = malloc(big32 > bytes32[2] ? big32 : bytes32[2]); /* dq, then dk and dv */
        for (int i = 0; i < 2; i++) dev_poison(d16[i], bytes16[1 + i]);
        const dfa__cuda_dkv16 direct = {d16[0], d16[1], from, to};
        for (int i = 0; i < 3; i++) dev_poison(outs[i], bytes32[i]);
        const dfa_status st2 = dfa__cuda_bwd(&s32, ins[0], ins[1], ins[2], ins[3], lse, ins[4], outs[0], outs[1],
                                             outs[2], NULL, &direct, 0, "test_gpu_attn");
        CHECK(st2 == DFA_OK, "bwd f32 [%s] with direct keys failed: %s (%s)", kernel, dfa_status_string(st2),
              dfa_last_error());
        CUDA_OK(cudaGetLastError());
        to_host(h32, outs[0], bytes32[0]);
        CHECK(tl_max_err(DFA_F32, h32, refs[0], n[0]) <= tol[0], "dq f32 [%s] with direct keys: max error %.3g > %.3g",
              kernel, tl_max_err(DFA_F32, h32, refs[0], n[0]), tol[0]);
        for (int i = 1; i < 3; i++) {
            const int64_t w = (int64_t)d->num_kv_heads * (i == 1 ? d->head_dim : dv_of(d)); /* a key's row */
            to_host(h32, outs[i], bytes32[i]);
            to_host(h16, d16[i - 1], bytes16[i]);
            int64_t wrong = 0;
            for (int b = 0; b < d->batch; b++)
                for (int j = 0; j < d->seqlen_k; j++) {
                    const int64_t e0 = ((int64_t)b * d->seqlen_k + j) * w;
                    if (j >= from && j < to)
                        wrong += memcmp((char *)h16 + e0 * es, (const char *)grads16[i] + e0 * es, es * (size_t)w) != 0 ||
                                 tl_count_nan(DFA_F32, h32 + e0, w) != w;
                    else
                        wrong += memcmp(h32 + e0, got[0][i] + e0, 4 * (size_t)w) != 0 ||
                                 tl_count_nan(t, (char *)h16 + e0 * es, w) != w;
                }
            CHECK(wrong == 0, "%s f32 [%s] with direct keys [%d, %d): %lld keys wrong (float32 keys not the float32 "
                  "%s, direct keys not the 16-bit %s, or a key written twice) for %s", names[i], kernel, from, to,
                  (long long)wrong, names[i], names[i], tl_desc_str(d));
        }
        for (int i = 0; i < 2; i++) CUDA_OK(cudaFree(d16[i]));
        free(h16);
        free(h32);
    }
    dfa__cuda_force_bwd_qsplit(0);

    /* key tiles split over CTAs by query blocks (the Hopper kernel's float32 instances, dK, dV added
       into zeroed outputs; the deterministic mode never splits): as accurate as the 16-bit call,
       every element written, with the launcher's choice and with 2, 3 and 64 CTAs a tile (64:
       CTAs with no query block, which leave at once) */
    static const int splits[4] = {0, 2, 3, 64};
    for (int k = 0; k < 4; k++) {
        snprintf(kname, sizeof kname, "%s, f32 out, %d CTAs per key tile", kernel, splits[k]);
        dfa__cuda_force_bwd_qsplit(splits[k]);
        run_bwd_internal(&s32, kname, ins, lse, outs, bytes32, NULL);
        dfa__cuda_force_bwd_qsplit(0);
        for (int i = 0; i < 3; i++) {
            to_host(got[1][i], outs[i], bytes32[i]);
            const double err = tl_max_err(DFA_F32, got[1][i], refs[i], n[i]);
            CHECK(tl_count_nan(DFA_F32, got[1][i], n[i]) == 0 && err <= tol[i],
                  "%s f32 [%s]: %lld elements unwritten/NaN, max error %.3g > tol %.3g for %s", names[i], kname,
                  (long long)tl_count_nan(DFA_F32, got[1][i], n[i]), err, tol[i], tl_desc_str(d));
            if (det)
                CHECK(!memcmp(got[1][i], got[0][i], bytes32[i]), "%s f32 [%s, deterministic]: not the unsplit bits for %s",
                      names[i], kname, tl_desc_str(d));
        }
    }

    /* 16-bit outputs with the caller's scratch (which then holds the dq accumulator), with dK, dV
       stored from registers and by TMA where the kernel has both (launch_bwd.cuh
       dfa__bwd_tma_dkv_for: the Hopper kernel at d = 128, unmasked, dq added as it comes), once
       with the launcher's choice elsewhere: the public call's bits either way */
    void *h = tl_alloc(t, n[0] > n[1] ? (n[0] > n[2] ? n[0] : n[2]) : (n[1] > n[2] ? n[1] : n[2]));
    static const char *stores[3] = {"launcher's dk, dv stores", "direct dk, dv stores", "dk, dv by TMA"};
    const int both = !strncmp(kernel, "wgmma", 5) && d->head_dim == 128 && !masked && !det;
    for (int mode = both ? 1 : 0; mode <= (both ? 2 : 0); mode++) {
        snprintf(kname, sizeof kname, "%s, caller's scratch, %s", kernel, stores[mode]);
        dev_poison(scratch, sbytes + canary);
        dfa__cuda_force_bwd_dkv_tma(mode);
        run_bwd_internal(&s, kname, ins, lse, outs, bytes16, scratch);
        dfa__cuda_force_bwd_dkv_tma(0);
        for (int i = 0; i < 3; i++) {
            to_host(h, outs[i], bytes16[i]);
            if (i > 0 || det)
                CHECK(!memcmp(h, grads16[i], bytes16[i]), "%s [%s]: not the public call's %s for %s", names[i], kname,
                      names[i], tl_desc_str(d));
            else
                CHECK(tl_max_err(t, h, refs[i], n[i]) <= tol[i], "%s [%s]: max error %.3g > tol %.3g for %s", names[i],
                      kname, tl_max_err(t, h, refs[i], n[i]), tol[i], tl_desc_str(d));
        }
        to_host(canary_h, scratch + sbytes, canary);
        int touched = 0;
        for (size_t i = 0; i < canary; i++) touched += canary_h[i] != 0xff;
        CHECK(touched == 0, "bwd [%s] wrote %d bytes past the scratch it asked for, for %s", kname, touched,
              tl_desc_str(d));
    }

    /* a misaligned caller's scratch is refused before anything is enqueued */
    for (int i = 0; i < 3; i++) dev_poison(outs[i], bytes32[i]);
    const dfa_status st = dfa__cuda_bwd(&s32, ins[0], ins[1], ins[2], ins[3], lse, ins[4], outs[0], outs[1], outs[2],
                                        scratch + 16, NULL, 0, "test_gpu_attn");
    CHECK(st == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "scratch"),
          "bwd [%s] with a misaligned scratch: %s (%s)", kernel, dfa_status_string(st), dfa_last_error());
    to_host(got[0][1], outs[1], bytes32[1]);
    CHECK(tl_count_nan(DFA_F32, got[0][1], n[1]) == n[1], "bwd [%s] with a misaligned scratch wrote dk", kernel);

    for (int i = 0; i < 3; i++) {
        CUDA_OK(cudaFree(outs[i]));
        free(got[0][i]);
        free(got[1][i]);
    }
    CUDA_OK(cudaFree(scratch));
    free(canary_h);
    free(h);
}

/* One full check of d: d holds host pointers (the oracle, the CPU calls), dd the same
   descriptor with device pointers for the document ids (the device calls; dd == d without). */
static void check_case(const dfa_attn_desc *d, const dfa_attn_desc *dd, int with_bwd) {
    const int masked = d->q_doc != NULL || (d->flags & DFA_FLAG_WINDOW) != 0;
    const dfa_dtype t = d->dtype;
    const size_t es = tl_dtype_size(t);
    const int Dv = dv_of(d); /* o, dout, v and dv rows */
    const int64_t nq = (int64_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim;
    const int64_t nk = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim;
    const int64_t no = (int64_t)d->batch * d->seqlen_q * d->num_heads * Dv;
    const int64_t nv = (int64_t)d->batch * d->seqlen_k * d->num_kv_heads * Dv;
    const int64_t nl = (int64_t)d->batch * d->num_heads * d->seqlen_q;
    void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nv), *o = tl_alloc(t, no);
    void *o2 = tl_alloc(t, no), *onaive = tl_alloc(t, no), *ocpu = tl_alloc(t, no);
    float *lse = malloc(4 * (size_t)nl), *lcpu = malloc(4 * (size_t)nl);
    tl_fill_normal(t, q, nq, 1.0 + tl_rand_uniform());
    tl_fill_normal(t, k, nk, 1.0);
    tl_fill_normal(t, v, nv, 1.0);
    if (rising_keys) { /* key j scaled by 1 + 12 j / seqlen_k: maxima rise by far more than 2^8 */
        const int64_t row = (int64_t)d->num_kv_heads * d->head_dim;
        double *fk0 = tl_to_f64(t, k, nk);
        for (int64_t i = 0; i < nk; i++)
            tl_set(t, k, i, fk0[i] * (1.0 + 12.0 * (double)((i / row) % d->seqlen_k) / d->seqlen_k));
        free(fk0);
    }

    double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nv);
    double *oref = malloc(8 * (size_t)no), *lref = malloc(8 * (size_t)nl);
    oracle_fwd(d, fq, fk, fv, oref, lref);
    naive_fwd_lowp(d, q, k, v, onaive);
    CHECK(dfa_attn_fwd(d, q, k, v, ocpu, lcpu) == DFA_OK, "CPU fwd failed: %s", dfa_last_error());

    void *qd = dev_copy_of(q, (size_t)nq * es), *kd = dev_copy_of(k, (size_t)nk * es), *vd = dev_copy_of(v, (size_t)nv * es);
    void *od = dev_alloc((size_t)no * es);
    float *ld = dev_alloc(4 * (size_t)nl);

    /* the Hopper kernels at head dims 64, 128, 256 and 192 / 128, forward and backward (else the
       mma.sync kernels, on sm_90 too) */
    const int wgmma_ok = cc == 90 && ((Dv == d->head_dim && (d->head_dim == 64 || d->head_dim == 128 ||
                                                             d->head_dim == 256)) ||
                                      (d->head_dim == 192 && Dv == 128));
    const char *kernels[2] = {"mma", "wgmma"};
    for (int kern = 0; kern < 1 + wgmma_ok; kern++) {
        if (only_kernel && strcmp(only_kernel, kernels[kern])) continue;
        dfa__cuda_force_family(families[kern]);
        for (int rep = 0; rep < 2; rep++) { /* the repeat with the caller's scratch (poisoned) */
            dev_poison(od, (size_t)no * es);
            dev_poison(ld, 4 * (size_t)nl);
            const size_t sb = rep ? dfa_attn_fwd_cuda_scratch_bytes(dd) : 0;
            void *scr = rep ? dev_alloc(sb) : NULL;
            if (rep) dev_poison(scr, sb);
            dfa_status st = rep ? dfa_attn_fwd_cuda_with_scratch(dd, qd, kd, vd, od, ld, scr, sb, 0)
                                : dfa_attn_fwd_cuda(dd, qd, kd, vd, od, ld, 0);
            if (scr) {
                CUDA_OK(cudaDeviceSynchronize());
                CUDA_OK(cudaFree(scr));
            }
            CHECK(st == DFA_OK, "fwd [%s] failed: %s (%s) for %s", kernels[kern], dfa_status_string(st), dfa_last_error(),
                  tl_desc_str(d));
            CUDA_OK(cudaGetLastError());
            to_host(rep ? o2 : o, od, (size_t)no * es);
            if (rep == 0) to_host(lse, ld, 4 * (size_t)nl);
        }
        CHECK(!memcmp(o, o2, (size_t)no * es), "fwd [%s] not reproducible bit for bit (with the caller's scratch) for %s",
              kernels[kern], tl_desc_str(d));
        /* the grid's order of query tiles (sections of heads that share the L2) changes no bit */
        for (int sec = 1; sec <= 3; sec += 2) {
            dfa__cuda_force_l2_heads(sec);
            dev_poison(od, (size_t)no * es);
            const dfa_status st = dfa_attn_fwd_cuda(dd, qd, kd, vd, od, ld, 0);
            dfa__cuda_force_l2_heads(0);
            CHECK(st == DFA_OK, "fwd [%s] in sections of %d heads failed: %s", kernels[kern], sec, dfa_last_error());
            to_host(o2, od, (size_t)no * es);
            CHECK(!memcmp(o, o2, (size_t)no * es), "fwd [%s] in sections of %d heads gives another o for %s",
                  kernels[kern], sec, tl_desc_str(d));
        }
        CHECK(tl_count_nan(t, o, no) == 0, "fwd [%s] left %lld elements of o unwritten/NaN for %s", kernels[kern],
              (long long)tl_count_nan(t, o, no), tl_desc_str(d));
        const double tol = check_close("o", kernels[kern], d, o, onaive, oref, no);
        check_vs_cpu("o", kernels[kern], d, o, ocpu, oref, no, tol);
        int lse_bad = 0, masked_bad = 0;
        for (int64_t i = 0; i < nl; i++) {
            if (lref[i] == -INFINITY) {
                lse_bad += lse[i] != -INFINITY;
                const int64_t b = i / ((int64_t)d->num_heads * d->seqlen_q), h = (i / d->seqlen_q) % d->num_heads,
                              r = i % d->seqlen_q;
                const int64_t first = ((b * d->seqlen_q + r) * d->num_heads + h) * Dv;
                for (int c = 0; c < Dv; c++) masked_bad += tl_get(t, o, first + c) != 0.0;
            } else {
                lse_bad += !(fabs(lse[i] - lref[i]) <= 2e-5 * (1.0 + fabs(lref[i])));
            }
        }
        CHECK(lse_bad == 0, "lse [%s]: %d rows wrong for %s", kernels[kern], lse_bad, tl_desc_str(d));
        CHECK(masked_bad == 0, "fully masked rows [%s]: %d elements of o not exactly 0 for %s", kernels[kern], masked_bad,
              tl_desc_str(d));
        /* lse is optional */
        dev_poison(od, (size_t)no * es);
        CHECK(dfa_attn_fwd_cuda(dd, qd, kd, vd, od, NULL, 0) == DFA_OK, "fwd [%s] with lse = NULL failed: %s",
              kernels[kern], dfa_last_error());
        to_host(o2, od, (size_t)no * es);
        CHECK(!memcmp(o, o2, (size_t)no * es), "fwd [%s] with lse = NULL gives another o for %s", kernels[kern],
              tl_desc_str(d));
        if (!masked) check_fwd_f32(d, kernels[kern], qd, kd, vd, o, lse, oref, tol); /* internal calls, no mask */
    }
    dfa__cuda_force_family(DFA__FAMILY_AUTO);

    if (with_bwd) {
        /* the backward reads the o and lse of a forward checked above */
        const int use_wgmma = wgmma_ok && !(only_kernel && !strcmp(only_kernel, "mma"));
        dfa__cuda_force_family(use_wgmma ? DFA__FAMILY_WGMMA : DFA__FAMILY_MMA);
        dfa_status st = dfa_attn_fwd_cuda(dd, qd, kd, vd, od, ld, 0);
        dfa__cuda_force_family(DFA__FAMILY_AUTO);
        CHECK(st == DFA_OK, "fwd failed: %s", dfa_last_error());
        void *dout = tl_alloc(t, no), *dq = tl_alloc(t, nq), *dk = tl_alloc(t, nk), *dv = tl_alloc(t, nv);
        void *dq2 = tl_alloc(t, nq), *dk2 = tl_alloc(t, nk), *dv2 = tl_alloc(t, nv);
        void *nq_ = tl_alloc(t, nq), *nk_ = tl_alloc(t, nk), *nv_ = tl_alloc(t, nv);
        void *cq = tl_alloc(t, nq), *ck = tl_alloc(t, nk), *cv = tl_alloc(t, nv);
        tl_fill_normal(t, dout, no, 1.0);
        double *fdo = tl_to_f64(t, dout, no);
        double *gq = malloc(8 * (size_t)nq), *gk = malloc(8 * (size_t)nk), *gv = malloc(8 * (size_t)nv);
        oracle_bwd(d, fq, fk, fv, fdo, gq, gk, gv);
        naive_bwd_lowp(d, q, k, v, dout, nq_, nk_, nv_);
        CHECK(dfa_attn_bwd(d, q, k, v, ocpu, lcpu, dout, cq, ck, cv) == DFA_OK, "CPU bwd failed: %s", dfa_last_error());
        void *dod = dev_copy_of(dout, (size_t)no * es);
        void *dqd = dev_alloc((size_t)nq * es), *dkd = dev_alloc((size_t)nk * es), *dvd = dev_alloc((size_t)nv * es);
        for (int run = 0; run < 4; run++) {
            const int det = run & 1, bk = run >> 1; /* dq path; backward kernel family */
            if (bk == 1 && !wgmma_ok) continue;
            if (only_kernel && strcmp(only_kernel, kernels[bk])) continue;
            dfa__cuda_force_family(families[bk]);
            dfa_attn_desc d2 = *dd;
            d2.flags = (dd->flags & ~DFA_FLAG_DETERMINISTIC) | (det ? DFA_FLAG_DETERMINISTIC : 0u);
            char kname[64];
            snprintf(kname, sizeof kname, "%s, %s dq", kernels[bk], det ? "deterministic" : "atomic");
            /* the deterministic repeat runs with the caller's scratch (poisoned): the same bits */
            for (int rep = 0; rep < 1 + det; rep++) {
                dev_poison(dqd, (size_t)nq * es);
                dev_poison(dkd, (size_t)nk * es);
                dev_poison(dvd, (size_t)nv * es);
                const size_t sb = rep ? dfa_attn_bwd_cuda_scratch_bytes(&d2) : 0;
                void *scr = rep ? dev_alloc(sb) : NULL;
                if (rep) dev_poison(scr, sb);
                st = rep ? dfa_attn_bwd_cuda_with_scratch(&d2, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, scr, sb, 0)
                         : dfa_attn_bwd_cuda(&d2, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, 0);
                if (scr) {
                    CUDA_OK(cudaDeviceSynchronize());
                    CUDA_OK(cudaFree(scr));
                }
                CHECK(st == DFA_OK, "bwd [%s] failed: %s (%s) for %s", kname, dfa_status_string(st), dfa_last_error(),
                      tl_desc_str(d));
                CUDA_OK(cudaGetLastError());
                to_host(rep ? dq2 : dq, dqd, (size_t)nq * es);
                to_host(rep ? dk2 : dk, dkd, (size_t)nk * es);
                to_host(rep ? dv2 : dv, dvd, (size_t)nv * es);
            }
            if (det)
                CHECK(!memcmp(dq, dq2, (size_t)nq * es) && !memcmp(dk, dk2, (size_t)nk * es) &&
                          !memcmp(dv, dv2, (size_t)nv * es),
                      "deterministic bwd gave different bits on a second run (with the caller's scratch) for %s",
                      tl_desc_str(d));
            CHECK(tl_count_nan(t, dq, nq) == 0 && tl_count_nan(t, dk, nk) == 0 && tl_count_nan(t, dv, nv) == 0,
                  "bwd [%s] left unwritten/NaN gradients (dq %lld, dk %lld, dv %lld) for %s", kname,
                  (long long)tl_count_nan(t, dq, nq), (long long)tl_count_nan(t, dk, nk),
                  (long long)tl_count_nan(t, dv, nv), tl_desc_str(d));
            double tol[3];
            tol[0] = check_close("dq", kname, d, dq, nq_, gq, nq);
            /* the key-block grid in sections of 3 pairs (longest walks first) and in the pairs'
               order: the same dk, dv bits (each tile's walk is the same), dq the same bits when
               deterministic, else within its tolerance (added as the tiles come) */
            for (int sec = -1; sec <= 3; sec += 4) {
                dev_poison(dqd, (size_t)nq * es);
                dev_poison(dkd, (size_t)nk * es);
                dev_poison(dvd, (size_t)nv * es);
                dfa__cuda_force_bwd_sections(sec);
                st = dfa_attn_bwd_cuda(&d2, qd, kd, vd, od, ld, dod, dqd, dkd, dvd, 0);
                dfa__cuda_force_bwd_sections(0);
                CHECK(st == DFA_OK, "bwd [%s] in sections of %d pairs failed: %s", kname, sec, dfa_last_error());
                to_host(dq2, dqd, (size_t)nq * es);
                to_host(dk2, dkd, (size_t)nk * es);
                to_host(dv2, dvd, (size_t)nv * es);
                CHECK(!memcmp(dk, dk2, (size_t)nk * es) && !memcmp(dv, dv2, (size_t)nv * es),
                      "bwd [%s] in sections of %d pairs gives another dk or dv for %s", kname, sec, tl_desc_str(d));
                if (det)
                    CHECK(!memcmp(dq, dq2, (size_t)nq * es), "bwd [%s] in sections of %d pairs gives another dq for %s",
                          kname, sec, tl_desc_str(d));
                else
                    CHECK(tl_count_nan(t, dq2, nq) == 0 && tl_max_err(t, dq2, gq, nq) <= tol[0],
                          "bwd [%s] in sections of %d pairs: dq max error %.3g > tol %.3g for %s", kname, sec,
                          tl_max_err(t, dq2, gq, nq), tol[0], tl_desc_str(d));
            }
            check_vs_cpu("dq", kname, d, dq, cq, gq, nq, tol[0]);
            tol[1] = check_close("dk", kname, d, dk, nk_, gk, nk);
            check_vs_cpu("dk", kname, d, dk, ck, gk, nk, tol[1]);
            tol[2] = check_close("dv", kname, d, dv, nv_, gv, nv);
            check_vs_cpu("dv", kname, d, dv, cv, gv, nv, tol[2]);
            const void *ins[5] = {qd, kd, vd, od, dod}, *grads16[3] = {dq, dk, dv};
            const double *refs[3] = {gq, gk, gv};
            if (!masked) check_bwd_scratch_f32(&d2, kname, ins, ld, grads16, refs, tol);
        }
        dfa__cuda_force_family(DFA__FAMILY_AUTO);
        CUDA_OK(cudaFree(dod)); CUDA_OK(cudaFree(dqd)); CUDA_OK(cudaFree(dkd)); CUDA_OK(cudaFree(dvd));
        free(dout); free(dq); free(dk); free(dv); free(dq2); free(dk2); free(dv2); free(nq_); free(nk_); free(nv_);
        free(cq); free(ck); free(cv); free(fdo); free(gq); free(gk); free(gv);
    }
    CUDA_OK(cudaFree(qd)); CUDA_OK(cudaFree(kd)); CUDA_OK(cudaFree(vd)); CUDA_OK(cudaFree(od)); CUDA_OK(cudaFree(ld));
    free(q); free(k); free(v); free(o); free(o2); free(onaive); free(ocpu); free(lse); free(lcpu);
    free(fq); free(fk); free(fv); free(oref); free(lref);
}

typedef struct {
    int b, sq, sk, h, hkv, d;
    dfa_dtype t;
    int causal;
    long long qs, ks;
    int bwd;
    int dv;        /* head_dim_v (0: head_dim) */
    float softcap; /* 0: none */
} shape;

static const shape small_cases[] = {
    {1, 17, 40, 4, 2, 64, DFA_BF16, 1, 23, 0, 1, 0, 0},
    {2, 33, 33, 2, 1, 128, DFA_F16, 1, 0, 0, 1, 0, 0},
    {1, 9, 70, 2, 2, 40, DFA_BF16, 0, 0, 0, 1, 0, 0},
    {1, 20, 20, 1, 1, 256, DFA_BF16, 1, 0, 0, 1, 0, 0},
    {1, 19, 45, 4, 2, 192, DFA_BF16, 1, 26, 0, 1, 128, 0},
    {1, 21, 21, 2, 1, 128, DFA_F16, 0, 0, 0, 1, 64, 0},
    {1, 33, 70, 4, 2, 128, DFA_BF16, 1, 37, 0, 1, 0, 2.0f},
    {1, 25, 25, 3, 1, 64, DFA_F16, 0, 0, 0, 1, 0, 5.0f},
    /* walks of several key and query blocks at the wide head dims (64-key blocks), GQA */
    {1, 200, 260, 4, 2, 192, DFA_F16, 1, 60, 0, 1, 128, 0},
    {1, 150, 150, 4, 2, 256, DFA_BF16, 1, 0, 0, 1, 0, 0},
    {1, 130, 140, 2, 1, 256, DFA_F16, 0, 0, 0, 1, 0, 3.0f},
};

static const shape cases[] = {
    /* lengths 1 .. 4097, every head-dim class (padded to 64/128/256 inside), GQA/MQA, offsets */
    {1, 1, 1, 2, 2, 64, DFA_BF16, 0, 0, 0, 1, 0, 0},
    {1, 1, 1, 2, 1, 128, DFA_F16, 1, 0, 0, 1, 0, 0},
    {3, 17, 17, 4, 1, 40, DFA_F16, 1, 0, 0, 1, 0, 0},
    {1, 17, 1000, 3, 3, 8, DFA_BF16, 1, 983, 0, 1, 0, 0},
    {2, 128, 128, 4, 2, 128, DFA_BF16, 1, 100, 150, 1, 0, 0}, /* the first 50 rows see nothing */
    {1, 128, 128, 8, 8, 64, DFA_F16, 0, 0, 0, 1, 0, 0},
    {1, 1000, 1000, 2, 2, 64, DFA_F16, 1, 0, 0, 1, 0, 0},
    {1, 1000, 128, 2, 1, 256, DFA_BF16, 0, 0, 0, 1, 0, 0},
    {1, 1000, 1000, 2, 1, 128, DFA_BF16, 1, 0, 0, 1, 0, 0},
    {2, 128, 1000, 8, 2, 136, DFA_F16, 1, 900, 0, 1, 0, 0},
    {1, 300, 517, 4, 2, 96, DFA_BF16, 1, 217, 0, 1, 0, 0},
    {1, 200, 300, 2, 2, 192, DFA_F16, 1, 50, 0, 1, 0, 0},
    {1, 130, 70, 2, 1, 248, DFA_BF16, 0, 0, 0, 1, 0, 0},
    {1, 64, 64, 2, 2, 128, DFA_BF16, 1, 5, 72, 1, 0, 0}, /* every row fully masked */
    {1, 64, 64, 2, 2, 64, DFA_F16, 1, 500, 0, 1, 0, 0},  /* every key visible */
    {1, 4097, 4097, 1, 1, 64, DFA_BF16, 1, 0, 0, 1, 0, 0},
    {1, 1000, 4097, 1, 1, 128, DFA_F16, 1, 3097, 0, 0, 0, 0},
    {1, 4097, 1000, 2, 2, 128, DFA_BF16, 0, 0, 0, 0, 0, 0},
    /* more query tiles than an H200 has SMs (132): the persistent forward at head dim 128,
       whose CTAs take several tiles (320 here, then 240 of which the first 4 of each head see
       no key) */
    {4, 600, 600, 16, 4, 128, DFA_BF16, 1, 0, 0, 0, 0, 0},
    {3, 640, 640, 16, 4, 128, DFA_F16, 1, 0, 600, 0, 0, 0},
    /* a value head dim of its own: DeepSeek's 192 / 128 and 128 / 64 (the mma.sync kernels on every
       device, and the Hopper forward at 192 / 128 exactly), causal with offsets, GQA/MQA, odd lengths; dims inside a pair, padded with zeros
       (96 / 40 in 128 / 64; 160 / 96 and 64 / 128 in 192 / 128) */
    {1, 1, 1, 2, 2, 192, DFA_BF16, 1, 0, 0, 1, 128, 0},
    {2, 17, 33, 4, 1, 192, DFA_F16, 1, 16, 0, 1, 128, 0},
    {1, 1000, 1000, 4, 2, 192, DFA_BF16, 1, 0, 0, 1, 128, 0},
    {2, 300, 517, 8, 2, 192, DFA_F16, 1, 217, 0, 1, 128, 0},
    {1, 130, 70, 2, 1, 192, DFA_BF16, 0, 0, 0, 1, 128, 0},
    {1, 64, 64, 2, 2, 192, DFA_BF16, 1, 5, 72, 1, 128, 0}, /* every row fully masked */
    {1, 1000, 1000, 4, 4, 128, DFA_F16, 1, 0, 0, 1, 64, 0},
    {3, 129, 257, 6, 2, 128, DFA_BF16, 1, 128, 0, 1, 64, 0},
    {1, 77, 77, 2, 1, 128, DFA_F16, 0, 0, 0, 1, 64, 0},
    {1, 200, 300, 2, 2, 96, DFA_BF16, 1, 50, 0, 1, 40, 0},
    {1, 150, 150, 2, 1, 160, DFA_F16, 1, 0, 0, 1, 96, 0},
    {1, 150, 99, 2, 2, 64, DFA_BF16, 0, 0, 0, 1, 128, 0},
    {1, 4097, 4097, 1, 1, 192, DFA_BF16, 1, 0, 0, 0, 128, 0},
    /* logit softcapping (Gemma 2's 50 and 30, and caps small enough that most scores saturate):
       forward and backward on every family; GQA/MQA, offsets, odd lengths,
       every head-dim class, the persistent forward, rows that see nothing */
    {1, 1, 1, 2, 1, 128, DFA_BF16, 1, 0, 0, 1, 0, 30.0f},
    {2, 300, 517, 8, 2, 128, DFA_BF16, 1, 217, 0, 1, 0, 2.0f},
    {1, 1000, 1000, 4, 1, 64, DFA_F16, 0, 0, 0, 1, 0, 1.0f},
    {1, 777, 777, 6, 2, 64, DFA_BF16, 1, 0, 0, 1, 0, 50.0f},
    {1, 130, 70, 2, 1, 256, DFA_BF16, 0, 0, 0, 1, 0, 3.0f},
    {1, 200, 300, 2, 2, 96, DFA_F16, 1, 50, 0, 1, 0, 4.0f},
    {2, 128, 128, 4, 2, 128, DFA_F16, 1, 100, 150, 1, 0, 5.0f}, /* the first 50 rows see nothing */
    {4, 600, 600, 16, 4, 128, DFA_BF16, 1, 0, 0, 1, 0, 30.0f},
    {1, 2100, 2100, 2, 1, 128, DFA_F16, 0, 0, 0, 0, 0, 8.0f},
};

/* Documents and sliding windows: random packed layouts (lengths 1, short, longer
   than a block), windows of 0, 1, a block and the whole sequence, causal and not, chunk
   offsets, every kernel family, against the float64 oracle and the CPU calls. */
static void random_docs(int32_t *ids, int n) {
    int32_t id = tl_rand_int(-5, 5);
    for (int i = 0; i < n;) {
        const int kind = tl_rand_int(0, 3);
        const int len = kind == 0 ? 1 : kind == 1 ? tl_rand_int(2, 30) : kind == 2 ? tl_rand_int(100, 200)
                                                                                   : tl_rand_int(200, 700);
        for (int r = 0; r < len && i < n; r++) ids[i++] = id;
        id += tl_rand_int(1, 3);
    }
}

typedef struct {
    int b, sq, sk, h, hkv, d;
    dfa_dtype t;
    int causal;
    long long qs, ks;
    int docs, window, left, right;
    int dv;        /* head_dim_v (0: head_dim) */
    float softcap; /* 0: none */
} mcase;

static const mcase mask_cases[] = {
    {2, 1000, 1000, 4, 2, 128, DFA_BF16, 1, 0, 0, 1, 0, 0, 0, 0, 0},
    {1, 1000, 1000, 2, 2, 64, DFA_F16, 1, 0, 0, 0, 1, 128, -1, 0, 0},
    {1, 777, 777, 2, 1, 128, DFA_BF16, 1, 0, 0, 1, 1, 200, 0, 0, 0},
    {1, 500, 500, 2, 2, 64, DFA_BF16, 0, 0, 0, 1, 1, 37, 64, 0, 0},
    {1, 300, 300, 2, 2, 128, DFA_F16, 1, 0, 0, 0, 1, 0, -1, 0, 0},   /* each row sees only itself */
    {1, 300, 300, 2, 2, 64, DFA_BF16, 1, 0, 0, 0, 1, 1, -1, 0, 0},
    {1, 300, 300, 2, 2, 128, DFA_BF16, 0, 0, 0, 0, 1, 5000, 5000, 0, 0}, /* wider than the sequence */
    {1, 256, 700, 2, 2, 128, DFA_BF16, 1, 444, 0, 1, 1, 300, -1, 0, 0},  /* a chunk against earlier keys */
    {1, 200, 300, 2, 2, 96, DFA_F16, 1, 100, 250, 1, 0, 0, 0, 0, 0},     /* rows that see nothing */
    {2, 129, 129, 3, 3, 40, DFA_BF16, 1, 0, 0, 1, 1, 64, -1, 0, 0},
    {1, 100, 100, 2, 2, 256, DFA_F16, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {3, 520, 520, 12, 4, 128, DFA_BF16, 1, 0, 0, 1, 1, 300, -1, 0, 0}, /* 180 query tiles: the persistent forward */
    /* a value head dim of its own (the mma.sync kernels, and the Hopper forward at 192 / 128) under
       documents and windows */
    {2, 700, 700, 4, 2, 192, DFA_BF16, 1, 0, 0, 1, 0, 0, 0, 128, 0},
    {1, 600, 600, 4, 1, 192, DFA_F16, 1, 0, 0, 0, 1, 150, -1, 128, 0},
    {1, 333, 333, 2, 2, 128, DFA_BF16, 0, 0, 0, 1, 1, 40, 64, 64, 0},
    {1, 256, 700, 4, 2, 128, DFA_F16, 1, 444, 0, 1, 1, 300, -1, 64, 0},
    /* softcap under documents and windows, with GQA */
    {2, 700, 700, 4, 2, 128, DFA_BF16, 1, 0, 0, 1, 0, 0, 0, 0, 3.0f},
    {1, 600, 600, 4, 1, 64, DFA_F16, 1, 0, 0, 0, 1, 150, -1, 0, 20.0f},
    {1, 333, 333, 6, 2, 128, DFA_BF16, 0, 0, 0, 1, 1, 40, 64, 0, 2.0f},
};

static void test_masks(void) {
    for (size_t i = 0; i < sizeof mask_cases / sizeof mask_cases[0]; i++) {
        const mcase *m = &mask_cases[i];
        dfa_attn_desc d = tl_desc(m->b, m->sq, m->sk, m->h, m->hkv, m->d, m->t, m->causal, m->qs, m->ks);
        d.head_dim_v = m->dv;
        d.softcap = m->softcap;
        const int N = (int)(m->qs + m->sq > m->ks + m->sk ? m->qs + m->sq : m->ks + m->sk);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)N), *qd = malloc(sizeof(int32_t) * (size_t)m->b * m->sq),
                *kd = malloc(sizeof(int32_t) * (size_t)m->b * m->sk);
        for (int b = 0; b < m->b; b++) {
            random_docs(ids, N);
            memcpy(qd + (size_t)b * m->sq, ids + m->qs, sizeof(int32_t) * (size_t)m->sq);
            memcpy(kd + (size_t)b * m->sk, ids + m->ks, sizeof(int32_t) * (size_t)m->sk);
        }
        if (m->window) {
            d.flags |= DFA_FLAG_WINDOW;
            d.window_left = m->left;
            d.window_right = m->right;
        }
        dfa_attn_desc dd = d;
        int32_t *qdd = NULL, *kdd = NULL;
        if (m->docs) {
            d.q_doc = qd;
            d.k_doc = kd;
            dd.q_doc = qdd = dev_copy_of(qd, sizeof(int32_t) * (size_t)m->b * m->sq);
            dd.k_doc = kdd = dev_copy_of(kd, sizeof(int32_t) * (size_t)m->b * m->sk);
        }
        check_case(&d, &dd, 1);
        printf("  mask case %2zu done: %s\n", i, tl_desc_str(&d));
        fflush(stdout);
        if (qdd) CUDA_OK(cudaFree(qdd));
        if (kdd) CUDA_OK(cudaFree(kdd));
        free(ids); free(qd); free(kd);
    }
}

/* Keys split into chunks, each forward on the device with its k_start, merged on the device,
   against one call over all keys; plus the merge of random partials against the CPU merge. */
static void test_merge(void) {
    for (int rep = 0; rep < 6; rep++) {
        const dfa_dtype t = rep % 2 ? DFA_BF16 : DFA_F16;
        const int sq = tl_rand_int(1, 150), sk = tl_rand_int(5, 400), H = 4, Hkv = rep % 3 ? 2 : 1;
        const int D = rep % 2 ? 64 : 8 * tl_rand_int(1, 32);
        const int causal = rep % 2;
        dfa_attn_desc full = tl_desc(1 + rep % 2, sq, sk, H, Hkv, D, t, causal, causal ? tl_rand_int(0, sk) : 0, 0);
        const size_t es = tl_dtype_size(t);
        const int64_t nq = (int64_t)full.batch * sq * H * D, nl = (int64_t)full.batch * H * sq;
        const int64_t nk = (int64_t)full.batch * sk * Hkv * D;
        void *q = tl_alloc(t, nq), *k = tl_alloc(t, nk), *v = tl_alloc(t, nk);
        tl_fill_normal(t, q, nq, 1.0);
        tl_fill_normal(t, k, nk, 1.0);
        tl_fill_normal(t, v, nk, 1.0);
        void *qd = dev_copy_of(q, (size_t)nq * es);
        void *oacc = dev_alloc((size_t)nq * es), *opart = dev_alloc((size_t)nq * es), *oone = dev_alloc((size_t)nq * es);
        float *lacc = dev_alloc(4 * (size_t)nl), *lpart = dev_alloc(4 * (size_t)nl), *lone = dev_alloc(4 * (size_t)nl);
        void *kfull = dev_copy_of(k, (size_t)nk * es), *vfull = dev_copy_of(v, (size_t)nk * es);
        int ok = dfa_attn_fwd_cuda(&full, qd, kfull, vfull, oone, lone, 0) == DFA_OK;
        const int chunks = tl_rand_int(2, 5 < sk ? 5 : sk);
        const size_t row = (size_t)Hkv * D * es;
        for (int c = 0; c < chunks; c++) {
            const int k0 = sk * c / chunks, len = sk * (c + 1) / chunks - k0;
            if (len <= 0) continue;
            dfa_attn_desc part = full;
            part.seqlen_k = len;
            part.k_start = k0;
            char *kc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D), *vc = tl_alloc(t, (int64_t)full.batch * len * Hkv * D);
            for (int b = 0; b < full.batch; b++) {
                memcpy(kc + (size_t)b * len * row, (char *)k + ((size_t)b * sk + k0) * row, (size_t)len * row);
                memcpy(vc + (size_t)b * len * row, (char *)v + ((size_t)b * sk + k0) * row, (size_t)len * row);
            }
            void *kcd = dev_copy_of(kc, (size_t)full.batch * len * row), *vcd = dev_copy_of(vc, (size_t)full.batch * len * row);
            ok &= dfa_attn_fwd_cuda(&part, qd, kcd, vcd, c ? opart : oacc, c ? lpart : lacc, 0) == DFA_OK;
            if (c) ok &= dfa_attn_merge_cuda(&full, oacc, lacc, opart, lpart, 0) == DFA_OK;
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaFree(kcd)); CUDA_OK(cudaFree(vcd));
            free(kc); free(vc);
        }
        CHECK(ok, "merge: a device call failed: %s", dfa_last_error());
        void *h_acc = tl_alloc(t, nq), *h_one = tl_alloc(t, nq);
        float *hl_acc = malloc(4 * (size_t)nl), *hl_one = malloc(4 * (size_t)nl);
        to_host(h_acc, oacc, (size_t)nq * es);
        to_host(h_one, oone, (size_t)nq * es);
        to_host(hl_acc, lacc, 4 * (size_t)nl);
        to_host(hl_one, lone, 4 * (size_t)nl);
        double *fq = tl_to_f64(t, q, nq), *fk = tl_to_f64(t, k, nk), *fv = tl_to_f64(t, v, nk);
        double *oref = malloc(8 * (size_t)nq), *lref = malloc(8 * (size_t)nl);
        oracle_fwd(&full, fq, fk, fv, oref, lref);
        const double e_one = tl_max_err(t, h_one, oref, nq), e_merge = tl_max_err(t, h_acc, oref, nq);
        CHECK(e_merge <= 2 * e_one + chunks * 0x1p-7 * fmax(1.0, tl_max_abs(oref, nq)),
              "merge of %d chunks: error %.3g vs one call %.3g for %s", chunks, e_merge, e_one, tl_desc_str(&full));
        int lbad = 0;
        for (int64_t i = 0; i < nl; i++)
            lbad += lref[i] == -INFINITY ? hl_acc[i] != -INFINITY : !(fabs(hl_acc[i] - lref[i]) <= 1e-5 * (1 + fabs(lref[i])));
        CHECK(lbad == 0, "merge: %d lse rows wrong for %s", lbad, tl_desc_str(&full));
        CUDA_OK(cudaFree(qd)); CUDA_OK(cudaFree(oacc)); CUDA_OK(cudaFree(opart)); CUDA_OK(cudaFree(oone));
        CUDA_OK(cudaFree(lacc)); CUDA_OK(cudaFree(lpart)); CUDA_OK(cudaFree(lone)); CUDA_OK(cudaFree(kfull)); CUDA_OK(cudaFree(vfull));
        free(q); free(k); free(v); free(h_acc); free(h_one); free(hl_acc); free(hl_one);
        free(fq); free(fk); free(fv); free(oref); free(lref);
    }
    /* random partials (with -inf rows on either side), every storage type, against the CPU merge */
    const dfa_dtype types[] = {DFA_F32, DFA_BF16, DFA_F16};
    for (int ti = 0; ti < 3; ti++) {
        const dfa_dtype t = types[ti];
        dfa_attn_desc d = tl_desc(2, 37, 1, 3, 3, 24, t, 0, 0, 0);
        d.head_dim_v = ti == 1 ? 40 : 0; /* o is head_dim_v wide */
        const int Dv = dv_of(&d);
        const int64_t no = (int64_t)d.batch * d.seqlen_q * d.num_heads * Dv, nl = (int64_t)d.batch * d.num_heads * d.seqlen_q;
        const size_t es = tl_dtype_size(t);
        void *oa = tl_alloc(t, no), *op = tl_alloc(t, no), *og = tl_alloc(t, no);
        float *la = malloc(4 * (size_t)nl), *lp = malloc(4 * (size_t)nl), *lg = malloc(4 * (size_t)nl);
        tl_fill_normal(t, oa, no, 1.0);
        tl_fill_normal(t, op, no, 1.0);
        for (int64_t i = 0; i < nl; i++) {
            la[i] = (float)(3.0 * tl_rand_normal());
            lp[i] = (float)(3.0 * tl_rand_normal());
            if (i % 5 == 1) la[i] = -INFINITY;
            if (i % 7 == 2) lp[i] = -INFINITY;
        }
        for (int64_t r = 0; r < no / Dv; r++) { /* rows with lse = -inf hold o = 0 */
            const int64_t h = r % d.num_heads, bi = r / d.num_heads, b = bi / d.seqlen_q, i = bi % d.seqlen_q;
            const int64_t li = (b * d.num_heads + h) * d.seqlen_q + i;
            for (int c = 0; c < Dv; c++) {
                if (la[li] == -INFINITY) tl_set(t, oa, r * Dv + c, 0.0);
                if (lp[li] == -INFINITY) tl_set(t, op, r * Dv + c, 0.0);
            }
        }
        void *oad = dev_copy_of(oa, (size_t)no * es), *opd = dev_copy_of(op, (size_t)no * es);
        float *lad = dev_copy_of(la, 4 * (size_t)nl), *lpd = dev_copy_of(lp, 4 * (size_t)nl);
        CHECK(dfa_attn_merge_cuda(&d, oad, lad, opd, lpd, 0) == DFA_OK, "merge_cuda failed: %s", dfa_last_error());
        CHECK(dfa_attn_merge(&d, oa, la, op, lp) == DFA_OK, "CPU merge failed: %s", dfa_last_error());
        to_host(og, oad, (size_t)no * es);
        to_host(lg, lad, 4 * (size_t)nl);
        double od = 0, ld = 0;
        for (int64_t i = 0; i < no; i++) {
            const double x = fabs(tl_get(t, og, i) - tl_get(t, oa, i));
            if (!(x <= od)) od = x;
        }
        for (int64_t i = 0; i < nl; i++) {
            const double x = la[i] == -INFINITY ? (lg[i] == -INFINITY ? 0.0 : INFINITY) : fabs(lg[i] - la[i]);
            if (!(x <= ld)) ld = x;
        }
        const double unit = t == DFA_F32 ? 1e-5 : t == DFA_F16 ? 2e-3 : 1.6e-2;
        CHECK(od <= unit * 4 && ld <= 1e-5 * 10, "merge (%s) differs from the CPU merge: o by %.3g, lse by %.3g",
              cli_dtype_name(t), od, ld);
        CUDA_OK(cudaFree(oad)); CUDA_OK(cudaFree(opd)); CUDA_OK(cudaFree(lad)); CUDA_OK(cudaFree(lpd));
        free(oa); free(op); free(og); free(la); free(lp); free(lg);
    }
}

/* check_case over a list of shapes, one progress line each ("<label> <i> done: <shape>"). */
static void check_shapes(const shape *list, int n, const char *label) {
    for (int i = 0; i < n; i++) {
        const shape *s = &list[i];
        dfa_attn_desc d = tl_desc(s->b, s->sq, s->sk, s->h, s->hkv, s->d, s->t, s->causal, s->qs, s->ks);
        d.head_dim_v = s->dv;
        d.softcap = s->softcap;
        check_case(&d, &d, s->bwd);
        printf("  %s %2d done: %s\n", label, i, tl_desc_str(&d));
        fflush(stdout);
    }
}

int main(void) {
    tl_init("test_gpu_attn");
    if (!have_gpu()) return 77; /* ctest: skipped */
    cc = device_cc();
    only_kernel = getenv("DFA_GPU_TEST_KERNEL");
    if (only_kernel && !*only_kernel) only_kernel = NULL;
    printf("device compute capability %d.%d; %s\n", cc / 10, cc % 10, dfa_version_string());
    const char *sm = getenv("DFA_GPU_TEST_SMALL");
    const int small = sm && *sm == '1';
    const char *mk = getenv("DFA_GPU_TEST_MASKS"); /* 0: skip the mask cases; only: nothing else */
    const int masks = !(mk && *mk == '0'), only_masks = mk && !strcmp(mk, "only");
    const shape *list = small ? small_cases : cases;
    const int n = only_masks ? 0 : small ? (int)(sizeof small_cases / sizeof small_cases[0])
                                         : (int)(sizeof cases / sizeof cases[0]);
    check_shapes(list, n, "case");
    if (!small && !only_masks) {
        /* the forward's kept maxima (dfa__softmax_tile's KEEP_MAX): rows whose maximum rises
           block after block, through the one-tile and the persistent kernels (17 query tiles
           x 8 heads: more tiles than SMs) */
        static const shape rising[] = {
            {1, 2100, 2100, 8, 2, 128, DFA_BF16, 1, 0, 0, 1, 0, 0},
            {1, 1000, 1000, 4, 4, 128, DFA_F16, 0, 0, 0, 1, 0, 0},
            {1, 2100, 2100, 4, 4, 64, DFA_BF16, 1, 0, 0, 1, 0, 0},
        };
        rising_keys = 1;
        check_shapes(rising, (int)(sizeof rising / sizeof rising[0]), "rising keys");
        rising_keys = 0;
        test_merge();
    }
    if (masks) test_masks();
    return tl_finish("test_gpu_attn");
}
