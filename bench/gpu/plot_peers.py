#!/usr/bin/env python3
"""One picture of a device run against the peers: TFLOP/s of distflash, FA2 (SDPA flash) and cuDNN
per shape (forward and forward+backward, one panel per head dim), and, given the masks bench's
JSON, distflash against FlexAttention with documents and a sliding window (visible-pair FLOPs).

    python3 bench/gpu/plot_peers.py ours.json peers.json [masks.json] out.png     (needs matplotlib)

ours.json: `distflash bench --device cuda --json`; peers.json: `bench/gpu/peers.py --json`;
masks.json: `bench/gpu/masks_bench.py --json` from a run that timed Flex (no --no-flex).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LIBS = (("distflash", "tab:blue"), ("flash", "tab:gray"), ("cudnn", "tab:orange"))
LABEL = {"distflash": "distflash", "flash": "FA2 (SDPA flash)", "cudnn": "cuDNN (SDPA)"}


def key(r):
    return (r["d"], r["s"], bool(r["causal"]), r.get("kv_heads", r["h"]), r.get("block", "square"))


def shape_label(r):
    s = r["s"] // 1024
    return f"{s}k, {r['b']}x{r['h']}\n{'causal' if r['causal'] else 'full'}"


def peer_panels(axes, ours, peers):
    rows = {("distflash",) + key(r): r for r in ours}
    rows.update({(r["backend"],) + key(r): r for r in peers})
    dims = sorted({r["d"] for r in ours})
    for col, d in enumerate(dims):
        mine = [r for r in ours if r["d"] == d]
        for row, (metric, title) in enumerate((("fwd_tflops", "forward"), ("fwdbwd_tflops", "forward+backward"))):
            ax = axes[row][col]
            width = 0.8 / len(LIBS)
            for i, (lib, color) in enumerate(LIBS):
                xs, ys = [], []
                for j, r in enumerate(mine):
                    p = rows.get((lib,) + key(r))
                    if p and metric in p:
                        xs.append(j + (i - (len(LIBS) - 1) / 2) * width)
                        ys.append(p[metric])
                ax.bar(xs, ys, width, color=color, label=LABEL[lib])
            ax.set_xticks(range(len(mine)))
            ax.set_xticklabels([shape_label(r) for r in mine], fontsize=7)
            ax.set_title(f"d = {d}, {title}", fontsize=9)
            ax.set_ylabel("TFLOP/s")
            ax.grid(axis="y", alpha=0.3)
    return axes[0][0].get_legend_handles_labels()


def masks_panel(ax, masks):
    names = [r["mask"] for r in masks]
    width = 0.2
    bars = (("ours_fwd_tflops", "distflash fwd", "tab:blue", 1.0), ("flex_fwd_tflops", "Flex fwd", "tab:green", 1.0),
            ("ours_fb_tflops", "distflash fwd+bwd", "tab:blue", 0.5), ("flex_fb_tflops", "Flex fwd+bwd", "tab:green", 0.5))
    for i, (k, label, color, alpha) in enumerate(bars):
        xs = [j + (i - 1.5) * width for j in range(len(masks))]
        ys = [r.get(k, 0) for r in masks]
        ax.bar(xs, ys, width, color=color, alpha=alpha, label=label)
    for j, r in enumerate(masks):
        if r.get("flex_fwd_tflops") and r.get("flex_fb_tflops"):
            ax.text(j, max(r["ours_fwd_tflops"], r["ours_fb_tflops"]) * 1.02,
                    f"{r['ours_fwd_tflops'] / r['flex_fwd_tflops']:.2f}x / {r['ours_fb_tflops'] / r['flex_fb_tflops']:.2f}x",
                    ha="center", fontsize=7)
    ax.set_xticks(range(len(masks)))
    ax.set_xticklabels([f"{n}\n{masks[0]['S'] // 1024}k x{masks[0]['H']}, d={masks[0]['D']}" for n in names], fontsize=7)
    ax.set_title("masks vs FlexAttention (visible pairs; ratios fwd / fwd+bwd)", fontsize=9)
    ax.set_ylim(0, 1.15 * max(max(r["ours_fwd_tflops"], r["ours_fb_tflops"]) for r in masks))
    ax.set_ylabel("TFLOP/s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6, loc="lower right")


def main(argv):
    if len(argv) not in (4, 5):
        sys.exit(__doc__)
    ours = json.load(open(argv[1]))
    peers = json.load(open(argv[2]))
    masks = json.load(open(argv[3])) if len(argv) == 5 else None
    dims = sorted({r["d"] for r in ours})
    cols = len(dims) + (1 if masks else 0)
    fig, axes = plt.subplots(2, cols, figsize=(5.2 * cols, 7.5), squeeze=False)
    handles, labels = peer_panels(axes, ours, peers)
    if masks:
        masks_panel(axes[0][cols - 1], masks)
        axes[1][cols - 1].axis("off")
        axes[1][cols - 1].legend(handles, labels, loc="center", fontsize=9)
    else:
        axes[0][0].legend(handles, labels, fontsize=7, loc="lower right")
    fig.suptitle("one H200, bf16: distflash against its peers timed in the same call (the masks in their own call;"
                 " BENCHMARKS.md)", fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[-1], dpi=110)


if __name__ == "__main__":
    main(sys.argv)
