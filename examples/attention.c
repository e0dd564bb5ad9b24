/* Exact attention on the CPU: a causal forward and backward in float32.
 *   cc attention.c $(pkg-config --cflags --libs distflash) -o attention && ./attention */
#include <distflash.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    const int batch = 1, seqlen = 256, heads = 4, kv_heads = 2, head_dim = 64;
    dfa_attn_desc d = dfa_attn_desc_init(batch, seqlen, seqlen, heads, kv_heads, head_dim);
    d.causal = 1; /* key j visible to query i iff k_start + j <= q_start + i */

    /* q, o, dout, dq: [batch, seqlen, heads, head_dim]; k, v, dk, dv: [batch, seqlen, kv_heads, head_dim];
       lse: [batch, heads, seqlen] float32 */
    const size_t nq = (size_t)batch * seqlen * heads * head_dim, nkv = (size_t)batch * seqlen * kv_heads * head_dim;
    float *q = malloc(nq * sizeof *q), *o = malloc(nq * sizeof *o), *dout = malloc(nq * sizeof *dout);
    float *dq = malloc(nq * sizeof *dq), *k = malloc(nkv * sizeof *k), *v = malloc(nkv * sizeof *v);
    float *dk = malloc(nkv * sizeof *dk), *dv = malloc(nkv * sizeof *dv);
    float *lse = malloc((size_t)batch * heads * seqlen * sizeof *lse);
    if (!q || !o || !dout || !dq || !k || !v || !dk || !dv || !lse) return 1;
    srand(1);
    for (size_t i = 0; i < nq; i++) q[i] = (float)rand() / RAND_MAX - 0.5f, dout[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t i = 0; i < nkv; i++) k[i] = (float)rand() / RAND_MAX - 0.5f, v[i] = (float)rand() / RAND_MAX - 0.5f;

    if (dfa_attn_fwd(&d, q, k, v, o, lse) != DFA_OK ||
        dfa_attn_bwd(&d, q, k, v, o, lse, dout, dq, dk, dv) != DFA_OK) {
        fprintf(stderr, "distflash: %s\n", dfa_last_error()); /* names the bad argument */
        return 1;
    }
    /* Query 0 sees key 0 only, so its output is v's row 0 (head 0 reads kv head 0). */
    double err = 0;
    for (int e = 0; e < head_dim; e++) {
        const double diff = (double)o[e] - v[e];
        if (diff > err || -diff > err) err = diff > 0 ? diff : -diff;
    }
    printf("%s: o[0] - v[0] = %.1e, lse[0] = %.4f\n", dfa_version_string(), err, (double)lse[0]);
    free(q), free(o), free(dout), free(dq), free(k), free(v), free(dk), free(dv), free(lse);
    return err < 1e-6 ? 0 : 1;
}
