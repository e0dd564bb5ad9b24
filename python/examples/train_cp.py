"""Train the LLaMA-style byte-level model of shared/peers/train_peer.py with distflash's
sequence-parallel attention in place of PyTorch's context parallelism, and compare the two.

The model is the peer's (copied; RMSNorm, RoPE, GQA, SwiGLU, bf16 autocast over float32 weights,
fused AdamW, DDP for the weight gradients, per-layer checkpointing or none; here also
checkpointing at the attention output), in the flash-attn
layout [batch, seq, heads, head_dim]. The attention is one line of Layer.forward:

    o = self.attend(q, k, v)   # distflash.torch.dist_attention  or  torch_attention (SDPA)

  --attention torch      PyTorch SDPA (cuDNN backend); with several GPUs the sequence is
                         sharded by torch's context_parallel (ring attention), as in the peer.
  --attention distflash  distflash.torch.dist_attention: each rank feeds its own rows (tokens,
                         labels and RoPE angles at the positions distflash.torch.dist_position
                         gives); one GPU: distflash.torch.attention.
  --attention both       torch, then distflash, in one run (same seed, same data).

On the GPU machine (library built with CMake in build/, from the repository root):
  PYTHONPATH=python python3 -m torch.distributed.run --nproc-per-node 2 python/examples/train_cp.py --context 131072 --attention both
  PYTHONPATH=python python3 python/examples/train_cp.py --context 32768 --attention both     # one GPU
  ... train_cp.py --attention both --ckpt layer,attn-output    # torch, then distflash, each with both policies
Options as train_peer.py: --layers --d-model --heads --kv-heads --ffn --context --batch --steps --warmup
--ckpt, plus --attention distflash|torch|both and --schedule balanced|ring.

  --ckpt none          no activation checkpointing.
  --ckpt layer         per-layer checkpointing (the default): each layer's input is kept and the
                       whole layer, attention forward included, re-runs before its backward.
  --ckpt attn-output   per-layer checkpointing that also keeps each attention's output
                       (DistFlashAttn's rematerialization-aware checkpointing): the recompute
                       replays the attention forward from the saved o and lse and re-runs only
                       the norms, projections, RoPE and MLP. distflash: context_fn
                       distflash.torch.checkpoint_context (selective activation checkpointing
                       saving distflash's attention ops); torch: the same policy saving the
                       outputs of SDPA's aten ops instead (sdpa_checkpoint_context; under
                       context_parallel too, where that op runs the whole ring attention).
  --ckpt layer,attn-output   a comma list: every attention runs once per policy, in that order,
                       in one launch (e.g. --attention both: torch, then distflash, each with both).

Prints one line per run, "train_cp <attention> ... ckpt <policy>: ...": tokens/s over all GPUs,
median step time, peak memory per GPU, model FLOP utilisation (6·N·tokens + attention FLOPs
against 989 TFLOP/s dense bf16 per GPU; the recompute is not counted), the loss of the first and
the last step (mean over ranks) -- or OOM.
"""
import argparse
import os
import time
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

import distflash.torch

CKPTS = ("none", "layer", "attn-output")


def rope_tables(context, head_dim, device):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(context, device=device, dtype=torch.float32), inv)  # [S, D/2]
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):  # x [B, S, H, D]; cos/sin [S, D/2]; rotate pairs (first half, second half)
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d].float(), x[..., d:].float()
    c, s = cos[None, :, None], sin[None, :, None]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)


def torch_attention(q, k, v):
    """The peer's attention in the [B, S, H, D] layout: SDPA (context_parallel shards it when
    active; it does not take enable_gqa there, so the kv heads are repeated)."""
    h, kv = q.shape[2], k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if kv != h:
        k = k.repeat_interleave(h // kv, dim=1)
        v = v.repeat_interleave(h // kv, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


# SDPA's forward kernels as the dispatcher sees them below autograd (the one that runs depends on
# the device and the backend; under context_parallel, the call that runs the ring attention).
SDPA_FORWARDS = tuple(getattr(torch.ops.aten, name).default for name in (
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu"))


def sdpa_policy(ctx, op, *args, **kwargs):
    """distflash.torch.checkpoint_policy's rule for torch's attention: keep SDPA's outputs."""
    return CheckpointPolicy.MUST_SAVE if op in SDPA_FORWARDS else CheckpointPolicy.PREFER_RECOMPUTE


sdpa_checkpoint_context = partial(create_selective_checkpoint_contexts, sdpa_policy)


class Layer(nn.Module):
    def __init__(self, a, attend):
        super().__init__()
        self.h, self.kv, self.dh = a.heads, a.kv_heads, a.d_model // a.heads
        self.attend = attend
        self.n1, self.n2 = nn.RMSNorm(a.d_model), nn.RMSNorm(a.d_model)
        self.wq = nn.Linear(a.d_model, a.d_model, bias=False)
        self.wk = nn.Linear(a.d_model, self.kv * self.dh, bias=False)
        self.wv = nn.Linear(a.d_model, self.kv * self.dh, bias=False)
        self.wo = nn.Linear(a.d_model, a.d_model, bias=False)
        self.w1 = nn.Linear(a.d_model, a.ffn, bias=False)
        self.w3 = nn.Linear(a.d_model, a.ffn, bias=False)
        self.w2 = nn.Linear(a.ffn, a.d_model, bias=False)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        y = self.n1(x)
        q = self.wq(y).view(B, S, self.h, self.dh)
        k = self.wk(y).view(B, S, self.kv, self.dh)
        v = self.wv(y).view(B, S, self.kv, self.dh)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = self.attend(q, k, v)  # the one line: distflash.torch.dist_attention or torch_attention
        x = x + self.wo(o.reshape(B, S, -1))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Model(nn.Module):
    """a.ckpt: one of CKPTS. context_fn: the selective-checkpointing policy of "attn-output"
    (distflash.torch.checkpoint_context, or sdpa_checkpoint_context for torch_attention)."""

    def __init__(self, a, attend, context_fn=distflash.torch.checkpoint_context):
        super().__init__()
        if a.ckpt not in CKPTS:
            raise ValueError(f"ckpt = {a.ckpt!r}; it must be one of {CKPTS}")
        self.emb = nn.Embedding(256, a.d_model)
        self.layers = nn.ModuleList(Layer(a, attend) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.d_model)
        self.head = nn.Linear(a.d_model, 256, bias=False)
        self.ckpt, self.context_fn = a.ckpt, context_fn

    def forward(self, tokens, labels, cos, sin):
        x = self.emb(tokens)
        for layer in self.layers:
            if self.ckpt == "layer":
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            elif self.ckpt == "attn-output":  # the attention outputs kept: no attention forward in the recompute
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False,
                                                      context_fn=self.context_fn)
            else:
                x = layer(x, cos, sin)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, 256), labels.reshape(-1))


def run(a, attention, ckpt, world, rank, dev):
    """Trains a fresh model (seed 0) for warmup + steps optimizer steps with checkpointing policy
    ckpt; returns the rank-0 line."""
    import torch.distributed as dist
    if attention == "distflash":
        attend = lambda q, k, v: distflash.torch.dist_attention(q, k, v, schedule=a.schedule)  # noqa: E731
        context_fn = distflash.torch.checkpoint_context
    else:
        attend, context_fn = torch_attention, sdpa_checkpoint_context
    a = argparse.Namespace(**{**vars(a), "ckpt": ckpt})
    torch.manual_seed(0)
    model = Model(a, attend, context_fn).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    ddp = model
    if world > 1:
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    g = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, 256, (a.batch, a.context + 1), generator=g).to(dev)
    inp, lab = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    cos, sin = rope_tables(a.context, a.d_model // a.heads, dev)
    if attention == "distflash" and world > 1:
        # this rank's rows of the sequence, at the positions distflash's schedule gives them
        pos = distflash.torch.dist_position(a.schedule, rank, world, a.context // world).to(dev)
        inp, lab, cos, sin = inp[:, pos].contiguous(), lab[:, pos].contiguous(), cos[pos], sin[pos]
    from torch.nn.attention import SDPBackend, sdpa_kernel
    times, losses = [], []
    status = "ok"
    mesh = None
    torch.cuda.reset_peak_memory_stats(dev)
    try:
        for step in range(a.warmup + a.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.autocast("cuda", dtype=torch.bfloat16):
                if world > 1 and attention == "torch":
                    from torch.distributed.device_mesh import init_device_mesh
                    from torch.distributed.tensor.experimental import context_parallel
                    mesh = init_device_mesh("cuda", (world,)) if mesh is None else mesh
                    # shards the sequence (load-balanced for causal) of tokens, labels and rope tables
                    i2, l2, c2, s2 = inp.clone(), lab.clone(), cos.clone(), sin.clone()
                    with context_parallel(mesh, buffers=[i2, l2, c2, s2], buffer_seq_dims=[1, 1, 0, 0],
                                          no_restore_buffers={i2, l2, c2, s2}):
                        loss = ddp(i2, l2, c2, s2)
                        loss.backward()
                else:
                    loss = ddp(inp, lab, cos, sin)
                    loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if step >= a.warmup:
                times.append(time.perf_counter() - t0)
            if step == 0 or step == a.warmup + a.steps - 1:
                losses.append(loss.detach().float())
    except torch.OutOfMemoryError:
        status = "OOM"
    peak = torch.cuda.max_memory_allocated(dev) / 2**30
    if status == "ok" and world > 1:
        ls = torch.stack(losses)
        dist.all_reduce(ls)
        losses = list(ls / world)
    cfg = (f"layers {a.layers} d {a.d_model} heads {a.heads}/{a.kv_heads} ffn {a.ffn} params {nparams/1e6:.0f}M "
           f"context {a.context} batch {a.batch} gpus {world} ckpt {a.ckpt}"
           + (f" schedule {a.schedule}" if attention == "distflash" else ""))
    if status != "ok":
        line = f"train_cp {attention} {cfg}: OOM (peak {peak:.1f} GiB)"
    else:
        times.sort()
        t = times[len(times) // 2]
        toks = a.batch * a.context / t
        dense = 6 * nparams * a.batch * a.context
        attn = 3.5 * 4 * a.batch * a.heads * (a.d_model // a.heads) * a.context ** 2 * 0.5 * a.layers
        mfu = (dense + attn) / t / (989e12 * world)
        line = (f"train_cp {attention} {cfg}: step {t:.3f} s  {toks:,.0f} tokens/s  peak {peak:.1f} GiB/GPU  "
                f"MFU {mfu:.3f}  loss first {float(losses[0]):.4f} last {float(losses[-1]):.4f}")
    del ddp, model, opt
    torch.cuda.empty_cache()
    return line


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=16); p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16); p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=5632); p.add_argument("--context", type=int, default=131072)
    p.add_argument("--batch", type=int, default=1); p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ckpt", default="layer", help=f"checkpointing: one of {', '.join(CKPTS)}, or a comma list of "
                   "them (each run in turn)")
    p.add_argument("--attention", default="distflash", choices=["distflash", "torch", "both"])
    p.add_argument("--schedule", default="balanced", choices=["balanced", "ring"])
    a = p.parse_args()
    ckpts = [c.strip() for c in a.ckpt.split(",")]
    for i, c in enumerate(ckpts):
        if c not in CKPTS:
            p.error(f"--ckpt {a.ckpt}: {c!r} is not a policy (one of {', '.join(CKPTS)}, or a comma list of them)")
        if c in ckpts[:i]:
            p.error(f"--ckpt {a.ckpt}: {c!r} is listed twice")
    world = int(os.environ.get("WORLD_SIZE", "1")); rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    if a.context % world:
        p.error(f"--context {a.context} must be a multiple of the number of GPUs ({world})")
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl", device_id=dev)
    for attention in (["torch", "distflash"] if a.attention == "both" else [a.attention]):
        for ckpt in ckpts:
            line = run(a, attention, ckpt, world, rank, dev)
            if rank == 0:
                print(line, flush=True)
    if world > 1:
        import torch.distributed as dist
        torch.cuda.synchronize()
        distflash.torch.destroy_comms()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
