"""Figure of ``traceviz critical-path``: the path over the ranks' timelines.

Two rows per rank, its CPU and its GPU (all ranks up to 32, else the ranks the path
visits); each path segment (an edge, or its wait and its own time apart) is a bar on
the row of its end point, coloured by its label in the command's summary (the job
model's category, HTA's bound_by) with the summary's time in the legend, and a jump to
another rank is a thin vertical line. Time in ms from the path's start."""
from __future__ import annotations

import textwrap

import numpy as np

from .bars import add_bars, rectangles
from .figures import new_figure, no_data

PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
           "#8C8C8C", "#CCB974", "#64B5CD", "#2F4B7C", "#A05195", "#F95D6A", "#FFA600",
           "#003F5C", "#BBBBBB")
JUMP_COLOR = "#222222"
MAX_RANKS = 32


def draw(seg: dict, title: str):
    """The path (see the module doc); ``seg`` from the command: per segment its rank,
    from_rank, gpu, start, end, label and whether it ends its edge (``ends_edge``), the
    legend text of each label (the summary's numbers, in the summary's order) and the
    job's ranks. Every colour drawn is in the legend."""
    title = "Which work bounds the iteration? The critical path\n" + title
    if len(seg["start"]) == 0:
        return no_data(title.split("\n")[0], "the window has no path (no events in it)")
    visited = sorted(set(np.asarray(seg["rank"]).tolist()) | set(
        np.asarray(seg["from_rank"]).tolist()))
    ranks = seg["ranks"] if len(seg["ranks"]) <= MAX_RANKS else visited
    rows = [(r, side) for r in ranks for side in ("CPU", "GPU")]
    row_of = {r: i for i, r in enumerate(rows)}
    t0 = float(np.min(seg["start"]))
    start = (np.asarray(seg["start"]) - t0) / 1e6
    end = (np.asarray(seg["end"]) - t0) / 1e6
    rank, from_rank = np.asarray(seg["rank"]), np.asarray(seg["from_rank"])
    label = np.asarray(seg["label"], dtype=object)
    side = np.where(np.asarray(seg["gpu"]), "GPU", "CPU")
    height = min(0.3 * len(rows) + 1.8, 17)
    fig = new_figure((12, height), layout="constrained")
    ax = fig.subplots()
    y = np.array([row_of[(r, s)] for r, s in zip(rank.tolist(), side.tolist())])
    drawn = end > start
    for k, (name, text) in enumerate(seg["legend"].items()):
        sel = drawn & (label == name)
        if not sel.any():
            continue
        # one collection per label: thousands of segments on every row in one
        add_bars(ax, rectangles(start[sel], end[sel], y[sel] - 0.3, y[sel] + 0.3),
                 facecolors=PALETTE[k % len(PALETTE)], label=text)
    jumps = np.flatnonzero((rank != from_rank) & np.asarray(seg["ends_edge"]))
    if jumps.size:
        y0 = np.array([row_of[(r, "GPU")] for r in from_rank[jumps].tolist()])
        ax.vlines(end[jumps], np.minimum(y0, y[jumps]), np.maximum(y0, y[jumps]),
                  color=JUMP_COLOR, linewidth=1,
                  label=f"jump to another rank ({jumps.size})")
    ax.set_xlim(0, max(float(end.max()), 1e-3) * 1.01)
    step = max(1, len(rows) // 40)
    ax.set_yticks(np.arange(0, len(rows), step),
                  [f"rank {r} {s}" for r, s in rows[::step]], fontsize="x-small")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    xlabel = ("ms from the path's start (common clock)" if len(ranks) > 1
              else "ms from the path's start (the rank's own clock)")
    if len(seg["ranks"]) > MAX_RANKS:
        xlabel += f"; rows: the {len(ranks)} ranks the path visits, of {len(seg['ranks'])}"
    ax.set_xlabel(xlabel)
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("\n".join(textwrap.fill(line, 130) for line in title.split("\n")),
                 fontsize="small")
    return fig
