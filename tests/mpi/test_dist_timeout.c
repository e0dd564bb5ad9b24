/* The MPI communicator's timeout (dfa_comm_set_timeout, distflash_mpi.h) under mpirun:
 *  - its arguments: c NULL, seconds <= 0, NaN or infinite are refused by name;
 *  - a rank that comes late, within the timeout: every rank's call succeeds;
 *  - a rank that never calls (the last one): every other rank's dfa_dist_attn_fwd returns
 *    DFA_ERR_BACKEND naming the timeout within a few timeouts' time, outputs untouched, and
 *    the communicator refuses every later call, saying why;
 *  - a transfer whose peer never sends (white box, the backend's start/wait): the wait
 *    returns DFA_ERR_BACKEND naming MPI_Waitall and the timeout, and the receive buffer is
 *    untouched. On one rank only this part runs.
 * The timeouts are short (a fraction of a second) so that the test stays fast; the ranks
 * that never call then leave through dfa_comm_destroy and MPI_Finalize like the others. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distflash_mpi.h"
#include "seqpar/comm.h"
#include "testlib.h"

static int rank, nranks;

enum { B = 1, N = 16, H = 2, HKV = 1, D = 16 };
enum { NQ = B * N * H * D, NK = B * N * HKV * D, NL = B * H * N };

static float q[NQ], k[NK], v[NK], o[NQ], lse[NL];

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int poisoned(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != 0xff) return 0;
    return 1;
}

static dfa_dist_desc desc(void) {
    dfa_dist_desc d = dfa_dist_desc_init(B, N, H, HKV, D);
    d.attn.causal = 1;
    d.overlap = 1;
    return d;
}

static void test_arguments(dfa_comm *c) {
    CHECK(dfa_comm_set_timeout(NULL, 1.0) == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "c (the communicator)"),
          "rank %d: set_timeout(NULL): %s", rank, dfa_last_error());
    const double bad[] = {0.0, -1.0, NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 5; i++)
        CHECK(dfa_comm_set_timeout(c, bad[i]) == DFA_ERR_INVALID_ARGUMENT && strstr(dfa_last_error(), "seconds = "),
              "rank %d: set_timeout(%g) accepted or unnamed: %s", rank, bad[i], dfa_last_error());
    CHECK(dfa_comm_set_timeout(c, 1e-3) == DFA_OK && dfa_comm_set_timeout(c, 600.0) == DFA_OK,
          "rank %d: set_timeout refused a valid value: %s", rank, dfa_last_error());
}

/* The last rank calls 0.2 s after the others, within their 20 s: everyone succeeds. */
static void test_late_within(dfa_comm *c) {
    CHECK(dfa_comm_set_timeout(c, 20.0) == DFA_OK, "rank %d: set_timeout: %s", rank, dfa_last_error());
    const dfa_dist_desc d = desc();
    if (rank == nranks - 1) sleep_seconds(0.2);
    const dfa_status st = dfa_dist_attn_fwd(c, &d, q, k, v, o, lse);
    CHECK(st == DFA_OK, "rank %d: a late peer within the timeout: %s (%s)", rank, dfa_status_string(st), dfa_last_error());
}

/* The last rank never calls; the others time out after 0.3 s. */
static void test_never_calls(dfa_comm *c) {
    const double timeout = 0.3;
    CHECK(dfa_comm_set_timeout(c, timeout) == DFA_OK, "rank %d: set_timeout: %s", rank, dfa_last_error());
    if (rank == nranks - 1) return;
    const dfa_dist_desc d = desc();
    tl_poison(o, sizeof o);
    tl_poison(lse, sizeof lse);
    const double t0 = seconds_now();
    dfa_status st = dfa_dist_attn_fwd(c, &d, q, k, v, o, lse);
    const double took = seconds_now() - t0;
    const char *msg = dfa_last_error();
    CHECK(st == DFA_ERR_BACKEND, "rank %d: a peer that never calls: %s (%s)", rank, dfa_status_string(st), msg);
    CHECK(strstr(msg, "dfa_dist_attn_fwd") && strstr(msg, "timed out after 0.3 s") &&
              strstr(msg, "dfa_comm_set_timeout"),
          "rank %d: the message does not name the call and the timeout: %s", rank, msg);
    CHECK(took >= timeout * 0.9 && took < timeout + 30.0, "rank %d: returned after %.2f s with a %.1f s timeout", rank,
          took, timeout);
    CHECK(poisoned(o, sizeof o) && poisoned(lse, sizeof lse), "rank %d: outputs touched after the timeout", rank);
    st = dfa_dist_attn_fwd(c, &d, q, k, v, o, lse);
    CHECK(st == DFA_ERR_BACKEND && strstr(dfa_last_error(), "unusable since an earlier call timed out"),
          "rank %d: the call after the timeout: %s (%s)", rank, dfa_status_string(st), dfa_last_error());
}

/* Rank 0 waits for a message that nobody sends (white box: the backend's transfers). */
static void test_transfer(void) {
    if (rank != 0) return;
    dfa_comm *self = NULL;
    CHECK(dfa_comm_create_mpi(MPI_COMM_SELF, &self) == DFA_OK, "create(MPI_COMM_SELF): %s", dfa_last_error());
    if (!self) return;
    CHECK(dfa_comm_set_timeout(self, 0.2) == DFA_OK, "set_timeout: %s", dfa_last_error());
    unsigned char buf[64];
    memset(buf, 0xff, sizeof buf);
    dfa__xfer x = {buf, sizeof buf, 0, 7, 0}; /* a receive from itself, tag 7: never sent */
    void *pending = NULL;
    dfa_status st = self->ops->start(self, &x, 1, &pending);
    CHECK(st == DFA_OK, "start: %s", dfa_last_error());
    if (!st) st = self->ops->wait(self, pending);
    CHECK(st == DFA_ERR_BACKEND && strstr(dfa_last_error(), "MPI_Waitall") && strstr(dfa_last_error(), "timed out"),
          "a receive nobody sends: %s (%s)", dfa_status_string(st), dfa_last_error());
    CHECK(poisoned(buf, sizeof buf), "the receive buffer was written");
    st = self->ops->start(self, &x, 1, &pending);
    CHECK(st == DFA_ERR_BACKEND && strstr(dfa_last_error(), "unusable"), "a transfer after the timeout: %s (%s)",
          dfa_status_string(st), dfa_last_error());
    dfa_comm_destroy(self);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    tl_init("test_dist_timeout");
    tl_fill_normal(DFA_F32, q, NQ, 1.0);
    tl_fill_normal(DFA_F32, k, NK, 1.0);
    tl_fill_normal(DFA_F32, v, NK, 1.0);
    dfa_comm *c = NULL;
    CHECK(dfa_comm_create_mpi(MPI_COMM_WORLD, &c) == DFA_OK, "rank %d: create: %s", rank, dfa_last_error());
    if (c) {
        test_arguments(c);
        test_late_within(c);
        if (nranks > 1) test_never_calls(c);
        dfa_comm_destroy(c);
    }
    test_transfer();
    MPI_Barrier(MPI_COMM_WORLD);
    int failures = tl_failures;
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const int rc = tl_finish("test_dist_timeout");
    MPI_Finalize();
    return failures ? 1 : rc;
}
