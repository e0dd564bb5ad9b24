/* The schedules, proved by the simulator for every P from 1 to 64 (no MPI needed):
 * every needed (query chunk, key chunk) pair computed exactly once for every query row,
 * every receive matched by a send at the same step; steps, work per rank and idle
 * fraction as designed (ours: zero idle for every P; the paper's: 1/(P+1) for even P
 * under the unit model where a diagonal block is half a block); dfa_dist_position; the
 * calibrated machine: it reproduces the 2-GPU runs it was fitted to within 10%, its
 * two-level network and the head-parallel two-level model behave as described. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "seqpar/compute.h"
#include "seqpar/executor.h"
#include "seqpar/schedule.h"
#include "sim/simulate.h"

static const dfa__sched_kind kinds[] = {DFA__SCHED_BALANCED, DFA__SCHED_RING, DFA__SCHED_PAPER};

static void test_correctness(void) {
    static const int rows[] = {1, 2, 7, 64};
    char err[256];
    int n = 0;
    for (int P = 1; P <= 64; P++)
        for (int ki = 0; ki < 3; ki++)
            for (int causal = 0; causal <= 1; causal++)
                for (int ri = 0; ri < 4; ri++)
                    for (int bwd = 0; bwd <= 1; bwd++) {
                        const dfa__sched s = {kinds[ki], P, causal, rows[ri], NULL};
                        const int rc = dfa__sim_check(&s, bwd, err, sizeof err);
                        CHECK(rc == 0, "%s P=%d causal=%d n=%d bwd=%d: %s", dfa__sched_name(s.kind), P, causal,
                              rows[ri], bwd, err);
                        n++;
                    }
    printf("correctness: %d schedules checked\n", n);
}

/* Broken schedules must be caught (the checker is not vacuous): take ours at P = 4 and 6
   and drop a task, duplicate one, add a masked-out pair, unmask a diagonal, overlap a split. */
static void test_checker_catches(void) {
    char err[256];
    for (int P = 4; P <= 6; P += 2) {
        const dfa__sched s = {DFA__SCHED_BALANCED, P, 1, 7, NULL};
        dfa__placed_task base[64], t[65];
        int n = 0;
        for (int step = 0; step < dfa__sched_steps(&s); step++)
            for (int r = 0; r < P; r++)
                if (dfa__sched_task(&s, r, step, &base[n].t)) {
                    base[n].step = step;
                    base[n].rank = r;
                    n++;
                }
        memcpy(t, base, sizeof base[0] * (size_t)n);
        CHECK(dfa__sim_check_tasks(&s, t, n, err, sizeof err) == 0, "P=%d: ours failed: %s", P, err);
        for (int drop = 0; drop < n; drop++) {
            int m = 0;
            for (int i = 0; i < n; i++)
                if (i != drop) t[m++] = base[i];
            CHECK(dfa__sim_check_tasks(&s, t, m, err, sizeof err) != 0, "P=%d: dropping task %d passed", P, drop);
        }
        memcpy(t, base, sizeof base[0] * (size_t)n);
        t[n] = base[n - 1];
        CHECK(dfa__sim_check_tasks(&s, t, n + 1, err, sizeof err) != 0 && strstr(err, "twice"),
              "P=%d: a duplicate passed (%s)", P, err);
        memcpy(t, base, sizeof base[0] * (size_t)n);
        t[n] = (dfa__placed_task){1, 0, {0, 0, 7, 1, 0, 0, 0, 0}}; /* q0 x k1: entirely masked */
        CHECK(dfa__sim_check_tasks(&s, t, n + 1, err, sizeof err) != 0, "P=%d: a masked pair passed", P);
        memcpy(t, base, sizeof base[0] * (size_t)n);
        t[0].t.causal_mask = 0; /* the diagonal unmasked */
        CHECK(dfa__sim_check_tasks(&s, t, n, err, sizeof err) != 0, "P=%d: an unmasked diagonal passed", P);
        memcpy(t, base, sizeof base[0] * (size_t)n);
        for (int i = 0; i < n; i++)
            if (t[i].t.row1 - t[i].t.row0 != 7) { /* a split half: grow it by one row */
                if (t[i].t.row0 > 0) t[i].t.row0--;
                else t[i].t.row1++;
                break;
            }
        CHECK(dfa__sim_check_tasks(&s, t, n, err, sizeof err) != 0, "P=%d: overlapping halves passed", P);
    }
}

static void test_unit_model(void) {
    const int n = 1 << 16; /* a diagonal block is then half a block to 1e-5 */
    for (int P = 1; P <= 64; P++)
        for (int causal = 0; causal <= 1; causal++) {
            dfa__sim_result r[3];
            for (int ki = 0; ki < 3; ki++) {
                const dfa__sched s = {kinds[ki], P, causal, n, NULL};
                const dfa__sim_model m = {0, 1, 0.0, 0.0, 0.0, {1, 1, 1, 8, 2}, NULL, NULL, 0, 0, 0.0, 0.0};
                CHECK(dfa__sim_run(&s, &m, &r[ki]) == 0, "sim failed");
            }
            const double eps = 1e-4;
            if (!causal) {
                for (int ki = 0; ki < 3; ki++) {
                    CHECK(r[ki].steps == P, "non-causal P=%d: %d steps", P, r[ki].steps);
                    CHECK(fabs(r[ki].makespan - P) < eps && r[ki].idle_fraction < eps,
                          "non-causal P=%d %s: makespan %g idle %g", P, dfa__sched_name(kinds[ki]), r[ki].makespan,
                          r[ki].idle_fraction);
                }
            } else {
                const int folded_steps = P == 1 ? 1 : P / 2 + 1;
                CHECK(r[0].steps == folded_steps && r[2].steps == folded_steps && r[1].steps == P,
                      "P=%d: steps balanced %d paper %d ring %d", P, r[0].steps, r[2].steps, r[1].steps);
                /* ours: every rank does P/2 blocks and nobody idles */
                CHECK(fabs(r[0].makespan - P / 2.0) < eps, "P=%d balanced: makespan %g, want %g", P, r[0].makespan,
                      P / 2.0);
                CHECK(r[0].idle_fraction < eps, "P=%d balanced: idle fraction %g", P, r[0].idle_fraction);
                for (int p = 0; p < P; p++)
                    CHECK(fabs(r[0].compute[p] - P / 2.0) < eps, "P=%d balanced: rank %d works %g", P, p,
                          r[0].compute[p]);
                /* ring: P - 1/2; the last rank works all the time */
                CHECK(fabs(r[1].makespan - (P - 0.5)) < eps, "P=%d ring: makespan %g", P, r[1].makespan);
                CHECK(fabs(r[1].idle_fraction - (1.0 - (P / 2.0) / (P - 0.5))) < eps, "P=%d ring: idle %g", P,
                      r[1].idle_fraction);
                /* paper: like ours for odd P, one extra half block for even P */
                const double want = P % 2 ? P / 2.0 : P / 2.0 + 0.5;
                CHECK(fabs(r[2].makespan - want) < eps, "P=%d paper: makespan %g, want %g", P, r[2].makespan, want);
                const double want_idle = P % 2 ? 0.0 : 1.0 / (P + 1);
                CHECK(fabs(r[2].idle_fraction - want_idle) < eps, "P=%d paper: idle %g, want %g", P,
                      r[2].idle_fraction, want_idle);
            }
            for (int ki = 0; ki < 3; ki++) dfa__sim_free(&r[ki]);
        }
}

/* Under a machine model with finite bandwidth, ours is never slower than the paper's,
   which is never slower than the ring (LLaMA-7B-like chunk on an H200-like link). */
static void test_machine_model(void) {
    for (int P = 1; P <= 64; P++)
        for (int bwd = 0; bwd <= 1; bwd++)
            for (int overlap = 0; overlap <= 1; overlap++) {
                double ms[3];
                for (int ki = 0; ki < 3; ki++) {
                    const dfa__sched s = {kinds[ki], P, 1, 4096, NULL};
                    const dfa__sim_model m = {bwd, overlap, 400e12, 300e9, 10e-6, {1, 32, 8, 128, 2}, NULL, NULL, 0, 0, 0.0, 0.0};
                    dfa__sim_result r;
                    CHECK(dfa__sim_run(&s, &m, &r) == 0, "sim failed");
                    ms[ki] = r.makespan;
                    dfa__sim_free(&r);
                }
                CHECK(ms[0] <= ms[2] * (1 + 1e-9) && ms[2] <= ms[1] * (1 + 1e-9),
                      "P=%d bwd=%d overlap=%d: balanced %g paper %g ring %g", P, bwd, overlap, ms[0], ms[2], ms[1]);
            }
}


/* The h200-nvlink preset against the 2-GPU medians it was fitted to (dist-bench; overlap on,
   causal, batch 1, 32 heads x 128, bf16), inline here so that a change of the preset's
   constants cannot move the reference: fwd and fwd+bwd ms of ring and balanced. */
static void test_calibration(void) {
    static const struct {
        int S;
        dfa__sched_kind kind;
        double fwd_ms, fb_ms;
    } runs[] = {
        {32768, DFA__SCHED_RING, 13.0156, 63.8489},      {32768, DFA__SCHED_BALANCED, 9.3523, 44.2372},
        {65536, DFA__SCHED_RING, 52.0890, 252.7052},     {65536, DFA__SCHED_BALANCED, 35.0638, 172.2326},
        {131072, DFA__SCHED_RING, 223.5759, 965.2838},   {131072, DFA__SCHED_BALANCED, 155.8680, 658.3688},
        {262144, DFA__SCHED_RING, 925.6312, 3801.8945},  {262144, DFA__SCHED_BALANCED, 637.0909, 2590.2437},
    };
    static const double single_fb_ms[] = {78.6449, 318.1783, 1257.0859, 5038.6177}; /* 1 GPU, same S */
    const double tol = 0.10; /* the bar the calibration is held to */
    const dfa__sim_machine *mc = dfa__sim_machine_preset("h200-nvlink");
    CHECK(mc != NULL && dfa__sim_machine_preset("h200-cluster") != NULL && dfa__sim_machine_preset("nope") == NULL,
          "presets");
    if (!mc) return;
    const dfa__msg_shape sh = {1, 32, 32, 128, 2};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        double t[2];
        for (int bwd = 0; bwd <= 1; bwd++) {
            const dfa__sched s = {runs[i].kind, 2, 1, runs[i].S / 2, NULL};
            const dfa__sim_model m = dfa__sim_model_of(mc, &sh, bwd, 1, 0);
            dfa__sim_result r;
            CHECK(dfa__sim_run(&s, &m, &r) == 0, "sim failed");
            t[bwd] = 1e3 * r.makespan;
            dfa__sim_free(&r);
        }
        const double mb = runs[i].fb_ms - runs[i].fwd_ms;
        CHECK(fabs(t[0] / runs[i].fwd_ms - 1) <= tol, "S=%d %s fwd: model %.2f ms, measured %.2f", runs[i].S,
              dfa__sched_name(runs[i].kind), t[0], runs[i].fwd_ms);
        CHECK(fabs(t[1] / mb - 1) <= tol, "S=%d %s bwd: model %.2f ms, measured %.2f", runs[i].S,
              dfa__sched_name(runs[i].kind), t[1], mb);
        CHECK(fabs((t[0] + t[1]) / runs[i].fb_ms - 1) <= tol, "S=%d %s f+b: model %.2f ms, measured %.2f", runs[i].S,
              dfa__sched_name(runs[i].kind), t[0] + t[1], runs[i].fb_ms);
        const double one = dfa__sim_whole_seconds(mc, &sh, runs[i].S, 0, 0) + dfa__sim_whole_seconds(mc, &sh, runs[i].S, 1, 0);
        CHECK(fabs(1e3 * one / single_fb_ms[i / 2] - 1) <= 0.01, "S=%d one GPU: model %.2f ms, measured %.2f",
              runs[i].S, 1e3 * one, single_fb_ms[i / 2]);
    }
    /* the library's own copy of the measurements: 4 lengths x 2 schedules x overlap on/off */
    CHECK(dfa__sim_measured_2gpu_count == 16, "%d measured runs", dfa__sim_measured_2gpu_count);
    /* rates: exact at a knot, between the neighbours between knots, ordered by bound */
    const double a = dfa__sim_block_rate(mc, 0, DFA__BLOCK_FULL, 32768, 0);
    const double b = dfa__sim_block_rate(mc, 0, DFA__BLOCK_FULL, 65536, 0);
    const double c = dfa__sim_block_rate(mc, 0, DFA__BLOCK_FULL, 46341, 0);
    CHECK(fabs(a - 519.0e12) < 1e6 && c <= fmax(a, b) && c >= fmin(a, b), "rate interpolation %g %g %g", a, b, c);
    CHECK(dfa__sim_block_rate(mc, 1, DFA__BLOCK_DIAG, 1 << 20, -1) < dfa__sim_block_rate(mc, 1, DFA__BLOCK_DIAG, 1 << 20, 0) &&
              dfa__sim_block_rate(mc, 1, DFA__BLOCK_DIAG, 1 << 20, 1) > dfa__sim_block_rate(mc, 1, DFA__BLOCK_DIAG, 1 << 20, 0),
          "bounds not ordered");
}

/* The two-level network: one node, or nodes whose link equals the intra-node one, give the
   flat model's makespan exactly; a slower inter-node link never helps. For every P 1..64,
   every schedule, both passes, the calibrated cluster preset runs, and the balanced schedule
   is not slower than the ring. */
static void test_two_level_network(void) {
    const dfa__sim_machine *mc = dfa__sim_machine_preset("h200-cluster");
    const dfa__msg_shape sh = {1, 32, 32, 128, 2};
    for (int P = 1; P <= 64; P++)
        for (int bwd = 0; bwd <= 1; bwd++) {
            double bal = 0.0, ring = 0.0;
            for (int ki = 0; ki < 3; ki++) {
                const dfa__sched s = {kinds[ki], P, 1, 16384, NULL};
                dfa__sim_model m = dfa__sim_model_of(mc, &sh, bwd, 1, 0);
                dfa__sim_result r0, r1, r2, r3;
                m.gpus_per_node = 0;
                CHECK(dfa__sim_run(&s, &m, &r0) == 0, "flat sim failed");
                m.gpus_per_node = 1;
                m.inter_bandwidth = m.bandwidth;
                m.inter_latency = m.latency;
                CHECK(dfa__sim_run(&s, &m, &r1) == 0, "sim failed");
                m = dfa__sim_model_of(mc, &sh, bwd, 1, 0);
                CHECK(dfa__sim_run(&s, &m, &r2) == 0, "cluster sim failed");
                m.inter_bandwidth /= 4;
                CHECK(dfa__sim_run(&s, &m, &r3) == 0, "slow cluster sim failed");
                CHECK(fabs(r1.makespan - r0.makespan) <= 1e-12 * r0.makespan, "P=%d %s: equal links differ: %g vs %g",
                      P, dfa__sched_name(kinds[ki]), r1.makespan, r0.makespan);
                CHECK(r3.makespan >= r2.makespan * (1 - 1e-12) && r2.makespan >= r2.total_work / P * (1 - 1e-12),
                      "P=%d %s bwd=%d: makespan %g, slower link %g, work/P %g", P, dfa__sched_name(kinds[ki]), bwd,
                      r2.makespan, r3.makespan, r2.total_work / P);
                if (P <= 8) /* one node: the cluster's intra link only */
                    CHECK(fabs(r2.makespan - r0.makespan) <= 1e-12 * r0.makespan, "P=%d one node differs", P);
                if (kinds[ki] == DFA__SCHED_BALANCED) bal = r2.makespan;
                if (kinds[ki] == DFA__SCHED_RING) ring = r2.makespan;
                dfa__sim_free(&r0);
                dfa__sim_free(&r1);
                dfa__sim_free(&r2);
                dfa__sim_free(&r3);
            }
            CHECK(bal <= ring * (1 + 1e-9), "P=%d bwd=%d: balanced %g slower than ring %g", P, bwd, bal, ring);
        }
}

/* Head-parallel across nodes: one node is the inner schedule itself; heads that do not
   divide are refused; at 1M tokens on 64 GPUs it beats flat balanced. */
static void test_heads_across_nodes(void) {
    const dfa__sim_machine *mc = dfa__sim_machine_preset("h200-cluster");
    const dfa__msg_shape sh = {1, 32, 32, 128, 2};
    for (int bwd = 0; bwd <= 1; bwd++) {
        dfa__sim_model m = dfa__sim_model_of(mc, &sh, bwd, 1, 0);
        double t;
        CHECK(dfa__sim_two_level(DFA__SCHED_BALANCED, 1, 4096, 1, &m, &t) == 0, "one node failed");
        const dfa__sched s = {DFA__SCHED_BALANCED, 8, 1, 4096, NULL};
        dfa__sim_result r;
        dfa__sim_model flat = m;
        flat.gpus_per_node = 0;
        CHECK(dfa__sim_run(&s, &flat, &r) == 0, "sim failed");
        CHECK(fabs(t - r.makespan) <= 1e-12 * r.makespan, "one node: %g vs %g", t, r.makespan);
        dfa__sim_free(&r);
        CHECK(dfa__sim_two_level(DFA__SCHED_BALANCED, 3, 4096, 1, &m, &t) == -1, "32 heads over 3 nodes accepted");
        CHECK(dfa__sim_two_level(DFA__SCHED_BALANCED, 0, 4096, 1, &m, &t) == -1, "0 nodes accepted");
        double two, flat64;
        CHECK(dfa__sim_two_level(DFA__SCHED_BALANCED, 8, 16384, 1, &m, &two) == 0, "64 GPUs failed");
        const dfa__sched s64 = {DFA__SCHED_BALANCED, 64, 1, 16384, NULL};
        CHECK(dfa__sim_run(&s64, &m, &r) == 0, "sim failed");
        flat64 = r.makespan;
        dfa__sim_free(&r);
        CHECK(two < flat64, "bwd=%d: two-level %g not faster than flat %g at 1M on 64", bwd, two, flat64);
    }
}

static void test_position(void) {
    CHECK(dfa_dist_position(DFA_SCHEDULE_BALANCED, 2, 4, 100, 7) == 207, "position of row 7 on rank 2");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 0, 1, 5, 4) == 4, "position with one rank");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 3, 4, 1 << 30, (1 << 30) - 1) == 4LL * (1 << 30) - 1,
          "position beyond int range");
    CHECK(dfa_dist_position((dfa_schedule)7, 0, 2, 5, 0) == -1, "bad schedule accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 2, 2, 5, 0) == -1, "rank >= nranks accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, -1, 2, 5, 0) == -1, "negative rank accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 0, 0, 5, 0) == -1, "0 ranks accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 0, 2, 0, 0) == -1, "0 rows accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 0, 2, 5, 5) == -1, "row >= local_rows accepted");
    CHECK(dfa_dist_position(DFA_SCHEDULE_RING, 0, 2, 5, -1) == -1, "negative row accepted");
    CHECK(dfa_comm_rank(NULL) == -1 && dfa_comm_size(NULL) == 0, "rank/size of NULL");
    dfa_comm_destroy(NULL); /* a no-op */
}

/* A random document layout over N positions: runs of 1, short, about a chunk and longer. */
static void random_layout(int32_t *ids, int N, int n) {
    int32_t id = tl_rand_int(-9, 9);
    for (int i = 0; i < N;) {
        const int kind = tl_rand_int(0, 3);
        const int len = kind == 0 ? 1 : kind == 1 ? tl_rand_int(2, 5) : kind == 2 ? tl_rand_int(n / 2 + 1, n + 1)
                                                                                : tl_rand_int(n + 1, 3 * n + 2);
        for (int r = 0; r < len && i < N; r++) ids[i++] = id;
        id += tl_rand_int(1, 2);
    }
}

/* Masked plans (documents, windows) for P = 1..64: the pair work matrix equals a brute-force
   count over global positions, and the simulator proves the plan computes every pair with a
   visible key exactly once, nothing else, with matched messages (both passes). A window shorter
   than a chunk (no documents) pairs only neighbours; the balanced plan's busiest rank carries no
   more work than the ring's. */
static void test_masked_plans(void) {
    static const int rows[] = {1, 3, 16, 37};
    char err[256];
    int checked = 0, lending = 0;
    for (int P = 1; P <= 64; P++)
        for (int rep = 0; rep < 3; rep++) {
            const int n = rows[tl_rand_int(0, 3)], B = tl_rand_int(1, 2), N = P * n;
            dfa_attn_desc d = dfa_attn_desc_init(B, n, n, 1, 1, 8);
            d.causal = tl_rand_int(0, 1);
            const int docs = rep != 1, windowed = rep != 0 || tl_rand_int(0, 1);
            if (windowed) {
                const int choices[] = {-1, 0, 1, n - 1 > 0 ? n - 1 : 0, n + n / 2, N};
                d.flags = DFA_FLAG_WINDOW;
                d.window_left = choices[tl_rand_int(0, 5)];
                d.window_right = choices[tl_rand_int(0, 5)];
            }
            int32_t *layout = malloc(sizeof(int32_t) * (size_t)B * N), *ids = NULL;
            for (int b = 0; b < B; b++) random_layout(layout + (size_t)b * N, N, n);
            if (docs) { /* [P][batch][n]: rank r's rows of every batch row */
                ids = malloc(sizeof(int32_t) * (size_t)B * N);
                for (int r = 0; r < P; r++)
                    for (int b = 0; b < B; b++)
                        memcpy(ids + ((size_t)r * B + b) * n, layout + (size_t)b * N + (size_t)r * n,
                               sizeof(int32_t) * (size_t)n);
            }
            int64_t *work = malloc(sizeof(int64_t) * (size_t)P * P);
            int *prow = malloc(sizeof(int) * 2 * (size_t)P * P), *pkey = malloc(sizeof(int) * 2 * (size_t)P * P);
            /* the diagonals' prefix work (busy diagonals lend their first rows): causal, one batch row */
            const int S1 = DFA__DIAG_SAMPLES + 1;
            int64_t *pref = d.causal && B == 1 && rep != 2 ? malloc(sizeof(int64_t) * (size_t)P * 2 * S1) : NULL;
            int64_t *cost = rep != 0 ? malloc(sizeof(int64_t) * (size_t)P * P) : NULL;
            dfa__mask_pair_work(&d, P, ids, work, prow, pkey, cost, pref);
            for (int x = 0; x < P * P && cost; x++)
                CHECK(cost[x] >= work[x] && (cost[x] > 0) == (work[x] > 0),
                      "P=%d n=%d: pair %d costs %lld for %lld visible pairs", P, n, x, (long long)cost[x],
                      (long long)work[x]);
            for (int r = 0; r < P && pref; r++)
                for (int j = 0; j <= DFA__DIAG_SAMPLES; j++) {
                    const int x = j * n / DFA__DIAG_SAMPLES;
                    int64_t count = 0;
                    for (int i = r * n; i < r * n + x; i++)
                        for (int jj = r * n; jj < r * n + x; jj++) {
                            if (jj > i) continue;
                            if (docs && layout[i] != layout[jj]) continue;
                            if (windowed && d.window_left >= 0 && i - jj > d.window_left) continue;
                            if (windowed && d.window_right >= 0 && jj - i > d.window_right) continue;
                            count++;
                        }
                    const int64_t *pr = pref + (size_t)r * 2 * S1;
                    CHECK(pr[j] == count, "P=%d n=%d: diagonal %d's first %d rows have %lld visible pairs, the prefix "
                          "counts %lld", P, n, r, x, (long long)count, (long long)pr[j]);
                    CHECK(pr[S1 + j] >= pr[j] && (j == 0 || pr[S1 + j] >= pr[S1 + j - 1]) &&
                              (j < DFA__DIAG_SAMPLES || pr[S1 + j] == (cost ? cost[(size_t)r * P + r] : pr[S1 + j])),
                          "P=%d n=%d: diagonal %d's prefix cost %lld at %d rows (pairs %lld)", P, n, r,
                          (long long)pr[S1 + j], x, (long long)pr[j]);
                }
            int bad = 0;
            for (int q = 0; q < P && !bad; q++)
                for (int k = 0; k < P && !bad; k++) {
                    int64_t count = 0;
                    int lo = n, hi = 0; /* the query rows (of the chunk) with a visible key */
                    int klo = n, khi = 0; /* the key rows (of the chunk) some query row sees */
                    for (int b = 0; b < B; b++)
                        for (int i = q * n; i < (q + 1) * n; i++)
                            for (int j = k * n; j < (k + 1) * n; j++) {
                                if (d.causal && j > i) continue;
                                if (docs && layout[(size_t)b * N + i] != layout[(size_t)b * N + j]) continue;
                                if (windowed && d.window_left >= 0 && i - j > d.window_left) continue;
                                if (windowed && d.window_right >= 0 && j - i > d.window_right) continue;
                                count++;
                                if (i - q * n < lo) lo = i - q * n;
                                if (i - q * n + 1 > hi) hi = i - q * n + 1;
                                if (j - k * n < klo) klo = j - k * n;
                                if (j - k * n + 1 > khi) khi = j - k * n + 1;
                            }
                    if (lo >= hi) lo = hi = 0;
                    if (klo >= khi) klo = khi = 0;
                    const int *pk = &pkey[2 * ((size_t)q * P + k)];
                    CHECK(pk[0] == klo && pk[1] == khi, "P=%d n=%d B=%d: q%d x k%d has visible keys [%d:%d], the plan [%d:%d]",
                          P, n, B, q, k, klo, khi, pk[0], pk[1]);
                    const int *pr = &prow[2 * ((size_t)q * P + k)];
                    CHECK(pr[0] == lo && pr[1] == hi, "P=%d n=%d B=%d: q%d x k%d has visible rows [%d:%d], the plan [%d:%d]",
                          P, n, B, q, k, lo, hi, pr[0], pr[1]);
                    bad = count != work[(size_t)q * P + k];
                    CHECK(!bad, "P=%d n=%d B=%d causal=%d docs=%d window=(%d,%d): q%d x k%d has %lld visible pairs, "
                          "the plan counts %lld", P, n, B, d.causal, docs, windowed ? d.window_left : -9,
                          windowed ? d.window_right : -9, q, k, (long long)count, (long long)work[(size_t)q * P + k]);
                }
            int64_t most[2] = {0, 0};
            for (int ki = 0; ki < 2; ki++) {
                dfa__sched s = {ki ? DFA__SCHED_RING : DFA__SCHED_BALANCED, P, d.causal, n, NULL};
                dfa__sched_plan plan; /* row windows off the diagonal in every other plan */
                CHECK(dfa__sched_plan_build(&s, &(dfa__plan_counts){.work = work, .rows = rep % 2 ? prow : NULL,
                                         .keys = rep % 2 && B == 1 ? pkey : NULL, .cost = cost, .diag_prefix = pref,
                                         .split_pairs = B == 1}, &plan) == 0, "plan build failed");
                s.plan = &plan;
                for (int bwd = 0; bwd <= 1; bwd++) {
                    CHECK(dfa__sim_check(&s, bwd, err, sizeof err) == 0, "masked %s P=%d n=%d causal=%d docs=%d: %s",
                          dfa__sched_name(s.kind), P, n, d.causal, docs, err);
                    checked++;
                }
                int64_t *load = calloc((size_t)P, sizeof *load);
                for (int t = 0; t < dfa__sched_steps(&s); t++)
                    for (int r = 0; r < P; r++) {
                        dfa__task tk;
                        if (!dfa__sched_task(&s, r, t, &tk)) continue;
                        load[r] += tk.work;
                        lending += dfa__task_lent(&tk);
                        if (windowed && !docs && d.window_left >= 0 && d.window_left < n && d.window_right >= 0 &&
                            d.window_right < n)
                            CHECK(abs(tk.q_chunk - tk.k_chunk) <= 1, "window (%d,%d) < n=%d but q%d x k%d computed",
                                  d.window_left, d.window_right, n, tk.q_chunk, tk.k_chunk);
                    }
                for (int r = 0; r < P; r++)
                    if (load[r] > most[ki]) most[ki] = load[r];
                free(load);
                dfa__sched_plan_free(&plan);
            }
            if (!cost) /* (balanced on tile cost, the plan may carry more visible pairs on one rank) */
                CHECK(most[0] <= most[1], "P=%d: the balanced plan's busiest rank has %lld pairs, the ring's %lld", P,
                      (long long)most[0], (long long)most[1]);
            free(layout); free(ids); free(work); free(prow); free(pkey); free(pref); free(cost);
        }
    printf("masked plans: %d checked (%d rows lent by busy diagonals)\n", checked, lending);
    CHECK(lending > 0, "no random plan lent a diagonal's rows: the checker's lent case went untested");
}

/* The masked checker is not vacuous: a plan with a task dropped, duplicated, or a pair without
   visible keys added is refused. */
static void test_masked_checker_catches(void) {
    enum { P = 5 };
    int64_t work[P * P] = {0};
    for (int q = 0; q < P; q++) {
        work[q * P + q] = 10;
        if (q) work[q * P + q - 1] = 3 + q;
    }
    dfa__sched s = {DFA__SCHED_BALANCED, P, 1, 8, NULL};
    dfa__sched_plan plan;
    CHECK(dfa__sched_plan_build(&s, &(dfa__plan_counts){.work = work}, &plan) == 0, "plan build failed");
    s.plan = &plan;
    dfa__placed_task base[64], t[65];
    int n = 0;
    for (int step = 0; step < dfa__sched_steps(&s); step++)
        for (int r = 0; r < P; r++)
            if (dfa__sched_task(&s, r, step, &base[n].t)) base[n].step = step, base[n].rank = r, n++;
    char err[256];
    memcpy(t, base, sizeof base[0] * (size_t)n);
    CHECK(dfa__sim_check_masked_tasks(&s, t, n, err, sizeof err) == 0, "the plan itself failed: %s", err);
    CHECK(n == 2 * P - 1, "the plan has %d tasks, want %d (the pairs with visible keys)", n, 2 * P - 1);
    for (int drop = 0; drop < n; drop++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (i != drop) t[m++] = base[i];
        CHECK(dfa__sim_check_masked_tasks(&s, t, m, err, sizeof err) != 0 && strstr(err, "nobody"),
              "dropping task %d passed", drop);
    }
    memcpy(t, base, sizeof base[0] * (size_t)n);
    t[n] = base[0];
    CHECK(dfa__sim_check_masked_tasks(&s, t, n + 1, err, sizeof err) != 0 && strstr(err, "twice"), "a duplicate passed");
    memcpy(t, base, sizeof base[0] * (size_t)n);
    t[n] = (dfa__placed_task){1, 0, {4, 0, 8, 1, 1, 1, 0, 0}}; /* q4 x k1: no visible key */
    CHECK(dfa__sim_check_masked_tasks(&s, t, n + 1, err, sizeof err) != 0 && strstr(err, "no visible key"),
          "a pair without visible keys passed");
    memcpy(t, base, sizeof base[0] * (size_t)n);
    t[0].t.row1 = 4; /* half a chunk */
    CHECK(dfa__sim_check_masked_tasks(&s, t, n, err, sizeof err) != 0, "half a chunk passed");
    dfa__sched_plan_free(&plan);
}

/* Busy diagonals lend their first rows (schedule.h): with short documents in chunk 0 and one long
   document over chunk 1, nothing off the diagonal is visible and chunk 1's diagonal is about 20
   times chunk 0's, so only lending can balance: rank 0 takes chunk 1's first rows against its
   first keys, as many as one band lends (half the chunk: a quarter of the pairs), then maybe a
   further band, and the simulator proves the plan (every visible pair once, matched messages,
   both passes). The checker refuses lent rows that are doubled, too many, leave a gap, or whose
   rest does not match. */
static void test_lent_diagonals(void) {
    enum { P = 2, n = 640 };
    int32_t ids[P * n];
    for (int i = 0; i < n; i++) ids[i] = i / 32;     /* chunk 0: 20 documents of 32 rows */
    for (int i = n; i < P * n; i++) ids[i] = 1000;   /* chunk 1: one document */
    dfa_attn_desc d = dfa_attn_desc_init(1, n, n, 1, 1, 8);
    d.causal = 1;
    int64_t work[P * P], cost[P * P], pref[P * 2 * (DFA__DIAG_SAMPLES + 1)];
    int prow[2 * P * P];
    dfa__mask_pair_work(&d, P, ids, work, prow, NULL, cost, pref);
    CHECK(work[1] == 0 && work[2] == 0, "off-diagonal pairs visible: %lld %lld", (long long)work[1], (long long)work[2]);
    dfa__sched s = {DFA__SCHED_BALANCED, P, 1, n, NULL};
    dfa__sched_plan plan;
    CHECK(dfa__sched_plan_build(&s, &(dfa__plan_counts){.work = work, .rows = prow, .cost = cost, .diag_prefix = pref,
                                                       .split_pairs = 1}, &plan) == 0, "plan build failed");
    s.plan = &plan;
    int64_t load[P] = {0, 0};
    dfa__placed_task all[16];
    int nt = 0, lent = 0, bands = 0;
    for (int t = 0; t < dfa__sched_steps(&s); t++)
        for (int r = 0; r < P; r++)
            if (nt < 16 && dfa__sched_task(&s, r, t, &all[nt].t)) {
                all[nt].step = t, all[nt].rank = r;
                load[r] += all[nt].t.work;
                if (dfa__task_lent(&all[nt].t)) {
                    bands++;
                    if (all[nt].t.row0 == 0) lent = nt;
                    CHECK(all[nt].rank == 0 && all[nt].t.q_chunk == 1 && all[nt].t.k_row0 == 0 &&
                              all[nt].t.k_row1 == all[nt].t.row1 && all[nt].t.row1 - all[nt].t.row0 <= n / 2,
                          "a band q%d[%d:%d] x k%d[%d:%d] on rank %d", all[nt].t.q_chunk, all[nt].t.row0,
                          all[nt].t.row1, all[nt].t.k_chunk, all[nt].t.k_row0, all[nt].t.k_row1, all[nt].rank);
                }
                nt++;
            }
    const int64_t most = load[0] > load[1] ? load[0] : load[1];
    CHECK(nt == 2 + bands && lent && all[lent].t.row1 == n / 2,
          "chunk 1's diagonal did not lend its first half to rank 0 (%d tasks, %d bands)", nt, bands);
    CHECK(most <= work[3] - all[lent].t.work && most * 4 <= work[3] * 3,
          "rank 1 keeps %lld of its %lld pairs after lending %d rows in %d band(s) (want: at most 3/4 with the first "
          "band half its rows, the most one band lends)",
          (long long)most, (long long)work[3], all[lent].t.row1, bands);
    char err[256];
    for (int bwd = 0; bwd <= 1; bwd++)
        CHECK(dfa__sim_check(&s, bwd, err, sizeof err) == 0, "the lending plan failed the simulator: %s", err);
    dfa__placed_task t[17];
    memcpy(t, all, sizeof all[0] * (size_t)nt);
    CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) == 0, "the plan itself failed: %s", err);
    t[nt] = all[lent];
    CHECK(dfa__sim_check_masked_tasks(&s, t, nt + 1, err, sizeof err) != 0, "rows lent twice passed");
    t[lent].t.row1 = t[lent].t.k_row1 = n;
    CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0, "a whole diagonal lent passed");
    if (bands > 1) { /* a gap between bands */
        memcpy(t, all, sizeof all[0] * (size_t)nt);
        t[lent].t.row1 = t[lent].t.k_row1 = all[lent].t.row1 - 10;
        CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0 && strstr(err, "gap"),
              "a gap between lent bands passed");
    }
    memcpy(t, all, sizeof all[0] * (size_t)nt);
    t[lent].t.k_row1 = n;
    CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0, "lent rows reading every key passed");
    memcpy(t, all, sizeof all[0] * (size_t)nt);
    t[lent].t.row1 = t[lent].t.k_row1 = all[lent].t.row1 - 1;
    CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0, "a row between lent and kept passed");
    dfa__sched_plan_free(&plan);
    /* the ring never lends */
    s = (dfa__sched){DFA__SCHED_RING, P, 1, n, NULL};
    CHECK(dfa__sched_plan_build(&s, &(dfa__plan_counts){.work = work, .rows = prow, .cost = cost, .diag_prefix = pref}, &plan) == 0, "plan build failed");
    for (int i = 0; i < plan.steps * P; i++) CHECK(!dfa__task_lent(&plan.tasks[i]), "the ring lent rows");
    dfa__sched_plan_free(&plan);
}

/* One long document from a row of chunk P - 2 into chunk P - 1 (the rest short documents, within
   tiles): the pair (P - 1, P - 2) is dense and most of the work. */
static void straddle_layout(int32_t *ids, int P, int n, int from, int to) {
    int32_t id = 0;
    for (int i = 0; i < P * n; id++) {
        if (i == from) {
            while (i < to) ids[i++] = id;
            continue;
        }
        const int len = tl_rand_int(1, 40), tile_end = (i / DFA__PLAN_TILE + 1) * DFA__PLAN_TILE;
        for (int r = 0; r < len && i < tile_end && i != from; r++) ids[i++] = id;
    }
}

/* Split pairs (schedule.h): a long document over chunk P - 2 and into chunk P - 1 makes the pair
   (P - 1, P - 2) most of its rank's work; with split_pairs its last rows or keys go to the least
   busy ranks. Random straddles for P = 2..12, with and without a window, balanced on visible
   pairs and on tile cost with folds, lending or not, pieces bounded by a descriptor's bytes or
   not: the simulator proves every plan (each visible
   pair once, pieces tiling their pair, matched messages, both passes); every piece is dense and
   within the bounds; splitting never leaves the busiest rank busier; and the plain case is
   checked by hand. The checker refuses pieces that overlap, leave a gap, carry the wrong work, or
   split a pair that is not dense. */
static void test_split_pairs(void) {
    char err[256];
    int plans = 0, pieces = 0, key_pieces = 0;
    dfa_attn_desc big = dfa_attn_desc_init(1, 1, 1, 32, 32, 128); /* the bytes of a 32 x 128 head call */
    big.dtype = DFA_BF16;
    const dfa__piece_bytes bounded = dfa__piece_bytes_of(&big);
    for (int P = 2; P <= 12; P++)
        for (int rep = 0; rep < 6; rep++) {
            const int n = rep == 0 ? 512 : 256 + 128 * tl_rand_int(0, 3), N = P * n;
            const int from = P >= 2 ? (P - 2) * n + tl_rand_int(0, n / 2) : 0;
            const int to = rep == 0 ? (P - 1) * n + 3 * n / 4 : (P - 1) * n + tl_rand_int(1, n);
            int32_t *ids = malloc(sizeof(int32_t) * (size_t)N);
            straddle_layout(ids, P, n, from, to);
            dfa_attn_desc d = dfa_attn_desc_init(1, n, n, 1, 1, 8);
            d.causal = 1;
            if (rep >= 4) { /* and a window: pairs it cuts are not dense, those within it may be */
                d.flags = DFA_FLAG_WINDOW;
                d.window_left = rep == 4 ? n + n / 2 : 3 * n;
                d.window_right = -1;
            }
            int64_t *work = malloc(sizeof(int64_t) * (size_t)P * P), *cost = malloc(sizeof(int64_t) * (size_t)P * P);
            int *prow = malloc(sizeof(int) * 2 * (size_t)P * P), *pkey = malloc(sizeof(int) * 2 * (size_t)P * P);
            int64_t *pref = malloc(sizeof(int64_t) * (size_t)P * 2 * (DFA__DIAG_SAMPLES + 1));
            dfa__mask_pair_work(&d, P, ids, work, prow, pkey, cost, pref);
            const size_t x = (size_t)(P - 1) * P + (size_t)(P - 2);
            CHECK(rep >= 4 || work[x] == (int64_t)(prow[2 * x + 1] - prow[2 * x]) * (pkey[2 * x + 1] - pkey[2 * x]),
                  "P=%d: the straddled pair is not dense", P);
            int64_t most[2] = {0, 0};
            for (int split = 0; split <= 1; split++) {
                dfa__sched s = {DFA__SCHED_BALANCED, P, 1, n, NULL};
                dfa__plan_counts in = {.work = work, .rows = prow, .keys = pkey, .split_pairs = split};
                if (rep % 3 == 1) in.cost = cost, in.fold_cost = DFA__PLAN_FOLD_COST / 8;
                if (rep % 3 == 2) in.diag_prefix = pref;
                if (rep % 2) in.piece = bounded;
                dfa__sched_plan plan;
                CHECK(dfa__sched_plan_build(&s, &in, &plan) == 0, "plan build failed");
                s.plan = &plan;
                for (int bwd = 0; bwd <= 1; bwd++)
                    CHECK(dfa__sim_check(&s, bwd, err, sizeof err) == 0, "split P=%d n=%d rep %d split %d: %s", P, n,
                          rep, split, err);
                int64_t *load = calloc((size_t)P, sizeof *load);
                for (int i = 0; i < plan.steps * P; i++) {
                    const dfa__task *t = &plan.tasks[i];
                    if (t->q_chunk < 0) continue;
                    load[i % P] += t->work;
                    if (t->q_chunk == t->k_chunk) continue;
                    const size_t y = (size_t)t->q_chunk * P + (size_t)t->k_chunk;
                    int k0, k1;
                    dfa__plan_key_window(pkey[2 * y], pkey[2 * y + 1], n, &k0, &k1);
                    const int whole_rows = t->row0 == prow[2 * y] && t->row1 == prow[2 * y + 1];
                    if (whole_rows && t->k_row0 == k0 && t->k_row1 == k1) continue;
                    pieces++;
                    key_pieces += whole_rows;
                    CHECK(split, "P=%d: a piece q%d[%d:%d] x k%d[%d:%d] without split_pairs", P, t->q_chunk, t->row0,
                          t->row1, t->k_chunk, t->k_row0, t->k_row1);
                    const int v0 = pkey[2 * y] > t->k_row0 ? pkey[2 * y] : t->k_row0;
                    const int v1 = pkey[2 * y + 1] < t->k_row1 ? pkey[2 * y + 1] : t->k_row1;
                    CHECK(t->work == (int64_t)(t->row1 - t->row0) * (v1 - v0) &&
                              (whole_rows || (t->k_row0 == k0 && t->k_row1 == k1)) &&
                              (t->row0 % DFA__PLAN_TILE == 0 || t->row0 == prow[2 * y]) &&
                              (t->k_row0 % DFA__PLAN_TILE == 0 || t->k_row0 == k0),
                          "P=%d: piece q%d[%d:%d] x k%d[%d:%d] carries %lld pairs", P, t->q_chunk, t->row0, t->row1,
                          t->k_chunk, t->k_row0, t->k_row1, (long long)t->work);
                    const int helper = i % P != t->q_chunk && i % P != t->k_chunk; /* both inputs remote */
                    CHECK(!helper || dfa__piece_fits(&in.piece, t->row1 - t->row0, dfa__task_key_rows(t, n), n),
                          "P=%d: piece q%d[%d:%d] x k%d[%d:%d] over the bytes of a chunk's message", P, t->q_chunk,
                          t->row0, t->row1, t->k_chunk, t->k_row0, t->k_row1);
                }
                for (int r = 0; r < P; r++) most[split] = load[r] > most[split] ? load[r] : most[split];
                free(load);
                if (rep == 0 && split && P >= 3) { /* 384 rows of chunk P - 1 in the document: a piece of
                                                      128 rows or more moves off, unless chunk P - 2's own
                                                      diagonal binds */
                    const int64_t pair = work[x], diag = work[(size_t)(P - 2) * P + P - 2];
                    CHECK(most[1] < most[0] && most[1] <= (diag > most[0] - pair / 4 ? diag : most[0] - pair / 4),
                          "P=%d n=%d: the busiest rank has %lld pairs split, %lld whole (pair %lld, diagonal %lld)", P,
                          n, (long long)most[1], (long long)most[0], (long long)pair, (long long)diag);
                }
                if (rep == 0 && split && P >= 3) { /* the checker catches broken pieces */
                    dfa__placed_task all[256], t[257];
                    int nt = 0, piece = -1, by_keys = 0;
                    int k0, k1;
                    dfa__plan_key_window(pkey[2 * x], pkey[2 * x + 1], n, &k0, &k1);
                    for (int st = 0; st < plan.steps; st++)
                        for (int r = 0; r < P; r++)
                            if (nt < 256 && dfa__sched_task(&s, r, st, &all[nt].t)) {
                                const dfa__task *u = &all[nt].t;
                                all[nt].step = st, all[nt].rank = r;
                                if (u->q_chunk == P - 1 && u->k_chunk == P - 2 && (u->row0 > prow[2 * x] || u->k_row0 > k0))
                                    piece = nt, by_keys = u->k_row0 > k0;
                                nt++;
                            }
                    CHECK(piece >= 0, "P=%d: the straddled pair was not split", P);
                    if (piece >= 0) {
                        /* moving a piece's first row (key) one back or on: with the pair's work per row (key) */
                        const int64_t per = by_keys ? all[piece].t.row1 - all[piece].t.row0 : pkey[2 * x + 1] - pkey[2 * x];
                        const int in_vis = !by_keys || (all[piece].t.k_row0 > pkey[2 * x] && all[piece].t.k_row0 < pkey[2 * x + 1]);
                        memcpy(t, all, sizeof all[0] * (size_t)nt);
                        CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) == 0, "the plan: %s", err);
                        memcpy(t, all, sizeof all[0] * (size_t)nt);
                        if (by_keys) t[piece].t.k_row0 -= 1;
                        else t[piece].t.row0 -= 1;
                        t[piece].t.work += in_vis ? per : 0;
                        CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0 && strstr(err, "twice"),
                              "overlapping pieces passed: %s", err);
                        memcpy(t, all, sizeof all[0] * (size_t)nt);
                        if (by_keys) t[piece].t.k_row0 += 1;
                        else t[piece].t.row0 += 1;
                        t[piece].t.work -= in_vis ? per : 0;
                        CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0 && strstr(err, "nobody"),
                              "a gap between pieces passed: %s", err);
                        memcpy(t, all, sizeof all[0] * (size_t)nt);
                        t[piece].t.work += 1;
                        CHECK(dfa__sim_check_masked_tasks(&s, t, nt, err, sizeof err) != 0, "a piece's wrong work passed");
                        /* the same pieces of a pair that is not dense */
                        int64_t *w2 = malloc(sizeof(int64_t) * (size_t)P * P);
                        memcpy(w2, work, sizeof(int64_t) * (size_t)P * P);
                        w2[x] -= 1;
                        dfa__sched_plan fake = plan;
                        fake.work = w2;
                        dfa__sched s2 = s;
                        s2.plan = &fake;
                        memcpy(t, all, sizeof all[0] * (size_t)nt);
                        for (int i = 0; i < nt; i++)
                            if (t[i].t.q_chunk == P - 1 && t[i].t.k_chunk == P - 2 && i != piece) {
                                t[i].t.work -= 1;
                                break;
                            }
                        CHECK(dfa__sim_check_masked_tasks(&s2, t, nt, err, sizeof err) != 0 && strstr(err, "not dense"),
                              "pieces of a pair that is not dense passed: %s", err);
                        free(w2);
                    }
                }
                dfa__sched_plan_free(&plan);
                plans++;
            }
            CHECK(most[1] <= most[0] || rep % 3 == 1, "P=%d n=%d rep %d: split plan's busiest %lld above unsplit %lld",
                  P, n, rep, (long long)most[1], (long long)most[0]);
            free(ids); free(work); free(cost); free(prow); free(pkey); free(pref);
        }
    printf("split pairs: %d plans checked, %d pieces (%d by keys)\n", plans, pieces, key_pieces);
    CHECK(pieces > key_pieces && key_pieces > 0, "no plan split a pair by rows, or none by keys: pieces went untested");
}

/* The executor's workspace follows the plan. Message slots: three (a step's buffers live from
   the step before it to the step after), each as large as the largest step it serves; at P = 2
   only step 1 moves anything. The own tasks' scratch: only what they use. A window of query rows
   of one batch row is sent and computed in place (only its lse is packed). The trainer's shape
   (16 heads, 8 kv, 128, bf16), backward, per row, on rank 0 (the larger): float32 accumulators
   dq, dk, dv 16 KiB; step 1's messages 18 KiB (half a chunk of q, o, dout in, its dq out, the
   partial dk, dv of rank 1 in); its own partial dk, dv 8 KiB: 42. It was 114 (three slots of the
   largest step, scratch for a whole chunk's packed window and both results). */
static void test_workspace_slots(void) {
    const int n = 4096;
    dfa_dist_desc d = dfa_dist_desc_init(1, n, 16, 8, 128);
    d.attn.causal = 1;
    d.attn.dtype = DFA_BF16;
    const size_t p2 = dfa__dist_workspace_bytes(2, &d, dfa__compute_cpu(), 0);
    const size_t p8 = dfa__dist_workspace_bytes(8, &d, dfa__compute_cpu(), 0);
    const double kib2 = (double)p2 / 1024.0 / n, kib8 = (double)p8 / 1024.0 / n;
    CHECK(kib2 >= 38.0 && kib2 <= 46.0, "P = 2 workspace %.1f KiB per row, expected 42 (16 + 18 + 8)", kib2);
    CHECK(kib8 > kib2, "P = 8 workspace %.1f KiB per row, not above P = 2's %.1f", kib8, kib2);
    d.attn.flags |= DFA_FLAG_WINDOW; /* masked: the steps are not known ahead, every slot is bounded */
    d.attn.window_left = 64;
    d.attn.window_right = -1;
    CHECK(dfa__dist_workspace_bytes(2, &d, dfa__compute_cpu(), 0) >= p2, "a masked call's bound below the unmasked");
}

int main(void) {
    tl_init("test_schedule");
    test_workspace_slots();
    test_correctness();
    test_checker_catches();
    test_masked_plans();
    test_masked_checker_catches();
    test_lent_diagonals();
    test_split_pairs();
    test_unit_model();
    test_machine_model();
    test_calibration();
    test_two_level_network();
    test_heads_across_nodes();
    test_position();
    return tl_finish("test_schedule");
}
