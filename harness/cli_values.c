#include "cli_values.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Length of the item at s: up to the next comma or the end. */
static size_t item_len(const char *s) {
    const char *c = strchr(s, ',');
    return c ? (size_t)(c - s) : strlen(s);
}

/* One size from exactly the n bytes at s. */
static int size_n(const char *s, size_t n, long min, long max, int *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    const char *digits = buf[0] == '-' ? buf + 1 : buf;
    if (*digits < '0' || *digits > '9') return -1; /* strtol would also skip spaces and take '+' */
    char *end;
    errno = 0;
    long x = strtol(buf, &end, 10);
    if (errno) return -1;
    if (*end == 'k' || *end == 'K') {
        if (x > LONG_MAX / 1024 || x < LONG_MIN / 1024) return -1; /* before it overflows */
        x *= 1024, end++;
    }
    if (*end || x < min || x > max || x < INT_MIN || x > INT_MAX) return -1;
    *out = (int)x;
    return 0;
}

int cli_size(const char *s, long min, long max, int *out) {
    return s ? size_n(s, strlen(s), min, max, out) : -1;
}

static int dtype_n(const char *s, size_t n, dfa_dtype *out) {
    static const dfa_dtype all[] = {DFA_F32, DFA_BF16, DFA_F16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *name = cli_dtype_name(all[i]);
        if (strlen(name) == n && !memcmp(s, name, n)) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

int cli_dtype(const char *s, dfa_dtype *out) { return s ? dtype_n(s, strlen(s), out) : -1; }

/* Calls item(s, len, ctx, i) for each comma-separated item; the count, or -1 at the first
   item it refuses or past max_items. */
static int each_item(const char *s, int max_items, int (*item)(const char *, size_t, void *, int), void *ctx) {
    if (!s || max_items < 1) return -1;
    for (int n = 0;; n++) {
        size_t len = item_len(s);
        if (n == max_items || item(s, len, ctx, n)) return -1;
        if (!s[len]) return n + 1;
        s += len + 1;
    }
}

typedef struct {
    long min, max;
    int *out; /* NULL: only check */
} size_ctx;

static int size_item(const char *s, size_t n, void *ctx, int i) {
    const size_ctx *c = ctx;
    int x;
    if (size_n(s, n, c->min, c->max, &x)) return -1;
    if (c->out) c->out[i] = x;
    return 0;
}

int cli_size_list(const char *s, long min, long max, int *out, int max_items) {
    size_ctx check = {min, max, NULL}, fill = {min, max, out};
    if (each_item(s, max_items, size_item, &check) < 0) return -1; /* nothing written on refusal */
    return each_item(s, max_items, size_item, &fill);
}

static int dtype_item(const char *s, size_t n, void *ctx, int i) {
    dfa_dtype t, *out = ctx;
    if (dtype_n(s, n, &t)) return -1;
    if (out) out[i] = t;
    return 0;
}

int cli_dtype_list(const char *s, dfa_dtype *out, int max_items) {
    if (each_item(s, max_items, dtype_item, NULL) < 0) return -1;
    return each_item(s, max_items, dtype_item, out);
}

const char *cli_dtype_name(dfa_dtype t) {
    switch (t) {
    case DFA_F32: return "f32";
    case DFA_BF16: return "bf16";
    case DFA_F16: return "f16";
    }
    return "?";
}
