#!/usr/bin/env python3
"""Predicted scaling efficiency vs P (issue 15) from `distflash simulate --predict --tsv`.

    python3 bench/seqpar/plot_predict.py predict.tsv efficiency.png     (needs matplotlib)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(tsv, png):
    rows = list(csv.DictReader(open(tsv), delimiter="\t"))
    seqs = sorted({int(r["S"]) for r in rows})
    fig, axes = plt.subplots(1, len(seqs), figsize=(5 * len(seqs), 4.2), sharey=True)
    styles = {"ring": ("tab:gray", "s"), "balanced": ("tab:blue", "o"), "heads x balanced": ("tab:red", "^")}
    for ax, S in zip(axes, seqs):
        for name, (color, marker) in styles.items():
            def wanted(r):
                if int(r["S"]) != S:
                    return False
                if r["schedule"] == name or (r["schedule"] == "1 GPU" and name != "ring"):
                    return True
                # inside one node the two-level scheme is the balanced schedule itself
                return name == "heads x balanced" and r["schedule"] == "balanced" and int(r["P"]) <= 8
            pts = sorted((int(r["P"]), float(r["eff"]), float(r["eff_lo"]), float(r["eff_hi"]))
                         for r in rows if wanted(r))
            if not pts:
                continue
            P = [p[0] for p in pts]
            e = [p[1] for p in pts]
            lo = [p[1] - p[2] for p in pts]
            hi = [p[3] - p[1] for p in pts]
            ax.errorbar(P, e, yerr=[lo, hi], color=color, marker=marker, capsize=3, label=name)
        ax.axhline(0.9, color="k", lw=0.6, ls=":")
        ax.axvline(8, color="k", lw=0.6, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16, 32, 64])
        ax.set_xticklabels(["1", "2", "4", "8", "16", "32", "64"])
        ax.set_title(f"S = {S // 1024}k tokens" if S < 1 << 20 else f"S = {S / (1 << 20):g}M tokens")
        ax.set_xlabel("GPUs (8 per node; dashed: one node)")
        ax.set_ylim(0, 1.15)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("scaling efficiency T1 / (P TP), fwd+bwd")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle("distflash, predicted (simulator, h200-cluster preset): causal, 32 heads x 128, bf16; "
                 "2-GPU points calibrated, the rest predicted", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
