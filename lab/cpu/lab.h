/* The CPU kernel lab: attention forward/backward variants side by side, each
 * checked against the float64 oracle on an awkward shape and then timed.
 * Variants take float32 tensors in the public layouts and use one kernel table;
 * the winner's structure is what src/cpu implements. */
#ifndef DFA_LAB_H
#define DFA_LAB_H

#include "distflash.h"
#include "cpu/kernels.h"

typedef struct {
    int br, bc; /* query rows and keys per tile (0: the variant's default) */
} lab_tiles;

typedef void (*lab_fwd_fn)(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                           const float *k, const float *v, float *o, float *lse, int nthreads);
typedef void (*lab_bwd_fn)(const dfa_attn_desc *d, const dfa__cpu_kernels *kr, lab_tiles t, const float *q,
                           const float *k, const float *v, const float *o, const float *lse, const float *dout,
                           float *dq, float *dk, float *dv, int nthreads);

typedef struct {
    const char *name, *what;
    lab_fwd_fn fwd;
    lab_tiles tiles;
} lab_fwd_variant;

typedef struct {
    const char *name, *what;
    lab_bwd_fn bwd;
    lab_tiles tiles;
} lab_bwd_variant;

extern const lab_fwd_variant lab_fwd_variants[];
extern const int lab_fwd_count;
extern const lab_bwd_variant lab_bwd_variants[];
extern const int lab_bwd_count;

#endif
