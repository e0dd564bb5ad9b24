"""PyTorch's context parallelism (ring attention over SDPA, cuDNN backend by default) on the
shapes of `distflash dist-bench --device cuda`: the peer of DistFlashAttn on GPUs, measured in
the same run.

    python3 -m torch.distributed.run --nproc-per-node 2 bench/seqpar/cp_peer.py \
        --seqlens 32k,64k,128k,256k [--backend cudnn|flash] [--rotate allgather|alltoall] [--json F]

Prints, per S: forward and forward+backward ms, TFLOP/s per GPU, and the scaling efficiency
against the same kernel on one GPU over the whole sequence (T1 / (P * TP)); causal, bf16.
"""
import argparse, json, os, sys, traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from timing import median_ms  # noqa: E402


def length(s):
    s = s.strip().lower()
    return int(float(s[:-1]) * 1024) if s.endswith("k") else int(s)


def bench(fn, warm, rep):
    return median_ms(fn, warm, rep)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlens", default="32k,64k,128k,256k")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--backend", default="cudnn", choices=["cudnn", "flash"])
    ap.add_argument("--rotate", default="allgather", choices=["allgather", "alltoall"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-single", action="store_true")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    log = (lambda *x: print(*x, flush=True)) if rank == 0 else (lambda *x: None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = SDPBackend.CUDNN_ATTENTION if a.backend == "cudnn" else SDPBackend.FLASH_ATTENTION
    set_rotate_method(a.rotate)
    mesh = init_device_mesh("cuda", (world,))
    h, d, b = a.heads, a.head_dim, 1
    log(f"cp peer: torch {torch.__version__}, {world} GPUs, {h} heads x {d}, bf16, causal, "
        f"{a.backend}, rotate {a.rotate}, median of {a.reps}")
    log(f"{'S':>8} {'fwd ms':>9} {'f+b ms':>9} {'fwd TF/s':>9} {'f+b TF/s':>9} {'eff fwd':>8} {'eff f+b':>8}")
    rows = []
    for s in (length(x) for x in a.seqlens.split(",")):
        try:
            torch.manual_seed(0)
            q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
            k, v, do = torch.randn_like(q), torch.randn_like(q), torch.randn_like(q)
            with sdpa_kernel(be), context_parallel(mesh, buffers=[q, k, v, do], buffer_seq_dims=[2, 2, 2, 2]):
                ql, kl, vl = (t.detach().requires_grad_() for t in (q, k, v))
                msf = bench(lambda: F.scaled_dot_product_attention(ql, kl, vl, is_causal=True), a.warmup, a.reps)

                def fb():  # the gradients alone: .backward() would also add them into .grad
                    o = F.scaled_dot_product_attention(ql, kl, vl, is_causal=True)
                    torch.autograd.grad(o, (ql, kl, vl), do)

                msb = bench(fb, a.warmup, a.reps)
            del q, k, v, do, ql, kl, vl
            torch.cuda.empty_cache()
            ms1f = ms1b = float("nan")
            if not a.no_single:
                qf = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                kf, vf = torch.randn_like(qf, requires_grad=True), torch.randn_like(qf, requires_grad=True)
                dof = torch.randn_like(qf)
                with sdpa_kernel(be):
                    ms1f = bench(lambda: F.scaled_dot_product_attention(qf, kf, vf, is_causal=True), a.warmup, a.reps)

                    def fb1():
                        o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
                        torch.autograd.grad(o, (qf, kf, vf), dof)

                    ms1b = bench(fb1, a.warmup, a.reps)
                del qf, kf, vf, dof
                torch.cuda.empty_cache()
            fl = 4 * b * h * s * s * d * 0.5
            r = dict(S=s, fwd_ms=msf, fb_ms=msb, single_fwd_ms=ms1f, single_fb_ms=ms1b,
                     tflops_fwd_per_gpu=fl / (msf * 1e-3) / 1e12 / world,
                     tflops_fb_per_gpu=3.5 * fl / (msb * 1e-3) / 1e12 / world,
                     efficiency_fwd=ms1f / world / msf, efficiency_fb=ms1b / world / msb)
            rows.append(r)
            log(f"{s:8d} {msf:9.2f} {msb:9.2f} {r['tflops_fwd_per_gpu']:9.1f} {r['tflops_fb_per_gpu']:9.1f} "
                f"{r['efficiency_fwd']:8.3f} {r['efficiency_fb']:8.3f}")
        except Exception as e:
            log(f"{s:8d} FAILED {type(e).__name__}: {str(e)[:200]}")
            if rank == 0:
                traceback.print_exc()
            torch.cuda.empty_cache()
    if rank == 0 and a.json:
        json.dump(dict(world=world, backend=a.backend, rotate=a.rotate, rows=rows), open(a.json, "w"), indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
