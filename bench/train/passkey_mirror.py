#!/usr/bin/env python3
"""PyTorch mirror of the C trainer, for choosing a model and training configuration that
learns passkey retrieval within a few million tokens.

The model is the one the C code implements: byte embedding, L pre-norm blocks
(RMSNorm -> attention with rotate-half RoPE and optional GQA -> residual; RMSNorm -> SwiGLU
MLP -> residual), final RMSNorm, untied head. Init N(0, std) for every matrix, Wo and W2
scaled by 1/sqrt(2L); RMSNorm gains 1. Loss sum(w * CE) / sum(w). AdamW (0.9, 0.95, 1e-8,
decay on matrices only), global-norm clip 1.0, linear warm-up then cosine to lr_max / 10.

The data come from the C generator itself (train/data.c built as a shared object and
called through ctypes), so the mirror trains on exactly the bytes the C trainer will see:
train sequence index = step * batch + b, eval sequences are eval-split indices 0..n-1.

The defaults are the best configuration found within a 3M-token budget. --cflags passes -D
flags to the build of data.c, for generators that take compile-time knobs.

Examples:
  python3 bench/train/passkey_mirror.py                                    # the best config, CPU, 1 thread
  python3 bench/train/passkey_mirror.py --time-steps 5 --context 2048      # seconds per step only
  python3 bench/train/passkey_sweep.py CONFIGS out.jsonl 16 --device cuda  # many at once on a GPU
"""
import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


# ---------------------------------------------------------------- data (the C generator)

class DfaData(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("context", ctypes.c_int), ("seed", ctypes.c_uint64),
                ("answer_weight", ctypes.c_float), ("file", ctypes.c_void_p), ("file_len", ctypes.c_size_t)]


def load_generator(src_dir, lib_path, cflags):
    """Builds data.c into a shared object (cflags: -D knobs of the filler design) and loads it."""
    srcs = [os.path.join(src_dir, "train", f) for f in ("data.c", "text.c")]
    subprocess.run(["cc", "-O2", "-std=c11", "-shared", "-fPIC", "-I" + src_dir] + cflags.split() +
                   srcs + ["-lm", "-o", lib_path], check=True)
    lib = ctypes.CDLL(lib_path)
    lib.dft_data_passkey.argtypes = [ctypes.POINTER(DfaData), ctypes.c_int, ctypes.c_uint64, ctypes.c_float,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.dft_data_passkey.restype = ctypes.c_int
    lib.dft_data_sample.argtypes = [ctypes.POINTER(DfaData), ctypes.c_int, ctypes.c_uint64, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.dft_data_sample.restype = None
    return lib


class Passkey:
    def __init__(self, lib, context, seed, answer_weight):
        self.lib, self.context = lib, context
        self.d = DfaData()
        err = ctypes.create_string_buffer(256)
        if lib.dft_data_passkey(ctypes.byref(self.d), context, seed, answer_weight, err, 256) != 0:
            raise ValueError(err.value.decode())

    def batch(self, split, first_index, n):
        """(inputs [n, T] int64, targets [n, T] int64, weights [n, T] float32, answer_pos)."""
        T = self.context
        by = torch.empty((n, T + 1), dtype=torch.uint8)
        w = torch.empty((n, T), dtype=torch.float32)
        ans = ctypes.c_int()
        for b in range(n):
            self.lib.dft_data_sample(ctypes.byref(self.d), split, first_index + b, by[b].data_ptr(),
                                      w[b].data_ptr(), ctypes.byref(ans))
        by = by.long()
        return by[:, :-1].contiguous(), by[:, 1:].contiguous(), w, ans.value


# ---------------------------------------------------------------- model

class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.gain


def rope_tables(T, hd, base, device):
    i = torch.arange(hd // 2, dtype=torch.float64, device=device)
    theta = base ** (-2.0 * i / hd)
    ang = torch.arange(T, dtype=torch.float64, device=device)[:, None] * theta[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rope(x, cos, sin):  # x [B, H, T, hd]; rotate-half: pairs (i, i + hd/2)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, H, KV, hd = c.d_model, c.heads, c.kv_heads, c.d_model // c.heads
        self.H, self.KV, self.hd = H, KV, hd
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq = torch.nn.Parameter(torch.empty(d, H * hd))
        self.wk = torch.nn.Parameter(torch.empty(d, KV * hd))
        self.wv = torch.nn.Parameter(torch.empty(d, KV * hd))
        self.wo = torch.nn.Parameter(torch.empty(H * hd, d))
        self.w1 = torch.nn.Parameter(torch.empty(d, c.ffn))
        self.w3 = torch.nn.Parameter(torch.empty(d, c.ffn))
        self.w2 = torch.nn.Parameter(torch.empty(c.ffn, d))
        scaled = c.init_std / math.sqrt(2 * c.layers)
        for p in (self.wq, self.wk, self.wv, self.w1, self.w3):
            torch.nn.init.normal_(p, 0.0, c.init_std)
        for p in (self.wo, self.w2):
            torch.nn.init.normal_(p, 0.0, scaled)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.n1(x)
        q = (h @ self.wq).view(B, T, self.H, self.hd).transpose(1, 2)
        k = (h @ self.wk).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = (h @ self.wv).view(B, T, self.KV, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.KV != self.H:
            k = k.repeat_interleave(self.H // self.KV, dim=1)
            v = v.repeat_interleave(self.H // self.KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/sqrt(hd)
        x = x + a.transpose(1, 2).reshape(B, T, -1) @ self.wo
        h = self.n2(x)
        return x + (F.silu(h @ self.w1) * (h @ self.w3)) @ self.w2


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = torch.nn.Parameter(torch.empty(256, c.d_model))
        torch.nn.init.normal_(self.wte, 0.0, c.init_std)
        self.blocks = torch.nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.d_model)
        self.head = torch.nn.Parameter(torch.empty(c.d_model, 256))
        torch.nn.init.normal_(self.head, 0.0, c.init_std)
        self.rope = None

    def forward(self, idx):
        T = idx.shape[1]
        if self.rope is None or self.rope[0].shape[0] < T:
            self.rope = rope_tables(T, self.c.d_model // self.c.heads, self.c.rope_base, idx.device)
        cos, sin = self.rope[0][:T], self.rope[1][:T]
        x = self.wte[idx]
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.norm(x) @ self.head


# ---------------------------------------------------------------- training

def lr_at(c, step, total):
    lr_min = c.lr / 10
    if step < c.warmup:
        return c.lr * (step + 1) / c.warmup
    prog = min(1.0, max(0.0, (step - c.warmup) / max(1, total - c.warmup)))
    return lr_min + (c.lr - lr_min) * (1 + math.cos(math.pi * prog)) / 2


@torch.no_grad()
def evaluate(model, data, n, dev, chunk):
    exact = digits = 0
    loss_sum = 0.0
    for first in range(0, n, chunk):
        m = min(chunk, n - first)
        x, y, w, a = data.batch(1, first, m)
        x, y = x.to(dev), y.to(dev)
        logits = model(x)[:, a:a + 5]
        pred = logits.argmax(-1)
        ok = pred == y[:, a:a + 5]
        exact += ok.all(-1).sum().item()
        digits += ok.sum().item()
        loss_sum += F.cross_entropy(logits.reshape(-1, 256), y[:, a:a + 5].reshape(-1), reduction="sum").item()
    return exact / n, digits / (5 * n), loss_sum / (5 * n)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0, help="0: same as heads")
    p.add_argument("--ffn", type=int, default=0, help="0: 4 * d_model")
    p.add_argument("--rope-base", type=float, default=10000.0)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=float, default=3e6, help="training tokens (positions), sets the step count")
    p.add_argument("--answer-weight", type=float, default=1000.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument("--eval-n", type=int, default=128)
    p.add_argument("--eval-final-n", type=int, default=512)
    p.add_argument("--eval-every", type=float, default=2.5e5, help="tokens between evaluations")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--src", default=REPO, help="folder holding train/data.c and train/data.h")
    p.add_argument("--lib", default="", help="shared object to build and load (default: /tmp/dfa_data_PID.so)")
    p.add_argument("--cflags", default="", help="-D flags for building data.c")
    p.add_argument("--time-steps", type=int, default=0, help="only time this many steps (after one warm-up step)")
    p.add_argument("--tag", default="")
    p.add_argument("--json", default="", help="append the result as one JSON line here")
    c = p.parse_args()
    c.kv_heads = c.kv_heads or c.heads
    c.ffn = c.ffn or 4 * c.d_model

    torch.set_num_threads(c.threads)  # the machine's other core belongs to someone else
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(c.seed)
    dev = torch.device(c.device)

    lib = load_generator(c.src, c.lib or os.path.join("/tmp", "dfa_data_%d.so" % os.getpid()), c.cflags)
    data = Passkey(lib, c.context, c.data_seed, c.answer_weight)
    model = Model(c).to(dev)
    nparams = sum(q.numel() for q in model.parameters())
    decay = [q for q in model.parameters() if q.dim() == 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=c.lr, betas=(0.9, 0.95), eps=1e-8)
    tokens_per_step = c.batch * c.context
    total = max(1, int(round(c.tokens / tokens_per_step)))
    eval_every = max(1, int(round(c.eval_every / tokens_per_step)))
    chunk = 16 if dev.type == "cuda" else 4

    def step_fn(step):
        x, y, w, _ = data.batch(0, step * c.batch, c.batch)
        x, y, w = x.to(dev), y.to(dev), w.to(dev)
        for g in opt.param_groups:
            g["lr"] = lr_at(c, step, total)
        logits = model(x)
        ce = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item(), gn.item()

    if c.time_steps:
        step_fn(0)
        t0 = time.perf_counter()
        for s in range(1, c.time_steps + 1):
            step_fn(s)
        dt = (time.perf_counter() - t0) / c.time_steps
        print(json.dumps({"time_per_step_s": dt, "tokens_per_step": tokens_per_step, "params": nparams,
                          "threads": c.threads, "device": c.device, "config": vars(c)}))
        return

    curve = []
    t0 = time.perf_counter()
    losses = []
    for step in range(total):
        loss, gn = step_fn(step)
        losses.append(loss)
        if (step + 1) % eval_every == 0 or step + 1 == total:
            n = c.eval_final_n if step + 1 == total else c.eval_n
            acc, dacc, aloss = evaluate(model, data, n, dev, chunk)
            rec = {"step": step + 1, "tokens": (step + 1) * tokens_per_step, "loss": sum(losses) / len(losses),
                   "exact": acc, "digit": dacc, "answer_ce": aloss, "gnorm": gn, "n": n,
                   "s": time.perf_counter() - t0}
            losses = []
            curve.append(rec)
            print(json.dumps(rec), flush=True)
            if not math.isfinite(loss):
                break
    result = {"tag": c.tag, "config": vars(c), "params": nparams, "steps": total, "curve": curve,
              "final_exact": curve[-1]["exact"], "best_exact": max(r["exact"] for r in curve),
              "wall_s": time.perf_counter() - t0}
    print(json.dumps({"tag": c.tag, "final_exact": result["final_exact"], "best_exact": result["best_exact"]}))
    if c.json:
        with open(c.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    sys.exit(main())
