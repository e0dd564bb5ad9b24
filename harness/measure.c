#include "measure.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"

/* Busy and total jiffies of all CPUs so far. */
static int read_stat(double *busy, double *total) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    int n = 0;
    if (!f) return -1;
    n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 5) return -1;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += (double)v[i];
    *busy = *total - (double)v[3] - (double)v[4]; /* minus idle and iowait */
    return 0;
}

double measure_busy_cpus(double seconds) {
    double b0, t0, b1, t1;
    const long hz = sysconf(_SC_CLK_TCK);
    if (read_stat(&b0, &t0) != 0 || hz <= 0) return -1;
    const double w0 = measure_now();
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    if (read_stat(&b1, &t1) != 0) return -1;
    return (b1 - b0) / (double)hz / (measure_now() - w0);
}

double measure_wait_idle(double max_seconds) {
    const double start = measure_now();
    double busy = measure_busy_cpus(1.0);
    while (busy > 0.15 && measure_now() - start < max_seconds) busy = measure_busy_cpus(1.0);
    return busy;
}

int measure_in_child(void (*fn)(void *arg, measure_result *r), void *arg, measure_result *out, double *peak_kib,
                     double *other_cpus) {
    double busy0 = 0, tot0 = 0, busy1 = 0, tot1 = 0;
    const int have_stat = read_stat(&busy0, &tot0) == 0;
    const double wall0 = measure_now();
    measure_result *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        snprintf(out->msg, sizeof out->msg, "mmap failed");
        return -1;
    }
    memset(shared, 0, sizeof *shared);
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        munmap(shared, sizeof *shared);
        snprintf(out->msg, sizeof out->msg, "fork failed");
        return -1;
    }
    if (pid == 0) {
        fn(arg, shared);
        _exit(0);
    }
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) {
            munmap(shared, sizeof *shared);
            snprintf(out->msg, sizeof out->msg, "wait4 failed");
            return -1;
        }
    const double wall = measure_now() - wall0;
    *out = *shared;
    munmap(shared, sizeof *shared);
    *peak_kib = (double)ru.ru_maxrss - out->baseline_kib; /* Linux: ru_maxrss in KiB */
    if (other_cpus) {
        const long hz = sysconf(_SC_CLK_TCK);
        *other_cpus = -1;
        if (have_stat && hz > 0 && wall > 0 && read_stat(&busy1, &tot1) == 0) {
            const double mine = ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + ru.ru_stime.tv_sec +
                                1e-6 * ru.ru_stime.tv_usec;
            const double others = ((busy1 - busy0) / (double)hz - mine) / wall;
            *other_cpus = others < 0 ? 0 : others;
        }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (!out->msg[0])
            snprintf(out->msg, sizeof out->msg, "child %s %d", WIFSIGNALED(status) ? "killed by signal" : "exited with",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return -1;
    }
    return out->ok ? 0 : -1;
}

double measure_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atof(line + 6);
    fclose(f);
    return kib;
}

static double seconds_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double measure_now(void) { return seconds_of(CLOCK_MONOTONIC); }
double measure_cpu_now(void) { return seconds_of(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double measure_median(const double *x, int n) {
    double small[MEASURE_MAX_REPS];
    double *tmp = n <= MEASURE_MAX_REPS ? small : malloc(sizeof(double) * (size_t)n);
    if (!tmp) return NAN;
    memcpy(tmp, x, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    const double m = n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
    if (tmp != small) free(tmp);
    return m;
}

void measure_fill(dfa_dtype t, void *p, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    float buf[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int m = n - i0 < 256 ? (int)(n - i0) : 256;
        for (int i = 0; i < m; i++) { /* sum of 4 uniforms: mean 0, variance 1 after scaling */
            float u = 0;
            for (int r = 0; r < 4; r++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                u += (float)(s >> 40) * (1.0f / 16777216.0f);
            }
            buf[i] = (u - 2.0f) * 1.7320508f;
        }
        dfa__store_f32(t, buf, dfa__elem(t, p, i0), m);
    }
}

size_t measure_q_bytes(const dfa_attn_desc *d) {
    return (size_t)d->batch * d->seqlen_q * d->num_heads * d->head_dim * dfa__dtype_size(d->dtype);
}
size_t measure_kv_bytes(const dfa_attn_desc *d) {
    return (size_t)d->batch * d->seqlen_k * d->num_kv_heads * d->head_dim * dfa__dtype_size(d->dtype);
}
size_t measure_lse_bytes(const dfa_attn_desc *d) { return (size_t)d->batch * d->num_heads * d->seqlen_q * 4; }

void measure_loadavg(char *buf, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    snprintf(buf, n, "?");
    if (!f) return;
    if (fgets(buf, (int)n, f)) buf[strcspn(buf, "\n")] = 0;
    fclose(f);
}

void measure_cpu_model(char *buf, size_t n) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(buf, n, "unknown CPU");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                snprintf(buf, n, "%s", c);
                buf[strcspn(buf, "\n")] = 0;
            }
            break;
        }
    fclose(f);
}
