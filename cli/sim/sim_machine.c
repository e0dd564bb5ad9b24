/* The simulator's calibrated machines: every constant of the model in one place, each with
 * where it comes from. See simulate.h for how the model uses them.
 *
 * Kernel rates per block shape: fitted to the per-step compute times that
 * `distflash dist-bench --device cuda` prints for one timed call of the ring and of the
 * balanced schedule on two H200s (NVLink; causal, batch 1, 32 heads x 128, bf16), after taking
 * away the element-wise passes the executor adds inside a step (packing its own query rows,
 * folding its own partials) at `hbm` and `launch` below. Shapes: diag = the causal n x n block
 * (step 0), full = n x n unmasked (the ring's step 1), part = n/2 rows x n keys (the balanced
 * schedule's last step at even P). `err` is half the spread between the cells of one shape
 * (ranks, schedules), at least 2% (a single timed call runs up to 2% off the median of its
 * configuration), and 4% where a shape has one cell. The knots at n = 2048 and 8192 are not
 * block timings but the single-GPU kernels' rates (d = 128, batch 16 / 4 for the same total
 * tokens; causal -> diag, non-causal -> full and part), with 15% and 10% uncertainty: batch-1
 * blocks have smaller grids.
 *
 * Single GPU on the whole sequence (the efficiency baseline): the single-GPU lines of the same
 * dist-bench output (S = 32k..256k, causal, bf16 outputs); beyond 256k the 256k rate, with the
 * uncertainty doubled.
 *
 * hbm 3.0e12 B/s: an assumption (H200 HBM3e peak 4.8 TB/s; streaming element-wise kernels
 * reach about 60-70% of it), which reproduces the tails the timed calls show after their last
 * step. launch 5 us per element-wise kernel, call 0.2 ms per call: host enqueue and the
 * device-side agreement (assumed; they matter only at short chunks).
 *
 * Links. Inside a 2-GPU NVLink machine: NCCL send/recv at 306-310 GB/s per direction, low 290
 * (5% under), high 310. A node of 8 H200 on NVSwitch (nominal): 450 GB/s per direction
 * (NVLink 4, 900 GB/s bidirectional per GPU), central 370 (NCCL point-to-point reaching ~80% of
 * nominal, as on the 2-GPU machine), low 306 (the 2-GPU machine's), high 450. Between nodes
 * (nominal): one 400 Gb/s NIC per GPU = 50 GB/s per direction, central 45 (NCCL over
 * InfiniBand typically reaches ~90%), low 37.5 (75%), high 50. Latency per message: 10 us
 * inside a node (a NCCL point-to-point launch), 20 us between nodes. */
#include <math.h>
#include <string.h>

#include "simulate.h"

#define K(n, fd, ff, fp, bd, bf, bp, efd, eff, efp, ebd, ebf, ebp) \
    {n, {{fd, ff, fp}, {bd, bf, bp}}, {{efd, eff, efp}, {ebd, ebf, ebp}}}

/* TFLOP/s fwd diag/full/part, bwd diag/full/part; then their relative uncertainties */
#define H200_KNOTS                                                                                          \
    {K(2048, 411e12, 478e12, 478e12, 278e12, 312e12, 312e12, .15, .15, .15, .15, .15, .15),               \
     K(8192, 492e12, 437e12, 437e12, 332e12, 361e12, 361e12, .10, .10, .10, .10, .10, .10),               \
     K(16384, 554.4e12, 541.3e12, 546.3e12, 360.7e12, 319.9e12, 358.1e12, .02, .04, .02, .052, .04, .02),  \
     K(32768, 552.5e12, 519.0e12, 536.1e12, 333.9e12, 356.1e12, 359.5e12, .02, .04, .02, .067, .04, .02),  \
     K(65536, 492.3e12, 466.8e12, 473.5e12, 362.8e12, 366.5e12, 364.3e12, .05, .04, .02, .022, .04, .02),  \
     K(131072, 474.5e12, 452.5e12, 463.4e12, 371.7e12, 367.9e12, 366.3e12, .026, .04, .02, .02, .04, .02)}

#define H200_WHOLE                                                                                          \
    {{32768, {589.6e12, 345.1e12}}, {65536, {503.2e12, 354.3e12}}, {131072, {466.8e12, 368.2e12}},        \
     {262144, {455.8e12, 370.0e12}}}

static const dfa__sim_machine presets[] = {
    {"h200-nvlink", "2 x H200 on NVLink (NCCL 306-310 GB/s per direction), the machine the rates were fitted on", 6,
     H200_KNOTS, 4, H200_WHOLE, 0.02, 3.0e12, 5e-6, 2e-4, 2, {306e9, 290e9, 310e9}, 10e-6, {45e9, 37.5e9, 50e9},
     20e-6},
    {"h200-cluster",
     "nodes of 8 x H200 on NVSwitch (370 GB/s, 306..450), 400 Gb/s per GPU between nodes (45 GB/s, 37.5..50); "
     "kernels as h200-nvlink",
     6, H200_KNOTS, 4, H200_WHOLE, 0.02, 3.0e12, 5e-6, 2e-4, 8, {370e9, 306e9, 450e9}, 10e-6, {45e9, 37.5e9, 50e9},
     20e-6},
};

const char *const dfa__sim_machine_names[] = {"h200-nvlink", "h200-cluster", NULL};

const dfa__sim_machine *dfa__sim_machine_preset(const char *name) {
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

/* The 2-GPU medians the presets were fitted to (dist-bench, the shapes above), seconds. */
#define MS(x) ((x) * 1e-3)
const dfa__sim_measured dfa__sim_measured_2gpu[] = {
    {32768, DFA__SCHED_RING, 1, MS(13.0156), MS(63.8489), MS(14.9245), MS(78.6449)},
    {32768, DFA__SCHED_RING, 0, MS(13.5728), MS(64.6598), MS(14.9245), MS(78.6449)},
    {32768, DFA__SCHED_BALANCED, 1, MS(9.3523), MS(44.2372), MS(14.9245), MS(78.6449)},
    {32768, DFA__SCHED_BALANCED, 0, MS(9.9011), MS(45.0393), MS(14.9245), MS(78.6449)},
    {65536, DFA__SCHED_RING, 1, MS(52.0890), MS(252.7052), MS(69.9154), MS(318.1783)},
    {65536, DFA__SCHED_RING, 0, MS(52.6988), MS(253.6696), MS(69.9154), MS(318.1783)},
    {65536, DFA__SCHED_BALANCED, 1, MS(35.0638), MS(172.2326), MS(69.9154), MS(318.1783)},
    {65536, DFA__SCHED_BALANCED, 0, MS(36.1107), MS(174.2217), MS(69.9154), MS(318.1783)},
    {131072, DFA__SCHED_RING, 1, MS(223.5759), MS(965.2838), MS(301.4678), MS(1257.0859)},
    {131072, DFA__SCHED_RING, 0, MS(225.8844), MS(971.5013), MS(301.4678), MS(1257.0859)},
    {131072, DFA__SCHED_BALANCED, 1, MS(155.8680), MS(658.3688), MS(301.4678), MS(1257.0859)},
    {131072, DFA__SCHED_BALANCED, 0, MS(156.2932), MS(661.2626), MS(301.4678), MS(1257.0859)},
    {262144, DFA__SCHED_RING, 1, MS(925.6312), MS(3801.8945), MS(1235.2180), MS(5038.6177)},
    {262144, DFA__SCHED_RING, 0, MS(930.7360), MS(3816.5132), MS(1235.2180), MS(5038.6177)},
    {262144, DFA__SCHED_BALANCED, 1, MS(637.0909), MS(2590.2437), MS(1235.2180), MS(5038.6177)},
    {262144, DFA__SCHED_BALANCED, 0, MS(626.3417), MS(2587.2305), MS(1235.2180), MS(5038.6177)},
};
const int dfa__sim_measured_2gpu_count = (int)(sizeof dfa__sim_measured_2gpu / sizeof dfa__sim_measured_2gpu[0]);

/* Log-linear between knots, clamped outside them (where the uncertainty doubles). */
double dfa__sim_block_rate(const dfa__sim_machine *mc, int bwd, dfa__block_shape shape, int n, int bound) {
    const dfa__sim_knot *k = mc->knots;
    const int last = mc->nknots - 1;
    double rate, err;
    if (n <= k[0].n || n >= k[last].n) {
        const dfa__sim_knot *e = n <= k[0].n ? &k[0] : &k[last];
        rate = e->rate[bwd][shape];
        err = e->err[bwd][shape] * (n == e->n ? 1.0 : 2.0);
    } else {
        int i = 0;
        while (k[i + 1].n < n) i++;
        const double f = (log2((double)n) - log2((double)k[i].n)) / (log2((double)k[i + 1].n) - log2((double)k[i].n));
        rate = k[i].rate[bwd][shape] + f * (k[i + 1].rate[bwd][shape] - k[i].rate[bwd][shape]);
        err = k[i].err[bwd][shape] + f * (k[i + 1].err[bwd][shape] - k[i].err[bwd][shape]);
    }
    return rate * (1.0 + bound * err);
}

double dfa__sim_whole_seconds(const dfa__sim_machine *mc, const dfa__msg_shape *sh, int64_t S, int bwd, int bound) {
    const int last = mc->nwhole - 1;
    double rate, err = mc->whole_err;
    if (S <= mc->whole[0].seqlen) {
        rate = mc->whole[0].rate[bwd];
        if (S < mc->whole[0].seqlen) err *= 2.0;
    } else if (S >= mc->whole[last].seqlen) {
        rate = mc->whole[last].rate[bwd];
        if (S > mc->whole[last].seqlen) err *= 2.0;
    } else {
        int i = 0;
        while (mc->whole[i + 1].seqlen < S) i++;
        const double a = log2((double)mc->whole[i].seqlen), b = log2((double)mc->whole[i + 1].seqlen);
        const double f = (log2((double)S) - a) / (b - a);
        rate = mc->whole[i].rate[bwd] + f * (mc->whole[i + 1].rate[bwd] - mc->whole[i].rate[bwd]);
    }
    const double flops = 4.0 * sh->batch * sh->heads * sh->head_dim * ((double)S * (double)(S + 1) / 2.0);
    return (bwd ? 2.5 * flops : flops) / (rate * (1.0 + bound * err));
}

dfa__sim_model dfa__sim_model_of(const dfa__sim_machine *mc, const dfa__msg_shape *sh, int bwd, int overlap,
                                 int bound) {
    const int i = bound < 0 ? 1 : bound > 0 ? 2 : 0;
    dfa__sim_model m;
    memset(&m, 0, sizeof m);
    m.bwd = bwd;
    m.overlap = overlap;
    m.flops = 1.0; /* not the unit model; the machine's rates replace it */
    m.bandwidth = mc->intra_bw[i];
    m.latency = mc->intra_lat;
    m.shape = *sh;
    m.machine = mc;
    m.bound = bound;
    m.gpus_per_node = mc->gpus_per_node;
    m.inter_bandwidth = mc->inter_bw[i];
    m.inter_latency = mc->inter_lat;
    return m;
}
