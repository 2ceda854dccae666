"""Figure of ``traceviz critical-path``: the path over the ranks' timelines.

One row per rank (all of them up to 64, else the ranks the path visits); each path edge
is a bar on its rank's row from its start to its end point, coloured by what it is
(operator / kernel span, launch delay, kernel-kernel delay, sync, a join across ranks),
and a jump to another rank is a thin vertical line. Time in ms from the path's start."""
from __future__ import annotations

import numpy as np

from .figures import new_figure, no_data

KIND_COLORS = ("#4C72B0", "#BBBBBB", "#DD8452", "#C44E52", "#8172B3", "#55A868")
KIND_LABELS = ("operator / kernel", "dependency", "launch delay", "kernel-kernel delay",
               "sync", "join across ranks")
MAX_ROWS = 64


def draw(seg: dict, title: str):
    """The path (see the module doc); ``seg`` from the command (rank, from_rank, start,
    end, kind per edge; ranks)."""
    title = "Which work bounds the iteration? The critical path\n" + title
    if len(seg["start"]) == 0:
        return no_data(title.split("\n")[0], "the window has no path (no events in it)")
    visited = sorted(set(np.asarray(seg["rank"]).tolist()) | set(
        np.asarray(seg["from_rank"]).tolist()))
    rows = seg["ranks"] if len(seg["ranks"]) <= MAX_ROWS else visited
    row_of = {r: i for i, r in enumerate(rows)}
    t0 = float(np.min(seg["start"]))
    start = (np.asarray(seg["start"]) - t0) / 1e6
    end = (np.asarray(seg["end"]) - t0) / 1e6
    rank, from_rank, kind = map(np.asarray, (seg["rank"], seg["from_rank"], seg["kind"]))
    height = min(0.3 * len(rows) + 1.8, 17)
    fig = new_figure((12, height), layout="constrained")
    ax = fig.subplots()
    y = np.array([row_of[r] for r in rank.tolist()])
    same = rank == from_rank
    for k, color in enumerate(KIND_COLORS):
        sel = (kind == k) & same
        if sel.any() and (end[sel] - start[sel]).sum() > 0:
            ax.barh(y[sel], np.maximum(end[sel] - start[sel], 1e-4), left=start[sel],
                    height=0.6, color=color, label=f"{KIND_LABELS[k]} "
                    f"({(end[sel] - start[sel]).sum():.3g} ms)")
    jumps = np.flatnonzero(~same)
    if jumps.size:
        ax.barh(y[jumps], np.maximum(end[jumps] - start[jumps], 1e-4), left=start[jumps],
                height=0.3, color=KIND_COLORS[5])
        y0 = np.array([row_of[r] for r in from_rank[jumps].tolist()])
        ax.vlines(end[jumps], np.minimum(y0, y[jumps]), np.maximum(y0, y[jumps]),
                  color=KIND_COLORS[5], linewidth=1,
                  label=f"joins across ranks ({jumps.size})")
    step = max(1, len(rows) // 40)
    ax.set_yticks(np.arange(0, len(rows), step), [f"rank {r}" for r in rows[::step]],
                  fontsize="x-small")
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("ms from the path's start (common clock)" if len(rows) > 1
                  else "ms from the path's start (the rank's own clock)")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize="small")
    if len(seg["ranks"]) > MAX_ROWS:
        ax.annotate(f"rows: the {len(rows)} ranks the path visits, of {len(seg['ranks'])}",
                    (0, -0.12), xycoords="axes fraction", fontsize="x-small")
    return fig
