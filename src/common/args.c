#include "args.h"

#include <stdbool.h>

#include "desc.h"
#include "dtype.h"

/* One pointer argument of a call: its extent (from the descriptor's shape) and role. */
typedef enum {
    EXT_Q,   /* q, dq:    [b, sq, h, head_dim] storage */
    EXT_O,   /* o, dout:  [b, sq, h, Dv] storage */
    EXT_K,   /* k, dk:    [b, sk, hkv, head_dim] storage */
    EXT_V,   /* v, dv:    [b, sk, hkv, Dv] storage */
    EXT_LSE, /* lse:      [b, h, sq] float32 */
    EXT_HEADS /* d->sinks, d->dsinks: [h] float32 */
} extent;
typedef enum { IN, OUT, OUT_OPTIONAL } role;      /* OUT_OPTIONAL may be NULL */
typedef struct {
    const void *ptr;
    const char *name;
    extent ext;
    role role;
} call_arg;

#define MAX_ARGS 9 /* the backward's q, k, v, o, lse, dout, dq, dk, dv */
#define MAX_INS (MAX_ARGS + 3) /* and the descriptor's q_doc, k_doc, sinks */
#define MAX_OUTS (MAX_ARGS + 1) /* and the descriptor's dsinks */

/* The whole check of one call: import, the descriptor's contents for this use, the backend's
   rule, NULL pointers in argument order, then every output against the other outputs and
   every input. The descriptor's pointers take part in the full use: q_doc, k_doc and sinks
   as inputs, and dsinks as an output where the call writes it (bwd). *d is written only on
   success. */
static dfa_status check_call(const dfa_attn_desc *user, dfa__desc_use use, dfa__desc_rule rule, dfa_attn_desc *d,
                             const call_arg *args, int n, bool bwd, const char *fn) {
    dfa_attn_desc x;
    dfa_status st = dfa__attn_desc_import(user, &x, fn);
    if (!st) st = dfa__check_desc(&x, use, fn);
    if (!st && rule) st = rule(&x, fn);
    if (st) return st;
    const size_t es = dfa__dtype_size(x.dtype);
    const size_t bytes[] = {(size_t)dfa__q_elems(&x) * es,  (size_t)dfa__o_elems(&x) * es,
                            (size_t)dfa__kv_elems(&x) * es, (size_t)dfa__v_elems(&x) * es,
                            (size_t)dfa__lse_elems(&x) * sizeof(float), (size_t)x.num_heads * sizeof(float)};
    dfa__buffer outs[MAX_OUTS], ins[MAX_INS];
    int nout = 0, nin = 0;
    for (int i = 0; i < n && i < MAX_ARGS; i++) {
        if (args[i].role != OUT_OPTIONAL && (st = dfa__check_ptr(args[i].ptr, args[i].name, fn))) return st;
        const dfa__buffer b = {args[i].ptr, bytes[args[i].ext], args[i].name};
        if (args[i].role == IN) ins[nin++] = b;
        else outs[nout++] = b;
    }
    if (use == DFA__DESC_FULL && x.q_doc) { /* the document ids are inputs too (merge does not read them) */
        ins[nin++] = (dfa__buffer){x.q_doc, (size_t)x.batch * (size_t)x.seqlen_q * sizeof(int32_t), "d->q_doc"};
        ins[nin++] = (dfa__buffer){x.k_doc, (size_t)x.batch * (size_t)x.seqlen_k * sizeof(int32_t), "d->k_doc"};
    }
    if (use == DFA__DESC_FULL && x.sinks) ins[nin++] = (dfa__buffer){x.sinks, bytes[EXT_HEADS], "d->sinks"};
    if (bwd && x.dsinks) outs[nout++] = (dfa__buffer){x.dsinks, bytes[EXT_HEADS], "d->dsinks"};
    if ((st = dfa__check_no_overlap(outs, nout, ins, nin, fn))) return st;
    *d = x;
    return DFA_OK;
}

dfa_status dfa__check_fwd_args(const dfa_attn_desc *user, dfa__desc_rule rule, dfa_attn_desc *d, const void *q,
                               const void *k, const void *v, const void *o, const float *lse, const char *fn) {
    const call_arg args[] = {{q, "q", EXT_Q, IN},   {k, "k", EXT_K, IN},
                             {v, "v", EXT_V, IN},   {o, "o", EXT_O, OUT},
                             {lse, "lse", EXT_LSE, OUT_OPTIONAL}};
    return check_call(user, DFA__DESC_FULL, rule, d, args, 5, false, fn);
}

dfa_status dfa__check_bwd_args(const dfa_attn_desc *user, dfa__desc_rule rule, dfa_attn_desc *d, const void *q,
                               const void *k, const void *v, const void *o, const float *lse, const void *dout,
                               const void *dq, const void *dk, const void *dv, const char *fn) {
    const call_arg args[] = {{q, "q", EXT_Q, IN},         {k, "k", EXT_K, IN},       {v, "v", EXT_V, IN},
                             {o, "o", EXT_O, IN},         {lse, "lse", EXT_LSE, IN}, {dout, "dout", EXT_O, IN},
                             {dq, "dq", EXT_Q, OUT},      {dk, "dk", EXT_K, OUT},    {dv, "dv", EXT_V, OUT}};
    return check_call(user, DFA__DESC_FULL, rule, d, args, 9, true, fn);
}

dfa_status dfa__check_merge_args(const dfa_attn_desc *user, dfa_attn_desc *d, const void *o_acc,
                                 const float *lse_acc, const void *o_part, const float *lse_part, const char *fn) {
    const call_arg args[] = {{o_acc, "o_acc", EXT_O, OUT},  {lse_acc, "lse_acc", EXT_LSE, OUT},
                             {o_part, "o_part", EXT_O, IN}, {lse_part, "lse_part", EXT_LSE, IN}};
    return check_call(user, DFA__DESC_QUERY_SIDE, NULL, d, args, 4, false, fn);
}
