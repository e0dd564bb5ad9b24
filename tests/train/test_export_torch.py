"""The safetensors export as a PyTorch user meets it (pytest; scripts/python-test runs it with the
cached venv when build/cli/distflash exists):

  1. `distflash train --data FILE ... --save CKPT --export OUT.safetensors` on a file of exactly two
     windows (so its one training window and its one held-out window are known), then
     `distflash export CKPT` in float32 and bf16;
  2. safetensors.torch.load_file loads both; every tensor equals the checkpoint's parameters
     (read from the checkpoint file itself, transposed back from torch's [out, in]) bitwise, and
     the bf16 file is their rounding;
  3. a plain PyTorch LLaMA written from the export's names and metadata alone (HF conventions:
     rotate_half RoPE, RMSNorm, SwiGLU, GQA) computes the held-out window's loss, which must match
     the trainer's final eval loss from its CSV log.

DISTFLASH_CLI names the binary (default: build/cli/distflash in the repository).
"""
import csv
import math
import os
import struct
import subprocess

import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
F = torch.nn.functional

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.environ.get("DISTFLASH_CLI", os.path.join(REPO, "build", "cli", "distflash"))
pytestmark = pytest.mark.skipif(not os.access(CLI, os.X_OK), reason=f"no distflash binary at {CLI}")

L, D, H, KV, FFN, T = 2, 32, 4, 2, 48, 256


def read_checkpoint(path):
    """The checkpoint format of train/checkpoint.h: fields, step and section 0 (the parameters)."""
    b = open(path, "rb").read()
    assert b[:8] == b"DFACKPT\n"
    version, nfields = struct.unpack_from("<II", b, 8)
    pos, fields = 16, {}
    for _ in range(nfields):
        n = b[pos]
        name = b[pos + 1:pos + 1 + n].decode()
        fields[name] = struct.unpack_from("<d", b, pos + 1 + n)[0]
        pos += 1 + n + 8
    step, nfloats, nsections = struct.unpack_from("<qQI", b, pos)
    pos += 20
    params = torch.frombuffer(bytearray(b[pos:pos + 4 * nfloats]), dtype=torch.float32)
    return fields, step, params


def flat_from_export(t):
    """The trainer's flat parameter array rebuilt from the exported tensors (layout: model.h)."""
    per = lambda name: [t[f"model.layers.{l}.{name}"] for l in range(L)]
    parts = [t["model.embed_tokens.weight"]]
    parts += per("input_layernorm.weight")
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"):
        parts += [w.t() for w in per(name + ".weight")]  # torch [out, in] -> ours [in, out]
    parts += per("post_attention_layernorm.weight")
    for name in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
        parts += [w.t() for w in per(name + ".weight")]
    parts += [t["model.norm.weight"], t["lm_head.weight"].t()]
    return torch.cat([p.contiguous().reshape(-1) for p in parts])


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_loss(t, meta, tokens, targets):
    """Mean next-byte cross entropy of a Hugging Face style LLaMA built from the export alone."""
    d, heads, kv = int(meta["hidden_size"]), int(meta["num_attention_heads"]), int(meta["num_key_value_heads"])
    layers, eps, theta = int(meta["num_hidden_layers"]), float(meta["rms_norm_eps"]), float(meta["rope_theta"])
    hd, n = d // heads, tokens.shape[0]
    t = {k: v.double() for k, v in t.items()}
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
    x = t["model.embed_tokens.weight"][tokens]
    for l in range(layers):
        p = lambda name: t[f"model.layers.{l}.{name}.weight"]
        h = rms_norm(x, p("input_layernorm"), eps)
        q = (h @ p("self_attn.q_proj").T).view(n, heads, hd).transpose(0, 1)
        k = (h @ p("self_attn.k_proj").T).view(n, kv, hd).transpose(0, 1)
        v = (h @ p("self_attn.v_proj").T).view(n, kv, hd).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + o.transpose(0, 1).reshape(n, d) @ p("self_attn.o_proj").T
        h = rms_norm(x, p("post_attention_layernorm"), eps)
        x = x + (F.silu(h @ p("mlp.gate_proj").T) * (h @ p("mlp.up_proj").T)) @ p("mlp.down_proj").T
    logits = rms_norm(x, t["model.norm.weight"], eps) @ t["lm_head.weight"].T
    return F.cross_entropy(logits, targets).item()


def test_export_loads_in_torch_and_reproduces_the_loss(tmp_path):
    g = torch.Generator().manual_seed(7)
    data = bytes(torch.randint(0, 256, (2 * (T + 1),), generator=g, dtype=torch.uint8).tolist())
    (tmp_path / "data.bin").write_bytes(data)
    ckpt, out, log = tmp_path / "m.ckpt", tmp_path / "m.safetensors", tmp_path / "log.csv"
    run = subprocess.run([CLI, "train", "--data", str(tmp_path / "data.bin"), "--layers", str(L), "--d-model", str(D),
                          "--heads", str(H), "--kv-heads", str(KV), "--ffn", str(FFN), "--context", str(T),
                          "--rope-base", "5000", "--steps", "4", "--warmup", "1", "--batch", "1", "--eval-seqs", "1",
                          "--threads", "1", "--save", str(ckpt), "--export", str(out), "--log", str(log), "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    conv = subprocess.run([CLI, "export", str(ckpt), str(tmp_path / "c.safetensors")], capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr
    conv = subprocess.run([CLI, "export", str(ckpt), str(tmp_path / "b.safetensors"), "--dtype", "bf16"],
                          capture_output=True, text=True)
    assert conv.returncode == 0, conv.stderr

    fields, step, params = read_checkpoint(ckpt)
    assert step == 4 and fields["d_model"] == D
    from safetensors import safe_open
    for name in ("m.safetensors", "c.safetensors"):
        t = st.load_file(str(tmp_path / name))
        assert t["model.layers.1.self_attn.k_proj.weight"].shape == (KV * D // H, D)
        assert t["model.layers.0.mlp.down_proj.weight"].shape == (D, FFN)
        assert t["lm_head.weight"].shape == (256, D) and t["model.embed_tokens.weight"].shape == (256, D)
        assert len(t) == 9 * L + 3
        assert torch.equal(flat_from_export(t), params), f"{name}: tensors differ from the checkpoint"
        with safe_open(str(tmp_path / name), "pt") as f:
            meta = f.metadata()
        assert meta["rope"].startswith("rotate_half") and meta["rope_theta"] == "5000"
    b = st.load_file(str(tmp_path / "b.safetensors"))
    assert all(v.dtype == torch.bfloat16 for v in b.values())
    assert torch.equal(flat_from_export(b), params.to(torch.bfloat16)), "bf16 export is not the rounding"

    # the held-out window is the file's second half (one training and one eval window)
    rows = list(csv.DictReader(open(log)))
    eval_loss = float(rows[-1]["eval_loss"])
    window = torch.tensor(list(data[T + 1:]), dtype=torch.long)
    t = st.load_file(str(out))
    ours = llama_loss(t, meta, window[:-1], window[1:])
    assert math.isclose(ours, eval_loss, rel_tol=2e-5), f"PyTorch forward {ours!r} vs distflash eval loss {eval_loss!r}"
