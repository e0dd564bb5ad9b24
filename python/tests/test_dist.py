"""distflash.torch.dist_attention on two GPUs (two processes, NCCL) against single-device
attention on the gathered sequence: forward o and backward dq/dk/dv, both schedules, GQA,
bf16/fp16. Skipped without two GPUs.

On the GPU machine (library built with CUDA and NCCL):
    PYTHONPATH=python NCCL_NVLS_ENABLE=0 python3 -m pytest -q python/tests/test_dist.py
"""
import os
import socket

import pytest
import torch

import distflash

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs two CUDA devices")

# (schedule, causal, batch, local_rows, heads, kv_heads, head_dim, dtype)
CONFIGS = [
    ("balanced", True, 1, 1024, 8, 8, 128, torch.bfloat16),
    ("balanced", True, 2, 300, 8, 2, 64, torch.float16),    # GQA, odd-ish local rows
    ("ring", True, 1, 512, 4, 4, 128, torch.bfloat16),
    ("ring", False, 1, 256, 4, 1, 64, torch.bfloat16),       # MQA, non-causal
    ("balanced", False, 1, 256, 4, 2, 128, torch.float16),
    ("balanced", True, 1, 1, 2, 2, 64, torch.bfloat16),      # one row per rank
]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port):
    import torch.distributed as dist

    import distflash.torch as dft
    from distflash import _dist
    from conftest import assert_close, leaves, randn, ref_attention

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    try:
        for n, (schedule, causal, B, rows, H, Hkv, D, dtype) in enumerate(CONFIGS):
            g = torch.Generator().manual_seed(100 + n)  # the same full sequence on every rank
            S = rows * world
            q, k, v, dout = (randn(shape, dtype, dev, gen=g) for shape in
                             ((B, S, H, D), (B, S, Hkv, D), (B, S, Hkv, D), (B, S, H, D)))
            pos = dft.dist_position(schedule, rank, world, rows).to(dev)
            ql, kl, vl = leaves(q[:, pos], k[:, pos], v[:, pos], device=dev)
            o = dft.dist_attention(ql, kl, vl, schedule=schedule, causal=causal)
            grads = torch.autograd.grad(o, (ql, kl, vl), dout[:, pos].contiguous())

            # gather every rank's rows back into sequence order
            def gather(t):
                parts = [torch.empty_like(t) for _ in range(world)]
                dist.all_gather(parts, t.contiguous())
                idx = [dft.dist_position(schedule, r, world, rows).to(dev) for r in range(world)]
                full = torch.empty((t.shape[0], S) + tuple(t.shape[2:]), dtype=t.dtype, device=dev)
                for r in range(world):
                    full[:, idx[r]] = parts[r]
                return full

            got = [gather(t) for t in (o, *grads)]
            # single-device distflash on the whole sequence, and the float64 reference
            qs, ks, vs = leaves(q, k, v, device=dev)
            os_ = dft.attention(qs, ks, vs, causal=causal)
            single = [os_, *torch.autograd.grad(os_, (qs, ks, vs), dout)]
            q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device=dev)
            o_ref, _ = ref_attention(q2, k2, v2, causal=causal)
            refs = [o_ref, *torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())]
            tol = 1.6e-2 if dtype == torch.bfloat16 else 2e-3
            for name, a, b, r in zip(("o", "dq", "dk", "dv"), got, single, refs):
                what = f"config {n} {schedule} causal={causal} rank {rank}: {name}"
                assert_close(a, r, tol, what + " vs float64")
                assert_close(a, b, tol, what + " vs single-device distflash")
        assert len(_dist._comms) == 1, "the communicator is made once per group and cached"
        torch.cuda.synchronize()
        dft.destroy_comms()
    finally:
        dist.destroy_process_group()


def test_library_has_nccl():
    assert distflash.has_nccl(), f"{distflash.library_path()} lacks dfa_comm_create_nccl / dfa_dist_attn_*_cuda"


def test_two_gpus_against_single_device():
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(2, _free_port()), nprocs=2, join=True)
