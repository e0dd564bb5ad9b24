#!/usr/bin/env python3
"""Regenerates the tables of docs/performance.md and README.md, and the plots in docs/, from the
curated measurements in bench/data/*.csv.

Each CSV starts with '# key: value' lines (title, date, machine, commit, peers, command, units)
followed by a header row and the data. A table in a Markdown file sits between the markers

    <!-- report:NAME -->
    ...
    <!-- /report:NAME -->

and is replaced whole; text outside the markers is left alone. Plots are PNGs drawn with
matplotlib when it is importable, else with gnuplot, else skipped with a note.

    python3 bench/report.py            # rewrite the tables in place and draw the plots
    python3 bench/report.py --check    # exit 1 if a table differs from what the CSVs give
    python3 bench/report.py --print    # print every table to stdout, change nothing
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data")
DOCS = os.path.join(ROOT, "docs")


def load(name):
    """(meta dict, list of row dicts) of bench/data/NAME.csv."""
    meta, lines = {}, []
    with open(os.path.join(DATA, name + ".csv")) as f:
        for line in f:
            if line.startswith("#"):
                key, _, value = line[1:].partition(":")
                meta[key.strip()] = value.strip()
            elif line.strip():
                lines.append(line)
    return meta, list(csv.DictReader(lines))


def num(x, digits=0):
    if x in ("", None):
        return "—"
    v = float(x)
    return f"{v:,.{digits}f}"


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def provenance(meta):
    """The lines every figure carries: when, where, which commit, how, against whom."""
    lines = [f"- **Date**: {meta['date']}; **machine**: {meta['machine']}; **commit**: `{meta['commit']}`",
             f"- **Command**: `{meta['command']}`",
             f"- **Peers**: {meta['peers']}",
             f"- **Units**: {meta['units']}"]
    if meta.get("note"):
        lines.append(f"- **Note**: {meta['note']}")
    return "\n".join(lines)


def by(rows, *keys):
    return {tuple(r[k] for k in keys): r for r in rows}


# --------------------------------------------------------------------------- the tables

def t_gpu_h100():
    return t_peers("gpu_h100_peers")


def t_features():
    """attn_peers.py --features: softcap and sinks beside the same shape without them (their cost),
    the MLA head dims and head dim 256, distflash beside the peers that ran each shape."""
    meta, rows = load("gpu_features")
    idx = by(rows, "case", "impl")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = []
    for c in cases:
        ours = idx.get((c, "distflash"))
        base = c.replace(" softcap 30", "").replace(" sinks", "")
        ratio = "—"
        if ours and base != c and (base, "distflash") in idx:
            b = idx[(base, "distflash")]
            ratio = " / ".join(f"{float(ours[k]) / float(b[k]):.2f}" for k in ("fwd_tflops", "fwdbwd_tflops"))
        cell = [f"{num(ours['fwd_tflops'])} / {num(ours['fwdbwd_tflops'])}" if ours else "—", ratio]
        for impl in ("flash-attn-4", "cudnn"):
            r = idx.get((c, impl))
            cell.append(f"{num(r['fwd_tflops'])} / {num(r['fwdbwd_tflops'])}" if r and r["fwd_tflops"] else "—")
        out.append([c] + cell)
    return provenance(meta) + "\n\n" + md_table(
        ["case (bf16)", "distflash fwd / fwd+bwd", "against the case without", "FlashAttention-4", "cuDNN"], out)


def t_peers(name):
    """attn_peers.py's cases (bench/data/NAME.csv): distflash, FA4 and cuDNN per case."""
    meta, rows = load(name)
    idx = by(rows, "case", "impl")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    out = []
    for c in cases:
        cell = []
        for impl in ("distflash", "flash-attn-4", "cudnn"):
            r = idx.get((c, impl))
            cell.append(f"{num(r['fwd_tflops'])} / {num(r['fwdbwd_tflops'])}" if r else "—")
        out.append([c] + cell)
    return provenance(meta) + "\n\n" + md_table(
        ["case (bf16)", "distflash fwd / fwd+bwd", "FlashAttention-4", "cuDNN"], out)


def t_gpu_h200():
    meta, rows = load("gpu_h200_peers")
    idx = by(rows, "head_dim", "seqlen", "causal", "impl")
    shapes = list(dict.fromkeys((r["head_dim"], r["seqlen"], r["batch"], r["heads"], r["causal"]) for r in rows))
    out = []
    for d, s, b, h, c in shapes:
        cell = [d, f"{int(s) // 1024}k", f"{b} x {h}", "yes" if c == "1" else "no"]
        for impl in ("distflash", "cudnn", "fa2"):
            r = idx[(d, s, c, impl)]
            cell.append(f"{num(r['fwd_tflops'])} / {num(r['fwdbwd_tflops'])}")
        out.append(cell)
    return provenance(meta) + "\n\n" + md_table(
        ["d", "S", "batch x heads", "causal", "distflash fwd / fwd+bwd", "cuDNN", "FlashAttention-2"], out)


def t_masks():
    meta, rows = load("masks_h200_flex")
    idx = by(rows, "run", "mask", "impl")
    out = []
    for mask in dict.fromkeys(r["mask"] for r in rows):
        for p, label in (("fwd_tflops", "fwd"), ("fwdbwd_tflops", "fwd+bwd")):
            ours = [float(idx[(run, mask, "distflash")][p]) for run in ("a", "b")]
            flex = [float(idx[(run, mask, "flexattention")][p]) for run in ("a", "b")]
            ratio = [o / f for o, f in zip(ours, flex)]
            out.append([mask, label, " / ".join(f"{x:.0f}" for x in ours), " / ".join(f"{x:.0f}" for x in flex),
                        " / ".join(f"{x:.2f}x" for x in ratio)])
    return provenance(meta) + "\n\n" + md_table(
        ["mask (S = 128k, 16 x 128)", "pass", "distflash (run a / b)", "FlexAttention (a / b)", "ratio"], out)


def t_dist():
    meta, rows = load("dist_h200x2")
    out = []
    for s in dict.fromkeys(r["seqlen"] for r in rows):
        sel = {(r["schedule"], r["overlap"]): r for r in rows if r["seqlen"] == s}
        one, ring, bal = sel[("distflash 1 GPU", "-")], sel[("distflash ring", "on")], sel[("distflash balanced", "on")]
        off, cp = sel[("distflash balanced", "off")], sel[("pytorch context_parallel", "-")]
        out.append([f"{int(s) // 1024}k", num(one["fwdbwd_ms"], 1), num(ring["fwdbwd_ms"], 1), num(bal["fwdbwd_ms"], 1),
                    num(off["fwdbwd_ms"], 1), f"{float(ring['fwdbwd_ms']) / float(bal['fwdbwd_ms']):.2f}x",
                    num(bal["efficiency_fwdbwd"], 3), num(cp["fwdbwd_ms"], 1), num(cp["efficiency_fwdbwd"], 3)])
    return provenance(meta) + "\n\n" + md_table(
        ["S", "1 GPU ms", "ring ms", "balanced ms", "balanced, no overlap", "balanced vs ring",
         "efficiency", "PyTorch CP ms", "CP efficiency"], out)


def t_dist_docs():
    meta, rows = load("dist_h200x2_docs")
    out = [[r["schedule"], num(r["fwd_ms"], 1), num(r["fwdbwd_ms"], 1), num(r["fwdbwd_tflops_per_gpu"]),
            num(r["efficiency_fwdbwd"], 3)] for r in rows]
    return provenance(meta) + "\n\n" + md_table(
        ["S = 128k, documents", "fwd ms", "fwd+bwd ms", "TFLOP/s per GPU", "efficiency"], out)


def t_train():
    meta, rows = load("train_h200x2")
    peer = {r["context"]: float(r["tokens_per_s"]) for r in rows if r["who"] == "pytorch peer"}
    out = []
    for r in rows:
        vs = "" if r["who"] == "pytorch peer" else f"{float(r['tokens_per_s']) / peer[r['context']]:.2f}x"
        out.append([f"{int(r['context']) // 1024}k", r["who"], r["checkpointing"], num(r["step_s"], 3),
                    num(r["tokens_per_s"]), num(r["peak_gib_per_gpu"], 1), num(r["mfu"], 3), vs])
    return provenance(meta) + "\n\n" + md_table(
        ["context", "who", "checkpointing", "step s", "tokens/s", "peak GiB/GPU", "MFU", "vs peer"], out)


def t_train_cp():
    meta, rows = load("train_cp_h200x2")
    base = next(float(r["tokens_per_s"]) for r in rows if r["attention"].startswith("pytorch") and r["checkpointing"] == "layer")
    out = [[r["attention"], r["checkpointing"], num(r["step_s"], 3), num(r["tokens_per_s"]),
            num(r["peak_gib_per_gpu"], 1), f"{float(r['tokens_per_s']) / base:.2f}x"] for r in rows]
    return provenance(meta) + "\n\n" + md_table(
        ["attention", "checkpointing", "step s", "tokens/s", "peak GiB/GPU", "vs PyTorch, layer"], out)


def t_cpu():
    meta, rows = load("cpu_kernels")
    peak = float(meta["peak_gflops"])
    out = []
    for r in rows:
        naive = f"{num(r['naive_fwd_mib'])}" + ("" if float(r["naive_fwd_mib"]) <= 4096 else " (not run)")
        out.append([f"{int(r['seqlen']) // 1024}k", r["head_dim"], "yes" if r["causal"] == "1" else "no", r["dtype"],
                    f"{num(r['fwd_gflops'], 1)} ({float(r['fwd_gflops']) / peak:.0%})",
                    f"{num(r['bwd_gflops'], 1)} ({float(r['bwd_gflops']) / peak:.0%})",
                    num(r["fwd_mib"]), naive])
    return provenance(meta) + "\n\n" + md_table(
        ["S", "D", "causal", "dtype", "fwd GFLOP/s (of peak)", "bwd GFLOP/s (of peak)", "fwd MiB", "naive fwd MiB"], out)


def t_cpu_ggml():
    meta, rows = load("cpu_ggml")
    idx = by(rows, "head_dim", "causal", "impl")
    out = []
    for d in ("128", "64"):
        for c in ("1", "0"):
            o, g = float(idx[(d, c, "distflash")]["fwd_gflops"]), float(idx[(d, c, "ggml flash_attn_ext")]["fwd_gflops"])
            out.append([d, "yes" if c == "1" else "no", f"{o:.1f}", f"{g:.0f}", f"{o / g:.1f}x"])
    return provenance(meta) + "\n\n" + md_table(["D", "causal", "distflash fwd GFLOP/s", "ggml", "ratio"], out)


def t_policies():
    meta, rows = load("checkpoint_policies_cpu")
    layer = next(r for r in rows if r["policy"] == "layer")
    out = [[r["policy"], num(r["step_s"], 3), r["attention_fwd_calls_per_step"], num(r["attention_s_per_step"], 3),
            num(r["peak_rss_mib"], 1), f"{float(layer['step_s']) / float(r['step_s']):.2f}x",
            f"{(float(r['peak_rss_mib']) / float(layer['peak_rss_mib']) - 1):+.1%}"] for r in rows]
    return provenance(meta) + "\n\n" + md_table(
        ["policy", "step s", "attention forwards", "attention s", "peak MiB", "speed vs layer", "memory vs layer"], out)


def t_dist_cpu():
    meta, rows = load("dist_cpu_mpi")
    idx = by(rows, "schedule", "overlap")
    out = [[s, num(idx[(s, "on")]["fwdbwd_s"], 3), num(idx[(s, "off")]["fwdbwd_s"], 3),
            f"{float(idx[('ring', 'on')]['fwdbwd_s']) / float(idx[(s, 'on')]['fwdbwd_s']):.2f}x"]
           for s in ("ring", "paper", "balanced")]
    return provenance(meta) + "\n\n" + md_table(["schedule", "overlap on, s", "overlap off, s", "vs ring"], out)


def t_demo():
    meta, rows = load("demo_passkey")
    out = [[r["step"], r["context"], num(r["loss"], 4), f"{float(r['eval_exact']):.1%}", f"{float(r['eval_digits']):.1%}"]
           for r in rows if r["eval_exact"]]
    return provenance(meta) + "\n\n" + md_table(
        ["step", "training context", "loss", "held-out exact match", "digits right"], out)


def t_summary():
    """README's one table: a few current figures beside the peers measured with them."""
    g, grow = load("gpu_h100_peers")
    gi = by(grow, "case", "impl")
    m1 = f"H100, {g['date']}, `{g['commit']}`"
    out = []
    for case, label in (("d128 32k x1 causal", "one GPU, d 128, 32k, causal: fwd+bwd TFLOP/s"),
                        ("d128 2k x16 causal", "one GPU, d 128, 2k x 16, causal: fwd+bwd TFLOP/s"),
                        ("d64 32k x1 causal", "one GPU, d 64, 32k, causal: fwd+bwd TFLOP/s"),
                        ("d128 8k x4 causal GQA 32/4", "one GPU, GQA 32/4, 8k x 4, causal: fwd+bwd TFLOP/s"),
                        ("d128 128k x1 causal window 4096", "one GPU, 128k, sliding window 4096: fwd+bwd TFLOP/s"),
                        ("d128 128k x1 causal docs 4096", "one GPU, 128k, packed documents: fwd+bwd TFLOP/s")):
        if (case, "distflash") not in gi:
            sys.exit(f"report.py: bench/data/gpu_h100_peers.csv has no distflash row for the case '{case}'")
        cells = [num(gi[(case, i)]["fwdbwd_tflops"]) if (case, i) in gi else "—"
                 for i in ("distflash", "flash-attn-4", "cudnn")]
        out.append([label] + cells + ["—", m1])
    d, drow = load("dist_h200x2")
    di = by(drow, "seqlen", "schedule", "overlap")
    m2 = f"2 x H200, {d['date']}, `{d['commit']}`"
    for s in ("131072",):
        ours, cp = di[(s, "distflash balanced", "on")], di[(s, "pytorch context_parallel", "-")]
        out.append([f"two GPUs, {int(s) // 1024}k causal: fwd+bwd ms (lower is better)",
                    num(ours["fwdbwd_ms"]), "—", "—", num(cp["fwdbwd_ms"]), m2])
        out.append([f"two GPUs, {int(s) // 1024}k causal: scaling efficiency against one GPU",
                    num(ours["efficiency_fwdbwd"], 2), "—", "—", num(cp["efficiency_fwdbwd"], 2), m2])
    t, trow = load("train_h200x2")
    ti = by(trow, "context", "who", "checkpointing")
    m3 = f"2 x H200, {t['date']}, `{t['commit']}`"
    for c in ("65536", "262144"):
        out.append([f"training 756M on two GPUs, {int(c) // 1024}k context: tokens/s",
                    num(ti[(c, "distflash", "attn-output")]["tokens_per_s"]), "—", "—",
                    num(ti[(c, "pytorch peer", "layer")]["tokens_per_s"]), m3])
    return md_table(["workload", "distflash", "FlashAttention-4", "cuDNN", "PyTorch context parallel",
                     "machine, date, commit"], out)


TABLES = {"gpu-h100": t_gpu_h100, "features": t_features, "gpu-h200": t_gpu_h200, "masks": t_masks, "dist": t_dist,
          "dist-docs": t_dist_docs, "train": t_train, "train-cp": t_train_cp, "cpu": t_cpu,
          "cpu-ggml": t_cpu_ggml, "policies": t_policies, "demo": t_demo, "dist-cpu": t_dist_cpu, "summary": t_summary}
FILES = [os.path.join(DOCS, "performance.md"), os.path.join(ROOT, "README.md")]


def fill(text, tables):
    """text with every marked table replaced; raises on an unknown or unclosed marker."""
    out, pos = [], 0
    while True:
        start = text.find("<!-- report:", pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out)
        name_end = text.index(" -->", start)
        name = text[start + len("<!-- report:"):name_end]
        if name not in tables:
            raise SystemExit(f"report.py: unknown table {name!r}")
        close = f"<!-- /report:{name} -->"
        end = text.find(close, name_end)
        if end < 0:
            raise SystemExit(f"report.py: no {close}")
        out.append(text[pos:name_end + 4] + "\n" + tables[name]() + "\n")
        pos = end
        out.append(close)
        pos += len(close)


# --------------------------------------------------------------------------- the plots

def plot_series():
    """The plots as data: name -> (title, ylabel, categories, {series: values})."""
    g, rows = load("gpu_h100_peers")
    idx = by(rows, "case", "impl")
    cases = list(dict.fromkeys(r["case"] for r in rows))
    gpu = {impl: [float(idx[(c, impl)]["fwdbwd_tflops"]) if (c, impl) in idx else 0.0 for c in cases]
           for impl in ("distflash", "flash-attn-4", "cudnn")}
    d, drows = load("dist_h200x2")
    seqs = list(dict.fromkeys(r["seqlen"] for r in drows))
    di = by(drows, "seqlen", "schedule", "overlap")
    dist = {"distflash balanced": [float(di[(s, "distflash balanced", "on")]["efficiency_fwdbwd"]) for s in seqs],
            "distflash ring": [float(di[(s, "distflash ring", "on")]["efficiency_fwdbwd"]) for s in seqs],
            "PyTorch context parallel": [float(di[(s, "pytorch context_parallel", "-")]["efficiency_fwdbwd"]) for s in seqs]}
    m, drows = load("demo_passkey")
    curve = ([int(r["step"]) for r in drows], [float(r["loss"]) for r in drows],
             [(int(r["step"]), float(r["eval_exact"])) for r in drows if r["eval_exact"]])
    return {
        "passkey_demo.png": (f"scripts/demo: training loss and held-out exact match ({m['date']}, {m['commit']})",
                             "loss", None, curve),
        "perf_gpu.png": (f"One GPU, bf16, forward+backward ({g['machine'].split(' (')[0]}, {g['date']}, {g['commit']})",
                         "TFLOP/s", cases, gpu),
        "perf_dist.png": (f"Two GPUs, causal 32 x 128 ({d['date']}, {d['commit']})",
                          "scaling efficiency, fwd+bwd", [f"{int(s) // 1024}k" for s in seqs], dist),
    }


def plot_matplotlib(path, title, ylabel, cats, series):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if cats is None:  # a training curve: (steps, loss, [(step, exact match)])
        steps, loss, evals = series
        fig, ax = plt.subplots(figsize=(9, 5))
        (l1,) = ax.semilogy(steps, loss, lw=0.8, label="training loss")
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax2 = ax.twinx()
        (l2,) = ax2.plot([e[0] for e in evals], [e[1] for e in evals], "o-", color="tab:red",
                         label="held-out exact match")
        ax2.set_ylim(0, 1)
        ax2.set_ylabel("exact match")
        ax.set_title(title, fontsize=9)
        ax.legend(handles=[l1, l2], loc="lower left", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    n = len(series)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(6, 0.75 * len(cats) + 2), 4.5))
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([x + (i - (n - 1) / 2) * width for x in range(len(cats))], vals, width, label=name)
    ax.set_xticks(range(len(cats)))
    ax.set_xticklabels(cats, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_gnuplot_curve(path, title, ylabel, series):
    steps, loss, evals = series
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        f.writelines(f"{s}\t{v:.6g}\n" for s, v in zip(steps, loss))
        f.write("\n\n")
        f.writelines(f"{s}\t{v:.4f}\n" for s, v in evals)
        dat = f.name
    script = f"""set terminal pngcairo size 1000,600 font ",10"
set output '{path}'
set title "{title}"
set xlabel "step"
set ylabel "{ylabel}"
set logscale y
set y2label "exact match"
set y2range [0:1]
set y2tics
set ytics nomirror
set grid
set key top center
plot '{dat}' index 0 with lines lw 1 title "training loss", \\
     '{dat}' index 1 axes x1y2 with linespoints pt 7 lw 2 title "held-out exact match"
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    finally:
        os.unlink(dat)


def plot_gnuplot(path, title, ylabel, cats, series):
    if cats is None:
        return plot_gnuplot_curve(path, title, ylabel, series)
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        f.write("case\t" + "\t".join(f'"{s}"' for s in series) + "\n")
        for i, c in enumerate(cats):
            f.write(f'"{c}"\t' + "\t".join(f"{v[i]:.4g}" for v in series.values()) + "\n")
        dat = f.name
    cols = ", ".join(f"'{dat}' using {i + 2}{':xtic(1)' if i == 0 else ''} title columnheader({i + 2})"
                     for i in range(len(series)))
    script = f"""set terminal pngcairo size {max(640, 70 * len(cats) + 200)},520 font ",9"
set output '{path}'
set title "{title}"
set ylabel "{ylabel}"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by 30 right scale 0
set yrange [0:*]
set grid ytics
set key outside top center horizontal
plot {cols}
"""
    try:
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    finally:
        os.unlink(dat)


def draw_plots():
    try:
        import matplotlib  # noqa: F401
        draw = plot_matplotlib
    except ImportError:
        if not shutil.which("gnuplot"):
            print("report.py: neither matplotlib nor gnuplot found; plots not drawn", file=sys.stderr)
            return
        draw = plot_gnuplot
    for name, (title, ylabel, cats, series) in plot_series().items():
        draw(os.path.join(DOCS, name), title, ylabel, cats, series)
        print(f"report.py: drew docs/{name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a file's tables are out of date")
    ap.add_argument("--print", action="store_true", help="print every table, change nothing")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    a = ap.parse_args()
    if a.print:
        for name, fn in TABLES.items():
            print(f"## {name}\n\n{fn()}\n")
        return 0
    stale = []
    for path in FILES:
        text = open(path).read()
        new = fill(text, TABLES)
        if new != text:
            stale.append(os.path.relpath(path, ROOT))
            if not a.check:
                open(path, "w").write(new)
    if a.check:
        for s in stale:
            print(f"report.py: {s} is out of date (run python3 bench/report.py)")
        return 1 if stale else 0
    for s in stale:
        print(f"report.py: updated {s}")
    if not a.no_plots:
        draw_plots()
    return 0


if __name__ == "__main__":
    sys.exit(main())
