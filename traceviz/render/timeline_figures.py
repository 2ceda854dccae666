"""Figures of an op timeline's diagnosis (:mod:`traceviz.analysis.timeline.diagnosis`):
each step's slowdown against its ideal with what it costs (``op_slowdown.png``) and every
worker's slowdown per step (``op_heatmap.png``: workers by stage and DP rank, slow ones
named; beyond :data:`ROWS` workers each row is the slowest of its block of workers, so a
slow GPU stays visible at any scale)."""
from __future__ import annotations

import numpy as np

from .figures import Figure, new_figure, no_data

ROWS = 256         # heatmap rows at most (blocks of workers beyond)
LABELLED = 40      # workers named on the axis at most


def slowdown_figure(diag) -> Figure:
    return Figure(_draw_slowdown, diag)


def heatmap_figure(diag) -> Figure:
    return Figure(_draw_heatmap, diag)


def _draw_slowdown(diag):
    steps = diag.steps.to_pylist()
    if not steps:
        return no_data("step slowdown", "no steps")
    x = np.array([s["step"] for s in steps])
    t = np.array([s["time_ns"] for s in steps]) / 1e6
    ideal = np.array([s["ideal_ns"] for s in steps]) / 1e6
    slow = np.array([np.nan if s["slowdown"] is None else s["slowdown"] for s in steps])
    fig = new_figure((10, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    top.bar(x, t, color="#9ecae1", label="step time")
    top.plot(x, ideal, color="#08519c", marker=".", label="ideal step (every op typical)")
    top.set_ylabel("ms")
    top.set_title("Step time and its ideal (op timeline)")
    for s in diag.stragglers_table.to_pylist():
        if s["persistent"] and s["since_step"] is not None:
            top.axvline(s["since_step"] - 0.5, color="#d62728", linestyle="--", linewidth=1)
            top.annotate(f"rank {s['rank']} slow from here", (s["since_step"] - 0.5,
                                                             float(np.nanmax(t))),
                         color="#d62728", fontsize="small", ha="left", va="top")
    top.legend(loc="lower right", fontsize="small")
    bottom.plot(x, slow, color="#d62728", marker="o", markersize=3)
    bottom.axhline(1.0, color="#888888", linewidth=0.8)
    bottom.set_ylabel("slowdown\n(step / ideal)")
    bottom.set_xlabel("step")
    from matplotlib.ticker import MaxNLocator
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _draw_heatmap(diag):
    heat = np.asarray(diag.heat, dtype=float)
    if heat.size == 0 or not np.isfinite(heat).any():
        return no_data("worker slowdown per step", "no compute ops with a typical time")
    if heat.shape[0] < 3:
        return no_data("worker slowdown per step", f"{heat.shape[0]} worker(s): too few "
                       "to compare with each other")
    names = list(diag.worker_names)
    n = heat.shape[0]
    block = int(np.ceil(n / ROWS))
    if block > 1:  # each row the slowest of its block
        pad = block * int(np.ceil(n / block)) - n
        padded = np.vstack([heat, np.full((pad, heat.shape[1]), np.nan)])
        with np.errstate(all="ignore"):
            heat = np.nanmax(padded.reshape(-1, block, heat.shape[1]), axis=1)
        names = [f"{names[i]} .. +{min(block, n - i) - 1}" for i in range(0, n, block)]
    rows = heat.shape[0]
    fig = new_figure((10, min(2.5 + 0.16 * rows, 16)), layout="constrained")
    ax = fig.subplots()
    with np.errstate(all="ignore"):
        far = float(np.nanmax(np.abs(heat - 1.0)))
    span = min(max(far, 0.05), 0.5)
    im = ax.imshow(heat, aspect="auto", cmap="RdBu_r", vmin=1 - span, vmax=1 + span,
                   interpolation="nearest")
    steps = list(diag.step_numbers)
    ticks = np.arange(0, len(steps), int(np.ceil(len(steps) / 20)))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    shown = np.linspace(0, rows - 1, min(rows, LABELLED)).round().astype(int)
    ax.set_yticks(shown, [names[i] for i in shown], fontsize="x-small")
    ax.set_xlabel("step")
    by = "" if block == 1 else f" (each row the slowest of {block} workers)"
    ax.set_title(f"Worker slowdown per step: compute / its peers'{by}")
    fig.colorbar(im, ax=ax, label="slowdown (1 = the median worker)")
    return fig
