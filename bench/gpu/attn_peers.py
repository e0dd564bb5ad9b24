"""Single-GPU attention speed against the peers, in one process, interleaved.

Implementations (--impls, comma-separated; those that cannot be imported are skipped):
  distflash    the PyTorch binding (distflash.torch.attention + autograd), as a user calls it
  distflash-c  the C entry points (dfa_attn_fwd_cuda / dfa_attn_bwd_cuda) on preallocated
               tensors, no autograd: what the binding costs is the gap between these two
  fa4          FlashAttention-4 (flash_attn.cute; documents through flash_attn_varlen_func)
  cudnn, fa2   PyTorch SDPA's cuDNN and FlashAttention-2 backends (no masks)

Every case runs each implementation in turn, for --rounds rounds; a figure is the best round's
median of CUDA-event times after a warm-up. FLOPs count the visible query-key pairs exactly
(causal, window, documents): forward 2 * pairs * (d + dv) (two GEMMs), forward+backward
2 * pairs * (4 d + 3 dv) (3.5x the forward when dv = d). --features times softcap and sinks beside
the same shape without them, the MLA head dims 192/128 and head dim 256.
The SM clock (NVML, else nvidia-smi) is read right after each timed loop and printed beside the
figure, so a gap between two rows can be told apart from a clock change.

  python3 bench/gpu/attn_peers.py [--quick | --features] [--impls distflash,distflash-c,fa4,cudnn] [--out DIR]

Raw output (JSON and CSV) goes to --out (default build/bench/attn_peers); nothing is written into
the source tree. --data FILE also writes the run in bench/data's format (provenance lines, then
one row per case and implementation), for bench/report.py. bench/gpu/fa4/README.md says how FA4 gets onto a machine without a registry.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, ".."))
from timing import SmClock, median_ms  # noqa: E402


# --- timing -------------------------------------------------------------------------------------

def timed(fn, clock, warm=2, rep=7):
    """Median milliseconds of `rep` calls after `warm`, and the SM clock read just after them."""
    return median_ms(fn, warm, rep), clock.mhz()


# --- cases and FLOPs ----------------------------------------------------------------------------

def lognormal_docs(batch, seqlen, mean, seed=0):
    """Document lengths drawn log-normally (sigma 1) with the given mean, packed into each row:
    per-token ids [batch, seqlen] int32, cu_seqlens over the flattened batch, longest length."""
    g = torch.Generator().manual_seed(seed)
    sigma = 1.0
    mu = math.log(mean) - sigma * sigma / 2
    ids = torch.empty(batch, seqlen, dtype=torch.int32)
    cu, longest = [0], 0
    for b in range(batch):
        pos, doc = 0, 0
        while pos < seqlen:
            n = max(1, int(math.exp(mu + sigma * torch.randn(1, generator=g).item())))
            n = min(n, seqlen - pos)
            ids[b, pos:pos + n] = doc
            pos += n
            doc += 1
            cu.append(cu[-1] + n)
            longest = max(longest, n)
    return ids, torch.tensor(cu, dtype=torch.int32), longest


def visible_pairs(seqlen, causal, window=None, cu=None):
    if cu is not None:
        n = (cu[1:] - cu[:-1]).double()
        return float((n * (n + 1) / 2).sum()) if causal else float((n * n).sum())
    if window is not None:
        w = min(window + 1, seqlen)
        return float(seqlen * w - w * (w - 1) / 2)
    return seqlen * (seqlen + 1) / 2 if causal else float(seqlen * seqlen)


def feature_cases():
    """The version-3 features beside the same shape without them (the cost of softcap and sinks),
    the MLA head dims 192/128 and head dim 256."""
    base = dict(d=128, s=8192, b=4, h=32, hkv=32, causal=True)
    return [base, dict(base, softcap=30.0), dict(base, sinks=True),
            dict(d=192, dv=128, s=8192, b=4, h=16, hkv=16, causal=True),
            dict(d=192, dv=128, s=32768, b=1, h=16, hkv=16, causal=True),
            dict(d=256, s=8192, b=2, h=16, hkv=16, causal=True)]


def cases(quick):
    out = []
    for d in (128, 64):
        for s, b in ((2048, 16), (8192, 4), (32768, 1)):
            for causal in (True, False):
                out.append(dict(d=d, s=s, b=b, h=4096 // d, hkv=4096 // d, causal=causal))
    out.append(dict(d=128, s=8192, b=4, h=32, hkv=4, causal=True))
    out.append(dict(d=128, s=131072, b=1, h=16, hkv=16, causal=True, window=4096))
    out.append(dict(d=128, s=131072, b=1, h=16, hkv=16, causal=True, docs=4096))
    if quick:
        out = [c for c in out if c["causal"] and c["s"] in (8192, 32768, 131072)]
    return out


def tag(c):
    d = f"d{c['d']}/{c['dv']}" if c.get("dv") else f"d{c['d']}"
    t = f"{d} {c['s'] // 1024}k x{c['b']} {'causal' if c['causal'] else 'non-causal'}"
    if c["hkv"] != c["h"]:
        t += f" GQA {c['h']}/{c['hkv']}"
    if c.get("window"):
        t += f" window {c['window']}"
    if c.get("docs"):
        t += f" docs {c['docs']}"
    if c.get("softcap"):
        t += f" softcap {c['softcap']:g}"
    if c.get("sinks"):
        t += " sinks"
    return t


# --- implementations ----------------------------------------------------------------------------

SINKS = {}  # case tag -> the case's learnable sinks [H] (float32, requires grad)


def case_sinks(c):
    return SINKS[tag(c)]


def make_impls(names):
    impls = {}
    if "distflash" in names or "distflash-c" in names:
        try:
            import distflash.torch as dft
            from distflash import _ops
        except Exception as e:  # report, run the others
            print(f"distflash: import failed: {type(e).__name__}: {e}", flush=True)
            dft = None
        if dft is not None and "distflash" in names:
            def binding(q, k, v, c, docs):
                kw = {}
                if c.get("window"):
                    kw["window"] = (c["window"], None)
                if docs is not None:
                    kw["doc_ids"] = docs["ids"]
                if c.get("softcap"):
                    kw["softcap"] = c["softcap"]
                if c.get("sinks"):
                    kw["sinks"] = case_sinks(c)
                return dft.attention(q, k, v, causal=c["causal"], **kw)
            impls["distflash"] = ("autograd", binding)
        if dft is not None and "distflash-c" in names:
            impls["distflash-c"] = ("capi", make_capi(_ops))
    if "fa4" in names:
        try:
            from flash_attn.cute import flash_attn_func as fa4_func
            from flash_attn.cute import flash_attn_varlen_func as fa4_varlen

            def fa4(q, k, v, c, docs):
                if docs is not None:
                    b, s, h, d = q.shape
                    o = fa4_varlen(q.view(b * s, h, d), k.view(b * s, k.shape[2], d), v.view(b * s, v.shape[2], d),
                                   cu_seqlens_q=docs["cu"], cu_seqlens_k=docs["cu"], max_seqlen_q=docs["max"],
                                   max_seqlen_k=docs["max"], causal=c["causal"])
                    o = o[0] if isinstance(o, tuple) else o
                    return o.view(b, s, h, d)
                ws = (c["window"], 0) if c.get("window") else (None, None)
                kw = {}
                if c.get("softcap"):
                    kw["softcap"] = c["softcap"]
                if c.get("sinks"):
                    kw["learnable_sink"] = case_sinks(c)
                o = fa4_func(q, k, v, causal=c["causal"], window_size=ws, **kw)
                return o[0] if isinstance(o, tuple) else o
            impls["fa4"] = ("autograd", fa4)
        except Exception as e:
            print(f"fa4: import failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def f(q, k, v, c, docs):
            if c.get("window") or docs is not None or c.get("softcap") or c.get("sinks"):
                raise NotImplementedError
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=c["causal"], enable_gqa=q.shape[2] != k.shape[2])
            return o.transpose(1, 2)
        return f
    if "cudnn" in names:
        impls["cudnn"] = ("autograd", sdpa(SDPBackend.CUDNN_ATTENTION))
    if "fa2" in names:
        impls["fa2"] = ("autograd", sdpa(SDPBackend.FLASH_ATTENTION))
    return impls


def make_capi(_ops):
    """The C entry points on preallocated outputs: one descriptor per case, no autograd."""
    cache = {}

    def prepare(q, k, v, c, docs):
        if c.get("softcap") or c.get("sinks") or c.get("dv"):
            raise NotImplementedError  # the binding's row covers them
        key = id(q)
        if key not in cache:
            cache.clear()
            kw = {}
            if docs is not None:
                kw.update(q_doc=docs["ids"], k_doc=docs["ids"])
            if c.get("window"):
                kw.update(window_left=c["window"], window_right=-1)
            d = _ops.desc_ref(q, k, c["causal"], 1.0 / math.sqrt(q.shape[-1]), 0, 0, **kw)
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device=q.device, dtype=torch.float32)
            cache[key] = dict(d=d, o=o, lse=lse, dq=torch.empty_like(q), dk=torch.empty_like(k),
                              dv=torch.empty_like(v))
        return cache[key]

    def fwd(q, k, v, c, docs):
        t = prepare(q, k, v, c, docs)
        _ops.fwd_into(t["d"], q, k, v, t["o"], t["lse"])
        return t["o"]

    def fwdbwd(q, k, v, c, docs, do):
        t = prepare(q, k, v, c, docs)
        _ops.fwd_into(t["d"], q, k, v, t["o"], t["lse"])
        _ops.bwd_into(t["d"], q, k, v, t["o"], t["lse"], do, t["dq"], t["dk"], t["dv"])

    fwd.fwdbwd = fwdbwd
    return fwd


# --- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impls", default="distflash,distflash-c,fa4,cudnn")
    ap.add_argument("--quick", action="store_true", help="causal cases at 8k, 32k and 128k only")
    ap.add_argument("--features", action="store_true",
                    help="softcap, sinks, MLA 192/128 and head dim 256 (beside the same shape without them)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="", help="substring filter on the case names")
    ap.add_argument("--out", default=os.path.join("build", "bench", "attn_peers"))
    ap.add_argument("--data", default="", help="also write the run as a bench/data CSV to this path")
    ap.add_argument("--commit", default="", help="the commit measured, for --data (default: git rev-parse)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    names = a.impls.split(",")
    impls = make_impls(names)
    clock = SmClock()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.cuda.get_device_name()
    print(f"# {dev}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
          f"impls {','.join(impls)}", flush=True)
    rows = []
    for c in (feature_cases() if a.features else cases(a.quick)):
        if a.only and a.only not in tag(c):
            continue
        torch.manual_seed(0)
        q = torch.randn(c["b"], c["s"], c["h"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(c["b"], c["s"], c["hkv"], c["d"], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dv = c.get("dv", c["d"])
        v = torch.randn(c["b"], c["s"], c["hkv"], dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        do = torch.randn(c["b"], c["s"], c["h"], dv, device="cuda", dtype=torch.bfloat16)
        if c.get("sinks"):
            SINKS[tag(c)] = torch.randn(c["h"], device="cuda", dtype=torch.float32, requires_grad=True)
        docs, cu = None, None
        if c.get("docs"):
            ids, cu, longest = lognormal_docs(c["b"], c["s"], c["docs"])
            docs = dict(ids=ids.cuda(), cu=cu.cuda(), max=longest)
        # two GEMMs forward (q.k over d, p.v over dv), five backward (three over d, two over dv)
        pairs = visible_pairs(c["s"], c["causal"], c.get("window"), cu) * c["b"] * c["h"]
        flop_fwd = 2.0 * pairs * (c["d"] + dv)
        flop_fwdbwd = 2.0 * pairs * (4 * c["d"] + 3 * dv)
        grads = (q, k, v) + ((SINKS[tag(c)],) if c.get("sinks") else ())
        best = {}
        ref = None
        for rnd in range(a.rounds):
            for name, (kind, fn) in impls.items():
                try:
                    f = lambda: fn(q, k, v, c, docs)
                    if rnd == 0:
                        o = f()
                        if ref is None:
                            ref = o.detach().float()
                        err = (o.detach().float() - ref).abs().max().item()
                        if not math.isfinite(err) or err > 0.05:
                            print(f"  {name}: output differs from {next(iter(impls))} by {err:.3g}", flush=True)
                    if kind == "capi":
                        fb = lambda: fn.fwdbwd(q, k, v, c, docs, do)
                    else:
                        def fb():
                            torch.autograd.grad(f(), grads, do)
                    ms_f, mhz_f = timed(f, clock)
                    ms_b, mhz_b = timed(fb, clock)
                    r = best.setdefault(name, dict(fwd=0.0, fwdbwd=0.0, mhz_fwd=None, mhz_fwdbwd=None))
                    tf, tb = flop_fwd / ms_f / 1e9, flop_fwdbwd / ms_b / 1e9
                    if tf > r["fwd"]:
                        r.update(fwd=tf, mhz_fwd=mhz_f)
                    if tb > r["fwdbwd"]:
                        r.update(fwdbwd=tb, mhz_fwdbwd=mhz_b)
                except NotImplementedError:
                    pass
                except Exception as e:
                    if rnd == 0:
                        print(f"  {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        line = [f"{tag(c):34s}"]
        for name, r in best.items():
            mask = "window" if c.get("window") else "docs" if c.get("docs") else "none"
            rows.append(dict(case=tag(c), head_dim=c["d"], head_dim_v=dv, seqlen=c["s"], batch=c["b"], heads=c["h"],
                             kv_heads=c["hkv"], causal=int(c["causal"]), mask=mask, impl=name,
                             fwd_tflops=round(r["fwd"], 1), fwdbwd_tflops=round(r["fwdbwd"], 1),
                             sm_mhz_fwd=r["mhz_fwd"], sm_mhz_fwdbwd=r["mhz_fwdbwd"], device=dev))
            line.append(f"{name} {r['fwd']:5.0f}/{r['fwdbwd']:5.0f} @{r['mhz_fwd']}/{r['mhz_fwdbwd']}MHz")
        print("  ".join(line), flush=True)
        del q, k, v, do, ref
        torch.cuda.empty_cache()
        save(a, rows, dev)  # after every case, so a run cut short keeps what it measured
    summary(rows)


def save(a, rows, dev):
    with open(os.path.join(a.out, "attn_peers.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    with open(os.path.join(a.out, "attn_peers.csv"), "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["case"])
        w.writeheader()
        w.writerows(rows)
    if a.data:
        write_data(a, rows, dev)


DATA_NAMES = {"fa4": "flash-attn-4"}  # bench/report.py's names of the peers
DATA_COLUMNS = ["case", "head_dim", "head_dim_v", "seqlen", "batch", "heads", "kv_heads", "causal", "mask", "impl",
                "fwd_tflops", "fwdbwd_tflops", "sm_mhz_fwd", "sm_mhz_fwdbwd"]


def write_data(a, rows, dev):
    """The run in bench/data's format: '# key: value' provenance, then the rows."""
    import datetime
    commit = a.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=HERE).stdout.strip()
        except Exception:
            commit = ""
    peers = []
    try:
        from importlib.metadata import version
        peers.append(f"flash-attn-4 {version('flash-attn-4')} (flash_attn.cute)")
    except Exception:
        pass
    peers.append("cuDNN through PyTorch SDPA")
    args = " ".join(x for x in ("--quick" if a.quick else "", "--features" if a.features else "", f"--only '{a.only}'" if a.only else "",
                                f"--impls {a.impls}") if x)
    title = "One GPU: softcap, sinks and head dims 192/128 and 256" if a.features else \
        "One GPU: distflash beside FlashAttention-4 and cuDNN"
    meta = [("title", title),
            ("date", datetime.date.today().isoformat()),
            ("machine", f"{dev} (one GPU), PyTorch {torch.__version__}, CUDA {torch.version.cuda}, "
                        f"cuDNN {torch.backends.cudnn.version()}"),
            ("commit", commit or "unknown"),
            ("peers", ", ".join(peers) + ", in the same process, interleaved"),
            ("command", f"python3 bench/gpu/attn_peers.py {args}".strip()),
            ("units", f"TFLOP/s, bf16, visible-pair FLOPs; best of {a.rounds} interleaved rounds of medians of 7")]
    os.makedirs(os.path.dirname(os.path.abspath(a.data)), exist_ok=True)
    with open(a.data, "w", newline="") as fh:
        for k, v in meta:
            fh.write(f"# {k}: {v}\n")
        w = csv.DictWriter(fh, fieldnames=DATA_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(dict(r, impl=DATA_NAMES.get(r["impl"], r["impl"])))


def summary(rows):
    """distflash against FA4 (and the binding against the C API) per case, forward / fwd+bwd."""
    by = {}
    for r in rows:
        by.setdefault(r["case"], {})[r["impl"]] = r
    print("\n# ratios: distflash/fa4 (fwd, fwd+bwd); binding/C API (fwd, fwd+bwd)")
    for case, m in by.items():
        parts = [f"{case:34s}"]
        ours = m.get("distflash")
        if ours and "fa4" in m and m["fa4"]["fwd_tflops"] > 0:
            parts.append(f"vs fa4 {ours['fwd_tflops'] / m['fa4']['fwd_tflops']:.3f} "
                         f"{ours['fwdbwd_tflops'] / m['fa4']['fwdbwd_tflops']:.3f}")
        if ours and "distflash-c" in m and m["distflash-c"]["fwd_tflops"] > 0:
            parts.append(f"binding/C {ours['fwd_tflops'] / m['distflash-c']['fwd_tflops']:.3f} "
                         f"{ours['fwdbwd_tflops'] / m['distflash-c']['fwdbwd_tflops']:.3f}")
        print("  ".join(parts))


if __name__ == "__main__":
    main()
