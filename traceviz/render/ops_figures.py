"""Figures of ``traceviz ops``: the roofline of the modelled op shapes and GPU time per
model module."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..table.text import middle_cut
from .figures import ms_text, new_figure, no_data

FAMILY_COLORS = {"gemm": "#4C72B0", "attention": "#DD8452", "conv": "#55A868",
                 "elementwise": "#8172B3", "norm": "#937860", "softmax": "#DA8BC3"}
KIND_COLORS = {"COMP": "#4C72B0", "MEM": "#8172B3"}
COMM_COLORS = ("#DD8452", "#C44E52", "#55A868", "#CCB974", "#64B5CD", "#DA8BC3", "#8C8C8C")


def roofline(shapes: pa.Table, roofs: dict[str, float], tbps: float | None,
             device: str | None):
    """One point per op shape (arithmetic intensity FLOPs / byte vs achieved TFLOP/s,
    size ~ GPU time), with the device's roofs: a compute roof per data type the points
    use (``roofs``: dtype -> TFLOP/s) under its bandwidth roof."""
    title = "How close to the roof does each op shape run?"
    rows = [r for r in shapes.to_pylist() if r.get("flops") and r.get("bytes")
            and r.get("gpu_ns")] if shapes.num_rows else []
    if not rows:
        return no_data(title, "no op with both FLOPs and bytes (shapes not recorded: "
                              "profile with record_shapes=True)")
    fig = new_figure((9, 6), layout="constrained")
    ax = fig.subplots()
    x = np.array([r["flops"] / r["bytes"] for r in rows])
    y = np.array([r["flops"] / r["gpu_ns"] / 1e3 for r in rows])
    t = np.array([r["gpu_ns"] for r in rows], float)
    size = 20 + 300 * t / t.max()
    for fam, color in FAMILY_COLORS.items():
        sel = np.array([r["family"] == fam for r in rows])
        if sel.any():
            ax.scatter(x[sel], y[sel], s=size[sel], color=color, alpha=0.7,
                       edgecolors="white", linewidths=0.5,
                       label=f"{fam} ({ms_text(t[sel].sum() / 1e6)} GPU)")
    lo, hi = min(x.min(), 1.0) / 2, max(x.max(), 1e3) * 2
    xs = np.geomspace(lo, hi, 200)
    for k, (dtype, peak) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        style = ("-", "--", ":", "-.")[k % 4]
        roof = np.minimum(peak, tbps * xs) if tbps else np.full(xs.size, peak)
        ax.plot(xs, roof, color="black", linewidth=1.2, linestyle=style,
                label=f"roof {dtype.upper()}: {peak:g} TFLOP/s"
                      + (f", {tbps:g} TB/s" if tbps else ""))
    # the heaviest five, labelled in a column at the top left, each with a line to its
    # point: however close the points lie (a thousand ranks' shapes of one op), the
    # labels never overlap. With the device's bandwidth known that corner is above its
    # roof, where no point can lie; without it a point there shows through the labels'
    # translucent boxes
    for k, i in enumerate(np.argsort(-t)[:5]):
        ax.annotate(middle_cut(f"{rows[i]['op']} {rows[i]['input_dims'] or ''}", 48),
                    (x[i], y[i]), fontsize="xx-small", xytext=(0.02, 0.97 - 0.045 * k),
                    textcoords="axes fraction", va="top",
                    bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none",
                          "alpha": 0.8},
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.4"})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{title}\n{device or 'device unknown: no roof'}", fontsize="small")
    ax.legend(fontsize="x-small", loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return fig


def modules(table: pa.Table, top: int = 20):
    """GPU time of the ``top`` module paths (summed over ranks and phases), stacked by
    kernel kind."""
    title = "Which parts of the model take the GPU time?"
    if table.num_rows == 0:
        return no_data(title, "no kernels")
    rows = table.to_pylist()
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["module"]] = totals.get(r["module"], 0) + r["gpu_ns"]
    names = sorted(totals, key=lambda m: -totals[m])[:top][::-1]
    fig = new_figure((11, 0.35 * len(names) + 1.6), layout="constrained")
    ax = fig.subplots()
    left = np.zeros(len(names))
    at = {m: i for i, m in enumerate(names)}
    comm = sorted({r["kind"] for r in rows} - set(KIND_COLORS))
    colors = {**KIND_COLORS, **{k: COMM_COLORS[i % len(COMM_COLORS)]
                                for i, k in enumerate(comm)}}
    for kind, color in colors.items():
        width = np.zeros(len(names))
        for r in rows:
            if r["kind"] == kind and r["module"] in at:
                width[at[r["module"]]] += r["gpu_ns"] / 1e6
        if width.any():
            ax.barh(np.arange(len(names)), width, left=left, color=color,
                    label=f"{kind} ({ms_text(width.sum())})")
            left += width
    for i, m in enumerate(names):
        ax.annotate(f" {ms_text(left[i])}", (left[i], i), va="center", fontsize="x-small")
    ax.set_xlim(0, max(float(left.max()), 1e-6) * 1.12)  # room for the numbers
    ax.set_yticks(np.arange(len(names)), [middle_cut(m, 70) for m in names],
                  fontsize="x-small")
    ax.set_xlabel("GPU time (ms, summed over ranks and micro-batches)")
    ax.set_title(title + (f" (top {top} of {len(totals)})" if len(totals) > top else ""),
                 fontsize="small")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig
