/* The caller's buffers in a distributed pass: a head group's inputs packed, the float32
 * accumulators reset before the steps and rounded into the outputs after, and the direct parts. */
#include "exec_internal.h"

#include <math.h>

#include "../common/dtype.h"

/* The float32 accumulators before a group's steps: nothing seen yet (unless step 0 writes them
   whole: first_is_diagonal). */
void dfa__exec_reset_acc(exec *e) {
    const dfa_attn_desc *d = &e->d;
    if (dfa__exec_first_is_diagonal(e)) {
        /* rows it lent (one batch row): nothing seen there yet; the forward's lse rows are not
           contiguous, so all of them start empty and the block's go in after it */
        const int lent = e->steps[0].task.row0;
        if (lent) {
            e->ops->fill_f32(e->ctx, e->acc[0], (int64_t)lent * d->num_heads * (e->bwd ? d->head_dim : dv_of(e)), 0.0f);
            if (!e->bwd) e->ops->fill_f32(e->ctx, e->acc[1], (int64_t)d->batch * d->num_heads * e->n, -INFINITY);
        }
        return;
    }
    const int64_t rows = (int64_t)d->batch * e->n, nq = rows * d->num_heads * d->head_dim;
    const int64_t no = rows * d->num_heads * dv_of(e);
    const int64_t nk = rows * d->num_kv_heads * d->head_dim, nv = rows * d->num_kv_heads * dv_of(e);
    if (e->bwd) {
        e->ops->fill_f32(e->ctx, e->acc[0], nq, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[1], nk, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[2], nv, 0.0f);
    } else {
        e->ops->fill_f32(e->ctx, e->acc[0], no, 0.0f);
        e->ops->fill_f32(e->ctx, e->acc[1], (int64_t)d->batch * d->num_heads * e->n, -INFINITY);
    }
}

/* Copies group g's heads of the caller's inputs into the packed buffers the pass reads. */
void dfa__exec_pack_group(exec *e, const dfa__dist_io *io, int g) {
    const dfa_attn_desc *d = &e->d, *f = &e->full;
    const size_t es = dfa__dtype_size(d->dtype), B = (size_t)d->batch, n = (size_t)e->n;
    const size_t hq = (size_t)d->num_heads, hk = (size_t)d->num_kv_heads;
    const size_t D[3] = {(size_t)d->head_dim, (size_t)dv_of(e), (size_t)dv_of(e)}; /* q; o, dout (k; v) */
    char *p = e->pack;
    e->gio = (dfa__dist_io){0};
    const void *qsrc[3] = {io->q, io->o, io->dout};
    const void **qdst[3] = {&e->gio.q, &e->gio.o, &e->gio.dout};
    for (int i = 0; i < (e->bwd ? 3 : 1); i++) {
        const size_t qrow = hq * D[i] * es;
        *qdst[i] = p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, qrow, (const char *)qsrc[i] + (size_t)g * qrow, (size_t)f->num_heads * D[i] * es,
                           qrow, B * n);
        p += align_up(B * n * qrow);
    }
    const void *ksrc[2] = {io->k, io->v};
    const void **kdst[2] = {&e->gio.k, &e->gio.v};
    for (int i = 0; i < 2; i++) {
        const size_t krow = hk * D[i] * es;
        *kdst[i] = p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, krow, (const char *)ksrc[i] + (size_t)g * krow,
                           (size_t)f->num_kv_heads * D[i] * es, krow, B * n);
        p += align_up(B * n * krow);
    }
    if (e->bwd) {
        e->gio.lse = (const float *)(void *)p;
        if (!e->ghost)
            e->ops->copy2d(e->ctx, p, hq * n * 4, (const char *)io->lse + (size_t)g * hq * n * 4,
                           (size_t)f->num_heads * n * 4, hq * n * 4, B);
    }
}

/* Whether this call's step-0 diagonal writes its direct parts (see exec) into the caller's
   outputs. Only where a failure after it cannot break a promise: device backends, once every
   rank has passed the agreement on the host (e->gate NULL: masked calls always, others on
   their first call), in one group of heads (the caller's rows, not packed ones). A host
   backend writes no output before its closing agreement, so that a rank failing midway leaves
   every rank's outputs untouched (test_dist_errors); tests force the direct parts there
   (dfa__dist_force_direct) to check them against the accumulators, bit for bit. With sinks the
   forward has none: every row's o takes its sink's factor after the last merge. */
int dfa__exec_use_direct(const exec *e) {
    const int force = e->c->force_direct;
    if (force < 0 || !(e->async || force > 0) || e->gate || e->G != 1 || e->ghost || !dfa__exec_first_is_diagonal(e))
        return 0;
    return e->bwd ? e->io->dk && e->io->dv && e->k_direct1 > e->k_direct0
                  : e->io->o_out && e->q_direct < e->n && !e->d.sinks;
}

/* Rows [r0, r1) of each batch row of a float32 accumulator ([batch, n, width]) rounded into dst
   ([batch, n] rows of pitch elements, the group's heads). */
static void store_rows(exec *e, dfa_dtype t, const float *acc, char *dst, int64_t width, int64_t pitch, int r0, int r1) {
    const size_t es = dfa__dtype_size(t);
    if (r0 >= r1) return;
    if (r0 == 0 && r1 == e->n) {
        e->ops->store(e->ctx, t, acc, dst, (int64_t)e->d.batch * e->n, width, pitch, e->gate);
        return;
    }
    for (int b = 0; b < e->d.batch; b++) {
        const int64_t row = (int64_t)b * e->n + r0;
        e->ops->store(e->ctx, t, acc + row * width, dst + (size_t)(row * pitch) * es, r1 - r0, width, pitch, e->gate);
    }
}

/* Group g's float32 accumulators, rounded into its heads of the caller's outputs (all but the
   direct parts the diagonal wrote itself). With sinks the forward first adds group g's sinks to
   its merged rows (their only addition: partial results merge without them), and the backward
   writes dsinks with the first group, from the caller's o, dout and lse of every head: the
   sum over this rank's rows only (distflash_mpi.h). */
void dfa__exec_store_group(exec *e, const dfa__dist_io *io, int g) {
    const dfa_attn_desc *d = &e->d, *f = &e->full;
    const size_t es = dfa__dtype_size(d->dtype);
    const int64_t D = d->head_dim, Dv = dv_of(e);
    const int64_t wq = d->num_heads * D, wk = d->num_kv_heads * D, wo = d->num_heads * Dv, wv = d->num_kv_heads * Dv;
    const int64_t pq = (int64_t)f->num_heads * D, pk = (int64_t)f->num_kv_heads * D;
    const int64_t po = (int64_t)f->num_heads * Dv, pv = (int64_t)f->num_kv_heads * Dv;
    const int q_end = e->direct && !e->bwd ? e->q_direct : e->n;
    if (e->bwd) {
        /* dk, dv: the keys below and above the direct ones (all of them without) */
        const int k0 = e->direct ? e->k_direct0 : e->n, k1 = e->direct ? e->k_direct1 : e->n;
        store_rows(e, d->dtype, e->acc[0], (char *)io->dq + (size_t)(g * wq) * es, wq, pq, 0, e->n);
        for (int i = 1; i < 3; i++) {
            const int64_t w = i == 1 ? wk : wv, pitch = i == 1 ? pk : pv;
            char *dst = (char *)(i == 1 ? io->dk : io->dv) + (size_t)(g * w) * es;
            store_rows(e, d->dtype, e->acc[i], dst, w, pitch, 0, k0);
            store_rows(e, d->dtype, e->acc[i], dst, w, pitch, k1, e->n);
        }
        if (g == 0 && f->dsinks) e->ops->dsinks(e->ctx, f, io->o, io->dout, io->lse, f->dsinks, e->gate);
    } else {
        if (f->sinks)
            e->ops->add_sinks(e->ctx, d->batch, d->num_heads, (int)Dv, e->n, e->acc[0], e->acc[1],
                              f->sinks + (size_t)g * d->num_heads);
        store_rows(e, d->dtype, e->acc[0], (char *)io->o_out + (size_t)(g * wo) * es, wo, po, 0, q_end);
        if (io->lse_out)
            e->ops->store(e->ctx, DFA_F32, e->acc[1], io->lse_out + (size_t)g * d->num_heads * e->n, d->batch,
                          (int64_t)d->num_heads * e->n, (int64_t)f->num_heads * e->n, e->gate);
    }
}
