"""Figure of ``traceviz critical-path``: the path over the ranks' timelines.

Two rows per rank, its CPU and its GPU (all ranks up to 32, else the ranks the path
visits); each path edge is a bar on the row of its end point from its start to its end,
coloured by what it is (operator / kernel span, launch delay, kernel-kernel delay,
sync, a join across ranks), and a jump to another rank is a thin vertical line. Time in
ms from the path's start."""
from __future__ import annotations

import textwrap

import numpy as np

from .figures import new_figure, no_data

KIND_COLORS = ("#4C72B0", "#BBBBBB", "#DD8452", "#C44E52", "#8172B3", "#55A868")
KIND_LABELS = ("operator / kernel", "dependency", "launch delay", "kernel-kernel delay",
               "sync", "join across ranks")
MAX_RANKS = 32


def draw(seg: dict, title: str):
    """The path (see the module doc); ``seg`` from the command (rank, from_rank, start,
    end, kind per edge; ranks)."""
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
    rank, from_rank, kind = map(np.asarray, (seg["rank"], seg["from_rank"], seg["kind"]))
    side = np.where(np.asarray(seg["gpu"]), "GPU", "CPU")
    height = min(0.3 * len(rows) + 1.8, 17)
    fig = new_figure((12, height), layout="constrained")
    ax = fig.subplots()
    y = np.array([row_of[(r, s)] for r, s in zip(rank.tolist(), side.tolist())])
    width = np.maximum(end - start, 1e-4)

    def bars(sel: np.ndarray, color: str, h: float, label: str | None) -> None:
        # one collection per row: thousands of edges draw in one call each
        for row in np.unique(y[sel]).tolist():
            at = sel & (y == row)
            ax.broken_barh(list(zip(start[at].tolist(), width[at].tolist())),
                           (row - h / 2, h), facecolors=color, label=label)
            label = None

    same = rank == from_rank
    for k, color in enumerate(KIND_COLORS):
        sel = (kind == k) & same
        if sel.any() and (end[sel] - start[sel]).sum() > 0:
            bars(sel, color, 0.6,
                 f"{KIND_LABELS[k]} ({(end[sel] - start[sel]).sum():.3g} ms)")
    jumps = np.flatnonzero(~same)
    if jumps.size:
        bars(~same, KIND_COLORS[5], 0.3, None)
        y0 = np.array([row_of[(r, "GPU")] for r in from_rank[jumps].tolist()])
        ax.vlines(end[jumps], np.minimum(y0, y[jumps]), np.maximum(y0, y[jumps]),
                  color=KIND_COLORS[5], linewidth=1,
                  label=f"joins across ranks ({jumps.size})")
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
