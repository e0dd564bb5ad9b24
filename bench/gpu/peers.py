"""Peer numbers for `distflash bench --device cuda`: PyTorch SDPA's flash
(FlashAttention-2) and cuDNN backends on the same shapes (bf16, h = 4096/d heads,
b = max(1, 32768/S)), timed the same way (CUDA events, median after warm-up),
FLOPs count the visible query-key pairs (docs/performance.md, "Method").

    python3 bench/gpu/peers.py [--dims 64,128] [--seqlens 2048,8192,32768] [--kv-ratio 1,4,8] [--json out.json]

--kv-ratio r: h / r key/value heads (GQA, SDPA's enable_gqa); a backend that refuses it prints FAILED.
"""
import argparse, json, os, sys
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from timing import median_ms  # noqa: E402


def bench(fn, warm=3, rep=10):
    return median_ms(fn, warm, rep)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqlens", default="2048,8192,32768")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--kv-ratio", default="1")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          torch.cuda.get_device_name(), flush=True)
    rows = []
    for d in map(int, a.dims.split(",")):
        for s in map(int, a.seqlens.split(",")):
            h = 4096 // d; b = max(1, 32768 // s)
            for causal, ratio in ((c == "1", int(r)) for c in a.causal.split(",") for r in a.kv_ratio.split(",")):
                hkv = h // ratio
                q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn_like(k, requires_grad=True)
                do = torch.randn_like(q)
                gqa = dict(enable_gqa=True) if ratio > 1 else {}
                fl = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        with sdpa_kernel(be):
                            msf = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa),
                                        rep=a.reps)
                            def fb():  # the gradients alone: .backward() would also add them into .grad
                                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
                                torch.autograd.grad(o, (q, k, v), do)
                            torch.cuda.reset_peak_memory_stats()
                            msb = bench(fb, rep=a.reps)
                            peak = torch.cuda.max_memory_allocated() / 2**20
                        r = dict(backend=name, d=d, s=s, b=b, h=h, kv_heads=hkv, block="square", causal=causal, fwd_ms=msf,
                                 fwd_tflops=fl / (msf * 1e-3) / 1e12, fwdbwd_ms=msb,
                                 fwdbwd_tflops=3.5 * fl / (msb * 1e-3) / 1e12, peak_mib=peak)
                        rows.append(r)
                        print(f"{name:6s} d={d:3d} S={s:6d} b={b:2d} h={h:2d} kv={hkv:2d} causal={int(causal)}  fwd {msf:8.3f} ms "
                              f"{r['fwd_tflops']:6.1f} TF  fwd+bwd {msb:8.3f} ms {r['fwdbwd_tflops']:6.1f} TF  "
                              f"peak {peak:7.0f} MiB", flush=True)
                    except Exception as e:
                        print(f"{name} d={d} S={s} causal={causal}: FAILED {type(e).__name__}: {str(e)[:160]}")
                del q, k, v, do
                torch.cuda.empty_cache()
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
