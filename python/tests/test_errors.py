"""Bad inputs raise clear Python exceptions (never a crash): the binding's own checks
(TypeError/ValueError) and the library's (DistflashError with the status name and
dfa_last_error()'s message naming the argument)."""
import pytest
import torch

import distflash
import distflash.torch as dft
from distflash import _capi


def qkv(B=1, Sq=8, Sk=8, H=2, Hkv=2, D=16, dtype=torch.float32, device="cpu"):
    return (torch.randn(B, Sq, H, D, dtype=dtype, device=device), torch.randn(B, Sk, Hkv, D, dtype=dtype, device=device),
            torch.randn(B, Sk, Hkv, D, dtype=dtype, device=device))


def test_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="k must be a torch.Tensor"):
        dft.attention(q, k.numpy(), v)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_wrong_rank(which):
    t = list(qkv())
    t[which] = t[which][0]  # 3 dimensions
    with pytest.raises(ValueError, match=r"must have 4 dimensions \[batch, seqlen, heads, head_dim\]"):
        dft.attention(*t)


def test_mixed_devices():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="one device"):
        dft.attention(q, k.to("meta"), v)


def test_unsupported_device():
    q, k, v = (t.to("meta") for t in qkv())
    with pytest.raises(ValueError, match="CPU or CUDA tensors only"):
        dft.attention(q, k, v)


def test_dtype_mismatch():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="one dtype"):
        dft.attention(q, k.to(torch.bfloat16), v)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32])
def test_unsupported_dtype(dtype):
    q, k, v = (t.to(dtype) for t in qkv())
    with pytest.raises(TypeError, match="not supported"):
        dft.attention(q, k, v)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_non_contiguous(which):
    t = list(qkv(Sq=8, Sk=8, H=2, Hkv=2))
    t[which] = t[which].transpose(1, 2).contiguous().transpose(1, 2)  # same shape, [B, H, S, D] memory
    with pytest.raises(ValueError, match="must be contiguous"):
        dft.attention(*t)


def test_shape_mismatches():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"k and v must have one \[batch, seqlen_k, kv_heads\]"):
        dft.attention(q, k, v[:, :4].contiguous())
    with pytest.raises(ValueError, match="one batch size"):
        dft.attention(q, *qkv(B=2)[1:])
    with pytest.raises(ValueError, match="one head_dim"):
        dft.attention(q, *qkv(D=32)[1:])
    with pytest.raises(ValueError, match="num_kv_heads"):
        dft.attention(q, *qkv(Hkv=0)[1:])


def test_bad_scalars():
    q, k, v = qkv()
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="softmax_scale"):
            dft.attention(q, k, v, softmax_scale=bad)
    with pytest.raises(TypeError, match="q_start must be an int"):
        dft.attention(q, k, v, causal=True, q_start=1.5)
    with pytest.raises(ValueError, match="out of range"):
        dft.attention(q, k, v, causal=True, k_start=2**62)


def test_library_errors_carry_status_and_message():
    """Checks the library makes: head counts that do not divide, an unsupported head_dim."""
    q, k, v = qkv(H=3, Hkv=2)
    with pytest.raises(distflash.DistflashError) as e:
        dft.attention(q, k, v)
    assert isinstance(e.value, ValueError)  # DFA_ERR_INVALID_ARGUMENT is also a ValueError
    assert e.value.status == _capi.DFA_ERR_INVALID_ARGUMENT
    assert e.value.status_name == "DFA_ERR_INVALID_ARGUMENT"
    assert "num_heads" in e.value.message and "DFA_ERR_INVALID_ARGUMENT" in str(e.value)

    q, k, v = qkv(D=12)
    with pytest.raises(distflash.DistflashUnsupported) as e:
        dft.attention(q, k, v)
    assert e.value.status_name == "DFA_ERR_UNSUPPORTED" and "head_dim" in e.value.message
    assert isinstance(e.value, RuntimeError)


def test_backward_errors_surface_too():
    q, k, v = (t.requires_grad_(True) for t in qkv())
    o = dft.attention(q, k, v)
    with pytest.raises(RuntimeError):  # autograd's own check: gradient of the wrong shape
        o.backward(torch.ones(1, 2, 3))


def test_direct_op_call_is_checked():
    """The custom op checks its inputs too (a caller may use torch.ops.distflash directly, and a
    compiler may hand it any layout: a non-contiguous input is copied there, not refused)."""
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4 dimensions"):
        torch.ops.distflash.attn_fwd(q[0], k, v, False, 0.25, 0, 0)
    with pytest.raises(TypeError, match="one dtype"):
        torch.ops.distflash.attn_fwd(q, k.half(), v, False, 0.25, 0, 0)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not qt.is_contiguous()
    o, _ = torch.ops.distflash.attn_fwd(qt, k, v, False, 0.25, 0, 0)
    assert torch.equal(o, torch.ops.distflash.attn_fwd(q, k, v, False, 0.25, 0, 0)[0])


def test_dist_position_bad_arguments():
    with pytest.raises(ValueError, match="schedule"):
        dft.dist_position("zigzag", 0, 2, 8)
    with pytest.raises(ValueError, match="rank"):
        dft.dist_position("balanced", 2, 2, 8)
    with pytest.raises(ValueError, match="out of range"):
        dft.dist_position("balanced", 0, 2, 8, 8)
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        dft.dist_position("ring", 0, 2, 8, torch.tensor([0, 9]))
    with pytest.raises(TypeError, match="integers"):
        dft.dist_position("ring", 0, 2, 8, torch.tensor([0.5]))


def test_dist_attention_checks_before_anything_collective():
    from distflash import _dist
    q, k, v = qkv()
    with pytest.raises(ValueError, match="CUDA tensors"):
        _dist.check_local(q, k, v, "distflash.torch.dist_attention")
    with pytest.raises(ValueError, match="schedule"):
        dft.dist_attention(q, k, v, schedule="zigzag")


@pytest.mark.skipif(distflash.has_nccl(), reason="this library has the NCCL calls")
def test_missing_nccl_is_a_clear_error():
    with pytest.raises(distflash.DistflashLibraryError, match="built without nccl.*DFA_WITH_NCCL"):
        _capi.fn("dfa_dist_attn_fwd_cuda")


@pytest.mark.skipif(distflash.has_cuda(), reason="this library has the CUDA calls")
def test_missing_cuda_is_a_clear_error():
    with pytest.raises(distflash.DistflashLibraryError, match="built without cuda"):
        _capi.fn("dfa_attn_fwd_cuda")
