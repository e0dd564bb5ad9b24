/* Exact attention on one CUDA device: bf16 storage, float32 accumulation, on a stream.
 *   cc cuda.c $(pkg-config --cflags --libs distflash) -o cuda && ./cuda */
#include <distflash_cuda.h> /* distflash.h + the _cuda calls */
#include <stdio.h>

int main(void) {
    const int batch = 2, seqlen = 4096, heads = 16, kv_heads = 4, head_dim = 128;
    dfa_attn_desc d = dfa_attn_desc_init(batch, seqlen, seqlen, heads, kv_heads, head_dim);
    d.dtype = DFA_BF16; /* or DFA_F16 (f32 storage is CPU only) */
    d.causal = 1;
    const size_t nq = (size_t)batch * seqlen * heads * head_dim, nkv = (size_t)batch * seqlen * kv_heads * head_dim;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv; /* 2-byte elements */
    float *lse;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc(&q, 2 * nq) || cudaMalloc(&o, 2 * nq) ||
        cudaMalloc(&dout, 2 * nq) || cudaMalloc(&dq, 2 * nq) || cudaMalloc(&k, 2 * nkv) || cudaMalloc(&v, 2 * nkv) ||
        cudaMalloc(&dk, 2 * nkv) || cudaMalloc(&dv, 2 * nkv) ||
        cudaMalloc((void **)&lse, sizeof(float) * batch * heads * seqlen)) {
        fprintf(stderr, "no CUDA device or memory\n");
        return 1;
    }
    cudaMemsetAsync(q, 0, 2 * nq, s), cudaMemsetAsync(k, 0, 2 * nkv, s), cudaMemsetAsync(v, 0, 2 * nkv, s);
    cudaMemsetAsync(dout, 0, 2 * nq, s);
    /* Both calls only enqueue on s; argument errors come back before anything is enqueued. */
    if (dfa_attn_fwd_cuda(&d, q, k, v, o, lse, s) != DFA_OK ||
        dfa_attn_bwd_cuda(&d, q, k, v, o, lse, dout, dq, dk, dv, s) != DFA_OK) {
        fprintf(stderr, "distflash: %s\n", dfa_last_error());
        return 1;
    }
    const int ok = cudaStreamSynchronize(s) == cudaSuccess;
    printf("%s: %s\n", dfa_version_string(), ok ? "ok" : cudaGetErrorString(cudaGetLastError()));
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(dout), cudaFree(dq), cudaFree(dk), cudaFree(dv);
    cudaFree(lse), cudaStreamDestroy(s);
    return ok ? 0 : 1;
}
