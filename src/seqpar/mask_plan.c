/* Masked plans: which chunk pairs a document / window mask leaves, and who computes them.
   See schedule.h ("Masked plans"). Pure functions of their arguments. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/dtype.h"
#include "../common/mask.h"
#include "schedule.h"

/* A pair to place: query chunk q, key chunk k, its visible pairs. */
typedef struct {
    int q, k;
    int64_t work;  /* visible pairs (what the task carries) */
    int64_t cost;  /* what the ranks are balanced on: the tile cost, or the visible pairs */
    int lent;      /* a band of a diagonal's rows lent to another rank: rows [row0, row1) against keys
                      [0, lent = row1); else 0 */
    int row0, row1; /* the query rows it covers (off the diagonal: the pair's visible rows, or a piece) */
    int key0, key1; /* off the diagonal: the key rows it reads (the pair's key window, or a piece; 0, 0:
                       all), widened to tiles; a lent band: 0, lent */
    int vis0, vis1; /* dense pairs: the keys every visible row sees, [vis0, vis1) (not widened) */
    int dense;      /* off the diagonal, split_pairs: 1 when every visible row sees every visible key (a
                       piece of r rows and the keys [a, b) has r x |[a, b) n [vis0, vis1)| pairs) */
    int split;      /* 0 whole; pieces by query rows (1) or by keys (2): one or the other per pair */
} pair;

static int by_work(const void *a, const void *b) { /* heaviest first; ties by (q, k): deterministic */
    const pair *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    if (x->q != y->q) return x->q < y->q ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

static int by_distance(const void *a, const void *b) { /* nearest key chunk first, then (q, k) */
    const pair *x = a, *y = b;
    const int dx = abs(x->q - x->k), dy = abs(y->q - y->k);
    if (dx != dy) return dx < dy ? -1 : 1;
    if (x->q != y->q) return x->q < y->q ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    if (x->row0 != y->row0) return x->row0 < y->row0 ? -1 : 1; /* pieces of one pair */
    return x->key0 < y->key0 ? -1 : x->key0 > y->key0;
}

/* (schedule.h) */
int dfa__lend_rows(const dfa_attn_desc *d) {
    const double es = (double)dfa__dtype_size(d->dtype), H = d->num_heads, D = d->head_dim;
    const double q = H * D * es, kv = 2.0 * d->num_kv_heads * D * es, lse = 4.0 * H;
    /* forward inputs q; k, v. The backward's results dq; dk, dv are the same rows in float32:
       the same ratio. Backward inputs q, o, dout, lse; k, v. */
    const double fwd_in = fmax(q, kv) / (q + kv), bwd_in = fmax(3 * q + lse, kv) / (3 * q + lse + kv);
    return (int)(fmin(fwd_in, bwd_in) * d->seqlen_q);
}

/* (schedule.h) */
dfa__piece_bytes dfa__piece_bytes_of(const dfa_attn_desc *d) {
    const int64_t es = (int64_t)dfa__dtype_size(d->dtype), H = d->num_heads, D = d->head_dim;
    const int64_t q = H * D * es, kv = 2 * (int64_t)d->num_kv_heads * D * es, lse = 4 * H;
    dfa__piece_bytes b = {{q, 3 * q + lse, H * D * 4}, {kv, kv, kv / es * 4}, {0, 0, 0}};
    for (int i = 0; i < 3; i++) b.cap[i] = b.q[i] > b.k[i] ? b.q[i] : b.k[i];
    return b;
}

int dfa__piece_fits(const dfa__piece_bytes *b, int rows, int key_rows, int n) {
    for (int i = 0; i < 3; i++)
        if (b->cap[i] > 0 && (int64_t)rows * b->q[i] + (int64_t)key_rows * b->k[i] > (int64_t)n * b->cap[i]) return 0;
    return 1;
}

void dfa__sched_plan_free(dfa__sched_plan *p) {
    if (!p) return;
    free(p->tasks);
    free(p->load);
    memset(p, 0, sizeof *p);
}

/* What lent rows of tile cost c cost the rank that computes them. A lent block is a small
   triangle: its key blocks' loops over query blocks are short, so it runs less efficiently than
   the big diagonal it came from (`distflash plan-blocks` times both: on an H200, with 32 heads x
   128 and documents over 128k tokens on 2 ranks, lent rows take about a quarter longer than
   they save their owner). With the folds costed (the GPU model) a lent block counts a quarter more; without (pairs, the
   plans' tests) as it is. */
static int64_t lent_cost(int64_t c, int fold) { return fold > 0 ? c + c / 4 : c; }

/* What a piece of a split pair of tile cost c costs its helper: a quarter of the rows or keys
   of a large block still runs close to full speed, but the helper's loop over them is shorter
   and its inputs come late (they are posted one step ahead, like any other): an eighth more with
   the folds costed (the GPU model), as it is without. */
static int64_t piece_cost(int64_t c, int fold) { return fold > 0 ? c + c / 8 : c; }

/* The busiest load of the ranks other than a, b and c. */
static int64_t max_load_except(const int64_t *load, int P, int a, int b, int c) {
    int64_t m = 0;
    for (int r = 0; r < P; r++)
        if (r != a && r != b && r != c && load[r] > m) m = load[r];
    return m;
}

/* Busy diagonals (schedule.h): the best band of top's diagonal to lend to low next: rows
   [x, x_j) against keys [0, x_j), x the rows it lent so far (the sample lent_j[top]) and x_j a
   later sample row j n / DFA__DIAG_SAMPLES; the first band at most cap rows, a later one within
   pb's bounds (both inputs and both results within a chunk's message) or, without them, at most
   cap rows. A band costs its tile cost (by_tiles: the plan balances on tile cost) or its visible
   pairs. Returns the busiest load of all ranks after it and sets *best_j and the band's visible
   pairs and cost, or INT64_MAX when no band lowers top's load. */
static int64_t best_lend(const dfa__sched *s, const int64_t *work, const int64_t *diag_prefix, int by_tiles, int fold,
                         int cap, const dfa__piece_bytes *pb, const int64_t *load, const int *lent_j, int top, int low,
                         int *best_j, int64_t *band_work, int64_t *band_cost) {
    const int P = s->nranks, n = s->rows, S1 = DFA__DIAG_SAMPLES + 1;
    const int64_t diag = work[(size_t)top * P + top];
    *best_j = 0;
    const int j0 = lent_j[top], x0 = (int)((int64_t)j0 * n / DFA__DIAG_SAMPLES);
    if (diag <= 0 || j0 >= DFA__DIAG_SAMPLES) return INT64_MAX;
    const int64_t *cum = diag_prefix + (size_t)top * 2 * S1, *cost = by_tiles ? cum + S1 : cum;
    const int bounded = pb->cap[0] > 0 || pb->cap[1] > 0 || pb->cap[2] > 0;
    int64_t best = load[top];
    for (int j = j0 + 1; j <= DFA__DIAG_SAMPLES; j++) {
        const int x = (int)((int64_t)j * n / DFA__DIAG_SAMPLES);
        const int fits = j0 == 0 ? x <= cap : bounded ? dfa__piece_fits(pb, x - x0, x, n) : x - x0 <= cap;
        if (x <= x0 || !fits || x >= n || cum[j] <= cum[j0] || cum[j] >= diag) continue;
        const int64_t c = cost[j] - cost[j0];
        const int64_t a = load[top] - c + (int64_t)fold * (2 * x - x0), b = load[low] + lent_cost(c, fold);
        const int64_t most = a > b ? a : b;
        if (most < best) best = most, *best_j = j, *band_work = cum[j] - cum[j0], *band_cost = c;
    }
    if (!*best_j) return INT64_MAX;
    const int64_t others = max_load_except(load, P, top, low, -1); /* ties at the top gain nothing */
    return others > best ? others : best;
}

/* The visible pairs of a piece of dense pair x: rows [r0, r1), keys [k0, k1). */
static int64_t dense_work(const pair *x, int r0, int r1, int k0, int k1) {
    const int lo = k0 > x->vis0 ? k0 : x->vis0, hi = k1 < x->vis1 ? k1 : x->vis1;
    return hi > lo ? (int64_t)(r1 - r0) * (hi - lo) : 0;
}

/* What the last rows [at, row1) (mode 1) or keys [at, key1) (mode 2) of dense pair x cost: their
   share of its tile cost (by_tiles; at is on a tile), or their visible pairs. */
static int64_t piece_share(const pair *x, int mode, int at, int by_tiles) {
    const int lo = mode == 1 ? x->row0 : x->key0, hi = mode == 1 ? x->row1 : x->key1;
    if (by_tiles) return x->cost * (hi - at) / (hi - lo);
    return mode == 1 ? dense_work(x, at, x->row1, x->key0, x->key1) : dense_work(x, x->row0, x->row1, at, x->key1);
}

/* Split pairs (schedule.h): the best piece of one of top's dense pairs for low to compute, its
   last query rows [at, row1) (mode 1) or its last keys [at, key1) (mode 2), at on a
   DFA__PLAN_TILE row (on a third rank, within pb's bounds). Returns the busiest load of all ranks
   after it and sets *best_i, *best_at, *best_mode, or INT64_MAX when there is none. The owner of
   the side that is cut folds one more partial result: the key owner a dk, dv of the keys (rows),
   the query owner an o, lse or dq of the rows (keys). */
static int64_t best_split(const dfa__sched *s, const pair *pairs, const int *owner, int np,
                          const dfa__piece_bytes *pb, int by_tiles, int fold, const int64_t *load, int top, int low,
                          int *best_i, int *best_at, int *best_mode) {
    const int P = s->nranks, n = s->rows, T = DFA__PLAN_TILE;
    int64_t best = INT64_MAX;
    for (int i = 0; i < np; i++) {
        const pair *x = &pairs[i];
        if (owner[i] != top || x->lent || !x->dense) continue;
        for (int mode = 1; mode <= 2; mode++) {
            if (x->split && x->split != mode) continue;
            const int lo = mode == 1 ? x->row0 : x->key0, hi = mode == 1 ? x->row1 : x->key1;
            const int folder = mode == 1 ? x->k : x->q; /* who folds one more result */
            const int64_t others = max_load_except(load, P, top, low, folder);
            const int64_t extra = (int64_t)fold * (mode == 1 ? x->key1 - x->key0 : x->row1 - x->row0);
            for (int at = (lo / T + 1) * T; at < hi; at += T) {
                const int rows = mode == 1 ? x->row1 - at : x->row1 - x->row0, kr = mode == 1 ? x->key1 - x->key0 : hi - at;
                if (low != x->q && low != x->k && !dfa__piece_fits(pb, rows, kr, n)) continue; /* both inputs */
                const int64_t c_m = piece_share(x, mode, at, by_tiles);
                int64_t a = load[top] - c_m, b = load[low] + piece_cost(c_m, fold), f = 0;
                if (folder == top) a += extra;
                else if (folder == low) b += extra;
                else f = load[folder] + extra;
                int64_t most = a > b ? a : b;
                most = most > f ? most : f;
                most = most > others ? most : others;
                if (most < best) best = most, *best_i = i, *best_at = at, *best_mode = mode;
            }
        }
    }
    return best;
}

/* The busy ranks shed work (schedule.h: busy diagonals, split pairs): while lending the busiest
   rank's diagonal rows or splitting one of its dense pairs lowers the busiest load of all ranks
   by 2% or more, the better of the two moves to the least busy rank. A diagonal lends its rows in
   bands from the first on (lent_j[r]: the sample row it lent up to); bands and pieces are appended
   to pairs / owner (*np grows, at most np_cap). Updates load (in cost units). */
static void shed_work(const dfa__sched *s, const dfa__plan_counts *in, const int *keys, int fold, pair *pairs,
                      int *owner, int *np, int np_cap, int64_t *load, int *lent_j) {
    const int P = s->nranks, n = s->rows;
    const int cap = in->lend_rows_max > 0 ? in->lend_rows_max : n / 2;
    const int lend = in->diag_prefix && s->causal, split = in->split_pairs && keys;
    for (int iter = 0; iter < 2 * P; iter++) {
        int top = 0, low = 0;
        for (int r = 1; r < P; r++) {
            top = load[r] > load[top] ? r : top;
            low = load[r] < load[low] ? r : low;
        }
        if (top == low) return;
        int j = 0, si = 0, at = 0, mode = 0;
        int64_t band_work = 0, band_cost = 0;
        /* (without split_pairs a diagonal lends one band) */
        const int64_t by_lend = lend && *np < np_cap && (in->split_pairs || !lent_j[top]) ? best_lend(s, in->work, in->diag_prefix, in->cost != NULL, fold, cap, &in->piece,
                                                                  load, lent_j, top, low, &j, &band_work, &band_cost)
                                                       : INT64_MAX;
        const int64_t by_split = split && *np < np_cap
                                     ? best_split(s, pairs, owner, *np, &in->piece, in->cost != NULL, fold, load, top, low, &si, &at,
                                                  &mode)
                                     : INT64_MAX;
        const int64_t best = by_lend < by_split ? by_lend : by_split;
        if (best == INT64_MAX || best > load[top] - load[top] / 50) return;
        if (by_lend <= by_split) {
            const int x0 = (int)((int64_t)lent_j[top] * n / DFA__DIAG_SAMPLES), x = (int)((int64_t)j * n / DFA__DIAG_SAMPLES);
            owner[*np] = low;
            pairs[(*np)++] = (pair){top, top, band_work, band_cost, x, x0, x, 0, x, 0, 0, 0, 0};
            lent_j[top] = j;
            load[top] += (int64_t)fold * (2 * x - x0) - band_cost;
            load[low] += lent_cost(band_cost, fold);
        } else {
            pair *x = &pairs[si];
            const int64_t c_m = piece_share(x, mode, at, in->cost != NULL);
            pair piece = *x;
            if (mode == 1) piece.row0 = x->row1 = at;
            else piece.key0 = x->key1 = at;
            piece.work = dense_work(&piece, piece.row0, piece.row1, piece.key0, piece.key1);
            piece.cost = c_m;
            piece.split = x->split = mode;
            x->work -= piece.work;
            x->cost -= c_m;
            pairs[*np] = piece;
            owner[(*np)++] = low;
            load[top] -= c_m;
            load[low] += piece_cost(c_m, fold);
            load[mode == 1 ? x->k : x->q] += (int64_t)fold * (mode == 1 ? x->key1 - x->key0 : x->row1 - x->row0);
        }
    }
}

int dfa__sched_plan_build(const dfa__sched *s, const dfa__plan_counts *in, dfa__sched_plan *out) {
    const int64_t *work = in->work, *cost = in->cost;
    const int *rows = in->rows, *keys = in->rows ? in->keys : NULL;
    const int fold = cost ? in->fold_cost : 0;
    const int P = s->nranks, n = s->rows;
    memset(out, 0, sizeof *out);
    /* the pairs, and the pieces of split ones or lent bands of diagonals (one a move, 2 P moves at most) */
    const size_t np_cap = (size_t)P * (size_t)P + 2 * (size_t)P;
    pair *pairs = malloc(sizeof *pairs * np_cap + 1);
    int *lent_j = calloc((size_t)P, sizeof *lent_j); /* the sample row each diagonal lent up to */
    int *owner = malloc(sizeof *owner * np_cap + 1), *count = calloc((size_t)P, sizeof *count);
    int64_t *load = calloc((size_t)P, sizeof *load);
    int rc = -1;
    if (!pairs || !owner || !count || !load || !lent_j) goto done;
    int np = 0;
    const int64_t *bal = cost ? cost : work;
    for (int q = 0; q < P; q++) load[q] = bal[(size_t)q * P + q]; /* the diagonal: its own rank, step 0 */
    for (int q = 0; q < P; q++)
        for (int k = 0; k < P; k++) {
            const size_t x = (size_t)q * P + k;
            if (k == q || work[x] <= 0) continue;
            const int r0 = rows ? rows[2 * x] : 0, r1 = rows ? rows[2 * x + 1] : n;
            const int v0 = keys ? keys[2 * x] : 0, v1 = keys ? keys[2 * x + 1] : 0;
            int k0 = 0, k1 = 0; /* its key window (all keys without one) */
            if (keys) dfa__plan_key_window(v0, v1, n, &k0, &k1);
            const int dense = in->split_pairs && keys && v1 > v0 && work[x] == (int64_t)(r1 - r0) * (v1 - v0);
            pairs[np++] = (pair){q, k, work[x], bal[x], 0, r0, r1, k0, k1, v0, v1, dense, 0};
            if (fold > 0) { /* its folds land on the owners whoever computes it */
                const int qrows = rows ? rows[2 * x + 1] - rows[2 * x] : n;
                load[q] += (int64_t)fold * qrows;
                load[k] += (int64_t)fold * (keys ? keys[2 * x + 1] - keys[2 * x] : n);
            }
        }
    qsort(pairs, (size_t)np, sizeof *pairs, by_work);
    int64_t *base = malloc(sizeof *base * (size_t)P + 1);
    if (!base) goto done;
    memcpy(base, load, sizeof *base * (size_t)P);
    for (int i = 0; i < np; i++) { /* greedy: the less loaded of the two ranks that hold half the inputs */
        const int q = pairs[i].q, k = pairs[i].k;
        const int r = s->kind == DFA__SCHED_RING || load[q] <= load[k] ? q : k;
        owner[i] = r;
        load[r] += pairs[i].cost;
    }
    if (s->kind != DFA__SCHED_RING) {
        /* The greedy can lose to the ring's "query owner computes" on unlucky layouts: start from
           the better of the two, then move pairs off the busiest rank while that lowers it. */
        int64_t g_max = 0, r_max = 0;
        for (int r = 0; r < P; r++) g_max = load[r] > g_max ? load[r] : g_max;
        for (int i = 0; i < np; i++) base[pairs[i].q] += pairs[i].cost;
        for (int r = 0; r < P; r++) r_max = base[r] > r_max ? base[r] : r_max;
        if (r_max < g_max) {
            memcpy(load, base, sizeof *load * (size_t)P);
            for (int i = 0; i < np; i++) owner[i] = pairs[i].q;
        }
        for (int iter = 0; iter < 4 * np + 4; iter++) {
            int top = 0;
            for (int r = 1; r < P; r++) top = load[r] > load[top] ? r : top;
            int moved = 0;
            for (int i = 0; i < np && !moved; i++) {
                if (owner[i] != top) continue;
                const int other = pairs[i].q == top ? pairs[i].k : pairs[i].q;
                if (load[other] + pairs[i].cost < load[top]) {
                    owner[i] = other;
                    load[top] -= pairs[i].cost;
                    load[other] += pairs[i].cost;
                    moved = 1;
                }
            }
            if (!moved) break;
        }
    }
    free(base);
    if (s->kind != DFA__SCHED_RING && in->split_pairs) {
        /* with split pairs and bands, and as before them (one band, no piece): the greedy's first
           moves differ and either may end lower, so the plan keeps the one whose busiest load is
           lower (ties: the one before, fewer messages) */
        pair *pairs_b = malloc(sizeof *pairs_b * np_cap + 1);
        int *owner_b = malloc(sizeof *owner_b * np_cap + 1), *lent_b = calloc((size_t)P, sizeof *lent_b);
        int64_t *load_b = malloc(sizeof *load_b * (size_t)P);
        if (!pairs_b || !owner_b || !lent_b || !load_b) {
            free(pairs_b), free(owner_b), free(lent_b), free(load_b);
            goto done;
        }
        memcpy(pairs_b, pairs, sizeof *pairs * (size_t)np);
        memcpy(owner_b, owner, sizeof *owner * (size_t)np);
        memcpy(load_b, load, sizeof *load * (size_t)P);
        int np_b = np;
        dfa__plan_counts before = *in;
        before.split_pairs = 0;
        shed_work(s, in, keys, fold, pairs, owner, &np, (int)np_cap, load, lent_j);
        shed_work(s, &before, keys, fold, pairs_b, owner_b, &np_b, (int)np_cap, load_b, lent_b);
        if (max_load_except(load_b, P, -1, -1, -1) <= max_load_except(load, P, -1, -1, -1)) {
            np = np_b;
            memcpy(pairs, pairs_b, sizeof *pairs * (size_t)np);
            memcpy(owner, owner_b, sizeof *owner * (size_t)np);
            memcpy(lent_j, lent_b, sizeof *lent_j * (size_t)P);
            memcpy(load, load_b, sizeof *load * (size_t)P);
        }
        free(pairs_b), free(owner_b), free(lent_b), free(load_b);
    } else if (s->kind != DFA__SCHED_RING) {
        shed_work(s, in, keys, fold, pairs, owner, &np, (int)np_cap, load, lent_j);
    }
    for (int i = 0; i < np; i++) count[owner[i]]++;
    int steps = 1;
    for (int r = 0; r < P; r++)
        if (1 + count[r] > steps) steps = 1 + count[r];
    out->tasks = malloc(sizeof *out->tasks * (size_t)steps * (size_t)P);
    if (!out->tasks) goto done;
    for (size_t i = 0; i < (size_t)steps * (size_t)P; i++) out->tasks[i] = (dfa__task){-1, 0, 0, -1, 0, 0, 0, 0};
    for (int r = 0; r < P; r++) { /* the diagonal, less the rows it lent */
        const int64_t *cum = in->diag_prefix ? in->diag_prefix + (size_t)r * 2 * (DFA__DIAG_SAMPLES + 1) : NULL;
        const int x = (int)((int64_t)lent_j[r] * n / DFA__DIAG_SAMPLES);
        if (work[(size_t)r * P + r] > 0)
            out->tasks[r] =
                (dfa__task){r, x, n, r, s->causal, work[(size_t)r * P + r] - (lent_j[r] ? cum[lent_j[r]] : 0), 0, 0};
    }
    /* each rank's pairs by key distance (neighbours first), from step 1 */
    pair *mine = malloc(sizeof *mine * (size_t)np + 1);
    if (!mine) {
        dfa__sched_plan_free(out);
        goto done;
    }
    for (int r = 0; r < P; r++) {
        int m = 0;
        for (int i = 0; i < np; i++)
            if (owner[i] == r) mine[m++] = pairs[i];
        qsort(mine, (size_t)m, sizeof *mine, by_distance);
        for (int i = 0; i < m; i++) {
            const pair *x = &mine[i]; /* (a lent band reads keys [0, its end)) */
            out->tasks[(size_t)(1 + i) * P + r] =
                (dfa__task){x->q, x->row0, x->row1, x->k, s->causal, x->work, x->key0, x->key1};
        }
    }
    free(mine);
    out->load = malloc(sizeof *out->load * (size_t)P);
    if (!out->load) {
        dfa__sched_plan_free(out);
        goto done;
    }
    memcpy(out->load, load, sizeof *load * (size_t)P);
    out->nranks = P;
    out->steps = steps;
    out->work = work;
    out->rows = rows;
    out->keys = keys;
    rc = 0;
done:
    free(lent_j);
    free(pairs);
    free(owner);
    free(count);
    free(load);
    return rc;
}

void dfa__mask_pair_work(const dfa_attn_desc *d, int P, const int32_t *ids, int64_t *work, int *rows, int *keys,
                         int64_t *cost, int64_t *diag_prefix) {
    const int S1 = DFA__DIAG_SAMPLES + 1;
    const int n = d->seqlen_q, B = d->batch;
    const int window = (d->flags & DFA_FLAG_WINDOW) != 0;
    for (int q = 0; q < P; q++)
        for (int k = 0; k < P; k++) {
            int64_t *w = &work[(size_t)q * P + k];
            int *rr = rows ? &rows[2 * ((size_t)q * P + k)] : NULL, *kk = keys ? &keys[2 * ((size_t)q * P + k)] : NULL;
            int64_t *cum = diag_prefix && d->causal && q == k ? diag_prefix + (size_t)q * 2 * S1 : NULL;
            int64_t *c = cost ? &cost[(size_t)q * P + k] : NULL;
            *w = 0;
            if (rr) rr[0] = rr[1] = 0;
            if (kk) kk[0] = kk[1] = 0;
            if (c) *c = 0;
            if (cum) memset(cum, 0, sizeof *cum * 2 * S1);
            /* distances pi - pj over the pair: [(q - k) n - (n - 1), (q - k) n + (n - 1)] */
            const int64_t dmin = (int64_t)(q - k) * n - (n - 1), dmax = (int64_t)(q - k) * n + (n - 1);
            if (d->causal && dmax < 0) continue;
            if (window && d->window_left >= 0 && dmin > d->window_left) continue;
            if (window && d->window_right >= 0 && -dmax > d->window_right) continue;
            if (ids) { /* some batch row must share a document between the chunks */
                int share = 0;
                for (int b = 0; b < B && !share; b++) {
                    const int32_t *qi = ids + ((size_t)q * B + b) * n, *ki = ids + ((size_t)k * B + b) * n;
                    share = qi[0] <= ki[n - 1] && ki[0] <= qi[n - 1];
                }
                if (!share) continue;
            }
            dfa_attn_desc x = *d;
            x.seqlen_q = x.seqlen_k = n;
            x.q_start = (int64_t)q * n;
            x.k_start = (int64_t)k * n;
            x.q_doc = ids ? ids + (size_t)q * B * n : NULL;
            x.k_doc = ids ? ids + (size_t)k * B * n : NULL;
            int lo, hi;
            dfa__mask_counts mc = {cum ? DFA__DIAG_SAMPLES : 0, cum, DFA__PLAN_TILE, c, cum ? cum + S1 : NULL, kk};
            *w = dfa__visible_pairs_counts(&x, &lo, &hi, &mc);
            if (rr) rr[0] = lo, rr[1] = hi;
        }
}

int dfa__task_is_piece(const dfa__sched_plan *p, const dfa__task *t, int n) {
    if (t->q_chunk < 0 || t->q_chunk == t->k_chunk) return 0;
    const size_t x = (size_t)t->q_chunk * (size_t)p->nranks + (size_t)t->k_chunk;
    const int r0 = p->rows ? p->rows[2 * x] : 0, r1 = p->rows ? p->rows[2 * x + 1] : n;
    int k0 = 0, k1 = 0;
    if (p->keys) dfa__plan_key_window(p->keys[2 * x], p->keys[2 * x + 1], n, &k0, &k1);
    return t->row0 != r0 || t->row1 != r1 || t->k_row0 != k0 || t->k_row1 != k1;
}

int dfa__plan_lends(const dfa_attn_desc *d, dfa__sched_kind kind) {
    return d->q_doc != NULL && d->causal && d->batch == 1 && kind != DFA__SCHED_RING;
}

dfa__plan_counts dfa__plan_inputs(const dfa_attn_desc *d, const dfa__pair_counts *m, dfa__sched_kind kind, int fold_cost,
                                  int split_mode) {
    const int docs = d->q_doc != NULL, lend = dfa__plan_lends(d, kind);
    /* query-row windows off the diagonal where a window's document ids are one contiguous run of
       the chunk's (one batch row, or no documents); key windows where they are also contiguous
       rows of k and v to send in place and fold (one batch row) */
    const int windows = !docs || d->batch == 1, key_windows = d->batch == 1;
    return (dfa__plan_counts){m->work, windows ? m->rows : NULL, key_windows ? m->keys : NULL, m->cost,
                              lend && split_mode != 2 ? m->prefix : NULL, fold_cost, dfa__lend_rows(d),
                              lend && split_mode > 0, dfa__piece_bytes_of(d)};
}

int dfa__pair_counts_alloc(dfa__pair_counts *m, int P, int with_prefix) {
    const size_t cells = (size_t)P * (size_t)P;
    m->work = malloc(sizeof *m->work * cells);
    m->rows = malloc(sizeof *m->rows * 2 * cells);
    m->keys = malloc(sizeof *m->keys * 2 * cells);
    m->cost = malloc(sizeof *m->cost * cells);
    m->prefix = with_prefix ? malloc(sizeof *m->prefix * (size_t)P * 2 * (DFA__DIAG_SAMPLES + 1)) : NULL;
    if (m->work && m->rows && m->keys && m->cost && (!with_prefix || m->prefix)) return 0;
    dfa__pair_counts_free(m);
    return -1;
}

void dfa__pair_counts_copy(dfa__pair_counts *dst, const dfa__pair_counts *src, int P) {
    const size_t cells = (size_t)P * (size_t)P;
    memcpy(dst->work, src->work, sizeof *dst->work * cells);
    memcpy(dst->rows, src->rows, sizeof *dst->rows * 2 * cells);
    memcpy(dst->keys, src->keys, sizeof *dst->keys * 2 * cells);
    memcpy(dst->cost, src->cost, sizeof *dst->cost * cells);
    if (dst->prefix && src->prefix)
        memcpy(dst->prefix, src->prefix, sizeof *dst->prefix * (size_t)P * 2 * (DFA__DIAG_SAMPLES + 1));
}

void dfa__pair_counts_free(dfa__pair_counts *m) {
    free(m->work);
    free(m->rows);
    free(m->keys);
    free(m->cost);
    free(m->prefix);
    m->work = NULL, m->rows = NULL, m->keys = NULL, m->cost = NULL, m->prefix = NULL;
}
