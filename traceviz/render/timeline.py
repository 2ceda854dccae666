"""Timelines of the aggregation (Megatron-TraceViz's figures, readable at scale).

One row per rank. Each category's kernels are merged into their union and drawn as one
collection; categories that overlap are nested bars of different heights (earlier in
:data:`ORDER` = thinner and on top), so every category stays visible. Every interval is
drawn at least one line wide, so thin ones never vanish. Colors are fixed per category
across all figures (Megatron-TraceViz's palette, extended). Legends sit outside the data.

Alignment: ``global`` and ``synced`` share one time axis (ms from the earliest start;
``synced`` uses clock-corrected times); ``individual`` starts each row at its own first
kernel, and the axis says so.
"""
from __future__ import annotations

import numpy as np

from ..analysis.coverage import category_spans
from ..analysis.microbatches import RankCategories
from .bars import add_bars, rectangles
from .figures import new_figure, no_data, swatch

COLORS = {
    "optimizer_computation": "#095624", "optimizer_communication": "#4E9A5E",
    "dp_communication": "#76E5DF", "pp_communication": "#B28FCE",
    "fwd_computation": "#82AAE7", "fwd_communication": "#2E5AAC",
    "bwd_computation": "#F7A6BF", "bwd_communication": "#E0703A",
    "bwd_computation_recompute": "#5B27F5", "bwd_communication_recompute": "#275AF5",
    "memory": "#C9B458", "other": "#808080",
    # waiting for the last member of a call: pale, so the work stands out
    "pp_wait": "#E6DAF2", "comm_wait": "#D4D4D4",
}
ORDER = ("pp_wait", "comm_wait", "optimizer_computation", "optimizer_communication",
         "dp_communication",
         "pp_communication", "fwd_communication", "bwd_communication",
         "bwd_communication_recompute", "bwd_computation_recompute", "fwd_computation",
         "bwd_computation", "memory", "other")  # thin (top) to tall (behind)


def _heights(present: list[str]) -> dict[str, float]:
    """Bar height per category: linear from thin (first in ORDER) to tall."""
    cats = [c for c in ORDER if c in present]
    if len(cats) == 1:
        return {cats[0]: 0.7}
    return {c: 0.25 + 0.55 * i / (len(cats) - 1) for i, c in enumerate(cats)}


ROWS_INCHES = 11.0  # the most height all rank rows of a figure take together
MAX_LABELS = 48     # rank labels per panel at most (every k-th beyond)
PIXELS = 4000  # gaps shorter than window / PIXELS are closed: less than a pixel wide


def time_window(ranks: list[RankCategories]) -> tuple[int, int]:
    """(first start, last end) in ns over ``ranks``."""
    starts = [int(ra.ts.min()) for ra in ranks if ra.ts.size]
    ends = [int(ra.end.max()) for ra in ranks if ra.end.size]
    return (min(starts, default=0), max(ends, default=0))


def _draw(ax, ranks: list[RankCategories], spans: list[dict], present: list[str],
          alignment: str, window: tuple[int, int]) -> None:
    height = _heights(present)
    boxes: dict[str, list[np.ndarray]] = {cat: [] for cat in present}
    for row, (ra, rows) in enumerate(zip(ranks, spans)):
        y = len(spans) - 1 - row
        t0 = (int(ra.ts.min()) if ra.ts.size else 0) if alignment == "individual" \
            else window[0]
        for cat in present:
            if cat in rows:
                s, e = rows[cat]
                boxes[cat].append(rectangles((s - t0) / 1e6, (e - t0) / 1e6,
                                             y - height[cat] / 2, y + height[cat] / 2))
    for cat, parts in boxes.items():  # one collection per category, every rank's bars
        if parts:
            add_bars(ax, np.concatenate(parts), facecolors=COLORS[cat],
                     edgecolors=COLORS[cat], linewidth=0.4, zorder=100 - ORDER.index(cat))
    every = max(1, -(-len(ranks) // MAX_LABELS))  # beyond MAX_LABELS rows, every k-th
    labels = [f"rank {ra.rank}" for ra in reversed(ranks)]
    ticks = [i for i in range(len(spans)) if (len(spans) - 1 - i) % every == 0]
    ax.set_yticks(ticks, [labels[i] for i in ticks],
                  fontsize="small" if len(ranks) <= 32 else "x-small")
    ax.set_ylim(-0.6, len(spans) - 0.4)
    if alignment != "individual":
        ax.set_xlim(0, (window[1] - window[0]) / 1e6)
    else:
        ax.set_xlim(left=0)
    ax.grid(axis="x", linestyle="--", alpha=0.3)


XLABEL = {"individual": "ms since each rank's first kernel",
          "global": "ms (raw clocks, from the earliest kernel)",
          "synced": "ms (clock-synced, from the earliest kernel)"}


def timeline(panels: list[tuple[str, list[RankCategories]]], title: str,
             alignment: str = "synced", categories: tuple[str, ...] | None = None,
             window: tuple[int, int] | None = None):
    """One panel per (title, ranks), stacked, one row per rank (lowest on top), sharing
    the time axis ``window`` (ns; default: the span of all the data)."""
    window = window or time_window([ra for _, ranks in panels for ra in ranks])
    gap = (window[1] - window[0]) // PIXELS
    spans = [category_spans(ranks, categories, gap) for _, ranks in panels]
    present = sorted({c for rows in spans for r in rows for c in r}, key=ORDER.index)
    if not present:
        return no_data(title, "no GPU activity of these categories on these ranks")
    heights = [max(len(ranks), 1) for _, ranks in panels]
    # 0.45 in per rank row, thinner beyond ~24 rows so the figure stays <= ~14 in tall
    row_in = max(0.02, min(0.45, ROWS_INCHES / sum(heights)))
    fig_h = 0.9 + row_in * sum(heights) + 0.5 * len(panels) + 0.25 * ((len(present) + 3) // 4)
    fig = new_figure((13, fig_h), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=alignment != "individual",
                        height_ratios=heights)
    for ax, (name, ranks), rows in zip(axes[:, 0], panels, spans):
        _draw(ax, ranks, rows, present, alignment, window)
        if name:
            ax.set_title(name, fontsize="small", loc="left")
    axes[-1, 0].set_xlabel(XLABEL[alignment])
    fig.suptitle(title, fontsize="medium", fontweight="bold")
    handles = [swatch(COLORS[c]) for c in present]
    fig.legend(handles, present, loc="outside lower center", ncols=min(4, max(len(present), 1)),
               fontsize="small", frameon=False)
    return fig


def overlap_bars(rows: list[dict], rank: int):
    """Per micro-batch (x), stacked comp-only / overlap / comm-only (ms), wall clock as a
    line; Forward and Backward panels."""
    fig = new_figure((12, 8), layout="constrained")
    axes = fig.subplots(2, 1)
    for ax, phase in zip(axes, ("Forward", "Backward")):
        mine = sorted((r for r in rows if r["phase"] == phase),
                      key=lambda r: (r["iteration"], r["start_ns"]))
        x = np.arange(len(mine))
        bottom = np.zeros(len(mine))
        for key, color, label in (("comp_only_ns", "#82AAE7", "compute only"),
                                  ("overlap_ns", "#B28FCE", "compute overlapped with comm"),
                                  ("comm_only_ns", "#76E5DF", "comm only")):
            v = np.array([r[key] for r in mine], dtype=float) / 1e6
            ax.bar(x, v, bottom=bottom, color=color, label=label)
            bottom += v
        wall = np.array([r["wall_clock_ns"] for r in mine], dtype=float) / 1e6
        ax.plot(x, wall, "o-", color="#6A0DAD", markersize=3, label="wall clock")
        ax.vlines(x, bottom, wall, colors="grey", linestyles="dotted", label="idle")
        if not mine:
            ax.axis("off")
            ax.text(0, 0.5, f"no data: no {phase.lower()} step on rank {rank}",
                    transform=ax.transAxes, color="#555555")
            continue
        several = len({r["iteration"] for r in mine}) > 1
        ax.set_xticks(x, [(f"it{r['iteration']} " if several else "") + f"{r['microbatch']}"
                          + (f".{r['chunk']}" if r["chunk"] > 0 else "")
                          for r in mine], rotation=90, fontsize="x-small")
        ax.set_xlabel(("iteration, " if several else "") + "micro-batch"
                      + (" (.chunk)" if any(r["chunk"] > 0 for r in mine) else ""))
        ax.set_ylabel("ms")
        ax.set_title(f"Rank {rank}: {phase}", fontsize="medium")
    handles, labels = max((axes[0].get_legend_handles_labels(),
                           axes[1].get_legend_handles_labels()), key=lambda h: len(h[0]))
    fig.legend(handles, labels, loc="outside lower center", ncols=5, fontsize="small",
               frameon=False)
    fig.suptitle(f"How much communication does each micro-batch step hide behind compute? "
                 f"(rank {rank})")
    return fig
