"""``flashlesson.plots``: the pictures of the lesson's numbers (§4, §28–29, §48), as PNG files.

Where a reader would rather look than read: bandwidth vs N of every softmax method beside
torch and the copy roofline (§4, §11), TFLOP/s vs N of naive, flash and torch's SDPA backends
(§28), and HBM bytes vs on-chip SRAM size (§48). Tables are always printed by the commands;
the pictures need matplotlib, an optional extra (``pip install -e ".[plot]"``): without it
every function here prints how to get it and returns False, never raises.

Every bench plot takes the JSON the bench writes (``--json``), so a picture can be drawn again
from saved results without a GPU:

    flashlesson bench softmax --json sm.json --plot sm.png       # measure, save, draw
    flashlesson plot docs/bench_attention_h200.json att.png      # draw saved results
    flashlesson traffic sram --shape 4096 64 --plot sram.png     # §48, any machine

Shapes of the data: softmax ``{"copy GB/s": {dtype: GB/s}, "results": [{"dtype", "N",
"method", "GB/s", "torch GB/s"?}, …]}``; attention ``{"results": [{"B", "H", "N", "d",
"causal", "flash TFLOP/s", "naive TFLOP/s", "sdpa math TFLOP/s", "sdpa efficient TFLOP/s"},
…]}`` (the backward's keys say ``bwd``); SRAM rows from ``traffic.sram_sweep``.
"""

import json
import sys

PLOT_HINT = "pictures need matplotlib (pip install 'flashlesson[plot]' or pip install matplotlib)"


def _pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None (with the hint on stderr)."""
    try:
        import matplotlib
        matplotlib.use("Agg")                  # no display needed: files only
        import matplotlib.pyplot as plt
    except ImportError:
        print(PLOT_HINT, file=sys.stderr)
        return None
    return plt


def _save(fig, plt, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------------------
# §4, §11: softmax bandwidth vs N
# ---------------------------------------------------------------------------------------------
def plot_softmax_bench(data, path):
    """GB/s (ideal traffic: one read + one write) vs N, one panel per dtype: each method, torch
    (dashed) and the measured copy bandwidth (the ceiling, dotted)."""
    results, copy_bw = data["results"], data.get("copy GB/s", {})
    if not results:
        raise ValueError("softmax results: nothing to plot (empty 'results')")
    plt = _pyplot()
    if plt is None:
        return False
    dtypes = sorted({r["dtype"] for r in results})
    fig, axes = plt.subplots(1, len(dtypes), figsize=(7 * len(dtypes), 5), squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        rs = [r for r in results if r["dtype"] == dt]
        for name in dict.fromkeys(r["method"] for r in rs):
            pts = sorted((r["N"], r["GB/s"]) for r in rs if r["method"] == name)
            ax.plot(*zip(*pts), marker="o", label=name, linewidth=2.5 if name == "auto" else 1)
        tp = sorted({(r["N"], r["torch GB/s"]) for r in rs if r.get("torch GB/s")})
        if tp:
            ax.plot(*zip(*tp), "k--", marker="x", label="torch.softmax")
        if dt in copy_bw:
            ax.axhline(copy_bw[dt], color="gray", linestyle=":", label="copy (ceiling)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (row length)")
        ax.set_ylabel("GB/s (1 read + 1 write)")
        ax.set_title(f"softmax, {dt}")
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


# ---------------------------------------------------------------------------------------------
# §28: attention TFLOP/s vs N
# ---------------------------------------------------------------------------------------------
ATTENTION_SERIES = (("flash", "flash", "o-"), ("naive", "naive", "s-"),
                    ("sdpa math", "torch SDPA math", "x--"),
                    ("sdpa efficient", "torch SDPA efficient", "^--"))


def plot_attention_bench(data, path):
    """TFLOP/s vs N, one panel per causal mode: flash, naive and torch's SDPA backends. The
    largest group of rows that differ only in N (the bench's sweep: B1 H16 d64) is drawn as
    lines; the other shapes as labelled points. Forward or backward is read from the keys."""
    results = data["results"]
    if not results:
        raise ValueError("attention results: nothing to plot (empty 'results')")
    bwd = any("flash bwd TFLOP/s" in r for r in results)
    key = (lambda name: f"{name} bwd TFLOP/s") if bwd else (lambda name: f"{name} TFLOP/s")
    plt = _pyplot()
    if plt is None:
        return False
    groups = {}
    for r in results:
        groups.setdefault((r["B"], r["H"], r["d"]), []).append(r)
    sweep = max(groups, key=lambda g: len({r["N"] for r in groups[g]}))
    modes = sorted({bool(r["causal"]) for r in results})
    fig, axes = plt.subplots(1, len(modes), figsize=(7 * len(modes), 5), squeeze=False)
    for ax, causal in zip(axes[0], modes):
        for i, (name, label, style) in enumerate(ATTENTION_SERIES):
            color = f"C{i}"
            pts = sorted((r["N"], r[key(name)]) for r in groups[sweep]
                         if bool(r["causal"]) == causal and r.get(key(name)))
            if pts:
                ax.plot(*zip(*pts), style, color=color,
                        label=f"{label} (B{sweep[0]} H{sweep[1]} d{sweep[2]})")
            for g, rs in groups.items():
                if g == sweep:
                    continue
                for r in rs:
                    if bool(r["causal"]) == causal and r.get(key(name)):
                        ax.plot(r["N"], r[key(name)], style[0], color=color, alpha=0.5)
                        if name == "flash":
                            ax.annotate(f"B{g[0]} H{g[1]} d{g[2]}", (r["N"], r[key(name)]),
                                        fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (Nq = Nk)")
        ax.set_ylabel("TFLOP/s (" + ("2.5 × the forward's 4·B·H·N²·d" if bwd else
                                     "4·B·H·N²·d") + (", halved: causal)" if causal else ")"))
        ax.set_title(f"attention {'backward' if bwd else 'forward'}, fp32"
                     f"{', causal' if causal else ''} (faded points: other B, H, d)")
        ax.legend(fontsize=7)
    return _save(fig, plt, path)


# ---------------------------------------------------------------------------------------------
# §48: HBM bytes vs on-chip SRAM size
# ---------------------------------------------------------------------------------------------
def plot_sram(rows, path, n=None, d=None, itemsize=4):
    """HBM bytes (log) vs SRAM size (log, KiB) from ``traffic.sram_sweep`` rows: the paper's
    Algorithm 1 (FA1 order), this project's order (FA2), the naive path (flat) and the floor
    4·N·d (Q, K, V read once, O written once), with the H200's 228 KiB per SM marked."""
    if not rows:
        raise ValueError("sram rows: nothing to plot")
    plt = _pyplot()
    if plt is None:
        return False
    kib = [r["KiB"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.plot(kib, [r["fa1 bytes"] for r in rows], "o-", label="flash, FA1 order (paper, Alg. 1)")
    ax.plot(kib, [r["fa2 bytes"] for r in rows], "s-", label="flash, FA2 order (this kernel)")
    ax.plot(kib, [r["naive bytes"] for r in rows], "k--", label="naive (S, P in HBM)")
    ax.plot(kib, [r["flash_bound"] * itemsize for r in rows], ":", color="gray",
            label="N²d²/M (the bound, constant 1)")
    ax.axhline(rows[0]["floor bytes"], color="green", linestyle="-.", linewidth=1,
               label="floor: Q, K, V, O once (4Nd)")
    ax.axvline(228, color="red", linestyle=":", linewidth=1, label="H200: 228 KiB / SM")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("on-chip SRAM (KiB)")
    ax.set_ylabel("HBM bytes, one head")
    shape = f", N = {n}, d = {d}" if n and d else ""
    ax.set_title(f"§48: HBM traffic vs SRAM size{shape}, {itemsize}-byte elements")
    ax.legend(fontsize=7)
    return _save(fig, plt, path)


# ---------------------------------------------------------------------------------------------
# A saved results file → a picture
# ---------------------------------------------------------------------------------------------
def plot_results(data, path):
    """Draw ``data`` (a bench JSON, already loaded) with the plot its keys call for."""
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not results:
        raise ValueError("expected a flashlesson bench JSON: an object with a non-empty "
                         "'results' list")
    first = results[0]
    if "copy GB/s" in data or "GB/s" in first:
        return plot_softmax_bench(data, path)
    if "flash TFLOP/s" in first or "flash bwd TFLOP/s" in first or \
            any("TFLOP/s" in k for k in first):
        return plot_attention_bench(data, path)
    raise ValueError(f"unknown results: the first row has keys {sorted(first)}; expected a "
                     "softmax bench ('GB/s') or an attention bench ('flash TFLOP/s')")


def plot_file(json_path, png_path):
    """``flashlesson plot RESULTS.json OUT.png``."""
    with open(json_path) as f:
        data = json.load(f)
    return plot_results(data, png_path)


__all__ = ["PLOT_HINT", "plot_attention_bench", "plot_file", "plot_results", "plot_sram",
           "plot_softmax_bench"]
