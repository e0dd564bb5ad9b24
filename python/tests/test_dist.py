"""distflash.torch.dist_attention on two GPUs (two processes, NCCL) against single-device
attention on the gathered sequence: forward o and backward dq/dk/dv, both schedules, GQA,
bf16/fp16; with documents (doc_ids) and sliding windows against attention() with the same
mask on the whole sequence and a float64 masked softmax; bad ids on one rank fail every rank.
Skipped without two GPUs.

On the GPU machine (library built with CUDA and NCCL):
    PYTHONPATH=python NCCL_NVLS_ENABLE=0 python3 -m pytest -q python/tests/test_dist.py
(or python/tests/gpu_masks.sh, which builds the library first and adds the 1-GPU mask tests)
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


# With masks: (schedule, causal, batch, local_rows, heads, kv_heads, head_dim, dtype, docs, window).
# docs: None, "short" (documents of 1..40 tokens: many per rank, some across the boundary),
# "long" (documents longer than a rank's rows: they span ranks), "long1d" (the same, as [n] ids
# for every batch row).
MASK_CONFIGS = [
    ("balanced", True, 2, 300, 4, 2, 64, torch.bfloat16, "short", None),
    ("balanced", True, 1, 512, 8, 8, 128, torch.bfloat16, "long", None),
    ("ring", True, 1, 256, 4, 1, 64, torch.float16, None, (100, None)),      # window < a chunk
    ("balanced", True, 1, 384, 4, 4, 128, torch.bfloat16, None, (700, 0)),  # window > a chunk
    ("balanced", False, 2, 200, 4, 2, 64, torch.float16, "short", (30, 30)),
    ("ring", True, 2, 256, 2, 2, 64, torch.bfloat16, "long1d", (64, None)),
]


def _worker(rank, world, port, which="plain"):
    import torch.distributed as dist

    import distflash.torch as dft
    from distflash import _dist
    from conftest import assert_close, leaves, randn, ref_attention
    from test_masks import _docs, _reference, _visible

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    configs = CONFIGS if which == "plain" else MASK_CONFIGS
    try:
        for n, config in enumerate(configs):
            schedule, causal, B, rows, H, Hkv, D, dtype = config[:8]
            docs, window = config[8:] if which == "masks" else (None, None)
            g = torch.Generator().manual_seed(100 + n)  # the same full sequence on every rank
            S = rows * world
            q, k, v, dout = (randn(shape, dtype, dev, gen=g) for shape in
                             ((B, S, H, D), (B, S, Hkv, D), (B, S, Hkv, D), (B, S, H, D)))
            pos = dft.dist_position(schedule, rank, world, rows).to(dev)
            # the whole sequence's ids (CPU), and this rank's: full_ids[:, dist_position(...)]
            full_ids = None if docs is None else _docs(B, S, g, max_len=40 if docs == "short" else 2 * rows)
            if docs == "long1d":
                full_ids = full_ids[:1].expand(B, S)
            local_ids = None
            if full_ids is not None:
                local_ids = full_ids.to(dev)[:, pos]
                if docs == "long1d":
                    local_ids = local_ids[0]  # [n]: every batch row's
            ql, kl, vl = leaves(q[:, pos], k[:, pos], v[:, pos], device=dev)
            o = dft.dist_attention(ql, kl, vl, schedule=schedule, causal=causal, doc_ids=local_ids, window=window)
            grads = torch.autograd.grad(o, (ql, kl, vl), dout[:, pos].contiguous())
            if local_ids is not None:  # the same ids again under the promise: the same result
                ql2, kl2, vl2 = leaves(q[:, pos], k[:, pos], v[:, pos], device=dev)
                o2 = dft.dist_attention(ql2, kl2, vl2, schedule=schedule, causal=causal, doc_ids=local_ids,
                                        window=window, same_doc_ids=True)
                grads2 = torch.autograd.grad(o2, (ql2, kl2, vl2), dout[:, pos].contiguous())
                # o, dk, dv bit for bit; dq sums with float32 atomics (any order)
                for name, a, b in zip(("o", "dk", "dv"), (o2, grads2[1], grads2[2]), (o, grads[1], grads[2])):
                    assert torch.equal(a, b), f"same_doc_ids=True changed {name}"
                torch.testing.assert_close(grads2[0], grads[0], rtol=1e-2, atol=1e-2)

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
            os_ = dft.attention(qs, ks, vs, causal=causal, doc_ids=None if full_ids is None else full_ids.to(dev),
                                window=window)
            single = [os_, *torch.autograd.grad(os_, (qs, ks, vs), dout)]
            q2, k2, v2 = leaves(q.double(), k.double(), v.double(), device=dev)
            if which == "plain":
                o_ref, _ = ref_attention(q2, k2, v2, causal=causal)
            else:  # every row sees itself, so no row is empty
                o_ref, _ = _reference(q2, k2, v2, _visible(B, S, S, causal, 0, 0, full_ids, full_ids, window).to(dev))
            refs = [o_ref, *torch.autograd.grad(o_ref, (q2, k2, v2), dout.double())]
            tol = 1.6e-2 if dtype == torch.bfloat16 else 2e-3
            for name, a, b, r in zip(("o", "dq", "dk", "dv"), got, single, refs):
                what = f"{which} config {n} {schedule} causal={causal} docs={docs} window={window} rank {rank}: {name}"
                assert_close(a, r, tol, what + " vs float64")
                assert_close(a, b, tol, what + " vs single-device distflash")
        if which == "masks":
            # masks the ranks disagree on fail the call on every rank (the library's message; the
            # other ranks name the rank that failed), and the communicator works afterwards
            x = torch.randn(1, 64, 2, 64, dtype=torch.bfloat16, device=dev)
            good = torch.zeros(64, dtype=torch.int32, device=dev)
            bad = good.clone()
            bad[40:] = -1
            with pytest.raises(dft.DistflashInvalidArgument, match="d->q_doc decreases") as e:
                dft.dist_attention(x, x, x, doc_ids=bad if rank == 1 else good)
            assert rank == 1 or "rank 1 failed" in str(e.value), str(e.value)
            with pytest.raises(dft.DistflashInvalidArgument, match=r"q_doc \(set or NULL\)"):
                dft.dist_attention(x, x, x, doc_ids=good if rank == 1 else None)
            with pytest.raises(dft.DistflashInvalidArgument, match="window_left"):
                dft.dist_attention(x, x, x, window=(8 + rank, None))
            ok = dft.dist_attention(x, x, x, doc_ids=good, window=(8, None))
            ref = dft.attention(x, x, x, causal=True, window=(8, None))  # one document: rank 0's rows alone
            if rank == 0:
                assert_close(ok, ref, 1.6e-2, "after the failures, rank 0")
            assert torch.isfinite(ok.float()).all()
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


def test_two_gpus_masks_against_single_device():
    import torch.multiprocessing as mp
    mp.spawn(_worker, args=(2, _free_port(), "masks"), nprocs=2, join=True)
