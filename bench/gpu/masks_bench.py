"""Masks on one GPU: distflash against PyTorch's FlexAttention (torch.compile'd,
create_block_mask) on the same masks, in the same run.

Masks, on one packed sequence of S tokens (bf16, B = 1, H heads of D):
  docs     documents with log-normal lengths (mean --doc-mean, sigma --doc-sigma), causal
           within each document (the packed long-context training case);
  window   a causal sliding window of --window keys back (each query sees itself and the
           W keys before it).
FLOPs are counted over the visible pairs only: 4 * B * H * D * pairs for the forward, 2.5x that
for the backward (fwd+bwd = 3.5x), the same count for both libraries. Times are CUDA-event
medians after warm-up; each library in its native layout (distflash [B, S, H, D], Flex
[B, H, S, D]); inputs and the document layout are the same tensors' values.

    DISTFLASH_LIB=build-gpu/src/libdistflash.so PYTHONPATH=python \
        python3 bench/gpu/masks_bench.py [--seqlen 131072] [--heads 16] [--dim 128] [--json out.json]
        [--idle SECONDS] [--pool-keep]

--idle S lets the GPU idle S seconds after each warm-up, before the timed runs, for both libraries:
the H200 runs power-capped, so a measurement that follows idle time (Flex's compilation, say) gets
more clock than one that follows another library's timing.

--pool-keep keeps the device's default memory pool's memory between calls (the backward's scratch
comes from it; cuda_pool.py), as an application that calls often would.

Prints one row per (mask, pass) and a table last: TFLOP/s of each and the ratio (the bar: >= 1.5).
"""
import argparse
import json
import math
import os
import sys
import time

import torch

import cuda_pool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from timing import median_ms  # noqa: E402


def bench(fn, warm=3, rep=10, idle=0.0):
    return median_ms(fn, warm, rep, idle)


def lognormal_docs(S, mean, sigma, seed):
    """Document ids [S] (int32, non-decreasing) with log-normal lengths of the given mean."""
    g = torch.Generator().manual_seed(seed)
    mu = math.log(mean) - sigma * sigma / 2  # E[exp(N(mu, sigma^2))] = mean
    lens = []
    while sum(lens) < S:
        x = math.exp(mu + sigma * float(torch.randn(1, generator=g)))
        lens.append(max(1, int(round(x))))
    ids = torch.repeat_interleave(torch.arange(len(lens), dtype=torch.int32), torch.tensor(lens))[:S]
    return ids, lens


def visible_pairs(mask, S, lens=None, window=None):
    if mask == "docs":
        total, left = 0, S
        for L in lens:
            L = min(L, left)
            total += L * (L + 1) // 2
            left -= L
            if left <= 0:
                break
        return total
    W = window  # causal: query i sees keys max(0, i - W) .. i, min(i, W) + 1 of them
    return W * (W + 1) // 2 + (S - W) * (W + 1) if S > W else S * (S + 1) // 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=131072)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--doc-mean", type=float, default=4096.0)
    ap.add_argument("--doc-sigma", type=float, default=1.0)
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--masks", default="docs,window")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--idle", type=float, default=0.0, help="seconds the GPU idles before each timing")
    cuda_pool.add_args(ap)
    ap.add_argument("--json")
    a = ap.parse_args()
    cuda_pool.apply_args(a)

    import distflash.torch as dft
    print("torch", torch.__version__, torch.cuda.get_device_name(), "distflash", dft._capi.version_string(),
          flush=True)
    S, H, D, B = a.seqlen, a.heads, a.dim, 1
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=g)
    do = torch.randn(B, S, H, D, device=dev, dtype=torch.bfloat16, generator=g)
    # Flex's layout, the same values
    qf, kf, vf, dof = (t.transpose(1, 2).contiguous() for t in (q, k, v, do))

    flex = None
    if not a.no_flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)

    rows = []
    for mask in a.masks.split(","):
        if mask == "docs":
            ids, lens = lognormal_docs(S, a.doc_mean, a.doc_sigma, seed=1)
            ids = ids.to(dev)
            pairs = visible_pairs("docs", S, lens=lens)
            kw = dict(causal=True, doc_ids=ids.view(1, S))
            desc = f"docs lognormal mean {a.doc_mean:.0f} sigma {a.doc_sigma} ({len(lens)} docs), causal"

            def mask_mod(b, h, qi, ki):
                return (ids[qi] == ids[ki]) & (qi >= ki)
        elif mask == "window":
            W = a.window
            pairs = visible_pairs("window", S, window=W)
            kw = dict(causal=True, window=(W, None))
            desc = f"causal sliding window {W}"

            def mask_mod(b, h, qi, ki, W=W):
                return (qi >= ki) & (qi - ki <= W)
        else:
            sys.exit(f"unknown mask {mask}")
        fwd_flop = 4.0 * B * H * D * pairs
        print(f"{mask}: {desc}; S={S} H={H} D={D}; visible pairs {pairs} ({pairs / (S * S):.4f} of S^2)",
              flush=True)

        # ours
        ql, kl, vl = (t.detach().requires_grad_(True) for t in (q, k, v))
        with torch.no_grad():
            t_f = bench(lambda: dft.attention(q, k, v, **kw), rep=a.reps, idle=a.idle)

        def fb():  # autograd.grad: the gradients alone, not added into .grad (three more passes)
            o = dft.attention(ql, kl, vl, **kw)
            torch.autograd.grad(o, (ql, kl, vl), do)
        t_fb = bench(fb, rep=a.reps, idle=a.idle)
        res = {"mask": mask, "S": S, "H": H, "D": D, "pairs": pairs, "idle_s": a.idle, "pool_keep": a.pool_keep, "ours_fwd_ms": t_f,
               "ours_fb_ms": t_fb,
               "ours_fwd_tflops": fwd_flop / t_f * 1e-9, "ours_fb_tflops": 3.5 * fwd_flop / t_fb * 1e-9}
        # flex
        if flex is not None:
            bm = create_block_mask(mask_mod, B=None, H=None, Q_LEN=S, KV_LEN=S, device=dev, _compile=True)
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (qf, kf, vf))
            with torch.no_grad():
                t_ff = bench(lambda: flex(qf, kf, vf, block_mask=bm), rep=a.reps, idle=a.idle)

            def ffb():
                o = flex(qg, kg, vg, block_mask=bm)
                torch.autograd.grad(o, (qg, kg, vg), dof)
            t_ffb = bench(ffb, rep=a.reps, idle=a.idle)
            res.update({"flex_fwd_ms": t_ff, "flex_fb_ms": t_ffb, "flex_fwd_tflops": fwd_flop / t_ff * 1e-9,
                        "flex_fb_tflops": 3.5 * fwd_flop / t_ffb * 1e-9})
            # the same answer (forward, a slice of rows): a wrong mask would show here
            with torch.no_grad():
                o1 = dft.attention(q, k, v, **kw)[:, :4096].float()
                o2 = flex(qf, kf, vf, block_mask=bm).transpose(1, 2)[:, :4096].float()
                res["max_abs_diff_first_4k_rows"] = float((o1 - o2).abs().max())
        rows.append(res)
        print(json.dumps(res), flush=True)

    print()
    print(f"{'mask':8} {'pass':8} {'ours TFLOP/s':>13} {'flex TFLOP/s':>13} {'ratio':>7}  (bar >= 1.5; visible-pair FLOPs)")
    for r in rows:
        for p, key in (("fwd", "fwd"), ("fwd+bwd", "fb")):
            ours = r[f"ours_{key}_tflops"]
            fl = r.get(f"flex_{key}_tflops")
            ratio = f"{ours / fl:7.2f}" if fl else "      -"
            fls = f"{fl:13.1f}" if fl else "            -"
            print(f"{r['mask']:8} {p:8} {ours:13.1f} {fls} {ratio}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
