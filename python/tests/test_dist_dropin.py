"""dist_attention's drop-in arguments: group as a DeviceMesh, return_lse (differentiable),
deterministic, cu_seqlens instead of doc_ids. On the CPU through a one-rank gloo group (the
single-device path), and on two GPUs (NCCL) against single-device attention on the gathered
sequence (skipped without two GPUs)."""
import os
import socket

import pytest
import torch

import distflash.torch as dft
from distflash import _dist
from conftest import assert_close, leaves, randn


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gloo_world():
    import torch.distributed as dist
    if not dist.is_available():
        pytest.skip("torch without distributed")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def _cu_and_ids(lengths, S):
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    ids = torch.searchsorted(cu, torch.arange(S, dtype=torch.int32), right=True)
    return cu, ids


def test_cu_seqlens_return_lse_and_a_mesh_on_one_rank(gloo_world):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (1,))
    g = torch.Generator().manual_seed(4)
    B, S, H, Hkv, D = 2, 37, 4, 2, 16
    q, k, v = (randn(s, torch.float32, gen=g) for s in ((B, S, H, D), (B, S, Hkv, D), (B, S, Hkv, D)))
    cu, ids = _cu_and_ids([5, 1, 20, 11], S)
    q1, k1, v1 = leaves(q, k, v)
    o, lse = dft.dist_attention(q1, k1, v1, group=mesh, cu_seqlens=cu, return_lse=True, window=(6, None),
                                deterministic=True)
    grads = torch.autograd.grad(o.sum() + lse.square().sum(), (q1, k1, v1))
    q2, k2, v2 = leaves(q, k, v)
    o_r, lse_r = dft.attention(q2, k2, v2, causal=True, doc_ids=ids.expand(B, S), window=(6, None), return_lse=True)
    grads_r = torch.autograd.grad(o_r.sum() + lse_r.square().sum(), (q2, k2, v2))
    assert torch.equal(o, o_r) and torch.equal(lse, lse_r)
    for a, b in zip(grads, grads_r):
        assert torch.equal(a, b)
    # one cu_seqlens tensor gives one ids tensor, layer after layer (same_doc_ids=None sees it)
    a = _dist.docs_from_cu_seqlens(cu, 0, 0, 1, S, q, "t")
    assert a is _dist.docs_from_cu_seqlens(cu, 0, 0, 1, S, q, "t")
    cu2 = cu.clone()
    cu2[2] -= 1
    assert not torch.equal(_dist.docs_from_cu_seqlens(cu2, 0, 0, 1, S, q, "t"), a)


def test_dist_attention_argument_errors(gloo_world):
    from torch.distributed.device_mesh import init_device_mesh
    q = torch.randn(1, 8, 2, 8)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="2-D DeviceMesh"):
        dft.dist_attention(q, q, q, group=init_device_mesh("cpu", (1, 1)))
    with pytest.raises(ValueError, match="doc_ids or cu_seqlens, not both"):
        dft.dist_attention(q, q, q, doc_ids=torch.zeros(8, dtype=torch.int32), cu_seqlens=cu)
    with pytest.raises(TypeError, match="cu_seqlens must hold int32"):
        dft.dist_attention(q, q, q, cu_seqlens=cu.float())
    with pytest.raises(ValueError, match="never decrease"):
        dft.dist_attention(q, q, q, cu_seqlens=torch.tensor([0, 5, 3], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"cu_seqlens must have shape \[ndocs \+ 1\]"):
        dft.dist_attention(q, q, q, cu_seqlens=cu.view(1, 3))


def _worker(rank, world, port):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    try:
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
        for n, (B, rows, H, Hkv, D, lengths, window) in enumerate(
                ((1, 256, 4, 2, 64, [100, 1, 250, 161], None), (2, 200, 4, 4, 128, [7, 300, 93], (50, None)))):
            g = torch.Generator().manual_seed(200 + n)
            S = rows * world
            q, k, v, dout = (randn(s, torch.bfloat16, dev, gen=g) for s in
                             ((B, S, H, D), (B, S, Hkv, D), (B, S, Hkv, D), (B, S, H, D)))
            cu, ids = _cu_and_ids(lengths, S)
            cu = cu.to(dev)
            sl = slice(rank * rows, (rank + 1) * rows)  # contiguous chunks
            ql, kl, vl = leaves(q[:, sl], k[:, sl], v[:, sl], device=dev)
            o, lse = dft.dist_attention(ql, kl, vl, group=mesh["cp"], cu_seqlens=cu, window=window, return_lse=True,
                                        deterministic=True, same_doc_ids=None)
            grads = torch.autograd.grad((o.float() * dout[:, sl]).sum() + lse.sum(), (ql, kl, vl))
            qs, ks, vs = leaves(q, k, v, device=dev)
            os_, lses = dft.attention(qs, ks, vs, causal=True, doc_ids=ids.to(dev).expand(B, S), window=window,
                                      return_lse=True)
            gs = torch.autograd.grad((os_.float() * dout).sum() + lses.sum(), (qs, ks, vs))
            what = f"config {n} rank {rank}"
            assert_close(o, os_[:, sl], 1.6e-2, what + " o")
            assert_close(lse, lses[:, :, sl], 1e-2, what + " lse")
            for name, a, b in zip(("dq", "dk", "dv"), grads, gs):
                assert_close(a, b[:, sl], 3e-2, f"{what} {name}")
            # deterministic=True: the same bits twice
            def dq():
                out = dft.dist_attention(ql, kl, vl, group=mesh["cp"], cu_seqlens=cu, window=window,
                                         deterministic=True)
                return torch.autograd.grad((out.float() * dout[:, sl]).sum(), (ql,))[0]
            assert torch.equal(dq(), dq()), what + ": deterministic dq differs between two calls"
        torch.cuda.synchronize()
        dft.destroy_comms()
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpus_cu_seqlens_lse_mesh_deterministic():
    import distflash
    if not distflash.has_nccl():
        pytest.skip("the library has no NCCL")
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(2, _free_port()), nprocs=2, join=True)
