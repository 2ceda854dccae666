"""The figure of ``traceviz memory``: allocated GPU memory over time, per rank with its
micro-batch steps shaded and the peak marked, and at job level one line per pipeline
stage (the stage's rank with the highest peak)."""
from __future__ import annotations

import numpy as np

from ..analysis.memory import GiB as GB
from ..analysis.memory import JobMemory, RankMemory
from .figures import new_figure, no_data, swatch

PHASE_COLORS = {"FWD": "#4C72B0", "BWD": "#DD8452"}


def _series(r: RankMemory) -> tuple[np.ndarray, np.ndarray, int]:
    """(ms from the rank's first event, allocated GiB, its first event ns)."""
    ts = r.timeline["ts_ns"].to_numpy()
    alloc = r.timeline["allocated_bytes"].to_numpy()
    t0 = int(ts[0]) if ts.size else 0
    return (ts - t0) / 1e6, alloc / GB, t0


def memory_figure(job: JobMemory):
    """One panel per rank up to four ranks (steps shaded, peak marked), else one panel
    with a line per pipeline stage."""
    title = "Allocated GPU memory over the traced iterations"
    ranks = [r for r in job.ranks if r.timeline.num_rows]
    if not ranks:
        return no_data(title, "no allocator event on a GPU")
    if len(ranks) > 4:
        return _stages(job, title)
    fig = new_figure((11, 3.2 * len(ranks)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(ranks), 1, squeeze=False)[:, 0])
    for ax, r in zip(axes, ranks):
        x, y, t0 = _series(r)
        for it, phase, mb, a, b in r.windows:
            if phase in PHASE_COLORS:
                ax.axvspan((a - t0) / 1e6, (b - t0) / 1e6, color=PHASE_COLORS[phase],
                           alpha=0.12, linewidth=0)
        ax.step(x, y, where="post", color="#333333", linewidth=1)
        s = r.summary
        if s["peak_bytes"] is not None:
            px = (s["peak_ts_ns"] - t0) / 1e6
            ax.plot([px], [s["peak_bytes"] / GB], "v", color="#C44E52")
            where = " ".join(str(v) for v in (s["peak_phase"], s["peak_microbatch"])
                             if v is not None)
            ax.annotate(f"peak {s['peak_bytes'] / GB:.2f} GiB ({where or 'n/a'})",
                        (px, s["peak_bytes"] / GB), textcoords="offset points",
                        xytext=(6, -12), fontsize="small", color="#C44E52")
        stage = f", stage {r.stage}" if r.stage is not None else ""
        ax.set_title(f"rank {r.rank}{stage}", fontsize="medium", loc="left")
        ax.set_ylabel("allocated (GiB)")
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel("ms from the rank's first allocator event (CPU time of the calls)")
    axes[0].legend([swatch(PHASE_COLORS["FWD"], alpha=0.3),
                    swatch(PHASE_COLORS["BWD"], alpha=0.3)],
                   ["forward micro-batch steps", "backward micro-batch steps"],
                   loc="lower right", fontsize="small")
    fig.suptitle(title)
    return fig


def _stages(job: JobMemory, title: str):
    """One line per pipeline stage: the rank of the stage with the highest peak."""
    fig = new_figure((11, 4.5), layout="constrained")
    ax = fig.subplots()
    by_rank = {r.rank: r for r in job.ranks}
    for s in job.stage_peaks():
        r = by_rank[s["rank"]]
        x, y, _ = _series(r)
        label = (f"stage {r.stage}" if r.stage is not None else "stage n/a") + \
            f" (rank {r.rank}, peak {s['peak_bytes'] / GB:.2f} GiB)"
        ax.step(x, y, where="post", linewidth=1, label=label)
    ax.set_xlabel("ms from each rank's first allocator event")
    ax.set_ylabel("allocated (GiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="lower right")
    ax.set_title(title + f" ({len(job.ranks)} ranks; per stage, its highest rank)")
    return fig
