"""Joins the JSON of `distflash bench --device cuda --json` and of peers.py into the
markdown table of BENCHMARKS.md:  python3 bench/gpu/table.py ours.json peers.json"""
import json, sys

ours = json.load(open(sys.argv[1]))
peers = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else []
# rows of older JSON files have no kv_heads / block: MHA, square
key = lambda r: (r["d"], r["s"], bool(r["causal"]), r.get("kv_heads", r["h"]), r.get("block", "square"))
peer = {(r["backend"],) + key(r): r for r in peers}
print("| d | S | b x h | kv | block | causal | distflash fwd | fwd+bwd | peak MiB | FA2 (SDPA flash) fwd | fwd+bwd | cuDNN fwd | fwd+bwd |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in ours:
    f = peer.get(("flash",) + key(r), {}); c = peer.get(("cudnn",) + key(r), {})
    g = lambda x, k: f"{x[k]:.0f}" if k in x else "-"
    print(f"| {r['d']} | {r['s']} | {r['b']} x {r['h']} | {r.get('kv_heads', r['h'])} | {r.get('block', 'square')} | "
          f"{'yes' if r['causal'] else 'no'} | {r['fwd_tflops']:.0f} | "
          f"{r['fwdbwd_tflops']:.0f} | {r['peak_mib']:.0f} | {g(f, 'fwd_tflops')} | {g(f, 'fwdbwd_tflops')} | "
          f"{g(c, 'fwd_tflops')} | {g(c, 'fwdbwd_tflops')} |")
