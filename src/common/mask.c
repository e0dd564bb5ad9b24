#include "mask.h"

#include "error.h"

/* First j in [0, n) with a[j] >= x (n if none); a non-decreasing. */
static int lower_bound(const int32_t *a, int n, int32_t x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The keys [*first, *end) of document x in the non-decreasing ids kd[0..n) (first == end when
   no key has x). */
static void doc_keys(const int32_t *kd, int n, int32_t x, int *first, int *end) {
    *first = lower_bound(kd, n, x);
    *end = x == INT32_MAX ? n : lower_bound(kd, n, x + 1);
}

/* The keys of query row i that the causal rule and the window leave: [*a, *z) (maybe empty). */
static void row_span(const dfa_attn_desc *d, int i, int64_t *a, int64_t *z) {
    const int64_t rel = d->q_start + i - d->k_start; /* the query's position in key rows */
    *a = 0, *z = d->seqlen_k;
    if (d->causal && rel + 1 < *z) *z = rel + 1;
    if (d->flags & DFA_FLAG_WINDOW) {
        if (d->window_left >= 0 && rel - d->window_left > *a) *a = rel - d->window_left;
        if (d->window_right >= 0 && rel + d->window_right + 1 < *z) *z = rel + d->window_right + 1;
    }
}

void dfa__row_keys(const dfa_attn_desc *d, int b, int i, int *lo, int *hi) {
    const int n = d->seqlen_k;
    int64_t a, z;
    row_span(d, i, &a, &z);
    if (d->q_doc && a < z) {
        int first, end;
        doc_keys(d->k_doc + (int64_t)b * n, n, d->q_doc[(int64_t)b * d->seqlen_q + i], &first, &end);
        if (first > a) a = first;
        if (end < z) z = end;
    }
    if (a < 0) a = 0;
    if (a > n) a = n;
    if (z < a) z = a;
    *lo = (int)a;
    *hi = (int)z;
}

static dfa_status check_rows(const int32_t *ids, int batch, int n, const char *name, const char *fn) {
    for (int b = 0; b < batch; b++) {
        const int32_t *r = ids + (int64_t)b * n;
        for (int i = 1; i < n; i++)
            if (r[i] < r[i - 1])
                return dfa__fail(DFA_ERR_INVALID_ARGUMENT, fn,
                                 "%s decreases in batch row %d at row %d (%d after %d); document ids must be "
                                 "non-decreasing along the sequence (each document one contiguous run)",
                                 name, b, i, (int)r[i], (int)r[i - 1]);
    }
    return DFA_OK;
}

dfa_status dfa__check_docs_host(const dfa_attn_desc *d, const char *fn) {
    if (!d->q_doc) return DFA_OK;
    dfa_status st = check_rows(d->q_doc, d->batch, d->seqlen_q, "d->q_doc", fn);
    return st ? st : check_rows(d->k_doc, d->batch, d->seqlen_k, "d->k_doc", fn);
}

/* One sweep over the query rows: a row's document key range [first, end) only moves forward
   as the (non-decreasing) ids do, so two pointers replace dfa__row_keys' two binary searches
   per row. The masked distributed calls count every chunk pair's work this way on each call
   (mask_plan.c), where the searches cost milliseconds at 64k rows per chunk. Rows whose id
   drops (ids the caller promised non-decreasing but are not) fall back to the searches.
   With mc, the extra counts of dfa__visible_pairs_counts: a row's pairs (and its share of its
   tile's cost) go into the bucket of the first sample x_j = j seqlen_q / samples above it. */
static int64_t sweep(const dfa_attn_desc *d, int *row_lo, int *row_hi, dfa__mask_counts *mc) {
    const int n = d->seqlen_k, nq = d->seqlen_q, S = mc ? mc->samples : 0, T = mc ? mc->tile : 0;
    int64_t total = 0, k_lo = n, k_hi = 0;
    int lo = nq, hi = 0;
    if (mc && mc->cost) *mc->cost = 0;
    for (int b = 0; b < d->batch; b++) {
        const int32_t *qd = d->q_doc ? d->q_doc + (int64_t)b * nq : NULL;
        const int32_t *kd = d->q_doc ? d->k_doc + (int64_t)b * n : NULL;
        int first = 0, end = 0, first_row = -1, last_row = -1;
        int32_t last = INT32_MIN; /* the id that [first, end) belongs to */
        int64_t t_lo = INT64_MAX, t_hi = 0; /* the keys the current query tile's rows see */
        for (int i = 0; i < nq; i++) {
            int64_t a, z;
            row_span(d, i, &a, &z);
            if (qd && a < z) {
                const int32_t x = qd[i];
                if (x < last) {
                    doc_keys(kd, n, x, &first, &end);
                } else {
                    while (first < n && kd[first] < x) first++;
                    if (end < first) end = first;
                    while (end < n && kd[end] <= x) end++;
                }
                last = x;
                if (first > a) a = first;
                if (end < z) z = end;
            }
            if (a < 0) a = 0;
            if (z > n) z = n;
            if (z > a) {
                total += z - a;
                if (S > 0 && mc->cum) /* the first j with j nq / S > i */
                    mc->cum[((int64_t)(i + 1) * S + nq - 1) / nq] += z - a;
                last_row = i;
                if (first_row < 0) first_row = i;
                if (a < t_lo) t_lo = a;
                if (z > t_hi) t_hi = z;
                if (a < k_lo) k_lo = a;
                if (z > k_hi) k_hi = z;
            }
            if (T > 0 && (i % T == T - 1 || i == nq - 1)) { /* a query tile ends: the key tiles it meets */
                if (t_hi > t_lo) {
                    int64_t k1 = (t_hi + T - 1) / T * T;
                    k1 = k1 < n ? k1 : n;
                    const int64_t keys = k1 - t_lo / T * T, i0 = i / T * T;
                    if (mc->cost) *mc->cost += (i - i0 + 1) * keys;
                    for (int64_t r = i0; S > 0 && mc->cost_cum && r <= i; r++)
                        mc->cost_cum[((r + 1) * S + nq - 1) / nq] += keys;
                }
                t_lo = INT64_MAX, t_hi = 0;
            }
        }
        /* rows ascend within a batch row: its first and last visible rows bound the range */
        if (first_row >= 0 && first_row < lo) lo = first_row;
        if (last_row + 1 > hi) hi = last_row + 1;
    }
    *row_lo = lo < hi ? lo : 0;
    *row_hi = lo < hi ? hi : 0;
    if (mc && mc->keys) mc->keys[0] = k_lo < k_hi ? (int)k_lo : 0, mc->keys[1] = k_lo < k_hi ? (int)k_hi : 0;
    return total;
}

int64_t dfa__visible_pairs(const dfa_attn_desc *d) {
    int lo, hi;
    return sweep(d, &lo, &hi, NULL);
}

int64_t dfa__visible_pairs_rows(const dfa_attn_desc *d, int *row_lo, int *row_hi) {
    return sweep(d, row_lo, row_hi, NULL);
}

int64_t dfa__visible_pairs_counts(const dfa_attn_desc *d, int *row_lo, int *row_hi, dfa__mask_counts *mc) {
    const int S = mc->samples;
    for (int j = 0; j <= S && S > 0; j++) {
        if (mc->cum) mc->cum[j] = 0;
        if (mc->cost_cum) mc->cost_cum[j] = 0;
    }
    const int64_t total = sweep(d, row_lo, row_hi, mc);
    for (int j = 1; j <= S; j++) {
        if (mc->cum) mc->cum[j] += mc->cum[j - 1];
        if (mc->cost_cum) mc->cost_cum[j] += mc->cost_cum[j - 1];
    }
    return total;
}
